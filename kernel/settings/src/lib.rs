//! BRAMBLE.TXT, the owner's settings file on the SD card: a parser that never allocates.
//!
//! The file is plain text, one `key = value` per line; `#` starts a comment (on its own line or
//! after a value); blank lines are ignored; CRLF line ends and a leading UTF-8 byte-order mark
//! (as Windows editors write them) are accepted; keys are case-insensitive.
//!
//! A bad line never stops the server: [`Settings::parse_lenient`] keeps every good line, leaves
//! the setting of each bad line at its default, and hands each problem to a callback as a
//! [`SettingsError`] whose `Display` names the line number, the key and what is wrong, ready to
//! print on the serial console. [`Settings::parse`] is the strict form (first problem is an
//! error) that the host tool uses to check a file before putting it on a card.
//!
//! [`TEMPLATE`] is the commented file that `bramble image` writes; it parses to
//! [`Settings::default`].
//!
//! Where things are: [`Settings`] and the values it holds in `types`, their limits and
//! defaults in `limits`, what can be wrong with a line in `problems`, the parser in
//! `parser`, the file's name, template and keys in `file`; the settings of dynamic DNS, of
//! remote services (syslog, the status page, proxies, the heartbeat) and of the home
//! router's port mapping each in a file of their own. A new setting: its key in `file.rs`,
//! its field and default in `types.rs` (a limit in `limits.rs`), its line in
//! `Settings::apply` (`parser.rs`), its problem (if new) in `problems.rs`, and its
//! commented line in BRAMBLE.TXT.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(test)]
extern crate std;

mod ddns;
mod file;
mod limits;
mod parser;
mod problems;
mod remote;
mod router;
mod types;

pub use ddns::{
    DNS_PORT, DdnsPassword, DdnsProtocol, DdnsSettings, Ipv4Source, MAX_DDNS_PASSWORD_LEN,
    MAX_DDNS_URL_LEN, MAX_DDNS_USER_LEN, MAX_KEY_NAME_LEN, MAX_KEY_SECRET_LEN, TsigKeySetting,
};
pub use file::{FILE_NAME, MAX_FILE_BYTES, TEMPLATE};
pub use limits::{
    DEFAULT_ACME_DIRECTORY, DEFAULT_HOSTNAME, DEFAULT_NTP_SERVER, DEFAULT_TLS_CERTIFICATE,
    DEFAULT_TLS_KEY, MAX_ACME_TEXT_LEN, MAX_ARM_FREQ_MHZ, MAX_DNS_NAME_LEN, MAX_DNS_SERVERS,
    MAX_DOMAINS, MAX_HOSTNAME_LEN, MAX_HSTS_SECONDS, MAX_NTP_SERVERS, MIN_ARM_FREQ_MHZ,
};
pub use problems::{HostnameError, Problem, SettingsError};
pub use remote::{
    AddressPrefix, DEFAULT_SYSLOG_PORT, MAX_STATUS_PREFIXES, STATUS_TOKEN_LEN, SyslogHost,
    SyslogTarget,
};
pub use router::{DEFAULT_ROUTER_LIFETIME, MAX_ROUTER_LIFETIME, MIN_ROUTER_LIFETIME, RouterPorts};
pub use types::{
    AcmeChallenge, AddressMode, CardFileName, CertificateStore, DomainName, Hostname, HttpsMode,
    LogLevel, NtpServer, Settings, SniPolicy, StaticAddress, StaticAddress6, UsbProtocol,
};
