//! The two systems under benchmark and the site they both serve: how each is built, booted
//! and asked for its counters.

use super::counters::{self, GuestCounters};
use super::guest::Guest;
use super::probe;
use anyhow::{Context, bail};
use bramble::image::{ImageInputs, build_image};
use bramble::pack::{PackOptions, pack_site};
use bramble_qemu::{Kernel, Machine, Network, QemuConfig, Topology};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// URL of the 100 KiB file.
pub const FILE_100K_URL: &str = "/file-100k.bin";
const FILE_100K_BYTES: usize = 100 * 1024;
/// URL of the 1 MiB file (`--tap --https`: MB/s over TLS).
pub const FILE_1M_URL: &str = "/file-1m.bin";
const FILE_1M_BYTES: usize = 1024 * 1024;
/// The assets a new visitor fetches with the page (`--tap --https`'s visit rows): the default
/// site's stylesheet and icon (site/default), beside the benchmark page.
pub const VISIT_ASSETS: [&str; 2] = ["/style.css", "/favicon.svg"];
/// The `cold` target's file: on Bramble's card only (the Linux baseline serves from its
/// initramfs, in RAM; there is no card to measure).
pub const COLD_URL: &str = "/cold.bin";
/// Its size: large enough that the card's speed, not one request's overhead, sets the time.
pub const COLD_BYTES: usize = 8 * 1024 * 1024;

/// Where the `walk` target's site (`--walk-site`) lies in Bramble's site.
pub const WALK_PREFIX: &str = "/walk/";

/// The `walk` target: a real site that Bramble serves under [`WALK_PREFIX`] beside the
/// benchmark's files, and the wrk script that asks for each of its files in turn.
pub struct Walk {
    /// The wrk Lua script.
    pub script: PathBuf,
    /// Files the script asks for (every file of the site as packed).
    pub files: usize,
    /// Sum of their uncompressed bodies.
    pub identity_bytes: u64,
}

/// `len` pseudo-random bytes (incompressible, the same on every run).
pub fn noise(len: usize, seed: u32) -> Vec<u8> {
    let mut state: u32 = seed | 1;
    (0..len)
        .map(|_| {
            // xorshift32
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state >> 24) as u8
        })
        .collect()
}

/// Copies the folder `from` into `to` (created), with its subfolders (the docs pages).
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// The one-word search target's path.
pub fn search_one_word() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        format!(
            "/search?q={}",
            crate::corpus::word(crate::corpus::ONE_WORD_RANK)
        )
    })
}

/// The three-word search target's path.
pub fn search_three_words() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let words: Vec<String> = crate::corpus::THREE_WORD_RANKS
            .iter()
            .map(|&rank| crate::corpus::word(rank))
            .collect();
        format!("/search?q={}", words.join("+"))
    })
}

/// The benchmark site: the baseline's 6,271-byte page and a 100 KiB file.
pub struct Site {
    /// The folder both systems serve.
    pub dir: PathBuf,
    /// index.html's bytes.
    pub page: Vec<u8>,
    /// The 100 KiB file's bytes.
    pub file_100k: Vec<u8>,
}

/// Writes the site into `dir`: bench/site/index.html, a 100 KiB and a 1 MiB file of
/// pseudo-random bytes (incompressible, the same on every run), the visit's assets and the
/// docs pages.
pub fn prepare_site(root: &Path, dir: &Path) -> anyhow::Result<Site> {
    let page = std::fs::read(root.join("bench/site/index.html"))
        .context("reading bench/site/index.html")?;
    let file_100k = noise(FILE_100K_BYTES, 0x2545_f491);
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("index.html"), &page)?;
    std::fs::write(dir.join(FILE_100K_URL.trim_start_matches('/')), &file_100k)?;
    std::fs::write(
        dir.join(FILE_1M_URL.trim_start_matches('/')),
        noise(FILE_1M_BYTES, 0x0bad_cafe),
    )?;
    for asset in VISIT_ASSETS {
        let name = asset.trim_start_matches('/');
        std::fs::copy(root.join("site/default").join(name), dir.join(name))
            .with_context(|| format!("copying site/default/{name}"))?;
    }
    crate::corpus::write_docs(dir, crate::corpus::PAGES)?;
    Ok(Site {
        dir: dir.to_path_buf(),
        page,
        file_100k,
    })
}

/// A system ready to boot.
pub enum System {
    /// Bramble: kernel.img and an SD card with the packed site.
    Bramble {
        /// kernel.img.
        kernel: PathBuf,
        /// A copy of the kernel ELF that kernel.img was made from, taken at build time (its
        /// symbols name the functions of `--profile`).
        elf: PathBuf,
        /// The SD card image.
        card: PathBuf,
        /// Sizes of kernel.img and SITE.BIN.
        sizes: BTreeMap<String, u64>,
        /// The `walk` target's site, with `--walk-site`.
        walk: Option<Walk>,
    },
    /// Debian's Raspberry Pi 1 Linux kernel with a busybox initramfs.
    Linux {
        /// Folder with zImage, board.dtb, initramfs.cpio.gz, VERSION.
        out: PathBuf,
    },
}

/// BRAMBLE.TXT for the benchmark: DHCP (QEMU's slirp gives 10.0.2.15), no access log
/// (busybox httpd logs nothing either), and HTTPS on port 443 with the test certificate.
const BRAMBLE_SETTINGS: &str = "hostname = bramble\naddress = dhcp\naccess_log = off\nhttps = on\n";

/// The guests' address on the benchmark's TAP link (`--tap`): Bramble's static address, the
/// Linux guest's `baseline.ip`. The namespace's side is 192.168.77.1/24.
pub const TAP_GUEST: std::net::Ipv4Addr = std::net::Ipv4Addr::new(192, 168, 77, 2);
/// The TAP device inside the benchmark's namespace.
pub const TAP_DEVICE: &str = "bbench0";

/// How a guest's NIC reaches the load generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// QEMU's user networking, 127.0.0.1 ports forwarded to the guest.
    UserForward,
    /// A TAP device ([`TAP_DEVICE`]) in the network namespace QEMU runs in; the guest is
    /// [`TAP_GUEST`].
    Tap,
}

/// BRAMBLE.TXT for `link`: over the TAP a static address (no DHCP server on that link).
fn bramble_settings(link: Link) -> String {
    match link {
        Link::UserForward => BRAMBLE_SETTINGS.to_string(),
        Link::Tap => BRAMBLE_SETTINGS.replace(
            "address = dhcp",
            &format!("address = {TAP_GUEST}/24\nntp = off"),
        ),
    }
}

/// The certificate (ECDSA P-256, for bramble.test) and key that the HTTPS targets are served
/// with: kernel/tls's test fixtures, checked as `bramble image --tls-cert --tls-key` checks.
pub fn tls_files(root: &Path) -> anyhow::Result<bramble::image::TlsFiles> {
    let data = root.join("kernel/tls/tests/data");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (certificate, key, _) =
        bramble::image::check_tls_files(&data.join("p256.pem"), &data.join("p256.key"), now)?;
    Ok(bramble::image::TlsFiles {
        certificate_name: "CERT.PEM".into(),
        certificate,
        key_name: "KEY.PEM".into(),
        key,
    })
}

impl System {
    /// Builds the kernel (cargo kernel), packs the site (with `walk_site` under
    /// [`WALK_PREFIX`], if given) and writes the SD card image, its BRAMBLE.TXT for `link`.
    pub fn bramble(
        site: &Site,
        work: &Path,
        walk_site: Option<&Path>,
        link: Link,
    ) -> anyhow::Result<System> {
        let kernel = bramble::kernel::build_kernel()?;
        let dir = work.join("bramble");
        // The shared site plus the `cold` target's file.
        let site_dir = dir.join("site");
        if site_dir.exists() {
            std::fs::remove_dir_all(&site_dir)?;
        }
        std::fs::create_dir_all(&site_dir)?;
        copy_tree(&site.dir, &site_dir)?;
        std::fs::write(
            site_dir.join(COLD_URL.trim_start_matches('/')),
            noise(COLD_BYTES, 0x1357_9bdf),
        )?;
        if let Some(walk_site) = walk_site {
            // A link, not a copy: the packer follows it, and a real site may be large.
            let target = walk_site
                .canonicalize()
                .with_context(|| format!("--walk-site {}", walk_site.display()))?;
            std::os::unix::fs::symlink(&target, site_dir.join(WALK_PREFIX.trim_matches('/')))?;
        }
        // The search targets need the index; the other targets do not see it.
        let options = PackOptions {
            site: bramble::pack::SiteOptions {
                search: true,
                ..Default::default()
            },
            cache_dir: bramble::pack::compress::default_cache_dir(),
            ..PackOptions::default()
        };
        let packed = pack_site(&site_dir, &options)?;
        if let Some(search) = &packed.summary.search {
            eprintln!(
                "bench: search index of {} pages: {} terms, dictionary {} B, postings {} B, for {} B of text",
                search.pages,
                search.terms,
                search.dictionary_bytes,
                search.postings_bytes,
                search.text_bytes
            );
        }
        std::fs::create_dir_all(&dir)?;
        let kernel_bytes = std::fs::read(&kernel.raw)?;
        let elf = dir.join("bramble-kernel.elf");
        std::fs::copy(&kernel.elf, &elf)
            .with_context(|| format!("copying {}", kernel.elf.display()))?;
        let mut sizes = BTreeMap::new();
        sizes.insert("kernel.img".to_string(), kernel_bytes.len() as u64);
        sizes.insert("SITE.BIN".to_string(), packed.image.len() as u64);
        let walk = match walk_site {
            Some(_) => {
                let index = bramble_site::SiteIndex::new_checked(&packed.image)
                    .context("reading back the packed index")?;
                let (paths, identity_bytes) = index
                    .files()
                    .filter(|file| file.path.starts_with(WALK_PREFIX))
                    .fold((Vec::new(), 0u64), |(mut paths, bytes), file| {
                        paths.push(file.path.to_string());
                        (paths, bytes + u64::from(file.identity.body.len))
                    });
                if paths.is_empty() {
                    bail!("--walk-site: no files packed under {WALK_PREFIX}");
                }
                let script = dir.join("walk.lua");
                std::fs::write(&script, crate::walk::walk_script(&paths))?;
                eprintln!(
                    "bench: walk: {} files ({identity_bytes} bytes uncompressed) under \
                     {WALK_PREFIX}; SITE.BIN {} bytes",
                    paths.len(),
                    packed.image.len()
                );
                Some(Walk {
                    script,
                    files: paths.len(),
                    identity_bytes,
                })
            }
            None => None,
        };
        let card = dir.join("card.img");
        build_image(
            &ImageInputs {
                kernel: kernel_bytes,
                site: packed.image,
                settings: bramble_settings(link),
                firmware: Vec::new(),
                size_mib: None,
                tls: Some(tls_files(&bramble::workspace_root())?),
            },
            &card,
        )?;
        Ok(System::Bramble {
            kernel: kernel.raw,
            elf,
            card,
            sizes,
            walk,
        })
    }

    /// Builds the baseline with bench/baseline/build-initramfs.sh (which downloads the
    /// Debian packages the first time).
    pub fn linux(root: &Path, site: &Site, work: &Path) -> anyhow::Result<System> {
        let out = work.join("baseline");
        let script = root.join("bench/baseline/build-initramfs.sh");
        let status = std::process::Command::new("bash")
            .arg(&script)
            .arg(&out)
            .arg(&site.dir)
            .stdout(std::process::Stdio::null())
            .status()
            .with_context(|| format!("running {}", script.display()))?;
        if !status.success() {
            bail!("{} failed ({status})", script.display());
        }
        Ok(System::Linux { out })
    }

    /// Short name for tables and folders.
    pub fn name(&self) -> &'static str {
        match self {
            System::Bramble { .. } => "bramble",
            System::Linux { .. } => "linux-busybox",
        }
    }

    /// The `walk` target's site, if this system serves one (Bramble with `--walk-site`).
    pub fn walk(&self) -> Option<&Walk> {
        match self {
            System::Bramble { walk, .. } => walk.as_ref(),
            System::Linux { .. } => None,
        }
    }

    /// Does it answer `/search` (Bramble with `--search`)?
    pub fn searches(&self) -> bool {
        matches!(self, System::Bramble { .. })
    }

    /// What is booted, in a sentence.
    pub fn description(&self) -> String {
        match self {
            System::Bramble { .. } => "Bramble kernel.img booted with -bios, site on the SD \
                card, usb-net behind QEMU's hub (RNDIS), DHCP, access log off; HTTPS on 443 \
                with an ECDSA P-256 certificate (kernel/tls's test fixture)."
                .into(),
            System::Linux { out } => {
                let version = std::fs::read_to_string(out.join("VERSION")).unwrap_or_default();
                format!(
                    "Debian armel Linux + busybox httpd on 80, nginx with OpenSSL on 443 \
                     (HTTP/1.1 and h2, the same ECDSA P-256 certificate as Bramble, \
                     bench/baseline/nginx.conf) ({}), initramfs, usb-net behind QEMU's hub \
                     switched to RNDIS (rndis_host), static 10.0.2.15.",
                    version.trim()
                )
            }
        }
    }

    /// Sizes of what is booted.
    pub fn image_bytes(&self) -> BTreeMap<String, u64> {
        match self {
            System::Bramble { sizes, .. } => sizes.clone(),
            System::Linux { out } => ["zImage", "initramfs.cpio.gz", "board.dtb"]
                .iter()
                .filter_map(|name| {
                    let size = std::fs::metadata(out.join(name)).ok()?.len();
                    Some((name.to_string(), size))
                })
                .collect(),
        }
    }

    /// Whether the system serves HTTPS (the tls- targets): both do, Linux with nginx.
    pub fn serves_https(&self) -> bool {
        matches!(self, System::Bramble { .. } | System::Linux { .. })
    }

    /// QEMU's arguments, 127.0.0.1:`ports.http` forwarded to the guest's port 80 (and
    /// `ports.https` to 443 where the system serves HTTPS).
    /// With `link` = [`Link::Tap`] the NIC is on [`TAP_DEVICE`] instead (`ports` unused), and
    /// QEMU must be started inside the namespace that holds it.
    pub fn qemu_args(
        &self,
        ports: super::Ports,
        count_instructions: bool,
        link: Link,
    ) -> Vec<OsString> {
        let port = ports.http;
        match self {
            System::Bramble { kernel, card, .. } => {
                let mut config = QemuConfig::new(Machine::Raspi1ap, Kernel::Raw(kernel.clone()));
                config.sd_card = Some(card.clone());
                config.network = Some(match link {
                    Link::UserForward => Network::User {
                        host_port: port,
                        topology: Topology::BehindHub,
                    },
                    Link::Tap => Network::Tap {
                        interface: TAP_DEVICE.into(),
                        topology: Topology::BehindHub,
                    },
                });
                config.https_host_port = Some(ports.https);
                config.count_instructions = count_instructions;
                config.args()
            }
            System::Linux { out } => {
                let path = |name: &str| out.join(name).into_os_string();
                let mut args: Vec<OsString> = vec![
                    "-M".into(),
                    "raspi1ap".into(),
                    "-display".into(),
                    "none".into(),
                    "-serial".into(),
                    "stdio".into(),
                    "-monitor".into(),
                    "none".into(),
                    "-kernel".into(),
                    path("zImage"),
                    "-dtb".into(),
                    path("board.dtb"),
                    "-initrd".into(),
                    path("initramfs.cpio.gz"),
                    // QEMU 7.2 lacks the ASB bridge registers bcm2835-power reads at probe.
                    "-append".into(),
                    match link {
                        Link::UserForward => "console=ttyAMA0,115200 \
                            initcall_blacklist=bcm2835_power_driver_init baseline.nic=rndis"
                            .into(),
                        Link::Tap => format!(
                            "console=ttyAMA0,115200 \
                             initcall_blacklist=bcm2835_power_driver_init baseline.nic=rndis \
                             baseline.ip={TAP_GUEST}"
                        )
                        .into(),
                    },
                    "-netdev".into(),
                    match link {
                        Link::UserForward => format!(
                            "user,id=net0,hostfwd=tcp:127.0.0.1:{port}-:80,\
                                 hostfwd=tcp:127.0.0.1:{}-:443",
                            ports.https
                        )
                        .into(),
                        Link::Tap => {
                            format!("tap,id=net0,ifname={TAP_DEVICE},script=no,downscript=no")
                                .into()
                        }
                    },
                    "-device".into(),
                    "usb-net,netdev=net0".into(),
                ];
                if count_instructions {
                    args.extend(["-icount".into(), "shift=0".into()]);
                }
                args
            }
        }
    }

    /// The kernel ELF with symbols (Bramble only).
    pub fn elf(&self) -> Option<&Path> {
        match self {
            System::Bramble { elf, .. } => Some(elf),
            System::Linux { .. } => None,
        }
    }

    /// The guest's own counters: Bramble's `status` console line, Linux's counters CGI.
    pub fn counters(&self, guest: &mut Guest, port: u16) -> Option<GuestCounters> {
        self.counters_with(guest, || {
            probe::get(port, "/cgi-bin/counters", &[], Duration::from_secs(20))
        })
    }

    /// [`System::counters`], the Linux guest's CGI fetched by `fetch_cgi` (over the TAP link,
    /// from inside the benchmark's namespace).
    pub fn counters_with(
        &self,
        guest: &mut Guest,
        fetch_cgi: impl FnOnce() -> Option<probe::Response>,
    ) -> Option<GuestCounters> {
        match self {
            System::Bramble { .. } => {
                guest.drain();
                guest.send_line("status").ok()?;
                let line = guest.wait_line("status: up", Duration::from_secs(10))?;
                let mut counters = counters::parse_bramble_status(&line)?;
                // The cache line comes before the http line when there is a site.
                let mut events =
                    guest.wait_line_any(&["status: cache", "status: http"], Duration::from_secs(2));
                if let Some(cache) = events.take_if(|line| line.contains("status: cache")) {
                    counters::add_bramble_cache_events(&mut counters, &cache);
                    events = guest.wait_line("status: http", Duration::from_secs(2));
                }
                if let Some(events) = events {
                    counters::add_bramble_events(&mut counters, &events);
                }
                if let Some(tls) = guest.wait_line("status: https", Duration::from_secs(2)) {
                    counters::add_bramble_tls_events(&mut counters, &tls);
                }
                Some(counters)
            }
            System::Linux { .. } => {
                let response = fetch_cgi()?;
                if response.status != 200 {
                    return None;
                }
                counters::parse_linux_counters(&String::from_utf8_lossy(&response.body))
            }
        }
    }
}
