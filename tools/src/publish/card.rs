//! `bramble publish --card IMG`: a signed site into the idle slot of a card image (or a card
//! in a reader), by the kernel's own card writer (`bramble_publish::writer`) over the file,
//! with the kernel's write window: only the slot record and the slots are ever written, so
//! the certificate store, the settings and the kernel stay as they are.
//!
//! `bramble publish --out DIR --host NAME`: the same signed manifest, written for a board
//! that pulls (`publish_url`): `DIR/manifest` (the manifest, then its signature) and
//! `DIR/site-VERSION.bin` (the image), for the owner's CI to put on any static HTTPS host
//! (`bramble_publish::pull` says where the board looks).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use bramble_fat::site_slots::{SlotRecord, Slots, candidates};
use bramble_hal::block::{BLOCK_SIZE, BlockDevice, BlockError, BlockWrite};
use bramble_publish::manifest::{Action, Manifest};
use bramble_publish::writer::Publisher;
use ed25519_dalek::Signer;
use sha2::{Digest, Sha256};

/// Arguments of `bramble publish`.
#[derive(clap::Args, Debug)]
pub struct PublishArgs {
    /// The site: a folder (packed first, as `bramble pack` would) or a SITE.BIN. With
    /// --rollback --out or --to: the site to roll back to (the board's other slot must hold
    /// it).
    #[arg(value_name = "SITE_DIR|SITE.BIN", required_unless_present = "rollback")]
    pub site: Option<PathBuf>,
    /// The card image (or card device) to publish into; it must have site slots and the
    /// public half of --key (`bramble image --publish-key`).
    #[arg(long, value_name = "IMG", required_unless_present_any = ["out", "to"])]
    pub card: Option<PathBuf>,
    /// Instead of a card: upload to the board over HTTPS (`PUT /.well-known/bramble/site`),
    /// resuming after a dropped connection; the board checks the signature, the version
    /// and its host name, writes its idle slot and serves the new site without a restart.
    #[arg(long, value_name = "https://HOST[:PORT]", conflicts_with_all = ["card", "out"])]
    pub to: Option<String>,
    /// With --to: the CA certificate(s) (PEM) the board's certificate must chain to
    /// [default: the web's roots, Mozilla's list].
    #[arg(long, value_name = "PEM", requires = "to")]
    pub ca_file: Option<PathBuf>,
    /// Instead of a card: write DIR/manifest and DIR/site-VERSION.bin for a board that pulls
    /// them from a static host (`publish_url`); needs --host.
    #[arg(long, value_name = "DIR", conflicts_with = "card", requires = "host")]
    pub out: Option<PathBuf>,
    /// The board's `hostname` the manifest names (needed with --out; with --to, the board
    /// says its own unless this is given; a card's is read from its BRAMBLE.TXT).
    #[arg(long, value_name = "NAME", conflicts_with = "card")]
    pub host: Option<String>,
    /// The owner's secret key (`bramble keygen`).
    #[arg(long, value_name = "OWNER.KEY")]
    pub key: PathBuf,
    /// The version to sign, above every one the card accepted [default: now, in Unix
    /// seconds, so that each CI run's is higher].
    #[arg(long, value_name = "N")]
    pub version: Option<u64>,
    /// Switch back to the previous site (the other slot), signed, instead of publishing. With
    /// --out, only a rollback manifest is written, naming SITE (the site the board's other
    /// slot holds): the board pulls it and switches back. With --to, that manifest goes to
    /// the board, which switches back at once.
    #[arg(long)]
    pub rollback: bool,
    /// With --to, to a board that pulls (`publish_url`): send SITE's signed manifest without
    /// the image, so that the board checks its static host now rather than at its next
    /// scheduled check. Give the --version the --out run signed.
    #[arg(long, requires = "to", conflicts_with = "rollback")]
    pub nudge: bool,
}

/// The card as the writer sees it: blocks of the file, writable only inside `window`.
struct FileCard {
    file: File,
    blocks: u64,
    window: (u64, u64),
}

impl BlockDevice for FileCard {
    fn block_count(&self) -> u64 {
        self.blocks
    }

    fn read_blocks(&mut self, first: u64, buffer: &mut [u8]) -> Result<(), BlockError> {
        self.file
            .read_exact_at(buffer, first * BLOCK_SIZE as u64)
            .map_err(|_| BlockError::Transfer)
    }
}

impl BlockWrite for FileCard {
    fn write_blocks(&mut self, first: u64, data: &[u8]) -> Result<(), BlockError> {
        let blocks = (data.len() / BLOCK_SIZE) as u64;
        let (start, len) = self.window;
        if first < start || first + blocks > start + len {
            return Err(BlockError::ReadOnly);
        }
        self.file
            .write_all_at(data, first * BLOCK_SIZE as u64)
            .map_err(|_| BlockError::WriteFailed)
    }
}

/// The card's slots, record and host name, found as the kernel finds them.
pub struct OpenCard {
    card: FileCard,
    slots: Slots,
    record: SlotRecord,
    next_copy: usize,
    /// The board's `hostname` (BRAMBLE.TXT on the card).
    pub hostname: String,
}

impl OpenCard {
    /// The card writer over this card as the board builds it: the card (writable only in
    /// the slots' window), the writer over its record, and the board's host name. The
    /// `--to` tests serve uploads on the host with it.
    pub fn into_writer(self) -> (Box<dyn BlockWrite + Send>, Publisher, String) {
        (
            Box::new(self.card),
            Publisher::new(self.slots, self.record, self.next_copy),
            self.hostname,
        )
    }
}

/// Opens the card image at `path` for publishing.
pub fn open_card(path: &Path) -> anyhow::Result<OpenCard> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    let blocks = file.metadata()?.len() / BLOCK_SIZE as u64;
    let sector = |n: u64| -> anyhow::Result<[u8; BLOCK_SIZE]> {
        let mut buffer = [0u8; BLOCK_SIZE];
        file.read_exact_at(&mut buffer, n * BLOCK_SIZE as u64)?;
        Ok(buffer)
    };
    let volume = bramble_fat::check_card(blocks, |n, buffer| {
        buffer.copy_from_slice(&sector(n).map_err(|_| ())?);
        Ok::<(), ()>(())
    })
    .map_err(|error| {
        anyhow::anyhow!("{}: not a card the kernel boots: {error:?}", path.display())
    })?;
    let mut slots = None;
    for (first, count) in candidates(&sector(0)?)
        .map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))?
        .into_iter()
        .flatten()
    {
        if let Ok(found) = Slots::confirm(
            first,
            count,
            blocks,
            &volume.partition,
            &sector(u64::from(first))?,
        ) {
            slots = Some(found);
        }
    }
    let Some(slots) = slots else {
        bail!(
            "{} has no site slots: make it with `bramble image --publish-key OWNER.PUB`",
            path.display()
        );
    };
    let copies = [
        sector(slots.record_block(0))?,
        sector(slots.record_block(1))?,
    ];
    let Some((record, next_copy)) = SlotRecord::current([&copies[0], &copies[1]]) else {
        bail!(
            "{}: both copies of the slot record are damaged",
            path.display()
        );
    };
    let settings = crate::image::card::read_boot_file(path, bramble_settings::FILE_NAME)?
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    let hostname = bramble_settings::Settings::parse_lenient(&settings, |_| {})
        .hostname
        .as_str()
        .to_string();
    Ok(OpenCard {
        card: FileCard {
            file,
            blocks,
            window: slots.writable(),
        },
        slots,
        record,
        next_copy,
        hostname,
    })
}

fn site_bytes(path: &Path) -> anyhow::Result<Vec<u8>> {
    if path.is_dir() {
        let packed = crate::pack::pack_site(path, &crate::pack::PackOptions::from_env()?)
            .with_context(|| format!("packing {}", path.display()))?;
        packed.warn_left_out();
        eprintln!("{}", packed.summary);
        Ok(packed.image)
    } else {
        Ok(crate::image::read_site_image(path)?)
    }
}

/// Writes the signed manifest file and the image for a static host into `dir`.
fn write_out(args: &PublishArgs, dir: &Path, host: &str, version: u64) -> anyhow::Result<()> {
    let key = super::keys::read_secret(&args.key)?;
    let Some(site) = &args.site else {
        if args.rollback {
            bail!(
                "name the site to roll back to (the folder or SITE.BIN the board's other slot holds)"
            );
        }
        bail!("name a site folder or SITE.BIN to publish");
    };
    let image = site_bytes(site)?;
    if args.rollback {
        let manifest = Manifest::new(
            Action::Rollback,
            version,
            0,
            Sha256::digest(&image).into(),
            host,
        )
        .with_context(|| {
            format!("--host {host:?} is not a host name (letters, digits, '-' and '.', 1-63)")
        })?
        .encode();
        let signature = key.sign(&manifest).to_bytes();
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let manifest_path = dir.join("manifest");
        let mut file = manifest.to_vec();
        file.extend_from_slice(&signature);
        std::fs::write(&manifest_path, &file)
            .with_context(|| format!("writing {}", manifest_path.display()))?;
        println!(
            "{}: version {version}, a rollback signed for {host} to the site of {} bytes \
             packed from {}; upload it; the board switches back if its other slot holds that \
             site",
            manifest_path.display(),
            image.len(),
            site.display()
        );
        return Ok(());
    }
    let len = u32::try_from(image.len()).context("the site image is 4 GiB or more")?;
    let manifest = Manifest::new(
        Action::Publish,
        version,
        len,
        Sha256::digest(&image).into(),
        host,
    )
    .with_context(|| {
        format!("--host {host:?} is not a host name (letters, digits, '-' and '.', 1-63)")
    })?
    .encode();
    let signature = key.sign(&manifest).to_bytes();
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let image_name = format!("site-{version}.bin");
    let image_path = dir.join(&image_name);
    std::fs::write(&image_path, &image)
        .with_context(|| format!("writing {}", image_path.display()))?;
    // The manifest last: a host that serves the folder as it fills never names an image
    // that is not there yet.
    let manifest_path = dir.join("manifest");
    let mut file = manifest.to_vec();
    file.extend_from_slice(&signature);
    std::fs::write(&manifest_path, &file)
        .with_context(|| format!("writing {}", manifest_path.display()))?;
    println!(
        "{}: version {version} ({} bytes) signed for {host}; {} beside it. Upload both; the \
         board checks the manifest at its publish_url",
        manifest_path.display(),
        image.len(),
        image_name
    );
    Ok(())
}

/// Runs `bramble publish`.
pub fn run(args: PublishArgs) -> anyhow::Result<()> {
    let version = args.version.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs())
    });
    if let Some(url) = &args.to {
        return upload(&args, url, version);
    }
    let card_path = match (&args.card, &args.out, &args.host) {
        (_, Some(dir), Some(host)) => return write_out(&args, dir, host, version),
        (None, None, Some(_)) => bail!("--host goes with --out or --to"),
        (Some(card), None, _) => card.clone(),
        _ => {
            bail!("name a card (--card IMG) or a folder for a static host (--out DIR --host NAME)")
        }
    };
    let key = super::keys::read_secret(&args.key)?;
    let mut open = open_card(&card_path)?;
    if open.slots.publish_key != Some(key.verifying_key().to_bytes()) {
        // The writer refuses it too; saying so first names the cause plainly.
        eprintln!(
            "warning: {} does not hold the public half of {}; the card will refuse it",
            card_path.display(),
            args.key.display()
        );
    }
    let mut publisher = Publisher::new(open.slots, open.record, open.next_copy);
    let started = Instant::now();
    let fail = |error: bramble_publish::writer::PublishError| {
        let mut json = String::new();
        let _ = error.write_json(&mut json);
        anyhow::anyhow!("{json}")
    };
    if args.rollback {
        if args.site.is_some() {
            bail!("--rollback --card switches to the other slot: name no site");
        }
        let other = open.record.idle();
        let sha256 = open.record.slots[usize::from(other)].sha256;
        let manifest = Manifest::new(Action::Rollback, version, 0, sha256, &open.hostname)
            .context("the card's hostname cannot be signed")?
            .encode();
        let signature = key.sign(&manifest).to_bytes();
        let record = publisher
            .rollback(&mut open.card, &manifest, &signature, &open.hostname)
            .map_err(fail)?;
        open.card.file.sync_all()?;
        println!(
            "{}: rolled back to slot {} (version {}), 1 block written",
            card_path.display(),
            slot_name(record.live),
            record.slots[usize::from(record.live)].version
        );
        return Ok(());
    }
    let Some(site) = &args.site else {
        bail!("name a site folder or SITE.BIN to publish");
    };
    let image = site_bytes(site)?;
    let len = u32::try_from(image.len()).context("the site image is 4 GiB or more")?;
    let manifest = Manifest::new(
        Action::Publish,
        version,
        len,
        Sha256::digest(&image).into(),
        &open.hostname,
    )
    .context("the card's hostname cannot be signed")?
    .encode();
    let signature = key.sign(&manifest).to_bytes();
    let mut offset = publisher
        .begin(&mut open.card, &manifest, &signature, &open.hostname)
        .map_err(fail)?;
    for piece in image.chunks(64 * 1024) {
        offset = publisher
            .write(&mut open.card, offset, piece)
            .map_err(fail)?;
    }
    let mut scratch = vec![0u8; 64 * 1024];
    let record = publisher
        .finish(&mut open.card, &mut scratch)
        .map_err(fail)?;
    open.card.file.sync_all()?;
    println!(
        "{}: version {version} ({} bytes) published into slot {}, now live; {} card blocks \
         written in {} ms",
        card_path.display(),
        image.len(),
        slot_name(record.live),
        publisher.blocks_written(),
        started.elapsed().as_millis()
    );
    Ok(())
}

/// `bramble publish SITE --to URL` (or `--rollback --to URL`): over HTTPS to the board.
fn upload(args: &PublishArgs, url: &str, version: u64) -> anyhow::Result<()> {
    let target = super::upload::parse_target(url)?;
    let key = super::keys::read_secret(&args.key)?;
    let config = super::upload::client_config(args.ca_file.as_deref())?;
    let Some(site) = &args.site else {
        if args.rollback {
            bail!(
                "--rollback --to names the site to go back to (the folder or SITE.BIN the \
                 board's other slot holds)"
            );
        }
        bail!("name a site folder or SITE.BIN to publish");
    };
    let image = site_bytes(site)?;
    let upload = super::upload::Upload {
        target: &target,
        config,
        image: &image,
        version,
        host: args.host.as_deref(),
        key: &key,
    };
    let answer = if args.rollback {
        super::upload::rollback(&upload)?
    } else if args.nudge {
        super::upload::nudge(&upload)?
    } else {
        super::upload::publish(&upload)?
    };
    println!("{}", answer.body.trim());
    Ok(())
}

fn slot_name(slot: u8) -> &'static str {
    if slot & 1 == 0 { "A" } else { "B" }
}
