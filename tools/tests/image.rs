//! `bramble image` tests: images are read back with mtools, an independent FAT implementation
//! (Debian package `mtools`), and their partition table is checked byte by byte.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use bramble::firmware::FirmwareBlob;
use bramble::image::{self, FatKind, ImageError, ImageInputs};

const MIB: u64 = 1024 * 1024;

/// Runs the kernel's card check (bramble-fat, what the kernel does before it hands the card to
/// its FAT library) over the image file: every image the tool writes must pass it.
fn kernel_card_check(image: &Path) -> bramble_fat::FatVolume {
    let bytes = fs::read(image).unwrap();
    bramble_fat::check_card((bytes.len() / 512) as u64, |sector, buffer| {
        let at = sector as usize * 512;
        buffer.copy_from_slice(bytes.get(at..at + 512).ok_or(())?);
        Ok::<(), ()>(())
    })
    .unwrap_or_else(|e| panic!("the kernel would refuse {}: {e:?}", image.display()))
}

/// Deterministic pseudo-random bytes (xorshift), so that a misplaced cluster shows up.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn inputs(firmware: Vec<FirmwareBlob>) -> ImageInputs {
    ImageInputs {
        kernel: noise(70_000, 1),
        site: noise(300_000, 2),
        settings: bramble_settings::TEMPLATE.to_string(),
        firmware,
        size_mib: None,
        tls: None,
    }
}

fn fake_firmware() -> Vec<FirmwareBlob> {
    bramble::firmware::FILES
        .iter()
        .enumerate()
        .map(|(i, f)| FirmwareBlob {
            name: f.name,
            bytes: noise(f.size as usize, 10 + i as u64),
        })
        .collect()
}

fn mtools(tool: &str, args: &[&str]) -> std::process::Output {
    let output = Command::new(tool)
        .args(args)
        .env("MTOOLS_SKIP_CHECK", "1")
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {tool} ({e}): these tests need mtools (apt-get install -y mtools)")
        });
    assert!(
        output.status.success(),
        "{tool} {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The image file with the partition offset, as mtools takes it.
fn partition_of(image: &Path) -> String {
    format!("{}@@{}", image.display(), 1024 * 1024)
}

/// The short (8.3) names in the root folder, as mdir lists them ("NAME    EXT").
fn short_names(image: &Path) -> Vec<String> {
    let listing = mtools("mdir", &["-i", &partition_of(image), "::"]);
    String::from_utf8(listing.stdout)
        .unwrap()
        .lines()
        .filter(|line| {
            // File lines carry a date like 2026-11-30; headers and totals do not.
            line.len() > 12
                && line.split_whitespace().any(|field| {
                    let f = field.as_bytes();
                    f.len() == 10 && f[4] == b'-' && f[7] == b'-'
                })
        })
        .map(|line| {
            let (stem, ext) = (line[..8].trim(), line[9..12].trim());
            format!("{stem}.{ext}")
        })
        .collect()
}

/// Copies one file out of the image with mcopy.
fn read_back(image: &Path, name: &str, scratch: &Path) -> Vec<u8> {
    let out = scratch.join(format!("out-{name}"));
    let _ = fs::remove_file(&out);
    mtools(
        "mcopy",
        &[
            "-n",
            "-i",
            &partition_of(image),
            &format!("::{name}"),
            out.to_str().unwrap(),
        ],
    );
    fs::read(out).unwrap()
}

/// The first MBR partition entry: (boot flag, type, first LBA, sectors). The second is the
/// certificate store's (checked by `the_certificate_store_region_is_reserved_before_the_fat`).
fn partition_entry(image: &Path) -> (u8, u8, u32, u32) {
    let bytes = fs::read(image).unwrap();
    assert_eq!(&bytes[510..512], &[0x55, 0xAA], "MBR boot signature");
    assert_eq!(
        bytes[446 + 16 + 4],
        0xDA,
        "partition 2 is the certificate store"
    );
    for unused in 2..4 {
        let entry = &bytes[446 + 16 * unused..446 + 16 * (unused + 1)];
        assert!(
            entry.iter().all(|&b| b == 0),
            "partition {} should be empty",
            unused + 1
        );
    }
    let e = &bytes[446..462];
    let u32_at = |o: usize| u32::from_le_bytes([e[o], e[o + 1], e[o + 2], e[o + 3]]);
    (e[0], e[4], u32_at(8), u32_at(12))
}

#[test]
fn image_reads_back_with_mtools_and_has_a_correct_partition_table() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("bramble.img");
    let inputs = inputs(fake_firmware());
    let report = image::build_image(&inputs, &img).unwrap();

    let size = fs::metadata(&img).unwrap().len();
    assert!(size.is_power_of_two(), "{size} is not a power of two");
    assert_eq!(size, report.layout.image_bytes);
    assert_eq!(size, 32 * MIB, "the smallest image that fits");
    assert_eq!(report.layout.fat, FatKind::Fat16);
    assert_eq!(
        partition_entry(&img),
        (0x80, 0x0E, 2048, (size / 512 - 2048) as u32)
    );

    let mut expected: Vec<(String, Vec<u8>)> = inputs
        .firmware
        .iter()
        .map(|blob| (blob.name.to_string(), blob.bytes.clone()))
        .collect();
    expected.push(("config.txt".into(), image::CONFIG_TXT.as_bytes().to_vec()));
    expected.push(("kernel.img".into(), inputs.kernel.clone()));
    expected.push(("SITE.BIN".into(), inputs.site.clone()));
    expected.push(("BRAMBLE.TXT".into(), inputs.settings.as_bytes().to_vec()));

    let upper: Vec<String> = expected
        .iter()
        .map(|(name, _)| name.to_uppercase())
        .collect();
    assert_eq!(
        short_names(&img),
        upper,
        "8.3 names, in order, and nothing else"
    );
    for (name, bytes) in &expected {
        assert!(
            read_back(&img, name, dir.path()) == *bytes,
            "{name} differs"
        );
    }

    // The boot sector says where the partition is (hidden sectors = first LBA).
    let minfo = mtools("minfo", &["-i", &partition_of(&img), "::"]);
    let minfo = String::from_utf8(minfo.stdout).unwrap();
    assert!(minfo.contains("hidden sectors: 2048"), "{minfo}");
    assert!(minfo.contains("disk type=\"FAT16"), "{minfo}");
    let volume = kernel_card_check(&img);
    assert_eq!(volume.boot_sector.fat_type(), bramble_fat::FatType::Fat16);
}

#[test]
fn the_certificate_store_region_is_reserved_before_the_fat_and_the_kernel_finds_it() {
    use bramble_fat::store_region::{StorePartition, StoreRegion};
    let dir = tempfile::tempdir().unwrap();
    for size in [None, Some(256)] {
        let img = dir.path().join("bramble.img");
        let mut inputs = inputs(fake_firmware());
        inputs.size_mib = size;
        image::build_image(&inputs, &img).unwrap();
        let bytes = fs::read(&img).unwrap();
        let sectors = (bytes.len() / 512) as u64;
        let volume = kernel_card_check(&img);
        // The kernel's own view of the partition table and the label.
        let partition = StorePartition::find(&bytes[..512], sectors, &volume.partition)
            .expect("the store partition");
        let first = partition.first_sector as usize;
        let region = partition
            .confirm(&bytes[first * 512..first * 512 + 512])
            .expect("the store label");
        assert_eq!(
            region,
            StoreRegion {
                first_block: 1025,
                blocks: 64
            }
        );
        // Inactive, in the gap after the MBR, ending before the FAT partition; zeroed.
        let entry = &bytes[446 + 16..446 + 32];
        assert_eq!(entry[0], 0x00, "not bootable");
        let end = region.first_block as usize + region.blocks as usize;
        assert!(end <= volume.partition.first_sector as usize);
        assert!(
            bytes[region.first_block as usize * 512..end * 512]
                .iter()
                .all(|&b| b == 0)
        );
    }
}

#[test]
fn large_image_is_fat32_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("big.img");
    let mut inputs = inputs(Vec::new());
    inputs.size_mib = Some(128);
    let report = image::build_image(&inputs, &img).unwrap();
    assert_eq!(report.layout.fat, FatKind::Fat32);
    assert_eq!(fs::metadata(&img).unwrap().len(), 128 * MIB);
    assert_eq!(
        partition_entry(&img),
        (0x80, 0x0C, 2048, (128 * MIB / 512 - 2048) as u32)
    );
    assert_eq!(
        short_names(&img),
        ["CONFIG.TXT", "KERNEL.IMG", "SITE.BIN", "BRAMBLE.TXT"]
    );
    assert!(read_back(&img, "SITE.BIN", dir.path()) == inputs.site);
    let minfo = mtools("minfo", &["-i", &partition_of(&img), "::"]);
    let minfo = String::from_utf8(minfo.stdout).unwrap();
    assert!(minfo.contains("disk type=\"FAT32"), "{minfo}");
    let volume = kernel_card_check(&img);
    assert_eq!(volume.boot_sector.fat_type(), bramble_fat::FatType::Fat32);
}

#[test]
fn big_site_gets_the_next_power_of_two() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("site.img");
    let mut inputs = inputs(Vec::new());
    inputs.site = noise(40 * MIB as usize, 3);
    let report = image::build_image(&inputs, &img).unwrap();
    assert_eq!(report.layout.image_bytes, 64 * MIB);
    assert!(read_back(&img, "SITE.BIN", dir.path()) == inputs.site);
}

#[test]
fn sizes_that_cannot_work_are_refused_and_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("x.img");
    let mut inputs = inputs(Vec::new());

    inputs.size_mib = Some(48);
    let err = image::build_image(&inputs, &img).unwrap_err();
    assert!(err.to_string().contains("power of two"), "{err}");

    inputs.size_mib = Some(32);
    inputs.site = noise(40 * MIB as usize, 4);
    let err = image::build_image(&inputs, &img).unwrap_err();
    assert!(
        matches!(err, ImageError::Disk(image::DiskError::TooSmall { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("32 MiB"), "{err}");

    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no image, no .partial file"
    );
}

#[test]
fn input_checks() {
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("kernel.elf");
    fs::write(&elf, b"\x7fELF\x01\x01\x01rest").unwrap();
    assert!(matches!(
        image::read_kernel(&elf),
        Err(ImageError::KernelIsElf(_))
    ));

    let bad_site = dir.path().join("site.bin");
    fs::write(&bad_site, b"not a site image at all, just text").unwrap();
    let err = image::read_site_image(&bad_site).unwrap_err();
    assert!(matches!(err, ImageError::BadSiteImage { .. }), "{err}");

    let settings = dir.path().join("bramble.txt");
    fs::write(&settings, "hostname = garden\r\naddress = 192.168.1.50\r\n").unwrap();
    let err = image::read_settings(&settings).unwrap_err().to_string();
    assert!(err.contains("line 2") && err.contains("address"), "{err}");
    fs::write(&settings, "hostname = garden\naddress = 192.168.1.50/24\n").unwrap();
    assert!(image::read_settings(&settings).unwrap().contains("garden"));
    let limit = bramble_settings::MAX_FILE_BYTES;
    let note = "# a long note\n";
    let long = format!("{}hostname = garden\n", note.repeat(limit / note.len() + 1));
    assert!(long.len() > limit);
    fs::write(&settings, long).unwrap();
    let err = image::read_settings(&settings).unwrap_err().to_string();
    assert!(err.contains(&format!("at most {limit}")), "{err}");
}

fn bramble() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bramble"))
}

fn write_site(dir: &Path) -> PathBuf {
    let site = dir.join("site");
    fs::create_dir_all(site.join("notes")).unwrap();
    fs::write(
        site.join("index.html"),
        "<!doctype html><title>t</title><p>hello".repeat(20),
    )
    .unwrap();
    fs::write(site.join("notes/index.html"), "<p>notes").unwrap();
    site
}

#[test]
fn cli_packs_a_site_and_says_a_real_pi_needs_firmware() {
    let dir = tempfile::tempdir().unwrap();
    let site = write_site(dir.path());
    let kernel = dir.path().join("kernel.img");
    fs::write(&kernel, noise(4096, 5)).unwrap();
    let settings = dir.path().join("mine.txt");
    fs::write(&settings, "hostname = garden\nled = off\n").unwrap();
    let img = dir.path().join("out.img");

    let output = bramble()
        .args(["image", "--site"])
        .arg(&site)
        .arg("--kernel")
        .arg(&kernel)
        .arg("--config")
        .arg(&settings)
        .arg("-o")
        .arg(&img)
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("real Pi"), "{stderr}");
    assert!(stderr.contains("--fetch-firmware"), "{stderr}");
    assert!(
        stderr.contains("github.com/raspberrypi/firmware"),
        "{stderr}"
    );

    assert_eq!(
        short_names(&img),
        ["CONFIG.TXT", "KERNEL.IMG", "SITE.BIN", "BRAMBLE.TXT"]
    );
    assert!(read_back(&img, "kernel.img", dir.path()) == fs::read(&kernel).unwrap());
    assert!(read_back(&img, "BRAMBLE.TXT", dir.path()) == fs::read(&settings).unwrap());
    let site_image = read_back(&img, "SITE.BIN", dir.path());
    let parsed = bramble_site::SiteImage::new_checked(&site_image).expect("a valid site image");
    assert!(parsed.get("/notes/index.html").is_some());
}

#[test]
fn cli_refuses_a_bad_settings_file_naming_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let site = write_site(dir.path());
    let kernel = dir.path().join("kernel.img");
    fs::write(&kernel, noise(4096, 6)).unwrap();
    let settings = dir.path().join("BRAMBLE.TXT");
    fs::write(&settings, "# mine\nhostname = my_pi\n").unwrap();
    let img = dir.path().join("out.img");
    let output = bramble()
        .args(["image", "--site"])
        .arg(&site)
        .arg("--kernel")
        .arg(&kernel)
        .arg("--config")
        .arg(&settings)
        .arg("-o")
        .arg(&img)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("line 2") && stderr.contains("hostname"),
        "{stderr}"
    );
    assert!(!img.exists());
}

/// Answers each of `count` connections on 127.0.0.1 with `body` (200 OK); returns the base URL.
fn serve_locally(count: usize, body: &'static [u8]) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for _ in 0..count {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            stream
                .set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            let mut stream = reader.into_inner();
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body);
        }
    });
    format!("http://{address}")
}

#[test]
fn cli_fetch_firmware_refuses_files_that_do_not_match_the_pins() {
    let dir = tempfile::tempdir().unwrap();
    let site = write_site(dir.path());
    let kernel = dir.path().join("kernel.img");
    fs::write(&kernel, noise(4096, 7)).unwrap();
    let img = dir.path().join("out.img");
    let cache = dir.path().join("cache");
    let base = serve_locally(5, b"this is not bootcode.bin");
    let output = bramble()
        .args(["image", "--fetch-firmware", "--site"])
        .arg(&site)
        .arg("--kernel")
        .arg(&kernel)
        .arg("-o")
        .arg(&img)
        .env("XDG_CACHE_HOME", &cache)
        .env(bramble::firmware::BASE_URL_VARIABLE, &base)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("bootcode.bin") && stderr.contains("SHA-256"),
        "{stderr}"
    );
    assert!(
        stderr.contains(bramble::firmware::FILES[0].sha256),
        "{stderr}"
    );
    assert!(!img.exists(), "no image from bad firmware");
    let cached = cache
        .join("bramble/firmware")
        .join(bramble::firmware::RELEASE)
        .join("bootcode.bin");
    assert!(!cached.exists(), "bad bytes are not cached");
}

#[test]
fn same_inputs_and_source_date_epoch_give_the_same_image() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site.bin");
    let packed = bramble::pack::pack_site(&write_site(dir.path()), &Default::default()).unwrap();
    fs::write(&site, &packed.image).unwrap();
    let kernel = dir.path().join("kernel.img");
    fs::write(&kernel, noise(8192, 8)).unwrap();
    let build = |name: &str, epoch: &str| {
        let img = dir.path().join(name);
        let output = bramble()
            .args(["image", "--site-image"])
            .arg(&site)
            .arg("--kernel")
            .arg(&kernel)
            .arg("-o")
            .arg(&img)
            .env("SOURCE_DATE_EPOCH", epoch)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        fs::read(img).unwrap()
    };
    let first = build("a.img", "1767225600");
    let second = build("b.img", "1767225600");
    assert!(first == second, "two builds of the same inputs differ");
    let later = build("c.img", "1767312000");
    assert!(first != later, "the timestamp is recorded");
    let listing = mtools(
        "mdir",
        &["-i", &partition_of(&dir.path().join("a.img")), "::"],
    );
    assert!(String::from_utf8_lossy(&listing.stdout).contains("2026-01-01"));
}

fn tls_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kernel/tls/tests/data")
        .join(name)
}

fn image_with_tls(
    dir: &Path,
    settings: Option<&str>,
    cert: &str,
    key: &str,
) -> std::process::Output {
    let site = write_site(dir);
    let kernel = dir.join("kernel.img");
    fs::write(&kernel, noise(4096, 7)).unwrap();
    let mut command = bramble();
    command
        .args(["image", "--site"])
        .arg(&site)
        .arg("--kernel")
        .arg(&kernel)
        .arg("--tls-cert")
        .arg(tls_fixture(cert))
        .arg("--tls-key")
        .arg(tls_fixture(key))
        .arg("-o")
        .arg(dir.join("out.img"))
        .env("XDG_CACHE_HOME", dir.join("cache"));
    if let Some(text) = settings {
        let path = dir.join("mine.txt");
        fs::write(&path, text).unwrap();
        command.arg("--config").arg(path);
    }
    command.output().unwrap()
}

#[test]
fn cli_puts_a_checked_certificate_on_the_card_and_turns_https_on() {
    let dir = tempfile::tempdir().unwrap();
    let output = image_with_tls(dir.path(), None, "p256.pem", "p256.key");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let img = dir.path().join("out.img");
    assert_eq!(
        short_names(&img),
        [
            "CONFIG.TXT",
            "KERNEL.IMG",
            "SITE.BIN",
            "BRAMBLE.TXT",
            "CERT.PEM",
            "KEY.PEM"
        ]
    );
    assert!(read_back(&img, "CERT.PEM", dir.path()) == fs::read(tls_fixture("p256.pem")).unwrap());
    assert!(read_back(&img, "KEY.PEM", dir.path()) == fs::read(tls_fixture("p256.key")).unwrap());
    let settings = String::from_utf8(read_back(&img, "BRAMBLE.TXT", dir.path())).unwrap();
    let parsed = bramble_settings::Settings::parse(&settings).unwrap();
    assert_eq!(parsed.https, bramble_settings::HttpsMode::On);
    assert!(
        settings.contains("# Serve https:// as well"),
        "the template's notes are kept"
    );
}

#[test]
fn cli_keeps_https_only_and_the_names_bramble_txt_gives() {
    let dir = tempfile::tempdir().unwrap();
    let output = image_with_tls(
        dir.path(),
        Some("https = only\ntls_certificate = site.crt\ntls_key = site.key\n"),
        "ed25519.pem",
        "ed25519.key",
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let img = dir.path().join("out.img");
    assert!(short_names(&img).contains(&"SITE.CRT".to_string()));
    let settings = String::from_utf8(read_back(&img, "BRAMBLE.TXT", dir.path())).unwrap();
    assert!(settings.contains("https = only"), "{settings}");
}

#[test]
fn cli_refuses_a_key_that_is_not_the_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let output = image_with_tls(dir.path(), None, "p256.pem", "other.key");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("the key does not belong to the certificate"),
        "{stderr}"
    );
    assert!(!dir.path().join("out.img").exists());
    let garbage = dir.path().join("garbage.pem");
    fs::write(&garbage, "not a certificate").unwrap();
    let output = bramble()
        .args(["image", "-o"])
        .arg(dir.path().join("x.img"))
        .arg("--tls-cert")
        .arg(&garbage)
        .arg("--tls-key")
        .arg(tls_fixture("p256.key"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no PEM CERTIFICATE block"), "{stderr}");
    let output = bramble()
        .args(["image", "-o", "x.img", "--tls-cert", "a.pem"])
        .output()
        .unwrap();
    assert!(!output.status.success(), "--tls-cert needs --tls-key");
}

#[test]
fn cli_warns_about_an_expired_certificate_but_makes_the_card() {
    let dir = tempfile::tempdir().unwrap();
    let output = image_with_tls(dir.path(), None, "expired.pem", "p256.key");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("expired") && stderr.contains("plain HTTP still works"),
        "{stderr}"
    );
}

#[test]
fn https_is_turned_on_by_replacing_or_adding_its_line() {
    assert_eq!(
        image::settings_with_https("https = off\nled = on\n"),
        "https = on\nled = on\n"
    );
    assert_eq!(
        image::settings_with_https("led = on"),
        "led = on\nhttps = on\n"
    );
    assert_eq!(
        image::settings_with_https("https = only\n"),
        "https = only\n"
    );
    assert_eq!(
        image::settings_with_https("# https = off is the default\nHTTPS=off # no\n"),
        "# https = off is the default\nhttps = on\n"
    );
}

#[test]
fn cli_puts_the_acme_ca_on_the_card_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let site = write_site(dir.path());
    let kernel = dir.path().join("kernel.img");
    fs::write(&kernel, noise(4096, 7)).unwrap();
    let config = dir.path().join("mine.txt");
    fs::write(
        &config,
        "https = on\nacme = on\ndomain = bramble.test\nacme_directory = https://acme.test/dir\n",
    )
    .unwrap();
    let image = |ca: &Path, out: &str| {
        bramble()
            .args(["image", "--site"])
            .arg(&site)
            .arg("--kernel")
            .arg(&kernel)
            .arg("--config")
            .arg(&config)
            .arg("--acme-ca")
            .arg(ca)
            .arg("-o")
            .arg(dir.path().join(out))
            .env("XDG_CACHE_HOME", dir.path().join("cache"))
            .output()
            .unwrap()
    };
    let output = image(&tls_fixture("p256.pem"), "out.img");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let img = dir.path().join("out.img");
    assert!(short_names(&img).contains(&"ACMECA.PEM".to_string()));
    assert_eq!(
        read_back(&img, "ACMECA.PEM", dir.path()),
        fs::read(tls_fixture("p256.pem")).unwrap()
    );
    let settings = String::from_utf8(read_back(&img, "BRAMBLE.TXT", dir.path())).unwrap();
    let parsed = bramble_settings::Settings::parse(&settings).unwrap();
    assert!(parsed.acme);
    assert_eq!(
        parsed
            .acme_ca_certificate
            .map(|name| name.as_str().to_string()),
        Some("ACMECA.PEM".to_string())
    );
    // A file without a certificate is refused, and no card is written.
    let garbage = dir.path().join("garbage.pem");
    fs::write(&garbage, "not a certificate").unwrap();
    let output = image(&garbage, "bad.img");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("no PEM certificate"), "{stderr}");
    assert!(!dir.path().join("bad.img").exists());
}
