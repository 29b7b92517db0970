//! Checked views of the two Neighbor Discovery messages (RFC 4861) that address configuration
//! reads: the Router Advertisement (its prefixes, RFC 4862, and name servers, RFC 8106) and
//! the Neighbor Advertisement (the answer that tells duplicate address detection an address
//! is taken).
//!
//! The bytes are an ICMPv6 message whose checksum the caller has verified; everything in
//! them is still untrusted. [`RouterAdvert::parse`] checks the fixed part and the length of
//! every option once (RFC 4861 §6.1.2: an option of length zero, or one that runs past the
//! end, voids the whole message); the accessors after it cannot fail and skip options whose
//! own length is wrong for their type. Nothing here allocates; every offset is checked
//! against the slice (`get`), so a 32-bit `usize` cannot wrap.

/// ICMPv6 type of a Router Solicitation.
pub const ROUTER_SOLICIT: u8 = 133;
/// ICMPv6 type of a Router Advertisement.
pub const ROUTER_ADVERT: u8 = 134;
/// ICMPv6 type of a Neighbor Solicitation.
pub const NEIGHBOR_SOLICIT: u8 = 135;
/// ICMPv6 type of a Neighbor Advertisement.
pub const NEIGHBOR_ADVERT: u8 = 136;
/// Option type: Prefix Information (RFC 4861 §4.6.2).
const OPTION_PREFIX: u8 = 3;
/// Option type: MTU (RFC 4861 §4.6.4).
const OPTION_MTU: u8 = 5;
/// Option type: Recursive DNS Server (RFC 8106 §5.1).
const OPTION_RDNSS: u8 = 25;
/// Bytes of a Router Advertisement before its options.
const ROUTER_ADVERT_LEN: usize = 16;
/// Bytes of a Neighbor Advertisement before its options.
const NEIGHBOR_ADVERT_LEN: usize = 24;
/// A lifetime field of all ones: infinity (RFC 4861 §4.6.2, RFC 8106 §5.1).
pub const INFINITE_LIFETIME: u32 = u32::MAX;

/// Why a message was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NdpError {
    /// Shorter than its fixed part, or an option runs past the end.
    Truncated,
    /// Not the message type asked for, or a code other than 0.
    WrongType,
    /// An option of length zero (RFC 4861 §4.6: the message must be discarded).
    ZeroLengthOption,
    /// A Neighbor Advertisement for a multicast target (RFC 4861 §7.1.2).
    MulticastTarget,
}

/// A Router Advertisement (RFC 4861 §4.2) whose options have been walked once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouterAdvert<'a> {
    /// Cur Hop Limit the router suggests (0: unspecified).
    pub hop_limit: u8,
    /// The M flag: addresses are available from DHCPv6.
    pub managed: bool,
    /// The O flag: other configuration is available from DHCPv6.
    pub other: bool,
    /// How long the router may be the default router, seconds (0: it is not one).
    pub router_lifetime: u16,
    options: &'a [u8],
}

/// One Prefix Information option (RFC 4861 §4.6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefixInfo {
    /// Significant bits of `prefix`, 0-128 as sent (the caller judges it).
    pub prefix_len: u8,
    /// The L flag: the prefix is on this link.
    pub on_link: bool,
    /// The A flag: addresses may be formed from the prefix (SLAAC).
    pub autonomous: bool,
    /// Valid lifetime, seconds ([`INFINITE_LIFETIME`]: forever).
    pub valid_lifetime: u32,
    /// Preferred lifetime, seconds ([`INFINITE_LIFETIME`]: forever).
    pub preferred_lifetime: u32,
    /// The prefix (bits past `prefix_len` as sent, not cleared).
    pub prefix: [u8; 16],
}

/// One Recursive DNS Server option (RFC 8106 §5.1): up to its lifetime, the servers it lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DnsServers<'a> {
    /// How long the servers may be used, seconds (0: no longer; [`INFINITE_LIFETIME`]:
    /// forever).
    pub lifetime: u32,
    addresses: &'a [u8],
}

impl DnsServers<'_> {
    /// The servers' addresses, in the router's order of preference.
    pub fn addresses(&self) -> impl Iterator<Item = [u8; 16]> + '_ {
        self.addresses.chunks_exact(16).map(address_at)
    }
}

fn address_at(bytes: &[u8]) -> [u8; 16] {
    let mut address = [0; 16];
    // Callers pass exactly 16 bytes (chunks_exact, or a checked sub-slice).
    address.copy_from_slice(&bytes[..16]);
    address
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    let field = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([field[0], field[1]]))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let field = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([field[0], field[1], field[2], field[3]]))
}

/// The options of a message, each as (type, whole option bytes). Only built over option
/// bytes that [`check_options`] accepted.
struct Options<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Options<'a> {
    type Item = (u8, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let kind = *self.rest.first()?;
        let len = usize::from(*self.rest.get(1)?).checked_mul(8)?;
        if len == 0 || len > self.rest.len() {
            // Not reached for checked options; stops rather than loops otherwise.
            self.rest = &[];
            return None;
        }
        let (option, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some((kind, option))
    }
}

/// Walks the options once: each must have a non-zero length that fits.
fn check_options(mut rest: &[u8]) -> Result<(), NdpError> {
    while !rest.is_empty() {
        let units = *rest.get(1).ok_or(NdpError::Truncated)?;
        if units == 0 {
            return Err(NdpError::ZeroLengthOption);
        }
        let len = usize::from(units) * 8;
        rest = rest.get(len..).ok_or(NdpError::Truncated)?;
    }
    Ok(())
}

impl<'a> RouterAdvert<'a> {
    /// Checks `icmp` (an ICMPv6 message, checksum already verified) as a Router
    /// Advertisement: type 134, code 0, at least 16 bytes, every option's length non-zero and
    /// within the message.
    pub fn parse(icmp: &'a [u8]) -> Result<Self, NdpError> {
        let fixed = icmp.get(..ROUTER_ADVERT_LEN).ok_or(NdpError::Truncated)?;
        if fixed[0] != ROUTER_ADVERT || fixed[1] != 0 {
            return Err(NdpError::WrongType);
        }
        let options = &icmp[ROUTER_ADVERT_LEN..];
        check_options(options)?;
        Ok(Self {
            hop_limit: fixed[4],
            managed: fixed[5] & 0x80 != 0,
            other: fixed[5] & 0x40 != 0,
            router_lifetime: u16::from_be_bytes([fixed[6], fixed[7]]),
            options,
        })
    }

    fn options(&self) -> Options<'a> {
        Options { rest: self.options }
    }

    /// The Prefix Information options (those of the right length, 32 bytes).
    pub fn prefixes(&self) -> impl Iterator<Item = PrefixInfo> + 'a {
        self.options().filter_map(|(kind, option)| {
            if kind != OPTION_PREFIX || option.len() != 32 {
                return None;
            }
            Some(PrefixInfo {
                prefix_len: option[2],
                on_link: option[3] & 0x80 != 0,
                autonomous: option[3] & 0x40 != 0,
                valid_lifetime: u32_at(option, 4)?,
                preferred_lifetime: u32_at(option, 8)?,
                prefix: address_at(option.get(16..32)?),
            })
        })
    }

    /// The Recursive DNS Server options (RFC 8106 §5.1: length 3 or more, odd; others are
    /// skipped).
    pub fn dns_servers(&self) -> impl Iterator<Item = DnsServers<'a>> + 'a {
        self.options().filter_map(|(kind, option)| {
            let units = option.len() / 8;
            if kind != OPTION_RDNSS || units < 3 || units % 2 == 0 {
                return None;
            }
            Some(DnsServers {
                lifetime: u32_at(option, 4)?,
                addresses: option.get(8..)?,
            })
        })
    }

    /// The link MTU the router advertises, if it does.
    pub fn mtu(&self) -> Option<u32> {
        self.options()
            .find(|(kind, option)| *kind == OPTION_MTU && option.len() == 8)
            .and_then(|(_, option)| u32_at(option, 4))
    }
}

/// A Neighbor Advertisement (RFC 4861 §4.4), as far as duplicate address detection needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighborAdvert {
    /// The address the advertisement is about.
    pub target: [u8; 16],
    /// The S flag: an answer to a solicitation.
    pub solicited: bool,
}

impl NeighborAdvert {
    /// Checks `icmp` (an ICMPv6 message, checksum already verified) as a Neighbor
    /// Advertisement: type 136, code 0, at least 24 bytes, a unicast target, options of
    /// valid length.
    pub fn parse(icmp: &[u8]) -> Result<Self, NdpError> {
        let fixed = icmp.get(..NEIGHBOR_ADVERT_LEN).ok_or(NdpError::Truncated)?;
        if fixed[0] != NEIGHBOR_ADVERT || fixed[1] != 0 {
            return Err(NdpError::WrongType);
        }
        check_options(&icmp[NEIGHBOR_ADVERT_LEN..])?;
        let target = address_at(&fixed[8..24]);
        if target[0] == 0xff {
            return Err(NdpError::MulticastTarget);
        }
        Ok(Self {
            target,
            solicited: u16_at(fixed, 4).is_some_and(|flags| flags & 0x4000 != 0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    /// A Router Advertisement with `options` after its fixed part.
    fn advert(lifetime: u16, options: &[&[u8]]) -> Vec<u8> {
        let mut m = std::vec![ROUTER_ADVERT, 0, 0, 0, 64, 0x40];
        m.extend_from_slice(&lifetime.to_be_bytes());
        m.extend_from_slice(&[0; 8]);
        for option in options {
            m.extend_from_slice(option);
        }
        m
    }

    fn prefix_option(prefix: [u8; 16], len: u8, flags: u8, valid: u32, preferred: u32) -> Vec<u8> {
        let mut o = std::vec![OPTION_PREFIX, 4, len, flags];
        o.extend_from_slice(&valid.to_be_bytes());
        o.extend_from_slice(&preferred.to_be_bytes());
        o.extend_from_slice(&[0; 4]);
        o.extend_from_slice(&prefix);
        o
    }

    const PREFIX: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    const DNS1: [u8; 16] = [
        0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x53,
    ];

    #[test]
    fn reads_prefixes_name_servers_and_mtu() {
        let p1 = prefix_option(PREFIX, 64, 0xc0, 86_400, 14_400);
        let mut p2_prefix = PREFIX;
        p2_prefix[5] = 2;
        let p2 = prefix_option(p2_prefix, 64, 0x80, INFINITE_LIFETIME, 0);
        let mut rdnss = std::vec![OPTION_RDNSS, 5, 0, 0, 0, 0, 0x0e, 0x10];
        rdnss.extend_from_slice(&DNS1);
        rdnss.extend_from_slice(&PREFIX);
        let mtu = [OPTION_MTU, 1, 0, 0, 0, 0, 0x05, 0xdc];
        let sll = [1, 1, 2, 0, 0, 0, 0, 1];
        let m = advert(1800, &[&sll, &p1, &mtu, &rdnss, &p2]);
        let ra = RouterAdvert::parse(&m).unwrap();
        assert_eq!((ra.hop_limit, ra.managed, ra.other), (64, false, true));
        assert_eq!(ra.router_lifetime, 1800);
        assert_eq!(ra.mtu(), Some(1500));
        let prefixes: Vec<_> = ra.prefixes().collect();
        assert_eq!(prefixes.len(), 2);
        assert_eq!(
            prefixes[0],
            PrefixInfo {
                prefix_len: 64,
                on_link: true,
                autonomous: true,
                valid_lifetime: 86_400,
                preferred_lifetime: 14_400,
                prefix: PREFIX,
            }
        );
        assert!(!prefixes[1].autonomous && prefixes[1].on_link);
        assert_eq!(prefixes[1].valid_lifetime, INFINITE_LIFETIME);
        let servers: Vec<_> = ra.dns_servers().collect();
        assert_eq!(servers.len(), 1);
        assert_eq!(servers[0].lifetime, 3600);
        assert_eq!(servers[0].addresses().collect::<Vec<_>>(), [DNS1, PREFIX]);
    }

    #[test]
    fn bad_option_lengths_void_the_message_or_the_option() {
        // Zero length: the whole message is discarded (RFC 4861 §4.6).
        let m = advert(0, &[&[OPTION_MTU, 0, 0, 0, 0, 0, 0, 0]]);
        assert_eq!(RouterAdvert::parse(&m), Err(NdpError::ZeroLengthOption));
        // Past the end.
        let m = advert(0, &[&[OPTION_MTU, 2, 0, 0, 0, 0, 0, 0]]);
        assert_eq!(RouterAdvert::parse(&m), Err(NdpError::Truncated));
        let m = advert(0, &[&[OPTION_MTU]]);
        assert_eq!(RouterAdvert::parse(&m), Err(NdpError::Truncated));
        // Right length for the message, wrong for the type: that option is skipped.
        let mut short_prefix = prefix_option(PREFIX, 64, 0xc0, 1, 1);
        short_prefix.truncate(24);
        short_prefix[1] = 3;
        let even_rdnss = [OPTION_RDNSS, 4, 0, 0, 0, 0, 0, 1]
            .iter()
            .copied()
            .chain([0; 24])
            .collect::<Vec<_>>();
        let m = advert(0, &[&short_prefix, &even_rdnss]);
        let ra = RouterAdvert::parse(&m).unwrap();
        assert_eq!(ra.prefixes().count(), 0);
        assert_eq!(ra.dns_servers().count(), 0);
        // Not an advertisement, or a non-zero code.
        let mut m = advert(0, &[]);
        m[1] = 1;
        assert_eq!(RouterAdvert::parse(&m), Err(NdpError::WrongType));
        assert_eq!(RouterAdvert::parse(&m[..15]), Err(NdpError::Truncated));
    }

    #[test]
    fn every_cut_of_a_message_is_an_error_or_a_shorter_message() {
        let p = prefix_option(PREFIX, 64, 0xc0, 600, 300);
        let m = advert(600, &[&p]);
        for cut in 0..m.len() {
            match RouterAdvert::parse(&m[..cut]) {
                Ok(ra) => assert_eq!(ra.prefixes().count(), 0, "cut {cut}"),
                Err(error) => assert!(
                    matches!(error, NdpError::Truncated | NdpError::ZeroLengthOption),
                    "cut {cut}: {error:?}"
                ),
            }
        }
    }

    #[test]
    fn neighbor_advert_target_and_flags() {
        let mut m = std::vec![NEIGHBOR_ADVERT, 0, 0, 0, 0x60, 0, 0, 0];
        m.extend_from_slice(&PREFIX);
        m.extend_from_slice(&[2, 1, 2, 0, 0, 0, 0, 9]);
        let na = NeighborAdvert::parse(&m).unwrap();
        assert_eq!(na.target, PREFIX);
        assert!(na.solicited);
        assert_eq!(NeighborAdvert::parse(&m[..23]), Err(NdpError::Truncated));
        m[8] = 0xff;
        assert_eq!(NeighborAdvert::parse(&m), Err(NdpError::MulticastTarget));
        m[0] = NEIGHBOR_SOLICIT;
        assert_eq!(NeighborAdvert::parse(&m), Err(NdpError::WrongType));
    }
}
