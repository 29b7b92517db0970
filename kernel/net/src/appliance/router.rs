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
//! RAM: the sockets' buffers and the answer ([`RouterMemory`]) and the client's state (the
//! start-up line prints the sum), plus two socket slots.

use super::Appliance;
use super::public::{AddressKind, PublicSource};
use bramble_hal::{EthernetDevice, Instant};
use bramble_proto::portmap::{
    MAX_PORTS, PortMapper, PortRequest, Protocol, UpnpAction, natpmp, upnp,
};
use smoltcp::iface::SocketHandle;
use smoltcp::socket::{tcp, udp};
use smoltcp::wire::{IpAddress, IpEndpoint, Ipv4Address};

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
/// Datagrams queued for sending (a deletion per port on shutdown).
const TX_PACKETS: usize = MAX_PORTS + 1;
/// Bytes queued for sending: the deletions, or an SSDP search (130 bytes).
const TX_LEN: usize = 256;
const _: () = assert!(upnp::search_request().len() <= TX_LEN);
/// Datagrams taken per poll at most.
const RECEIVE_PER_POLL: usize = 8;

/// Memory for the port-mapping socket.
pub struct RouterMemory {
    rx_meta: [udp::PacketMetadata; RX_PACKETS],
    tx_meta: [udp::PacketMetadata; TX_PACKETS],
    rx: [u8; RX_PACKETS * RX_PACKET_LEN],
    tx: [u8; TX_LEN],
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
    socket: SocketHandle,
    tcp: SocketHandle,
    answer: &'a mut [u8],
    exchange: Option<Exchange>,
    local_port: u16,
    mapper: PortMapper,
    /// The last poll's instant (for the status page's seconds left).
    polled_at: Instant,
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
        if self.router.is_some() || self.sockets_free() < 2 {
            log::warn!("router: no socket slot left; ports are not mapped");
            return;
        }
        let RouterMemory {
            rx_meta,
            tx_meta,
            rx,
            tx,
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
        let socket = self.sockets.add(socket);
        let mut mapper = PortMapper::new(config.ports, config.lifetime, config.nonce);
        mapper.set_network(None, None, now);
        self.router = Some(RouterState {
            socket,
            tcp,
            answer: &mut answer[..],
            exchange: None,
            local_port: FIRST_LOCAL_PORT,
            mapper,
            polled_at: now,
        });
        log::info!(
            "router: will ask the gateway to forward {} port(s) (PCP, NAT-PMP, then UPnP IGD); \
             {} bytes of RAM",
            config.ports.len().min(MAX_PORTS),
            core::mem::size_of::<RouterMemory>()
                + core::mem::size_of::<RouterState<'_>>()
                + 2 * core::mem::size_of::<smoltcp::iface::SocketStorage<'_>>()
        );
    }

    /// Takes the gateway's datagrams, sends what the client asks, and passes the external
    /// address on.
    pub(super) fn poll_router(&mut self, now: Instant) {
        let Some(state) = &mut self.router else {
            return;
        };
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
        let socket = self.sockets.get_mut::<udp::Socket>(state.socket);
        for _ in 0..RECEIVE_PER_POLL {
            let Ok((bytes, meta)) = socket.recv() else {
                break;
            };
            let IpAddress::Ipv4(from) = meta.endpoint.addr else {
                continue;
            };
            state.mapper.receive(from.octets(), bytes, now);
        }
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
        state.mapper.next_deadline()
    }

    /// The port-mapping client, once started (for its report and counts).
    pub fn port_mapper(&self) -> Option<&PortMapper> {
        self.router.as_ref().map(|state| &state.mapper)
    }

    /// Asks the gateway again now (the `router again` console command).
    pub fn router_again(&mut self, now: Instant) {
        if let Some(state) = &mut self.router {
            state.mapper.again(now);
            log::info!("router: asking the gateway again");
        }
    }

    /// Deletes the mappings before a clean shutdown: queues one deletion per port and sends
    /// them out now (no answer is awaited: a lost one runs out with its lifetime).
    pub fn stop_router(&mut self, now: Instant) {
        let Some(state) = &mut self.router else {
            return;
        };
        let gateway = state.mapper.gateway();
        let deletions = state.mapper.stop();
        let socket = self.sockets.get_mut::<udp::Socket>(state.socket);
        if let Some(gateway) = gateway {
            let to = IpEndpoint::new(
                IpAddress::Ipv4(Ipv4Address::from_octets(gateway)),
                natpmp::SERVER_PORT,
            );
            for request in &deletions {
                let _ = socket.send_slice(request, to);
            }
        }
        if !deletions.is_empty() {
            log::info!("router: deleting {} mapping(s)", deletions.len());
            self.poll(now);
        }
    }
}
