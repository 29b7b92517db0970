//! Bramble's TLS server: rustls's unbuffered server (no_std + alloc) with a small RustCrypto
//! provider, adapted to the appliance's connection buffers.
//!
//! [`provider`] holds the crypto, [`random`] the CSPRNG that must be seeded from hardware
//! before any handshake, [`config`] the identity and rustls configuration, [`session`] one
//! connection over caller-owned buffers, [`clock`] the wall clock, [`tickets`] resumption.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod certificate;
pub mod client;
pub mod clock;
pub mod config;
pub mod health;
pub mod heap;
pub mod hello;
pub mod provider;
pub mod random;
pub mod reseed;
pub mod session;
pub mod tickets;

pub use config::{
    AlpnChallenge, ConfigError, Identity, IdentityError, SniPolicy, server_config,
    server_config_with_challenges,
};
pub use rustls::ServerConfig;
pub use session::{Application, Phase, SessionError, TlsSession};
