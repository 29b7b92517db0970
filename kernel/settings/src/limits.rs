//! The limits and defaults of the settings' values: how long a name may be, how many servers
//! a list may hold, what a setting is when BRAMBLE.TXT names none.

/// The host name used when BRAMBLE.TXT names none.
pub const DEFAULT_HOSTNAME: &str = "bramble";

/// The longest host name: one DNS label (RFC 1123 section 2.1, RFC 1035 section 2.3.4).
pub const MAX_HOSTNAME_LEN: usize = 63;

/// How many name servers `dns` may list.
pub const MAX_DNS_SERVERS: usize = 3;

/// The lowest ARM clock `arm_freq` accepts, in MHz.
pub const MIN_ARM_FREQ_MHZ: u16 = 100;

/// The highest ARM clock `arm_freq` accepts, in MHz: the BCM2835's rated 700 MHz. The setting
/// exists to save power; overclocking needs voltage changes Bramble does not make.
pub const MAX_ARM_FREQ_MHZ: u16 = 700;

/// How many time servers `ntp` may list.
pub const MAX_NTP_SERVERS: usize = 3;

/// The longest DNS name (RFC 1035 section 2.3.4, without the root's trailing dot).
pub const MAX_DNS_NAME_LEN: usize = 253;

/// The time servers asked when neither BRAMBLE.TXT nor the DHCP server names any.
pub const DEFAULT_NTP_SERVER: &str = "pool.ntp.org";

/// The longest `hsts` max-age accepted: two years, as the HSTS preload list asks for at most
/// (a longer one only makes a mistake last longer).
pub const MAX_HSTS_SECONDS: u32 = 2 * 365 * 24 * 60 * 60;

/// How many names `domain` may list (one certificate covers them all).
pub const MAX_DOMAINS: usize = 4;

/// The longest `acme_directory` URL and `acme_email` address.
pub const MAX_ACME_TEXT_LEN: usize = 200;

/// Let's Encrypt's production directory: the default `acme_directory`.
pub const DEFAULT_ACME_DIRECTORY: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// Default `tls_certificate`.
pub const DEFAULT_TLS_CERTIFICATE: &str = "CERT.PEM";

/// Default `tls_key`.
pub const DEFAULT_TLS_KEY: &str = "KEY.PEM";
