//! `bramble-hosted`: run the Bramble appliance on Linux over a TAP device.

use bramble_hal::MacAddress;
use bramble_hosted::fault::FaultConfig;
use bramble_hosted::{HostedConfig, StderrLogger};
use clap::Parser;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::process::ExitCode;

/// Serve a site image over a Linux TAP device with Bramble's own network stack and HTTP
/// engine, exactly as the Pi kernel does.
#[derive(Parser, Debug)]
#[command(name = "bramble-hosted", version)]
struct Args {
    /// TAP interface to attach to (created if missing; needs CAP_NET_ADMIN).
    #[arg(long)]
    tap: String,
    /// Site image (SITE.BIN) to serve.
    #[arg(long)]
    site: PathBuf,
    /// Static address with prefix length, e.g. 192.168.77.2/24 (default: DHCP).
    #[arg(long = "static", value_name = "ADDR/PREFIX", value_parser = parse_cidr)]
    static_address: Option<(Ipv4Addr, u8)>,
    /// Default gateway (with --static).
    #[arg(long, requires = "static_address")]
    gateway: Option<Ipv4Addr>,
    /// Speak no IPv6 at all (as `ipv6 = off` in BRAMBLE.TXT).
    #[arg(long)]
    no_ipv6: bool,
    /// Static IPv6 address with prefix length, e.g. 2001:db8::2/64 (default: SLAAC).
    #[arg(long = "static6", value_name = "ADDR/PREFIX", value_parser = parse_cidr6, conflicts_with = "no_ipv6")]
    static_address6: Option<(Ipv6Addr, u8)>,
    /// IPv6 default router (default: the routers that advertise themselves).
    #[arg(long, conflicts_with = "no_ipv6")]
    gateway6: Option<Ipv6Addr>,
    /// Host name sent in DHCP and claimed over mDNS as NAME.local.
    #[arg(long, default_value = "bramble")]
    hostname: String,
    /// The guest's MAC address.
    #[arg(long, default_value = "02:00:00:62:72:01", value_parser = parse_mac)]
    mac: MacAddress,
    /// Record every frame in and out to this pcap file.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Drop this percentage of frames, each direction (fault injection).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100))]
    drop_percent: u8,
    /// Corrupt one byte of this percentage of frames, each direction (fault injection).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100))]
    corrupt_percent: u8,
    /// Seed for fault injection, to repeat a run.
    #[arg(long, default_value_t = 1)]
    fault_seed: u64,
    /// TCP connections open at once (about 200 bytes each); when all are taken, a new one
    /// takes the place of an idle or unfinished one.
    #[arg(long, default_value_t = 1024)]
    connections: usize,
    /// Connections served at once (HTTP sessions, about 10.5 KiB each); the others' requests
    /// wait their turn.
    #[arg(long, default_value_t = 64)]
    sessions: usize,
    /// Requests that may wait for a session at once (512-byte cells) [default: one per
    /// connection].
    #[arg(long)]
    cells: Option<usize>,
    /// Most connections from one IPv4 address at once (0: no cap).
    #[arg(long, default_value_t = 0)]
    max_per_source: u32,
    /// Do not answer mDNS.
    #[arg(long)]
    no_mdns: bool,
    /// Do not write the access log.
    #[arg(long)]
    no_access_log: bool,
    /// Serve HTTPS on port 443 with this PEM certificate chain (leaf first).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's PEM private key (ECDSA P-256 or Ed25519).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// With --tls-cert: answer plain HTTP with a 308 to https (as `https = only`).
    #[arg(long, requires = "tls_cert")]
    https_only: bool,
    /// With --tls-cert: send Strict-Transport-Security with this max-age in seconds.
    #[arg(long, value_name = "SECONDS", requires = "tls_cert")]
    hsts: Option<u32>,
    /// HTTPS connections served at once (with --tls-cert): TLS session slots of the HTTPS
    /// pool, which holds as many connections as --connections.
    #[arg(long, default_value_t = 8)]
    https_sessions: usize,
    /// Set the clock from this SNTP server (address or name, optional :port), as `ntp =`
    /// does on the Pi; repeat for more. Without it, the host's clock is used.
    #[arg(long, value_name = "SERVER")]
    ntp: Vec<String>,
    /// Obtain the HTTPS certificate by ACME for these names (comma-separated), as
    /// `domain =` with `acme = on` does on the Pi.
    #[arg(long, value_name = "NAMES", conflicts_with = "tls_cert")]
    domain: Option<String>,
    /// With --domain: the CA's directory URL.
    #[arg(long, value_name = "URL", default_value = bramble_hosted::LETS_ENCRYPT_DIRECTORY)]
    acme_directory: String,
    /// With --domain: the PEM root(s) the CA's HTTPS server chains to (default: the
    /// embedded Let's Encrypt roots).
    #[arg(long, value_name = "FILE")]
    acme_ca: Option<PathBuf>,
    /// With --domain: contact address for the ACME account.
    #[arg(long, value_name = "ADDRESS")]
    acme_email: Option<String>,
    /// With --domain: keep the certificate and keys in this file (created and preallocated
    /// if missing; written in place, two slots), as `certificate_store = card` does. Without
    /// it they are kept in RAM only (`certificate_store = ram`).
    #[arg(long, value_name = "FILE")]
    certificate_store: Option<PathBuf>,
    /// With --certificate-store: the store's region starts this many 512-byte blocks into
    /// the file (the rest of the file is never written, as the rest of a card is not).
    #[arg(long, value_name = "BLOCKS", default_value_t = 0)]
    certificate_store_offset: u64,
    /// For tests: pause this many milliseconds before each store block write, so that a
    /// kill can land inside a save.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    store_write_delay_ms: u64,
    /// With --domain: seconds to wait after the first failure (doubling after each next).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    acme_retry_seconds: u64,
    /// With --domain, for tests: renew this many seconds after a certificate's start rather
    /// than at two thirds of its lifetime.
    #[arg(long, value_name = "SECONDS")]
    acme_renew_after: Option<u64>,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, default_value = "info")]
    log_level: log::LevelFilter,
}

fn parse_cidr(text: &str) -> Result<(Ipv4Addr, u8), String> {
    let (address, prefix) = text
        .split_once('/')
        .ok_or_else(|| format!("{text:?}: expected ADDR/PREFIX, e.g. 192.168.77.2/24"))?;
    let address: Ipv4Addr = address.parse().map_err(|e| format!("{address:?}: {e}"))?;
    let prefix: u8 = prefix.parse().map_err(|e| format!("{prefix:?}: {e}"))?;
    if prefix > 32 {
        return Err(format!("prefix length {prefix} is over 32"));
    }
    Ok((address, prefix))
}

fn parse_cidr6(text: &str) -> Result<(Ipv6Addr, u8), String> {
    let (address, prefix) = text
        .split_once('/')
        .ok_or_else(|| format!("{text:?}: expected ADDR/PREFIX, e.g. 2001:db8::2/64"))?;
    let address: Ipv6Addr = address.parse().map_err(|e| format!("{address:?}: {e}"))?;
    let prefix: u8 = prefix.parse().map_err(|e| format!("{prefix:?}: {e}"))?;
    if prefix == 0 || prefix > 128 {
        return Err(format!("prefix length {prefix} is not 1 to 128"));
    }
    Ok((address, prefix))
}

fn parse_mac(text: &str) -> Result<MacAddress, String> {
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut mac {
        let part = parts
            .next()
            .ok_or_else(|| format!("{text:?}: expected six hex bytes"))?;
        *byte = u8::from_str_radix(part, 16).map_err(|e| format!("{text:?}: {e}"))?;
    }
    if parts.next().is_some() {
        return Err(format!("{text:?}: expected six hex bytes"));
    }
    Ok(MacAddress(mac))
}

fn main() -> ExitCode {
    let args = Args::parse();
    StderrLogger::install(args.log_level);
    let config = HostedConfig {
        tap: args.tap,
        site: args.site,
        static_address: args.static_address,
        gateway: args.gateway,
        ipv6: !args.no_ipv6,
        static_address6: args.static_address6,
        gateway6: args.gateway6,
        hostname: args.hostname,
        mac: args.mac,
        pcap: args.pcap,
        faults: FaultConfig {
            drop_percent: args.drop_percent,
            corrupt_percent: args.corrupt_percent,
            seed: args.fault_seed,
        },
        connections: args.connections,
        sessions: args.sessions,
        cells: args.cells.unwrap_or(args.connections),
        max_per_source: args.max_per_source,
        mdns: !args.no_mdns,
        access_log: !args.no_access_log,
        tls: args.tls_cert.zip(args.tls_key),
        https_only: args.https_only,
        hsts_seconds: args.hsts,
        https_sessions: args.https_sessions,
        ntp: args.ntp,
        acme: args.domain.map(|names| bramble_hosted::HostedAcme {
            names: names
                .split(',')
                .map(|name| name.trim().to_string())
                .filter(|name| !name.is_empty())
                .collect(),
            directory: args.acme_directory,
            ca: args.acme_ca,
            email: args.acme_email,
            store: args.certificate_store,
            store_offset_blocks: args.certificate_store_offset,
            store_write_delay_ms: args.store_write_delay_ms,
            first_retry_seconds: args.acme_retry_seconds,
            renew_after_seconds: args.acme_renew_after,
        }),
        console: true,
    };
    match bramble_hosted::run(&config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bramble-hosted: {e}");
            ExitCode::FAILURE
        }
    }
}
