//! ACME Renewal Information (RFC 9773): asks the CA when it wants a certificate renewed.
//! Two unauthenticated GETs, the directory and `renewalInfo/<certID>`; the caller renews at a
//! random point of the suggested window (§4.2, [`crate::schedule::time_in_window`]) and asks
//! again after the answer's Retry-After. A CA whose directory has no `renewalInfo` offers no
//! ARI: the caller falls back to two thirds of the lifetime.

use crate::http::{Method, Response};
use crate::json;
use crate::order::Request;
use crate::protocol::{Directory, Problem, RenewalWindow};
use alloc::string::String;
use alloc::vec::Vec;

/// What the check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RenewalInfo {
    /// The CA's window, and its Retry-After (seconds) for the next check.
    Window(RenewalWindow, Option<u64>),
    /// The CA offers no ARI.
    NotOffered,
    /// The check failed (transport, status, malformed answer).
    Failed(String),
}

/// What to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AriAction {
    /// Send this request; its answer goes to [`RenewalInfoRun::receive`].
    Send(Request),
    /// A request is out.
    Waiting,
    /// Over.
    Done(RenewalInfo),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Directory,
    RenewalInfo,
    Over,
}

/// One renewal-information check.
#[derive(Debug)]
pub struct RenewalInfoRun {
    directory_url: String,
    cert_id: String,
    step: Step,
    outstanding: bool,
    renewal_info_url: Option<String>,
    outcome: Option<RenewalInfo>,
}

impl RenewalInfoRun {
    /// A check of the certificate `cert_id` ([`crate::protocol::cert_id`]) at the CA whose
    /// directory is `directory_url`.
    pub fn new(directory_url: String, cert_id: String) -> Self {
        Self {
            directory_url,
            cert_id,
            step: Step::Directory,
            outstanding: false,
            renewal_info_url: None,
            outcome: None,
        }
    }

    /// What to do next.
    pub fn poll(&mut self) -> AriAction {
        if let Some(outcome) = self.outcome.take() {
            self.step = Step::Over;
            return AriAction::Done(outcome);
        }
        if self.outstanding {
            return AriAction::Waiting;
        }
        let url = match self.step {
            Step::Directory => self.directory_url.clone(),
            Step::RenewalInfo => {
                let base = self.renewal_info_url.as_deref().unwrap_or_default();
                let mut url = String::from(base.trim_end_matches('/'));
                url.push('/');
                url.push_str(&self.cert_id);
                url
            }
            Step::Over => return AriAction::Done(RenewalInfo::Failed("over".into())),
        };
        self.outstanding = true;
        AriAction::Send(Request {
            method: Method::Get,
            url,
            body: Vec::new(),
        })
    }

    /// The answer to the request last sent.
    pub fn receive(&mut self, answer: Result<Response, &'static str>) {
        self.outstanding = false;
        let response = match answer {
            Ok(response) => response,
            Err(problem) => {
                self.outcome = Some(RenewalInfo::Failed(problem.into()));
                return;
            }
        };
        if response.status != 200 {
            let problem = json::parse(&response.body)
                .ok()
                .as_ref()
                .and_then(Problem::from_json)
                .map_or_else(
                    || String::from("no problem document"),
                    |p| alloc::format!("{p}"),
                );
            self.outcome = Some(RenewalInfo::Failed(alloc::format!(
                "the CA answered {}: {problem}",
                response.status
            )));
            return;
        }
        let Ok(value) = json::parse(&response.body) else {
            self.outcome = Some(RenewalInfo::Failed("the CA's answer is not JSON".into()));
            return;
        };
        match self.step {
            Step::Directory => match Directory::from_json(&value) {
                Ok(Directory {
                    renewal_info: Some(url),
                    ..
                }) => {
                    self.renewal_info_url = Some(url);
                    self.step = Step::RenewalInfo;
                }
                Ok(_) => self.outcome = Some(RenewalInfo::NotOffered),
                Err(error) => self.outcome = Some(RenewalInfo::Failed(alloc::format!("{error}"))),
            },
            Step::RenewalInfo => {
                self.outcome = Some(match RenewalWindow::from_json(&value) {
                    Ok(window) => RenewalInfo::Window(window, response.retry_after),
                    Err(error) => RenewalInfo::Failed(alloc::format!("{error}")),
                });
            }
            Step::Over => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(body: &str, retry_after: Option<u64>) -> Result<Response, &'static str> {
        Ok(Response {
            status: 200,
            retry_after,
            body: body.as_bytes().to_vec(),
            ..Response::default()
        })
    }

    fn sent(action: AriAction) -> Request {
        match action {
            AriAction::Send(request) => request,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fetches_the_window_from_the_directorys_renewal_info() {
        let mut run = RenewalInfoRun::new("https://ca.test/dir".into(), "aYhb.AIdl".into());
        let request = sent(run.poll());
        assert_eq!(
            (request.method, request.url.as_str()),
            (Method::Get, "https://ca.test/dir")
        );
        assert_eq!(run.poll(), AriAction::Waiting);
        run.receive(ok(
            r#"{"newNonce":"https://ca.test/n","newAccount":"https://ca.test/a","newOrder":"https://ca.test/o","renewalInfo":"https://ca.test/renewal-info/"}"#,
            None,
        ));
        let request = sent(run.poll());
        assert_eq!(request.url, "https://ca.test/renewal-info/aYhb.AIdl");
        assert!(request.body.is_empty());
        run.receive(ok(
            r#"{"suggestedWindow":{"start":"2025-01-02T04:00:00Z","end":"2025-01-03T04:00:00Z"}}"#,
            Some(21_600),
        ));
        assert_eq!(
            run.poll(),
            AriAction::Done(RenewalInfo::Window(
                RenewalWindow {
                    start: 1_735_790_400,
                    end: 1_735_876_800
                },
                Some(21_600)
            ))
        );
    }

    #[test]
    fn a_directory_without_renewal_info_offers_none_and_errors_fail() {
        let mut run = RenewalInfoRun::new("https://ca.test/dir".into(), "x.y".into());
        let _ = sent(run.poll());
        run.receive(ok(
            r#"{"newNonce":"https://ca.test/n","newAccount":"https://ca.test/a","newOrder":"https://ca.test/o"}"#,
            None,
        ));
        assert_eq!(run.poll(), AriAction::Done(RenewalInfo::NotOffered));

        let mut run = RenewalInfoRun::new("https://ca.test/dir".into(), "x.y".into());
        let _ = sent(run.poll());
        run.receive(Err("refused"));
        assert!(matches!(
            run.poll(),
            AriAction::Done(RenewalInfo::Failed(_))
        ));

        let mut run = RenewalInfoRun::new("https://ca.test/dir".into(), "x.y".into());
        let _ = sent(run.poll());
        run.receive(ok(
            r#"{"newNonce":"https://ca.test/n","newAccount":"https://ca.test/a","newOrder":"https://ca.test/o","renewalInfo":"https://ca.test/ri"}"#,
            None,
        ));
        let _ = sent(run.poll());
        run.receive(Ok(Response {
            status: 404,
            body: br#"{"type":"urn:ietf:params:acme:error:malformed","detail":"unknown"}"#.to_vec(),
            ..Response::default()
        }));
        let AriAction::Done(RenewalInfo::Failed(why)) = run.poll() else {
            panic!()
        };
        assert!(why.contains("404") && why.contains("malformed"), "{why}");
        let mut run = RenewalInfoRun::new("https://ca.test/dir".into(), "x.y".into());
        let _ = sent(run.poll());
        run.receive(ok("{\"suggestedWindow\":", None));
        assert!(matches!(
            run.poll(),
            AriAction::Done(RenewalInfo::Failed(_))
        ));
    }
}
