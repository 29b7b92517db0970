//! The flag audit: every flag a `bramble` subcommand's `--help` lists is driven through the
//! real binary by some test of that subcommand. This file drives the ones no other test file
//! does (`--version`, `pack --fast --include-dotfiles`, `image --fast --size --firmware -o`,
//! `check --fast`, `flash --force`, `qemu --machine raspi0 --root-port --elf`, `qemu --config
//! --tls-cert --tls-key --https-port`, `qemu --nic smsc95xx --model-log --model-control`),
//! and [`every_flag_each_subcommand_lists_is_driven_by_a_test_of_that_subcommand`] fails when
//! a subcommand lists a flag that no test under tools/tests passes to the binary together
//! with that subcommand (it reads the tests' sources: see [`driven_pairs`] for what counts).

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bramble::pack::compress::{Effort, Encoding};

fn bramble() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bramble"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A page big enough to get compressed variants.
fn page(title: &str) -> Vec<u8> {
    let mut html = format!("<!doctype html><title>{title}</title>\n");
    for i in 0..60 {
        html.push_str(&format!(
            "<p>Paragraph {i} of {title}, long enough that brotli's settings show.</p>\n"
        ));
    }
    html.into_bytes()
}

fn site(dir: &Path) -> PathBuf {
    let site = dir.join("site");
    fs::create_dir_all(&site).unwrap();
    fs::write(site.join("index.html"), page("home")).unwrap();
    fs::write(site.join("404.html"), page("not found")).unwrap();
    fs::write(site.join(".hidden"), b"a dotfile").unwrap();
    site
}

/// The brotli body the packed image holds for `path`.
fn brotli_body(image: &[u8], path: &str) -> Vec<u8> {
    let image = bramble_site::SiteImage::new_checked(image).expect("a valid site image");
    let file = image
        .get(path)
        .unwrap_or_else(|| panic!("{path} is packed"));
    let variant = file.brotli.expect("a brotli variant");
    image.body(variant.body).to_vec()
}

#[test]
fn version_names_the_tool_and_the_kernel_it_uses() {
    let output = bramble().arg("--version").output().unwrap();
    assert!(output.status.success());
    let stdout = text(&output.stdout);
    let mut lines = stdout.lines();
    let first = lines.next().unwrap_or_default();
    assert!(
        first.starts_with(&format!("bramble {} (", env!("CARGO_PKG_VERSION"))),
        "{stdout}"
    );
    // A debug build carries no kernel (build.rs embeds one in release builds only) and says
    // where it gets one instead.
    let second = lines.next().unwrap_or_default();
    assert!(
        second.starts_with("kernel: none embedded; built from the source tree"),
        "{stdout}"
    );
}

#[test]
fn pack_fast_and_include_dotfiles() {
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path());
    let pack = |extra: &[&str], name: &str| {
        let output_path = dir.path().join(name);
        let output = bramble()
            .arg("pack")
            .arg(&site)
            .arg("--output")
            .arg(&output_path)
            .arg("--no-cache")
            .args(extra)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output.stderr));
        fs::read(output_path).unwrap()
    };
    let index = page("home");
    let thorough = pack(&[], "thorough.bin");
    let fast = pack(&["--fast"], "fast.bin");
    assert_eq!(
        brotli_body(&thorough, "/index.html"),
        Encoding::Brotli.compress_with(&index, Effort::Thorough)
    );
    assert_eq!(
        brotli_body(&fast, "/index.html"),
        Encoding::Brotli.compress_with(&index, Effort::Fast)
    );
    assert_ne!(
        Encoding::Brotli.compress_with(&index, Effort::Thorough),
        Encoding::Brotli.compress_with(&index, Effort::Fast)
    );
    let has_dotfile = |image: &[u8]| {
        bramble_site::SiteImage::new_checked(image)
            .unwrap()
            .get("/.hidden")
            .is_some()
    };
    assert!(!has_dotfile(&thorough));
    assert!(has_dotfile(&pack(&["--include-dotfiles"], "dot.bin")));
}

/// Copies one file out of the card's FAT partition with mtools.
fn read_from_card(card: &Path, name: &str, scratch: &Path) -> Vec<u8> {
    let out = scratch.join(format!("from-card-{name}"));
    let partition = format!("{}@@1M", card.display());
    let status = Command::new("mcopy")
        .args(["-n", "-i", &partition, &format!("::{name}")])
        .arg(&out)
        .env("MTOOLS_SKIP_CHECK", "1")
        .status()
        .expect("run mcopy (tools/setup.sh installs mtools)");
    assert!(status.success(), "mcopy {name}");
    fs::read(out).unwrap()
}

#[test]
fn image_fast_size_and_firmware() {
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path());
    let kernel = dir.path().join("kernel.img");
    fs::write(&kernel, [0x5au8; 4096]).unwrap();
    let firmware = dir.path().join("firmware");
    fs::create_dir_all(&firmware).unwrap();
    for (index, file) in bramble::firmware::FILES.iter().enumerate() {
        fs::write(firmware.join(file.name), vec![index as u8; 1000 + index]).unwrap();
    }
    let card = dir.path().join("card.img");
    let output = bramble()
        .args(["image", "--fast", "--size", "64", "--site"])
        .arg(&site)
        .arg("--kernel")
        .arg(&kernel)
        .arg("--firmware")
        .arg(&firmware)
        .arg("--firmware-unpinned")
        .arg("-o")
        .arg(&card)
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("NOT checked against any pinned release"),
        "{}",
        text(&output.stderr)
    );
    assert_eq!(fs::metadata(&card).unwrap().len(), 64 << 20, "--size 64");
    for (index, file) in bramble::firmware::FILES.iter().enumerate() {
        assert_eq!(
            read_from_card(&card, file.name, dir.path()),
            vec![index as u8; 1000 + index],
            "{} from --firmware",
            file.name
        );
    }
    let site_image = read_from_card(&card, "SITE.BIN", dir.path());
    assert_eq!(
        brotli_body(&site_image, "/index.html"),
        Encoding::Brotli.compress_with(&page("home"), Effort::Fast),
        "--fast"
    );
}

/// A new card's BRAMBLE.TXT carries its own random `ipv6_secret`; a reproducible image
/// (`SOURCE_DATE_EPOCH`) keeps the template's `board`.
#[test]
fn image_draws_an_ipv6_secret_per_card_unless_reproducible() {
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path());
    let kernel = dir.path().join("kernel.img");
    fs::write(&kernel, [0x5au8; 4096]).unwrap();
    let secret_of = |name: &str, epoch: Option<&str>| {
        let card = dir.path().join(name);
        let mut command = bramble();
        command
            .args(["image", "--fast", "--site"])
            .arg(&site)
            .arg("--kernel")
            .arg(&kernel)
            .arg("-o")
            .arg(&card)
            .env("XDG_CACHE_HOME", dir.path().join("cache"))
            .env_remove("SOURCE_DATE_EPOCH");
        if let Some(epoch) = epoch {
            command.env("SOURCE_DATE_EPOCH", epoch);
        }
        let output = command.output().unwrap();
        assert!(output.status.success(), "{}", text(&output.stderr));
        let settings = read_from_card(&card, "BRAMBLE.TXT", dir.path());
        bramble_settings::Settings::parse(&text(&settings))
            .expect("the card's BRAMBLE.TXT parses")
            .ipv6_secret
    };
    let first = secret_of("one.img", None).expect("a new card has its own secret");
    let second = secret_of("two.img", None).expect("a new card has its own secret");
    assert_ne!(first, second, "each card draws its own");
    assert_ne!(first, [0u8; 16]);
    assert_eq!(secret_of("same.img", Some("1700000000")), None);
}

/// `bramble image --firmware DIR` with `DIR` holding files that are no known release's.
fn image_with_firmware(dir: &Path, firmware: &Path) -> std::process::Output {
    let site = site(dir);
    let kernel = dir.join("kernel.img");
    fs::write(&kernel, [0x5au8; 4096]).unwrap();
    bramble()
        .args(["image", "--fast", "--site"])
        .arg(&site)
        .arg("--kernel")
        .arg(&kernel)
        .arg("--firmware")
        .arg(firmware)
        .arg("-o")
        .arg(dir.join("card.img"))
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .output()
        .unwrap()
}

#[test]
fn image_firmware_from_a_folder_must_be_a_pinned_release() {
    let dir = tempfile::tempdir().unwrap();
    let firmware = dir.path().join("firmware");
    fs::create_dir_all(&firmware).unwrap();
    for (index, file) in bramble::firmware::FILES.iter().enumerate() {
        fs::write(firmware.join(file.name), vec![index as u8; 1000 + index]).unwrap();
    }
    let output = image_with_firmware(dir.path(), &firmware);
    assert!(!output.status.success());
    let message = text(&output.stderr);
    assert!(message.contains("bootcode.bin: SHA-256 is"), "{message}");
    assert!(message.contains("--firmware-unpinned"), "{message}");
    assert!(!dir.path().join("card.img").exists(), "no card on an error");
}

/// Debian 12's raspi-firmware files (the offline source): from `BRAMBLE_DEBIAN_FIRMWARE_DIR`,
/// else /usr/lib/raspi-firmware where the package installs them (`apt-get download
/// raspi-firmware` and `dpkg-deb -x` give them without installing); skipped without either.
#[test]
fn image_takes_debian_12_raspi_firmware_and_names_a_changed_file() {
    let source = std::env::var_os("BRAMBLE_DEBIAN_FIRMWARE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/raspi-firmware"));
    if !source.join("start_cd.elf").is_file() {
        eprintln!("{}: no raspi-firmware files; skipping", source.display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let firmware = dir.path().join("firmware");
    fs::create_dir_all(&firmware).unwrap();
    for file in &bramble::firmware::DEBIAN_12_FILES {
        fs::copy(source.join(file.name), firmware.join(file.name)).unwrap();
    }
    let output = image_with_firmware(dir.path(), &firmware);
    let message = text(&output.stderr);
    assert!(output.status.success(), "{message}");
    assert!(message.contains("release 1.20220830"), "{message}");
    let card = dir.path().join("card.img");
    for file in &bramble::firmware::DEBIAN_12_FILES {
        assert_eq!(
            read_from_card(&card, file.name, dir.path()),
            fs::read(firmware.join(file.name)).unwrap(),
            "{}",
            file.name
        );
    }
    let config = String::from_utf8(read_from_card(&card, "config.txt", dir.path())).unwrap();
    assert!(
        config.contains("\ngpu_mem=16\n"),
        "with the cut-down pair: {config}"
    );

    // One changed byte: the error names the file.
    fs::remove_file(&card).unwrap();
    let mut start = fs::read(firmware.join("start.elf")).unwrap();
    start[1000] ^= 1;
    fs::write(firmware.join("start.elf"), start).unwrap();
    let output = image_with_firmware(dir.path(), &firmware);
    assert!(!output.status.success());
    let message = text(&output.stderr);
    assert!(
        message.contains(&format!(
            "{}: SHA-256 is",
            firmware.join("start.elf").display()
        )),
        "{message}"
    );
    assert!(message.contains("1.20220830"), "{message}");
}

#[test]
fn check_fast_packs_for_speed_and_passes_a_clean_site() {
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path());
    let json = dir.path().join("report.json");
    let output = bramble()
        .args(["check", "--hosted", "--fast", "--json"])
        .arg(&json)
        .arg(&site)
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stdout));
    // The cache holds what was compressed: fast settings only.
    let mut suffixes: Vec<String> = Vec::new();
    let mut stack = vec![dir.path().join("cache")];
    while let Some(folder) = stack.pop() {
        for entry in fs::read_dir(&folder).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Some(extension) = path.extension() {
                suffixes.push(extension.to_string_lossy().into_owned());
            }
        }
    }
    suffixes.sort();
    suffixes.dedup();
    // The site's two pages are under 16 KiB: quality 6.
    assert_eq!(suffixes, ["br6w22", "gz6"], "only fast settings were used");
}

#[test]
fn flash_force_writes_to_a_target_it_would_otherwise_check() {
    // A regular file is no disk; --force skips the disk checks, --yes the question.
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("card.img");
    let target = dir.path().join("target.img");
    let bytes: Vec<u8> = (0..2u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(&image, &bytes).unwrap();
    fs::write(&target, vec![0u8; 4 << 20]).unwrap();
    let output = bramble()
        .args(["flash", "--force", "--yes"])
        .arg(&image)
        .arg(&target)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(&fs::read(&target).unwrap()[..bytes.len()], &bytes[..]);
}

/// A `bramble qemu` started by a test: its stdout and stderr lines as they come, stopped
/// (SIGTERM to its PID, which QEMU's runner turns into a clean stop) when dropped.
struct Running {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    transcript: Vec<String>,
}

impl Running {
    fn start(mut command: Command) -> Running {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run bramble qemu");
        let (send, lines) = std::sync::mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let send = send.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let _ = send.send(line);
                }
            });
        }
        Running {
            child,
            lines,
            transcript: Vec::new(),
        }
    }

    /// Waits (at most `limit`) for a line containing `needle`; panics with the transcript
    /// if none comes or the tool exits first.
    fn expect_line(&mut self, needle: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            while let Ok(line) = self.lines.try_recv() {
                self.transcript.push(line);
            }
            if let Some(line) = self.transcript.iter().find(|line| line.contains(needle)) {
                return line.clone();
            }
            if Instant::now() > deadline || matches!(self.child.try_wait(), Ok(Some(_))) {
                panic!("no line with {needle:?}:\n{}", self.transcript.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log(&mut self) -> String {
        while let Ok(line) = self.lines.try_recv() {
            self.transcript.push(line);
        }
        self.transcript.join("\n")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kernel build (when the tree's kernel changed, shared with the other QEMU tests) and boot.
const BOOT_LIMIT: Duration = Duration::from_secs(600);

/// One HTTP/1.1 GET of `/` on 127.0.0.1:`port`: the whole answer.
fn get_root(port: u16) -> Vec<u8> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer
}

#[test]
fn qemu_raspi0_root_port_elf_serves_the_site() {
    if bramble_qemu::find_qemu().is_err() {
        eprintln!("skipped: qemu-system-arm is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path());
    let port = free_port();
    let mut command = bramble();
    command
        .args([
            "qemu",
            "--machine",
            "raspi0",
            "--root-port",
            "--elf",
            "--site",
        ])
        .arg(&site)
        .args(["--port", &port.to_string()])
        .env("XDG_CACHE_HOME", dir.path().join("cache"));
    let mut qemu = Running::start(command);
    qemu.expect_line("serving: http://", BOOT_LIMIT);
    let answer = get_root(port);
    let log = qemu.log();
    assert!(answer.ends_with(&page("home")), "{}\n{log}", text(&answer));
    assert!(log.contains("booting raspi0 in QEMU"), "{log}");
}

#[test]
fn qemu_config_tls_and_https_port_serve_https_with_the_cards_settings() {
    if bramble_qemu::find_qemu().is_err() {
        eprintln!("skipped: qemu-system-arm is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path());
    let config = dir.path().join("BRAMBLE.TXT");
    // A setting only the card's BRAMBLE.TXT can make: HSTS on HTTPS answers.
    fs::write(&config, "hsts = 600\n").unwrap();
    let tls = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernel/tls/tests/data");
    let (port, https_port) = (free_port(), free_port());
    let mut command = bramble();
    command
        .args(["qemu", "--site"])
        .arg(&site)
        .arg("--config")
        .arg(&config)
        .arg("--tls-cert")
        .arg(tls.join("p256.pem"))
        .arg("--tls-key")
        .arg(tls.join("p256.key"))
        .args(["--port", &port.to_string()])
        .args(["--https-port", &https_port.to_string()])
        .env("XDG_CACHE_HOME", dir.path().join("cache"));
    let mut qemu = Running::start(command);
    qemu.expect_line("serving: http://", BOOT_LIMIT);
    // curl (tools/setup.sh) speaks TLS to the guest; -k: the test certificate's name and
    // issuer are not this host's.
    let output = Command::new("curl")
        .args(["-k", "-s", "-i", "--max-time", "120"])
        .arg(format!("https://127.0.0.1:{https_port}/"))
        .output()
        .expect("run curl (tools/setup.sh installs it)");
    let answer = text(&output.stdout);
    let log = qemu.log();
    assert!(
        output.status.success(),
        "curl: {}\n{log}",
        text(&output.stderr)
    );
    // ALPN offers h2 first, so curl may speak HTTP/2 (doc/http2.md).
    assert!(
        answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/2 200"),
        "{answer}\n{log}"
    );
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("strict-transport-security: max-age=600"),
        "--config's hsts reached the guest: {answer}\n{log}"
    );
    assert!(answer.ends_with(&text(&page("home"))), "{answer}");
}

#[test]
fn qemu_smsc95xx_model_log_and_control() {
    if bramble_qemu::find_qemu().is_err() {
        eprintln!("skipped: qemu-system-arm is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model_log = dir.path().join("registers.log");
    let control = dir.path().join("control.sock");
    let mut command = bramble();
    command
        .args(["qemu", "--no-card", "--nic", "smsc95xx", "--model-log"])
        .arg(&model_log)
        .arg("--model-control")
        .arg(&control)
        .env("XDG_CACHE_HOME", dir.path().join("cache"));
    let mut qemu = Running::start(command);
    // The guest finds the model's chip; its cable goes nowhere (no --tap).
    qemu.expect_line("usb: device 0424:ec00", BOOT_LIMIT);
    // The driver's bring-up (resets, MAC, PHY set-up) is what fills the register log.
    qemu.expect_line("network device ready", BOOT_LIMIT);
    let noted = bramble_usbredir::run::send_command(&control, "note from the flag audit")
        .expect("the model's control socket answers");
    assert_eq!(noted, "ok");
    let stats = bramble_usbredir::run::send_command(&control, "stats").unwrap();
    assert!(stats.contains("tx_errors"), "{stats}");
    drop(qemu);
    let log = fs::read_to_string(&model_log).expect("the model's register log");
    assert!(log.contains("from the flag audit"), "{log}");
    assert!(log.lines().count() > 10, "registers were logged: {log}");
}

/// A flag `bramble SUBCOMMAND --help` lists: its long name and its short one, if any.
#[derive(Debug)]
struct HelpFlag {
    long: String,
    short: Option<String>,
}

/// The flags `bramble SUBCOMMAND --help` lists, but `--help` itself (which
/// [`every_flag_each_subcommand_lists_is_driven_by_a_test_of_that_subcommand`] drives for every
/// subcommand to get the list).
fn flags_of(subcommand: &str) -> Vec<HelpFlag> {
    let output = bramble().args([subcommand, "--help"]).output().unwrap();
    assert!(output.status.success(), "bramble {subcommand} --help");
    let mut flags: Vec<HelpFlag> = text(&output.stdout)
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let (short, long) = match line.strip_prefix('-').filter(|rest| !rest.starts_with('-')) {
                Some(rest) => {
                    let (short, long) = rest.split_once(", ")?;
                    (Some(format!("-{short}")), long)
                }
                None => (None, line),
            };
            let long = long.strip_prefix("--")?;
            let long = long.split([' ', '=', '<']).next().unwrap_or("");
            (!long.is_empty() && long != "help").then(|| HelpFlag {
                long: format!("--{long}"),
                short,
            })
        })
        .collect();
    flags.sort_by(|a, b| a.long.cmp(&b.long));
    flags.dedup_by(|a, b| a.long == b.long);
    flags
}

/// A token of Rust source, as far as the audit needs one: string literals (their contents,
/// escapes as written), identifiers, and single punctuation characters; comments, char
/// literals, lifetimes and numbers are dropped.
#[derive(Clone, Debug, PartialEq)]
enum Token {
    Text(String),
    Ident(String),
    Punct(char),
}

fn tokens(source: &str) -> Vec<Token> {
    let bytes = source.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        let rest = &source[at..];
        if rest.starts_with("//") {
            at += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            at += rest.find("*/").map_or(rest.len(), |end| end + 2);
        } else if byte == b'"' || rest.starts_with("r\"") || rest.starts_with("r#") {
            // A string literal, plain or raw (r"..", r#".."#).
            let hashes = if byte == b'r' {
                rest[1..].bytes().take_while(|&b| b == b'#').count()
            } else {
                0
            };
            let open = if byte == b'r' { 2 + hashes } else { 1 };
            let closing = format!("\"{}", "#".repeat(hashes));
            let mut end = open;
            loop {
                match rest[end..].find(if byte == b'r' { &closing[..] } else { "\"" }) {
                    None => {
                        end = rest.len();
                        break;
                    }
                    Some(found) => {
                        let quote = end + found;
                        let escaped = byte != b'r'
                            && rest[..quote]
                                .bytes()
                                .rev()
                                .take_while(|&b| b == b'\\')
                                .count()
                                % 2
                                == 1;
                        end = quote + 1;
                        if !escaped {
                            out.push(Token::Text(rest[open..quote].to_string()));
                            end += hashes;
                            break;
                        }
                    }
                }
            }
            at += end;
        } else if byte == b'\'' {
            // A char literal ('"', '\'', 'x') or a lifetime ('a): skip either.
            let char_literal = rest[1..]
                .char_indices()
                .find(|&(index, c)| c == '\'' && (index > 1 || !rest[1..].starts_with('\\')))
                .filter(|&(index, _)| index <= 10);
            at += char_literal.map_or(1, |(index, _)| index + 2);
        } else if byte.is_ascii_alphabetic() || byte == b'_' {
            let len = rest
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                .count();
            out.push(Token::Ident(rest[..len].to_string()));
            at += len;
        } else if byte.is_ascii_digit() || byte.is_ascii_whitespace() {
            at += 1;
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(Token::Punct(c));
            at += c.len_utf8();
        }
    }
    out
}

const SUBCOMMANDS: [&str; 8] = [
    "pack", "image", "qemu", "serve", "flash", "check", "keygen", "publish",
];

fn is_punct(token: Option<&Token>, c: char) -> bool {
    token == Some(&Token::Punct(c))
}

fn is_ident(token: Option<&Token>, name: &str) -> bool {
    matches!(token, Some(Token::Ident(ident)) if ident == name)
}

/// The subcommand a string literal at `at` starts, if it is the first argument of a command:
/// `.arg("pack")`, `.args(["pack", ..])`, or a helper's `name(&["pack", ..])`.
fn subcommand_at(tokens: &[Token], at: usize) -> Option<&'static str> {
    let Token::Text(text) = &tokens[at] else {
        return None;
    };
    let subcommand = SUBCOMMANDS.iter().find(|name| *name == text)?;
    let before = |back: usize| at.checked_sub(back).and_then(|index| tokens.get(index));
    let first_argument = (is_punct(before(1), '(') && is_ident(before(2), "arg"))
        || (is_punct(before(1), '[') && is_punct(before(2), '(') && is_ident(before(3), "args"))
        || (is_punct(before(1), '[')
            && is_punct(before(2), '&')
            && is_punct(before(3), '(')
            && matches!(before(4), Some(Token::Ident(_))))
        || bound_array(tokens, at).is_some();
    first_argument.then_some(*subcommand)
}

/// The variable an argument list at `at` is bound to, if it is one: `let name = ["pack", ..];`.
fn bound_array(tokens: &[Token], at: usize) -> Option<&str> {
    let before = |back: usize| at.checked_sub(back).and_then(|index| tokens.get(index));
    if !is_punct(before(1), '[') || !is_punct(before(2), '=') {
        return None;
    }
    let Some(Token::Ident(name)) = before(3) else {
        return None;
    };
    (is_ident(before(4), "let") || is_ident(before(4), "mut")).then_some(name.as_str())
}

/// The string literals of the statements after `from`, in the same block, that use the
/// variable `name` (`bramble(&[&args[..], &["--skip-broken-links"]].concat(), ..)`).
fn statements_using<'a>(tokens: &'a [Token], from: usize, name: &str) -> Vec<&'a str> {
    let mut texts = Vec::new();
    let mut depth = 0usize;
    let mut statement_start = from;
    let mut using = false;
    for at in from..tokens.len() {
        match &tokens[at] {
            Token::Punct('(' | '[' | '{') => depth += 1,
            Token::Punct(')' | ']') => depth = depth.saturating_sub(1),
            Token::Punct('}') if depth == 0 => break,
            Token::Punct('}') => depth -= 1,
            Token::Ident(ident) if ident == name => using = true,
            _ => {}
        }
        if matches!(tokens[at], Token::Punct(';' | '{' | '}')) {
            if using {
                texts.extend(
                    tokens[statement_start..at]
                        .iter()
                        .filter_map(|token| match token {
                            Token::Text(text) => Some(text.as_str()),
                            _ => None,
                        }),
                );
            }
            using = false;
            statement_start = at + 1;
        }
    }
    texts
}

/// Does a run of the command (`.output()`, `.spawn()`, `.status()`) start at `at`?
fn runs_at(tokens: &[Token], at: usize) -> bool {
    is_punct(tokens.get(at), '.')
        && ["output", "spawn", "status"]
            .iter()
            .any(|name| is_ident(tokens.get(at + 1), name))
        && is_punct(tokens.get(at + 2), '(')
}

/// The string literals of one invocation, from its subcommand literal at `start` until the
/// command runs: the end of its statement, or, when the statement only adds arguments to a
/// command in a variable (`tool.args(["qemu", ..]);`), the statement that runs it. It also
/// ends where the block it is in ends.
fn invocation(tokens: &[Token], start: usize) -> Vec<&str> {
    // `.arg("qemu")` or `.args(["qemu", ..])`: where is the `.`, and what is before it?
    let dot = if is_punct(tokens.get(start.wrapping_sub(1)), '(') {
        3
    } else {
        4
    };
    let builder = start > dot
        && is_punct(tokens.get(start - dot), '.')
        && matches!(tokens.get(start - dot - 1), Some(Token::Ident(_)))
        && (start == dot + 1
            || [';', '{', '}']
                .iter()
                .any(|&c| is_punct(tokens.get(start - dot - 2), c)));
    let mut texts = Vec::new();
    let mut open = 0usize;
    for at in start..tokens.len() {
        if runs_at(tokens, at) {
            break;
        }
        match &tokens[at] {
            Token::Text(text) => texts.push(text.as_str()),
            Token::Punct('(' | '[' | '{') => open += 1,
            Token::Punct(')' | ']') => open = open.saturating_sub(1),
            Token::Punct('}') if open == 0 => break,
            Token::Punct('}') => open -= 1,
            Token::Punct(';') if !builder => break,
            _ => {}
        }
    }
    texts
}

/// The name of the closure (`let name = |..| {`) or function (`fn name(..) {`) whose body
/// holds the token at `at`, innermost first.
fn enclosing_definitions(tokens: &[Token], at: usize) -> Vec<&str> {
    let mut names = Vec::new();
    let mut depth = 0usize;
    for index in (0..at).rev() {
        match &tokens[index] {
            Token::Punct('}') => depth += 1,
            Token::Punct('{') if depth > 0 => depth -= 1,
            Token::Punct('{') => {
                // An unclosed block: whose body is it? Look back along its header.
                let header = &tokens[index.saturating_sub(40)..index];
                let mut name = None;
                for (offset, token) in header.iter().enumerate().rev() {
                    if matches!(token, Token::Punct(';' | '{' | '}')) {
                        break;
                    }
                    if is_ident(Some(token), "fn") {
                        if let Some(Token::Ident(found)) = header.get(offset + 1) {
                            name = Some(found.as_str());
                        }
                        break;
                    }
                    if is_ident(Some(token), "let") && header[offset..].contains(&Token::Punct('|'))
                    {
                        let mut after = offset + 1;
                        if is_ident(header.get(after), "mut") {
                            after += 1;
                        }
                        if let Some(Token::Ident(found)) = header.get(after) {
                            name = Some(found.as_str());
                        }
                        break;
                    }
                }
                if let Some(name) = name {
                    names.push(name);
                }
            }
            _ => {}
        }
    }
    names
}

/// The string literals of every call `name(..)` in `tokens` (not its definition).
fn call_arguments<'a>(tokens: &'a [Token], name: &str) -> Vec<&'a str> {
    let mut texts = Vec::new();
    for at in 0..tokens.len() {
        if !is_ident(tokens.get(at), name)
            || !is_punct(tokens.get(at + 1), '(')
            || (at > 0 && (is_ident(tokens.get(at - 1), "fn") || is_punct(tokens.get(at - 1), '.')))
        {
            continue;
        }
        let mut depth = 0usize;
        for token in &tokens[at + 1..] {
            match token {
                Token::Punct('(' | '[' | '{') => depth += 1,
                Token::Punct(')' | ']' | '}') => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                Token::Text(text) => texts.push(text.as_str()),
                _ => {}
            }
        }
    }
    texts
}

/// Which (subcommand, argument) pairs the test source `source` passes to the binary together:
/// each invocation's subcommand with every string literal of that invocation, and, when the
/// invocation is the body of a helper closure or function that adds its caller's arguments
/// (`.args(extra)`), with the string literals of that helper's calls in the same file.
fn driven_pairs(source: &str) -> Vec<(&'static str, String)> {
    let tokens = tokens(source);
    let mut pairs = Vec::new();
    for at in 0..tokens.len() {
        let Some(subcommand) = subcommand_at(&tokens, at) else {
            continue;
        };
        let mut texts: Vec<&str> = invocation(&tokens, at);
        if let Some(name) = bound_array(&tokens, at) {
            texts.extend(statements_using(&tokens, at, name));
        }
        let passes_on = tokens[at..]
            .windows(4)
            .take_while(|window| !runs_at(window, 0))
            .any(|window| {
                is_ident(window.first(), "args")
                    && is_punct(window.get(1), '(')
                    && matches!(window.get(2), Some(Token::Ident(_)))
                    && is_punct(window.get(3), ')')
            });
        if passes_on {
            for name in enclosing_definitions(&tokens, at) {
                texts.extend(call_arguments(&tokens, name));
            }
        }
        pairs.extend(texts.into_iter().map(|text| (subcommand, text.to_string())));
    }
    pairs.sort();
    pairs.dedup();
    pairs
}

#[test]
fn the_audit_pairs_each_flag_with_the_subcommand_it_was_passed_to() {
    let source = r#"
        fn bramble() -> Command { Command::new(env!("CARGO_BIN_EXE_bramble")) }
        fn helper(args: &[&str]) -> Output { bramble().args(args).output().unwrap() }
        #[test]
        fn one() {
            // bramble().args(["flash", "--commented"]) is not a test
            let output = bramble().args(["pack", "--fast", "x"]).arg("--no-cache").output();
            let other = bramble().arg("image").arg(&site).arg("-o").status().unwrap();
            helper(&["check", "--hosted"]);
            let mut tool = bramble();
            tool.args(["qemu", "--image"]).arg(&card);
            tool.arg("--tap").arg(r"tap0");
            let child = tool.spawn().unwrap();
            let never = "--after-the-run";
            let pack = |extra: &[&str]| {
                let c = '"';
                bramble().arg("serve").args(extra).output().unwrap()
            };
            pack(&["--watch"]);
            for command in ["pack", "--listed-not-passed"] {}
            let args = ["flash", "card.img"];
            let refused = helper(&args);
            let forced = helper(&[&args[..], &["--force"]].concat());
            assert!(text.contains("--yes"));
        }
    "#;
    let pairs = driven_pairs(source);
    let has = |subcommand: &str, flag: &str| {
        pairs.contains(&(subcommand_name(subcommand), flag.to_string()))
    };
    assert!(
        has("pack", "--fast") && has("pack", "--no-cache"),
        "{pairs:?}"
    );
    assert!(has("image", "-o"), "{pairs:?}");
    assert!(has("check", "--hosted"), "{pairs:?}");
    assert!(
        has("qemu", "--image") && has("qemu", "--tap") && has("qemu", "tap0"),
        "{pairs:?}"
    );
    assert!(has("serve", "--watch"), "{pairs:?}");
    assert!(
        !has("image", "--fast"),
        "pack's flag is not image's: {pairs:?}"
    );
    assert!(
        !has("pack", "-o") && !has("qemu", "--no-cache"),
        "{pairs:?}"
    );
    assert!(
        !has("qemu", "--after-the-run") && !has("serve", "--after-the-run"),
        "{pairs:?}"
    );
    assert!(!has("flash", "--commented"), "{pairs:?}");
    assert!(
        has("flash", "--force") && !has("flash", "--yes"),
        "{pairs:?}"
    );
    assert!(
        !pairs.iter().any(|(_, flag)| flag == "--listed-not-passed"),
        "{pairs:?}"
    );
}

fn subcommand_name(name: &str) -> &'static str {
    SUBCOMMANDS.iter().find(|s| **s == name).unwrap()
}

#[test]
fn every_flag_each_subcommand_lists_is_driven_by_a_test_of_that_subcommand() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut driven = Vec::new();
    for entry in fs::read_dir(&tests).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "rs") {
            driven.extend(driven_pairs(&fs::read_to_string(entry.path()).unwrap()));
        }
    }
    let mut untested = Vec::new();
    for subcommand in SUBCOMMANDS {
        let flags = flags_of(subcommand);
        // Every subcommand has a flag besides --help (keygen has one: --force).
        assert!(!flags.is_empty(), "{subcommand}: {flags:?}");
        for flag in flags {
            let passed = |name: &str| driven.iter().any(|(s, f)| *s == subcommand && f == name);
            if !passed(&flag.long) && !flag.short.as_deref().is_some_and(passed) {
                untested.push(format!("bramble {subcommand} {}", flag.long));
            }
        }
    }
    assert!(
        untested.is_empty(),
        "flags no test under tools/tests passes to the binary with that subcommand: {untested:?}"
    );
}
