//! How `bramble` reports a failure: one `error:` line that names the thing and the fix, each
//! further cause once (a cause whose text the line above already holds is not repeated), a
//! backtrace only when asked for (`--debug`, `BRAMBLE_BACKTRACE=1`), and a documented exit
//! code.

use std::ffi::OsString;
use std::fmt::Write;

/// The exit codes, as `bramble --help` lists them.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success
  1  failure: bad input (a missing folder, a broken link, a bad file) or a failed check
  2  usage: an unknown subcommand or flag, a missing or malformed argument";

/// Exit code of a failure (bad input, a failed check, anything that went wrong).
pub const EXIT_FAILURE: u8 = 1;
/// Exit code of a usage error (what clap reports, and [`Usage`]).
pub const EXIT_USAGE: u8 = 2;

/// A usage error the argument parser cannot see (a combination of arguments that makes no
/// sense): reported like any error, with exit code [`EXIT_USAGE`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

/// Did the environment ask for error backtraces (`BRAMBLE_BACKTRACE` set to anything but
/// empty or `0`)? `getenv` is `std::env::var_os` outside tests.
pub fn backtrace_asked(getenv: impl Fn(&str) -> Option<OsString>) -> bool {
    getenv("BRAMBLE_BACKTRACE").is_some_and(|value| !value.is_empty() && value != "0")
}

/// The exit code for `error`: [`EXIT_USAGE`] if a [`Usage`] is in its chain, else
/// [`EXIT_FAILURE`].
pub fn exit_code(error: &anyhow::Error) -> u8 {
    if error.chain().any(|cause| cause.is::<Usage>()) {
        EXIT_USAGE
    } else {
        EXIT_FAILURE
    }
}

/// The text printed for `error` (ends with a newline): `error: <what>`, then
/// `  caused by: <cause>` for each cause the lines above do not already say, then the
/// backtrace if `backtrace` and one was captured.
pub fn render(error: &anyhow::Error, backtrace: bool) -> String {
    let mut said: Vec<String> = Vec::new();
    for cause in error.chain() {
        let text = cause.to_string();
        let text = text.trim();
        if text.is_empty() || said.iter().any(|earlier| earlier.contains(text)) {
            continue;
        }
        said.push(text.to_string());
    }
    let mut out = String::new();
    let mut lines = said.iter();
    let first = lines.next().map_or("failed", String::as_str);
    let _ = writeln!(out, "error: {first}");
    for cause in lines {
        let _ = writeln!(out, "  caused by: {cause}");
    }
    if backtrace {
        let trace = error.backtrace();
        if trace.status() == std::backtrace::BacktraceStatus::Captured {
            let _ = write!(out, "\nbacktrace:\n{trace}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    fn io_error() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory")
    }

    /// An error that prints its source in its own message (as `cannot read X: <io error>`
    /// does) and also returns it from `source()`.
    #[derive(Debug, thiserror::Error)]
    #[error("cannot read /nonexistent: {source}")]
    struct Read {
        source: std::io::Error,
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let error = anyhow::Error::new(Read { source: io_error() });
        assert_eq!(
            render(&error, false),
            "error: cannot read /nonexistent: No such file or directory\n"
        );
    }

    #[test]
    fn context_and_new_causes_are_printed_once_each() {
        let error = Err::<(), _>(Read { source: io_error() })
            .context("packing site/")
            .unwrap_err();
        assert_eq!(
            render(&error, false),
            "error: packing site/\n  caused by: cannot read /nonexistent: No such file or \
             directory\n"
        );
        assert_eq!(exit_code(&error), EXIT_FAILURE);
    }

    #[test]
    fn usage_errors_exit_with_2_even_under_context() {
        let error = Err::<(), _>(Usage("--tap needs a device name".into()))
            .context("bramble qemu")
            .unwrap_err();
        assert_eq!(exit_code(&error), EXIT_USAGE);
    }

    #[test]
    fn backtraces_are_asked_for_by_bramble_backtrace_only() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |key: &str| {
                pairs
                    .iter()
                    .find(|(name, _)| *name == key)
                    .map(|(_, value)| OsString::from(value))
            }
        };
        assert!(backtrace_asked(env(&[("BRAMBLE_BACKTRACE", "1")])));
        assert!(backtrace_asked(env(&[("BRAMBLE_BACKTRACE", "full")])));
        assert!(!backtrace_asked(env(&[("BRAMBLE_BACKTRACE", "0")])));
        assert!(!backtrace_asked(env(&[("BRAMBLE_BACKTRACE", "")])));
        assert!(!backtrace_asked(env(&[("RUST_BACKTRACE", "1")])));
    }
}
