//! Port mapping in the appliance (`router_ports = on`): one UDP socket on port 5350 that
//! sends [`bramble_proto::portmap::PortMapper`]'s requests to the IPv4 default gateway's port 5351
//! and takes its replies and its multicast announcements (224.0.0.1:5350, which smoltcp
//! always accepts). The external address it learns goes to the shared
//! [`super::public::PublicAddress`].
//!
//! UPnP IGD, the fallback, adds one TCP socket for its HTTP exchanges with the gateway (the
//! device description, SOAP calls), one at a time with `Connection: close`; an answer is
//! kept whole (up to [`ANSWER_LEN`] bytes) and handed to the client.
//!
//! IPv6 pinholes ([`bramble_proto::portmap::Pinholes`]) have a UDP socket of their own for
//! sending, also on port 5350: PCP MAP requests for the served ports go to the IPv6 default
//! router's port 5351 from the global IPv6 address AAAA publishes
//! ([`bramble_proto::slaac::global_address`]). Its own, because smoltcp sends a socket's
//! datagrams in order and holds them all while the first one's next hop is being resolved:
//! an IPv6 router that does not answer neighbor solicitations would otherwise hold up the
//! IPv4 mappings behind it for good. smoltcp hands a received datagram to the first socket
//! bound to its port, the IPv4 one (added first): replies and ANNOUNCEs of both families
//! arrive there and go to the client of their family (both sockets are read, so nothing
//! depends on that order).
//!
//! A clean shutdown ([`Appliance::stop_router`]) queues the deletions and polls until they
//! have left the board (by UPnP IGD: until each DeletePortMapping exchange has its answer). smoltcp's neighbor cache sends one ARP request or neighbor
//! solicitation per second at most: when both the gateway's and the IPv6 router's entries
//! have run out (60 s after their last packet), the second family's deletions wait about a
//! second for theirs ([`STOP_WAIT_MICROS`] bounds the wait).
//!
//! RAM: the sockets' buffers and the answer ([`RouterMemory`]) and the client's state (the
//! start-up line prints the sum), plus [`SOCKETS`] socket slots.

use super::Appliance;
use super::public::{AddressKind, PublicSource};
use bramble_hal::{EthernetDevice, Instant};
use bramble_proto::portmap::{
    MAX_PORTS, Pinholes, PortMapper, PortRequest, Protocol, UpnpAction, natpmp, pcp, upnp,
};
use smoltcp::iface::SocketHandle;
use smoltcp::socket::udp::UdpMetadata;
use smoltcp::socket::{tcp, udp};
use smoltcp::wire::{IpAddress, IpEndpoint, Ipv4Address, Ipv6Address};

/// Datagrams queued for receiving (replies and announcements).
const RX_PACKETS: usize = 4;
/// Bytes kept of each: a PCP MAP response without options is 60 bytes (options are not
/// read); an SSDP answer about 300.
const RX_PACKET_LEN: usize = 256;
/// The longest HTTP answer kept whole (a device description is 2 to 8 KB).
pub const ANSWER_LEN: usize = 8 * 1024;
/// TCP buffers of the UPnP exchanges.
const TCP_RX_LEN: usize = 2048;
const TCP_TX_LEN: usize = upnp::REQUEST_LEN;
/// Longest one UPnP exchange may take.
const EXCHANGE_TIMEOUT_MICROS: u64 = 5_000_000;
/// While an exchange is out, the latest the loop looks at it again.
const EXCHANGE_RECHECK_MICROS: u64 = 50_000;
/// The first local port of the UPnP exchanges (the IANA dynamic range).
const FIRST_LOCAL_PORT: u16 = 50_600;
/// Socket slots the port mapping takes: the IPv4 UDP socket, the IPv6 one, the UPnP TCP one.
pub const SOCKETS: usize = 3;
/// Datagrams queued for sending on each UDP socket: a deletion per port on shutdown, behind
/// a request still waiting for its next hop.
const TX_PACKETS: usize = MAX_PORTS + 1;
/// Bytes queued for sending on the IPv4 socket: the deletions (60 bytes each) behind a
/// request, or an SSDP search (130 bytes). A datagram that does not fit before the ring's
/// end starts again at its beginning, leaving the end unused: room for one more.
const TX_LEN: usize = 256;
const _: () = assert!((TX_PACKETS + 1) * pcp::MAP_LEN <= TX_LEN);
const _: () = assert!(upnp::search_request().len() <= TX_LEN);
/// The same on the IPv6 socket (PCP only).
const TX6_LEN: usize = (TX_PACKETS + 1) * pcp::MAP_LEN;
/// What the IPv6 socket keeps of received datagrams: one PCP response (it gets none while
/// the IPv4 socket, bound to the same port, comes first; see the module's notes).
const RX6_LEN: usize = 64;
const _: () = assert!(pcp::MAP_LEN <= RX6_LEN);
/// How long a request may wait for its next hop's ARP or neighbor entry before it is
/// dropped ([`drop_stuck`]): two of smoltcp's one-second pauses between resolutions.
const STUCK_MICROS: u64 = 2_000_000;
/// The longest a clean shutdown waits for its deletions to leave: the one-second pause
/// smoltcp's neighbor cache makes between two resolutions, one lost ARP request or neighbor
/// solicitation sent again a second later, and the round trips.
pub const STOP_WAIT_MICROS: u64 = 2_500_000;
/// Datagrams taken per poll at most.
const RECEIVE_PER_POLL: usize = 8;

/// Memory for the port-mapping socket.
pub struct RouterMemory {
    rx_meta: [udp::PacketMetadata; RX_PACKETS],
    tx_meta: [udp::PacketMetadata; TX_PACKETS],
    rx: [u8; RX_PACKETS * RX_PACKET_LEN],
    tx: [u8; TX_LEN],
    rx6_meta: [udp::PacketMetadata; 1],
    tx6_meta: [udp::PacketMetadata; TX_PACKETS],
    rx6: [u8; RX6_LEN],
    tx6: [u8; TX6_LEN],
    tcp_rx: [u8; TCP_RX_LEN],
    tcp_tx: [u8; TCP_TX_LEN],
    answer: [u8; ANSWER_LEN],
}

impl RouterMemory {
    /// Empty queues.
    pub const fn new() -> Self {
        Self {
            rx_meta: [udp::PacketMetadata::EMPTY; RX_PACKETS],
            tx_meta: [udp::PacketMetadata::EMPTY; TX_PACKETS],
            rx: [0; RX_PACKETS * RX_PACKET_LEN],
            tx: [0; TX_LEN],
            rx6_meta: [udp::PacketMetadata::EMPTY; 1],
            tx6_meta: [udp::PacketMetadata::EMPTY; TX_PACKETS],
            rx6: [0; RX6_LEN],
            tx6: [0; TX6_LEN],
            tcp_rx: [0; TCP_RX_LEN],
            tcp_tx: [0; TCP_TX_LEN],
            answer: [0; ANSWER_LEN],
        }
    }
}

impl Default for RouterMemory {
    fn default() -> Self {
        Self::new()
    }
}

/// What to map.
#[derive(Clone, Copy, Debug)]
pub struct RouterConfig<'a> {
    /// The ports: each served port and the one wished for outside.
    pub ports: &'a [PortRequest],
    /// Seconds asked for each mapping (renewed at half of what is granted).
    pub lifetime: u32,
    /// Keys the PCP nonces (from the CSPRNG).
    pub nonce: [u8; 12],
}

/// A UPnP exchange under way.
struct Exchange {
    request: heapless::Vec<u8, { upnp::REQUEST_LEN }>,
    sent: usize,
    received: usize,
    started: Instant,
}

pub(super) struct RouterState<'a> {
    /// The IPv4 requests' socket, where replies of both families arrive.
    socket: SocketHandle,
    /// The IPv6 pinhole requests' socket.
    socket6: SocketHandle,
    tcp: SocketHandle,
    answer: &'a mut [u8],
    exchange: Option<Exchange>,
    local_port: u16,
    mapper: PortMapper,
    /// IPv6 pinholes for the served ports, by PCP.
    pinholes: Pinholes,
    /// The last poll's instant (for the status page's seconds left).
    polled_at: Instant,
    /// Since when each UDP socket (IPv4, IPv6) has held a datagram it could not send.
    stuck_since: [Option<Instant>; 2],
    /// The deletions are queued: nothing more is sent, nothing dropped.
    stopping: bool,
}

impl<'a, D: EthernetDevice> Appliance<'a, D> {
    /// Starts keeping `config.ports` mapped on the gateway, in `memory` and one of the
    /// kept-back socket slots. Can be called once.
    pub fn start_router(
        &mut self,
        config: RouterConfig<'_>,
        memory: &'a mut RouterMemory,
        now: Instant,
    ) {
        if self.router.is_some() || self.sockets_free() < SOCKETS {
            log::warn!("router: no socket slot left; ports are not mapped");
            return;
        }
        let RouterMemory {
            rx_meta,
            tx_meta,
            rx,
            tx,
            rx6_meta,
            tx6_meta,
            rx6,
            tx6,
            tcp_rx,
            tcp_tx,
            answer,
        } = memory;
        let tcp = self.sockets.add(tcp::Socket::new(
            tcp::SocketBuffer::new(&mut tcp_rx[..]),
            tcp::SocketBuffer::new(&mut tcp_tx[..]),
        ));
        let mut socket = udp::Socket::new(
            udp::PacketBuffer::new(&mut rx_meta[..], &mut rx[..]),
            udp::PacketBuffer::new(&mut tx_meta[..], &mut tx[..]),
        );
        // Cannot fail: the port is not zero and the socket is new.
        let _ = socket.bind(natpmp::CLIENT_PORT);
        // The IPv4 socket first: it is the one smoltcp hands received datagrams to.
        let socket = self.sockets.add(socket);
        let mut socket6 = udp::Socket::new(
            udp::PacketBuffer::new(&mut rx6_meta[..], &mut rx6[..]),
            udp::PacketBuffer::new(&mut tx6_meta[..], &mut tx6[..]),
        );
        let _ = socket6.bind(natpmp::CLIENT_PORT);
        let socket6 = self.sockets.add(socket6);
        let mut mapper = PortMapper::new(config.ports, config.lifetime, config.nonce);
        mapper.set_network(None, None, now);
        let served: heapless::Vec<u16, MAX_PORTS> =
            config.ports.iter().map(|port| port.internal).collect();
        let pinholes = Pinholes::new(&served, config.lifetime, config.nonce);
        self.router = Some(RouterState {
            socket,
            socket6,
            tcp,
            answer: &mut answer[..],
            exchange: None,
            local_port: FIRST_LOCAL_PORT,
            mapper,
            pinholes,
            polled_at: now,
            stuck_since: [None; 2],
            stopping: false,
        });
        log::info!(
            "router: will ask the gateway to forward {} port(s) (PCP, NAT-PMP, then UPnP IGD) \
             and the IPv6 router for pinholes (PCP); {} bytes of RAM",
            config.ports.len().min(MAX_PORTS),
            core::mem::size_of::<RouterMemory>()
                + core::mem::size_of::<RouterState<'_>>()
                + SOCKETS * core::mem::size_of::<smoltcp::iface::SocketStorage<'_>>()
        );
    }

    /// Takes the gateway's datagrams, sends what the client asks, and passes the external
    /// address on.
    pub(super) fn poll_router(&mut self, now: Instant) {
        if self.router.is_none() {
            return;
        }
        // The global IPv6 address AAAA publishes, and the IPv6 router to ask for pinholes.
        let global6 = bramble_proto::slaac::global_address(self.ipv6_addresses());
        let router6 = self.ipv6_router();
        let Some(state) = &mut self.router else {
            return;
        };
        state.pinholes.set_network(global6, router6, now);
        let client = self.iface.ipv4_addr().map(|a| a.octets());
        let gateway = self
            .iface
            .routes()
            .get_default_ipv4_route()
            .and_then(|route| match route.via_router {
                IpAddress::Ipv4(address) => Some(address.octets()),
                #[allow(unreachable_patterns)]
                _ => None,
            });
        // A link-local address has no gateway to ask.
        let client = client.filter(|_| !self.address.link_local);
        state.mapper.set_network(client, gateway, now);
        state.polled_at = now;
        if !state.stopping {
            for (handle, since) in [state.socket, state.socket6]
                .into_iter()
                .zip(&mut state.stuck_since)
            {
                drop_stuck(self.sockets.get_mut::<udp::Socket>(handle), since, now);
            }
        }
        let restarts = state.mapper.counters().gateway_restarts;
        for handle in [state.socket, state.socket6] {
            let socket = self.sockets.get_mut::<udp::Socket>(handle);
            for _ in 0..RECEIVE_PER_POLL {
                let Ok((bytes, meta)) = socket.recv() else {
                    break;
                };
                match meta.endpoint.addr {
                    IpAddress::Ipv4(from) => state.mapper.receive(from.octets(), bytes, now),
                    #[allow(unreachable_patterns)]
                    IpAddress::Ipv6(from) => state.pinholes.receive(from.octets(), bytes, now),
                }
            }
        }
        if state.mapper.counters().gateway_restarts != restarts {
            state.pinholes.gateway_restarted(now);
        }
        if let Some(request) = state.pinholes.poll(now) {
            let socket6 = self.sockets.get_mut::<udp::Socket>(state.socket6);
            Self::send_pinhole_request(&state.pinholes, socket6, &request);
        }
        let socket = self.sockets.get_mut::<udp::Socket>(state.socket);
        if let Some(request) = state.mapper.poll(now)
            && let Some(gateway) = state.mapper.gateway()
        {
            let to = IpEndpoint::new(
                IpAddress::Ipv4(Ipv4Address::from_octets(gateway)),
                natpmp::SERVER_PORT,
            );
            if let Err(error) = socket.send_slice(&request, to) {
                log::debug!("router: request not sent: {error}");
            }
        }
        match state.mapper.poll_upnp(now) {
            Some(UpnpAction::Search) => {
                let to = IpEndpoint::new(
                    IpAddress::Ipv4(Ipv4Address::from_octets(upnp::SSDP_GROUP)),
                    upnp::SSDP_PORT,
                );
                if let Err(error) = socket.send_slice(upnp::search_request(), to) {
                    log::warn!("router: UPnP search not sent: {error}");
                }
            }
            Some(UpnpAction::Exchange { to, request }) => {
                let tcp = self.sockets.get_mut::<tcp::Socket>(state.tcp);
                tcp.abort();
                state.local_port = if state.local_port >= FIRST_LOCAL_PORT + 99 {
                    FIRST_LOCAL_PORT
                } else {
                    state.local_port + 1
                };
                let remote = IpEndpoint::new(IpAddress::Ipv4(Ipv4Address::from_octets(to.0)), to.1);
                match tcp.connect(self.iface.context(), remote, state.local_port) {
                    Ok(()) => {
                        state.exchange = Some(Exchange {
                            request,
                            sent: 0,
                            received: 0,
                            started: now,
                        })
                    }
                    Err(error) => {
                        log::debug!("router: cannot connect to the IGD: {error}");
                        state.mapper.upnp_failed(now);
                    }
                }
            }
            None => {}
        }
        Self::drive_exchange(state, &mut self.sockets, now);
        let learned = state.mapper.external().map(|(address, protocol)| {
            let source = match protocol {
                Protocol::Pcp => PublicSource::Pcp,
                Protocol::NatPmp => PublicSource::NatPmp,
                Protocol::Upnp => PublicSource::Upnp,
            };
            (address, source)
        });
        // The echo sees the address from outside: a router behind another NAT does not
        // overrule it.
        if let Some((address, source)) = learned
            && self.public.ipv4 != Some(address)
            && self.public.source != Some(PublicSource::Echo)
        {
            self.set_public_ipv4(Some(address), source, now);
        }
    }

    /// Sends a PCP request to the IPv6 router from the global address (the server checks
    /// the request's client address against the packet's source).
    fn send_pinhole_request(pinholes: &Pinholes, socket: &mut udp::Socket<'_>, request: &[u8]) {
        let Some((server, client)) = pinholes.route() else {
            return;
        };
        let meta = UdpMetadata {
            endpoint: IpEndpoint::new(
                IpAddress::Ipv6(Ipv6Address::from_octets(server)),
                natpmp::SERVER_PORT,
            ),
            local_address: Some(IpAddress::Ipv6(Ipv6Address::from_octets(client))),
            meta: Default::default(),
        };
        if let Err(error) = socket.send_slice(request, meta) {
            log::debug!("router: IPv6 pinhole request not sent: {error}");
        }
    }

    /// The mapping in short, for the status page (`None`: not started).
    pub(super) fn router_summary(&self) -> Option<bramble_http::status::RouterSummary> {
        let state = self.router.as_ref()?;
        let mapper = &state.mapper;
        let mut ports = [0u16; 2];
        for (slot, mapping) in ports.iter_mut().zip(mapper.mappings()) {
            *slot = mapping.external;
        }
        let external = mapper.external();
        let kind_warning = external.and_then(|(address, _)| match AddressKind::of(address) {
            AddressKind::Public => None,
            AddressKind::Private => Some("double NAT"),
            AddressKind::SharedCgnat => Some("carrier-grade NAT"),
            AddressKind::Special => Some("outside address not routable"),
        });
        Some(bramble_http::status::RouterSummary {
            protocol: external.map_or("", |(_, protocol)| protocol.name()),
            external: external.map(|(address, _)| address),
            ports,
            seconds_left: mapper
                .mappings()
                .map(|m| m.remaining(state.polled_at))
                .min()
                .unwrap_or(0),
            problem: kind_warning
                .or(mapper.trouble().map(|t| t.short()))
                .unwrap_or(""),
        })
    }

    /// Moves the UPnP exchange on: the request out, the answer in; once the gateway closes
    /// (or the answer fills its buffer), the whole of it goes to the client.
    fn drive_exchange(
        state: &mut RouterState<'a>,
        sockets: &mut smoltcp::iface::SocketSet<'a>,
        now: Instant,
    ) {
        let Some(exchange) = &mut state.exchange else {
            return;
        };
        let tcp = sockets.get_mut::<tcp::Socket>(state.tcp);
        if tcp.can_send() && exchange.sent < exchange.request.len() {
            exchange.sent += tcp
                .send_slice(&exchange.request[exchange.sent..])
                .unwrap_or(0);
        }
        while tcp.can_recv() && exchange.received < state.answer.len() {
            match tcp.recv_slice(&mut state.answer[exchange.received..]) {
                Ok(0) | Err(_) => break,
                Ok(taken) => exchange.received += taken,
            }
        }
        let full = exchange.received == state.answer.len();
        let closed = !tcp.may_recv() && !tcp.can_recv() && exchange.sent == exchange.request.len();
        let timed_out = now.micros_since(exchange.started) >= EXCHANGE_TIMEOUT_MICROS;
        if (closed && exchange.received > 0) || full {
            let received = exchange.received;
            state.exchange = None;
            tcp.abort();
            state.mapper.upnp_answer(&state.answer[..received], now);
        } else if timed_out || (!tcp.is_open() && exchange.received == 0 && exchange.sent > 0) {
            state.exchange = None;
            tcp.abort();
            log::debug!("router: the IGD's HTTP exchange failed");
            state.mapper.upnp_failed(now);
        }
    }

    /// When the client next has work.
    pub(super) fn router_deadline(&self, now: Instant) -> Option<Instant> {
        let state = self.router.as_ref()?;
        if state.exchange.is_some() {
            return Some(now.add_micros(EXCHANGE_RECHECK_MICROS));
        }
        match (state.mapper.next_deadline(), state.pinholes.next_deadline()) {
            (Some(a), Some(b)) => Some(if a < b { a } else { b }),
            (a, b) => a.or(b),
        }
    }

    /// The port-mapping client, once started (for its report and counts).
    pub fn port_mapper(&self) -> Option<&PortMapper> {
        self.router.as_ref().map(|state| &state.mapper)
    }

    /// The IPv6 pinhole client, once started (for its report).
    pub fn ipv6_pinholes(&self) -> Option<&Pinholes> {
        self.router.as_ref().map(|state| &state.pinholes)
    }

    /// Asks the gateway again now (the `router again` console command).
    pub fn router_again(&mut self, now: Instant) {
        if let Some(state) = &mut self.router {
            state.mapper.again(now);
            state.pinholes.again(now);
            log::info!("router: asking the gateway again");
        }
    }

    /// Deletes the mappings and pinholes before a clean shutdown: queues one deletion per
    /// port and family (no answer is awaited: a lost one runs out with its lifetime), then
    /// polls the interface until they have left the board, for at most [`STOP_WAIT_MICROS`]
    /// by `clock` (the time now). Returns whether they all left.
    pub fn stop_router(&mut self, mut clock: impl FnMut() -> Instant) -> bool {
        let start = clock();
        let Some(state) = &mut self.router else {
            return true;
        };
        state.stopping = true;
        let gateway = state.mapper.gateway();
        // A UPnP exchange under way (a renewal) is dropped: the deletions take its socket.
        if state.exchange.take().is_some() {
            self.sockets.get_mut::<tcp::Socket>(state.tcp).abort();
        }
        let deletions = state.mapper.stop(start);
        let deletions6 = state.pinholes.stop();
        let soap = state.mapper.upnp_deletions_left();
        if let Some(gateway) = gateway {
            let to = IpEndpoint::new(
                IpAddress::Ipv4(Ipv4Address::from_octets(gateway)),
                natpmp::SERVER_PORT,
            );
            let socket = self.sockets.get_mut::<udp::Socket>(state.socket);
            for request in &deletions {
                if let Err(error) = socket.send_slice(request, to) {
                    log::warn!("router: a deletion not queued: {error}");
                }
            }
        }
        let socket6 = self.sockets.get_mut::<udp::Socket>(state.socket6);
        for request in &deletions6 {
            Self::send_pinhole_request(&state.pinholes, socket6, request);
        }
        if !deletions.is_empty() || soap > 0 {
            log::info!("router: deleting {} mapping(s)", deletions.len() + soap);
        }
        if !deletions6.is_empty() {
            log::info!("router: deleting {} IPv6 pinhole(s)", deletions6.len());
        }
        if deletions.is_empty() && deletions6.is_empty() && soap == 0 {
            return true;
        }
        loop {
            let now = clock();
            self.poll(now);
            let (ipv4, ipv6, device) = self.router_sending();
            let soap = self
                .router
                .as_ref()
                .map_or(0, |state| state.mapper.upnp_deletions_left());
            let waited = now.micros_since(start);
            if !ipv4 && !ipv6 && !device && soap == 0 {
                log::info!("router: deletions sent in {} ms", waited / 1000);
                return true;
            }
            if waited >= STOP_WAIT_MICROS {
                let family = match (ipv4, ipv6) {
                    (true, true) => "IPv4 and IPv6",
                    (true, false) => "IPv4",
                    (false, true) => "IPv6",
                    (false, false) if soap > 0 => "UPnP IGD",
                    (false, false) => "the last",
                };
                log::warn!(
                    "router: {family} deletions not sent after {} ms (no ARP or neighbor \
                     answer from the router); they run out with their lifetime",
                    waited / 1000
                );
                return false;
            }
        }
    }

    /// What is still on its way: datagrams queued on the IPv4 and the IPv6 socket (waiting
    /// for their next hop's ARP or neighbor entry), and whether the device is still sending
    /// the last frame.
    fn router_sending(&mut self) -> (bool, bool, bool) {
        let Some(state) = &self.router else {
            return (false, false, false);
        };
        let queued = |handle| self.sockets.get::<udp::Socket>(handle).send_queue() > 0;
        let (ipv4, ipv6) = (queued(state.socket), queued(state.socket6));
        (ipv4, ipv6, !self.phy.device_mut().can_transmit())
    }
}

/// Drops what `socket` holds once it has held it for [`STUCK_MICROS`] (`since`: from when):
/// smoltcp keeps a datagram whose next hop does not answer ARP or neighbor discovery queued
/// for ever, asking again every second, and its neighbor cache allows one such question per
/// second for everyone: a router that never answers for one family would keep the other
/// family's resolutions (and any other socket's) waiting. The clients send again on their own
/// schedule.
fn drop_stuck(socket: &mut udp::Socket<'_>, since: &mut Option<Instant>, now: Instant) {
    if socket.send_queue() == 0 {
        *since = None;
        return;
    }
    let since = *since.get_or_insert(now);
    if now.micros_since(since) >= STUCK_MICROS {
        log::debug!("router: a request whose next hop does not answer dropped");
        let endpoint = socket.endpoint();
        socket.close();
        // Cannot fail: the same port, on a socket just closed.
        let _ = socket.bind(endpoint);
    }
}
