//! The `bramble` tool's own subcommands, run by QEMU tests as an owner would run them:
//! `bramble image` in process, through the binary's argument parser and entry point, and
//! `bramble qemu` inside a namespace, as the test binary's ignored helper test (the
//! [`bramble_qemu_helper!`] macro defines it) that the namespace enters with the arguments
//! in the environment. (This crate cannot name the `bramble` binary itself: Cargo gives
//! `CARGO_BIN_EXE_*` only to the tool's own tests.)

use super::Netns;
use bramble_tests::Guest;
use clap::Parser;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The `bramble qemu` argument list for the helper, one argument per line.
pub const ARGS_VAR: &str = "BRAMBLE_QEMU_ARGS";

#[derive(Parser)]
struct QemuCli {
    #[command(flatten)]
    qemu: bramble::qemu_cmd::QemuArgs,
}

#[derive(Parser)]
struct ImageCli {
    #[command(flatten)]
    image: bramble::image::ImageArgs,
}

/// Defines the helper test `bramble_qemu_in_namespace`, which [`start_bramble_qemu`] runs
/// inside the namespace.
#[macro_export]
macro_rules! bramble_qemu_helper {
    () => {
        /// The helper: `bramble qemu` with the arguments in the environment (run inside the
        /// namespace by `netns::tool::start_bramble_qemu`). Without them there is nothing to run.
        #[test]
        #[ignore = "helper: run by this file's QEMU tests inside their namespace"]
        fn bramble_qemu_in_namespace() {
            netns::tool::run_qemu_from_environment();
        }
    };
}

/// The helper's body: `bramble qemu` with the arguments in [`ARGS_VAR`].
pub fn run_qemu_from_environment() {
    let Ok(args) = std::env::var(ARGS_VAR) else {
        eprintln!("{ARGS_VAR} is not set: nothing to run");
        return;
    };
    let cli = QemuCli::parse_from(std::iter::once("qemu").chain(args.lines()));
    bramble::qemu_cmd::run(cli.qemu).expect("bramble qemu");
}

/// `bramble image ARGS`, through the binary's parser and entry point.
pub fn bramble_image(args: &[&str]) {
    let cli = ImageCli::try_parse_from(std::iter::once("image").chain(args.iter().copied()))
        .unwrap_or_else(|error| panic!("bramble image {args:?}: {error}"));
    if let Err(error) = bramble::image::run(cli.image) {
        panic!("bramble image {args:?}: {error:#}");
    }
}

/// A card as an owner makes one with `bramble image`: the test site (written to `dir/site`),
/// `settings` as its BRAMBLE.TXT (written to `dir`), the CA at `acme_ca` trusted when given,
/// the kernel this run built. Returns the card (`dir/card.img`) and the site's files.
pub fn card_image(
    dir: &Path,
    settings: &str,
    acme_ca: Option<&Path>,
) -> (PathBuf, Vec<(String, Vec<u8>)>) {
    let site = dir.join("site");
    let files = super::write_site(&site);
    let config = dir.join("BRAMBLE.TXT");
    std::fs::write(&config, settings).expect("write BRAMBLE.TXT");
    let card = dir.join("card.img");
    let path = |p: &Path| p.display().to_string();
    let mut args = vec![
        "--site".to_string(),
        path(&site),
        "--config".into(),
        path(&config),
        "--kernel".into(),
        path(&bramble_tests::kernel().raw),
        "-o".into(),
        path(&card),
    ];
    if let Some(ca) = acme_ca {
        args.extend(["--acme-ca".to_string(), path(ca)]);
    }
    bramble_image(&args.iter().map(String::as_str).collect::<Vec<_>>());
    (card, files)
}

/// What a card for the signed publishing tests holds beyond its site and settings.
pub struct SlotCard<'a> {
    /// The owner's public key (`--publish-key`).
    pub publish_key: &'a Path,
    /// The board's certificate chain and key (`--tls-cert`, `--tls-key`).
    pub tls: Option<(&'a Path, &'a Path)>,
    /// A CA the board trusts for its outbound HTTPS (`--acme-ca`).
    pub acme_ca: Option<&'a Path>,
}

/// `bramble image` for a card with two 4 MiB site slots, as an owner who publishes makes
/// one: `site` and `settings` (a BRAMBLE.TXT), `extra`'s keys, the kernel this run built,
/// written to `out`.
pub fn slot_card(site: &Path, settings: &Path, extra: &SlotCard<'_>, out: &Path) {
    let path = |p: &Path| p.display().to_string();
    let mut args = vec![
        "--site".to_string(),
        path(site),
        "--config".into(),
        path(settings),
        "--publish-key".into(),
        path(extra.publish_key),
        "--slot-mib".into(),
        "4".into(),
        "--kernel".into(),
        path(&bramble_tests::kernel().raw),
        "-o".into(),
        path(out),
    ];
    if let Some((cert, key)) = extra.tls {
        args.extend([
            "--tls-cert".into(),
            path(cert),
            "--tls-key".into(),
            path(key),
        ]);
    }
    if let Some(ca) = extra.acme_ca {
        args.extend(["--acme-ca".into(), path(ca)]);
    }
    bramble_image(&args.iter().map(String::as_str).collect::<Vec<_>>());
}

/// `bramble qemu`'s arguments for `card` on the namespace's TAP link.
pub fn tap_args(card: &Path) -> Vec<String> {
    vec![
        "--image".into(),
        card.display().to_string(),
        "--tap".into(),
        super::TAP.into(),
    ]
}

/// `bramble qemu` running in the namespace. Dropping it sends SIGTERM (which stops QEMU
/// cleanly) and waits, then kills whatever is left.
pub struct BrambleQemu {
    guest: Option<Guest>,
}

impl BrambleQemu {
    /// The guest's serial console (the tool passes it through).
    pub fn guest(&mut self) -> &mut Guest {
        self.guest.as_mut().expect("running")
    }

    /// A QEMU a test started itself, for what the tool has no flag for (`-icount`); dropped
    /// the same way.
    pub fn qemu_itself(guest: Guest) -> BrambleQemu {
        BrambleQemu { guest: Some(guest) }
    }
}

impl std::ops::Deref for BrambleQemu {
    type Target = Guest;

    fn deref(&self) -> &Guest {
        self.guest.as_ref().expect("running")
    }
}

impl std::ops::DerefMut for BrambleQemu {
    fn deref_mut(&mut self) -> &mut Guest {
        self.guest()
    }
}

impl Drop for BrambleQemu {
    fn drop(&mut self) {
        if let Some(guest) = self.guest.take() {
            let pid = guest.pid().to_string();
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && Path::new(&format!("/proc/{pid}/exe")).exists() {
                std::thread::sleep(Duration::from_millis(50));
            }
            drop(guest);
        }
    }
}

/// Starts `bramble qemu ARGS` inside `netns` (the calling test binary must define the helper
/// with [`bramble_qemu_helper!`]).
pub fn start_bramble_qemu(netns: &Netns, args: &[String]) -> BrambleQemu {
    let binary = std::env::current_exe().expect("this test binary");
    let mut command = netns.command(binary);
    command
        .args([
            "--exact",
            "bramble_qemu_in_namespace",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ARGS_VAR, args.join("\n"));
    BrambleQemu {
        // Not QEMU itself: `bramble qemu` in the helper starts it (unjudged here).
        guest: Some(Guest::start_judged(command, None)),
    }
}
