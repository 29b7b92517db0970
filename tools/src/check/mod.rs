//! `bramble check`: what a CI pipeline wants to know before a card is flashed. The site (a
//! folder, a SITE.BIN, or a card image) is served by the appliance booted in QEMU, or with
//! `--hosted` by the same HTTP engine on this machine, and then:
//!
//! - every file is fetched, once per encoding it has, and its bytes compared with the packed
//!   ones (and, for a folder, with the file on disk);
//! - every HTML page and stylesheet is crawled for same-site references (`href`, `src`,
//!   `srcset`, CSS `url()`), each asked of the server, and those that do not resolve are
//!   reported with the page and line that hold them;
//! - pages heavier than a budget (the page and what it embeds, at the size a browser with
//!   brotli receives) are flagged, and so are a missing 404.html and what the packer left out
//!   (dotfiles, broken symlinks).
//!
//! It prints a table, writes `--json` and `--junit` files, and fails (exit 1) on any error.

pub mod fetch;
pub mod links;
pub mod report;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bramble_site::{FileEntry, Resolved, SiteImage};

use crate::pack::walk::{LeftOut, LeftOutReason};
use fetch::Fetch;
use links::{percent_encode, resolve};

/// Arguments of `bramble check`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// A site folder, a site image made by `bramble pack`, or an SD card image made by
    /// `bramble image` (then the card's own kernel boots).
    pub target: PathBuf,
    /// Serve with the HTTP engine on this machine instead of booting the appliance in QEMU
    /// (the same engine and site image; not the Pi's drivers and network stack).
    #[arg(long)]
    pub hosted: bool,
    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write the results as JUnit XML to FILE (for CI test reports).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Flag pages heavier than this: the page and the images, scripts, stylesheets and CSS
    /// url()s it embeds, each at the size a browser with brotli receives.
    #[arg(long, value_name = "KIB", default_value_t = 1024)]
    pub page_budget: u64,
    /// Pack a folder for speed, not size (see `bramble pack --fast`): for CI runs with a
    /// cold compression cache.
    #[arg(long)]
    pub fast: bool,
    /// In QEMU, boot this kernel.img [default: the card's; for a folder or SITE.BIN, the
    /// kernel `bramble image` would use].
    #[arg(long, value_name = "FILE", conflicts_with = "hosted")]
    pub kernel: Option<PathBuf>,
}

/// How much a finding matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The check fails.
    Error,
    /// Reported; the check still passes.
    Warning,
}

/// One problem found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// How much it matters.
    pub severity: Severity,
    /// What kind of problem (`broken link`, `missing image`, `page over budget`...).
    pub kind: String,
    /// The path it is about.
    pub target: String,
    /// The page that holds the reference, if any.
    pub page: Option<String>,
    /// The page's line, if known.
    pub line: Option<u32>,
    /// What was seen.
    pub detail: String,
}

/// One check, as a CI test report lists it: a suite (`files`, `links`, `budget`, `packer`), a name (usually a path) and its failures (none: it passed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    /// The group.
    pub suite: &'static str,
    /// What was checked.
    pub name: String,
    /// Why it failed; empty when it passed.
    pub failures: Vec<String>,
}

/// Everything a check found.
#[derive(Clone, Debug)]
pub struct CheckReport {
    /// What was checked (the path given).
    pub subject: String,
    /// Which server answered (`QEMU raspi1ap`, `the hosted engine`).
    pub engine: String,
    /// Files in the site image.
    pub files: usize,
    /// HTML pages crawled.
    pub pages: usize,
    /// Same-site references followed.
    pub references: usize,
    /// Bytes compared with the packed bodies.
    pub bytes_compared: u64,
    /// The page budget, in bytes.
    pub budget_bytes: u64,
    /// The problems, errors and warnings.
    pub findings: Vec<Finding>,
    /// Every check, passed or not.
    pub cases: Vec<Case>,
    /// Wall time of the checks (not the boot).
    pub elapsed: Duration,
}

impl CheckReport {
    /// Findings that fail the check.
    pub fn errors(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .count()
    }

    /// Findings that do not.
    pub fn warnings(&self) -> usize {
        self.findings.len() - self.errors()
    }
}

/// The site to check, with what the checks compare against.
#[derive(Debug, Default)]
pub struct Subject {
    /// The path given.
    pub description: String,
    /// For a folder: each URL path's file on disk.
    pub disk: HashMap<String, PathBuf>,
    /// For a folder: what the packer left out.
    pub left_out: Vec<LeftOut>,
}

/// The smallest body a client can get for `entry`: what a browser with brotli receives.
fn transfer_bytes(entry: &FileEntry) -> u64 {
    [Some(entry.identity), entry.gzip, entry.brotli]
        .into_iter()
        .flatten()
        .map(|variant| variant.body.len as u64)
        .min()
        .unwrap_or(0)
}

/// GETs (or HEADs) `path`, following same-site redirects (at most 8). `Ok(None)` when a
/// redirect leaves the site (nothing more to check here).
fn follow(
    server: &mut dyn Fetch,
    method: &str,
    path: &str,
    accept_encoding: &str,
) -> Result<Option<bramble_testkit::Response>, String> {
    let mut path = path.to_string();
    for _ in 0..8 {
        let response = server.fetch(method, &percent_encode(&path), accept_encoding)?;
        if !matches!(response.status, 301 | 302 | 303 | 307 | 308) {
            return Ok(Some(response));
        }
        let location = response
            .header("location")
            .ok_or_else(|| format!("a {} without Location", response.status))?;
        let location = location
            .strip_prefix("http://bramble.check")
            .unwrap_or(location);
        match resolve(&path, location) {
            Some(next) => path = next,
            None => return Ok(None),
        }
    }
    Err("more than 8 redirects".into())
}

/// The body of `response` with its Content-Encoding removed.
fn decoded_body(response: &bramble_testkit::Response) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    match response.header("content-encoding") {
        None | Some("identity") => return Ok(response.body.clone()),
        Some("gzip") => flate2::read::GzDecoder::new(&response.body[..])
            .read_to_end(&mut out)
            .map_err(|e| format!("the gzip body does not decode: {e}"))?,
        Some("br") => brotli::Decompressor::new(&response.body[..], 4096)
            .read_to_end(&mut out)
            .map_err(|e| format!("the brotli body does not decode: {e}"))?,
        Some(other) => return Err(format!("an unknown Content-Encoding {other:?}")),
    };
    Ok(out)
}

/// Where two byte strings first differ, for the message.
fn first_difference(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Does `path` answer (2xx, 304, or a redirect off the site), as the server resolves it?
fn resolves(server: &mut dyn Fetch, path: &str) -> Result<(), String> {
    match follow(server, "HEAD", path, "identity")? {
        None => Ok(()),
        Some(response) if (200..300).contains(&response.status) || response.status == 304 => Ok(()),
        Some(response) => Err(format!("answered {}", response.status)),
    }
}

/// Runs every check of `image` against `server`.
pub fn run_checks(
    image: &SiteImage,
    server: &mut dyn Fetch,
    subject: &Subject,
    engine: &str,
    budget_bytes: u64,
) -> CheckReport {
    let started = Instant::now();
    let mut report = CheckReport {
        subject: subject.description.clone(),
        engine: engine.to_string(),
        files: image.file_count(),
        pages: 0,
        references: 0,
        bytes_compared: 0,
        budget_bytes,
        findings: Vec::new(),
        cases: Vec::new(),
        elapsed: Duration::ZERO,
    };

    // What the packer left out.
    for entry in &subject.left_out {
        match &entry.reason {
            LeftOutReason::Dotfile => report.findings.push(Finding {
                severity: Severity::Warning,
                kind: "left out".into(),
                target: entry.url_path.clone(),
                page: None,
                line: None,
                detail: "a dotfile or dot-folder: not served (pack with --include-dotfiles to \
                         serve it)"
                    .into(),
            }),
            LeftOutReason::BrokenLink { target } => {
                let detail = format!(
                    "a symlink to {}, which does not exist: `bramble pack` refuses it (or \
                     leaves it out with --skip-broken-links)",
                    target.display()
                );
                report.findings.push(Finding {
                    severity: Severity::Error,
                    kind: "broken symlink".into(),
                    target: entry.url_path.clone(),
                    page: None,
                    line: None,
                    detail: detail.clone(),
                });
                report.cases.push(Case {
                    suite: "packer",
                    name: entry.url_path.clone(),
                    failures: vec![detail],
                });
            }
        }
    }

    // A 404 page of the site's own.
    let not_found = image.not_found_page().is_some();
    if !not_found {
        report.findings.push(Finding {
            severity: Severity::Warning,
            kind: "no 404.html".into(),
            target: "/404.html".into(),
            page: None,
            line: None,
            detail: "a missing page gets the engine's plain 404 answer; add a 404.html".into(),
        });
    }

    // Every file, in every encoding, byte for byte.
    for entry in image.files() {
        let expected = image.body(entry.identity.body);
        let mut failures = Vec::new();
        if let Some(on_disk) = subject.disk.get(entry.path) {
            match std::fs::read(on_disk) {
                Ok(bytes) if bytes == expected => {}
                Ok(bytes) => failures.push(format!(
                    "the packed body differs from {} ({} bytes on disk, {} packed)",
                    on_disk.display(),
                    bytes.len(),
                    expected.len()
                )),
                Err(error) => failures.push(format!("cannot read {}: {error}", on_disk.display())),
            }
        }
        let encodings = [
            ("identity", true),
            ("gzip", entry.gzip.is_some()),
            ("br", entry.brotli.is_some()),
        ];
        for (encoding, present) in encodings {
            if !present {
                continue;
            }
            match follow(server, "GET", entry.path, encoding) {
                Ok(Some(response)) if response.status == 200 => match decoded_body(&response) {
                    Ok(body) if body == expected => {
                        report.bytes_compared += body.len() as u64;
                    }
                    Ok(body) => failures.push(format!(
                        "{encoding}: {} bytes served, {} packed, first difference at byte {}",
                        body.len(),
                        expected.len(),
                        first_difference(&body, expected)
                    )),
                    Err(why) => failures.push(format!("{encoding}: {why}")),
                },
                Ok(Some(response)) => failures.push(format!(
                    "{encoding}: answered {} instead of 200",
                    response.status
                )),
                Ok(None) => failures.push(format!("{encoding}: redirected off the site")),
                Err(why) => failures.push(format!("{encoding}: {why}")),
            }
        }
        for failure in &failures {
            report.findings.push(Finding {
                severity: Severity::Error,
                kind: "not served as packed".into(),
                target: entry.path.to_string(),
                page: None,
                line: None,
                detail: failure.clone(),
            });
        }
        report.cases.push(Case {
            suite: "files",
            name: entry.path.to_string(),
            failures,
        });
    }

    // Every page's and stylesheet's same-site references.
    let mut answers: HashMap<String, Result<(), String>> = HashMap::new();
    for entry in image.files() {
        let html = entry.content_type.starts_with("text/html")
            || entry.content_type.starts_with("application/xhtml+xml");
        let css = entry.content_type.starts_with("text/css");
        if !html && !css {
            continue;
        }
        let text = String::from_utf8_lossy(image.body(entry.identity.body));
        let references = if html {
            links::html_references(&text)
        } else {
            links::css_references(&text)
        };
        let mut failures = Vec::new();
        let mut weight = transfer_bytes(&entry);
        let mut counted: HashSet<String> = HashSet::new();
        for reference in references {
            let Some(path) = resolve(entry.path, &reference.url) else {
                continue;
            };
            report.references += 1;
            let answer = answers
                .entry(path.clone())
                .or_insert_with(|| resolves(server, &path));
            match answer {
                Err(why) => {
                    let kind = reference.kind.missing();
                    failures.push(format!(
                        "line {}: {kind} {} ({why})",
                        reference.line, reference.url
                    ));
                    report.findings.push(Finding {
                        severity: Severity::Error,
                        kind: kind.into(),
                        target: path,
                        page: Some(entry.path.to_string()),
                        line: Some(reference.line),
                        detail: format!("{:?} {why}", reference.url),
                    });
                }
                Ok(()) => {
                    if html && reference.kind.is_embedded() && counted.insert(path.clone()) {
                        let lookup = if path.ends_with('/') {
                            image.resolve(&path)
                        } else {
                            match image.get(&path) {
                                Some(file) => Resolved::File(file),
                                None => image.resolve(&format!("{path}/")),
                            }
                        };
                        if let Resolved::File(file) = lookup {
                            weight += transfer_bytes(&file);
                        }
                    }
                }
            }
        }
        report.cases.push(Case {
            suite: "links",
            name: entry.path.to_string(),
            failures,
        });
        if !html {
            continue;
        }
        report.pages += 1;
        let mut over = Vec::new();
        if weight > budget_bytes {
            let detail = format!(
                "{} KiB with what it embeds, over the budget of {} KiB",
                weight.div_ceil(1024),
                budget_bytes / 1024
            );
            over.push(detail.clone());
            report.findings.push(Finding {
                severity: Severity::Error,
                kind: "page over budget".into(),
                target: entry.path.to_string(),
                page: Some(entry.path.to_string()),
                line: None,
                detail,
            });
        }
        report.cases.push(Case {
            suite: "budget",
            name: entry.path.to_string(),
            failures: over,
        });
    }
    report.elapsed = started.elapsed();
    report
}

/// A QEMU guest serving a card, killed by PID when dropped.
struct Guest {
    child: Child,
    port: u16,
    /// The board-rules judge, with `BRAMBLE_BOARD_RULES=on`.
    judge: Option<crate::board_rules::Judge>,
}

impl Guest {
    /// Stops QEMU and, if it ran under the board-rules judge, fails on a violation: SIGTERM
    /// first, so that the plugin writes its totals, and SIGKILL (on drop) after 5 s.
    fn stop_and_judge(mut self) -> anyhow::Result<()> {
        let Some(judge) = self.judge.take() else {
            return Ok(());
        };
        crate::qemu_cmd::terminate(self.child.id());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(self);
        judge.check()
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free TCP port on 127.0.0.1 (free now; QEMU binds it a moment later).
fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// Boots `kernel` with `card` in QEMU (user-mode networking, port 80 forwarded to a free
/// 127.0.0.1 port) and waits until the kernel says it serves.
fn boot(kernel: &Path, card: &Path) -> anyhow::Result<Guest> {
    let qemu = bramble_qemu::find_qemu().map_err(anyhow::Error::msg)?;
    let port = free_port()?;
    let machine = bramble_qemu::Machine::Raspi1ap;
    let mut config =
        bramble_qemu::QemuConfig::new(machine, bramble_qemu::Kernel::Raw(kernel.to_path_buf()));
    config.sd_card = Some(card.to_path_buf());
    config.network = Some(bramble_qemu::Network::User {
        host_port: port,
        topology: bramble_qemu::Topology::BehindHub,
    });
    let judge = crate::board_rules::attach(&mut config)?;
    let mut child = Command::new(qemu)
        .args(config.args())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting QEMU")?;
    let stdout = child.stdout.take().expect("piped");
    let mut guest = Guest { child, port, judge };
    let (lines, receive) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut transcript = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match receive.recv_timeout(left) {
            Ok(line) => {
                let serving = line.contains("serving: http://");
                transcript.push(line);
                if serving {
                    return Ok(guest);
                }
                if transcript.len() > 2000 {
                    transcript.remove(0);
                }
            }
            Err(_) => {
                let status = guest.child.try_wait().ok().flatten();
                let tail = transcript[transcript.len().saturating_sub(20)..].join("\n");
                anyhow::bail!(
                    "the appliance did not start serving in QEMU ({}); the serial console \
                     ended with:\n{tail}",
                    match status {
                        Some(status) => format!("QEMU exited: {status}"),
                        None => "no `serving:` line within 180 s".into(),
                    }
                );
            }
        }
    }
}

/// What to serve: the site image and, for QEMU, the card to boot.
struct Prepared {
    subject: Subject,
    image: Vec<u8>,
    /// A card image to boot, and the kernel to boot with it.
    card: Option<(PathBuf, PathBuf)>,
    /// Temporary files that must live as long as the guest.
    _scratch: Option<tempfile::TempDir>,
}

fn prepare(args: &CheckArgs) -> anyhow::Result<Prepared> {
    let target = &args.target;
    let mut subject = Subject {
        description: target.display().to_string(),
        ..Subject::default()
    };
    let scratch = || tempfile::Builder::new().prefix("bramble-check-").tempdir();
    let built_kernel = |scratch: &Path| -> anyhow::Result<PathBuf> {
        match &args.kernel {
            Some(path) => Ok(path.clone()),
            None => {
                let path = scratch.join("kernel.img");
                std::fs::write(&path, crate::kernel::kernel_image()?)?;
                Ok(path)
            }
        }
    };
    let card_for = |image: &[u8], scratch: &Path| -> anyhow::Result<(PathBuf, PathBuf)> {
        let kernel = built_kernel(scratch)?;
        let card = scratch.join("card.img");
        let inputs = crate::image::ImageInputs {
            kernel: crate::image::read_kernel(&kernel)?,
            site: image.to_vec(),
            settings: bramble_settings::TEMPLATE.to_string(),
            firmware: Vec::new(),
            size_mib: None,
            tls: None,
        };
        crate::image::build_image(&inputs, &card)?;
        Ok((card, kernel))
    };
    if target.is_dir() {
        let mut options = crate::pack::PackOptions::from_env()?;
        options.skip_broken_links = true;
        if args.fast {
            options.effort = crate::pack::compress::Effort::Fast;
        }
        let packed = crate::pack::pack_site(target, &options)
            .with_context(|| format!("packing {}", target.display()))?;
        let walked = crate::pack::walk::walk_with(
            target,
            &crate::pack::walk::WalkOptions {
                include_dotfiles: false,
                skip_broken_links: true,
            },
        )?;
        subject.disk = walked
            .files
            .into_iter()
            .map(|file| (file.url_path, file.fs_path))
            .collect();
        subject.left_out = packed.left_out.clone();
        let (card, scratch) = if args.hosted {
            (None, None)
        } else {
            let dir = scratch()?;
            (Some(card_for(&packed.image, dir.path())?), Some(dir))
        };
        return Ok(Prepared {
            subject,
            image: packed.image,
            card,
            _scratch: scratch,
        });
    }
    if crate::image::card::is_card_image(target) {
        let site = crate::image::card::read_boot_file(target, crate::image::SITE_NAME)?
            .with_context(|| {
                format!(
                    "{} has no {} on its boot partition: make the card with `bramble image`",
                    target.display(),
                    crate::image::SITE_NAME
                )
            })?;
        let (card, scratch) = if args.hosted {
            (None, None)
        } else {
            let dir = scratch()?;
            let kernel = match &args.kernel {
                Some(path) => path.clone(),
                None => {
                    let (name, bytes) = crate::image::card::read_kernel(target)?;
                    eprintln!(
                        "kernel: {name} from {}: {}",
                        target.display(),
                        crate::kernel::kernel_id(&bytes)
                            .as_deref()
                            .unwrap_or("not a Bramble kernel this tool recognises")
                    );
                    let path = dir.path().join("kernel.img");
                    std::fs::write(&path, bytes)?;
                    path
                }
            };
            (Some((target.clone(), kernel)), Some(dir))
        };
        return Ok(Prepared {
            subject,
            image: site,
            card,
            _scratch: scratch,
        });
    }
    let image = crate::image::read_site_image(target).map_err(|error| {
        anyhow::anyhow!(
            "{error}. `bramble check` takes a site folder, a SITE.BIN or a card image made \
             by `bramble image`"
        )
    })?;
    let (card, scratch) = if args.hosted {
        (None, None)
    } else {
        let dir = scratch()?;
        (Some(card_for(&image, dir.path())?), Some(dir))
    };
    Ok(Prepared {
        subject,
        image,
        card,
        _scratch: scratch,
    })
}

/// Runs `bramble check`.
pub fn run(args: CheckArgs) -> anyhow::Result<()> {
    let prepared = prepare(&args)?;
    let image = SiteImage::new_checked(&prepared.image)
        .map_err(|error| anyhow::anyhow!("the site image does not read back: {error}"))?;
    let budget = args.page_budget.saturating_mul(1024);
    let report = match &prepared.card {
        None => {
            let mut server = fetch::Hosted::new(image);
            run_checks(
                &image,
                &mut server,
                &prepared.subject,
                "the hosted engine",
                budget,
            )
        }
        Some((card, kernel)) => {
            eprintln!("booting the appliance in QEMU to serve {}", card.display());
            let guest = boot(kernel, card)?;
            let address = SocketAddr::from((Ipv4Addr::LOCALHOST, guest.port));
            let mut server = fetch::Tcp::new(address, Duration::from_secs(30));
            let report = run_checks(
                &image,
                &mut server,
                &prepared.subject,
                "QEMU raspi1ap",
                budget,
            );
            guest.stop_and_judge()?;
            report
        }
    };
    print!("{}", report::table(&report));
    if let Some(path) = &args.json {
        std::fs::write(path, report::json(&report))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, report::junit(&report))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if report.errors() > 0 {
        anyhow::bail!(
            "the check of {} failed: {} problem{} (listed above)",
            report.subject,
            report.errors(),
            if report.errors() == 1 { "" } else { "s" }
        );
    }
    Ok(())
}
