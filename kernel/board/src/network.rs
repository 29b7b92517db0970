//! The network: power the USB controller, find the NIC (SMSC95xx on a B+, RNDIS or CDC-ECM
//! on QEMU's usb-net), and run the smoltcp appliance serving the site.

use crate::appliance::Network;
use crate::arena::Arena;
use crate::clients::{claim_client_heap, client_dns_servers, client_roots};
use crate::platform::{INTERRUPTS, MAILBOX, TIMER, micros};
use bramble_bcm2835::dma::DmaAllocator;
use bramble_bcm2835::dwc2::{self, Dwc2Host, Dwc2Starting};
use bramble_bcm2835::mailbox::{PropertyBuffer, device};
use bramble_hal::{Instant, MacAddress};
use bramble_http::{Connection, RedirectHost, Server, ServerConfig, SiteSource};
use bramble_net::SocketStorage;
use bramble_net::appliance::heartbeat::{HeartbeatConfig, HeartbeatMemory};
use bramble_net::appliance::pull::{PullConfig, PullMemory};
use bramble_net::appliance::router::{RouterConfig, RouterMemory};
use bramble_net::appliance::syslog::{CollectorHost, SyslogConfig, SyslogMemory};
use bramble_net::appliance::{
    AddressConfig, Appliance, ApplianceMemory, ClockConfig, ClockMemory, EXTRA_SOCKETS, Ipv6Config,
    NetworkConfig, PoolSizes,
};
use bramble_proto::portmap::PortRequest;
use bramble_publish::upload::PublishService;
use bramble_settings::{AddressMode, HttpsMode, RouterPorts, Settings, UsbProtocol};
use bramble_stream::{Cell, Lease, PoolLimits, PoolMemory, Source, Tcb};
use bramble_usb::probe::{CdcPreference, ProbeOptions};
use bramble_usb::recovery::ReprobingNic;
use core::sync::atomic::{AtomicUsize, Ordering};

/// The connection pool at full size: 16,384 connections open at once (160 bytes each),
/// 512 served at once (an HTTP session of 10.5 KiB each), and a 520-byte cell for every
/// connection to park its request in while it waits for a session: about 16 MiB. A smaller
/// arena gets a proportionally smaller pool.
const FULL_POOL: PoolSizes = PoolSizes {
    connections: 16 * 1024,
    sessions: 512,
    cells: 16 * 1024,
    sources: 0,
};
/// The smallest pool worth starting.
const MIN_SESSIONS: usize = 4;
/// Shortest RNDIS transfer under QEMU: just past its DWC2 model's 1,536-byte pacing limit.
const RNDIS_EMULATOR_MIN_TRANSFER: usize = 1540;
/// Share of the free RAM the connection pool may take.
const POOL_SHARE_DIVISOR: usize = 4;
/// The key of the stable IPv6 interface identifiers (RFC 7217): the card's `ipv6_secret`,
/// 16 random bytes `bramble image` drew for it, the same at every boot of that card. A card
/// without one (`board`: an old card, a reproducible image, an owner's own BRAMBLE.TXT) keys
/// them by the board's serial number and MAC: stable too, and the serial never leaves the
/// board, but a Pi's MAC carries the low 24 bits of its serial, so the identifiers are
/// little secret from anyone who has seen the MAC.
fn interface_secret(configured: Option<[u8; 16]>, serial: u64, mac: [u8; 6]) -> [u8; 16] {
    if let Some(secret) = configured {
        log::info!("ipv6: stable addresses keyed by the card's ipv6_secret");
        return secret;
    }
    log::info!("ipv6: stable addresses keyed by the board's serial (ipv6_secret = board)");
    let mut secret = [0u8; 16];
    secret[..8].copy_from_slice(&serial.to_le_bytes());
    secret[8..14].copy_from_slice(&mac);
    secret[14..].copy_from_slice(b"v6");
    secret
}

/// Powers the USB controller through the firmware and resets its core, the first half of
/// bring-up ([`Dwc2Host::start`]); [`start`] finishes it. `None` (logged) if the core did
/// not answer.
pub fn power_up(
    dma: &mut DmaAllocator,
    mailbox_buffer: &mut PropertyBuffer,
) -> Option<Dwc2Starting> {
    match MAILBOX.set_power(mailbox_buffer, device::USB_HCD, true, micros) {
        Ok(true) => {}
        Ok(false) => log::warn!("usb: the firmware did not power the controller on"),
        Err(error) => log::warn!("usb: power-on request failed: {error:?}"),
    }
    match Dwc2Host::start(TIMER, dma) {
        Ok(starting) => Some(starting),
        Err(error) => {
            log::error!("usb: controller did not start: {error:?}");
            None
        }
    }
}

/// Socket slots the clock takes: SNTP (UDP) and DNS.
const CLOCK_SOCKETS: usize = 2;

/// The clock's configuration from the settings, its names and memory in the arena.
fn clock_config(
    settings: &Settings,
    arena: &mut Arena,
    seed: u64,
) -> Option<(ClockConfig<'static>, &'static mut ClockMemory)> {
    let count = settings.ntp_servers.len();
    let names = arena.slice(count, || "")?;
    for (slot, server) in names.iter_mut().zip(settings.ntp_servers.iter()) {
        *slot = arena.value(server.clone())?.as_str();
    }
    let dns = arena.slice(settings.dns.len(), || [0u8; 4])?;
    for (slot, server) in dns.iter_mut().zip(settings.dns.iter()) {
        *slot = server.octets();
    }
    let memory = arena.value(ClockMemory::new())?;
    Some((
        ClockConfig {
            servers: names,
            dns_servers: dns,
            seed,
        },
        memory,
    ))
}

/// A seed for the SNTP nonces, from the CSPRNG (see [`crate::entropy::network_secret`]).
fn seed_for_nonces(nic: &ReprobingNic<Dwc2Host>) -> u64 {
    crate::entropy::network_secret(bramble_hal::EthernetDevice::mac_address(nic).0, 1)
}

/// Under QEMU: after 2 s without a received frame, look for one every 10 ms instead of
/// keeping the bulk-IN parked, then less often as the silence goes on (1/50 of it, at most
/// every second, reached after 50 s; every 10 ms again after anything is sent). Each look
/// costs QEMU's host CPU and, in wall time, a wake-up of 100-300 µs (QEMU emulating the USB
/// controller's registers), so after a long silence they are as rare as the watchdog tick;
/// the first frame after a silence of T waits at most T/50 (1 s at most). While parked, look at its
/// progress every 5 ms (a message without a zero-length packet raises no interrupt). See
/// `Dwc2Host::quiet_receive`; idle QEMU host CPU and the latency costs are measured in
/// doc/benchmarks.md.
const QUIET_RECEIVE: dwc2::QuietReceive = dwc2::QuietReceive {
    after_micros: 2_000_000,
    interval_micros: 10_000,
    silence_share: 50,
    longest_interval_micros: 1_000_000,
    parked_check_micros: 5_000,
};

static USED_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes of RAM the connection pool and the network stack's buffers took from the arena.
pub fn used_bytes() -> usize {
    USED_BYTES.load(Ordering::Relaxed)
}

/// What the appliance serves: the site, and the card store under it (whose card reader the
/// certificate store shares; `None` when the site could not be opened).
pub struct Content {
    /// The site (or the diagnostic it stands in for).
    pub site: SiteSource<'static>,
    /// The card store serving the site's bodies.
    pub card: Option<&'static crate::storage::Store>,
}

/// Brings up USB and the NIC and starts the appliance. Logs and returns `None` on failure
/// (the console keeps working).
///
/// `controller` comes from [`power_up`], called before the SD card is read so that the USB
/// core's settle time after its reset passes meanwhile.
#[inline(never)] // its temporaries hold an appliance or two: not in the main loop's frame
pub fn start(
    controller: Option<Dwc2Starting>,
    board_mac: Option<[u8; 6]>,
    board_serial: u64,
    settings: &Settings,
    content: Content,
    arena: &mut Arena,
    emulated: bool,
) -> Option<&'static mut Network> {
    let started = micros();
    let mut host = match controller?.finish() {
        Ok(host) => host,
        Err(error) => {
            log::error!("usb: controller did not start: {error:?}");
            return None;
        }
    };
    host.enable_interrupts();
    // QEMU's usb-net sends no zero-length packet after RNDIS messages of 64n bytes.
    host.end_bulk_in_on_idle_nak(emulated);
    // QEMU's DWC2 model retries a parked bulk-IN's NAK every 250 us on the host CPU: poll a
    // quiet receive path instead (real controllers retry NAKs in hardware, at no CPU cost).
    host.quiet_receive(emulated.then_some(QUIET_RECEIVE));
    INTERRUPTS.register(dwc2::IRQ, dwc2::handle_interrupt);
    let options = ProbeOptions {
        prefer: match settings.usb_protocol {
            UsbProtocol::Rndis => CdcPreference::Rndis,
            UsbProtocol::Ecm => CdcPreference::CdcEcm,
        },
        board_mac: board_mac.map(MacAddress),
        smsc_multiple_frames: true,
        // QEMU's DWC2 model paces transfers of 1,536 bytes or less at one 64-byte packet per
        // 250 us; padded RNDIS messages skip that (146 -> 1,032 requests/s for a 6 KB page,
        // measured). Real controllers have no such pacing: no padding there.
        rndis_min_transfer: if emulated {
            RNDIS_EMULATOR_MIN_TRANSFER
        } else {
            0
        },
    };
    // Probes now; if nothing is found (or the device goes away later) the appliance runs
    // with the link down and the NIC probes again in the background, 1 s to 30 s apart.
    let nic = ReprobingNic::new(host, options);
    match nic.kind() {
        Some(kind) => log::info!(
            "usb: {kind:?} network device ready after {} us, MAC {}",
            micros() - started,
            bramble_hal::EthernetDevice::mac_address(&nic)
        ),
        None => log::error!(
            "usb: no network device found ({:?}); probing again in the background",
            nic.counters().last_probe_error
        ),
    }

    let arena_before = arena.remaining();
    let acme = crate::acme::prepare(settings, arena, content.card);
    let https = if settings.acme {
        None
    } else {
        crate::tls::prepare(settings, crate::storage::tls_files(), arena)
    };
    let ddns = crate::ddns::prepare(settings, arena);
    // Socket slots for what starts later: ACME's, the clock's two, syslog's and dynamic
    // DNS's.
    let clock_sockets = if settings.ntp { CLOCK_SOCKETS } else { 0 };
    let reserved = acme.as_ref().map_or(0, |acme| acme.sockets)
        + clock_sockets
        + settings
            .syslog
            .as_ref()
            .map_or(0, |target| match target.host {
                bramble_settings::SyslogHost::Address(_) => 1,
                bramble_settings::SyslogHost::Name(_) => 2,
            })
        + ddns.as_ref().map_or(0, |_| crate::ddns::SOCKETS)
        + bramble_net::appliance::router::SOCKETS
            * usize::from(settings.router_ports != RouterPorts::Off)
        + if settings.heartbeat.is_some() { 2 } else { 0 }
        + if settings.publish_url.is_some() { 2 } else { 0 }
        + if settings.wants_reach_agent() {
            crate::reach::SOCKETS
        } else {
            0
        };
    let per_address = settings.connections_per_address.map_or(0, u32::from);
    let sizes = pool_sizes(arena.remaining() / POOL_SHARE_DIVISOR, per_address > 0);
    let sockets = arena.slice(EXTRA_SOCKETS + reserved, || SocketStorage::EMPTY)?;
    let pool = PoolMemory {
        tcbs: arena.slice(sizes.connections, || Tcb::EMPTY)?,
        buckets: arena.slice(sizes.buckets(), || 0u32)?,
        leases: arena.slice(sizes.sessions, || Lease::new(Connection::new()))?,
        cells: arena.slice(sizes.cells, Cell::new)?,
        sources: arena.slice(sizes.sources, || Source::EMPTY)?,
    };
    let memory = arena.value(ApplianceMemory::new(sockets, pool))?;
    memory.reserved_sockets = reserved;
    let clock = if settings.ntp {
        Some(clock_config(settings, arena, seed_for_nonces(&nic))?)
    } else {
        log::info!("clock: ntp = off; responses carry no Date");
        None
    };
    let hostname: &'static str = arena.value(settings.hostname.clone())?.as_str();
    let heartbeat = heartbeat_config(settings, arena);
    let publish = publish_service(settings, arena, content.card, hostname);
    let pull = pull_config(settings, arena, publish, hostname);
    let reach = crate::reach::prepare(settings, arena);
    let syslog = match &settings.syslog {
        Some(target) => {
            let host = match &target.host {
                bramble_settings::SyslogHost::Address(address) => CollectorHost::Address(*address),
                bramble_settings::SyslogHost::Name(name) => {
                    CollectorHost::Name(arena.value(name.clone())?.as_str())
                }
            };
            let dns = arena.slice(settings.dns.len(), || [0u8; 4])?;
            for (slot, server) in dns.iter_mut().zip(settings.dns.iter()) {
                *slot = server.octets();
            }
            Some((host, target.port, &*dns, arena.value(SyslogMemory::new())?))
        }
        None => None,
    };
    let router = match router_ports(settings) {
        Some(ports) => Some((ports, arena.value(RouterMemory::new())?)),
        None => None,
    };
    USED_BYTES.store(arena_before - arena.remaining(), Ordering::Relaxed);
    let address = match settings.address {
        AddressMode::Dhcp => AddressConfig::Dhcp,
        AddressMode::Static(fixed) => AddressConfig::Static {
            address: fixed.address.octets(),
            prefix_len: fixed.prefix_len,
            gateway: settings.gateway.map(|gateway| gateway.octets()),
        },
    };
    let mac = bramble_hal::EthernetDevice::mac_address(&nic).0;
    // Every network secret from the CSPRNG, seeded at boot by the health-tested hardware RNG.
    let seed = crate::entropy::network_secret(mac, 2);
    let secret_key = [
        crate::entropy::network_secret(mac, 3),
        crate::entropy::network_secret(mac, 4),
    ];
    let ipv6 = if settings.ipv6 {
        Ipv6Config {
            enabled: true,
            static_address: settings
                .address6
                .map(|fixed| (fixed.address.octets(), fixed.prefix_len)),
            gateway: settings.gateway6.map(|gateway| gateway.octets()),
            secret: interface_secret(settings.ipv6_secret, board_serial, mac),
        }
    } else {
        Ipv6Config::OFF
    };
    let config = NetworkConfig {
        hostname,
        address,
        ipv6,
        http_port: settings.http_port,
        mdns: settings.mdns,
        random_seed: seed,
        secret_key,
        limits: PoolLimits::DEFAULT,
        max_per_source: per_address,
    };
    let server = Server::new(
        content.site,
        ServerConfig {
            access_log: settings.access_log,
            // Only once HTTPS really runs: a broken certificate must not send plain HTTP
            // clients to a port that cannot answer them.
            redirect_to_https_port: (settings.https == HttpsMode::Only && https.is_some())
                .then_some(settings.https_port),
            hsts_seconds: settings.hsts_seconds,
            redirect_host: settings
                .domains
                .first()
                .and_then(|name| RedirectHost::new(name.as_str())),
            ..ServerConfig::default()
        },
    );
    let mut server = server;
    server.set_status_access(status_access(settings));
    let proxies: heapless::Vec<
        bramble_http::status::Prefix,
        { bramble_settings::MAX_STATUS_PREFIXES },
    > = settings
        .proxy_from
        .iter()
        .map(|prefix| bramble_http::status::Prefix {
            address: prefix.address,
            len: prefix.len,
        })
        .collect();
    server.set_trusted_proxies(&proxies);
    match Appliance::new(nic, config, memory, server, Instant::from_micros(micros())) {
        Ok(appliance) => {
            // Into the arena at once: the appliance is tens of KiB, and the main loop's frame
            // must not hold it (see boot/src/stack.rs).
            let Some(appliance) = arena.value(appliance) else {
                log::error!("net: no memory left for the appliance itself");
                return None;
            };
            USED_BYTES.fetch_add(core::mem::size_of::<Network>(), Ordering::Relaxed);
            // The owner's caches carry many clients per connection: no per-address cap.
            appliance.set_uncapped_sources(&proxies);
            appliance.set_copy_words(crate::checksum::copy_sum_words);
            if let Some((config, memory)) = clock {
                appliance.start_clock(config, memory, Instant::from_micros(micros()));
            }
            if let Some((host, port, dns_servers, memory)) = syslog {
                let config = SyslogConfig {
                    collector: (host, port),
                    dns_servers,
                    hostname,
                    lines: &crate::console::RING_SOURCE,
                };
                appliance.start_syslog(config, memory, Instant::from_micros(micros()));
            }
            if let Some((config, memory)) = heartbeat
                && let Err(error) = appliance.start_heartbeat(config, memory)
            {
                log::error!("heartbeat: not started: {error}");
            }
            if let Some(service) = publish {
                // HTTPS uploads (PUT /.well-known/bramble/site) go to the card writer.
                appliance.set_publish_service(service);
            }
            if let Some((config, memory)) = pull
                && let Err(error) = appliance.start_pull(config, memory)
            {
                log::error!("publish: not started: {error}");
            }
            if let Some(ddns) = ddns {
                let now = Instant::from_micros(micros());
                if let Err(error) = appliance.start_ddns(ddns.config, ddns.memory, now) {
                    log::error!("ddns: not started: {error}");
                }
            }
            if let Some((config, memory)) = reach {
                let now = Instant::from_micros(micros());
                if let Err(error) = appliance.start_reach(config, memory, now) {
                    log::error!("reach: not started: {error}");
                }
            }
            if let Some((ports, memory)) = router {
                let mac = bramble_hal::EthernetDevice::mac_address(appliance.device()).0;
                let mut nonce = [0u8; 12];
                nonce[..8].copy_from_slice(&crate::entropy::network_secret(mac, 5).to_le_bytes());
                nonce[8..]
                    .copy_from_slice(&crate::entropy::network_secret(mac, 6).to_le_bytes()[..4]);
                let config = RouterConfig {
                    ports: &ports,
                    lifetime: settings.router_lifetime,
                    nonce,
                };
                appliance.start_router(config, memory, Instant::from_micros(micros()));
            }
            if let Some(https) = https {
                let now = Instant::from_micros(micros());
                if let Err(error) =
                    appliance.start_https(https.config, https.key, https.memory, https.port, now)
                {
                    crate::tls::not_started(format_args!("{error}"));
                }
                // Handshakes are held to their share of the time as measured, too.
                appliance.set_https_cpu_clock(|| Instant::from_micros(micros()));
            }
            appliance.set_notice(&crate::tls::notice(None));
            if let Some(acme) = acme {
                let now = Instant::from_micros(micros());
                if let Err(error) = appliance.start_acme(
                    acme.config,
                    acme.store,
                    acme.memory,
                    Some(acme.https),
                    now,
                ) {
                    log::error!("acme: not started: {error}; plain HTTP is served");
                }
            }
            log::info!(
                "net: {} connections ({} served at once, {} KiB), port {}, {}",
                sizes.connections,
                sizes.sessions,
                sizes.bytes() / 1024,
                settings.http_port,
                match address {
                    AddressConfig::Dhcp => "asking DHCP for an address",
                    AddressConfig::Static { .. } => "static address",
                }
            );
            Some(appliance)
        }
        Err(error) => {
            log::error!("net: {error:?}");
            None
        }
    }
}

/// The ports `router_ports` asks the router to forward: HTTP's, and HTTPS's when HTTPS is
/// served (by a certificate on the card or from ACME); `None` when it is off.
fn router_ports(settings: &Settings) -> Option<heapless::Vec<PortRequest, 2>> {
    let (http, https) = match settings.router_ports {
        RouterPorts::Off => return None,
        RouterPorts::Same => (settings.http_port, settings.https_port),
        RouterPorts::Outside { http, https } => (http, https),
    };
    let mut ports = heapless::Vec::new();
    let _ = ports.push(PortRequest {
        internal: settings.http_port,
        external: http,
    });
    if settings.https != HttpsMode::Off || settings.acme {
        let _ = ports.push(PortRequest {
            internal: settings.https_port,
            external: https,
        });
    }
    Some(ports)
}

/// Heap for the heartbeat's TLS client: its handshake, the server's chain, one record each
/// way (ACME's client, doing more, peaked at 18 KiB against pebble).
const HEARTBEAT_HEAP_BYTES: usize = 48 * 1024;

/// The heartbeat's configuration and memory from the settings (`None`: off, or logged why
/// not): the URL, its interval, the roots (`acme_ca_certificate`, else Let's Encrypt's).
fn heartbeat_config(
    settings: &Settings,
    arena: &mut Arena,
) -> Option<(HeartbeatConfig<'static>, &'static mut HeartbeatMemory)> {
    let url = settings.heartbeat.as_ref()?;
    let roots_pem = client_roots(settings, "heartbeat")?;
    claim_client_heap(arena, HEARTBEAT_HEAP_BYTES, "heartbeat")?;
    let dns_servers = client_dns_servers(settings, arena)?;
    let config = HeartbeatConfig {
        url: arena.value(url.clone())?.as_str(),
        every_minutes: u32::from(settings.heartbeat_every),
        roots_pem,
        dns_servers,
    };
    Some((config, arena.value(HeartbeatMemory::new())?))
}

/// Heap for pulling: its TLS client, which for a download holds full 16 KiB records (the
/// deframer's buffer, the decrypted record, each poll's plaintext taken out); 64 KiB ran
/// out on the first image in QEMU.
const PULL_HEAP_BYTES: usize = 160 * 1024;
/// The read-back's buffer: whole blocks.
const PULL_SCRATCH_BYTES: usize = 16 * 1024;

/// The card writer over the slots boot served from, which HTTPS uploads and the pull share
/// (`None`: the card has no site slots, or no publish key: publishing is off; or neither
/// HTTPS nor `publish_url` is on, so that nothing could publish).
fn publish_service(
    settings: &Settings,
    arena: &mut Arena,
    card: Option<&'static crate::storage::Store>,
    hostname: &'static str,
) -> Option<&'static core::cell::RefCell<PublishService<'static>>> {
    if !crate::storage::publishes(settings) {
        return None;
    }
    let (slots, record, next_copy) = crate::storage::site_slots()?;
    slots.publish_key?;
    let store = card?;
    let card = arena.value(crate::storage::PublishCard(store))?;
    let scratch = arena.bytes(PULL_SCRATCH_BYTES, 32)?;
    let publisher = bramble_publish::writer::Publisher::new(slots, record, next_copy);
    let service = arena.value(core::cell::RefCell::new(PublishService::new(
        publisher, card, scratch, hostname,
    )))?;
    log::info!(
        "publish: uploads over HTTPS to /.well-known/bramble/site go to slot {}",
        if record.live == 0 { "B" } else { "A" }
    );
    Some(service)
}

/// Pulling's configuration and memory (`None`: `publish_url` is off, or logged why not): the
/// URL, its interval, the roots (`acme_ca_certificate`, else Let's Encrypt's), and the card
/// writer over the slots boot served from.
fn pull_config(
    settings: &Settings,
    arena: &mut Arena,
    service: Option<&'static core::cell::RefCell<PublishService<'static>>>,
    hostname: &'static str,
) -> Option<(PullConfig<'static>, &'static mut PullMemory)> {
    let url = settings.publish_url.as_ref()?;
    let Some((slots, _, _)) = crate::storage::site_slots() else {
        log::error!(
            "publish: the card has no site slots served (make it with `bramble image \
             --publish-key`); not started"
        );
        return None;
    };
    if slots.publish_key.is_none() {
        log::error!("publish: the card has no publish key (publishing is off); not started");
        return None;
    }
    let service = service?;
    let roots_pem = client_roots(settings, "publish")?;
    claim_client_heap(arena, PULL_HEAP_BYTES, "publish")?;
    let dns_servers = client_dns_servers(settings, arena)?;
    let config = PullConfig {
        url: arena.value(url.clone())?.as_str(),
        every_minutes: u32::from(settings.publish_every),
        roots_pem,
        dns_servers,
        hostname,
        service,
    };
    Some((config, arena.value(PullMemory::new())?))
}

/// Who may see the status page and metrics, from `status_from` and `status_token`.
fn status_access(settings: &Settings) -> bramble_http::status::StatusAccess {
    use bramble_http::status::{Prefix, StatusAccess};
    let mut access = StatusAccess {
        token: settings
            .status_token
            .as_ref()
            .and_then(|token| heapless::String::try_from(token.as_str()).ok()),
        ..StatusAccess::default()
    };
    for prefix in &settings.status_from {
        let _ = access.from.push(Prefix {
            address: prefix.address,
            len: prefix.len,
        });
    }
    access
}

/// [`FULL_POOL`], or a pool scaled down to fit `budget` bytes; with `per_address`, a count
/// table for the per-address cap too.
fn pool_sizes(budget: usize, per_address: bool) -> PoolSizes {
    let mut sizes = FULL_POOL;
    if per_address {
        sizes.sources = 2 * sizes.connections;
    }
    while sizes.bytes() > budget && sizes.sessions > MIN_SESSIONS {
        sizes.connections /= 2;
        sizes.cells /= 2;
        sizes.sessions /= 2;
        sizes.sources /= 2;
    }
    sizes
}
