//! Headless Chromium for the browser tests: find it, run it bounded on a URL (its process
//! group killed by id if it overruns), read a screenshot's pixels.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The longest one Chromium run may take before it is killed and the test fails.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(120);

/// The Chromium on PATH. Panics, saying how to install it, when there is none: tools/setup.sh
/// installs Debian's `chromium`, and a skipped browser stage would pass unnoticed in CI.
pub fn find_chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "chromium is not on PATH: run tools/setup.sh (it installs the Debian package \
                 `chromium`)"
            )
        })
}

/// Runs Chromium headless on `url` with a fresh profile and `extra` arguments; waits for it
/// (bounded) and returns its output. Chromium runs in its own process group, which is killed
/// by that id if it overruns.
pub fn run_chromium(chromium: &Path, profile: &Path, url: &str, extra: &[&str]) -> Output {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(chromium);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-dev-shm-usage",
            "--no-proxy-server",
            // Nothing but 127.0.0.1 resolves: the test never leaves the machine.
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            "--hide-scrollbars",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = command.spawn().expect("start chromium");
    let pid = child.id();
    let started = Instant::now();
    // Read both pipes on threads so a chatty browser cannot block on a full pipe.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut buffer = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut buffer);
        buffer
    });
    let err = std::thread::spawn(move || {
        let mut buffer = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stderr, &mut buffer);
        buffer
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for chromium") {
            break status;
        }
        if started.elapsed() > BROWSER_TIMEOUT {
            // Kill the browser's own process group (its id is the browser's PID).
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
            let _ = child.wait();
            panic!("chromium did not finish within {BROWSER_TIMEOUT:?} on {url}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// The pixels of a PNG as RGB triples.
pub fn decode_rgb(png_bytes: &[u8]) -> Vec<[u8; 3]> {
    let mut decoder = png::Decoder::new(png_bytes);
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().expect("a PNG header");
    let mut buffer = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buffer).expect("PNG pixels");
    let channels = info.color_type.samples();
    buffer[..info.buffer_size()]
        .chunks(channels)
        .filter(|p| p.len() >= 3)
        .map(|p| [p[0], p[1], p[2]])
        .collect()
}
