//! A look at a client's first TLS record before rustls reads it: which key-exchange group the
//! server will pick, whether a retry or a resumption is asked for, and from that what the
//! handshake will cost the CPU ([`HandshakeCost`]).
//!
//! The appliance spends its handshake budget when the ClientHello is in, not at TCP accept,
//! and in instructions, not in handshakes: a ClientHello that offers only P-256 asks for
//! three times the work of one offering X25519 (measured on the target with `kernel/tls-probe`
//! under `-icount`, see doc/benchmarks.md), so counting handshakes let a P-256-only flood take
//! the whole CPU. The view below is read-only and checked; rustls still parses and judges the
//! record. A record this view cannot read is priced at the dearest handshake there is, so
//! no byte pattern makes a handshake cheaper than its real cost.
//!
//! The group is the one rustls 0.23 picks: the first of the client's `supported_groups` (in
//! the client's order) that the provider has ([`crate::provider`]: X25519 and P-256); with
//! TLS 1.3, when the client sent no key share for it, a HelloRetryRequest follows, and the
//! second ClientHello is not looked at, so such a hello is priced as P-256.

/// TLS record content type of a handshake (RFC 8446 §5.1).
const HANDSHAKE_RECORD: u8 = 22;
/// Handshake message type of a ClientHello (RFC 8446 §4).
const CLIENT_HELLO: u8 = 1;
/// Largest plaintext record (RFC 8446 §5.1: 2^14).
const MAX_PLAINTEXT: usize = 16_384;
/// Extension numbers (RFC 8446 §4.2, RFC 5077).
const SUPPORTED_GROUPS: u16 = 10;
const SESSION_TICKET: u16 = 35;
const PRE_SHARED_KEY: u16 = 41;
const SUPPORTED_VERSIONS: u16 = 43;
const KEY_SHARE: u16 = 51;
/// Named groups (RFC 8446 §4.2.7) and TLS 1.3's version number.
const X25519_ID: u16 = 0x001d;
const SECP256R1_ID: u16 = 0x0017;
const TLS13: u16 = 0x0304;

/// A key-exchange group the server can do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// X25519 (RFC 7748).
    X25519,
    /// secp256r1 ECDH.
    P256,
}

/// What a ClientHello asks of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HelloSummary {
    /// The group the server will use, or `None` when it has none in common (rustls refuses
    /// the hello before any key is made).
    pub group: Option<Group>,
    /// TLS 1.3 without a key share for that group: a HelloRetryRequest follows.
    pub retry: bool,
    /// TLS 1.3 is offered.
    pub tls13: bool,
    /// A ticket is offered (TLS 1.3 `pre_shared_key`, or a non-empty TLS 1.2 `session_ticket`).
    pub resumption: bool,
}

/// What the first bytes of a connection are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peek {
    /// Not enough bytes yet for the record holding the ClientHello.
    Incomplete,
    /// Not a TLS handshake record: not a TLS client.
    NotTls,
    /// A whole ClientHello, read.
    Hello(HelloSummary),
    /// A handshake record this view cannot read whole (a hello over several records, or
    /// malformed): rustls decides, and the hello is priced at its dearest.
    Unreadable,
}

/// Reads the start of a connection's byte stream.
pub fn peek(bytes: &[u8]) -> Peek {
    let Some(&content_type) = bytes.first() else {
        return Peek::Incomplete;
    };
    if content_type != HANDSHAKE_RECORD {
        return Peek::NotTls;
    }
    // A record's legacy version's first byte is 3 (RFC 8446 §5.1: 0x0301 or 0x0303).
    if bytes.get(1).is_some_and(|&major| major != 3) {
        return Peek::NotTls;
    }
    let Some(header) = bytes.get(..5) else {
        return Peek::Incomplete;
    };
    let length = usize::from(u16::from_be_bytes([header[3], header[4]]));
    if length == 0 || length > MAX_PLAINTEXT {
        return Peek::NotTls;
    }
    let Some(fragment) = bytes.get(5..5 + length) else {
        return Peek::Incomplete;
    };
    match read_hello(fragment) {
        Some(summary) => Peek::Hello(summary),
        None => Peek::Unreadable,
    }
}

/// A checked cursor over untrusted bytes.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, tail) = self.rest.split_at_checked(n)?;
        self.rest = tail;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    /// A vector with a `width`-byte length prefix.
    fn vector(&mut self, width: usize) -> Option<Reader<'a>> {
        let length = match width {
            1 => usize::from(self.u8()?),
            _ => usize::from(self.u16()?),
        };
        Some(Reader {
            rest: self.take(length)?,
        })
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
}

/// Reads a handshake record's fragment holding a whole ClientHello.
fn read_hello(fragment: &[u8]) -> Option<HelloSummary> {
    let mut record = Reader { rest: fragment };
    if record.u8()? != CLIENT_HELLO {
        return None;
    }
    let length = record.take(3)?;
    let length =
        (usize::from(length[0]) << 16) | (usize::from(length[1]) << 8) | usize::from(length[2]);
    let mut hello = Reader {
        rest: record.take(length)?,
    };
    hello.take(2 + 32)?; // legacy_version, random
    hello.vector(1)?; // legacy_session_id
    hello.vector(2)?; // cipher_suites
    hello.vector(1)?; // legacy_compression_methods
    let mut groups: Option<Reader<'_>> = None;
    let mut shares: Option<Reader<'_>> = None;
    let mut tls13 = false;
    let mut resumption = false;
    if !hello.is_empty() {
        let mut extensions = hello.vector(2)?;
        while !extensions.is_empty() {
            let kind = extensions.u16()?;
            let mut body = extensions.vector(2)?;
            match kind {
                SUPPORTED_GROUPS => groups = Some(body.vector(2)?),
                KEY_SHARE => shares = Some(body.vector(2)?),
                SUPPORTED_VERSIONS => {
                    let mut versions = body.vector(1)?;
                    while !versions.is_empty() {
                        tls13 |= versions.u16()? == TLS13;
                    }
                }
                PRE_SHARED_KEY => resumption = true,
                SESSION_TICKET => resumption |= !body.is_empty(),
                _ => {}
            }
        }
    }
    let mut group = None;
    if let Some(mut groups) = groups {
        while !groups.is_empty() {
            match groups.u16()? {
                X25519_ID => group = Some(Group::X25519),
                SECP256R1_ID => group = Some(Group::P256),
                _ => continue,
            }
            break;
        }
    }
    let mut retry = false;
    if let (true, Some(chosen)) = (tls13, group) {
        let wanted = match chosen {
            Group::X25519 => X25519_ID,
            Group::P256 => SECP256R1_ID,
        };
        let mut found = false;
        if let Some(mut shares) = shares {
            while !shares.is_empty() {
                found |= shares.u16()? == wanted;
                shares.vector(2)?;
            }
        }
        retry = !found;
    }
    Some(HelloSummary {
        group,
        retry,
        tls13,
        resumption,
    })
}

/// The certificate's key, which signs each full handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertificateKey {
    /// ECDSA P-256.
    EcdsaP256,
    /// Ed25519.
    Ed25519,
}

/// What one handshake costs, in thousands of ARM1176 instructions, from the tls-probe's
/// figures at -icount (doc/benchmarks.md: a full handshake with X25519 and an ECDSA P-256
/// certificate 6.62 M, with P-256 key exchange 19.5 M, with an Ed25519 certificate 3.63 M;
/// ECDSA P-256 sign 3.64 M; X25519 key 0.60 M and shared secret 1.86 M; resumed 3.04 M).
/// The parts: what every handshake does (transcript, key schedule, records), the key
/// exchange, and the signature only a full handshake makes.
pub mod cost {
    /// Hashing, key schedule and record work of any handshake: 6.62 - 3.64 - 2.46 M.
    pub const BASE: u32 = 520;
    /// An X25519 key and shared secret.
    pub const X25519: u32 = 2_460;
    /// A P-256 key and shared secret: 19.5 - 3.64 - 0.52 M.
    pub const P256: u32 = 15_340;
    /// An ECDSA P-256 signature.
    pub const ECDSA_P256_SIGN: u32 = 3_640;
    /// An Ed25519 signature: 3.63 - 0.52 - 2.46 M.
    pub const ED25519_SIGN: u32 = 650;
}

/// The price of one ClientHello, split so that a resumption can be given back its
/// signature once rustls has resumed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandshakeCost {
    /// Thousands of instructions charged when the hello is read.
    pub charged: u32,
    /// The part a resumed handshake does not spend (the signature).
    pub signature: u32,
}

impl HandshakeCost {
    /// The price of what `peek` saw (`None`: a hello it could not read), with `key` signing.
    pub fn of(hello: Option<HelloSummary>, key: CertificateKey) -> Self {
        let signature = match key {
            CertificateKey::EcdsaP256 => cost::ECDSA_P256_SIGN,
            CertificateKey::Ed25519 => cost::ED25519_SIGN,
        };
        let exchange = match hello {
            // rustls refuses it before any key is made.
            Some(HelloSummary { group: None, .. }) => {
                return Self {
                    charged: cost::BASE,
                    signature: 0,
                };
            }
            Some(HelloSummary {
                group: Some(Group::X25519),
                retry: false,
                ..
            }) => cost::X25519,
            // P-256, a retry (the second hello is not looked at), or unreadable.
            _ => cost::P256,
        };
        Self {
            charged: cost::BASE + exchange + signature,
            signature,
        }
    }

    /// The dearest handshake with `key`.
    pub fn dearest(key: CertificateKey) -> Self {
        Self::of(None, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    fn extension(kind: u16, body: &[u8]) -> Vec<u8> {
        let mut out = kind.to_be_bytes().to_vec();
        out.extend_from_slice(&(body.len() as u16).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    fn list16(items: &[u16]) -> Vec<u8> {
        let mut out = ((items.len() * 2) as u16).to_be_bytes().to_vec();
        for item in items {
            out.extend_from_slice(&item.to_be_bytes());
        }
        out
    }

    fn shares(groups: &[u16]) -> Vec<u8> {
        let mut entries = Vec::new();
        for group in groups {
            entries.extend_from_slice(&group.to_be_bytes());
            entries.extend_from_slice(&32u16.to_be_bytes());
            entries.extend_from_slice(&[7; 32]);
        }
        let mut out = (entries.len() as u16).to_be_bytes().to_vec();
        out.extend(entries);
        out
    }

    /// A TLS 1.3 ClientHello record with these extensions.
    fn record(extensions: &[Vec<u8>]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[0xab; 32]);
        body.push(0);
        body.extend_from_slice(&list16(&[0x1301, 0x1303]));
        body.extend_from_slice(&[1, 0]);
        let all: Vec<u8> = extensions.concat();
        body.extend_from_slice(&(all.len() as u16).to_be_bytes());
        body.extend(all);
        let mut handshake = vec![CLIENT_HELLO, 0];
        handshake.extend_from_slice(&(body.len() as u16).to_be_bytes());
        handshake.extend(body);
        let mut out = vec![HANDSHAKE_RECORD, 3, 1];
        out.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
        out.extend(handshake);
        out
    }

    fn tls13(groups: &[u16], key_shares: &[u16]) -> Vec<u8> {
        record(&[
            extension(SUPPORTED_VERSIONS, &[2, 3, 4]),
            extension(SUPPORTED_GROUPS, &list16(groups)),
            extension(KEY_SHARE, &shares(key_shares)),
        ])
    }

    fn summary(bytes: &[u8]) -> HelloSummary {
        match peek(bytes) {
            Peek::Hello(summary) => summary,
            other => panic!("not read: {other:?}"),
        }
    }

    #[test]
    fn the_group_is_the_clients_first_one_the_server_has() {
        let hello = summary(&tls13(&[0x11ec, X25519_ID, SECP256R1_ID], &[X25519_ID]));
        assert_eq!(hello.group, Some(Group::X25519));
        assert!(hello.tls13 && !hello.retry && !hello.resumption);
        let hello = summary(&tls13(
            &[SECP256R1_ID, X25519_ID],
            &[SECP256R1_ID, X25519_ID],
        ));
        assert_eq!(hello.group, Some(Group::P256), "the client's order rules");
        let hello = summary(&tls13(&[0x0018], &[0x0018]));
        assert_eq!(hello.group, None);
        assert_eq!(
            HandshakeCost::of(Some(hello), CertificateKey::EcdsaP256).charged,
            cost::BASE
        );
    }

    #[test]
    fn prices_follow_the_group_the_retry_and_the_key() {
        let x25519 = summary(&tls13(&[X25519_ID], &[X25519_ID]));
        let p256 = summary(&tls13(&[SECP256R1_ID], &[SECP256R1_ID]));
        let retry = summary(&tls13(&[X25519_ID, SECP256R1_ID], &[]));
        assert!(retry.retry);
        let ecdsa = CertificateKey::EcdsaP256;
        assert_eq!(HandshakeCost::of(Some(x25519), ecdsa).charged, 6_620);
        assert_eq!(HandshakeCost::of(Some(p256), ecdsa).charged, 19_500);
        assert_eq!(HandshakeCost::of(Some(retry), ecdsa).charged, 19_500);
        assert_eq!(
            HandshakeCost::of(Some(x25519), CertificateKey::Ed25519).charged,
            3_630
        );
        assert_eq!(HandshakeCost::dearest(ecdsa).charged, 19_500);
        assert_eq!(HandshakeCost::of(Some(x25519), ecdsa).signature, 3_640);
    }

    #[test]
    fn tickets_and_tls12_are_seen() {
        let resumed = record(&[
            extension(SUPPORTED_VERSIONS, &[2, 3, 4]),
            extension(SUPPORTED_GROUPS, &list16(&[X25519_ID])),
            extension(KEY_SHARE, &shares(&[X25519_ID])),
            extension(PRE_SHARED_KEY, &[0, 0]),
        ]);
        assert!(summary(&resumed).resumption);
        let tls12 = record(&[
            extension(SUPPORTED_GROUPS, &list16(&[SECP256R1_ID])),
            extension(SESSION_TICKET, &[1, 2, 3]),
        ]);
        let hello = summary(&tls12);
        assert!(!hello.tls13 && !hello.retry && hello.resumption);
        assert_eq!(hello.group, Some(Group::P256));
    }

    #[test]
    fn partial_foreign_and_broken_records_are_told_apart() {
        let whole = tls13(&[X25519_ID], &[X25519_ID]);
        for cut in 0..whole.len() {
            assert_eq!(peek(&whole[..cut]), Peek::Incomplete, "cut at {cut}");
        }
        assert_eq!(peek(b"GET / HTTP/1.1\r\n"), Peek::NotTls);
        assert_eq!(peek(&[22, 9]), Peek::NotTls);
        assert_eq!(peek(&[22, 3, 1, 0x40, 0x01]), Peek::NotTls, "over 2^14");
        // The handshake claims more than the record holds (a hello over two records).
        let mut split = whole.clone();
        split[7] = 0xff;
        assert_eq!(peek(&split), Peek::Unreadable);
        // A key share list that runs past its extension.
        let mut broken = whole.clone();
        let last = broken.len() - 34;
        broken[last] = 0xff;
        assert_eq!(peek(&broken), Peek::Unreadable);
        // Trailing bytes after the record do not matter.
        let mut more = whole.clone();
        more.extend_from_slice(&[23, 3, 3, 0, 1, 0]);
        assert!(matches!(peek(&more), Peek::Hello(_)));
    }
}
