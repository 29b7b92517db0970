//! The order state machine against a scripted CA: every request's JWS is checked (signature,
//! nonce, URL, kid or jwk), the flow follows RFC 8555 §7 to the chain, and the faults (bad
//! nonce, failed challenge, CA errors with Retry-After) end as they should. The CSR and the
//! TLS-ALPN-01 certificate are checked with openssl when it is installed.

use bramble_acme::base64::url_decode;
use bramble_acme::http::{Method, Response};
use bramble_acme::json::{self, Value};
use bramble_acme::{AcmeError, Action, ChallengeKind, EcKey, OrderRun, OrderSettings};
use p256::ecdsa::signature::Verifier;

fn key(n: u8) -> EcKey {
    EcKey::from_secret(&[n; 32]).unwrap()
}

fn settings() -> OrderSettings {
    OrderSettings {
        directory_url: "https://ca.test/dir".into(),
        email: Some("owner@example.org".into()),
        names: vec!["bramble.test".into(), "www.bramble.test".into()],
        challenges: vec![ChallengeKind::Http01, ChallengeKind::TlsAlpn01],
        replaces: None,
    }
}

/// A CA that answers from its state and checks what it is sent.
struct MockCa {
    account_key: EcKey,
    nonce: u32,
    reject_next_nonce: bool,
    fail_challenge: bool,
    /// Answers every new-order with `accountDoesNotExist`.
    forget_accounts: bool,
    /// The directory offers renewalInfo (RFC 9773).
    offer_ari: bool,
    /// The `replaces` of the last newOrder.
    replaces: Option<String>,
    authz_polls: u32,
    seen: Vec<String>,
    csr: Option<Vec<u8>>,
}

fn json_response(status: u16, nonce: u32, body: &str, location: Option<&str>) -> Response {
    Response {
        status,
        location: location.map(String::from),
        replay_nonce: Some(format!("nonce-{nonce}")),
        retry_after: None,
        content_type: Some("application/json".into()),
        body: body.as_bytes().to_vec(),
    }
}

impl MockCa {
    fn new(account_key: EcKey) -> Self {
        Self {
            account_key,
            nonce: 0,
            reject_next_nonce: false,
            fail_challenge: false,
            forget_accounts: false,
            offer_ari: false,
            replaces: None,
            authz_polls: 0,
            seen: Vec::new(),
            csr: None,
        }
    }

    /// Checks the JWS and returns (header, payload).
    fn open(&self, body: &[u8], url: &str) -> (Value, Vec<u8>) {
        let jws = json::parse(body).unwrap();
        let protected = jws.str_field("protected").unwrap();
        let payload = jws.str_field("payload").unwrap();
        let signature = url_decode(jws.str_field("signature").unwrap().as_bytes()).unwrap();
        let verifier =
            p256::ecdsa::VerifyingKey::from_sec1_bytes(&self.account_key.public_point()).unwrap();
        verifier
            .verify(
                format!("{protected}.{payload}").as_bytes(),
                &p256::ecdsa::Signature::from_slice(&signature).unwrap(),
            )
            .expect("the JWS verifies with the account key");
        let header = json::parse(&url_decode(protected.as_bytes()).unwrap()).unwrap();
        assert_eq!(
            header.str_field("url"),
            Some(url),
            "the signed url is the request's"
        );
        assert_eq!(
            header.str_field("nonce"),
            Some(format!("nonce-{}", self.nonce).as_str()),
            "the latest nonce is used"
        );
        (header, url_decode(payload.as_bytes()).unwrap())
    }

    fn answer(&mut self, method: Method, url: &str, body: &[u8]) -> Response {
        self.seen.push(url.rsplit('/').next().unwrap().to_string());
        if method != Method::Post {
            assert_ne!(url, "https://ca.test/new-order");
            self.nonce += 1;
            return match url {
                "https://ca.test/dir" if self.offer_ari => json_response(
                    200,
                    self.nonce,
                    r#"{"newNonce":"https://ca.test/nonce","newAccount":"https://ca.test/new-account","newOrder":"https://ca.test/new-order","renewalInfo":"https://ca.test/renewal-info"}"#,
                    None,
                ),
                "https://ca.test/dir" => json_response(
                    200,
                    self.nonce,
                    r#"{"newNonce":"https://ca.test/nonce","newAccount":"https://ca.test/new-account","newOrder":"https://ca.test/new-order"}"#,
                    None,
                ),
                "https://ca.test/nonce" => json_response(200, self.nonce, "", None),
                other => panic!("unexpected GET {other}"),
            };
        }
        let (header, payload) = self.open(body, url);
        self.nonce += 1;
        if self.reject_next_nonce {
            self.reject_next_nonce = false;
            return json_response(
                400,
                self.nonce,
                r#"{"type":"urn:ietf:params:acme:error:badNonce","detail":"stale"}"#,
                None,
            );
        }
        let kid = header.str_field("kid");
        if self.forget_accounts && url == "https://ca.test/new-order" {
            return json_response(
                400,
                self.nonce,
                r#"{"type":"urn:ietf:params:acme:error:accountDoesNotExist","detail":"who?"}"#,
                None,
            );
        }
        if url != "https://ca.test/new-account" {
            assert_eq!(
                kid,
                Some("https://ca.test/acct/7"),
                "requests after newAccount use kid"
            );
        } else {
            assert!(header.get("jwk").is_some());
        }
        match url {
            "https://ca.test/new-account" => {
                let payload = json::parse(&payload).unwrap();
                assert_eq!(
                    payload.get("termsOfServiceAgreed"),
                    Some(&Value::Bool(true))
                );
                json_response(
                    201,
                    self.nonce,
                    r#"{"status":"valid"}"#,
                    Some("https://ca.test/acct/7"),
                )
            }
            "https://ca.test/new-order" => {
                let payload = json::parse(&payload).unwrap();
                self.replaces = payload.str_field("replaces").map(String::from);
                let ids = payload.get("identifiers").unwrap().as_array().unwrap();
                assert_eq!(ids.len(), 2);
                json_response(
                    201,
                    self.nonce,
                    r#"{"status":"pending","authorizations":["https://ca.test/authz/1","https://ca.test/authz/2"],"finalize":"https://ca.test/finalize"}"#,
                    Some("https://ca.test/order/1"),
                )
            }
            "https://ca.test/authz/1" | "https://ca.test/authz/2" => {
                assert!(payload.is_empty(), "POST-as-GET");
                let n = &url[url.len() - 1..];
                let name = if n == "1" {
                    "bramble.test"
                } else {
                    "www.bramble.test"
                };
                let answered = self.seen.iter().any(|s| s == &format!("chall{n}"));
                let status = if !answered {
                    "pending"
                } else if self.fail_challenge {
                    "invalid"
                } else if self.authz_polls > 0 {
                    self.authz_polls -= 1;
                    "pending"
                } else {
                    "valid"
                };
                json_response(
                    200,
                    self.nonce,
                    &format!(
                        r#"{{"status":"{status}","identifier":{{"type":"dns","value":"{name}"}},"challenges":[{{"type":"http-01","url":"https://ca.test/chall{n}","token":"token{n}","status":"{status}","error":{{"type":"urn:ietf:params:acme:error:connection","detail":"refused"}}}}]}}"#
                    ),
                    None,
                )
            }
            "https://ca.test/chall1" | "https://ca.test/chall2" => {
                assert_eq!(payload, b"{}");
                json_response(
                    200,
                    self.nonce,
                    r#"{"type":"http-01","status":"processing"}"#,
                    None,
                )
            }
            "https://ca.test/finalize" => {
                let payload = json::parse(&payload).unwrap();
                self.csr = Some(url_decode(payload.str_field("csr").unwrap().as_bytes()).unwrap());
                json_response(
                    200,
                    self.nonce,
                    r#"{"status":"processing","authorizations":[],"finalize":"https://ca.test/finalize"}"#,
                    None,
                )
            }
            "https://ca.test/order/1" => json_response(
                200,
                self.nonce,
                r#"{"status":"valid","authorizations":[],"finalize":"https://ca.test/finalize","certificate":"https://ca.test/cert/1"}"#,
                None,
            ),
            "https://ca.test/cert/1" => {
                let mut response = json_response(
                    200,
                    self.nonce,
                    "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                    None,
                );
                response.content_type = Some("application/pem-certificate-chain".into());
                response
            }
            other => panic!("unexpected POST {other}"),
        }
    }
}

/// Runs `run` against `ca` to the end; returns the final action and the answers published.
fn drive(run: &mut OrderRun, ca: &mut MockCa) -> (Action, Vec<String>, Vec<String>) {
    let mut published = Vec::new();
    let mut accounts = Vec::new();
    for _ in 0..200 {
        match run.poll() {
            Action::Send(request) => {
                let response = ca.answer(request.method, &request.url, &request.body);
                run.receive(Ok(response));
            }
            Action::Wait(seconds) => assert!((1..=60).contains(&seconds)),
            Action::Publish(answer) => {
                assert_eq!(answer.kind, ChallengeKind::Http01);
                assert!(
                    answer
                        .key_authorization
                        .starts_with(&format!("{}.", answer.token))
                );
                published.push(answer.name);
            }
            Action::AccountReady(url) => accounts.push(url),
            done => return (done, published, accounts),
        }
    }
    panic!("the order never ended");
}

#[test]
fn orders_a_certificate_from_directory_to_chain() {
    let mut ca = MockCa::new(key(1));
    ca.reject_next_nonce = false;
    ca.authz_polls = 2;
    let mut run = OrderRun::new(settings(), key(1), None, key(2));
    let (done, published, accounts) = drive(&mut run, &mut ca);
    let Action::Issued(issued) = done else {
        panic!("not issued: {done:?}");
    };
    assert!(issued.chain_pem.contains("BEGIN CERTIFICATE"));
    assert_eq!(issued.key, key(2));
    assert_eq!(published, ["bramble.test", "www.bramble.test"]);
    assert_eq!(accounts, ["https://ca.test/acct/7"]);
    assert_eq!(run.account_url(), Some("https://ca.test/acct/7"));
    check_with_openssl(&ca.csr.unwrap());
}

#[test]
fn a_saved_account_skips_new_account_and_bad_nonces_are_retried() {
    let mut ca = MockCa::new(key(1));
    let mut run = OrderRun::new(
        settings(),
        key(1),
        Some("https://ca.test/acct/7".into()),
        key(2),
    );
    // The first POST after the nonce gets badNonce.
    ca.reject_next_nonce = true;
    let (done, _, accounts) = drive(&mut run, &mut ca);
    assert!(matches!(done, Action::Issued(_)), "{done:?}");
    assert!(accounts.is_empty());
    assert!(!ca.seen.iter().any(|s| s == "new-account"));
}

#[test]
fn a_failed_challenge_ends_the_order_as_a_validation_failure() {
    let mut ca = MockCa::new(key(1));
    ca.fail_challenge = true;
    let mut run = OrderRun::new(settings(), key(1), None, key(2));
    let (done, _, _) = drive(&mut run, &mut ca);
    let Action::Failed(error, _) = done else {
        panic!("{done:?}");
    };
    assert!(error.is_validation_failure(), "{error}");
    assert!(error.to_string().contains("refused"), "{error}");
}

#[test]
fn errors_and_transport_failures_end_the_order_with_retry_after() {
    let mut run = OrderRun::new(settings(), key(1), None, key(2));
    assert!(matches!(run.poll(), Action::Send(_)));
    run.receive(Ok(Response {
        status: 503,
        retry_after: Some(120),
        body: br#"{"type":"urn:ietf:params:acme:error:serverInternal","detail":"down"}"#.to_vec(),
        ..Response::default()
    }));
    match run.poll() {
        Action::Failed(
            AcmeError::Status {
                status: 503,
                problem,
            },
            Some(120),
        ) => {
            assert_eq!(problem.unwrap().kind, "serverInternal");
        }
        other => panic!("{other:?}"),
    }
    let mut run = OrderRun::new(settings(), key(1), None, key(2));
    assert!(matches!(run.poll(), Action::Send(_)));
    run.receive(Err("DNS lookup failed"));
    assert!(matches!(
        run.poll(),
        Action::Failed(AcmeError::Transport("DNS lookup failed"), None)
    ));
    // Garbage instead of a directory.
    let mut run = OrderRun::new(settings(), key(1), None, key(2));
    assert!(matches!(run.poll(), Action::Send(_)));
    run.receive(Ok(Response {
        status: 200,
        body: b"<html>".to_vec(),
        ..Response::default()
    }));
    assert!(matches!(
        run.poll(),
        Action::Failed(AcmeError::NotJson, None)
    ));
}

fn openssl() -> bool {
    std::process::Command::new("openssl")
        .arg("version")
        .output()
        .is_ok()
}

fn check_with_openssl(csr: &[u8]) {
    if !openssl() {
        eprintln!("SKIPPED the openssl check: openssl is not installed");
        return;
    }
    let dir = std::env::temp_dir().join(format!("bramble-acme-csr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("csr.der");
    std::fs::write(&path, csr).unwrap();
    let out = std::process::Command::new("openssl")
        .args(["req", "-inform", "DER", "-verify", "-noout", "-text", "-in"])
        .arg(&path)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("verify OK") || text.contains("Certificate request self-signature verify OK"),
        "{text}"
    );
    assert!(
        text.contains("DNS:bramble.test, DNS:www.bramble.test"),
        "{text}"
    );
    assert!(
        text.contains("CN = bramble.test") || text.contains("CN=bramble.test"),
        "{text}"
    );
}

#[test]
fn the_tls_alpn_certificate_carries_the_acme_identifier() {
    if !openssl() {
        eprintln!("SKIPPED: openssl is not installed");
        return;
    }
    let der = bramble_acme::csr::tls_alpn_certificate("bramble.test", "tok.thumb", &key(3));
    let dir = std::env::temp_dir().join(format!("bramble-acme-alpn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cert.der");
    std::fs::write(&path, &der).unwrap();
    let out = std::process::Command::new("openssl")
        .args(["x509", "-inform", "DER", "-noout", "-text", "-in"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("DNS:bramble.test"), "{text}");
    assert!(text.contains("1.3.6.1.5.5.7.1.31: critical"), "{text}");
    use sha2::Digest;
    let digest = sha2::Sha256::digest(b"tok.thumb");
    // id-pe-acmeIdentifier, critical, OCTET STRING { OCTET STRING (32) digest }.
    let mut expected = vec![0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x01, 0x1f];
    expected.extend_from_slice(&[0x01, 0x01, 0xff, 0x04, 0x22, 0x04, 0x20]);
    expected.extend_from_slice(&digest);
    assert!(
        der.windows(expected.len())
            .any(|w| w == expected.as_slice())
    );
}

#[test]
fn a_ca_that_forgets_every_account_gets_one_new_account_per_order() {
    let mut ca = MockCa::new(key(1));
    ca.forget_accounts = true;
    let mut run = OrderRun::new(
        settings(),
        key(1),
        Some("https://ca.test/acct/7".into()),
        key(2),
    );
    let (done, _, accounts) = drive(&mut run, &mut ca);
    let Action::Failed(
        AcmeError::Status {
            status: 400,
            problem,
        },
        _,
    ) = done
    else {
        panic!("{done:?}");
    };
    assert_eq!(problem.unwrap().kind, "accountDoesNotExist");
    assert_eq!(
        accounts,
        ["https://ca.test/acct/7"],
        "one account made, not a loop"
    );
    assert_eq!(ca.seen.iter().filter(|s| *s == "new-account").count(), 1);
}

#[test]
fn a_renewal_names_the_certificate_it_replaces_when_the_ca_offers_ari() {
    for offer_ari in [true, false] {
        let mut ca = MockCa::new(key(1));
        ca.offer_ari = offer_ari;
        let mut settings = settings();
        settings.replaces = Some("aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE".into());
        let mut run = OrderRun::new(settings, key(1), None, key(2));
        let (done, _, _) = drive(&mut run, &mut ca);
        assert!(matches!(done, Action::Issued(_)), "{done:?}");
        assert_eq!(
            ca.replaces.as_deref(),
            offer_ari.then_some("aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE")
        );
    }
}
