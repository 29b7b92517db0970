//! A card with two site slots (`bramble image --publish-key`): the kernel serves the slot the
//! record names live, and a slot that fails its checks is never served, the other one is.
//! Between boots the card is changed by `bramble publish --card` (site B into slot B), by
//! `--rollback`, then by damaging slot A's index; one card, three boots.

mod support;

use bramble::image::{ImageInputs, SlotSpec, build_image_slotted};
use bramble_fat::site_slots::{Slots, candidates};
use bramble_qemu::{Kernel, Machine, Network, QemuConfig, Topology};
use bramble_tests::{BOOT_TIMEOUT, Guest, kernel};
use sha2::Digest;
use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Duration;
use support::{free_port, get};

const MIB: u64 = 1024 * 1024;

fn site(dir: &Path, name: &str, page: &str) -> Vec<u8> {
    let root = dir.join(name);
    fs::create_dir_all(&root).unwrap();
    fs::write(root.join("index.html"), page).unwrap();
    fs::write(root.join(format!("{name}.html")), page.repeat(3)).unwrap();
    bramble::pack::pack_site(&root, &bramble::pack::PackOptions::default())
        .expect("pack")
        .image
}

fn slots_of(card: &[u8]) -> Slots {
    let sectors = (card.len() / 512) as u64;
    let volume = bramble_fat::check_card(sectors, |sector, buffer| {
        let at = sector as usize * 512;
        buffer.copy_from_slice(&card[at..at + 512]);
        Ok::<(), ()>(())
    })
    .unwrap();
    candidates(&card[..512])
        .unwrap()
        .into_iter()
        .flatten()
        .find_map(|(first, count)| {
            let at = first as usize * 512;
            Slots::confirm(
                first,
                count,
                sectors,
                &volume.partition,
                &card[at..at + 512],
            )
            .ok()
        })
        .expect("slots")
}

fn write_at(card: &Path, block: u64, bytes: &[u8]) {
    let mut file = fs::OpenOptions::new().write(true).open(card).unwrap();
    file.seek(SeekFrom::Start(block * 512)).unwrap();
    file.write_all(bytes).unwrap();
}

/// Boots the card, waits for the slot line and the server, and returns the slot line and
/// `/`'s body.
fn boot(card: &Path) -> (String, Vec<u8>, Guest) {
    let port = free_port();
    let mut config = QemuConfig::new(Machine::Raspi1ap, Kernel::Raw(kernel().raw.clone()));
    config.sd_card = Some(card.to_path_buf());
    config.network = Some(Network::User {
        host_port: port,
        topology: Topology::BehindHub,
    });
    config.isolated = true;
    let mut guest = Guest::start(&config);
    let line = guest.expect_line("slots: serving", BOOT_TIMEOUT);
    guest.expect_line("serving: http://", Duration::from_secs(30));
    let response = get(port, "/", "");
    assert_eq!(response.status, 200, "{line}");
    (line, response.body, guest)
}

#[test]
fn the_live_slot_is_served_and_a_slot_failing_its_checks_never_is() {
    let dir = tempfile::tempdir().unwrap();
    let page_a = "<h1>site A</h1>".repeat(20);
    let page_b = "<h1>site B</h1>".repeat(20);
    let site_a = site(dir.path(), "a", &page_a);
    let site_b = site(dir.path(), "b", &page_b);
    fs::write(dir.path().join("b.bin"), &site_b).unwrap();
    let key = dir.path().join("owner.key");
    bramble::publish::keys::run(bramble::publish::keys::KeygenArgs {
        output: key.clone(),
        force: false,
    })
    .unwrap();
    let card = dir.path().join("card.img");
    let inputs = ImageInputs {
        kernel: fs::read(&kernel().raw).unwrap(),
        site: site_a,
        settings: bramble_settings::TEMPLATE.to_string(),
        firmware: Vec::new(),
        size_mib: None,
        tls: None,
    };
    let spec = SlotSpec {
        slot_bytes: MIB,
        publish_key: Some(
            bramble::publish::keys::read_public(&dir.path().join("owner.pub")).unwrap(),
        ),
    };
    build_image_slotted(&inputs, Vec::new(), Some(&spec), &card).expect("image");
    let publish = |site: Option<&str>, version: u64, rollback: bool| {
        bramble::publish::card::run(bramble::publish::card::PublishArgs {
            site: site.map(|name| dir.path().join(name)),
            card: Some(card.clone()),
            to: None,
            ca_file: None,
            out: None,
            host: None,
            key: key.clone(),
            version: Some(version),
            rollback,
            nudge: false,
        })
        .expect("publish");
    };

    // 1. `bramble publish` (its library entry point) of site B's SITE.BIN: slot B, version 7.
    publish(Some("b.bin"), 7, false);
    let (line, body, guest) = boot(&card);
    assert!(line.contains("slot B, version 7"), "{line}");
    assert!(!line.contains("failed"), "{line}");
    assert_eq!(body, page_b.as_bytes());
    drop(guest);

    // 2. `bramble publish --rollback`: slot A again, as `bramble image` wrote it.
    publish(None, 8, true);
    let (line, body, guest) = boot(&card);
    assert!(line.contains("slot A, version 0"), "{line}");
    assert_eq!(body, page_a.as_bytes());
    drop(guest);

    // 3. Slot A's index damaged: never served; slot B is, and the console says why.
    let slots = slots_of(&fs::read(&card).unwrap());
    write_at(&card, slots.slot_block(0), &[0xFF; 64]);
    let (line, body, mut guest) = boot(&card);
    assert!(
        line.contains("slot B, version 7") && line.contains("failed its checks"),
        "{line}"
    );
    assert_eq!(body, page_b.as_bytes());
    guest.drain();
    let log = guest.transcript.join("\n");
    assert!(log.contains("slots: slot A:"), "{log}");
    // `selftest board` reads the site served (slot B) from the card: its bytes, whole.
    guest.send_line("selftest board");
    let line = guest.expect_line("selftest: card", Duration::from_secs(30));
    let hex: String = sha2::Sha256::digest(&site_b)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    assert!(
        line.contains(&format!("SITE.BIN {} bytes", site_b.len())) && line.contains(&hex),
        "{line}"
    );
}
