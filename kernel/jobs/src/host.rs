//! The appliance's side, as the jobs need it: [`Host`].

use crate::ddns::DdnsState;
use crate::net::Net;
use alloc::string::String;
use alloc::sync::Arc;
use bramble_hal::Instant;
use bramble_http::Server;
use core::cell::RefCell;

/// The appliance, as the jobs need it. `bramble-net`'s `Appliance` implements it; a job's
/// `poll` takes it while the appliance holds the job out of its own state.
pub trait Host<'a> {
    /// The interface, the sockets and the addresses.
    fn net(&mut self) -> Net<'_, 'a>;
    /// The site's server (ACME's HTTP-01 answers, the redirect to HTTPS).
    fn server(&self) -> &'a RefCell<Server<'a>>;
    /// Dynamic DNS, when it runs (ACME's DNS-01 answers; the outside check follows its
    /// updates).
    fn ddns(&mut self) -> Option<&mut DdnsState<'a>>;
    /// Serves `config` (its certificate has `key`) over HTTPS on `port` from now on: replaces
    /// the configuration HTTPS runs with, or starts HTTPS in the memory kept for it.
    fn serve_https(
        &mut self,
        config: Arc<bramble_tls::ServerConfig>,
        key: bramble_tls::hello::CertificateKey,
        port: u16,
        now: Instant,
    ) -> Result<(), String>;
}
