//! How the real `bramble` binary fails: one `error:` line naming the thing and the fix, no
//! backtrace unless `--debug` or `BRAMBLE_BACKTRACE=1` asks (whatever RUST_BACKTRACE says),
//! exit code 1 for bad input and 2 for usage; broken symlinks are an error unless
//! `--skip-broken-links` (pack, image, serve), which warns and leaves them out.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn bramble(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bramble"));
    command
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .env_remove("BRAMBLE_BACKTRACE")
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("bramble-cli-errors-cache"),
        );
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("run bramble")
}

/// A path that certainly does not exist: a name inside a fresh temporary folder (a fixed path
/// such as /nonexistent exists on some machines; CI's is one).
fn missing_folder(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("no-such-site");
    assert!(!path.exists());
    path.to_str().expect("a UTF-8 temporary path").to_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_missing_site_is_one_error_line_and_exit_1_even_with_rust_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    let missing = missing_folder(&dir);
    for rust_backtrace in ["1", "full"] {
        let output = bramble(&["pack", &missing], &[("RUST_BACKTRACE", rust_backtrace)]);
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(1), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {text}");
        assert!(lines[0].starts_with("error: "), "{text}");
        assert!(lines[0].contains(&missing), "names the thing: {text}");
        assert!(lines[0].contains("give the folder"), "says the fix: {text}");
    }
}

#[test]
fn debug_and_bramble_backtrace_print_the_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    let missing = missing_folder(&dir);
    let with_flag = bramble(&["pack", &missing, "--debug"], &[]);
    let with_env = bramble(&["pack", &missing], &[("BRAMBLE_BACKTRACE", "1")]);
    for output in [with_flag, with_env] {
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(1), "{text}");
        assert!(
            text.starts_with(&format!("error: the site folder {missing}")),
            "{text}"
        );
        assert!(text.contains("\nbacktrace:\n"), "{text}");
        // The frame that failed, by its source file: line tables (the dev profile's debug
        // info) name it `run`, full debug info `bramble::pack::run`.
        assert!(text.contains("src/pack/mod.rs"), "{text}");
    }
    let off = bramble(&["pack", &missing], &[("BRAMBLE_BACKTRACE", "0")]);
    assert!(!stderr(&off).contains("backtrace"), "{}", stderr(&off));
}

#[test]
fn every_subcommand_takes_debug() {
    let dir = tempfile::tempdir().unwrap();
    let missing = missing_folder(&dir);
    let card = dir.path().join("card.img");
    let card = card.to_str().unwrap();
    let runs = [
        (
            bramble(&["image", "--debug", "--site", &missing, "-o", card], &[]),
            "src/image.rs",
        ),
        (
            bramble(
                &[
                    "qemu",
                    "--debug",
                    "--no-card",
                    "--no-network",
                    "--kernel",
                    &missing,
                ],
                &[],
            ),
            "src/qemu_cmd.rs",
        ),
        (
            bramble(&["serve", &missing, "--debug", "--port", "0"], &[]),
            "src/serve.rs",
        ),
        (
            bramble(&["flash", &missing, card, "--debug", "--yes"], &[]),
            "src/flash.rs",
        ),
        (
            bramble(&["check", &missing, "--debug", "--hosted"], &[]),
            "src/check",
        ),
    ];
    for (output, frame) in runs {
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(1), "{text}");
        assert!(text.starts_with("error: "), "{text}");
        assert!(text.contains(&missing), "{text}");
        assert!(text.contains("\nbacktrace:\n"), "{text}");
        assert!(text.contains(frame), "{frame}: {text}");
    }
}

#[test]
fn usage_errors_exit_2_and_help_lists_the_exit_codes() {
    for args in [
        &["pack"][..],
        &["pack", "site", "--no-such-flag"],
        &["no-such-command"],
        &["qemu", "--port", "eighty"],
    ] {
        let output = bramble(args, &[]);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).starts_with("error: "),
            "{}",
            stderr(&output)
        );
    }
    let help = bramble(&["--help"], &[]);
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("Exit codes:") && text.contains("2  usage"),
        "{text}"
    );
    assert!(text.contains("--debug"), "{text}");
}

#[test]
fn a_file_given_as_the_site_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("SITE.BIN");
    std::fs::write(&file, b"x").unwrap();
    let output = bramble(&["pack", file.to_str().unwrap()], &[]);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains("is a file, not a folder") && text.contains("--site-image"),
        "{text}"
    );
}

/// A site with a page and a broken symlink `gone.css -> missing.css`.
fn site_with_broken_link(root: &Path) -> std::path::PathBuf {
    let site = root.join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("index.html"), b"<h1>hello</h1>").unwrap();
    symlink("missing.css", site.join("gone.css")).unwrap();
    site
}

#[test]
fn pack_refuses_a_broken_link_unless_told_to_skip_it() {
    let dir = tempfile::tempdir().unwrap();
    let site = site_with_broken_link(dir.path());
    let out = dir.path().join("site.bin");
    let args = ["pack", site.to_str().unwrap(), "-o", out.to_str().unwrap()];
    let refused = bramble(&args, &[]);
    let text = stderr(&refused);
    assert_eq!(refused.status.code(), Some(1), "{text}");
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains("gone.css")
            && text.contains("missing.css")
            && text.contains("--skip-broken-links"),
        "{text}"
    );
    assert!(!out.exists());

    let skipped = bramble(&[&args[..], &["--skip-broken-links"]].concat(), &[]);
    let text = stderr(&skipped);
    assert!(skipped.status.success(), "{text}");
    assert!(text.contains("warning: left out /gone.css"), "{text}");
    let bytes = std::fs::read(&out).unwrap();
    let image = bramble_site::SiteImage::new_checked(&bytes).unwrap();
    assert_eq!(image.file_count(), 1, "only index.html is in the image");
}

#[test]
fn image_skips_a_broken_link_when_told() {
    let dir = tempfile::tempdir().unwrap();
    let site = site_with_broken_link(dir.path());
    // The card needs a kernel file; its content does not matter to `image`.
    let kernel = dir.path().join("kernel.img");
    std::fs::write(&kernel, [0u8; 64]).unwrap();
    let card = dir.path().join("card.img");
    let args = [
        "image",
        "--site",
        site.to_str().unwrap(),
        "--kernel",
        kernel.to_str().unwrap(),
        "-o",
        card.to_str().unwrap(),
    ];
    let refused = bramble(&args, &[]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--skip-broken-links"));
    assert!(!card.exists());
    let made = bramble(&[&args[..], &["--skip-broken-links"]].concat(), &[]);
    assert!(made.status.success(), "{}", stderr(&made));
    assert!(stderr(&made).contains("warning: left out /gone.css"));
    assert!(card.exists());
}

#[test]
fn serve_skips_a_broken_link_when_told() {
    let dir = tempfile::tempdir().unwrap();
    let site = site_with_broken_link(dir.path());
    let refused = bramble(&["serve", site.to_str().unwrap(), "--port", "0"], &[]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--skip-broken-links"));

    let mut child = Command::new(env!("CARGO_BIN_EXE_bramble"))
        .args([
            "serve",
            site.to_str().unwrap(),
            "--port",
            "0",
            "--skip-broken-links",
        ])
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let address = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .map(str::to_string);
    let fetched = address.map(|address| {
        let mut stream = std::net::TcpStream::connect(&address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    });
    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    let answer = fetched.unwrap_or_else(|| panic!("no serving line: {line:?} {err}"));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("<h1>hello</h1>"), "{answer}");
    assert!(err.contains("warning: left out /gone.css"), "{err}");
}
