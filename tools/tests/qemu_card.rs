//! `bramble qemu --image CARD --tap IF` through the real binary, inside a network namespace
//! the test creates: what boots is the kernel on the card (here one whose banner names
//! another revision than the tree's, as a card made by an older build would), and the guest
//! takes its DHCP lease from a dnsmasq on that TAP link and serves the card's site there.
//! Everything the test starts (dnsmasq, bramble, QEMU) is stopped by PID; the namespace is
//! deleted on drop.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bramble_testkit::netns::TapNamespace;

const TAP: &str = "tap0";

/// A child killed by PID (SIGTERM first, then SIGKILL) however the test ends.
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let pid = self.0.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn can_run() -> bool {
    let have = |program: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {program}")])
            .output()
            .is_ok_and(|output| output.status.success())
    };
    let root = std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|status| status.lines().any(|l| l.starts_with("Uid:\t0\t")));
    if bramble_qemu::find_qemu().is_err()
        || !root
        || !["dnsmasq", "nsenter", "ip", "curl"].iter().all(|p| have(p))
    {
        eprintln!("skipped: needs root, qemu-system-arm, dnsmasq, nsenter, ip and curl");
        return false;
    }
    true
}

/// `kernel` with the revision in its id string replaced by another of the same length: the
/// banner of a different build.
fn older_kernel(kernel: &[u8]) -> (Vec<u8>, String) {
    let id = bramble::kernel::kernel_id(kernel).expect("the kernel carries its id");
    let open = id.find('(').unwrap() + 1;
    let revision_len = id.len() - open - 1;
    let older: String = "older-build-".chars().cycle().take(revision_len).collect();
    let older_id = format!("{}{older})", &id[..open]);
    assert_ne!(older_id, id);
    let at = kernel
        .windows(id.len())
        .position(|window| window == id.as_bytes())
        .unwrap();
    let mut patched = kernel.to_vec();
    patched[at..at + id.len()].copy_from_slice(older_id.as_bytes());
    (patched, older_id)
}

#[test]
fn qemu_image_boots_the_cards_kernel_and_tap_takes_a_dnsmasq_lease() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    std::fs::create_dir_all(&site).unwrap();
    let page = "<!doctype html><title>card</title><h1>served from the card</h1>\n".repeat(20);
    std::fs::write(site.join("index.html"), &page).unwrap();
    let built = bramble::kernel::build_kernel().expect("kernel build");
    let current = std::fs::read(&built.raw).unwrap();
    let (older, older_id) = older_kernel(&current);
    let older_path = dir.path().join("older.img");
    std::fs::write(&older_path, &older).unwrap();
    let config = dir.path().join("BRAMBLE.TXT");
    std::fs::write(&config, "address = dhcp\nhostname = cardtest\n").unwrap();
    let card = dir.path().join("card.img");
    let made = Command::new(env!("CARGO_BIN_EXE_bramble"))
        .args(["image", "--site"])
        .arg(&site)
        .arg("--kernel")
        .arg(&older_path)
        .arg("--config")
        .arg(&config)
        .arg("-o")
        .arg(&card)
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );

    let netns = TapNamespace::create("bramble-tool", TAP, "192.168.78.1/24");
    let mut dnsmasq = netns.enter("dnsmasq");
    dnsmasq.args([
        "--keep-in-foreground",
        "--conf-file=/dev/null",
        "--port=0",
        "--bind-interfaces",
        &format!("--interface={TAP}"),
        "--except-interface=lo",
        "--dhcp-range=192.168.78.50,192.168.78.59,255.255.255.0,10m",
        "--dhcp-authoritative",
        "--user=root",
        "--log-facility=-",
        &format!("--dhcp-leasefile={}", dir.path().join("leases").display()),
        &format!("--pid-file={}", dir.path().join("dnsmasq.pid").display()),
    ]);
    let _dnsmasq = Stopped(
        dnsmasq
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start dnsmasq"),
    );

    let mut tool = netns.enter(env!("CARGO_BIN_EXE_bramble"));
    tool.args(["qemu", "--image"])
        .arg(&card)
        .args(["--tap", TAP])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut tool = Stopped(tool.spawn().expect("start bramble qemu"));
    let (lines, receive) = mpsc::channel();
    for stream in [
        Box::new(tool.0.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(tool.0.stderr.take().unwrap()),
    ] {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = lines.send(line);
            }
        });
    }
    let mut transcript = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let lease = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match receive.recv_timeout(left) {
            Ok(line) => {
                transcript.push(line.clone());
                if line.contains("dhcp: lease") {
                    break line;
                }
            }
            Err(_) => panic!("no DHCP lease within 120 s:\n{}", transcript.join("\n")),
        }
    };
    let text = transcript.join("\n");
    assert!(
        text.contains(&format!("kernel: kernel.img from {}", card.display())),
        "the tool says which kernel it boots:\n{text}"
    );
    assert!(
        text.contains(&format!("{older_id}: a web server")),
        "the card's kernel booted, not the tree's:\n{text}"
    );
    assert!(
        lease.contains("from 192.168.78.1"),
        "the lease came from dnsmasq on the TAP link, not user-mode networking: {lease}"
    );
    let address = lease
        .split("lease ")
        .nth(1)
        .and_then(|rest| rest.split(['/', ' ']).next())
        .expect("an address in the lease line")
        .to_string();
    assert!(address.starts_with("192.168.78.5"), "{lease}");

    // The site on the card, from inside the namespace (the guest may need a moment to
    // start serving after its lease).
    let mut body = Vec::new();
    for _ in 0..20 {
        let output = netns
            .command("curl")
            .args(["--silent", "--fail", "--max-time", "10"])
            .arg(format!("http://{address}/"))
            .output()
            .unwrap();
        if output.status.success() {
            body = output.stdout;
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(String::from_utf8_lossy(&body), page);
    assert!(Path::new(&card).exists());
    drop(tool);
}
