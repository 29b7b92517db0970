//! How much heap TLS needs: the budget the board reserves for its TLS-only heap, derived from
//! the pool size and checked by a flood test (`tests/heap.rs`) with a counting allocator.
//!
//! All of the heap use is rustls's own state plus this crate's: per connection, the
//! handshake state and transcript (the ClientHello is bounded by the receive buffer, since
//! rustls joins a handshake message inside it), the record keys, and at most one record of
//! plaintext the application has not taken yet; and, for one connection at a time (the loop
//! serves them in turn), one sealed record being built. The configuration (certificate chain,
//! key, ticketer) is shared.

use crate::session::MAX_RECORD_LEN;

/// Heap one connection may hold between calls, at most: the handshake state, or an open
/// session's keys with plaintext the application has not taken yet (up to a record, plus
/// what sealing drained from a full receive buffer: see `TlsSession::receive`). Measured by
/// the flood test: about 1.2 KiB of state (TLS 1.3, ChaCha20-Poly1305) plus 16 KiB waiting.
pub const PER_CONNECTION_BYTES: usize = 40 * 1024;

/// Heap a suspended session holds (an idle keep-alive connection between requests: rustls's
/// keys and state, without buffers). Measured by `tests/heap.rs`: about 1.0 KiB with TLS
/// 1.3 or 1.2 (ChaCha20-Poly1305 or AES-GCM keys both ways and the resumption secret).
pub const PER_IDLE_BYTES: usize = 1536;

/// Heap one call may use on top of what connections hold (a sealed record being built, a
/// decrypted one being copied), and the shared configuration.
pub const SHARED_BYTES: usize = 4 * MAX_RECORD_LEN + 32 * 1024;

/// Allocator overhead and fragmentation allowance: a quarter on top.
const MARGIN_DIVISOR: usize = 4;

/// The heap to reserve for `connections` TLS connections.
pub const fn heap_bytes(connections: usize) -> usize {
    let need = connections * PER_CONNECTION_BYTES + SHARED_BYTES;
    need + need / MARGIN_DIVISOR
}

#[cfg(test)]
mod tests {
    #[test]
    fn budget_grows_with_the_pool() {
        assert!(super::heap_bytes(64) > super::heap_bytes(32));
        assert!(
            super::heap_bytes(32) < 4 << 20,
            "32 connections fit in 4 MiB"
        );
    }
}
