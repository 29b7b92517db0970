//! Fuzz target: bytes as the CA's HTTP responses. The response reader takes them in two
//! pieces (split where the first byte says) and must never panic or exceed its limits; then
//! an order is driven to its end with every request answered from the same bytes (each
//! answer a slice of them, with the status the slice's first bytes give), which must end in
//! an issued certificate or a failure, never a panic or a loop; a renewal-information check
//! (RFC 9773) answered the same way must end.
#![no_main]

use bramble_acme::ari::{AriAction, RenewalInfoRun};
use bramble_acme::http::{MAX_BODY_LEN, Response, ResponseReader};
use bramble_acme::{Action, ChallengeKind, EcKey, OrderRun, OrderSettings};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = usize::from(*data.first().unwrap_or(&0)).min(data.len());
    let mut reader = ResponseReader::new(false);
    let first = reader.push(&data[..split]);
    let response = match first {
        Ok(Some(response)) => Some(response),
        Ok(None) => match reader.push(&data[split..]) {
            Ok(Some(response)) => Some(response),
            Ok(None) => reader.finish().ok(),
            Err(_) => None,
        },
        Err(_) => None,
    };
    if let Some(response) = &response {
        assert!(response.body.len() <= MAX_BODY_LEN);
    }

    // A renewal-information check (RFC 9773) answered from the same bytes: it ends.
    let chunks: Vec<&[u8]> = data.split(|&b| b == 0xff).collect();
    let mut check = RenewalInfoRun::new("https://ca.test/dir".into(), "aYhb.AIdl".into());
    let mut ended = false;
    for step in 0..8 {
        match check.poll() {
            AriAction::Send(_) => {
                let chunk = chunks[step % chunks.len()];
                check.receive(Ok(Response {
                    status: if chunk.first().is_some_and(|b| b % 5 == 0) { 404 } else { 200 },
                    retry_after: chunk.get(1).map(|&b| u64::from(b)),
                    body: chunk.to_vec(),
                    ..Response::default()
                }));
            }
            AriAction::Waiting => panic!("waiting with no request out"),
            AriAction::Done(_) => {
                ended = true;
                break;
            }
        }
    }
    assert!(ended, "the renewal-information check did not end");

    let key = EcKey::from_secret(&[7; 32]).unwrap();
    let mut run = OrderRun::new(
        OrderSettings {
            directory_url: "https://ca.test/dir".into(),
            email: None,
            names: vec!["bramble.test".into()],
            challenges: vec![ChallengeKind::Http01, ChallengeKind::TlsAlpn01],
            replaces: Some("aYhb.AIdl".into()),
        },
        key.clone(),
        None,
        key,
    );
    let chunks: Vec<&[u8]> = data.split(|&b| b == 0xff).collect();
    for step in 0..400 {
        match run.poll() {
            Action::Send(_) => {
                let chunk = chunks[step % chunks.len()];
                let status = match chunk.first() {
                    Some(b) if b % 5 == 0 => 400,
                    Some(b) if b % 7 == 0 => 201,
                    _ => 200,
                };
                run.receive(Ok(Response {
                    status,
                    location: Some(format!("https://ca.test/x/{step}")),
                    replay_nonce: Some(format!("n{step}")),
                    retry_after: chunk.get(1).map(|&b| u64::from(b)),
                    content_type: None,
                    body: chunk.to_vec(),
                }));
            }
            Action::Wait(seconds) => assert!((1..=60).contains(&seconds)),
            Action::Publish(_) | Action::AccountReady(_) => {}
            Action::Issued(_) | Action::Failed(..) => return,
        }
    }
    panic!("the order neither ended nor failed in 400 steps");
});
