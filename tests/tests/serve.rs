//! Boots raspi1ap with a site on its SD card and the usb-net NIC (behind QEMU's hub, as on a
//! B+, and on the root port), then fetches every file through 127.0.0.1 and compares bytes.

use bramble::image::{ImageInputs, build_image};
use bramble::pack::{PackOptions, pack_site};
use bramble_qemu::{Kernel, Machine, Network, QemuConfig, Topology};
use bramble_testkit::{Parsed, parse_response};
use bramble_tests::{BOOT_TIMEOUT, Guest, kernel};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.1 GET with `Connection: close`; returns (status, head, body).
fn get(port: u16, path: &str) -> (u16, String, Vec<u8>) {
    let mut stream =
        TcpStream::connect(("127.0.0.1", port)).expect("connect to the forwarded port");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: bramble\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .expect("read the response");
    match parse_response(&response, false, true) {
        Parsed::Complete(response, _) => (response.status, response.head, response.body),
        Parsed::Partial => panic!("{path}: incomplete response {response:?}"),
        Parsed::Invalid(why) => panic!("{path}: {why}"),
    }
}

fn site_files(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let url = format!("/{}", path.strip_prefix(root).unwrap().display());
                files.push((url, std::fs::read(&path).unwrap()));
            }
        }
    }
    files
}

fn serve_and_fetch_everything(topology: Topology, settings: &str, driver: &str) {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    std::fs::create_dir_all(site.join("docs")).unwrap();
    std::fs::write(
        site.join("index.html"),
        "<!doctype html><h1>Bramble test</h1>\n".repeat(20),
    )
    .unwrap();
    std::fs::write(site.join("docs/index.html"), "<p>docs</p>").unwrap();
    std::fs::write(site.join("app.js"), "console.log('hi');\n".repeat(300)).unwrap();
    let noise: Vec<u8> = (0u32..40_000)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    std::fs::write(site.join("photo.jpg"), noise).unwrap();
    let packed = pack_site(&site, &PackOptions::default()).unwrap();
    let card = dir.path().join("card.img");
    let inputs = ImageInputs {
        kernel: std::fs::read(&kernel().raw).unwrap(),
        site: packed.image,
        settings: settings.to_string(),
        firmware: Vec::new(),
        size_mib: None,
        tls: None,
    };
    build_image(&inputs, &card).unwrap();

    let port = free_port();
    let mut config = QemuConfig::new(Machine::Raspi1ap, Kernel::Raw(kernel().raw.clone()));
    config.sd_card = Some(card);
    config.network = Some(Network::User {
        host_port: port,
        topology,
    });
    let mut guest = Guest::start(&config);
    let ready = guest.expect_line("network device ready", BOOT_TIMEOUT);
    assert!(
        ready.contains(driver),
        "{driver} driver expected: {ready:?}"
    );
    let hub_seen = guest
        .transcript
        .iter()
        .any(|line| line.contains("usb: hub "));
    assert_eq!(
        hub_seen,
        topology == Topology::BehindHub,
        "hub enumeration:\n{}",
        guest.transcript.join("\n")
    );
    let lease = guest.expect_line("dhcp: lease", BOOT_TIMEOUT);
    assert!(lease.contains("10.0.2.15"), "{lease:?}");
    guest.expect_line("serving: http://10.0.2.15/", Duration::from_secs(30));

    for (url, bytes) in site_files(&site) {
        let (status, head, body) = get(port, &url);
        assert_eq!(status, 200, "{url}: {head}");
        assert!(
            body == bytes,
            "{url}: {} bytes served, {} on disk",
            body.len(),
            bytes.len()
        );
    }
    let (status, _, body) = get(port, "/docs/");
    assert_eq!((status, body.as_slice()), (200, b"<p>docs</p>".as_slice()));
    let (status, head, _) = get(port, "/docs");
    assert!(status == 301 || status == 308, "{head}");
    let (status, _, _) = get(port, "/no/such/page");
    assert_eq!(status, 404);
}

#[test]
fn serves_every_file_with_the_nic_behind_a_hub() {
    serve_and_fetch_everything(Topology::BehindHub, bramble_settings::TEMPLATE, "Rndis");
}

#[test]
fn serves_every_file_with_the_nic_on_the_root_port() {
    serve_and_fetch_everything(Topology::RootPort, bramble_settings::TEMPLATE, "Rndis");
}

#[test]
fn serves_every_file_over_cdc_ecm_when_the_settings_ask_for_it() {
    // usb-net's configuration 1: what most USB Ethernet adapters speak.
    serve_and_fetch_everything(Topology::BehindHub, "usb_protocol = ecm\n", "CdcEcm");
}
