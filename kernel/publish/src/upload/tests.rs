//! The writer behind the HTTP engine: real upload requests through a `Connection` to a
//! card in RAM.

extern crate std;

use super::*;
use crate::manifest::Action;
use crate::test_card::{self, boot, card_with, signed, site};
use bramble_hal::block::BLOCK_SIZE;
use bramble_http::{Connection, Server, ServerConfig, SiteSource};
use core::cell::RefCell;
use ed25519_dalek::{Signer, SigningKey};
use std::boxed::Box;
use std::format;
use std::rc::Rc;
use std::string::String;
use std::vec;
use std::vec::Vec;

const PEER: Option<IpAddr> = Some(IpAddr::V4(core::net::Ipv4Addr::new(192, 0, 2, 7)));

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn put_head(manifest: &[u8], signature: &[u8], from: usize, total: usize) -> Vec<u8> {
    let range = if from > 0 {
        format!("Content-Range: bytes {from}-{}/{total}\r\n", total - 1)
    } else {
        String::new()
    };
    format!(
        "PUT /.well-known/bramble/site HTTP/1.1\r\nHost: garden\r\nBramble-Manifest: {}\r\n\
         Bramble-Signature: {}\r\nContent-Length: {}\r\n{range}\r\n",
        hex(manifest),
        hex(signature),
        total - from
    )
    .into_bytes()
}

/// Status and body of the one response in `bytes`.
fn answer_of(bytes: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(bytes).into_owned();
    let status = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").unwrap().1.into();
    (status, body)
}

struct Rig {
    server: Server<'static>,
    now: Instant,
}

impl Rig {
    fn new(service: &'static RefCell<PublishService<'static>>) -> Rig {
        let mut server = Server::new(SiteSource::Unavailable("none"), ServerConfig::default());
        server.set_upload(service);
        Rig {
            server,
            now: Instant::from_micros(1_000_000),
        }
    }

    fn connection(&mut self) -> Connection {
        let mut connection = Connection::new();
        connection.open_secure(&mut self.server, self.now);
        connection.set_peer(PEER.unwrap());
        connection
    }

    /// Sends `bytes` in pieces of `piece` and returns what came back.
    fn send(&mut self, connection: &mut Connection, bytes: &[u8], piece: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in bytes.chunks(piece.max(1)) {
            let mut at = 0;
            while at < chunk.len() {
                at += connection.receive(&mut self.server, &chunk[at..], self.now);
                let mut buffer = vec![0u8; 4096];
                let n = connection.transmit(&mut self.server, &mut buffer, self.now);
                out.extend_from_slice(&buffer[..n]);
            }
        }
        loop {
            let mut buffer = vec![0u8; 4096];
            let n = connection.transmit(&mut self.server, &mut buffer, self.now);
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buffer[..n]);
        }
        out
    }

    fn upload(&mut self, manifest: &[u8], signature: &[u8], image: &[u8]) -> (u16, String) {
        let mut request = put_head(manifest, signature, 0, image.len());
        request.extend_from_slice(image);
        let mut connection = self.connection();
        let out = self.send(&mut connection, &request, 1400);
        connection.close(&mut self.server);
        answer_of(&out)
    }
}

/// The RAM card, shared between the service and the test's reads of it.
struct Shared(Rc<RefCell<test_card::Card>>);

impl BlockDevice for Shared {
    fn block_count(&self) -> u64 {
        self.0.borrow().block_count()
    }

    fn read_blocks(&mut self, first: u64, buffer: &mut [u8]) -> Result<(), BlockError> {
        self.0.borrow_mut().read_blocks(first, buffer)
    }
}

impl BlockWrite for Shared {
    fn write_blocks(&mut self, first: u64, data: &[u8]) -> Result<(), BlockError> {
        self.0.borrow_mut().write_blocks(first, data)
    }
}

fn service(
    old: &[u8],
) -> (
    &'static RefCell<PublishService<'static>>,
    Rc<RefCell<test_card::Card>>,
) {
    let (card, publisher) = card_with(old);
    let card = Rc::new(RefCell::new(card));
    let shared: &'static mut Shared = Box::leak(Box::new(Shared(card.clone())));
    let scratch: &'static mut [u8] = vec![0u8; 8 * BLOCK_SIZE].leak();
    let service = PublishService::new(publisher, shared, scratch, "garden");
    (Box::leak(Box::new(RefCell::new(service))), card)
}

#[test]
fn an_upload_is_written_verified_and_made_live() {
    let old = site(3000, 1);
    let new = site(70_000, 2);
    let (service, card) = service(&old);
    let slots = *service.borrow().slots();
    let mut rig = Rig::new(service);
    let (manifest, signature) = signed(Action::Publish, 5, &new, "garden");
    let (status, body) = rig.upload(&manifest, &signature, &new);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        format!(
            "{{\"published\":5,\"length\":70000,\"slot\":\"B\",\"blocks\":{}}}",
            70_000usize.div_ceil(BLOCK_SIZE) + 1
        )
    );
    assert_eq!(boot(&card.borrow(), &slots), new);
    let record = service.borrow_mut().take_published().unwrap();
    assert_eq!((record.live, record.accepted), (1, 5));
    // The same again: an old version now.
    let (status, body) = rig.upload(&manifest, &signature, &new);
    assert_eq!(status, 409, "{body}");
    assert!(body.starts_with("{\"error\":\"old-version\""), "{body}");
    // A signed rollback to the old site: a PUT without a body, answered at its head.
    let (manifest, signature) = signed(Action::Rollback, 6, &old, "garden");
    let (status, body) = rig.upload(&manifest, &signature, &[]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        "{\"rolled_back\":6,\"slot\":\"A\",\"live_version\":0,\"length\":3000}"
    );
    assert_eq!(boot(&card.borrow(), &slots), old);
    assert_eq!(service.borrow_mut().take_published().unwrap().live, 0);
    // Replayed: refused.
    let (status, body) = rig.upload(&manifest, &signature, &[]);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("old-version"), "{body}");
}

#[test]
fn refusals_say_why_and_leave_the_live_site() {
    let old = site(3000, 1);
    let new = site(20_000, 2);
    let (service, card) = service(&old);
    let slots = *service.borrow().slots();
    let mut rig = Rig::new(service);
    let other = SigningKey::from_bytes(&[9; 32]);
    let (manifest, _) = signed(Action::Publish, 5, &new, "garden");
    let forged = other.sign(&manifest).to_bytes();
    let (wrong_host, wrong_host_signature) = signed(Action::Publish, 5, &new, "orchard");
    let (rollback, rollback_signature) = signed(Action::Rollback, 5, &old, "garden");
    let (big, big_signature) = signed(Action::Publish, 5, &vec![0; 2048 * 512 + 1], "garden");
    let mut corrupt = new.clone();
    corrupt[10_000] ^= 1;
    let (good, good_signature) = signed(Action::Publish, 5, &new, "garden");
    for (manifest, signature, image, status, code) in [
        (&manifest[..], &forged[..], &new[..], 403, "bad-signature"),
        (&wrong_host, &wrong_host_signature, &new, 421, "wrong-host"),
        (
            &rollback,
            &rollback_signature,
            &[][..],
            409,
            "nothing-to-roll-back",
        ),
        (&big, &big_signature, &new, 413, "too-large"),
        (&good, &good_signature, &corrupt, 422, "corrupt"),
    ] {
        let (got, body) = rig.upload(manifest, signature, image);
        assert_eq!(got, status, "{body}");
        assert!(body.contains(&format!("\"error\":\"{code}\"")), "{body}");
        assert_eq!(boot(&card.borrow(), &slots), old);
    }
    assert!(service.borrow_mut().take_published().is_none());
    // Held while the old site retires: a good manifest waits.
    service.borrow_mut().hold(true);
    let (status, body) = rig.upload(&good, &good_signature, &new);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("retiring"));
    service.borrow_mut().hold(false);
    let (status, body) = rig.upload(&good, &good_signature, &new);
    assert_eq!(status, 200, "{body}");
    assert_eq!(boot(&card.borrow(), &slots), new);
    // The rate limit: ten attempts a minute from one address, counted before the check.
    let attempts = service.borrow().counters().attempts;
    assert_eq!(attempts, 7);
    for _ in attempts..u64::from(ATTEMPTS_PER_MINUTE) {
        assert_eq!(rig.upload(&good, &good_signature, &new).0, 409);
    }
    let (status, body) = rig.upload(&good, &good_signature, &new);
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("rate-limited"));
    rig.now = rig.now.add_micros(60_000_000);
    assert_eq!(rig.upload(&good, &good_signature, &new).0, 409);
}

#[test]
fn a_cut_upload_resumes_and_another_waits_its_turn() {
    let old = site(3000, 1);
    let new = site(50_000, 2);
    let (service, card) = service(&old);
    let slots = *service.borrow().slots();
    let mut rig = Rig::new(service);
    let (manifest, signature) = signed(Action::Publish, 5, &new, "garden");
    let mut request = put_head(&manifest, &signature, 0, new.len());
    let head_len = request.len();
    request.extend_from_slice(&new);

    // Cut after 20,000 and a bit of body: whole blocks on the card, the tail in RAM.
    let mut connection = rig.connection();
    assert!(
        rig.send(&mut connection, &request[..head_len + 20_123], 999)
            .is_empty()
    );
    // While it is attached, even the same manifest is busy.
    let (status, body) = rig.upload(&manifest, &signature, &new);
    assert_eq!(status, 409, "{body}");
    connection.close(&mut rig.server);

    // The state names the upload and its bytes.
    let mut connection = rig.connection();
    let out = rig.send(
        &mut connection,
        b"GET /.well-known/bramble/site HTTP/1.1\r\nHost: garden\r\n\r\n",
        100,
    );
    let (status, body) = answer_of(&out);
    assert_eq!(status, 200);
    assert!(
        body.starts_with("{\"live_version\":0,\"live_slot\":\"A\",\"accepted\":0,"),
        "{body}"
    );
    assert!(
        body.contains("\"upload\":{\"version\":5,\"length\":50000,\"received\":20123,"),
        "{body}"
    );
    // A wrong offset is refused with the right one.
    let mut wrong = put_head(&manifest, &signature, 20_000, new.len());
    wrong.extend_from_slice(&new[20_000..]);
    let (status, body) = answer_of(&rig.send(&mut connection, &wrong, 1400));
    assert_eq!(status, 416, "{body}");
    assert!(body.contains("20123"), "{body}");
    // The resume.
    let mut resume = put_head(&manifest, &signature, 20_123, new.len());
    resume.extend_from_slice(&new[20_123..]);
    let (status, body) = answer_of(&rig.send(&mut connection, &resume, 1400));
    assert_eq!(status, 200, "{body}");
    assert_eq!(boot(&card.borrow(), &slots), new);
    assert_eq!(service.borrow().counters().resumed, 1);
}

#[test]
fn a_detached_upload_gives_way_to_another_and_to_the_pull_after_the_window() {
    let old = site(3000, 1);
    let new = site(30_000, 2);
    let (service, card) = service(&old);
    let slots = *service.borrow().slots();
    let mut rig = Rig::new(service);
    let (manifest, signature) = signed(Action::Publish, 5, &new, "garden");
    let mut request = put_head(&manifest, &signature, 0, new.len());
    let head_len = request.len();
    request.extend_from_slice(&new);
    let other = site(4000, 3);
    let (other_manifest, other_signature) = signed(Action::Publish, 6, &other, "garden");

    // Attached: another is busy.
    let mut connection = rig.connection();
    rig.send(&mut connection, &request[..head_len + 5000], 1000);
    let (status, body) = rig.upload(&other_manifest, &other_signature, &other);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("busy"));
    connection.close(&mut rig.server);
    // The pull waits for the resume window.
    assert_eq!(
        service
            .borrow_mut()
            .pull_begin(&other_manifest, &other_signature, rig.now),
        Err(PublishError::Busy)
    );
    let later = rig.now.add_micros(RESUME_MICROS);
    assert_eq!(
        service
            .borrow_mut()
            .pull_begin(&other_manifest, &other_signature, later),
        Ok(0)
    );
    assert_eq!(service.borrow().counters().abandoned, 1);
    service.borrow_mut().pull_abandon();

    // Detached: another upload takes its place at once.
    let mut connection = rig.connection();
    rig.send(&mut connection, &request[..head_len + 5000], 1000);
    connection.close(&mut rig.server);
    let (status, body) = rig.upload(&other_manifest, &other_signature, &other);
    assert_eq!(status, 200, "{body}");
    assert_eq!(boot(&card.borrow(), &slots), other);
}

#[test]
fn a_signed_manifest_with_no_body_nudges_a_board_that_pulls() {
    let old = site(3000, 1);
    let new = site(20_000, 2);
    let (service, card) = service(&old);
    let slots = *service.borrow().slots();
    let mut rig = Rig::new(service);
    let (manifest, signature) = signed(Action::Publish, 5, &new, "garden");
    let other = SigningKey::from_bytes(&[9; 32]);
    let forged = other.sign(&manifest).to_bytes();

    // A board that does not pull: an empty body is not an upload, and says so.
    let (status, body) = rig.upload(&manifest, &signature, &[]);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("\"error\":\"no-pull\""), "{body}");
    assert!(!service.borrow_mut().take_nudge());

    service.borrow_mut().set_pulls(true);
    // Another key's nudge: refused, nothing to do.
    let (status, body) = rig.upload(&manifest, &forged, &[]);
    assert_eq!(status, 403, "{body}");
    assert!(!service.borrow().nudged());
    // The owner's: 202, and the pull takes it once.
    let (status, body) = rig.upload(&manifest, &signature, &[]);
    assert_eq!(status, 202, "{body}");
    assert!(body.contains("\"nudged\":5"), "{body}");
    assert!(service.borrow().nudged());
    assert!(service.borrow_mut().take_nudge());
    assert!(!service.borrow_mut().take_nudge());
    assert_eq!(service.borrow().counters().nudged, 1);
    // Nothing was written: the live site is the old one.
    assert_eq!(boot(&card.borrow(), &slots), old);

    // Once version 5 is accepted (here by an upload), its nudge is an old version.
    assert_eq!(rig.upload(&manifest, &signature, &new).0, 200);
    let (status, body) = rig.upload(&manifest, &signature, &[]);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("old-version"), "{body}");
    assert!(!service.borrow_mut().take_nudge());
    // Nudges count against the per-source limit like any upload head.
    for _ in 0..ATTEMPTS_PER_MINUTE {
        rig.upload(&manifest, &signature, &[]);
    }
    assert_eq!(rig.upload(&manifest, &signature, &[]).0, 429);
}
