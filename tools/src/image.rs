//! `bramble image`: a flashable SD card image holding the Pi firmware, config.txt, the kernel,
//! the site image (SITE.BIN) and the owner's settings (BRAMBLE.TXT).
//!
//! The image is an MBR disk with one FAT partition (FAT16 under 128 MiB, FAT32 from there),
//! starting at 1 MiB; its size is a power of two because QEMU's SD card model requires one.
//! It is written as it will sit on the card, so `dd` or Raspberry Pi Imager can flash it as is.

pub mod card;
pub mod config;
pub mod disk;

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;
use bramble_settings::Settings;
use sha2::{Digest, Sha256};

use crate::firmware::{self, FirmwareBlob, FirmwareError};
pub use config::CONFIG_TXT;
pub use disk::{BootFile, DiskError, FatKind, Layout};

/// The kernel's name on the card (`kernel=` in config.txt).
pub const KERNEL_NAME: &str = "kernel.img";
/// The site image's name on the card, as the kernel looks for it.
pub const SITE_NAME: &str = "SITE.BIN";
/// The firmware configuration's name on the card.
pub const CONFIG_NAME: &str = "config.txt";

const MIB: u64 = 1024 * 1024;

/// Arguments of `bramble image`.
#[derive(clap::Args, Debug)]
pub struct ImageArgs {
    /// The site folder to pack onto the card [default: the default site in site/default].
    #[arg(long, value_name = "SITE_DIR", conflicts_with = "site_image")]
    pub site: Option<PathBuf>,
    /// With --site: leave out symlinks that point at nothing, with a warning, instead of
    /// failing.
    #[arg(long, conflicts_with = "site_image")]
    pub skip_broken_links: bool,
    /// With --site: compress for speed, not size (see `bramble pack --fast`).
    #[arg(long, conflicts_with = "site_image")]
    pub fast: bool,
    /// A site image already made with `bramble pack`, instead of --site.
    #[arg(long, value_name = "FILE")]
    pub site_image: Option<PathBuf>,
    /// Where to write the SD card image.
    #[arg(short, long, value_name = "IMG")]
    pub output: PathBuf,
    /// The flat kernel image (kernel.img) to use [default: build the kernel now].
    #[arg(long, value_name = "FILE")]
    pub kernel: Option<PathBuf>,
    /// A folder holding bootcode.bin, start.elf and fixup.dat (and optionally start_cd.elf
    /// and fixup_cd.dat) from the boot/ folder of the Raspberry Pi firmware repository.
    #[arg(long, value_name = "DIR", conflicts_with = "fetch_firmware")]
    pub firmware: Option<PathBuf>,
    /// Download the firmware files of the pinned release and check their SHA-256 sums.
    #[arg(long)]
    pub fetch_firmware: bool,
    /// With --firmware: put the folder's files on the card without checking their SHA-256
    /// sums. This skips the only check that they are the unmodified files of a firmware
    /// release Bramble knows (1.20240424, or Debian 12's raspi-firmware 1.20220830); the
    /// required files must still be there.
    #[arg(long, requires = "firmware")]
    pub firmware_unpinned: bool,
    /// A BRAMBLE.TXT to put on the card instead of the commented template (checked first).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Image size in MiB, a power of two [default: the smallest that fits, at least 32].
    #[arg(long, value_name = "MIB")]
    pub size: Option<u64>,
    /// A PEM certificate chain (leaf first) for HTTPS: checked, put on the card under the
    /// name BRAMBLE.TXT gives (`tls_certificate`, default CERT.PEM), and `https = on` set
    /// unless BRAMBLE.TXT already says `on` or `only`.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's PEM private key (ECDSA P-256 or Ed25519, PKCS#8 or SEC1); it must
    /// be the certificate's.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// For ACME with a private or test CA (pebble): a PEM file with the roots the CA's own
    /// HTTPS server chains to. Checked, put on the card under the name BRAMBLE.TXT gives
    /// (`acme_ca_certificate`, default ACMECA.PEM), and named there.
    #[arg(long, value_name = "FILE")]
    pub acme_ca: Option<PathBuf>,
    /// Two site slots of MIB each at the end of the card (the site goes into slot A), so a
    /// new site can be published into the other without a visit. Without it SITE.BIN is a
    /// file on the FAT partition [default with --publish-key: twice the site, at least 8].
    #[arg(long, value_name = "MIB")]
    pub slot_mib: Option<u64>,
    /// The owner's publish key (`bramble keygen` makes OWNER.PUB): the board accepts a
    /// `bramble publish` signed by its secret half, and no other. Without it publishing is
    /// off.
    #[arg(long, value_name = "OWNER.PUB")]
    pub publish_key: Option<PathBuf>,
}

/// The site slots `bramble image` lays out: their size and the owner's publish key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotSpec {
    /// Bytes of each slot, a whole number of MiB.
    pub slot_bytes: u64,
    /// The owner's Ed25519 public key; `None`: publishing off.
    pub publish_key: Option<[u8; 32]>,
}

impl SlotSpec {
    /// The slot size for a site of `site_len` bytes when none is given: twice the site,
    /// rounded up to a power of two MiB, at least 8 MiB.
    pub fn default_slot_bytes(site_len: usize) -> u64 {
        ((site_len as u64 * 2).div_ceil(MIB))
            .next_power_of_two()
            .max(8)
            * MIB
    }
}

/// `acme_ca_certificate`'s name on the card when BRAMBLE.TXT names none.
pub const ACME_CA_NAME: &str = "ACMECA.PEM";

/// Everything that goes on a card, already read and checked.
#[derive(Clone, Debug)]
pub struct ImageInputs {
    /// The flat kernel image (kernel.img).
    pub kernel: Vec<u8>,
    /// The site image (SITE.BIN).
    pub site: Vec<u8>,
    /// The text of BRAMBLE.TXT.
    pub settings: String,
    /// The Pi firmware files; empty for a QEMU-only image.
    pub firmware: Vec<FirmwareBlob>,
    /// The image size in MiB; `None` picks the smallest power of two that fits.
    pub size_mib: Option<u64>,
    /// The HTTPS certificate chain and key, checked, with their names on the card.
    pub tls: Option<TlsFiles>,
}

/// A checked certificate chain and key for the card.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The chain's name on the card (`tls_certificate`).
    pub certificate_name: String,
    /// The PEM chain.
    pub certificate: Vec<u8>,
    /// The key's name on the card (`tls_key`).
    pub key_name: String,
    /// The PEM key.
    pub key: Vec<u8>,
}

/// What [`build_image`] wrote.
#[derive(Clone, Debug)]
pub struct ImageReport {
    /// The image's shape.
    pub layout: Layout,
    /// The files in the partition, in the order written: name and size.
    pub files: Vec<(String, usize)>,
}

/// Why an image could not be made from its inputs.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The kernel file is an ELF, not the flat image the firmware loads.
    #[error(
        "{0} is an ELF file; the card needs the flat kernel.img (what `objcopy -O binary` \
         makes, and what `bramble image` builds when --kernel is left out)"
    )]
    KernelIsElf(PathBuf),
    /// The kernel file is empty.
    #[error("{0} is empty")]
    KernelEmpty(PathBuf),
    /// The site image is not a valid site image.
    #[error("{path} is not a valid site image ({problem}); make it with `bramble pack`")]
    BadSiteImage {
        /// The file.
        path: PathBuf,
        /// What the reader said.
        problem: String,
    },
    /// The settings file has a bad line.
    #[error("{path}: {message}")]
    BadSettings {
        /// The file.
        path: PathBuf,
        /// The parser's message: line number, key and what is wrong.
        message: String,
    },
    /// An input file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The certificate and key cannot be served.
    #[error("{certificate} and {key}: {problem}")]
    BadCertificate {
        /// The certificate file.
        certificate: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What is wrong.
        problem: bramble_tls::IdentityError,
    },
    /// The ACME CA file holds no certificate the kernel can use.
    #[error("{0}: no PEM certificate the kernel can check the CA's server with")]
    BadAcmeCa(PathBuf),
    /// A file is larger than the kernel reads.
    #[error("{path} is {size} bytes; the kernel reads at most {limit}")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The firmware could not be had.
    #[error(transparent)]
    Firmware(#[from] FirmwareError),
    /// The image could not be written.
    #[error(transparent)]
    Disk(#[from] DiskError),
}

fn read(path: &Path) -> Result<Vec<u8>, ImageError> {
    fs::read(path).map_err(|source| ImageError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a flat kernel image, refusing an ELF (a common mix-up) or an empty file.
pub fn read_kernel(path: &Path) -> Result<Vec<u8>, ImageError> {
    let bytes = read(path)?;
    if bytes.starts_with(b"\x7fELF") {
        return Err(ImageError::KernelIsElf(path.to_path_buf()));
    }
    if bytes.is_empty() {
        return Err(ImageError::KernelEmpty(path.to_path_buf()));
    }
    Ok(bytes)
}

/// Reads a site image made by `bramble pack` and checks it the way the kernel will.
pub fn read_site_image(path: &Path) -> Result<Vec<u8>, ImageError> {
    let bytes = read(path)?;
    bramble_site::SiteImage::new_checked(&bytes).map_err(|problem| ImageError::BadSiteImage {
        path: path.to_path_buf(),
        problem: problem.to_string(),
    })?;
    Ok(bytes)
}

/// Reads a BRAMBLE.TXT and checks every line with the kernel's own parser.
pub fn read_settings(path: &Path) -> Result<String, ImageError> {
    let bytes = read(path)?;
    let bad = |message: String| ImageError::BadSettings {
        path: path.to_path_buf(),
        message,
    };
    if bytes.len() > bramble_settings::MAX_FILE_BYTES {
        return Err(bad(format!(
            "the file is {} bytes; the kernel reads at most {}",
            bytes.len(),
            bramble_settings::MAX_FILE_BYTES
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| bad("the file is not UTF-8 text".into()))?;
    Settings::parse(&text).map_err(|error| bad(error.to_string()))?;
    Ok(text)
}

/// The largest certificate or key file the kernel reads (kernel/board's storage).
pub const MAX_TLS_FILE_BYTES: usize = 16 * 1024;

/// What [`check_tls_files`] found besides the files: the leaf's validity and a warning when
/// it is outside it now.
#[derive(Clone, Debug)]
pub struct CertificateCheck {
    /// The leaf's validity, Unix seconds.
    pub validity: bramble_tls::certificate::Validity,
    /// Set when the certificate is expired or not yet valid now (the kernel still serves
    /// plain HTTP; HTTPS clients would refuse it).
    pub warning: Option<String>,
}

/// Reads a certificate chain and key and checks them with the kernel's own TLS code: both
/// parse, the key is the certificate's, and it is a key type the kernel signs with.
pub fn check_tls_files(
    certificate: &Path,
    key: &Path,
    now_unix: i64,
) -> Result<(Vec<u8>, Vec<u8>, CertificateCheck), ImageError> {
    let certificate_bytes = read(certificate)?;
    let key_bytes = read(key)?;
    for (path, bytes) in [(certificate, &certificate_bytes), (key, &key_bytes)] {
        if bytes.len() > MAX_TLS_FILE_BYTES {
            return Err(ImageError::TooLarge {
                path: path.to_path_buf(),
                size: bytes.len(),
                limit: MAX_TLS_FILE_BYTES,
            });
        }
    }
    let identity =
        bramble_tls::Identity::from_pem(&certificate_bytes, &key_bytes).map_err(|problem| {
            ImageError::BadCertificate {
                certificate: certificate.to_path_buf(),
                key: key.to_path_buf(),
                problem,
            }
        })?;
    let validity = identity.validity();
    let warning = if now_unix > validity.not_after {
        Some(format!(
            "{} expired {} days ago: browsers will refuse it (plain HTTP still works)",
            certificate.display(),
            (now_unix - validity.not_after) / 86_400
        ))
    } else if now_unix < validity.not_before {
        Some(format!(
            "{} is not valid yet (from Unix time {}): browsers will refuse it until then",
            certificate.display(),
            validity.not_before
        ))
    } else {
        None
    };
    Ok((
        certificate_bytes,
        key_bytes,
        CertificateCheck { validity, warning },
    ))
}

/// Reads and checks the `--acme-ca` file: at most [`MAX_TLS_FILE_BYTES`], PEM
/// certificates the kernel's TLS client accepts as roots.
pub fn check_acme_ca(path: &Path) -> Result<Vec<u8>, ImageError> {
    let bytes = fs::read(path).map_err(|source| ImageError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if bytes.len() > MAX_TLS_FILE_BYTES {
        return Err(ImageError::TooLarge {
            path: path.to_path_buf(),
            size: bytes.len(),
            limit: MAX_TLS_FILE_BYTES,
        });
    }
    bramble_tls::client::roots_from_pem(&bytes)
        .map_err(|_| ImageError::BadAcmeCa(path.to_path_buf()))?;
    Ok(bytes)
}

/// `settings` with `acme_ca_certificate = name` unless it already names a file: the name
/// the card holds the CA file under, and the text to write.
pub fn settings_with_acme_ca(settings: &str) -> (String, String) {
    let parsed = Settings::parse_lenient(settings, |_| {});
    match parsed.acme_ca_certificate {
        Some(name) => (name.as_str().to_string(), settings.to_string()),
        None => {
            let mut text = settings.to_string();
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!("acme_ca_certificate = {ACME_CA_NAME}\n"));
            (ACME_CA_NAME.to_string(), text)
        }
    }
}

/// `settings` with HTTPS turned on (`https = on`) unless it already is (`on` or `only`):
/// the `https` line is replaced, or one is added.
pub fn settings_with_https(settings: &str) -> String {
    let parsed = Settings::parse_lenient(settings, |_| {});
    if parsed.https != bramble_settings::HttpsMode::Off {
        return settings.to_string();
    }
    let is_https_line = |line: &str| {
        let content = line.split('#').next().unwrap_or("");
        content
            .split_once('=')
            .is_some_and(|(key, _)| key.trim().eq_ignore_ascii_case("https"))
    };
    let mut replaced = false;
    let mut out: Vec<String> = settings
        .lines()
        .map(|line| {
            if is_https_line(line) && !replaced {
                replaced = true;
                "https = on".to_string()
            } else {
                line.to_string()
            }
        })
        .collect();
    if !replaced {
        out.push("https = on".into());
    }
    let mut text = out.join("\n");
    text.push('\n');
    text
}

/// The files of the boot partition, in the order they are written.
pub fn boot_files(inputs: &ImageInputs) -> Vec<BootFile> {
    let mut files: Vec<BootFile> = inputs
        .firmware
        .iter()
        .map(|blob| BootFile {
            name: blob.name.to_string(),
            bytes: blob.bytes.clone(),
        })
        .collect();
    files.push(BootFile {
        name: CONFIG_NAME.into(),
        bytes: config::config_txt(
            inputs
                .firmware
                .iter()
                .any(|blob| blob.name == "start_cd.elf"),
        )
        .into_bytes(),
    });
    files.push(BootFile {
        name: KERNEL_NAME.into(),
        bytes: inputs.kernel.clone(),
    });
    files.push(BootFile {
        name: SITE_NAME.into(),
        bytes: inputs.site.clone(),
    });
    files.push(BootFile {
        name: bramble_settings::FILE_NAME.into(),
        bytes: inputs.settings.as_bytes().to_vec(),
    });
    if let Some(tls) = &inputs.tls {
        files.push(BootFile {
            name: tls.certificate_name.clone(),
            bytes: tls.certificate.clone(),
        });
        files.push(BootFile {
            name: tls.key_name.clone(),
            bytes: tls.key.clone(),
        });
    }
    files
}

/// Writes the SD card image for `inputs` to `output`.
pub fn build_image(inputs: &ImageInputs, output: &Path) -> Result<ImageReport, ImageError> {
    build_image_with(inputs, Vec::new(), output)
}

/// Like [`build_image_with`], with the site in slot A of two site slots (`slots`, none:
/// SITE.BIN on the FAT partition as before).
pub fn build_image_slotted(
    inputs: &ImageInputs,
    extra: Vec<BootFile>,
    slots: Option<&SlotSpec>,
    output: &Path,
) -> Result<ImageReport, ImageError> {
    let Some(spec) = slots else {
        return build_image_with(inputs, extra, output);
    };
    let mut files = boot_files(inputs);
    files.retain(|file| file.name != SITE_NAME);
    files.extend(extra);
    let layout = match inputs.size_mib {
        Some(mib) => Layout::with_size(mib.saturating_mul(MIB))?.with_slots(spec.slot_bytes)?,
        None => Layout::smallest_with(&files, spec.slot_bytes)?,
    };
    let mut hash = Sha256::new();
    for file in &files {
        hash.update(file.name.as_bytes());
        hash.update(&file.bytes);
    }
    hash.update(&inputs.site);
    let digest = hash.finalize();
    let signature = [digest[0], digest[1], digest[2], digest[3]];
    let contents = disk::SlotContents {
        site: &inputs.site,
        publish_key: spec.publish_key.as_ref(),
    };
    disk::write_image_with_slots(output, &layout, &files, Some(contents), signature)?;
    let mut report: Vec<(String, usize)> = files
        .iter()
        .map(|f| (f.name.clone(), f.bytes.len()))
        .collect();
    report.push(("slot A".into(), inputs.site.len()));
    Ok(ImageReport {
        layout,
        files: report,
    })
}

/// Like [`build_image`], with `extra` files (the ACME CA's roots) after the others.
pub fn build_image_with(
    inputs: &ImageInputs,
    extra: Vec<BootFile>,
    output: &Path,
) -> Result<ImageReport, ImageError> {
    let mut files = boot_files(inputs);
    files.extend(extra);
    let layout = match inputs.size_mib {
        Some(mib) => Layout::with_size(mib.saturating_mul(MIB))?,
        None => Layout::smallest_for(&files)?,
    };
    // A disk signature that differs between images of different contents, and is the same
    // for the same contents (reproducible images).
    let mut hash = Sha256::new();
    for file in &files {
        hash.update(file.name.as_bytes());
        hash.update(&file.bytes);
    }
    let digest = hash.finalize();
    let signature = [digest[0], digest[1], digest[2], digest[3]];
    disk::write_image(output, &layout, &files, signature)?;
    Ok(ImageReport {
        layout,
        files: files
            .iter()
            .map(|f| (f.name.clone(), f.bytes.len()))
            .collect(),
    })
}

/// The message for an image made without firmware.
pub fn no_firmware_note() -> String {
    format!(
        "note: this image has no Raspberry Pi firmware. It boots in QEMU (which loads the \
         kernel itself), but a real Pi also needs bootcode.bin, start.elf and fixup.dat on the \
         card. Run again with --fetch-firmware (downloads release {} and checks pinned SHA-256 \
         sums), or with --firmware DIR holding those files from the boot/ folder of {}.",
        firmware::RELEASE,
        firmware::HOME_PAGE
    )
}

/// The site image for `bramble image`: a packed file, a packed folder, or the default site.
fn site_bytes(args: &ImageArgs) -> anyhow::Result<Vec<u8>> {
    if let Some(path) = &args.site_image {
        return Ok(read_site_image(path)?);
    }
    let (dir, _default_site) = match &args.site {
        Some(dir) => (dir.clone(), None),
        None => crate::kernel::default_site()?,
    };
    let mut opts = crate::pack::PackOptions::from_env()?;
    opts.skip_broken_links = args.skip_broken_links;
    if args.fast {
        opts.effort = crate::pack::compress::Effort::Fast;
    }
    let packed = crate::pack::pack_site(&dir, &opts)
        .with_context(|| format!("packing {}", dir.display()))?;
    packed.warn_left_out();
    eprintln!("{}", packed.summary);
    Ok(packed.image)
}

/// The template line that [`template_for_a_new_card`] fills in.
const BOARD_SECRET_LINE: &str = "ipv6_secret = board";

/// BRAMBLE.TXT for a card made without `--config`: the template, with a fresh random key for
/// the stable IPv6 addresses (RFC 7217 section 5 draws it when the system is installed).
/// With `SOURCE_DATE_EPOCH` set the image must come out byte for byte the same, so the
/// template keeps `board` (the board's serial and MAC) and says so on the terminal.
fn template_for_a_new_card() -> anyhow::Result<String> {
    if std::env::var_os("SOURCE_DATE_EPOCH").is_some() {
        eprintln!(
            "settings: SOURCE_DATE_EPOCH is set (a reproducible image), so ipv6_secret stays \
             `board`: the IPv6 addresses are keyed by the board's serial number"
        );
        return Ok(bramble_settings::TEMPLATE.to_string());
    }
    let mut secret = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut secret))
        .context("reading /dev/urandom for the IPv6 address key")?;
    Ok(with_ipv6_secret(bramble_settings::TEMPLATE, &secret))
}

/// `text` with its `ipv6_secret = board` line set to `secret` in hex.
fn with_ipv6_secret(text: &str, secret: &[u8; 16]) -> String {
    let hex: String = secret.iter().map(|byte| format!("{byte:02x}")).collect();
    text.replacen(BOARD_SECRET_LINE, &format!("ipv6_secret = {hex}"), 1)
}

/// Runs `bramble image`.
pub fn run(args: ImageArgs) -> anyhow::Result<()> {
    let mut settings = match &args.config {
        Some(path) => read_settings(path)?,
        None => template_for_a_new_card()?,
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(certificate), Some(key)) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_secs() as i64);
            let (certificate_bytes, key_bytes, check) = check_tls_files(certificate, key, now)?;
            if let Some(warning) = &check.warning {
                eprintln!("warning: {warning}");
            }
            settings = settings_with_https(&settings);
            let parsed = Settings::parse(&settings).map_err(|error| ImageError::BadSettings {
                path: PathBuf::from(bramble_settings::FILE_NAME),
                message: error.to_string(),
            })?;
            Some(TlsFiles {
                certificate_name: parsed.tls_certificate.as_str().to_string(),
                certificate: certificate_bytes,
                key_name: parsed.tls_key.as_str().to_string(),
                key: key_bytes,
            })
        }
        _ => None,
    };
    let mut extra = Vec::new();
    if let Some(path) = &args.acme_ca {
        let bytes = check_acme_ca(path)?;
        let (name, text) = settings_with_acme_ca(&settings);
        settings = text;
        extra.push(BootFile { name, bytes });
    }
    let firmware = if let Some(dir) = &args.firmware {
        let pins = if args.firmware_unpinned {
            firmware::Pins::Skipped
        } else {
            firmware::Pins::Checked
        };
        let (files, release) = firmware::load_dir(dir, pins)?;
        match release {
            Some(release) => eprintln!("firmware: {} files of release {release}", files.len()),
            None => eprintln!(
                "firmware: {} files from {} NOT checked against any pinned release \
                 (--firmware-unpinned)",
                files.len(),
                dir.display()
            ),
        }
        files
    } else if args.fetch_firmware {
        firmware::fetch(&firmware::default_cache_dir())?
    } else {
        Vec::new()
    };
    let site = site_bytes(&args)?;
    let kernel = match &args.kernel {
        Some(path) => read_kernel(path)?,
        None => crate::kernel::kernel_image()?,
    };
    let inputs = ImageInputs {
        kernel,
        site,
        settings,
        firmware,
        size_mib: args.size,
        tls,
    };
    let publish_key = match &args.publish_key {
        Some(path) => Some(crate::publish::keys::read_public(path)?),
        None => None,
    };
    let slots = match (args.slot_mib, publish_key) {
        (None, None) => None,
        (mib, publish_key) => Some(SlotSpec {
            slot_bytes: mib.map_or_else(
                || SlotSpec::default_slot_bytes(inputs.site.len()),
                |mib| mib.saturating_mul(MIB),
            ),
            publish_key,
        }),
    };
    let report = build_image_slotted(&inputs, extra, slots.as_ref(), &args.output)?;

    let layout = report.layout;
    println!(
        "{}: {} MiB SD card image, one {} partition from {} MiB",
        args.output.display(),
        layout.image_bytes / MIB,
        match layout.fat {
            FatKind::Fat16 => "FAT16",
            FatKind::Fat32 => "FAT32",
        },
        layout.partition_start / MIB,
    );
    for (name, size) in &report.files {
        println!("  {name:<13} {size:>10} bytes");
    }
    if let Some(spec) = &slots {
        println!(
            "  two site slots of {} MiB at the end of the card; publishing {}",
            spec.slot_bytes / MIB,
            if spec.publish_key.is_some() {
                "on (the key's owner may `bramble publish`)"
            } else {
                "off (no --publish-key)"
            }
        );
    }
    if inputs.firmware.is_empty() {
        eprintln!("{}", no_firmware_note());
    }
    println!(
        "Flash it with `bramble flash {} /dev/sdX` (or dd, or Raspberry Pi Imager).",
        args.output.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_cards_template_gets_its_own_ipv6_secret() {
        let secret = [0xa5u8; 16];
        let text = with_ipv6_secret(bramble_settings::TEMPLATE, &secret);
        assert!(!text.contains(BOARD_SECRET_LINE));
        let parsed = Settings::parse(&text).expect("the filled-in template parses");
        assert_eq!(parsed.ipv6_secret, Some(secret));
        // Everything else stays the template's default.
        let defaults = Settings {
            ipv6_secret: Some(secret),
            ..Settings::default()
        };
        assert_eq!(parsed, defaults);
    }
}
