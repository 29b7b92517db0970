//! `bramble-bench --hosted`: the portable kernel code as a Linux process (`bramble-hosted` on
//! a TAP device) against nginx and busybox httpd, all serving the same files inside a network
//! namespace the benchmark creates and deletes, measured with the same wrk runs. The figure
//! that matters is each server's CPU time per request, a regression guard for the portable
//! code on a shared host; nothing here says how fast a Pi is.
//!
//! Layout: each server gets a fresh namespace `bramble-bench-<pid>-<n>` (so that no TIME-WAIT
//! connection or ARP entry of one server's runs meets the next server), holding a TAP
//! `bbench0` (host side 192.168.77.1/24; bramble-hosted answers as 192.168.77.2) and its own
//! loopback, where nginx listens on 127.0.0.1:8081 and busybox httpd on 127.0.0.1:8082. wrk
//! runs inside it (`ip netns exec`), and so do the probes (a thread that enters it), so no
//! traffic leaves it. Every server is stopped by its PID; the namespace is deleted on drop,
//! also after an error or Ctrl-C.

use super::report::{Host, LoadReport, Report, ServerCpu, SystemReport, TARGETS};
use super::{BenchArgs, NOT_ANSWERING, load, probe, systems};
use anyhow::{Context, bail, ensure};
use bramble::pack::{PackOptions, pack_site};
use bramble_testkit::netns::TapNamespace;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The TAP device inside the namespace.
const TAP: &str = systems::TAP_DEVICE;
/// The namespace's side of the TAP.
const TAP_HOST: &str = "192.168.77.1/24";
/// bramble-hosted's static address on the TAP.
const BRAMBLE_ADDRESS: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 2);
/// nginx's port on the namespace's loopback.
const NGINX_PORT: u16 = 8081;
/// busybox httpd's port on the namespace's loopback.
const BUSYBOX_PORT: u16 = 8082;
/// nginx's HTTPS port on the namespace's loopback.
const NGINX_TLS_PORT: u16 = 8443;
/// bramble-hosted's HTTPS sessions served at once, as the Pi's kernel sizes them
/// (kernel/board's tls.rs, `FULL_HTTPS`).
const BRAMBLE_HTTPS_SESSIONS: &str = "32";
/// bramble-hosted's pool as the Pi kernel configures it (kernel/board's network.rs,
/// `FULL_POOL`): 16,384 connections, 512 sessions, a parking cell per connection.
const BRAMBLE_CONNECTIONS: &str = "16384";
const BRAMBLE_SESSIONS: &str = "512";
/// How long a server may take to answer its first 200.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a server may take to exit after SIGTERM before it gets SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Runs the hosted benchmark.
pub(super) fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let root = bramble::workspace_root();
    let super::RunDir {
        date,
        commit,
        path: run_dir,
    } = super::new_run_dir(&root, "-hosted")?;
    let names = args.system_names();
    check_prerequisites(&names)?;
    let load_generator = super::wrk_version()?;
    super::raise_open_file_limit();
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&interrupted))?;
    }

    // The site lives in the run's own folder: two runs at once must not rewrite each other's.
    let site = systems::prepare_site(&root, &run_dir.join("site"))?;
    let packed = pack_site(&site.dir, &PackOptions::default())?;
    let site_image = run_dir.join("SITE.BIN");
    std::fs::write(&site_image, &packed.image)?;
    let servers = servers(&names, &args.hosted_binary)?;
    let accounting = CpuAccounting::detect();
    let mut report = Report {
        date: date.clone(),
        commit: commit.clone(),
        host: Host {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            load_average_before: super::load_average(),
            load_average_after: String::new(),
            qemu: String::new(),
        },
        machine: format!(
            "this host (Linux {}, {})",
            std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim(),
            std::env::consts::ARCH
        ),
        nic: "bramble-hosted on a TAP, nginx and busybox httpd on loopback, each server in a \
              fresh network namespace"
            .into(),
        load_generator,
        duration_seconds: args.duration,
        connection_close: args.close,
        levels: args.levels.clone(),
        systems: Vec::new(),
        hosted: true,
        server_cpu_method: Some(accounting.describe()),
        tap: false,
        idle_floor_qemu_cpu_percent: None,
        tap_queue_frames: None,
    };
    eprintln!(
        "bench: hosted: {} on this host, levels {:?}, {} s each; logs in {}",
        servers
            .iter()
            .map(ServerKind::name)
            .collect::<Vec<_>>()
            .join(" vs "),
        args.levels,
        args.duration,
        run_dir.display()
    );
    for (index, server) in servers.iter().enumerate() {
        let namespace = Namespace::create(index)?;
        let dir = run_dir.join(server.name());
        std::fs::create_dir_all(&dir)?;
        let result = measure(
            server,
            &namespace,
            &accounting,
            &site,
            &site_image,
            args,
            &dir,
            &interrupted,
        )?;
        report.systems.push(result);
        super::write_json(&report, &run_dir.join("results.json"))?;
    }
    super::finish_run(&mut report, args, &root, &run_dir, "-hosted")
}

/// The servers in report order: the freshly built bramble-hosted (if `bramble` is named), the
/// `--hosted-binary` ones, then nginx and busybox httpd as named.
fn servers(names: &[String], extra_binaries: &[String]) -> anyhow::Result<Vec<ServerKind>> {
    let mut servers = Vec::new();
    for name in names {
        if !["bramble", "nginx", "busybox"].contains(&name.as_str()) {
            bail!("unknown system '{name}' for --hosted (use bramble, nginx, busybox)");
        }
    }
    if names.iter().any(|n| n == "bramble") {
        servers.push(ServerKind::Bramble {
            name: "bramble-hosted".into(),
            binary: build_hosted()?,
        });
    }
    for extra in extra_binaries {
        let (label, path) = extra
            .split_once('=')
            .with_context(|| format!("--hosted-binary {extra}: expected LABEL=PATH"))?;
        ensure!(
            Path::new(path).is_file(),
            "--hosted-binary {extra}: no such file"
        );
        servers.push(ServerKind::Bramble {
            name: format!("bramble-hosted-{label}"),
            binary: PathBuf::from(path),
        });
    }
    for name in names {
        match name.as_str() {
            "nginx" => servers.push(ServerKind::Nginx),
            "busybox" => servers.push(ServerKind::Busybox),
            _ => {}
        }
    }
    Ok(servers)
}

/// Says exactly what is missing, and how to install it.
fn check_prerequisites(names: &[String]) -> anyhow::Result<()> {
    ensure!(
        rustix::process::geteuid().is_root(),
        "bench --hosted needs root: it creates a network namespace and a TAP device"
    );
    ensure!(
        Path::new("/dev/net/tun").exists(),
        "/dev/net/tun is missing (the TAP device needs the tun module)"
    );
    let works = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    };
    ensure!(
        works("ip", &["-V"]),
        "`ip` is missing: apt-get install iproute2"
    );
    ensure!(works("wrk", &["-v"]), "wrk is missing: apt-get install wrk");
    if names.iter().any(|n| n == "nginx") {
        ensure!(
            works("nginx", &["-v"]),
            "nginx is missing: apt-get install nginx"
        );
    }
    if names.iter().any(|n| n == "busybox") {
        let applets = Command::new("busybox")
            .arg("--list")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        ensure!(
            applets.lines().any(|applet| applet == "httpd"),
            "busybox (with its httpd applet) is missing: apt-get install busybox"
        );
    }
    Ok(())
}

/// Builds bramble-hosted in release mode in its own target directory (so that a build started
/// from inside `cargo test` never waits on the outer build's lock); returns the binary.
fn build_hosted() -> anyhow::Result<PathBuf> {
    let root = bramble::workspace_root();
    let target = root.join("target/bench/hosted/cargo");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("bench: hosted: building bramble-hosted (release)");
    let status = Command::new(&cargo)
        .args(["build", "--release", "-p", "bramble-hosted", "--target-dir"])
        .arg(&target)
        .current_dir(&root)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .status()
        .with_context(|| format!("could not run {}", Path::new(&cargo).display()))?;
    ensure!(
        status.success(),
        "building bramble-hosted failed ({status})"
    );
    Ok(target.join("release/bramble-hosted"))
}

/// A server under test.
enum ServerKind {
    /// A bramble-hosted binary.
    Bramble {
        /// Name in the report.
        name: String,
        /// The executable.
        binary: PathBuf,
    },
    /// Debian's nginx, one worker.
    Nginx,
    /// Debian's busybox httpd.
    Busybox,
}

impl ServerKind {
    fn name(&self) -> &str {
        match self {
            ServerKind::Bramble { name, .. } => name,
            ServerKind::Nginx => "nginx",
            ServerKind::Busybox => "busybox-httpd",
        }
    }

    fn address(&self) -> SocketAddr {
        match self {
            ServerKind::Bramble { .. } => SocketAddrV4::new(BRAMBLE_ADDRESS, 80).into(),
            ServerKind::Nginx => SocketAddrV4::new(Ipv4Addr::LOCALHOST, NGINX_PORT).into(),
            ServerKind::Busybox => SocketAddrV4::new(Ipv4Addr::LOCALHOST, BUSYBOX_PORT).into(),
        }
    }

    /// Where the server answers HTTPS, if it does.
    fn https_address(&self) -> Option<SocketAddr> {
        match self {
            ServerKind::Bramble { .. } => Some(SocketAddrV4::new(BRAMBLE_ADDRESS, 443).into()),
            ServerKind::Nginx => {
                Some(SocketAddrV4::new(Ipv4Addr::LOCALHOST, NGINX_TLS_PORT).into())
            }
            ServerKind::Busybox => None,
        }
    }

    fn description(&self) -> String {
        match self {
            ServerKind::Bramble { binary, .. } => format!(
                "{} on TAP {TAP} as {BRAMBLE_ADDRESS}, static address, the Pi's pool \
                 ({BRAMBLE_CONNECTIONS} connections, {BRAMBLE_SESSIONS} served at once), \
                 access log and mDNS off; HTTPS on 443 (its own pool \
                 as large, {BRAMBLE_HTTPS_SESSIONS} served at once, ECDSA P-256 certificate); one process, one poll loop.",
                binary.display()
            ),
            ServerKind::Nginx => format!(
                "{}, one worker process (plus the master), sendfile on, access log off, \
                 listening on 127.0.0.1:{NGINX_PORT} in the namespace; HTTPS on \
                 127.0.0.1:{NGINX_TLS_PORT} with the same certificate (TLS 1.2 and 1.3, \
                 session tickets and cache as Debian ships them).",
                version_line("nginx", &["-v"])
            ),
            ServerKind::Busybox => format!(
                "{} httpd -f, one process forked per connection, listening on \
                 127.0.0.1:{BUSYBOX_PORT} in the namespace.",
                version_line("busybox", &[])
            ),
        }
    }

    /// The command line that starts the server in the foreground.
    fn command_line(
        &self,
        site: &systems::Site,
        image: &Path,
        dir: &Path,
    ) -> anyhow::Result<Vec<String>> {
        let path = |p: &Path| p.to_string_lossy().into_owned();
        Ok(match self {
            ServerKind::Bramble { binary, .. } => vec![
                path(binary),
                "--tap".into(),
                TAP.into(),
                "--site".into(),
                path(image),
                "--static".into(),
                format!("{BRAMBLE_ADDRESS}/24"),
                "--hostname".into(),
                "bramble-bench".into(),
                "--no-mdns".into(),
                "--no-access-log".into(),
                "--connections".into(),
                BRAMBLE_CONNECTIONS.into(),
                "--sessions".into(),
                BRAMBLE_SESSIONS.into(),
                "--log-level".into(),
                "warn".into(),
                "--tls-cert".into(),
                path(&tls_fixture("p256.pem")),
                "--tls-key".into(),
                path(&tls_fixture("p256.key")),
                "--https-sessions".into(),
                BRAMBLE_HTTPS_SESSIONS.into(),
            ],
            ServerKind::Nginx => {
                let config = dir.join("nginx.conf");
                std::fs::create_dir_all(dir.join("temp"))?;
                std::fs::write(&config, nginx_config(&site.dir, dir))?;
                vec![
                    "nginx".into(),
                    "-p".into(),
                    path(dir),
                    "-e".into(),
                    path(&dir.join("error.log")),
                    "-c".into(),
                    path(&config),
                ]
            }
            ServerKind::Busybox => {
                // An empty configuration: no /etc/httpd.conf of the host applies.
                let config = dir.join("httpd.conf");
                std::fs::write(&config, "")?;
                vec![
                    "busybox".into(),
                    "httpd".into(),
                    "-f".into(),
                    "-p".into(),
                    format!("127.0.0.1:{BUSYBOX_PORT}"),
                    "-h".into(),
                    path(&site.dir),
                    "-c".into(),
                    path(&config),
                ]
            }
        })
    }
}

/// kernel/tls's test certificate and key (ECDSA P-256, bramble.test), which both servers
/// serve HTTPS with.
fn tls_fixture(name: &str) -> PathBuf {
    bramble::workspace_root()
        .join("kernel/tls/tests/data")
        .join(name)
}

/// nginx's configuration: foreground, its own pid file, logs and temp paths in `dir`; HTTPS
/// with the test certificate on [`NGINX_TLS_PORT`].
fn nginx_config(site: &Path, dir: &Path) -> String {
    let d = dir.display();
    let certificate = tls_fixture("p256.pem");
    let key = tls_fixture("p256.key");
    format!(
        "# Written by bramble-bench --hosted.
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile 8192;
user root;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {d}/temp/body;
    proxy_temp_path {d}/temp/proxy;
    fastcgi_temp_path {d}/temp/fastcgi;
    uwsgi_temp_path {d}/temp/uwsgi;
    scgi_temp_path {d}/temp/scgi;
    types {{ text/html html; application/octet-stream bin; }}
    default_type application/octet-stream;
    sendfile on;
    server {{
        listen 127.0.0.1:{NGINX_PORT};
        root {site};
        index index.html;
    }}
    server {{
        listen 127.0.0.1:{NGINX_TLS_PORT} ssl;
        ssl_certificate {certificate};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:bench:1m;
        root {site};
        index index.html;
    }}
}}
",
        site = site.display(),
        certificate = certificate.display(),
        key = key.display(),
    )
}

fn version_line(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stdout).to_string()
                + &String::from_utf8_lossy(&o.stderr);
            text.lines().next().unwrap_or(program).trim().to_string()
        })
        .unwrap_or_else(|| program.to_string())
}

/// Starts one server, checks the site, runs every target and level against it, stops it.
// Eight borrowed parts of one run, each made by a different step of `run`; a struct holding
// them would exist only for this call.
#[allow(clippy::too_many_arguments)]
fn measure(
    server: &ServerKind,
    namespace: &Namespace,
    accounting: &CpuAccounting,
    site: &systems::Site,
    image: &Path,
    args: &BenchArgs,
    dir: &Path,
    interrupted: &AtomicBool,
) -> anyhow::Result<SystemReport> {
    let mut result = SystemReport {
        name: server.name().into(),
        description: server.description(),
        ..Default::default()
    };
    let address = server.address();
    eprintln!("bench: hosted: starting {}", server.name());
    let mut process = ServerProcess::start(
        server.name(),
        &server.command_line(site, image, dir)?,
        namespace,
        accounting,
        &dir.join("server.log"),
    )?;
    let started = Instant::now();
    let ready = loop {
        if let Some(status) = process.child.try_wait()? {
            bail!(
                "{} exited ({status}) before answering; see {}",
                server.name(),
                dir.join("server.log").display()
            );
        }
        let answered = namespace.inside(|| {
            probe::get_at(address, "/", &[], Duration::from_millis(500))
                .is_some_and(|r| r.status == 200)
        })?;
        if answered {
            break true;
        }
        if started.elapsed() > READY_TIMEOUT || interrupted.load(Ordering::Relaxed) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if !ready {
        result
            .notes
            .push(format!("no HTTP 200 within {} s", READY_TIMEOUT.as_secs()));
        return Ok(result);
    }
    let mut notes = Vec::new();
    let mut checked = BTreeMap::new();
    let validator =
        namespace.inside(|| super::check_site_at(address, site, &mut notes, &mut checked))?;
    result.notes.extend(notes);
    result.checked_bytes = checked;

    let url_host = match address {
        SocketAddr::V4(v4) if v4.port() == 80 => v4.ip().to_string(),
        other => other.to_string(),
    };
    for (target, _) in TARGETS
        .iter()
        .filter(|(t, _)| args.targets.iter().any(|a| a == t))
    {
        if target.starts_with("search") {
            result.notes.push(format!(
                "{target}: skipped, the search targets run in the QEMU guest only"
            ));
            continue;
        }
        let https = server.https_address();
        if super::report::is_tls_target(target) && https.is_none() {
            result.notes.push(format!(
                "{target}: skipped, {} serves no HTTPS",
                server.name()
            ));
            continue;
        }
        let Some(request) = super::target_request(target, &validator, args.close) else {
            result
                .notes
                .push(format!("{target}: skipped, the server sent no validator"));
            continue;
        };
        for &level in &args.levels {
            if interrupted.load(Ordering::Relaxed) {
                bail!("interrupted");
            }
            let mut load = LoadReport {
                target: target.to_string(),
                concurrency: level,
                ..Default::default()
            };
            let alive = process.child.try_wait()?.is_none()
                && namespace.inside(|| {
                    (0..3).any(|_| {
                        probe::get_at(address, "/", &[], Duration::from_secs(10))
                            .is_some_and(|r| r.status == 200)
                    })
                })?;
            if !alive {
                load.failure = Some(NOT_ANSWERING.into());
                eprintln!("bench: {}: {}", server.name(), describe(&load));
                result.loads.push(load);
                continue;
            }
            let tls_host = match https {
                Some(SocketAddr::V4(v4)) if v4.port() == 443 => v4.ip().to_string(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            let url = request.url(&url_host, &tls_host);
            let run = load::LoadRun {
                url: &url,
                headers: &request.headers,
                concurrency: level,
                duration: Duration::from_secs(args.duration),
                timeout: Duration::from_secs(args.timeout),
                namespace: Some(&namespace.name),
                script: None,
            };
            let events_before =
                matches!(server, ServerKind::Bramble { .. }).then(|| process.events());
            let cpu_before = process.cpu_times();
            let started = Instant::now();
            let outcome = load::run_target(
                target,
                &run,
                &dir.join(format!("wrk-{target}-c{level}.txt")),
            );
            let wall = started.elapsed().as_secs_f64();
            let cpu_after = process.cpu_times();
            if let Some(before) = events_before {
                let after = process.events();
                load.guest_events = after
                    .iter()
                    .filter_map(|(name, value)| {
                        Some((name.clone(), value.checked_sub(*before.get(name)?)?))
                    })
                    .collect();
            }
            match outcome {
                Ok(figures) => {
                    if let (Some(before), Some(after)) = (cpu_before, cpu_after) {
                        let good = figures.responses.saturating_sub(figures.bad_status);
                        let user = after.user - before.user;
                        let system = after.system - before.system;
                        let mut cpu = ServerCpu::new(user + system, wall, good);
                        if user + system > 0.0 {
                            cpu.system_share_percent = Some(100.0 * system / (user + system));
                        }
                        load.server_cpu = Some(cpu);
                    }
                    load.figures = Some(figures);
                }
                Err(error) => load.failure = Some(format!("{error:#}")),
            }
            eprintln!("bench: {}: {}", server.name(), describe(&load));
            result.loads.push(load);
            std::thread::sleep(Duration::from_secs(2));
        }
    }
    process.stop();
    Ok(result)
}

/// One load run in a line, for the progress output.
fn describe(load: &LoadReport) -> String {
    match (&load.figures, &load.failure) {
        (Some(f), _) => format!(
            "{} c={}: {:.1} req/s, p50 {:.1} ms, p99 {:.1} ms, max {:.0} ms, {} errors, server \
             CPU {} us/request ({}% of a core)",
            load.target,
            load.concurrency,
            f.requests_per_second,
            f.latency_ms.p50,
            f.latency_ms.p99,
            f.latency_ms.max,
            f.errors(),
            load.server_cpu
                .as_ref()
                .and_then(|c| c.microseconds_per_request)
                .map_or("?".into(), |us| format!("{us:.1}")),
            load.server_cpu
                .as_ref()
                .map_or("?".into(), |c| format!("{:.0}", c.percent_of_a_core)),
        ),
        (None, failure) => format!(
            "{} c={}: FAILED: {}",
            load.target,
            load.concurrency,
            failure.as_deref().unwrap_or("?")
        ),
    }
}

/// One server's network namespace with its TAP device: the test kit's, deleted on drop.
pub(crate) struct Namespace {
    inner: TapNamespace,
    /// `bramble-bench-<pid>-<n>`.
    pub name: String,
}

impl Namespace {
    fn create(index: usize) -> anyhow::Result<Namespace> {
        Namespace::create_labelled(&index.to_string())
    }

    /// `bramble-bench-<pid>-<n>` with loopback up and the TAP device `bbench0` (host side
    /// 192.168.77.1/24, up); `label` says what it is for, in errors.
    pub(crate) fn create_labelled(label: &str) -> anyhow::Result<Namespace> {
        let inner = TapNamespace::try_create("bramble-bench", TAP, TAP_HOST)
            .map_err(|problem| anyhow::anyhow!("the namespace for {label}: {problem}"))?;
        let name = inner.name().to_string();
        Ok(Namespace { inner, name })
    }

    /// Sets the TAP device's transmit queue (towards whoever holds the device: QEMU) to
    /// `frames` (`ip link set bbench0 txqueuelen FRAMES`; the tun driver sizes its ring from
    /// it), and returns the length the device reports afterwards.
    pub(crate) fn set_tap_queue(&self, frames: u32) -> anyhow::Result<u32> {
        let frames = frames.to_string();
        ip(&[
            "netns",
            "exec",
            &self.name,
            "ip",
            "link",
            "set",
            TAP,
            "txqueuelen",
            &frames,
        ])?;
        self.tap_queue()
    }

    /// The TAP device's transmit queue length, as `ip link show` reports it (`qlen N`).
    pub(crate) fn tap_queue(&self) -> anyhow::Result<u32> {
        let text = ip(&["netns", "exec", &self.name, "ip", "-o", "link", "show", TAP])?;
        parse_qlen(&text).with_context(|| format!("no qlen in {text:?}"))
    }

    /// Sets a per-namespace sysctl (`ip netns exec NAME sysctl -w KEY=VALUE`).
    pub(crate) fn sysctl(&self, key: &str, value: &str) -> anyhow::Result<()> {
        let output = Command::new("ip")
            .args(["netns", "exec", &self.name, "sysctl", "-q", "-w"])
            .arg(format!("{key}={value}"))
            .output()
            .context("running sysctl (apt-get install procps)")?;
        ensure!(
            output.status.success(),
            "sysctl {key}={value} in {} failed: {}",
            self.name,
            String::from_utf8_lossy(&output.stderr).trim()
        );
        Ok(())
    }

    /// Runs `f` on a thread that has entered the namespace, so that its sockets live there.
    pub(crate) fn inside<T: Send>(&self, f: impl FnOnce() -> T + Send) -> anyhow::Result<T> {
        self.inner
            .inside(f)
            .map_err(|problem| anyhow::anyhow!("the benchmark's namespace: {problem}"))
    }
}

/// The `qlen N` of an `ip link show` line.
fn parse_qlen(text: &str) -> Option<u32> {
    let mut words = text.split_whitespace();
    words.find(|&word| word == "qlen")?;
    // `ip -o` ends each line of its record with a backslash: `qlen 1000\`.
    let word = words.next()?;
    word.strip_suffix('\\').unwrap_or(word).parse().ok()
}

fn ip(args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .context("running ip (apt-get install iproute2)")?;
    ensure!(
        output.status.success(),
        "ip {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// How the servers' CPU time is counted.
enum CpuAccounting {
    /// A cgroup v2 per server under this mount point: `cpu.stat`'s `usage_usec` counts every
    /// process that was ever in it, including children the kernel reaped by itself.
    Cgroup(PathBuf),
    /// /proc/PID/stat of the server's process tree.
    Proc,
}

impl CpuAccounting {
    /// A writable cgroup v2 hierarchy if there is one (from /proc/self/mountinfo), else /proc.
    fn detect() -> CpuAccounting {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        for line in mountinfo.lines() {
            // "... mount-point options - fstype source super-options"
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            if right.split_whitespace().next() != Some("cgroup2") {
                continue;
            }
            let Some(mount) = left.split_whitespace().nth(4) else {
                continue;
            };
            let probe =
                Path::new(mount).join(format!("bramble-bench-probe-{}", std::process::id()));
            if std::fs::create_dir(&probe).is_ok() {
                let usable = probe.join("cpu.stat").exists();
                let _ = std::fs::remove_dir(&probe);
                if usable {
                    return CpuAccounting::Cgroup(PathBuf::from(mount));
                }
            }
        }
        CpuAccounting::Proc
    }

    fn describe(&self) -> String {
        match self {
            CpuAccounting::Cgroup(mount) => format!(
                "usage_usec of a cgroup v2 (under {}) that holds only the server's processes, \
                 from before its start, so forked and self-reaped children count too",
                mount.display()
            ),
            CpuAccounting::Proc => "utime+stime+cutime+cstime from /proc/PID/stat over the \
                server's process tree (no writable cgroup v2 here): children the kernel \
                reaps by itself, as busybox httpd's per-connection processes, are missed"
                .into(),
        }
    }
}

/// CPU seconds used, in user space and in the kernel.
#[derive(Clone, Copy, Debug)]
struct CpuTimes {
    user: f64,
    system: f64,
}

/// A running server: its process (the `Child` is the server itself: `ip netns exec` and the
/// `sh` that joins the cgroup both exec), and its cgroup if there is one.
struct ServerProcess {
    child: Child,
    cgroup: Option<PathBuf>,
    stopped: bool,
}

impl ServerProcess {
    fn start(
        name: &str,
        command_line: &[String],
        namespace: &Namespace,
        accounting: &CpuAccounting,
        log: &Path,
    ) -> anyhow::Result<ServerProcess> {
        let (mut command, cgroup) = match accounting {
            CpuAccounting::Cgroup(mount) => {
                let dir = mount.join(format!("bramble-bench-{}-{name}", std::process::id()));
                std::fs::create_dir(&dir)
                    .with_context(|| format!("creating cgroup {}", dir.display()))?;
                // The shell joins the cgroup, then becomes `ip netns exec`, which becomes the
                // server: everything it forks is counted from the first instruction. (Joining
                // from inside `ip netns exec` would not work: it mounts a fresh /sys.)
                let mut command = Command::new("sh");
                command
                    .args(["-c", "echo $$ > \"$1\" && shift && exec \"$@\"", "sh"])
                    .arg(dir.join("cgroup.procs"))
                    .arg("ip");
                (command, Some(dir))
            }
            CpuAccounting::Proc => (Command::new("ip"), None),
        };
        command.args(["netns", "exec", &namespace.name]);
        command.args(command_line);
        let log = std::fs::File::create(log)?;
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        Ok(ServerProcess {
            child,
            cgroup,
            stopped: false,
        })
    }

    /// Every process of the server: the cgroup's members, or the process tree under the
    /// child.
    fn pids(&self) -> Vec<u32> {
        match &self.cgroup {
            Some(dir) => std::fs::read_to_string(dir.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|line| line.trim().parse().ok())
                .collect(),
            None => process_tree(self.child.id()),
        }
    }

    /// CPU time the server has used so far.
    fn cpu_times(&self) -> Option<CpuTimes> {
        match &self.cgroup {
            Some(dir) => {
                let stat = std::fs::read_to_string(dir.join("cpu.stat")).ok()?;
                let field = |name: &str| -> Option<f64> {
                    let usec: u64 = stat
                        .lines()
                        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))?
                        .trim()
                        .parse()
                        .ok()?;
                    Some(usec as f64 / 1e6)
                };
                Some(CpuTimes {
                    user: field("user_usec")?,
                    system: field("system_usec")?,
                })
            }
            None => {
                let ticks = rustix::param::clock_ticks_per_second() as f64;
                let (user, system) = self
                    .pids()
                    .iter()
                    .filter_map(|&pid| proc_cpu_ticks(pid))
                    .fold((0, 0), |(u, s), (user, system)| (u + user, s + system));
                Some(CpuTimes {
                    user: user as f64 / ticks,
                    system: system as f64 / ticks,
                })
            }
        }
    }

    /// Read and write syscalls and context switches, summed over the server's processes.
    fn events(&self) -> BTreeMap<String, u64> {
        let mut events = BTreeMap::new();
        for pid in self.pids() {
            let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            for (text, key, name) in [
                (&io, "syscr:", "read syscalls"),
                (&io, "syscw:", "write syscalls"),
                (
                    &status,
                    "voluntary_ctxt_switches:",
                    "voluntary context switches",
                ),
                (
                    &status,
                    "nonvoluntary_ctxt_switches:",
                    "involuntary context switches",
                ),
            ] {
                if let Some(value) = text
                    .lines()
                    .find_map(|line| line.strip_prefix(key))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                {
                    *events.entry(name.to_string()).or_default() += value;
                }
            }
        }
        events
    }

    /// SIGTERM to the server, SIGKILL after [`STOP_GRACE`]; then SIGKILL to any process of
    /// it still left (all by PID), and the cgroup removed.
    fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let left_before = self.pids();
        signal(self.child.id(), rustix::process::Signal::TERM);
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Processes the server forked (nginx's worker, busybox's connection handlers).
        let deadline = Instant::now() + STOP_GRACE;
        loop {
            let left: Vec<u32> = match &self.cgroup {
                Some(_) => self.pids(),
                None => left_before
                    .iter()
                    .copied()
                    .filter(|&pid| Path::new(&format!("/proc/{pid}")).exists())
                    .collect(),
            };
            if left.is_empty() || Instant::now() > deadline {
                break;
            }
            for pid in left {
                signal(pid, rustix::process::Signal::KILL);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(dir) = &self.cgroup
            && let Err(error) = std::fs::remove_dir(dir)
        {
            eprintln!(
                "bench: hosted: could not remove cgroup {}: {error}",
                dir.display()
            );
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

fn signal(pid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// `pid` and its descendants, from /proc/PID/task/TID/children.
fn process_tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut next = 0;
    while next < all.len() {
        let current = all[next];
        next += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{current}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            all.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
    }
    all
}

/// (utime + cutime, stime + cstime) of one process, in clock ticks.
fn proc_cpu_ticks(pid: u32) -> Option<(u64, u64)> {
    stat_cpu_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// (utime + cutime, stime + cstime) from the text of a /proc/PID/stat file.
fn stat_cpu_ticks(stat: &str) -> Option<(u64, u64)> {
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // Fields 14-17 of proc(5); the first after the name is field 3 (the state).
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some((field(14)? + field(16)?, field(15)? + field(17)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_length_is_read_from_ip_link_show() {
        let line = "2: bbench0: <BROADCAST,MULTICAST,UP> mtu 1500 qdisc pfifo_fast state DOWN \
                    mode DEFAULT group default qlen 20000\\    link/ether fa:b8:53:fa:a3:da";
        assert_eq!(parse_qlen(line), Some(20000));
        assert_eq!(parse_qlen("2: bbench0: <UP> mtu 1500"), None);
        assert_eq!(parse_qlen("qlen many"), None);
    }

    #[test]
    fn proc_stat_cpu_fields_are_found_after_the_name() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    7 11 13 17 20 0 1 0 100 1000 10 18446744073709551615";
        assert_eq!(stat_cpu_ticks(stat), Some((7 + 13, 11 + 17)));
        assert_eq!(stat_cpu_ticks("4242 (short"), None);
        // This process's own file parses, and its tree starts with it.
        assert!(proc_cpu_ticks(std::process::id()).is_some());
        assert_eq!(process_tree(std::process::id())[0], std::process::id());
    }

    #[test]
    fn nginx_config_keeps_everything_in_its_folder() {
        let config = nginx_config(Path::new("/site"), Path::new("/run/x"));
        assert!(config.contains("daemon off;"));
        assert!(config.contains("pid /run/x/nginx.pid;"));
        assert!(config.contains("root /site;"));
        assert!(config.contains(&format!("listen 127.0.0.1:{NGINX_PORT};")));
    }
}
