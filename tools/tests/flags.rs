//! The flag audit: every flag a `bramble` subcommand's `--help` lists is driven through the
//! real binary by some test. This file drives the ones no other test file does (`--version`,
//! `pack --fast --include-dotfiles`, `image --fast --size --firmware -o`, `check --fast`,
//! `flash --force`, `qemu --machine raspi0 --root-port --elf`), and
//! [`every_flag_help_lists_is_driven_by_a_test`] fails when a flag is added that no test
//! under tools/tests passes to the binary.

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
        .arg("-o")
        .arg(&card)
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
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
    assert_eq!(suffixes, ["br5w22", "gz6"], "only fast settings were used");
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

#[test]
fn qemu_raspi0_root_port_elf_serves_the_site() {
    if bramble_qemu::find_qemu().is_err() {
        eprintln!("skipped: qemu-system-arm is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = bramble()
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
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, receive) = std::sync::mpsc::channel();
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = lines.send(line);
            }
        });
    }
    // Kernel build (when the tree's kernel changed) and boot.
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut transcript = Vec::new();
    let answer = loop {
        while let Ok(line) = receive.try_recv() {
            transcript.push(line);
        }
        if transcript
            .iter()
            .any(|line| line.contains("serving: http://"))
        {
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            stream
                .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut answer = Vec::new();
            let _ = stream.read_to_end(&mut answer);
            break answer;
        }
        if Instant::now() > deadline || matches!(child.try_wait(), Ok(Some(_))) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no serving line:\n{}", transcript.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    while let Ok(line) = receive.try_recv() {
        transcript.push(line);
    }
    let log = transcript.join("\n");
    assert!(answer.ends_with(&page("home")), "{}\n{log}", text(&answer));
    assert!(log.contains("booting raspi0 in QEMU"), "{log}");
}

/// The long flags `bramble SUBCOMMAND --help` lists.
fn flags_of(subcommand: &str) -> Vec<String> {
    let output = bramble().args([subcommand, "--help"]).output().unwrap();
    assert!(output.status.success());
    let mut flags: Vec<String> = text(&output.stdout)
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let line = line
                .strip_prefix('-')
                .filter(|rest| !rest.starts_with('-'))
                .and_then(|rest| rest.split_once(", "))
                .map_or(line, |(_, long)| long);
            line.strip_prefix("--")
                .map(|rest| rest.split([' ', '=', '<']).next().unwrap_or("").to_string())
        })
        .filter(|flag| !flag.is_empty())
        .collect();
    flags.sort();
    flags.dedup();
    flags
}

#[test]
fn every_flag_help_lists_is_driven_by_a_test() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut sources = Vec::new();
    for entry in fs::read_dir(&tests).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "rs") {
            sources.push(fs::read_to_string(entry.path()).unwrap());
        }
    }
    let mut untested = Vec::new();
    for subcommand in ["pack", "image", "qemu", "serve", "flash", "check"] {
        let flags = flags_of(subcommand);
        assert!(flags.len() > 2, "{subcommand}: {flags:?}");
        for flag in flags {
            // A test passes the flag as an argument: the literal "--flag" in a test's
            // source ("--flag" alone, or first in a list of arguments).
            let quoted = format!("\"--{flag}\"");
            let first = format!("\"--{flag} ");
            if !sources
                .iter()
                .any(|source| source.contains(&quoted) || source.contains(&first))
            {
                untested.push(format!("bramble {subcommand} --{flag}"));
            }
        }
    }
    assert!(
        untested.is_empty(),
        "flags no test under tools/tests passes to the binary: {untested:?}"
    );
}
