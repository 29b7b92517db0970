//! HPACK (RFC 7541): the request-side decoder with a bounded dynamic table, and a small
//! response-side encoder.
//!
//! # Decoder
//!
//! The dynamic table is a ring of [`TABLE_CAPACITY`] bytes (names and values back to back)
//! and a ring of at most [`MAX_ENTRIES`] entry records: an insertion evicts from the old end
//! without moving any byte, so a block full of insertions costs time in proportion to its
//! length, never to the table's. The client may not make the table larger than the server's
//! SETTINGS_HEADER_TABLE_SIZE (4096, its default); a size update beyond it is a
//! COMPRESSION_ERROR.
//!
//! A decoded field is handed to a [`Sink`] whole: a literal is Huffman-decoded, or an entry
//! of the table copied, into the decoder's scratch (a field larger than the scratch can only
//! make the list too large). The header list size (RFC 9113 §6.5.2: name, value and 32 per
//! field) is added up as fields decode; once it passes the caller's limit the fields are still
//! decoded, so the table stays in step with the client's encoder, but no longer copied or
//! handed out: a small block that names one big table entry thousands of times (an "HPACK
//! bomb") costs a few instructions per reference and no memory.
//!
//! # Encoder
//!
//! Responses are encoded without touching any table: a name (or name and value) in the
//! static table by index, everything else as a literal without indexing, raw or Huffman-coded
//! whichever is shorter. The client's decoder keeps no state for them, so the
//! server never needs the client's table size.

pub mod huffman;

/// The dynamic table's size limit this decoder accepts (SETTINGS_HEADER_TABLE_SIZE, the
/// protocol default).
pub const TABLE_CAPACITY: usize = 4096;
/// The most entries the table can hold: each costs at least 32 of its size.
pub const MAX_ENTRIES: usize = TABLE_CAPACITY / 32;
/// The largest single field (name and value) the decoder copies out; a larger one makes the
/// header list too large.
pub const SCRATCH_LEN: usize = 4096;

/// The static table (RFC 7541 Appendix A), index 1 first.
pub const STATIC_TABLE: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// Per-entry overhead in the table's size (RFC 7541 §4.1), also used for the header list
/// size (RFC 9113 §6.5.2).
pub const ENTRY_OVERHEAD: usize = 32;

/// A decoding error: the block cannot be decoded, so neither can any later one (the
/// connection ends with COMPRESSION_ERROR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompressionError;

/// Where decoded fields go.
pub trait Sink {
    /// One field, in order. Names are as the client sent them (HTTP/2 requires lower case;
    /// the caller checks).
    fn field(&mut self, name: &[u8], value: &[u8]);
}

/// Reads an HPACK integer with an `prefix`-bit prefix at `*at` (RFC 7541 §5.1); values
/// beyond 2^28 are refused (no field or size here comes near).
pub fn decode_int(block: &[u8], at: &mut usize, prefix: u8) -> Result<usize, CompressionError> {
    let first = *block.get(*at).ok_or(CompressionError)?;
    *at += 1;
    let max = (1usize << prefix) - 1;
    let mut value = usize::from(first) & max;
    if value < max {
        return Ok(value);
    }
    let mut shift = 0u32;
    loop {
        let byte = *block.get(*at).ok_or(CompressionError)?;
        *at += 1;
        if shift > 21 {
            return Err(CompressionError);
        }
        value = value
            .checked_add(usize::from(byte & 0x7f) << shift)
            .ok_or(CompressionError)?;
        shift += 7;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
}

/// Writes an HPACK integer with a `prefix`-bit prefix, the first byte's high bits `high`.
pub fn encode_int(
    out: &mut [u8],
    at: &mut usize,
    prefix: u8,
    high: u8,
    value: usize,
) -> Option<()> {
    let max = (1usize << prefix) - 1;
    if value < max {
        *out.get_mut(*at)? = high | value as u8;
        *at += 1;
        return Some(());
    }
    *out.get_mut(*at)? = high | max as u8;
    *at += 1;
    let mut rest = value - max;
    while rest >= 0x80 {
        *out.get_mut(*at)? = (rest as u8 & 0x7f) | 0x80;
        *at += 1;
        rest >>= 7;
    }
    *out.get_mut(*at)? = rest as u8;
    *at += 1;
    Some(())
}

#[derive(Clone, Copy, Default)]
struct Entry {
    /// Where the name starts in the byte ring.
    start: u16,
    name_len: u16,
    value_len: u16,
}

impl Entry {
    fn len(self) -> usize {
        usize::from(self.name_len) + usize::from(self.value_len)
    }
}

/// The dynamic table: a byte ring and an entry ring, newest entry at index 0 (HPACK index 62).
pub struct DynamicTable {
    bytes: [u8; TABLE_CAPACITY],
    entries: [Entry; MAX_ENTRIES],
    /// Ring index of the oldest entry.
    oldest: usize,
    count: usize,
    /// Ring offset of the oldest byte.
    byte_start: usize,
    byte_len: usize,
    /// Size as HPACK counts it (bytes plus 32 per entry).
    size: usize,
    /// The size limit the client set (at most [`TABLE_CAPACITY`]).
    max_size: usize,
}

impl DynamicTable {
    /// An empty table with the default limit.
    pub const fn new() -> Self {
        Self {
            bytes: [0; TABLE_CAPACITY],
            entries: [Entry {
                start: 0,
                name_len: 0,
                value_len: 0,
            }; MAX_ENTRIES],
            oldest: 0,
            count: 0,
            byte_start: 0,
            byte_len: 0,
            size: 0,
            max_size: TABLE_CAPACITY,
        }
    }

    /// The size HPACK counts.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn evict_oldest(&mut self) {
        if self.count == 0 {
            return;
        }
        let entry = self.entries[self.oldest];
        self.oldest = (self.oldest + 1) % MAX_ENTRIES;
        self.count -= 1;
        self.byte_start = (self.byte_start + entry.len()) % TABLE_CAPACITY;
        self.byte_len -= entry.len();
        self.size -= entry.len() + ENTRY_OVERHEAD;
        if self.count == 0 {
            self.byte_start = 0;
        }
    }

    fn set_max_size(&mut self, max: usize) {
        self.max_size = max;
        while self.size > self.max_size {
            self.evict_oldest();
        }
    }

    /// The entry `index` places from the newest (0: newest).
    fn get(&self, index: usize) -> Option<Entry> {
        if index >= self.count {
            return None;
        }
        let ring = (self.oldest + self.count - 1 - index) % MAX_ENTRIES;
        self.entries.get(ring).copied()
    }

    /// Copies `len` ring bytes from `start` into `out`.
    fn copy_out(&self, start: usize, len: usize, out: &mut [u8]) {
        for (i, slot) in out.iter_mut().take(len).enumerate() {
            *slot = self.bytes[(start + i) % TABLE_CAPACITY];
        }
    }

    /// Adds an entry whose name is `scratch[..name_len]` and value the next `value_len`
    /// bytes, evicting as needed; one larger than the limit empties the table (RFC 7541
    /// §4.4). `fits` false: the field was not copied (too large for the scratch), and only
    /// its size matters.
    fn insert(&mut self, scratch: &[u8], name_len: usize, value_len: usize, fits: bool) {
        let len = name_len + value_len;
        let size = len + ENTRY_OVERHEAD;
        while self.count > 0 && self.size + size > self.max_size {
            self.evict_oldest();
        }
        if size > self.max_size || !fits {
            // Larger than the table (the scratch is as large as the table): nothing stays.
            while self.count > 0 {
                self.evict_oldest();
            }
            return;
        }
        let start = (self.byte_start + self.byte_len) % TABLE_CAPACITY;
        for (i, &byte) in scratch.iter().take(len).enumerate() {
            self.bytes[(start + i) % TABLE_CAPACITY] = byte;
        }
        let ring = (self.oldest + self.count) % MAX_ENTRIES;
        self.entries[ring] = Entry {
            start: start as u16,
            name_len: name_len as u16,
            value_len: value_len as u16,
        };
        self.count += 1;
        self.byte_len += len;
        self.size += size;
    }
}

impl DynamicTable {
    /// Bytes [`DynamicTable::park_into`] writes: the size limit, then each entry's two
    /// lengths and its bytes (what the client's encoder may still refer to, and nothing of
    /// the fixed rings).
    pub fn parked_len(&self) -> usize {
        2 + 4 * self.count + self.byte_len
    }

    /// Appends the table to `out` ([`DynamicTable::parked_len`] bytes; `out` has the room
    /// reserved, so nothing is allocated): the size limit (u16), then each entry, oldest
    /// first, as its name's and value's lengths (u16 each) and its bytes.
    pub fn park_into(&self, out: &mut alloc::vec::Vec<u8>) {
        // Both fit a u16: the limit is at most TABLE_CAPACITY, an entry at most the limit.
        out.extend_from_slice(&(self.max_size as u16).to_be_bytes());
        for index in (0..self.count).rev() {
            let Some(entry) = self.get(index) else {
                continue;
            };
            out.extend_from_slice(&entry.name_len.to_be_bytes());
            out.extend_from_slice(&entry.value_len.to_be_bytes());
            let start = usize::from(entry.start);
            for i in 0..entry.len() {
                out.push(self.bytes[(start + i) % TABLE_CAPACITY]);
            }
        }
    }

    /// Refills an empty table from what [`DynamicTable::park_into`] wrote at the start of
    /// `bytes`; returns the bytes read, or `None` if they do not read as a table.
    pub fn restore(&mut self, bytes: &[u8]) -> Option<usize> {
        let read_u16 = |at: usize| -> Option<usize> {
            let pair = bytes.get(at..at.checked_add(2)?)?;
            Some(usize::from(u16::from_be_bytes([pair[0], pair[1]])))
        };
        while self.count > 0 {
            self.evict_oldest();
        }
        let max_size = read_u16(0)?;
        if max_size > TABLE_CAPACITY {
            return None;
        }
        self.max_size = max_size;
        let mut at = 2usize;
        let mut size = 0usize;
        // The entries written fit the limit together: stop at anything that does not.
        while let (Some(name_len), Some(value_len)) = (read_u16(at), read_u16(at + 2)) {
            let len = name_len + value_len;
            size = size.checked_add(len + ENTRY_OVERHEAD)?;
            if size > max_size {
                break;
            }
            let fields = bytes.get(at + 4..at + 4 + len)?;
            self.insert(fields, name_len, value_len, true);
            at += 4 + len;
        }
        Some(at)
    }
}

impl Default for DynamicTable {
    fn default() -> Self {
        Self::new()
    }
}

/// What a header block decoded to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The header list size (RFC 9113 §6.5.2) of the whole block, counted even past the
    /// limit.
    pub list_size: usize,
    /// The list fit the limit: every field was handed to the sink. Otherwise fields stopped
    /// at the one that passed it.
    pub complete: bool,
}

/// The request decoder: a dynamic table and a scratch for one field.
pub struct Decoder {
    table: DynamicTable,
    scratch: [u8; SCRATCH_LEN],
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

/// A string literal: where it lies in the block and whether it is Huffman-coded.
struct Literal {
    start: usize,
    len: usize,
    huffman: bool,
}

fn read_literal(block: &[u8], at: &mut usize) -> Result<Literal, CompressionError> {
    let huffman = block.get(*at).ok_or(CompressionError)? & 0x80 != 0;
    let len = decode_int(block, at, 7)?;
    let start = *at;
    let end = start.checked_add(len).ok_or(CompressionError)?;
    if end > block.len() {
        return Err(CompressionError);
    }
    *at = end;
    Ok(Literal {
        start,
        len,
        huffman,
    })
}

impl Decoder {
    /// A decoder with an empty table.
    pub const fn new() -> Self {
        Self {
            table: DynamicTable::new(),
            scratch: [0; SCRATCH_LEN],
        }
    }

    /// The dynamic table (for tests and figures).
    pub fn table(&self) -> &DynamicTable {
        &self.table
    }

    /// The dynamic table, to refill it after a suspension
    /// ([`DynamicTable::restore`]).
    pub fn table_mut(&mut self) -> &mut DynamicTable {
        &mut self.table
    }

    /// Decodes a literal into the scratch at `at`; returns its decoded length, or `None` if it
    /// does not fit (its length then is unknown for a Huffman string, counted as the
    /// scratch's length plus one, enough to pass any limit).
    fn literal_into(
        &mut self,
        block: &[u8],
        literal: &Literal,
        at: usize,
    ) -> Result<Option<usize>, CompressionError> {
        let source = block
            .get(literal.start..literal.start + literal.len)
            .ok_or(CompressionError)?;
        let Some(out) = self.scratch.get_mut(at..) else {
            return Ok(None);
        };
        if literal.huffman {
            match huffman::decode(source, out) {
                Ok(n) => Ok(Some(n)),
                Err(huffman::HuffmanError::TooLong) => {
                    // Still check the string is valid Huffman, without keeping it.
                    check_huffman(source)?;
                    Ok(None)
                }
                Err(huffman::HuffmanError::Invalid) => Err(CompressionError),
            }
        } else if let Some(dest) = out.get_mut(..source.len()) {
            dest.copy_from_slice(source);
            Ok(Some(source.len()))
        } else {
            Ok(None)
        }
    }

    /// Decodes one whole header block, handing fields to `sink` while the list stays within
    /// `list_limit` bytes.
    pub fn decode(
        &mut self,
        block: &[u8],
        list_limit: usize,
        sink: &mut impl Sink,
    ) -> Result<Decoded, CompressionError> {
        let mut at = 0usize;
        let mut list_size = 0usize;
        let mut complete = true;
        let mut fields_seen = false;
        while at < block.len() {
            let first = block[at];
            if first & 0x80 != 0 {
                // Indexed field (§6.1).
                let index = decode_int(block, &mut at, 7)?;
                fields_seen = true;
                let (name_len, value_len) = self.index_lengths(index)?;
                list_size = list_size.saturating_add(name_len + value_len + ENTRY_OVERHEAD);
                if complete && list_size <= list_limit {
                    self.emit_indexed(index, sink)?;
                } else {
                    complete = false;
                }
            } else if first & 0xe0 == 0x20 {
                // Dynamic table size update (§6.3): only before the first field.
                let size = decode_int(block, &mut at, 5)?;
                if fields_seen || size > TABLE_CAPACITY {
                    return Err(CompressionError);
                }
                self.table.set_max_size(size);
            } else {
                // Literal (§6.2): with incremental indexing (01), without (0000) or never
                // indexed (0001).
                let (prefix, indexing) = if first & 0x40 != 0 {
                    (6, true)
                } else if first & 0xf0 == 0 || first & 0xf0 == 0x10 {
                    (4, false)
                } else {
                    return Err(CompressionError);
                };
                fields_seen = true;
                let name_index = decode_int(block, &mut at, prefix)?;
                // The name into the scratch.
                let name_len = if name_index == 0 {
                    let literal = read_literal(block, &mut at)?;
                    self.literal_into(block, &literal, 0)?
                } else {
                    Some(self.name_into_scratch(name_index)?)
                };
                let value = read_literal(block, &mut at)?;
                let value_len = match name_len {
                    Some(n) => self.literal_into(block, &value, n)?,
                    None => {
                        if value.huffman {
                            check_huffman(
                                block
                                    .get(value.start..value.start + value.len)
                                    .unwrap_or_default(),
                            )?;
                        }
                        None
                    }
                };
                let fits = name_len.is_some() && value_len.is_some();
                let size = match (name_len, value_len) {
                    (Some(n), Some(v)) => n + v,
                    _ => SCRATCH_LEN + 1,
                };
                list_size = list_size.saturating_add(size + ENTRY_OVERHEAD);
                let (n, v) = (name_len.unwrap_or(0), value_len.unwrap_or(0));
                if fits && complete && list_size <= list_limit {
                    sink.field(&self.scratch[..n], &self.scratch[n..n + v]);
                } else {
                    complete = false;
                }
                if indexing {
                    self.table.insert(&self.scratch, n, v, fits);
                }
            }
        }
        Ok(Decoded {
            list_size,
            complete,
        })
    }

    /// Name and value lengths of the field at `index` (static or dynamic).
    fn index_lengths(&self, index: usize) -> Result<(usize, usize), CompressionError> {
        match index {
            0 => Err(CompressionError),
            1..=61 => {
                let (name, value) = STATIC_TABLE[index - 1];
                Ok((name.len(), value.len()))
            }
            _ => {
                let entry = self.table.get(index - 62).ok_or(CompressionError)?;
                Ok((usize::from(entry.name_len), usize::from(entry.value_len)))
            }
        }
    }

    fn emit_indexed(&mut self, index: usize, sink: &mut impl Sink) -> Result<(), CompressionError> {
        if let Some(&(name, value)) = index.checked_sub(1).and_then(|i| STATIC_TABLE.get(i)) {
            sink.field(name.as_bytes(), value.as_bytes());
            return Ok(());
        }
        let entry = self.table.get(index - 62).ok_or(CompressionError)?;
        let len = entry.len();
        self.table
            .copy_out(usize::from(entry.start), len, &mut self.scratch[..len]);
        let n = usize::from(entry.name_len);
        sink.field(&self.scratch[..n], &self.scratch[n..len]);
        Ok(())
    }

    /// Copies the name of the field at `index` to the start of the scratch.
    fn name_into_scratch(&mut self, index: usize) -> Result<usize, CompressionError> {
        if let Some(&(name, _)) = index.checked_sub(1).and_then(|i| STATIC_TABLE.get(i)) {
            self.scratch[..name.len()].copy_from_slice(name.as_bytes());
            return Ok(name.len());
        }
        let entry = self
            .table
            .get(index.checked_sub(62).ok_or(CompressionError)?)
            .ok_or(CompressionError)?;
        let n = usize::from(entry.name_len);
        self.table
            .copy_out(usize::from(entry.start), n, &mut self.scratch[..n]);
        Ok(n)
    }
}

/// Checks a Huffman string too long for the scratch, keeping none of it.
fn check_huffman(source: &[u8]) -> Result<(), CompressionError> {
    huffman::check(source).map_err(|_| CompressionError)
}

/// Writes response fields: static-table indexes where a name (or name and value) is there,
/// literals without indexing otherwise.
pub struct Encoder;

impl Encoder {
    /// Appends `name: value` to `out` at `*at`. `None`: `out` is full.
    pub fn field(out: &mut [u8], at: &mut usize, name: &[u8], value: &[u8]) -> Option<()> {
        let mut name_index = 0usize;
        for (i, &(n, v)) in STATIC_TABLE.iter().enumerate() {
            if n.as_bytes() == name {
                if v.as_bytes() == value {
                    return encode_int(out, at, 7, 0x80, i + 1);
                }
                if name_index == 0 {
                    name_index = i + 1;
                }
            }
        }
        // Literal without indexing (0000), name indexed or literal.
        encode_int(out, at, 4, 0x00, name_index)?;
        if name_index == 0 {
            Self::string(out, at, name)?;
        }
        Self::string(out, at, value)
    }

    fn string(out: &mut [u8], at: &mut usize, value: &[u8]) -> Option<()> {
        let coded = huffman::encoded_len(value);
        if coded < value.len() {
            encode_int(out, at, 7, 0x80, coded)?;
            let n = huffman::encode(value, out.get_mut(*at..)?)?;
            *at += n;
        } else {
            encode_int(out, at, 7, 0x00, value.len())?;
            out.get_mut(*at..*at + value.len())?.copy_from_slice(value);
            *at += value.len();
        }
        Some(())
    }
}

#[cfg(test)]
mod tests;
