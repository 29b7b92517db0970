//! The tool as people install it: `cargo install --path tools --root DIR`, then, from an empty
//! folder, with no Rust toolchain on PATH and the source tree hidden (a mount namespace lays
//! an empty folder over it), `bramble image` and `bramble qemu --image` serve a site with the
//! kernel the binary carries. Ignored in the test command, whose budget for additions is
//! about 2-3 minutes on 2 cores: the install is a release build (LTO, one codegen unit) that
//! the test command builds nowhere else, so CI pays it cold every time; measured cold (the
//! kernel already built) at 220 CPU s (199 user, 20 system) and 1.9 GB of peak memory, over
//! 2 minutes on 2 idle cores before the boot, plus 600 MB of target/release on CI's disk
//! (which has already run out once); with its dependencies already built, 70-125 CPU s. Run it
//! with `cargo test -p bramble --features system-tests --test install -- --ignored`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
#[ignore = "a cold release build of the tool (220 CPU s, 1.9 GB): run by hand"]
fn an_installed_tool_makes_and_boots_cards_without_the_tree_or_a_toolchain() {
    if bramble_qemu::find_qemu().is_err() {
        eprintln!("skipped: qemu-system-arm is not installed");
        return;
    }
    let root = bramble::workspace_root();
    let dir = tempfile::tempdir().unwrap();
    let install_root = dir.path().join("installed");
    let started = Instant::now();
    let install = Command::new("cargo")
        .args(["install", "--locked", "--path", "tools", "--root"])
        .arg(&install_root)
        .current_dir(&root)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTUP_TOOLCHAIN")
        .status()
        .expect("run cargo install");
    assert!(install.success(), "cargo install failed");
    eprintln!(
        "cargo install took {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let tool = install_root.join("bin/bramble");
    let version = Command::new(&tool).arg("--version").output().unwrap();
    let version = text(&version.stdout);
    assert!(version.contains("embedded kernel: Bramble "), "{version}");

    // A site and an empty folder to work in, both outside the tree.
    let site = dir.path().join("site");
    std::fs::create_dir_all(&site).unwrap();
    let page = "<!doctype html><title>installed</title><h1>from an installed bramble</h1>\n";
    std::fs::write(site.join("index.html"), page).unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // The tree is hidden and no cargo, rustc or rustup is reachable: PATH has only the
    // system folders, HOME is the empty folder.
    let hidden = Command::new("unshare").arg("--help").output().is_ok();
    let script = format!(
        "{mount}cd {work} && {tool} image --site {site} -o card.img && exec {tool} qemu --image \
         card.img --port {port}",
        mount = if hidden {
            format!("mount -t tmpfs none {} && ", root.display())
        } else {
            String::new()
        },
        work = work.display(),
        tool = tool.display(),
        site = site.display(),
    );
    let mut command = if hidden {
        let mut command = Command::new("unshare");
        command.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
        command
    } else {
        let mut command = Command::new("sh");
        command.args(["-c", &script]);
        command
    };
    let mut child = command
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("HOME", &work)
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
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut transcript = Vec::new();
    let served = loop {
        while let Ok(line) = receive.try_recv() {
            transcript.push(line);
        }
        if transcript
            .iter()
            .any(|line| line.contains("serving: http://"))
        {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            stream
                .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut answer = String::new();
            let _ = stream.read_to_string(&mut answer);
            break answer;
        }
        if Instant::now() > deadline || matches!(child.try_wait(), Ok(Some(_))) {
            let _ = child.kill();
            panic!(
                "the installed tool did not serve:\n{}",
                transcript.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let log = transcript.join("\n");
    assert!(served.contains(page), "{served}\n{log}");
    assert!(log.contains("kernel: kernel.img from card.img"), "{log}");
    // `embedded kernel: Bramble 0.1.0 (abc) (248848 bytes)`: the id ends at the first ')'.
    let id = version
        .lines()
        .find_map(|l| l.strip_prefix("embedded kernel: "))
        .and_then(|rest| rest.find(')').map(|end| rest[..=end].to_string()))
        .expect("an id in --version");
    assert!(
        log.contains(&format!("{id}: a web server")),
        "the banner names the kernel --version names ({id}):\n{log}"
    );
}
