//! RFC 7541 Appendix C examples, the table's bounds, and the HPACK bomb.

use super::*;
use std::string::String;
use std::vec::Vec;

#[derive(Default)]
struct Fields(Vec<(String, String)>);

impl Sink for Fields {
    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.0.push((
            String::from_utf8_lossy(name).into_owned(),
            String::from_utf8_lossy(value).into_owned(),
        ));
    }
}

fn hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(core::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

fn decode(decoder: &mut Decoder, block: &str) -> Vec<(String, String)> {
    let mut fields = Fields::default();
    let decoded = decoder.decode(&hex(block), 1 << 20, &mut fields).unwrap();
    assert!(decoded.complete);
    fields.0
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|&(n, v)| (n.into(), v.into())).collect()
}

#[test]
fn c1_integers() {
    let mut out = [0u8; 8];
    let mut at = 0;
    encode_int(&mut out, &mut at, 5, 0, 10).unwrap();
    encode_int(&mut out, &mut at, 5, 0, 1337).unwrap();
    encode_int(&mut out, &mut at, 8, 0, 42).unwrap();
    assert_eq!(&out[..at], &[0x0a, 0x1f, 0x9a, 0x0a, 0x2a]);
    let mut at = 0;
    assert_eq!(decode_int(&out, &mut at, 5), Ok(10));
    assert_eq!(decode_int(&out, &mut at, 5), Ok(1337));
    assert_eq!(decode_int(&out, &mut at, 8), Ok(42));
    // Truncated, and absurdly long continuations.
    assert_eq!(decode_int(&[0x1f, 0x9a], &mut 0, 5), Err(CompressionError));
    assert_eq!(
        decode_int(&[0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], &mut 0, 5),
        Err(CompressionError)
    );
}

#[test]
fn c2_single_fields() {
    let mut decoder = Decoder::new();
    let fields = decode(
        &mut decoder,
        "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
    );
    assert_eq!(fields, pairs(&[("custom-key", "custom-header")]));
    assert_eq!(decoder.table().size(), 55);
    let mut decoder = Decoder::new();
    let fields = decode(&mut decoder, "040c 2f73 616d 706c 652f 7061 7468");
    assert_eq!(fields, pairs(&[(":path", "/sample/path")]));
    assert!(decoder.table().is_empty());
    let fields = decode(&mut decoder, "1008 7061 7373 776f 7264 0673 6563 7265 74");
    assert_eq!(fields, pairs(&[("password", "secret")]));
    assert!(decoder.table().is_empty());
    assert_eq!(decode(&mut decoder, "82"), pairs(&[(":method", "GET")]));
}

fn requests(blocks: [&str; 3]) {
    let mut decoder = Decoder::new();
    let first = [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
    ];
    assert_eq!(decode(&mut decoder, blocks[0]), pairs(&first));
    assert_eq!(decoder.table().size(), 57);
    let mut second = first.to_vec();
    second.push(("cache-control", "no-cache"));
    assert_eq!(decode(&mut decoder, blocks[1]), pairs(&second));
    assert_eq!(decoder.table().size(), 110);
    let third = [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ];
    assert_eq!(decode(&mut decoder, blocks[2]), pairs(&third));
    assert_eq!(decoder.table().size(), 164);
    assert_eq!(decoder.table().len(), 3);
}

#[test]
fn c3_requests_without_huffman() {
    requests([
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ]);
}

#[test]
fn c4_requests_with_huffman() {
    requests([
        "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        "8286 84be 5886 a8eb 1064 9cbf",
        "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ]);
}

#[test]
fn c5_responses_evict_from_a_256_byte_table() {
    let mut decoder = Decoder::new();
    // The example's table is 256 bytes: a size update first.
    let first = decode(
        &mut decoder,
        "3fe1 01 4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 \
         3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 \
         6c65 2e63 6f6d",
    );
    let date = "Mon, 21 Oct 2013 20:13:21 GMT";
    let location = "https://www.example.com";
    assert_eq!(
        first,
        pairs(&[
            (":status", "302"),
            ("cache-control", "private"),
            ("date", date),
            ("location", location),
        ])
    );
    assert_eq!(decoder.table().size(), 222);
    let second = decode(&mut decoder, "4803 3330 37c1 c0bf");
    assert_eq!(
        second,
        pairs(&[
            (":status", "307"),
            ("cache-control", "private"),
            ("date", date),
            ("location", location),
        ])
    );
    assert_eq!(decoder.table().size(), 222);
    let third = decode(
        &mut decoder,
        "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 \
         5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 \
         5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31",
    );
    assert_eq!(
        third,
        pairs(&[
            (":status", "200"),
            ("cache-control", "private"),
            ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
            ("location", location),
            ("content-encoding", "gzip"),
            (
                "set-cookie",
                "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"
            ),
        ])
    );
    assert_eq!(decoder.table().size(), 215);
    assert_eq!(decoder.table().len(), 3);
}

#[test]
fn a_table_larger_than_the_settings_or_a_late_size_update_is_refused() {
    let mut decoder = Decoder::new();
    let mut sink = Fields::default();
    // 4097 with a 5-bit prefix: 0x3f, 4097 - 31 = 4066 = 0xe2 0x1f.
    assert_eq!(
        decoder.decode(&[0x3f, 0xe2, 0x1f], 1 << 20, &mut sink),
        Err(CompressionError)
    );
    assert_eq!(
        decoder.decode(&[0x82, 0x20], 1 << 20, &mut sink),
        Err(CompressionError)
    );
    // Index 0, an index past the dynamic table, a truncated literal.
    for block in [&[0x80][..], &[0xbe], &[0x04, 0x05, b'a']] {
        assert_eq!(
            decoder.decode(block, 1 << 20, &mut sink),
            Err(CompressionError)
        );
    }
}

#[test]
fn the_ring_wraps_and_keeps_every_entry_readable() {
    let mut decoder = Decoder::new();
    let mut sink = Fields::default();
    // Insert 300 distinct fields of varied sizes; after each, the newest reads back.
    for i in 0..300usize {
        let name = format!("x-{i}");
        let value = "v".repeat(i * 7 % 200);
        let mut block = vec![0x40, name.len() as u8];
        block.extend_from_slice(name.as_bytes());
        let mut at = block.len();
        block.resize(at + 8 + value.len(), 0);
        encode_int(&mut block, &mut at, 7, 0, value.len()).unwrap();
        block[at..at + value.len()].copy_from_slice(value.as_bytes());
        block.truncate(at + value.len());
        block.push(0xbe); // index 62: the newest
        sink.0.clear();
        decoder.decode(&block, 1 << 20, &mut sink).unwrap();
        assert_eq!(sink.0[1], (name, value));
        assert!(decoder.table().size() <= TABLE_CAPACITY);
    }
}

/// The HPACK bomb: one 4000-byte entry, then a block naming it 10,000 times (10 KB of
/// input, 40 MB of header list). Without the list limit every reference would be copied
/// out and handed to the sink.
#[test]
fn an_hpack_bomb_stops_at_the_list_limit() {
    let mut decoder = Decoder::new();
    let mut sink = Fields::default();
    let mut block = vec![0x40, 0x01, b'x', 0x7f];
    let mut at = 3;
    block.resize(16, 0);
    encode_int(&mut block, &mut at, 7, 0, 4000).unwrap();
    block.truncate(at);
    block.extend(std::iter::repeat_n(b'a', 4000));
    decoder.decode(&block, 8192, &mut sink).unwrap();
    let bomb = vec![0xbe; 10_000];
    let mut sink = Fields::default();
    let decoded = decoder.decode(&bomb, 8192, &mut sink).unwrap();
    assert!(!decoded.complete);
    assert_eq!(
        sink.0.len(),
        2,
        "two references fit 8 KiB, the rest are not copied"
    );
    assert_eq!(decoded.list_size, 10_000 * (4001 + 32));
    // The table is intact: a later polite block still decodes.
    let mut sink = Fields::default();
    assert!(decoder.decode(&[0x82], 8192, &mut sink).unwrap().complete);
}

#[test]
fn oversized_literals_are_counted_not_copied_and_empty_the_table() {
    let mut decoder = Decoder::new();
    let mut sink = Fields::default();
    decode(
        &mut decoder,
        "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
    );
    let mut block = vec![0x40, 0x01, b'y', 0x7f];
    let mut at = 3;
    block.resize(16, 0);
    encode_int(&mut block, &mut at, 7, 0, 5000).unwrap();
    block.truncate(at);
    block.extend(std::iter::repeat_n(b'b', 5000));
    let decoded = decoder.decode(&block, 1 << 20, &mut sink).unwrap();
    assert!(!decoded.complete);
    assert!(sink.0.is_empty());
    assert!(
        decoder.table().is_empty(),
        "an entry larger than the table empties it"
    );
}

#[test]
fn the_encoder_round_trips_through_the_decoder() {
    let fields = [
        (":status", "200"),
        (":status", "206"),
        ("content-type", "text/html; charset=utf-8"),
        ("etag", "\"abc\""),
        ("x-content-type-options", "nosniff"),
        ("content-length", "12345"),
    ];
    let mut out = [0u8; 256];
    let mut at = 0;
    for (name, value) in fields {
        Encoder::field(&mut out, &mut at, name.as_bytes(), value.as_bytes()).unwrap();
    }
    assert_eq!(out[0], 0x88, ":status 200 is static index 8");
    let mut decoder = Decoder::new();
    let mut sink = Fields::default();
    decoder.decode(&out[..at], 1 << 20, &mut sink).unwrap();
    assert_eq!(sink.0, pairs(&fields));
    assert!(decoder.table().is_empty(), "responses leave no table state");
    let mut small = [0u8; 4];
    let mut at = 0;
    assert_eq!(
        Encoder::field(&mut small, &mut at, b"x-long-name", b"v"),
        None
    );
}

/// A table parked and restored (an idle HTTP/2 connection's suspension) decodes the same
/// references afterwards, its ring wrapped or not, and the parked form holds only the
/// entries: 2 bytes, then 4 and the field for each.
#[test]
fn a_parked_table_decodes_the_same_references_after_its_restore() {
    let mut decoder = Decoder::new();
    // Enough insertions to wrap the byte ring and evict from the old end.
    for i in 0..200u32 {
        let value = std::format!("value-{i:04}-{}", "x".repeat((i % 37) as usize));
        let mut block = std::vec![0x40, 7];
        block.extend_from_slice(b"x-field");
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
        let mut fields = Fields::default();
        decoder.decode(&block, 1 << 20, &mut fields).unwrap();
    }
    let table = decoder.table();
    let mut parked = Vec::with_capacity(table.parked_len());
    table.park_into(&mut parked);
    assert_eq!(parked.len(), table.parked_len());
    assert_eq!(parked.capacity(), table.parked_len(), "no reallocation");
    assert_eq!(
        parked.len(),
        2 + table.len() * 4 + table.size() - table.len() * ENTRY_OVERHEAD
    );
    let mut restored = Decoder::new();
    assert_eq!(restored.table_mut().restore(&parked), Some(parked.len()));
    assert_eq!(restored.table().len(), table.len());
    assert_eq!(restored.table().size(), table.size());
    assert!(table.len() > 1);
    // Every entry by its index (one byte up to 126, the 7-bit prefix's last).
    for index in 62..(62 + table.len()).min(127) {
        let reference = [0x80 | index as u8];
        let mut before = Fields::default();
        let mut after = Fields::default();
        decoder.decode(&reference, 1 << 20, &mut before).unwrap();
        restored.decode(&reference, 1 << 20, &mut after).unwrap();
        assert_eq!(before.0, after.0);
    }
    // Truncated bytes do not read as a table.
    let mut broken = Decoder::new();
    assert_eq!(broken.table_mut().restore(&parked[..1]), None);
    assert_eq!(
        broken.table_mut().restore(&parked[..parked.len() - 1]),
        None
    );
}
