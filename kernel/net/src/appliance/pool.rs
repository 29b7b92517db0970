//! The HTTPS connection pool: a fixed set of smoltcp TCP sockets listening on one port, each
//! driving one connection (HTTP inside TLS, or plain HTTP: see [`PooledConnection`]), with
//! limits on how long a handshake or a close may hold a slot. (Plain HTTP is served by the
//! stream pool, [`crate::stream`]; TLS sessions keep their records in socket buffers, which
//! this pool gives them.)

use super::{ApplianceCounters, earliest};
use bramble_hal::Instant;
use bramble_http::{Connection, ConnectionAction, Server};
use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::tcp;

/// Most TCP sockets one appliance drives (a bound for the handle table, not a target).
pub const MAX_CONNECTIONS: usize = 256;
/// Longest a TCP handshake may hold a pool slot (SYN received, final ACK missing).
pub const HANDSHAKE_LIMIT_MICROS: u64 = 10_000_000;
/// Longest our close may take once asked (FIN acknowledged and the client's FIN received).
pub const CLOSE_LIMIT_MICROS: u64 = 30_000_000;
/// Receive/transmit alternations per connection per poll.
const PROGRESS_ROUNDS: usize = 8;

/// What one pool slot drives once its TCP connection is established: plain HTTP
/// ([`Connection`]) or HTTP inside TLS ([`super::secure::TlsConnection`]). The pool makes the
/// same calls, in the same order, for both; admission, eviction and deadlines are the pool's.
pub trait PooledConnection {
    /// What the pool's connections share (the TLS configuration and handshake budget).
    type Shared;
    /// Starts serving an established TCP connection, whose first bytes (`queued` of them
    /// wait in the socket) `peek` copies without taking them. Anything but
    /// [`Opening::Open`] leaves the connection to the pool, which asks again on later passes
    /// within [`HANDSHAKE_LIMIT_MICROS`]. `behind` says that an older connection waits for
    /// the handshake budget: a new one must not take it first.
    fn open(
        &mut self,
        shared: &mut Self::Shared,
        server: &mut Server<'_>,
        first_bytes: FirstBytes<'_>,
        now: Instant,
    ) -> Opening;
    /// Bytes from the peer; returns how many were taken.
    fn receive(
        &mut self,
        shared: &mut Self::Shared,
        server: &mut Server<'_>,
        data: &[u8],
        now: Instant,
    ) -> usize;
    /// Fills `out` with bytes for the peer; returns how many.
    fn transmit(
        &mut self,
        shared: &mut Self::Shared,
        server: &mut Server<'_>,
        out: &mut [u8],
        now: Instant,
    ) -> usize;
    /// Who the client is (after `open`), for the access log.
    fn set_peer(&mut self, peer: core::net::IpAddr);
    /// Keep, close after the queued bytes, or reset.
    fn action(&self, now: Instant) -> ConnectionAction;
    /// The connection's next deadline.
    fn next_deadline(&self) -> Option<Instant>;
    /// Ends the connection (the TCP connection has closed).
    fn close(&mut self, shared: &mut Self::Shared, server: &mut Server<'_>);
    /// Whether a response is being handed out (the site image must not change under it).
    fn is_responding(&self) -> bool;
    /// When deferred connections may be opened again, if some are waiting.
    fn shared_deadline(_shared: &Self::Shared, _now: Instant) -> Option<Instant> {
        None
    }
    /// The pool reset a connection that was not opened in time, having last said `waited`.
    fn gave_up(_shared: &mut Self::Shared, _waited: Opening) {}
    /// The TCP connection `open` was shown is gone before it opened: forget what was read
    /// of it.
    fn not_opened(&mut self) {}
}

/// What [`PooledConnection::open`] sees of a new connection.
pub struct FirstBytes<'s> {
    /// Bytes waiting in the socket.
    pub queued: usize,
    /// Copies the first waiting bytes into a buffer, leaving them in the socket; returns
    /// how many.
    pub peek: &'s mut dyn FnMut(&mut [u8]) -> usize,
    /// The peer has sent its FIN: no more bytes will come.
    pub finished: bool,
    /// The socket's receive buffer is full: no more bytes fit until some are taken.
    pub full: bool,
    /// An older connection waits for the shared budget.
    pub behind: bool,
}

/// What [`PooledConnection::open`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opening {
    /// Serve it from this pass on.
    Open,
    /// Its first message is not all in yet (a TLS ClientHello).
    WaitForBytes,
    /// The shared budget is spent (TLS handshakes): it waits its turn, oldest first.
    Deferred,
    /// Not to be served (not a TLS client on the TLS port): reset.
    Refuse,
}

impl PooledConnection for Connection {
    type Shared = ();
    fn open(
        &mut self,
        _: &mut (),
        server: &mut Server<'_>,
        _: FirstBytes<'_>,
        now: Instant,
    ) -> Opening {
        Connection::open(self, server, now);
        Opening::Open
    }
    fn receive(&mut self, _: &mut (), server: &mut Server<'_>, data: &[u8], now: Instant) -> usize {
        Connection::receive(self, server, data, now)
    }
    fn transmit(
        &mut self,
        _: &mut (),
        server: &mut Server<'_>,
        out: &mut [u8],
        now: Instant,
    ) -> usize {
        Connection::transmit(self, server, out, now)
    }
    fn set_peer(&mut self, peer: core::net::IpAddr) {
        Connection::set_peer(self, peer)
    }
    fn action(&self, now: Instant) -> ConnectionAction {
        Connection::action(self, now)
    }
    fn next_deadline(&self) -> Option<Instant> {
        Connection::next_deadline(self)
    }
    fn close(&mut self, _: &mut (), server: &mut Server<'_>) {
        Connection::close(self, server)
    }
    fn is_responding(&self) -> bool {
        Connection::is_responding(self)
    }
}

/// One TCP socket of the pool and whether its HTTP connection is open.
#[derive(Clone, Copy)]
pub(super) struct PoolSlot {
    pub(super) handle: SocketHandle,
    /// `Connection::open` was called for the current TCP connection.
    pub(super) open: bool,
    /// `close()` (FIN) has been asked of the socket.
    pub(super) closing: bool,
    /// When the slot entered a phase that must end within a limit: the TCP handshake
    /// (SYN-RECEIVED) or our close.
    pub(super) since: Option<Instant>,
    /// When `open` first deferred the established connection (the TLS handshake budget was
    /// spent); it must open within [`HANDSHAKE_LIMIT_MICROS`] of this, and the longest
    /// waiting opens first.
    pub(super) deferred_since: Option<Instant>,
    /// When the established connection was first found without its whole first message (a
    /// ClientHello); it must come within [`HANDSHAKE_LIMIT_MICROS`] (a slow ClientHello, or
    /// none at all, holds no slot for longer).
    pub(super) waiting_since: Option<Instant>,
    /// This slot reset its connection before opening it: it listens again only once the
    /// RST has gone out (listening forgets the peer, and smoltcp sends the RST only to a
    /// peer it knows).
    pub(super) reset_pending: bool,
}

/// The TCP sockets on one port (in the appliance's socket set) and the connection each one
/// drives, slot for slot.
pub(super) struct ConnectionPool<'a, C: PooledConnection = Connection> {
    pub(super) slots: heapless::Vec<PoolSlot, MAX_CONNECTIONS>,
    connections: &'a mut [C],
    shared: C::Shared,
    port: u16,
}

impl<'a, C: PooledConnection> ConnectionPool<'a, C> {
    /// Adds `size` TCP sockets listening on `port` to `sockets`, each with `rx_len` +
    /// `tx_len` bytes cut from `buffers`, and pairs them with the first `size` connections.
    /// The caller has checked that the memory holds `size` of each (`pool_size`).
    pub(super) fn new(
        sockets: &mut SocketSet<'a>,
        connections: &'a mut [C],
        shared: C::Shared,
        buffers: &'a mut [u8],
        (rx_len, tx_len): (usize, usize),
        size: usize,
        port: u16,
    ) -> Self {
        let mut slots = heapless::Vec::new();
        let mut rest = buffers;
        for _ in 0..size {
            let (rx, tail) = rest.split_at_mut(rx_len);
            let (tx, tail) = tail.split_at_mut(tx_len);
            rest = tail;
            let mut socket =
                tcp::Socket::new(tcp::SocketBuffer::new(rx), tcp::SocketBuffer::new(tx));
            // Whole answers go into the send buffer at once; Nagle's algorithm would only
            // hold back each answer's last partial segment until the client's delayed ACK
            // (40 ms on Linux: the page's p99 in the hosted benchmark).
            socket.set_nagle_enabled(false);
            // Cannot fail: the port is not zero and the socket is new.
            let _ = socket.listen(port);
            let handle = sockets.add(socket);
            // Cannot fail: size <= MAX_CONNECTIONS.
            let _ = slots.push(PoolSlot {
                handle,
                open: false,
                closing: false,
                since: None,
                deferred_since: None,
                waiting_since: None,
                reset_pending: false,
            });
        }
        Self {
            slots,
            connections: &mut connections[..size],
            shared,
            port,
        }
    }

    /// What the connections share.
    pub(super) fn shared(&self) -> &C::Shared {
        &self.shared
    }

    /// What the connections share, to change it.
    pub(super) fn shared_mut(&mut self) -> &mut C::Shared {
        &mut self.shared
    }

    /// The TCP port the pool listens on.
    pub(super) fn port(&self) -> u16 {
        self.port
    }

    /// Number of HTTP connections open now.
    pub(super) fn open_count(&self) -> usize {
        self.slots.iter().filter(|slot| slot.open).count()
    }

    /// Number of sockets listening for a new connection.
    pub(super) fn listening(&self, sockets: &SocketSet<'a>) -> usize {
        self.slots
            .iter()
            .filter(|slot| sockets.get::<tcp::Socket>(slot.handle).is_listening())
            .count()
    }

    /// Moves every slot on: opens connections whose handshake completed, moves request and
    /// response bytes, follows each connection's wish (keep, close, abort), enforces the
    /// handshake and close limits, and puts finished sockets back to listening.
    pub(super) fn poll(
        &mut self,
        sockets: &mut SocketSet<'a>,
        server: &mut Server<'a>,
        counters: &mut ApplianceCounters,
        now: Instant,
    ) {
        let behind = self.open_deferred(sockets, server, counters, now);
        let port = self.port;
        let shared = &mut self.shared;
        for (slot, connection) in self.slots.iter_mut().zip(self.connections.iter_mut()) {
            let socket = sockets.get_mut::<tcp::Socket>(slot.handle);
            if !slot.open
                && !slot.admit(
                    socket, connection, shared, server, counters, port, behind, now,
                )
            {
                continue;
            }
            let wrote = exchange(socket, connection, shared, server, now);
            // Set when this pass aborts the socket: smoltcp sends the RST on the next
            // interface poll, but only if the socket still knows its peer, so it must not be
            // put back to listening (which forgets the peer) until the next pass.
            let mut aborted = slot.follow(connection.action(now), socket, wrote, counters, now);
            aborted |= slot.enforce_close_limit(socket, counters, now);
            slot.recycle_if_closed(socket, connection, shared, server, aborted, port);
        }
    }

    /// Opens the connections that `open` deferred (the TLS handshake budget), the longest
    /// waiting first, until one is deferred again; only then do new connections get what is
    /// left of the budget (in [`ConnectionPool::poll`]'s walk, in slot order). Without this a
    /// waiting connection in a high slot lost every token to newer ones in lower slots (new
    /// connections take the lowest listening socket) and could be reset at the handshake
    /// limit while the budget was being spent on clients that came after it. Returns whether
    /// one is still waiting (then no newer connection may take the budget in this pass: with
    /// handshakes priced by their cost, a cheap newcomer would otherwise pass a dear one for
    /// ever).
    fn open_deferred(
        &mut self,
        sockets: &mut SocketSet<'a>,
        server: &mut Server<'a>,
        counters: &mut ApplianceCounters,
        now: Instant,
    ) -> bool {
        let port = self.port;
        // Each turn opens one connection or ends a wait (a reset client, the limit) or
        // stops: at most one turn per slot.
        for _ in 0..self.slots.len() {
            let oldest = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, slot)| !slot.open)
                .filter_map(|(index, slot)| slot.deferred_since.map(|since| (since, index)))
                .min();
            let Some((_, index)) = oldest else {
                return false;
            };
            let (Some(slot), Some(connection)) =
                (self.slots.get_mut(index), self.connections.get_mut(index))
            else {
                return false;
            };
            let socket = sockets.get_mut::<tcp::Socket>(slot.handle);
            let opened = slot.admit(
                socket,
                connection,
                &mut self.shared,
                server,
                counters,
                port,
                false,
                now,
            );
            if !opened && slot.deferred_since.is_some() {
                // Deferred again: the budget is spent for this pass.
                return true;
            }
        }
        false
    }

    /// The earliest of the open connections' deadlines and the handshake and close limits.
    pub(super) fn next_deadline(&self, now: Instant) -> Option<Instant> {
        let mut next = C::shared_deadline(&self.shared, now);
        for (slot, connection) in self.slots.iter().zip(self.connections.iter()) {
            if slot.open {
                next = earliest(next, connection.next_deadline());
            }
            if let Some(since) = slot.since {
                let limit = if slot.closing {
                    CLOSE_LIMIT_MICROS
                } else {
                    HANDSHAKE_LIMIT_MICROS
                };
                next = earliest(next, Some(since.add_micros(limit)));
            }
            for since in [slot.deferred_since, slot.waiting_since]
                .into_iter()
                .flatten()
            {
                next = earliest(next, Some(since.add_micros(HANDSHAKE_LIMIT_MICROS)));
            }
        }
        next
    }
}

impl PoolSlot {
    /// For a slot with no open connection: opens one for a socket whose handshake is done
    /// (true: serve it in this pass), or keeps the slot listening and its handshake within
    /// [`HANDSHAKE_LIMIT_MICROS`] (false).
    #[allow(clippy::too_many_arguments)] // the pool's parts, each borrowed separately
    fn admit<C: PooledConnection>(
        &mut self,
        socket: &mut tcp::Socket<'_>,
        connection: &mut C,
        shared: &mut C::Shared,
        server: &mut Server<'_>,
        counters: &mut ApplianceCounters,
        port: u16,
        behind: bool,
        now: Instant,
    ) -> bool {
        match socket.state() {
            // CLOSE-WAIT: the client sent its request and its FIN before we looked; the
            // request is still in the buffer and gets its answer.
            tcp::State::Established | tcp::State::CloseWait => {
                // The TCP handshake's clock stops here; waiting has clocks of its own.
                self.since = None;
                let queued = socket.recv_queue();
                let finished = !socket.may_recv();
                let full = queued >= socket.recv_capacity();
                let opening = connection.open(
                    shared,
                    server,
                    FirstBytes {
                        queued,
                        peek: &mut |buffer| socket.peek_slice(buffer).unwrap_or(0),
                        finished,
                        full,
                        behind,
                    },
                    now,
                );
                let clock = match opening {
                    Opening::Open => None,
                    Opening::Refuse => {
                        socket.abort();
                        self.reset_pending = true;
                        connection.not_opened();
                        self.deferred_since = None;
                        self.waiting_since = None;
                        counters.connections_aborted += 1;
                        return false;
                    }
                    // The first message waits in the socket, within the same limit as a
                    // handshake; so does a message the budget defers.
                    Opening::Deferred => {
                        self.waiting_since = None;
                        Some(&mut self.deferred_since)
                    }
                    Opening::WaitForBytes => Some(&mut self.waiting_since),
                };
                if let Some(clock) = clock {
                    let since = *clock.get_or_insert(now);
                    // A peer that finished sending without a whole first message never will.
                    let hopeless = opening == Opening::WaitForBytes && finished;
                    if hopeless || now.micros_since(since) >= HANDSHAKE_LIMIT_MICROS {
                        socket.abort();
                        self.reset_pending = true;
                        connection.not_opened();
                        self.deferred_since = None;
                        self.waiting_since = None;
                        counters.handshakes_abandoned += 1;
                        C::gave_up(shared, opening);
                    }
                    return false;
                }
                self.open = true;
                self.closing = false;
                self.deferred_since = None;
                self.waiting_since = None;
                counters.connections_opened += 1;
                if let Some(peer) = socket.remote_endpoint() {
                    let address = core::net::IpAddr::from(peer.addr);
                    counters.ipv6_connections_opened += u64::from(address.is_ipv6());
                    connection.set_peer(address);
                }
                true
            }
            tcp::State::SynReceived => {
                // A handshake that never completes (a lost ACK, a SYN flood) must not hold
                // the slot: give it HANDSHAKE_LIMIT_MICROS.
                let since = *self.since.get_or_insert(now);
                if now.micros_since(since) >= HANDSHAKE_LIMIT_MICROS {
                    socket.abort();
                    self.reset_pending = true;
                    self.since = None;
                    counters.handshakes_abandoned += 1;
                }
                false
            }
            _ => {
                if self.deferred_since.is_some() || self.waiting_since.is_some() {
                    // The client left while its connection waited.
                    connection.not_opened();
                }
                self.since = None;
                self.deferred_since = None;
                self.waiting_since = None;
                if core::mem::take(&mut self.reset_pending) {
                    // The RST goes out in the interface pass after this one.
                    return false;
                }
                if !socket.is_open() {
                    // Cannot fail: the port is not zero and the socket is not open.
                    let _ = socket.listen(port);
                }
                false
            }
        }
    }

    /// Does what the connection asks once this pass's bytes have moved (`wrote` of them
    /// into the socket): close our half when the exchange is over, FIN after the queued
    /// bytes, or reset. Returns whether it aborted the socket.
    fn follow(
        &mut self,
        action: ConnectionAction,
        socket: &mut tcp::Socket<'_>,
        wrote: usize,
        counters: &mut ApplianceCounters,
        now: Instant,
    ) -> bool {
        match action {
            ConnectionAction::KeepOpen => {
                // The client finished sending and nothing more is queued for it: the
                // exchange is over, so close our half too.
                if !socket.may_recv() && wrote == 0 && socket.send_queue() == 0 && !self.closing {
                    socket.close();
                    self.closing = true;
                    self.since = Some(now);
                }
                false
            }
            ConnectionAction::CloseWhenFlushed => {
                if !self.closing {
                    // FIN goes after whatever is still queued.
                    socket.close();
                    self.closing = true;
                    self.since = Some(now);
                }
                false
            }
            ConnectionAction::Abort => {
                socket.abort();
                counters.connections_aborted += 1;
                true
            }
        }
    }

    /// A client that vanished while we close (never acknowledges our FIN, or never sends
    /// its own) would hold the slot for ever: cuts it off after [`CLOSE_LIMIT_MICROS`].
    /// Returns whether it aborted the socket.
    fn enforce_close_limit(
        &mut self,
        socket: &mut tcp::Socket<'_>,
        counters: &mut ApplianceCounters,
        now: Instant,
    ) -> bool {
        if self.closing
            && self
                .since
                .is_some_and(|since| now.micros_since(since) >= CLOSE_LIMIT_MICROS)
            && !matches!(socket.state(), tcp::State::Closed | tcp::State::TimeWait)
        {
            socket.abort();
            counters.closes_abandoned += 1;
            return true;
        }
        false
    }

    /// Once the socket has closed, ends the HTTP connection and frees the slot for the next
    /// client. (TIME-WAIT protection is given up for the slot; the client's port differs
    /// anyway.) After an abort in this pass (`aborted`), listening waits one pass, for the
    /// RST to go out first.
    fn recycle_if_closed<C: PooledConnection>(
        &mut self,
        socket: &mut tcp::Socket<'_>,
        connection: &mut C,
        shared: &mut C::Shared,
        server: &mut Server<'_>,
        aborted: bool,
        port: u16,
    ) {
        if matches!(socket.state(), tcp::State::Closed | tcp::State::TimeWait) {
            connection.close(shared, server);
            self.open = false;
            self.closing = false;
            self.since = None;
            if !aborted {
                let _ = socket.listen(port);
            }
        }
    }
}

/// Alternates between request bytes in and response bytes out until neither moves: sending
/// a response can make room for the next pipelined request, and reading a request can
/// produce the next response. Bounded by [`PROGRESS_ROUNDS`], so one connection cannot hold
/// the loop. Returns the response bytes written into the socket.
fn exchange<C: PooledConnection>(
    socket: &mut tcp::Socket<'_>,
    connection: &mut C,
    shared: &mut C::Shared,
    server: &mut Server<'_>,
    now: Instant,
) -> usize {
    let mut wrote = 0;
    for _ in 0..PROGRESS_ROUNDS {
        let mut moved = 0;
        while socket.can_recv() {
            let consumed = socket
                .recv(|data| {
                    let n = connection
                        .receive(shared, server, data, now)
                        .min(data.len());
                    (n, n)
                })
                .unwrap_or(0);
            moved += consumed;
            if consumed == 0 {
                break;
            }
        }
        // Response bytes go straight into the socket's transmit buffer.
        while socket.can_send() {
            let n = socket
                .send(|buffer| {
                    let n = connection
                        .transmit(shared, server, buffer, now)
                        .min(buffer.len());
                    (n, n)
                })
                .unwrap_or(0);
            wrote += n;
            moved += n;
            if n == 0 {
                break;
            }
        }
        if moved == 0 {
            break;
        }
    }
    wrote
}
