//! Nothing panics: thousands of pseudo-random and mutated inputs through the request path
//! and the site-image reader, the same code the cargo-fuzz targets run.

mod support;

use bramble_http::exercise::{exercise_image, reseal_image, run_script};
use bramble_http::{Server, ServerConfig, SiteSource};

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const SEEDS: &[&[u8]] = &[
    b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /big.bin HTTP/1.1\r\nHost: a\r\nRange: bytes=0-10\r\nIf-Range: \"big\"\r\n\r\n",
    b"HEAD /dir HTTP/1.0\r\nConnection: keep-alive\r\nAccept-Encoding: gzip;q=0.3, br\r\n\r\n",
    b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nbodyGET /a%20b.txt HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /index.html HTTP/1.1\r\nHost: a\r\nIf-None-Match: \"idx\", W/\"idx-br\"\r\nIf-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n",
];

fn mutate(rng: &mut Rng, input: &mut Vec<u8>) {
    for _ in 0..=rng.below(8) {
        match rng.below(5) {
            0 if !input.is_empty() => {
                let i = rng.below(input.len());
                input[i] = rng.next() as u8;
            }
            1 => {
                let i = rng.below(input.len() + 1);
                input.insert(i, b"\r\n:%/. \0\"-,;=*"[rng.below(14)]);
            }
            2 if !input.is_empty() => {
                let i = rng.below(input.len());
                input.remove(i);
            }
            3 => {
                let seed = SEEDS[rng.below(SEEDS.len())];
                input.extend_from_slice(seed);
            }
            _ => input.truncate(rng.below(input.len() + 1)),
        }
    }
}

/// Wraps request bytes in a script: receive in random chunks, transmit in random windows,
/// sometimes let time pass.
fn script_for(rng: &mut Rng, request: &[u8]) -> Vec<u8> {
    let mut script = Vec::new();
    let mut rest = request;
    while !rest.is_empty() {
        let n = (1 + rng.below(200)).min(rest.len());
        script.extend_from_slice(&[0, n as u8]);
        script.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        if rng.below(3) == 0 {
            script.extend_from_slice(&[1, rng.next() as u8]);
        }
        if rng.below(20) == 0 {
            script.extend_from_slice(&[2, rng.next() as u8 % 8]);
        }
    }
    script
}

#[test]
fn random_and_mutated_requests_never_panic() {
    let image = support::site_image(true);
    let mut server = support::server(&image);
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    for round in 0..3000 {
        let mut input = SEEDS[round % SEEDS.len()].to_vec();
        mutate(&mut rng, &mut input);
        let script = script_for(&mut rng, &input);
        run_script(&mut server, &script);
        // Raw random scripts too, which exercise the operation mix directly.
        let raw: Vec<u8> = (0..rng.below(600)).map(|_| rng.next() as u8).collect();
        run_script(&mut server, &raw);
    }
    assert!(server.counters().requests > 1000);
    assert_eq!(server.counters().open_connections, 0);
}

#[test]
fn unavailable_site_survives_random_input() {
    let mut server = Server::new(
        SiteSource::Unavailable("no SITE.BIN"),
        ServerConfig::default(),
    );
    let mut rng = Rng(77);
    for _ in 0..500 {
        let raw: Vec<u8> = (0..rng.below(400)).map(|_| rng.next() as u8).collect();
        run_script(&mut server, &raw);
    }
}

#[test]
fn corrupted_site_images_are_rejected_or_served_without_panic() {
    let good = support::small_site_image();
    let mut rng = Rng(0xdead_beef);
    assert!(exercise_image(&good));
    let (mut accepted, mut rejected) = (0, 0);
    for _ in 0..3000 {
        let mut bytes = good.clone();
        for _ in 0..=rng.below(4) {
            match rng.below(3) {
                0 if !bytes.is_empty() => {
                    let i = rng.below(bytes.len());
                    bytes[i] = rng.next() as u8;
                }
                1 => bytes.truncate(rng.below(bytes.len() + 1)),
                _ if !bytes.is_empty() => {
                    // Header and table bytes are where offsets live.
                    let i = rng.below(bytes.len().min(1024));
                    bytes[i] ^= 1 << rng.below(8);
                }
                _ => {}
            }
        }
        exercise_image(&bytes);
        // Most mutations break the checksum; resealed, they reach the table checks.
        reseal_image(&mut bytes);
        if exercise_image(&bytes) {
            accepted += 1;
        } else {
            rejected += 1;
        }
    }
    // Both outcomes must be reached, or the loop is not testing the reader.
    assert!(
        accepted > 100 && rejected > 100,
        "{accepted} accepted, {rejected} rejected"
    );
}
