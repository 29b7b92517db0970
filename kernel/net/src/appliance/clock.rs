//! The wall clock: SNTP (RFC 4330) from the servers the owner names, else the DHCP server's
//! (option 42), else `pool.ntp.org`; names resolved through smoltcp's DNS socket from the
//! DHCP name servers (or the static ones). Once set, the HTTP engine sends Date and logs
//! real times, and the TLS server's clock (certificate and ticket times) follows.

use super::Appliance;
use super::memory::ClockMemory;
use bramble_hal::{EthernetDevice, Instant};
use bramble_proto::sntp::{self, NTP_PORT, SntpAction, SntpClient};
use core::str::FromStr;
use smoltcp::iface::SocketHandle;
use smoltcp::socket::dns::{self, GetQueryResultError};
use smoltcp::socket::udp;
use smoltcp::wire::{DnsQueryType, IpAddress, IpEndpoint, Ipv4Address};

/// The time server asked when no one names any.
pub const DEFAULT_TIME_SERVER: &str = "pool.ntp.org";
/// Time servers kept at most.
pub const MAX_TIME_SERVERS: usize = 3;
/// The local UDP port SNTP requests leave from.
const SNTP_LOCAL_PORT: u16 = 50_123;
/// Wait before resolving names again after a failure.
const RESOLVE_RETRY_MICROS: u64 = 30_000_000;

/// Where the clock comes from.
#[derive(Clone, Copy, Debug)]
pub struct ClockConfig<'a> {
    /// Time servers as the owner wrote them: IPv4 addresses or DNS names, each with an
    /// optional `:port`. Empty: the DHCP server's, else [`DEFAULT_TIME_SERVER`].
    pub servers: &'a [&'a str],
    /// Name servers for a static address (DHCP gives its own).
    pub dns_servers: &'a [[u8; 4]],
    /// Seed for the SNTP nonces.
    pub seed: u64,
}

/// What the clock has done, for the status line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockStatus {
    /// Unix seconds now, once set.
    pub unix_seconds: Option<u64>,
    /// Stratum of the server that set it last, and how long ago (seconds).
    pub last_sync: Option<(u8, u64)>,
    /// Servers known (resolved) now.
    pub servers: usize,
}

/// Splits `host[:port]`.
fn host_and_port(text: &str) -> (&str, u16) {
    match text.rsplit_once(':') {
        Some((host, port)) => match port.parse() {
            Ok(port) => (host, port),
            Err(_) => (text, NTP_PORT),
        },
        None => (text, NTP_PORT),
    }
}

/// The appliance's clock: its two sockets and the SNTP client.
pub(super) struct ClockState<'a> {
    sntp_socket: SocketHandle,
    dns_socket: SocketHandle,
    config: ClockConfig<'a>,
    client: SntpClient,
    /// Servers to ask, resolved.
    targets: heapless::Vec<IpEndpoint, MAX_TIME_SERVERS>,
    /// The name being resolved: its index in the list in use, and the query.
    resolving: Option<(usize, dns::QueryHandle)>,
    /// Next name to resolve, and not before when.
    next_name: usize,
    resolve_after: Instant,
    logged_set: bool,
}

impl<'a> ClockState<'a> {
    /// Unix microseconds at `now`, once set.
    pub(super) fn unix_micros(&self, now: Instant) -> Option<u64> {
        self.client.unix_micros(now)
    }

    /// When the clock next needs a poll. Nothing while the interface has no address (DHCP
    /// wakes the loop when it has one) or a name is being resolved (the DNS socket's own
    /// timers wake it); otherwise the next resolution attempt while no server is known, or
    /// the SNTP client's next request or timeout. Never a time already past that nothing
    /// would move on: that would keep the loop from sleeping.
    pub(super) fn next_deadline(&self, has_address: bool, now: Instant) -> Option<Instant> {
        if !has_address || self.resolving.is_some() {
            return None;
        }
        if self.targets.is_empty() {
            return Some(self.resolve_after.max(now));
        }
        Some(self.client.next_deadline())
    }

    pub(super) fn status(&self, now: Instant) -> ClockStatus {
        ClockStatus {
            unix_seconds: self.unix_micros(now).map(|micros| micros / 1_000_000),
            last_sync: self
                .client
                .last_sync()
                .map(|(stratum, at)| (stratum, now.micros_since(at) / 1_000_000)),
            servers: self.targets.len(),
        }
    }
}

/// The server list in force: the owner's (`configured`), else the DHCP server's (`dhcp`),
/// else the default.
fn name_list<'l>(configured: &'l [&'l str], dhcp: &'l [[u8; 4]]) -> NameList<'l> {
    if !configured.is_empty() {
        NameList::Configured(configured)
    } else if !dhcp.is_empty() {
        NameList::Dhcp(dhcp)
    } else {
        NameList::Configured(&[DEFAULT_TIME_SERVER])
    }
}

/// The name servers for a lookup (one list for the clock's, syslog's and the jobs' lookups).
pub(super) use bramble_jobs::name_servers;

enum NameList<'l> {
    Configured(&'l [&'l str]),
    Dhcp(&'l [[u8; 4]]),
}

impl NameList<'_> {
    fn len(&self) -> usize {
        match self {
            NameList::Configured(names) => names.len().min(MAX_TIME_SERVERS),
            NameList::Dhcp(addresses) => addresses.len(),
        }
    }

    /// Entry `index`: an endpoint at once, or a name to resolve (and its port).
    fn entry(&self, index: usize) -> Result<IpEndpoint, (&str, u16)> {
        match self {
            NameList::Configured(names) => {
                let (host, port) = host_and_port(names[index]);
                match Ipv4Address::from_str(host) {
                    Ok(address) => Ok(IpEndpoint::new(IpAddress::Ipv4(address), port)),
                    Err(_) => Err((host, port)),
                }
            }
            NameList::Dhcp(addresses) => Ok(IpEndpoint::new(
                IpAddress::Ipv4(Ipv4Address::from_octets(addresses[index])),
                NTP_PORT,
            )),
        }
    }
}

impl<'a, D: EthernetDevice> Appliance<'a, D> {
    /// Starts the clock in `memory` and two of the kept-back socket slots. Can be called once.
    pub fn start_clock(
        &mut self,
        config: ClockConfig<'a>,
        memory: &'a mut ClockMemory,
        now: Instant,
    ) {
        if self.clock.is_some() || self.sockets_free() < 2 {
            log::warn!("clock: no socket slots left; the clock stays unset");
            return;
        }
        let ClockMemory {
            sntp_rx_meta,
            sntp_tx_meta,
            sntp_rx,
            sntp_tx,
            dns_queries,
        } = memory;
        let mut sntp = udp::Socket::new(
            udp::PacketBuffer::new(&mut sntp_rx_meta[..], &mut sntp_rx[..]),
            udp::PacketBuffer::new(&mut sntp_tx_meta[..], &mut sntp_tx[..]),
        );
        // Cannot fail: the port is not zero and the socket is new.
        let _ = sntp.bind(SNTP_LOCAL_PORT);
        let sntp_socket = self.sockets.add(sntp);
        let dns_socket = self
            .sockets
            .add(dns::Socket::new(&[], &mut dns_queries[..]));
        self.clock = Some(ClockState {
            sntp_socket,
            dns_socket,
            config,
            client: SntpClient::new(config.seed, now),
            targets: heapless::Vec::new(),
            resolving: None,
            next_name: 0,
            resolve_after: now,
            logged_set: false,
        });
    }

    /// Resolves names, sends requests and takes replies; sets the HTTP engine's and the TLS
    /// server's clocks when a reply is accepted.
    pub(super) fn poll_clock(&mut self, now: Instant) {
        bramble_tls::clock::CLOCK.advance(now.as_micros());
        let Some(clock) = &mut self.clock else {
            return;
        };
        if self.address.dhcp_servers_changed {
            self.address.dhcp_servers_changed = false;
            clock.targets.clear();
            clock.next_name = 0;
            clock.resolving = None;
            clock.resolve_after = now;
        }
        if self.iface.ipv4_addr().is_none() {
            return;
        }
        // Targets: one entry at a time, resolving names through DNS.
        let configured = clock.config.servers;
        let names = name_list(configured, &self.address.dhcp_time_servers);
        let count = names.len();
        if let Some((index, query)) = clock.resolving {
            let socket = self.sockets.get_mut::<dns::Socket>(clock.dns_socket);
            match socket.get_query_result(query) {
                Ok(addresses) => {
                    let (_, port) = names.entry(index).err().unwrap_or(("", NTP_PORT));
                    for address in addresses.iter().take(MAX_TIME_SERVERS) {
                        let _ = clock.targets.push(IpEndpoint::new(*address, port));
                    }
                    clock.resolving = None;
                }
                Err(GetQueryResultError::Pending) => {}
                Err(GetQueryResultError::Failed) => {
                    log::warn!(
                        "clock: the name of time server {} did not resolve",
                        index + 1
                    );
                    clock.resolving = None;
                    if clock.targets.is_empty() && clock.next_name >= count {
                        clock.resolve_after = now.add_micros(RESOLVE_RETRY_MICROS);
                        clock.next_name = 0;
                    }
                }
            }
            if clock.resolving.is_none() {
                // Idle, the socket lists no server: smoltcp hands each DNS answer to the
                // first socket listing its source, and this one was added before ACME's,
                // syslog's and the heartbeat's, whose answers it would take.
                self.sockets
                    .get_mut::<dns::Socket>(clock.dns_socket)
                    .update_servers(&[]);
            }
        }
        while clock.resolving.is_none()
            && clock.next_name < count
            && now >= clock.resolve_after
            && !clock.targets.is_full()
        {
            let index = clock.next_name;
            clock.next_name += 1;
            match names.entry(index) {
                Ok(endpoint) => {
                    let _ = clock.targets.push(endpoint);
                }
                Err((name, _)) => {
                    let advertised = self
                        .ipv6
                        .iter()
                        .flat_map(|state| state.config.dns_servers());
                    let servers = name_servers(
                        clock.config.dns_servers,
                        &self.address.dhcp_dns_servers,
                        advertised,
                    );
                    if servers.is_empty() {
                        clock.resolve_after = now.add_micros(RESOLVE_RETRY_MICROS);
                        clock.next_name = 0;
                        break;
                    }
                    let socket = self.sockets.get_mut::<dns::Socket>(clock.dns_socket);
                    socket.update_servers(&servers);
                    match socket.start_query(self.iface.context(), name, DnsQueryType::A) {
                        Ok(query) => clock.resolving = Some((index, query)),
                        Err(error) => log::warn!("clock: cannot look up {name}: {error}"),
                    }
                }
            }
        }
        // Every name tried and none gave a server: try again later, not on every poll.
        if clock.targets.is_empty() && clock.resolving.is_none() && clock.next_name >= count {
            clock.next_name = 0;
            clock.resolve_after = now.add_micros(RESOLVE_RETRY_MICROS);
        }
        // Replies first, then a request if one is due.
        let socket = self.sockets.get_mut::<udp::Socket>(clock.sntp_socket);
        while let Ok((data, meta)) = socket.recv() {
            let Some(server) = clock.targets.iter().position(|t| *t == meta.endpoint) else {
                continue;
            };
            if let Some(unix) = clock.client.receive(server, data, now) {
                self.server
                    .borrow_mut()
                    .set_wall_clock(unix / 1_000_000, now);
                bramble_tls::clock::CLOCK.set(unix, now.as_micros());
                if !clock.logged_set {
                    clock.logged_set = true;
                    log::info!(
                        "clock: set from {} to Unix time {} (SNTP)",
                        meta.endpoint,
                        unix / 1_000_000
                    );
                }
            }
        }
        if let SntpAction::Send { server, nonce } = clock.client.poll(clock.targets.len(), now)
            && let Err(error) = socket.send_slice(&sntp::request(nonce), clock.targets[server])
        {
            log::debug!("clock: request not sent: {error}");
        }
    }

    /// Unix seconds now, once SNTP has set the clock.
    pub fn unix_seconds(&self, now: Instant) -> Option<u64> {
        self.clock
            .as_ref()
            .and_then(|clock| clock.unix_micros(now))
            .map(|micros| micros / 1_000_000)
    }

    /// The clock's state, once started.
    pub fn clock_status(&self, now: Instant) -> Option<ClockStatus> {
        self.clock.as_ref().map(|clock| clock.status(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn router_advertised_name_servers_follow_the_ipv4_ones() {
        let v6 = [
            0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x53,
        ];
        let six = IpAddress::Ipv6(v6.into());
        let dhcp = IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 1));
        assert_eq!(name_servers(&[], &[], [v6].into_iter()).as_slice(), [six]);
        assert_eq!(
            name_servers(&[[9, 9, 9, 9]], &[[10, 0, 0, 1]], [v6].into_iter()).as_slice(),
            [dhcp, six]
        );
        let many = name_servers(&[], &[[10, 0, 0, 1]; 3], [v6].into_iter());
        assert_eq!(many.len(), MAX_TIME_SERVERS);
    }

    #[test]
    fn ports_are_optional() {
        assert_eq!(host_and_port("pool.ntp.org"), ("pool.ntp.org", 123));
        assert_eq!(host_and_port("10.0.2.2:1123"), ("10.0.2.2", 1123));
        assert_eq!(host_and_port("host:name"), ("host:name", 123));
    }
}
