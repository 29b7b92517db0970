//! The appliance's side of the outbound jobs of `bramble-jobs` (ACME, RFC 2136 dynamic DNS,
//! the echo, dyndns2 and outside check): it is their [`Host`], and starts, polls and reports
//! them for its callers (`start_acme`, `acme_status`, and so on), so that the board and the
//! hosted build drive them through the appliance as before. The jobs themselves, and why
//! they go through a trait, are in `kernel/jobs/src/lib.rs`.

use super::Appliance;
use super::acme::{AcmeAgent, AcmeConfig, AcmeMemory, AcmeStatus};
use super::ddns::{DdnsConfig, DdnsMemory, DdnsState, DdnsStatus};
use super::memory::HttpsMemory;
use super::public::{PublicAddress, PublicSource};
use super::reach::{ReachConfig, ReachMemory, ReachState, ReachStatus, UpdateState};
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use bramble_acme::store::BlockStore;
use bramble_hal::{EthernetDevice, Instant};
use bramble_http::Server;
use bramble_jobs::{Host, Net};
use core::cell::RefCell;

impl<'a, D: EthernetDevice> Host<'a> for Appliance<'a, D> {
    fn net(&mut self) -> Net<'_, 'a> {
        Net {
            iface: &mut self.iface,
            sockets: &mut self.sockets,
            dhcp_dns_servers: &self.address.dhcp_dns_servers,
            ipv6: self.ipv6.as_ref().map(|state| &state.config),
            public: &mut self.public,
            mac: self.mac,
        }
    }

    fn server(&self) -> &'a RefCell<Server<'a>> {
        self.server
    }

    fn ddns(&mut self) -> Option<&mut DdnsState<'a>> {
        self.ddns.as_mut()
    }

    fn serve_https(
        &mut self,
        config: Arc<bramble_tls::ServerConfig>,
        key: bramble_tls::hello::CertificateKey,
        port: u16,
        now: Instant,
    ) -> Result<(), String> {
        if self.replace_https_config(config.clone(), key) {
            return Ok(());
        }
        let memory = self
            .acme_https_memory
            .take()
            .ok_or_else(|| String::from("no memory for HTTPS"))?;
        self.start_https(config, key, memory, port, now)
            .map_err(|problem| format!("{problem}"))?;
        Ok(())
    }
}

impl<'a, D: EthernetDevice> Appliance<'a, D> {
    /// Starts ACME ([`AcmeAgent::start`]): loads the store (serving its certificate at once
    /// if it is for these names), and orders one when there is none or it is due.
    /// `https_memory` is what HTTPS starts in once a certificate is in hand (unless HTTPS
    /// already runs). Needs two free socket slots and a seeded CSPRNG.
    pub fn start_acme(
        &mut self,
        config: AcmeConfig<'a>,
        store: &'a mut dyn BlockStore,
        memory: &'a mut AcmeMemory,
        https_memory: Option<&'a mut HttpsMemory<'a>>,
        now: Instant,
    ) -> Result<(), &'static str> {
        if self.acme.is_some() {
            return Err("ACME is already running");
        }
        if self.sockets_free() < 2 {
            return Err("no socket slots left for ACME");
        }
        self.acme_https_memory = https_memory;
        let agent = AcmeAgent::start(self, config, store, memory, now)?;
        self.acme = Some(agent);
        Ok(())
    }

    /// ACME's state, once started.
    pub fn acme_status(&self, now: Instant) -> Option<AcmeStatus> {
        self.acme.as_ref().map(|agent| agent.status(now))
    }

    /// Moves ACME on (called with the other sockets' work).
    pub(super) fn poll_acme(&mut self, now: Instant) {
        let Some(mut agent) = self.acme.take() else {
            return;
        };
        agent.poll(self, now);
        self.acme = Some(agent);
    }

    /// When ACME next needs a poll.
    pub(super) fn acme_deadline(&self, now: Instant) -> Option<Instant> {
        self.acme.as_ref()?.deadline(now)
    }

    /// Starts keeping `config.name`'s records on the addresses ([`DdnsState`]), in `memory`
    /// and one of the kept-back socket slots. Can be called once.
    pub fn start_ddns(
        &mut self,
        config: DdnsConfig<'a>,
        memory: &'a mut DdnsMemory,
        now: Instant,
    ) -> Result<(), &'static str> {
        if self.ddns.is_some() {
            return Err("dynamic DNS is already running");
        }
        if self.sockets_free() < 1 {
            return Err("no socket slot left for dynamic DNS");
        }
        self.ddns = Some(DdnsState::new(config, memory, &mut self.sockets, now));
        Ok(())
    }

    /// Dynamic DNS's state, once started.
    pub fn ddns_status(&self) -> Option<DdnsStatus> {
        self.ddns.as_ref().map(DdnsState::status)
    }

    /// Moves dynamic DNS on (called with the other sockets' work).
    pub(super) fn poll_ddns(&mut self, now: Instant) {
        let Some(mut state) = self.ddns.take() else {
            return;
        };
        state.poll(&mut self.net(), now);
        self.ddns = Some(state);
    }

    /// When dynamic DNS next needs a poll.
    pub(super) fn ddns_deadline(&self, now: Instant) -> Option<Instant> {
        self.ddns.as_ref()?.deadline(now)
    }

    /// Starts the echo, dyndns2 and outside-check agent ([`ReachState`]) in `memory` and two
    /// kept-back socket slots (TCP and DNS). Can be called once.
    pub fn start_reach(
        &mut self,
        config: ReachConfig<'a>,
        memory: &'a mut ReachMemory,
        now: Instant,
    ) -> Result<(), &'static str> {
        if self.reach.is_some() {
            return Err("already running");
        }
        if self.sockets_free() < 2 {
            return Err("no socket slots left");
        }
        self.reach = Some(ReachState::new(config, memory, &mut self.sockets, now)?);
        Ok(())
    }

    /// The agent's state, once started.
    pub fn reach_status(&self, now: Instant) -> Option<ReachStatus> {
        Some(self.reach.as_ref()?.status(now))
    }

    /// The public address, dyndns2 and the check in short, for the status page.
    pub(super) fn reach_summary(&self, now: Instant) -> Option<bramble_http::status::ReachSummary> {
        let status = self.reach_status(now)?;
        Some(bramble_http::status::ReachSummary {
            public: self.public.ipv4,
            source: self.public.source.map_or("", |source| source.name()),
            dyndns: status.update.map_or("", UpdateState::short),
            updates: status.updates,
            check: status.check.word(),
        })
    }

    /// Moves the request under way on, or starts the next one due.
    pub(super) fn poll_reach(&mut self, now: Instant) {
        let Some(mut state) = self.reach.take() else {
            return;
        };
        state.poll(self, now);
        self.reach = Some(state);
    }

    /// When the agent next needs a poll.
    pub(super) fn reach_deadline(&self, now: Instant) -> Option<Instant> {
        self.reach.as_ref()?.deadline(now)
    }

    /// The public IPv4 address as last learned (from the router, or set by
    /// [`Appliance::set_public_ipv4`]).
    pub fn public_address(&self) -> PublicAddress {
        self.public
    }

    /// Records the public IPv4 address learned by `source` (another than the router's port
    /// mapping, which records its own); returns whether it changed. Logs a change, with the
    /// plain NAT warning when the address is not a global one.
    pub fn set_public_ipv4(
        &mut self,
        address: Option<[u8; 4]>,
        source: PublicSource,
        now: Instant,
    ) -> bool {
        self.net().set_public_ipv4(address, source, now)
    }
}
