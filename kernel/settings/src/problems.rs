//! What can be wrong with a line of BRAMBLE.TXT: [`Problem`], and [`SettingsError`] that
//! places it (line, key, value); their `Display` is the message on the serial console.
//! [`HostnameError`] says why a host name was refused.

use crate::ddns::{MAX_DDNS_PASSWORD_LEN, MAX_DDNS_USER_LEN};
use crate::file::{FILE_NAME, Key};
use crate::limits::{
    MAX_ACME_TEXT_LEN, MAX_DNS_SERVERS, MAX_DOMAINS, MAX_HOSTNAME_LEN, MAX_HSTS_SECONDS,
    MAX_NTP_SERVERS,
};
use crate::remote::MAX_STATUS_PREFIXES;
use core::fmt;

/// What is wrong with one line of BRAMBLE.TXT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The line is not valid UTF-8 text.
    NotUtf8,
    /// The line has no `=` between a key and a value.
    MissingEquals,
    /// The line has nothing before its `=`.
    MissingKey,
    /// The key is not one Bramble knows (a typo, most likely).
    UnknownKey,
    /// The key was already set on an earlier line.
    Duplicate {
        /// The line that set it first (1-based).
        first_line: usize,
    },
    /// The line has nothing after its `=`.
    EmptyValue,
    /// The host name is not a valid RFC 1123 label.
    Hostname(HostnameError),
    /// The value is not an IPv4 address in dotted form (`192.168.1.50`).
    NotAnIpv4Address,
    /// `address` is neither `dhcp` nor an address with a prefix length.
    NotAnAddressMode,
    /// A fixed address lacks its prefix length (`/24`).
    MissingPrefixLength,
    /// The prefix length is not a number from 1 to 32.
    BadPrefixLength,
    /// The address cannot belong to a host: unspecified, loopback, multicast, broadcast, or the
    /// network or broadcast address of its own network.
    NotAHostAddress,
    /// The gateway does not lie in the fixed address's network.
    GatewayOutsideNetwork,
    /// `dns` lists more than [`MAX_DNS_SERVERS`] servers.
    TooManyDnsServers,
    /// The value is not `on` or `off` (`yes`/`no` and `true`/`false` are accepted too).
    NotOnOff,
    /// The value is not a whole number.
    NotANumber,
    /// The number is outside the range the setting allows.
    OutOfRange {
        /// The smallest value allowed.
        min: u32,
        /// The largest value allowed.
        max: u32,
    },
    /// `log_level` is not one of error, warn, info, debug, trace.
    NotALogLevel,
    /// `usb_protocol` is neither `rndis` nor `ecm`.
    NotAUsbProtocol,
    /// `https` is not `on`, `off` or `only`.
    NotAnHttpsMode,
    /// `hsts` is neither `off` nor a number of seconds in range.
    NotAnHstsSetting,
    /// A file name is not an 8.3 name in the card's root folder.
    NotACardFileName,
    /// `sni` is neither `any` nor `certificate`.
    NotAnSniPolicy,
    /// A time server is neither an IPv4 address nor a DNS name.
    NotAServer,
    /// `ntp` lists more than [`MAX_NTP_SERVERS`] servers.
    TooManyNtpServers,
    /// `https_port` is the same as `http_port`.
    SamePortTwice,
    /// The value is not an IPv6 address (`2001:db8::1`, `fe80::1`).
    NotAnIpv6Address,
    /// `address6` is neither `auto` nor an IPv6 address with a prefix length.
    NotAnAddress6Mode,
    /// The IPv6 prefix length is not a number from 1 to 128.
    BadPrefixLength6,
    /// The IPv6 address cannot be this host's: unspecified, loopback, multicast, IPv4-mapped,
    /// or (for `address6`) link-local, which Bramble forms itself.
    NotAHostAddress6,
    /// A `domain` name is not a DNS name of at least two labels.
    NotADomainName,
    /// `domain` lists more than [`MAX_DOMAINS`] names.
    TooManyDomains,
    /// `acme_directory` is not an `https://` URL of at most [`MAX_ACME_TEXT_LEN`] bytes.
    NotAnHttpsUrl,
    /// `acme_email` is not an address such as `owner@example.org`.
    NotAnEmailAddress,
    /// `certificate_store` is neither `card` nor `ram`.
    NotACertificateStore,
    /// `acme_challenge` is not `http-01`, `tls-alpn-01` or `dns-01`.
    NotAnAcmeChallenge,
    /// A wildcard `domain` without `acme_challenge = dns-01`.
    WildcardNeedsDns01,
    /// `acme_challenge = dns-01` without dynamic DNS to publish its answers.
    Dns01WithoutDdns,
    /// `acme = on` without a `domain` to ask a certificate for.
    AcmeWithoutDomain,
    /// `syslog` is neither `off` nor an IPv4 or IPv6 address with an optional port.
    NotASyslogTarget,
    /// A `status_from` item is not an address with an optional prefix length.
    NotAPrefix,
    /// `status_from` lists more than [`MAX_STATUS_PREFIXES`] prefixes.
    TooManyPrefixes,
    /// `status_token` is neither `off` nor 16 to 64 letters, digits, `-`, `.`, `_`, `~`.
    NotAToken,
    /// `ddns` is not `off`, `rfc2136`, `dyndns2`, `desec` or `duckdns`.
    NotADdnsProtocol,
    /// `ddns_user` or `ddns_password` is empty, too long, or has spaces or control bytes.
    NotACredential,
    /// `ddns_ipv4` is not `public`, `interface` or `off`.
    NotAnIpv4Source,
    /// `ddns_server` is not an IPv4 or IPv6 address with an optional port.
    NotADnsServer,
    /// `ddns_key` is not `hmac-sha256:NAME:BASE64` with a secret of 16 to 64 bytes.
    NotATsigKey,
    /// `ddns` is on but a setting it needs is missing (named).
    DdnsIncomplete(&'static str),
    /// `ipv6_secret` is neither `board` nor 32 hexadecimal digits.
    NotASecret,
    /// `router_ports` is neither `off`, `on`, nor two different port numbers `HTTP,HTTPS`.
    NotRouterPorts,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::NotUtf8 => f.write_str("the line is not plain text (invalid UTF-8)"),
            Problem::MissingEquals => f.write_str("expected a setting written as `key = value`"),
            Problem::MissingKey => f.write_str("there is no setting name before '='"),
            Problem::UnknownKey => {
                f.write_str("is not a known setting; known settings are ")?;
                for (i, key) in Key::ALL.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str(key.name())?;
                }
                Ok(())
            }
            Problem::Duplicate { first_line } => {
                write!(f, "is set twice (first on line {first_line}); this line is ignored")
            }
            Problem::EmptyValue => f.write_str("has no value after '='"),
            Problem::Hostname(e) => write!(f, "is not a valid host name: {e}"),
            Problem::NotAnIpv4Address => {
                f.write_str("expected an IPv4 address such as 192.168.1.1")
            }
            Problem::NotAnAddressMode => f.write_str(
                "expected `dhcp` or a fixed address with its prefix length, such as 192.168.1.50/24",
            ),
            Problem::MissingPrefixLength => f.write_str(
                "a fixed address needs its prefix length, such as 192.168.1.50/24 \
                 (/24 is netmask 255.255.255.0)",
            ),
            Problem::BadPrefixLength => f.write_str("the prefix length must be a number from 1 to 32"),
            Problem::NotAHostAddress => f.write_str(
                "is not an address a host can use (it is reserved, or the network's own \
                 network or broadcast address)",
            ),
            Problem::GatewayOutsideNetwork => {
                f.write_str("the gateway must be in the same network as the fixed address")
            }
            Problem::TooManyDnsServers => {
                write!(f, "at most {MAX_DNS_SERVERS} name servers may be listed")
            }
            Problem::NotOnOff => f.write_str("expected `on` or `off`"),
            Problem::NotANumber => f.write_str("expected a whole number"),
            Problem::OutOfRange { min, max } => {
                write!(f, "the number must be from {min} to {max}")
            }
            Problem::NotALogLevel => {
                f.write_str("expected one of error, warn, info, debug, trace")
            }
            Problem::NotAUsbProtocol => f.write_str("expected `rndis` or `ecm`"),
            Problem::NotAnHttpsMode => f.write_str("expected `on`, `off` or `only`"),
            Problem::NotAnHstsSetting => write!(
                f,
                "expected `off` or a max-age in seconds from 1 to {MAX_HSTS_SECONDS} (two years)"
            ),
            Problem::NotACardFileName => f.write_str(
                "expected a file name in the card's top folder, at most 8 characters, a dot \
                 and 3 more (for example CERT.PEM)",
            ),
            Problem::NotAnSniPolicy => f.write_str("expected `any` or `certificate`"),
            Problem::NotAServer => {
                f.write_str("expected a server name such as pool.ntp.org or an IPv4 address")
            }
            Problem::TooManyNtpServers => {
                write!(f, "at most {MAX_NTP_SERVERS} time servers may be listed")
            }
            Problem::SamePortTwice => f.write_str(
                "https_port must differ from http_port; HTTPS uses 443 (8443 when http_port is 443)",
            ),
            Problem::NotAnIpv6Address => {
                f.write_str("expected an IPv6 address such as 2001:db8::1 or fe80::1")
            }
            Problem::NotAnAddress6Mode => f.write_str(
                "expected `auto` or a fixed IPv6 address with its prefix length, such as \
                 2001:db8:1::50/64",
            ),
            Problem::BadPrefixLength6 => {
                f.write_str("the prefix length must be a number from 1 to 128 (usually 64)")
            }
            Problem::NotAHostAddress6 => f.write_str(
                "is not an IPv6 address this server can use (unspecified, loopback, multicast, \
                 IPv4-mapped, or link-local, which Bramble makes itself)",
            ),
            Problem::NotADomainName => f.write_str(
                "expected a domain name such as example.org (letters, digits, '-', dots)",
            ),
            Problem::TooManyDomains => {
                write!(f, "at most {MAX_DOMAINS} names may be listed")
            }
            Problem::NotAnHttpsUrl => write!(
                f,
                "expected an https:// URL of at most {MAX_ACME_TEXT_LEN} characters"
            ),
            Problem::NotAnEmailAddress => {
                f.write_str("expected an e-mail address such as owner@example.org")
            }
            Problem::NotACertificateStore => f.write_str("expected `card` or `ram`"),
            Problem::NotAnAcmeChallenge => {
                f.write_str("expected `http-01`, `tls-alpn-01` or `dns-01`")
            }
            Problem::WildcardNeedsDns01 => f.write_str(
                "a wildcard name (*.example.org) can only be validated by acme_challenge = \
                 dns-01; it is left out",
            ),
            Problem::Dns01WithoutDdns => f.write_str(
                "dns-01 puts its TXT records up by dynamic DNS: it needs ddns = rfc2136 with \
                 its ddns_ settings",
            ),
            Problem::AcmeWithoutDomain => f.write_str(
                "acme = on needs the names to ask for, for example `domain = example.org`; \
                 ACME stays off",
            ),
            Problem::NotAPrefix => f.write_str(
                "expected `link` or addresses with optional prefix lengths, such as \
                 192.168.1.0/24, 2001:db8::/32",
            ),
            Problem::TooManyPrefixes => {
                write!(f, "at most {MAX_STATUS_PREFIXES} prefixes may be listed")
            }
            Problem::NotASecret => {
                f.write_str("expected `board` or 32 hexadecimal digits (16 random bytes)")
            }
            Problem::NotAToken => f.write_str(
                "expected `off` or 16 to 64 letters, digits, '-', '.', '_' or '~'",
            ),
            Problem::NotADdnsProtocol => {
                f.write_str("expected `off`, `rfc2136`, `dyndns2`, `desec` or `duckdns`")
            }
            Problem::NotACredential => write!(
                f,
                "expected printable characters without spaces (a user name without ':'), at \
                 most {MAX_DDNS_USER_LEN} for a user, {MAX_DDNS_PASSWORD_LEN} for a password"
            ),
            Problem::NotAnIpv4Source => f.write_str("expected `public`, `interface` or `off`"),
            Problem::NotADnsServer => f.write_str(
                "expected a name server's address with an optional port, such as \
                 192.0.2.53 or [2001:db8::53]:53",
            ),
            Problem::NotATsigKey => f.write_str(
                "expected hmac-sha256:KEYNAME:SECRET, the secret in base64 (16 to 64 bytes), \
                 as `tsig-keygen` or `keymgr -t` print it",
            ),
            Problem::DdnsIncomplete(missing) => {
                write!(f, "needs {missing} too; dynamic DNS stays off")
            }
            Problem::NotRouterPorts => f.write_str(
                "expected `off`, `on`, or the outside ports for HTTP and HTTPS, such as 8080,8443",
            ),
            Problem::NotASyslogTarget => f.write_str(
                "expected `off` or a collector's address with an optional port, such as \
                 192.168.1.9, 192.168.1.9:1514 or [2001:db8::9]:1514",
            ),
        }
    }
}

/// One bad line of BRAMBLE.TXT: where it is, which setting, and what is wrong.
///
/// `Display` gives one line for the serial console, for example
/// `BRAMBLE.TXT line 7: led = blue: expected `on` or `off``.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettingsError<'a> {
    /// The line number, counting from 1.
    pub line: usize,
    /// The key as written on the line (empty when the line has none or is not text; the whole
    /// trimmed line when it has no `=`).
    pub key: &'a str,
    /// The value as written (empty when the line has none).
    pub value: &'a str,
    /// What is wrong.
    pub problem: Problem,
}

impl fmt::Display for SettingsError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{FILE_NAME} line {}: ", self.line)?;
        match self.problem {
            Problem::NotUtf8 | Problem::MissingKey => write!(f, "{}", self.problem),
            Problem::MissingEquals => write!(f, "`{}`: {}", self.key, self.problem),
            Problem::UnknownKey | Problem::Duplicate { .. } | Problem::EmptyValue => {
                write!(f, "`{}` {}", self.key, self.problem)
            }
            _ => write!(f, "{} = {}: {}", self.key, self.value, self.problem),
        }
    }
}

/// Why a host name was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostnameError {
    /// The name is empty.
    Empty,
    /// The name is longer than [`MAX_HOSTNAME_LEN`] bytes.
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The name holds a character other than an ASCII letter, digit or hyphen (dots included:
    /// the name is one label, `.local` is added by mDNS).
    BadCharacter(char),
    /// The name starts or ends with a hyphen.
    HyphenAtEnd,
}

impl fmt::Display for HostnameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostnameError::Empty => f.write_str("the name is empty"),
            HostnameError::TooLong { len } => write!(
                f,
                "the name is {len} characters long; at most {MAX_HOSTNAME_LEN} are allowed"
            ),
            HostnameError::BadCharacter(c) => write!(
                f,
                "{c:?} is not allowed; use only letters a-z, digits 0-9 and '-'"
            ),
            HostnameError::HyphenAtEnd => f.write_str("the name must not start or end with '-'"),
        }
    }
}
