//! One certificate order from start to chain (RFC 8555 §7): directory, nonce, account,
//! newOrder, authorizations and their challenges, finalize with the CSR, download. A state
//! machine without I/O: [`OrderRun::poll`] says what to do next (send a request, wait, put
//! up a challenge answer), and the caller hands each response to [`OrderRun::receive`].

use crate::csr;
use crate::http::{Method, Response};
use crate::jose::{self, Signer};
use crate::json::{self, Value, write_string};
use crate::key::EcKey;
use crate::protocol::{Authorization, ChallengeKind, Directory, Malformed, Order, Problem, Status};
use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;

/// Retries of one request after `badNonce` before giving up.
const BAD_NONCE_RETRIES: u32 = 3;
/// Polls of one authorization or of the order before giving up.
const MAX_POLLS: u32 = 60;
/// Wait between polls when the CA gives no Retry-After, and the most a Retry-After may
/// stretch one poll to.
const POLL_SECONDS: u64 = 1;
const MAX_POLL_SECONDS: u64 = 60;

/// What an order is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderSettings {
    /// The CA's directory URL.
    pub directory_url: String,
    /// Contact address for the account (without `mailto:`), if any.
    pub email: Option<String>,
    /// The DNS names, first one the subject's.
    pub names: Vec<String>,
    /// The challenge types this device answers, preferred first.
    pub challenges: Vec<ChallengeKind>,
    /// The ARI identifier of the certificate this order replaces (RFC 9773 §5), sent as
    /// `replaces` when the CA's directory offers renewalInfo.
    pub replaces: Option<String>,
}

/// A request to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Method.
    pub method: Method,
    /// The full `https://` URL.
    pub url: String,
    /// The JWS body (POST) or nothing.
    pub body: Vec<u8>,
}

/// A challenge answer to put up before the CA is told to look.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChallengeAnswer {
    /// Which challenge.
    pub kind: ChallengeKind,
    /// The name being validated.
    pub name: String,
    /// The token (the HTTP-01 path's last segment).
    pub token: String,
    /// The key authorization: the HTTP-01 body; its SHA-256 goes in the TLS-ALPN-01
    /// certificate.
    pub key_authorization: String,
}

/// The result of an order.
#[derive(Clone, Debug)]
pub struct Issued {
    /// The chain, PEM, leaf first, as the CA sent it.
    pub chain_pem: String,
    /// The certificate's key.
    pub key: EcKey,
}

/// Why an order stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcmeError {
    /// The request never got an answer (no route, DNS, TLS, connection, timeout): the
    /// caller's transport says which.
    Transport(&'static str),
    /// The CA answered with an error status.
    Status {
        /// The HTTP status.
        status: u16,
        /// The problem document, if it sent one.
        problem: Option<Problem>,
    },
    /// The CA's answer is not what RFC 8555 says it must be.
    Malformed(Malformed),
    /// The CA's answer is not JSON (or the chain not PEM).
    NotJson,
    /// The CA could not validate a name: the challenge failed.
    ChallengeFailed {
        /// The name.
        name: String,
        /// What the CA said.
        problem: Option<Problem>,
    },
    /// The CA offered no challenge type this device can answer for a name.
    NoUsableChallenge(String),
    /// The order became invalid.
    OrderInvalid(Option<Problem>),
    /// An authorization or the order stayed pending through every poll.
    PollsExhausted,
}

impl AcmeError {
    /// Whether this failure counts against the CA's failed-validation limit.
    pub fn is_validation_failure(&self) -> bool {
        matches!(
            self,
            AcmeError::ChallengeFailed { .. } | AcmeError::OrderInvalid(_)
        )
    }

    /// Whether the CA said a rate limit was hit.
    pub fn is_rate_limited(&self) -> bool {
        matches!(self, AcmeError::Status { problem: Some(p), .. } if p.is_rate_limited())
    }
}

impl core::fmt::Display for AcmeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            AcmeError::Transport(what) => write!(f, "no answer from the CA: {what}"),
            AcmeError::Status {
                status,
                problem: Some(problem),
            } => write!(f, "the CA answered {status}: {problem}"),
            AcmeError::Status { status, .. } => write!(f, "the CA answered {status}"),
            AcmeError::Malformed(what) => write!(f, "{what}"),
            AcmeError::NotJson => f.write_str("the CA's answer is not the JSON or PEM expected"),
            AcmeError::ChallengeFailed {
                name,
                problem: Some(problem),
            } => write!(f, "the CA could not validate {name}: {problem}"),
            AcmeError::ChallengeFailed { name, .. } => {
                write!(f, "the CA could not validate {name}")
            }
            AcmeError::NoUsableChallenge(name) => {
                write!(
                    f,
                    "the CA offers no http-01 or tls-alpn-01 challenge for {name}"
                )
            }
            AcmeError::OrderInvalid(Some(problem)) => write!(f, "the order failed: {problem}"),
            AcmeError::OrderInvalid(None) => f.write_str("the order failed"),
            AcmeError::PollsExhausted => f.write_str("the CA kept the order pending too long"),
        }
    }
}

/// What the caller does next.
#[derive(Clone, Debug)]
pub enum Action {
    /// Send this request and hand the answer (or the transport's failure) to
    /// [`OrderRun::receive`].
    Send(Request),
    /// Wait this many seconds, then poll again.
    Wait(u64),
    /// Put up this answer now (it must be served before the next request goes out); every
    /// answer may be taken down once the order ends.
    Publish(ChallengeAnswer),
    /// The CA made (or found) the account: save it (URL and key) so the next order does
    /// not make another.
    AccountReady(String),
    /// Done: the certificate chain and its key.
    Issued(Issued),
    /// Stopped; the caller backs off (the CA's Retry-After, when it gave one, in seconds).
    Failed(AcmeError, Option<u64>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Directory,
    Account,
    NewOrder,
    Authorization(usize),
    Answer(usize),
    PollAuthorization(usize),
    Finalize,
    PollOrder,
    Download,
    Over,
}

/// One order in progress.
#[derive(Debug)]
pub struct OrderRun {
    settings: OrderSettings,
    account_key: EcKey,
    account_url: Option<String>,
    certificate_key: EcKey,
    directory: Option<Directory>,
    nonce: Option<String>,
    step: Step,
    /// A request is out: `true` when it is a newNonce HEAD rather than the step's own.
    outstanding: Option<bool>,
    queued: VecDeque<Action>,
    order_url: Option<String>,
    authorizations: Vec<String>,
    finalize_url: Option<String>,
    certificate_url: Option<String>,
    answered: Option<(String, ChallengeKind)>,
    polls: u32,
    bad_nonces: u32,
    /// Whether this run re-made the account after `accountDoesNotExist` (once per run: a CA
    /// that forgets every account would otherwise have one made, and saved, per request).
    account_remade: bool,
    /// Requests sent so far (for the report).
    pub requests: u32,
}

fn parse_json(response: &Response) -> Result<Value, AcmeError> {
    json::parse(&response.body).map_err(|_| AcmeError::NotJson)
}

fn poll_wait(response: &Response) -> u64 {
    response
        .retry_after
        .unwrap_or(POLL_SECONDS)
        .clamp(POLL_SECONDS, MAX_POLL_SECONDS)
}

impl OrderRun {
    /// An order under `account_key` (with its URL if the account exists already) for a
    /// certificate with `certificate_key`.
    pub fn new(
        settings: OrderSettings,
        account_key: EcKey,
        account_url: Option<String>,
        certificate_key: EcKey,
    ) -> Self {
        Self {
            settings,
            account_key,
            account_url,
            certificate_key,
            directory: None,
            nonce: None,
            step: Step::Directory,
            outstanding: None,
            queued: VecDeque::new(),
            order_url: None,
            authorizations: Vec::new(),
            finalize_url: None,
            certificate_url: None,
            answered: None,
            polls: 0,
            bad_nonces: 0,
            account_remade: false,
            requests: 0,
        }
    }

    /// The account's URL, once known.
    pub fn account_url(&self) -> Option<&str> {
        self.account_url.as_deref()
    }

    /// What to do next. Call again after each action other than `Send` (whose answer goes to
    /// [`OrderRun::receive`]); after `Issued` or `Failed` the run is over.
    pub fn poll(&mut self) -> Action {
        if let Some(action) = self.queued.pop_front() {
            return action;
        }
        if self.outstanding.is_some() {
            // Misuse: a request is out. Saying so is better than sending it twice.
            return Action::Failed(AcmeError::Transport("a request is still outstanding"), None);
        }
        let request = match self.step {
            Step::Over => {
                return Action::Failed(AcmeError::Transport("the order is over"), None);
            }
            Step::Directory => Request {
                method: Method::Get,
                url: self.settings.directory_url.clone(),
                body: Vec::new(),
            },
            _ => match self.signed_request() {
                Ok(request) => request,
                Err(error) => return self.fail(error, None),
            },
        };
        self.requests += 1;
        self.outstanding = Some(request.method == Method::Head);
        Action::Send(request)
    }

    /// The step's POST, or a newNonce HEAD first when no nonce is at hand.
    fn signed_request(&mut self) -> Result<Request, AcmeError> {
        let Some(directory) = &self.directory else {
            return Err(AcmeError::Transport("no directory"));
        };
        let Some(nonce) = self.nonce.take() else {
            return Ok(Request {
                method: Method::Head,
                url: directory.new_nonce.clone(),
                body: Vec::new(),
            });
        };
        let (url, payload): (String, Vec<u8>) = match self.step {
            Step::Account => {
                let mut payload = String::from("{\"termsOfServiceAgreed\":true");
                if let Some(email) = &self.settings.email {
                    payload.push_str(",\"contact\":[");
                    write_string(&mut payload, &alloc::format!("mailto:{email}"));
                    payload.push(']');
                }
                payload.push('}');
                (directory.new_account.clone(), payload.into_bytes())
            }
            Step::NewOrder => {
                let mut payload = String::from("{\"identifiers\":[");
                for (i, name) in self.settings.names.iter().enumerate() {
                    if i > 0 {
                        payload.push(',');
                    }
                    payload.push_str("{\"type\":\"dns\",\"value\":");
                    write_string(&mut payload, name);
                    payload.push('}');
                }
                payload.push(']');
                if let (Some(replaces), Some(_)) =
                    (&self.settings.replaces, &directory.renewal_info)
                {
                    payload.push_str(",\"replaces\":");
                    write_string(&mut payload, replaces);
                }
                payload.push('}');
                (directory.new_order.clone(), payload.into_bytes())
            }
            Step::Authorization(i) | Step::PollAuthorization(i) => {
                (self.authorizations[i].clone(), Vec::new())
            }
            Step::Answer(_) => match &self.answered {
                Some((url, _)) => (url.clone(), b"{}".to_vec()),
                None => return Err(AcmeError::Transport("no challenge")),
            },
            Step::Finalize => {
                let names: Vec<&str> = self.settings.names.iter().map(String::as_str).collect();
                let request = csr::certificate_request(&names, &self.certificate_key);
                let mut payload = String::from("{\"csr\":\"");
                payload.push_str(&crate::base64::url_encode(&request));
                payload.push_str("\"}");
                let url = self.finalize_url.clone().unwrap_or_default();
                (url, payload.into_bytes())
            }
            Step::PollOrder => (self.order_url.clone().unwrap_or_default(), Vec::new()),
            Step::Download => (self.certificate_url.clone().unwrap_or_default(), Vec::new()),
            Step::Directory | Step::Over => unreachable_step(),
        };
        let signer = match (self.step, &self.account_url) {
            (Step::Account, _) | (_, None) => Signer::Jwk,
            (_, Some(kid)) => Signer::Kid(kid),
        };
        let body = jose::sign(&self.account_key, signer, &nonce, &url, &payload);
        Ok(Request {
            method: Method::Post,
            url,
            body,
        })
    }

    fn fail(&mut self, error: AcmeError, retry_after: Option<u64>) -> Action {
        self.step = Step::Over;
        self.outstanding = None;
        self.queued.clear();
        Action::Failed(error, retry_after)
    }

    /// The answer to the last `Send`: the response, or the transport's reason for having
    /// none.
    pub fn receive(&mut self, answer: Result<Response, &'static str>) {
        let Some(was_nonce) = self.outstanding.take() else {
            return;
        };
        let response = match answer {
            Ok(response) => response,
            Err(reason) => {
                let action = self.fail(AcmeError::Transport(reason), None);
                self.queued.push_back(action);
                return;
            }
        };
        if let Some(nonce) = &response.replay_nonce {
            self.nonce = Some(nonce.clone());
        }
        if was_nonce {
            if self.nonce.is_none() {
                let action = self.fail(AcmeError::Malformed(Malformed("Replay-Nonce")), None);
                self.queued.push_back(action);
            }
            return;
        }
        if response.status >= 400 {
            let problem = json::parse(&response.body)
                .ok()
                .as_ref()
                .and_then(Problem::from_json);
            if problem.as_ref().is_some_and(Problem::is_bad_nonce)
                && self.bad_nonces < BAD_NONCE_RETRIES
                && self.nonce.is_some()
            {
                // §6.5: retry with the nonce that came with the error.
                self.bad_nonces += 1;
                log::info!("acme: the CA refused a nonce; retrying with a fresh one");
                return;
            }
            if problem
                .as_ref()
                .is_some_and(|p| p.kind == "accountDoesNotExist")
                && self.step != Step::Account
                && !self.account_remade
            {
                self.account_remade = true;
                log::warn!("acme: the CA does not know the saved account; making a new one");
                self.account_url = None;
                self.step = Step::Account;
                return;
            }
            let retry = response.retry_after;
            let action = self.fail(
                AcmeError::Status {
                    status: response.status,
                    problem,
                },
                retry,
            );
            self.queued.push_back(action);
            return;
        }
        self.bad_nonces = 0;
        if let Err(error) = self.take(&response) {
            let retry = response.retry_after;
            let action = self.fail(error, retry);
            self.queued.push_back(action);
        }
    }

    /// Moves on from a successful answer to the current step.
    fn take(&mut self, response: &Response) -> Result<(), AcmeError> {
        match self.step {
            Step::Directory => {
                let directory =
                    Directory::from_json(&parse_json(response)?).map_err(AcmeError::Malformed)?;
                self.directory = Some(directory);
                self.step = if self.account_url.is_some() {
                    Step::NewOrder
                } else {
                    Step::Account
                };
            }
            Step::Account => {
                let url = response
                    .location
                    .clone()
                    .filter(|url| crate::http::parse_https_url(url).is_some())
                    .ok_or(AcmeError::Malformed(Malformed("account Location")))?;
                self.account_url = Some(url.clone());
                self.queued.push_back(Action::AccountReady(url));
                self.step = Step::NewOrder;
            }
            Step::NewOrder => {
                let url = response
                    .location
                    .clone()
                    .filter(|url| crate::http::parse_https_url(url).is_some())
                    .ok_or(AcmeError::Malformed(Malformed("order Location")))?;
                self.order_url = Some(url);
                let order =
                    Order::from_json(&parse_json(response)?).map_err(AcmeError::Malformed)?;
                self.authorizations = order.authorizations.clone();
                self.finalize_url = Some(order.finalize.clone());
                self.follow_order(order, response)?;
            }
            Step::Authorization(i) => {
                let authz = Authorization::from_json(&parse_json(response)?)
                    .map_err(AcmeError::Malformed)?;
                match authz.status {
                    Status::Valid => self.next_authorization(i),
                    Status::Pending => {
                        let challenge = self
                            .settings
                            .challenges
                            .iter()
                            .find_map(|kind| authz.challenges.iter().find(|c| c.kind == *kind))
                            .ok_or_else(|| AcmeError::NoUsableChallenge(authz.name.clone()))?;
                        let key_authorization =
                            jose::key_authorization(&challenge.token, &self.account_key);
                        self.queued.push_back(Action::Publish(ChallengeAnswer {
                            kind: challenge.kind,
                            name: authz.name.clone(),
                            token: challenge.token.clone(),
                            key_authorization,
                        }));
                        self.answered = Some((challenge.url.clone(), challenge.kind));
                        self.step = Step::Answer(i);
                    }
                    _ => {
                        return Err(AcmeError::ChallengeFailed {
                            name: authz.name.clone(),
                            problem: failed_problem(&authz_challenges_errors(&authz)),
                        });
                    }
                }
            }
            Step::Answer(i) => {
                self.polls = 0;
                self.step = Step::PollAuthorization(i);
                self.queued.push_back(Action::Wait(poll_wait(response)));
            }
            Step::PollAuthorization(i) => {
                let authz = Authorization::from_json(&parse_json(response)?)
                    .map_err(AcmeError::Malformed)?;
                match authz.status {
                    Status::Valid => self.next_authorization(i),
                    Status::Pending | Status::Processing => self.poll_again(response)?,
                    _ => {
                        return Err(AcmeError::ChallengeFailed {
                            name: authz.name.clone(),
                            problem: failed_problem(&authz_challenges_errors(&authz)),
                        });
                    }
                }
            }
            Step::Finalize | Step::PollOrder => {
                let order =
                    Order::from_json(&parse_json(response)?).map_err(AcmeError::Malformed)?;
                self.follow_order(order, response)?;
            }
            Step::Download => {
                let text = core::str::from_utf8(&response.body).map_err(|_| AcmeError::NotJson)?;
                if !text.contains("-----BEGIN CERTIFICATE-----") {
                    return Err(AcmeError::NotJson);
                }
                self.step = Step::Over;
                self.queued.push_back(Action::Issued(Issued {
                    chain_pem: String::from(text),
                    key: self.certificate_key.clone(),
                }));
            }
            Step::Over => {}
        }
        Ok(())
    }

    fn next_authorization(&mut self, done: usize) {
        self.step = if done + 1 < self.authorizations.len() {
            Step::Authorization(done + 1)
        } else {
            Step::Finalize
        };
    }

    fn poll_again(&mut self, response: &Response) -> Result<(), AcmeError> {
        self.polls += 1;
        if self.polls > MAX_POLLS {
            return Err(AcmeError::PollsExhausted);
        }
        self.queued.push_back(Action::Wait(poll_wait(response)));
        Ok(())
    }

    /// Where an order's status leads (after newOrder, finalize, or a poll).
    fn follow_order(&mut self, order: Order, response: &Response) -> Result<(), AcmeError> {
        match order.status {
            Status::Pending if self.step == Step::NewOrder => {
                self.step = if order.authorizations.is_empty() {
                    Step::Finalize
                } else {
                    Step::Authorization(0)
                };
            }
            Status::Ready if self.step != Step::Finalize => self.step = Step::Finalize,
            Status::Valid => {
                let url = order
                    .certificate
                    .ok_or(AcmeError::Malformed(Malformed("certificate")))?;
                self.certificate_url = Some(url);
                self.step = Step::Download;
            }
            Status::Invalid | Status::Ended => return Err(AcmeError::OrderInvalid(order.error)),
            Status::Pending | Status::Ready | Status::Processing => {
                if self.step == Step::Finalize {
                    self.polls = 0;
                }
                self.step = Step::PollOrder;
                self.poll_again(response)?;
            }
        }
        Ok(())
    }
}

fn authz_challenges_errors(authz: &Authorization) -> Vec<Problem> {
    authz
        .challenges
        .iter()
        .filter_map(|c| c.error.clone())
        .collect()
}

fn failed_problem(problems: &[Problem]) -> Option<Problem> {
    problems.first().cloned()
}

fn unreachable_step() -> (String, Vec<u8>) {
    // Directory and Over never sign; poll handles both before signing.
    (String::new(), Vec::new())
}
