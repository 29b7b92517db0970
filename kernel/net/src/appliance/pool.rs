//! The connection pool: a fixed set of TCP sockets listening on the HTTP port, each driving
//! one HTTP connection, with limits on how long a handshake or a close may hold a slot.

use super::Appliance;
use bramble_hal::{EthernetDevice, Instant};
use bramble_http::ConnectionAction;
use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp;

/// Most TCP sockets one appliance drives (a bound for the handle table, not a target).
pub const MAX_CONNECTIONS: usize = 256;
/// Longest a TCP handshake may hold a pool slot (SYN received, final ACK missing).
pub const HANDSHAKE_LIMIT_MICROS: u64 = 10_000_000;
/// Longest our close may take once asked (FIN acknowledged and the client's FIN received).
pub const CLOSE_LIMIT_MICROS: u64 = 30_000_000;
/// Receive/transmit alternations per connection per poll.
const PROGRESS_ROUNDS: usize = 8;

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
}

impl<'a, D: EthernetDevice> Appliance<'a, D> {
    pub(super) fn poll_connections(&mut self, now: Instant) {
        let port = self.http_port;
        for (slot, connection) in self.pool.iter_mut().zip(self.connections.iter_mut()) {
            let socket = self.sockets.get_mut::<tcp::Socket>(slot.handle);
            if !slot.open {
                match socket.state() {
                    // CLOSE-WAIT: the client sent its request and its FIN before we looked;
                    // the request is still in the buffer and gets its answer.
                    tcp::State::Established | tcp::State::CloseWait => {
                        connection.open(&mut self.server, now);
                        slot.open = true;
                        slot.closing = false;
                        slot.since = None;
                        self.counters.connections_opened += 1;
                    }
                    tcp::State::SynReceived => {
                        // A handshake that never completes (a lost ACK, a SYN flood) must
                        // not hold the slot: give it HANDSHAKE_LIMIT_MICROS.
                        let since = *slot.since.get_or_insert(now);
                        if now.micros_since(since) >= HANDSHAKE_LIMIT_MICROS {
                            socket.abort();
                            slot.since = None;
                            self.counters.handshakes_abandoned += 1;
                        }
                        continue;
                    }
                    _ => {
                        slot.since = None;
                        if !socket.is_open() {
                            // Cannot fail: the port is not zero and the socket is not open.
                            let _ = socket.listen(port);
                        }
                        continue;
                    }
                }
            }
            // Alternate between request bytes in and response bytes out until neither moves:
            // sending a response can make room for the next pipelined request, and reading
            // a request can produce the next response. Bounded, so one connection cannot
            // hold the loop.
            let mut wrote = 0;
            // Set when this pass aborts the socket: smoltcp sends the RST on the next
            // interface poll, but only if the socket still knows its peer, so it must not be
            // put back to listening (which forgets the peer) until the next pass.
            let mut aborted = false;
            for _ in 0..PROGRESS_ROUNDS {
                let mut moved = 0;
                while socket.can_recv() {
                    let consumed = socket
                        .recv(|data| {
                            let n = connection
                                .receive(&mut self.server, data, now)
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
                                .transmit(&mut self.server, buffer, now)
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
            match connection.action(now) {
                ConnectionAction::KeepOpen => {
                    // The client finished sending and nothing more is queued for it: the
                    // exchange is over, so close our half too.
                    if !socket.may_recv() && wrote == 0 && socket.send_queue() == 0 && !slot.closing
                    {
                        socket.close();
                        slot.closing = true;
                        slot.since = Some(now);
                    }
                }
                ConnectionAction::CloseWhenFlushed => {
                    if !slot.closing {
                        // FIN goes after whatever is still queued.
                        socket.close();
                        slot.closing = true;
                        slot.since = Some(now);
                    }
                }
                ConnectionAction::Abort => {
                    socket.abort();
                    aborted = true;
                    self.counters.connections_aborted += 1;
                }
            }
            // A client that vanished while we close (never acknowledges our FIN, or never
            // sends its own) would hold the slot for ever: cut it off after CLOSE_LIMIT.
            if slot.closing
                && slot
                    .since
                    .is_some_and(|since| now.micros_since(since) >= CLOSE_LIMIT_MICROS)
                && !matches!(socket.state(), tcp::State::Closed | tcp::State::TimeWait)
            {
                socket.abort();
                aborted = true;
                self.counters.closes_abandoned += 1;
            }
            if matches!(socket.state(), tcp::State::Closed | tcp::State::TimeWait) {
                connection.close(&mut self.server);
                slot.open = false;
                slot.closing = false;
                slot.since = None;
                // Back to listening: the pool slot serves the next client. (TIME-WAIT
                // protection is given up for the slot; the client's port differs anyway.)
                // After an abort this waits one pass, for the RST to go out first.
                if !aborted {
                    let _ = socket.listen(port);
                }
            }
        }
    }
}
