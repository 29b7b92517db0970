//! The home's public IPv4 address, one shared value: the router's port mapping
//! (NAT-PMP, PCP or UPnP IGD's external address) writes it, and whatever
//! publishes the address (dynamic DNS) reads it (the appliance's `public_address`) and acts
//! when [`PublicAddress::changes`] moves. Another source (an HTTPS echo service) may set it
//! too, through [`crate::Net::set_public_ipv4`].
//!
//! An address in a private range (RFC 1918), the shared address space of carrier-grade NAT
//! (100.64.0.0/10, RFC 6598) or another special range is kept and shown, but
//! [`PublicAddress::kind`] says so: such an address is not reachable from the internet, and
//! the router sits behind another NAT (double NAT, or the provider's CGNAT). Publishing it
//! in DNS would only point visitors at nothing.

use bramble_hal::Instant;
pub use bramble_proto::address_kind::AddressKind;

/// Who said what the public address is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PublicSource {
    /// NAT-PMP's external address reply (RFC 6886 §3.2).
    NatPmp,
    /// PCP's MAP response (RFC 6887 §11.4: the assigned external address).
    Pcp,
    /// UPnP IGD's GetExternalIPAddress.
    Upnp,
    /// An HTTPS echo service (what the address looks like from outside).
    Echo,
}

impl PublicSource {
    /// The protocol's name, for logs and the status page.
    pub fn name(self) -> &'static str {
        match self {
            PublicSource::NatPmp => "NAT-PMP",
            PublicSource::Pcp => "PCP",
            PublicSource::Upnp => "UPnP IGD",
            PublicSource::Echo => "echo",
        }
    }
}

/// The public IPv4 address as last learned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PublicAddress {
    /// The address (`None`: not learned, or lost).
    pub ipv4: Option<[u8; 4]>,
    /// Who said so.
    pub source: Option<PublicSource>,
    /// Counts every change of [`PublicAddress::ipv4`] since boot (0: never learned): a reader
    /// that keeps the count it last acted on acts once per change.
    pub changes: u32,
    /// When it was last confirmed (set again, changed or not).
    pub confirmed_at: Option<Instant>,
}

impl PublicAddress {
    /// What the address is (`None` while unknown).
    pub fn kind(&self) -> Option<AddressKind> {
        self.ipv4.map(AddressKind::of)
    }

    /// The address, only when it is a global one worth publishing.
    pub fn publishable(&self) -> Option<[u8; 4]> {
        self.ipv4
            .filter(|address| AddressKind::of(*address) == AddressKind::Public)
    }

    /// Records `address` from `source` at `now`; returns whether it changed.
    pub fn set(&mut self, address: Option<[u8; 4]>, source: PublicSource, now: Instant) -> bool {
        self.confirmed_at = Some(now);
        self.source = Some(source);
        if address == self.ipv4 {
            return false;
        }
        self.ipv4 = address;
        self.changes = self.changes.wrapping_add(1).max(1);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_told_apart() {
        assert_eq!(AddressKind::of([203, 0, 113, 7]), AddressKind::Public);
        assert_eq!(AddressKind::of([8, 8, 8, 8]), AddressKind::Public);
        assert_eq!(AddressKind::of([10, 1, 2, 3]), AddressKind::Private);
        assert_eq!(AddressKind::of([172, 16, 0, 1]), AddressKind::Private);
        assert_eq!(AddressKind::of([172, 31, 255, 1]), AddressKind::Private);
        assert_eq!(AddressKind::of([172, 32, 0, 1]), AddressKind::Public);
        assert_eq!(AddressKind::of([192, 168, 1, 1]), AddressKind::Private);
        assert_eq!(AddressKind::of([100, 64, 0, 1]), AddressKind::SharedCgnat);
        assert_eq!(
            AddressKind::of([100, 127, 255, 1]),
            AddressKind::SharedCgnat
        );
        assert_eq!(AddressKind::of([100, 128, 0, 1]), AddressKind::Public);
        assert_eq!(AddressKind::of([0, 0, 0, 0]), AddressKind::Special);
        assert_eq!(AddressKind::of([169, 254, 1, 1]), AddressKind::Special);
        assert_eq!(AddressKind::of([239, 255, 255, 250]), AddressKind::Special);
        assert!(AddressKind::Public.warning().is_none());
        assert!(
            AddressKind::SharedCgnat
                .warning()
                .unwrap()
                .contains("carrier-grade")
        );
    }

    #[test]
    fn changes_count_only_changes() {
        let mut public = PublicAddress::default();
        let now = Instant::from_micros(5);
        assert!(public.set(Some([203, 0, 113, 7]), PublicSource::NatPmp, now));
        assert!(!public.set(Some([203, 0, 113, 7]), PublicSource::NatPmp, now));
        assert_eq!(public.changes, 1);
        assert_eq!(public.publishable(), Some([203, 0, 113, 7]));
        assert!(public.set(Some([100, 64, 0, 9]), PublicSource::Pcp, now));
        assert_eq!(public.changes, 2);
        assert_eq!(public.publishable(), None);
        assert_eq!(public.kind(), Some(AddressKind::SharedCgnat));
    }
}
