//! BRAMBLE.TXT parser tests: the template, every setting, and every kind of bad line.
use bramble_settings::{
    AcmeChallenge, AddressMode, CertificateStore, DEFAULT_ACME_DIRECTORY, Hostname, HostnameError,
    HttpsMode, LogLevel, NtpServer, Problem, Settings, SettingsError, SniPolicy, StaticAddress,
    StaticAddress6, TEMPLATE,
};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Parses leniently and returns the settings with every reported problem.
fn lenient(text: &str) -> (Settings, Vec<SettingsError<'_>>) {
    let mut errors = Vec::new();
    let settings = Settings::parse_lenient(text, |e| errors.push(e));
    (settings, errors)
}

/// The single problem a one-line file reports.
fn problem_of(line: &str) -> Problem {
    let (_, errors) = lenient(line);
    assert_eq!(errors.len(), 1, "{line:?} gave {errors:?}");
    errors[0].problem
}

#[test]
fn template_parses_to_the_defaults() {
    assert_eq!(Settings::parse(TEMPLATE), Ok(Settings::default()));
}

#[test]
fn template_fits_the_size_limit_with_room_to_spare() {
    // Room for the owner's notes: at least twice the template again.
    assert!(TEMPLATE.len() * 3 < bramble_settings::MAX_FILE_BYTES);
}

#[test]
fn template_mentions_every_setting() {
    for key in [
        "hostname",
        "address",
        "gateway",
        "dns",
        "http_port",
        "connections_per_address",
        "mdns",
        "access_log",
        "log_level",
        "led",
        "hdmi",
        "arm_freq",
        "usb_protocol",
        "https",
        "https_port",
        "hsts",
        "tls_certificate",
        "tls_key",
        "sni",
        "ntp",
        "ipv6",
        "address6",
        "gateway6",
        "acme",
        "domain",
        "acme_directory",
        "acme_email",
        "acme_ca_certificate",
        "certificate_store",
        "acme_challenge",
        "syslog",
        "status_from",
        "status_token",
        "ipv6_secret",
        "proxy_from",
        "heartbeat",
        "heartbeat_every",
        "publish_url",
        "publish_every",
    ] {
        assert!(TEMPLATE.contains(key), "template does not mention {key}");
    }
}

#[test]
fn defaults_are_the_documented_ones() {
    let d = Settings::default();
    assert_eq!(d.hostname.as_str(), "bramble");
    assert_eq!(d.address, AddressMode::Dhcp);
    assert_eq!(d.gateway, None);
    assert!(d.dns.is_empty());
    assert_eq!(d.http_port, 80);
    assert!(d.mdns && d.access_log && d.led && !d.hdmi);
    assert_eq!(d.log_level, LogLevel::Info);
    assert_eq!(d.arm_freq_mhz, None);
}

#[test]
fn empty_file_is_all_defaults() {
    assert_eq!(Settings::parse(""), Ok(Settings::default()));
    assert_eq!(
        Settings::parse("\n\n# nothing\n   \n"),
        Ok(Settings::default())
    );
}

#[test]
fn every_setting_is_applied() {
    // CRLF line ends, a byte-order mark, upper-case keys, tabs and comments after values.
    let text = "\u{feff}# my pi\r\n\
        HOSTNAME = garden-pi\r\n\
        address=192.168.1.50/24\r\n\
        \tgateway = 192.168.1.1   # the router\r\n\
        dns = 192.168.1.1, 9.9.9.9 ,1.1.1.1\r\n\
        http_port = 8080\r\n\
        mdns = no\r\n\
        Access_Log = OFF\r\n\
        log_level = Debug\r\n\
        led = false\r\n\
        hdmi = on\r\n\
        arm_freq = 400\r\n";
    let s = Settings::parse(text).expect("valid file");
    assert_eq!(s.hostname.as_str(), "garden-pi");
    assert_eq!(
        s.address,
        AddressMode::Static(StaticAddress {
            address: Ipv4Addr::new(192, 168, 1, 50),
            prefix_len: 24
        })
    );
    assert_eq!(s.gateway, Some(Ipv4Addr::new(192, 168, 1, 1)));
    assert_eq!(
        s.dns.as_slice(),
        &[
            Ipv4Addr::new(192, 168, 1, 1),
            Ipv4Addr::new(9, 9, 9, 9),
            Ipv4Addr::new(1, 1, 1, 1)
        ]
    );
    assert_eq!(s.http_port, 8080);
    assert!(!s.mdns && !s.access_log && !s.led && s.hdmi);
    assert_eq!(s.log_level, LogLevel::Debug);
    assert_eq!(s.arm_freq_mhz, Some(400));
}

#[test]
fn static_address_helpers() {
    let a = StaticAddress {
        address: Ipv4Addr::new(10, 1, 2, 3),
        prefix_len: 20,
    };
    assert_eq!(a.netmask(), Ipv4Addr::new(255, 255, 240, 0));
    assert!(a.contains(Ipv4Addr::new(10, 1, 15, 254)));
    assert!(!a.contains(Ipv4Addr::new(10, 1, 16, 1)));
    assert_eq!(a.to_string(), "10.1.2.3/20");
}

#[test]
fn bad_line_names_line_key_and_problem_and_keeps_the_rest() {
    let text = "hostname = web\nled = blue\n\naddress = 10.0.0.9/8\n";
    let (s, errors) = lenient(text);
    assert_eq!(errors.len(), 1);
    let e = errors[0];
    assert_eq!(
        (e.line, e.key, e.value, e.problem),
        (2, "led", "blue", Problem::NotOnOff)
    );
    let message = e.to_string();
    assert!(message.contains("line 2"), "{message}");
    assert!(message.contains("led"), "{message}");
    assert!(message.contains("blue"), "{message}");
    assert!(message.contains("`on` or `off`"), "{message}");
    // The good lines still apply; the bad one keeps its default.
    assert_eq!(s.hostname.as_str(), "web");
    assert!(matches!(s.address, AddressMode::Static(_)));
    assert!(s.led);
    // The strict form reports the same first error.
    assert_eq!(Settings::parse(text), Err(e));
}

#[test]
fn every_bad_line_is_reported_in_order() {
    let text = "led = on\nfoo = 1\nled = off\nhdmi =\nno equals here\n = 3\n";
    let (s, errors) = lenient(text);
    let got: Vec<_> = errors.iter().map(|e| (e.line, e.key, e.problem)).collect();
    assert_eq!(
        got,
        vec![
            (2, "foo", Problem::UnknownKey),
            (3, "led", Problem::Duplicate { first_line: 1 }),
            (4, "hdmi", Problem::EmptyValue),
            (5, "no equals here", Problem::MissingEquals),
            (6, "", Problem::MissingKey),
        ]
    );
    // The first `led` wins.
    assert!(s.led);
    assert!(
        errors[0].to_string().contains("hostname"),
        "unknown key lists the known ones"
    );
    assert!(errors[1].to_string().contains("first on line 1"));
}

#[test]
fn invalid_utf8_line_is_reported_and_skipped() {
    let bytes = b"hostname = ok\nled = \xff\xfe\nhdmi = on\n";
    let mut errors = Vec::new();
    let s = Settings::parse_bytes(bytes, |e| errors.push(e));
    assert_eq!(errors.len(), 1);
    assert_eq!((errors[0].line, errors[0].problem), (2, Problem::NotUtf8));
    assert_eq!(s.hostname.as_str(), "ok");
    assert!(s.hdmi);
}

#[test]
fn hostnames_follow_rfc_1123() {
    let longest = "a".repeat(63);
    assert_eq!(Hostname::new(&longest).unwrap().as_str(), longest);
    assert_eq!(Hostname::new("1pi").unwrap().as_str(), "1pi");
    assert_eq!(Hostname::new("Pi-B-Plus").unwrap().as_str(), "Pi-B-Plus");
    assert_eq!(
        Hostname::new(&"a".repeat(64)),
        Err(HostnameError::TooLong { len: 64 })
    );
    assert_eq!(Hostname::new(""), Err(HostnameError::Empty));
    assert_eq!(
        Hostname::new("my_pi"),
        Err(HostnameError::BadCharacter('_'))
    );
    assert_eq!(
        Hostname::new("pi.local"),
        Err(HostnameError::BadCharacter('.'))
    );
    assert_eq!(Hostname::new("-pi"), Err(HostnameError::HyphenAtEnd));
    assert_eq!(Hostname::new("pi-"), Err(HostnameError::HyphenAtEnd));
    assert_eq!(Hostname::new("pié"), Err(HostnameError::BadCharacter('é')));
    assert_eq!(
        problem_of("hostname = my pi"),
        Problem::Hostname(HostnameError::BadCharacter(' '))
    );
}

#[test]
fn addresses() {
    let fixed = |text: &str| match Settings::parse(text).map(|s| s.address) {
        Ok(AddressMode::Static(a)) => (a.address, a.prefix_len),
        other => panic!("{text}: {other:?}"),
    };
    assert_eq!(
        Settings::parse("address = DHCP").unwrap().address,
        AddressMode::Dhcp
    );
    assert_eq!(
        fixed("address = 192.168.1.50/24"),
        (Ipv4Addr::new(192, 168, 1, 50), 24)
    );
    assert_eq!(
        fixed("address = 10.0.0.1 / 8"),
        (Ipv4Addr::new(10, 0, 0, 1), 8)
    );
    // /31 point-to-point links and /32 have no network or broadcast address.
    assert_eq!(fixed("address = 10.0.0.0/31").1, 31);
    assert_eq!(fixed("address = 10.0.0.7/32").1, 32);

    assert_eq!(
        problem_of("address = 192.168.1.50"),
        Problem::MissingPrefixLength
    );
    assert_eq!(problem_of("address = static"), Problem::NotAnAddressMode);
    assert_eq!(
        problem_of("address = 192.168.1.300/24"),
        Problem::NotAnAddressMode
    );
    assert_eq!(
        problem_of("address = 192.168.1.50/33"),
        Problem::BadPrefixLength
    );
    assert_eq!(
        problem_of("address = 192.168.1.50/0"),
        Problem::BadPrefixLength
    );
    assert_eq!(
        problem_of("address = 192.168.1.50/+8"),
        Problem::BadPrefixLength
    );
    assert_eq!(
        problem_of("address = 192.168.1.0/24"),
        Problem::NotAHostAddress
    );
    assert_eq!(
        problem_of("address = 192.168.1.255/24"),
        Problem::NotAHostAddress
    );
    assert_eq!(
        problem_of("address = 127.0.0.1/8"),
        Problem::NotAHostAddress
    );
    assert_eq!(
        problem_of("address = 224.0.0.251/4"),
        Problem::NotAHostAddress
    );
}

#[test]
fn gateway_and_dns() {
    assert_eq!(problem_of("gateway = router"), Problem::NotAnIpv4Address);
    assert_eq!(problem_of("gateway = 0.0.0.0"), Problem::NotAHostAddress);
    // With DHCP there is no network to check a gateway against (the kernel ignores it).
    assert_eq!(
        Settings::parse("gateway = 10.9.9.9").unwrap().gateway,
        Some(Ipv4Addr::new(10, 9, 9, 9))
    );

    let text = "address = 192.168.1.50/24\ngateway = 192.168.2.1\n";
    let (s, errors) = lenient(text);
    assert_eq!(errors.len(), 1);
    assert_eq!((errors[0].line, errors[0].key), (2, "gateway"));
    assert_eq!(errors[0].problem, Problem::GatewayOutsideNetwork);
    assert_eq!(s.gateway, None, "a bad gateway falls back to none");
    assert!(matches!(s.address, AddressMode::Static(_)));
    // Order does not matter: the check runs once both are known.
    let (_, errors) = lenient("gateway = 192.168.1.50\naddress = 192.168.1.50/24\n");
    assert_eq!(errors.len(), 1, "the gateway cannot be the server itself");

    assert_eq!(
        problem_of("dns = 1.1.1.1, 2.2.2.2, 3.3.3.3, 4.4.4.4"),
        Problem::TooManyDnsServers
    );
    assert_eq!(
        problem_of("dns = 1.1.1.1,,2.2.2.2"),
        Problem::NotAnIpv4Address
    );
    assert!(Settings::parse("dns = 1.1.1.1, nope").is_err());
    assert!(
        lenient("dns = 1.1.1.1, nope").0.dns.is_empty(),
        "no partial list"
    );
}

#[test]
fn switches_numbers_and_levels() {
    assert_eq!(problem_of("hdmi = 1"), Problem::NotOnOff);
    assert_eq!(problem_of("arm_freq = fast"), Problem::NotANumber);
    assert_eq!(problem_of("arm_freq = -5"), Problem::NotANumber);
    assert_eq!(problem_of("arm_freq = 400MHz"), Problem::NotANumber);
    assert_eq!(
        problem_of("arm_freq = 99"),
        Problem::OutOfRange { min: 100, max: 700 }
    );
    assert_eq!(
        problem_of("arm_freq = 1000"),
        Problem::OutOfRange { min: 100, max: 700 }
    );
    assert_eq!(
        problem_of("arm_freq = 99999999999999999999"),
        Problem::OutOfRange { min: 100, max: 700 }
    );
    assert_eq!(
        Settings::parse("arm_freq = 700").unwrap().arm_freq_mhz,
        Some(700)
    );
    assert_eq!(
        Settings::parse("arm_freq = 100").unwrap().arm_freq_mhz,
        Some(100)
    );
    assert_eq!(
        problem_of("http_port = 0"),
        Problem::OutOfRange { min: 1, max: 65535 }
    );
    assert_eq!(
        problem_of("http_port = 65536"),
        Problem::OutOfRange { min: 1, max: 65535 }
    );
    assert_eq!(problem_of("log_level = loud"), Problem::NotALogLevel);
    assert_eq!(
        Settings::parse("log_level = TRACE").unwrap().log_level,
        LogLevel::Trace
    );
}

#[test]
fn messages_read_well() {
    let (_, errors) = lenient("\n\narm_freq = 1000\n");
    assert_eq!(
        errors[0].to_string(),
        "BRAMBLE.TXT line 3: arm_freq = 1000: the number must be from 100 to 700"
    );
    let (_, errors) = lenient("colour = red\n");
    assert!(
        errors[0]
            .to_string()
            .starts_with("BRAMBLE.TXT line 1: `colour` is not a known setting")
    );
}

#[test]
fn usb_protocol_choice_parses_and_rejects_others() {
    use bramble_settings::UsbProtocol;
    assert_eq!(Settings::default().usb_protocol, UsbProtocol::Rndis);
    assert_eq!(
        Settings::parse("usb_protocol = ecm\n")
            .unwrap()
            .usb_protocol,
        UsbProtocol::Ecm
    );
    assert_eq!(
        Settings::parse("usb_protocol = RNDIS\n")
            .unwrap()
            .usb_protocol,
        UsbProtocol::Rndis
    );
    let error = Settings::parse("usb_protocol = ncm\n").unwrap_err();
    assert_eq!(error.line, 1);
    assert_eq!(
        error.to_string(),
        "BRAMBLE.TXT line 1: usb_protocol = ncm: expected `rndis` or `ecm`"
    );
}

#[test]
fn https_settings_default_to_plain_http() {
    let d = Settings::default();
    assert_eq!(d.https, HttpsMode::Off);
    assert_eq!(d.https_port, 443);
    assert_eq!(d.hsts_seconds, None);
    assert_eq!(d.tls_certificate.as_str(), "CERT.PEM");
    assert_eq!(d.tls_key.as_str(), "KEY.PEM");
    assert_eq!(d.sni, SniPolicy::Any);
    assert!(d.ntp && d.ntp_servers.is_empty());
}

#[test]
fn https_settings_are_applied() {
    let s = Settings::parse(
        "https = only\nhttps_port = 8443\nhsts = 31536000\ntls_certificate = site.crt\n\
         tls_key = site.key\nsni = certificate\nntp = time.example.org, 10.0.0.1\n",
    )
    .unwrap();
    assert_eq!(s.https, HttpsMode::Only);
    assert_eq!(s.https_port, 8443);
    assert_eq!(s.hsts_seconds, Some(31_536_000));
    assert_eq!(s.tls_certificate.as_str(), "SITE.CRT");
    assert_eq!(s.tls_key.as_str(), "SITE.KEY");
    assert_eq!(s.sni, SniPolicy::Certificate);
    assert!(s.ntp);
    assert_eq!(s.ntp_servers[0].as_str(), "time.example.org");
    assert_eq!(s.ntp_servers[0].address(), None);
    assert_eq!(s.ntp_servers[1].address(), Some(Ipv4Addr::new(10, 0, 0, 1)));
    assert_eq!(
        NtpServer::new("pool.ntp.org.").unwrap().as_str(),
        "pool.ntp.org"
    );
    let off = Settings::parse("https = on\nntp = off\n").unwrap();
    assert!(!off.ntp && off.ntp_servers.is_empty());
    assert_eq!(Settings::parse("hsts = off\n").unwrap().hsts_seconds, None);
}

#[test]
fn bad_https_settings_are_named() {
    assert_eq!(problem_of("https = maybe"), Problem::NotAnHttpsMode);
    assert_eq!(problem_of("hsts = forever"), Problem::NotAnHstsSetting);
    assert_eq!(problem_of("hsts = 0"), Problem::NotAnHstsSetting);
    assert_eq!(problem_of("hsts = 99999999999"), Problem::NotAnHstsSetting);
    assert_eq!(problem_of("hsts = +5"), Problem::NotAnHstsSetting);
    assert_eq!(
        problem_of("tls_certificate = certificate.pem"),
        Problem::NotACardFileName
    );
    assert_eq!(problem_of("tls_key = a/b.pem"), Problem::NotACardFileName);
    assert_eq!(problem_of("tls_key = .pem"), Problem::NotACardFileName);
    assert_eq!(problem_of("tls_key = key.pem4"), Problem::NotACardFileName);
    assert_eq!(problem_of("sni = some"), Problem::NotAnSniPolicy);
    assert_eq!(problem_of("ntp = bad_name!"), Problem::NotAServer);
    assert_eq!(problem_of("ntp = a..b"), Problem::NotAServer);
    assert_eq!(problem_of("ntp = a, b, c, d"), Problem::TooManyNtpServers);
    assert_eq!(problem_of("https_port = 80"), Problem::SamePortTwice);
}

#[test]
fn https_port_clash_falls_back_to_a_free_port() {
    let (s, errors) = lenient("http_port = 443\n");
    assert_eq!(errors.len(), 1);
    assert_eq!(s.https_port, 8443);
    assert!(
        errors[0].to_string().contains("https_port"),
        "{}",
        errors[0]
    );
}

#[test]
fn ipv6_settings() {
    let d = Settings::default();
    assert!(d.ipv6);
    assert_eq!((d.address6, d.gateway6), (None, None));
    let s =
        Settings::parse("ipv6 = off\naddress6 = 2001:DB8:1::50/64\ngateway6 = fe80::1\n").unwrap();
    assert!(!s.ipv6);
    assert_eq!(
        s.address6,
        Some(StaticAddress6 {
            address: "2001:db8:1::50".parse().unwrap(),
            prefix_len: 64
        })
    );
    assert_eq!(s.gateway6, Some("fe80::1".parse::<Ipv6Addr>().unwrap()));
    assert_eq!(Settings::parse("address6 = AUTO").unwrap().address6, None);
    assert_eq!(
        Settings::parse("address6 = fd00::1/128")
            .unwrap()
            .address6
            .map(|a| a.to_string()),
        Some("fd00::1/128".to_string())
    );
    for (line, problem) in [
        ("ipv6 = maybe", Problem::NotOnOff),
        ("address6 = 2001:db8::50", Problem::NotAnAddress6Mode),
        ("address6 = 192.168.1.5/24", Problem::NotAnAddress6Mode),
        ("address6 = 2001:db8::50/0", Problem::BadPrefixLength6),
        ("address6 = 2001:db8::50/129", Problem::BadPrefixLength6),
        ("address6 = 2001:db8::50/+64", Problem::BadPrefixLength6),
        ("address6 = fe80::5/64", Problem::NotAHostAddress6),
        ("address6 = ::/64", Problem::NotAHostAddress6),
        ("address6 = ::1/128", Problem::NotAHostAddress6),
        ("address6 = ff02::1/64", Problem::NotAHostAddress6),
        ("address6 = ::ffff:10.0.0.1/96", Problem::NotAHostAddress6),
        ("gateway6 = fe80::1/64", Problem::NotAnIpv6Address),
        ("gateway6 = router", Problem::NotAnIpv6Address),
        ("gateway6 = ff02::2", Problem::NotAHostAddress6),
    ] {
        assert_eq!(problem_of(line), problem, "{line}");
    }
}

#[test]
fn acme_settings_are_applied() {
    let d = Settings::default();
    assert!(!d.acme && d.domains.is_empty() && d.acme_email.is_none());
    assert_eq!(d.acme_directory.as_str(), DEFAULT_ACME_DIRECTORY);
    assert_eq!(d.certificate_store, CertificateStore::Card);
    assert_eq!(d.acme_challenge, AcmeChallenge::Http01);
    let s = Settings::parse(
        "https = on\nacme = on\ndomain = Example.org, www.example.org.\n\
         acme_directory = https://acme.test:14000/dir\nacme_email = owner@example.org\n\
         acme_ca_certificate = pebble.pem\ncertificate_store = ram\n\
         acme_challenge = tls-alpn-01\n",
    )
    .unwrap();
    assert_eq!(s.acme_challenge, AcmeChallenge::TlsAlpn01);
    assert!(s.acme);
    let names: Vec<&str> = s.domains.iter().map(|name| name.as_str()).collect();
    assert_eq!(names, ["example.org", "www.example.org"]);
    assert_eq!(s.acme_directory.as_str(), "https://acme.test:14000/dir");
    assert_eq!(s.acme_email.as_deref(), Some("owner@example.org"));
    assert_eq!(
        s.acme_ca_certificate.as_ref().map(|name| name.as_str()),
        Some("PEBBLE.PEM")
    );
    assert_eq!(s.certificate_store, CertificateStore::Ram);
}

#[test]
fn bad_acme_settings_are_named() {
    assert_eq!(problem_of("acme = sometimes"), Problem::NotOnOff);
    assert_eq!(problem_of("domain = localhost"), Problem::NotADomainName);
    // A wildcard only with dns-01 (wildcard_names_need_dns01_and_dns01_needs_ddns).
    assert_eq!(
        problem_of("domain = *.example.org"),
        Problem::WildcardNeedsDns01
    );
    assert_eq!(
        problem_of("domain = x.*.example.org"),
        Problem::NotADomainName
    );
    assert_eq!(problem_of("domain = 10.0.0.1"), Problem::NotADomainName);
    assert_eq!(
        problem_of("domain = a.b, c.d, e.f, g.h, i.j"),
        Problem::TooManyDomains
    );
    assert_eq!(
        problem_of("acme_directory = http://ca.example/dir"),
        Problem::NotAnHttpsUrl
    );
    assert_eq!(
        problem_of("acme_directory = https:///dir"),
        Problem::NotAnHttpsUrl
    );
    assert_eq!(problem_of("acme_email = owner"), Problem::NotAnEmailAddress);
    assert_eq!(
        problem_of("acme_email = a@b@c.d"),
        Problem::NotAnEmailAddress
    );
    assert_eq!(
        problem_of("acme_ca_certificate = pebble-root.pem"),
        Problem::NotACardFileName
    );
    assert_eq!(
        problem_of("certificate_store = disk"),
        Problem::NotACertificateStore
    );
    assert_eq!(
        problem_of("acme_challenge = dns-02"),
        Problem::NotAnAcmeChallenge
    );
    // acme = on without names: reported, and ACME stays off.
    let (s, errors) = lenient("acme = on\n");
    assert!(!s.acme);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].problem, Problem::AcmeWithoutDomain);
    assert_eq!(errors[0].line, 1);
}

#[test]
fn connections_per_address_is_off_or_a_count() {
    assert_eq!(Settings::default().connections_per_address, None);
    let parsed = Settings::parse("connections_per_address = 40\n").unwrap();
    assert_eq!(parsed.connections_per_address, Some(40));
    let parsed = Settings::parse("connections_per_address = OFF\n").unwrap();
    assert_eq!(parsed.connections_per_address, None);
    assert!(Settings::parse("connections_per_address = 0\n").is_err());
    assert!(Settings::parse("connections_per_address = many\n").is_err());
}

#[test]
fn dynamic_dns_needs_its_name_server_and_key() {
    let text = "ddns = rfc2136\nddns_name = home.example.org\nddns_server = 192.0.2.53:5353\n\
                ddns_key = hmac-sha256:home-key:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n\
                ddns_ipv4 = interface\nddns_ipv6 = off\n";
    let parsed = Settings::parse(text).unwrap();
    let ddns = &parsed.ddns;
    assert_eq!(ddns.protocol, bramble_settings::DdnsProtocol::Rfc2136);
    assert_eq!(ddns.zone(), Some("example.org"));
    assert_eq!(
        ddns.server,
        Some((std::net::IpAddr::V4(Ipv4Addr::new(192, 0, 2, 53)), 5353))
    );
    assert_eq!(ddns.key.as_ref().unwrap().secret.len(), 32);
    assert_eq!(ddns.ipv4, bramble_settings::Ipv4Source::Interface);
    assert!(!ddns.ipv6);
    // Without the key: reported on the `ddns` line, and dynamic DNS stays off.
    let (s, errors) =
        lenient("ddns = rfc2136\nddns_name = home.example.org\nddns_server = 192.0.2.53\n");
    assert_eq!(s.ddns.protocol, bramble_settings::DdnsProtocol::Off);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].problem, Problem::DdnsIncomplete("ddns_key"));
    assert_eq!(errors[0].line, 1);
}

#[test]
fn ipv6_secret_is_board_or_32_hex_digits() {
    let parsed = Settings::parse("ipv6_secret = 00112233445566778899AaBbCcDdEeFf").unwrap();
    assert_eq!(
        parsed.ipv6_secret,
        Some([
            0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
            0xee, 0xff
        ])
    );
    assert_eq!(
        Settings::parse("ipv6_secret = BOARD").unwrap().ipv6_secret,
        None
    );
    for bad in [
        "0011223344556677889900aabbccddee00",
        "0011223344556677889900aabbccdd",
        "0011223344556677889900aabbccddgg",
        "+0112233445566778899aabbccddeeff",
        "random",
    ] {
        assert_eq!(
            problem_of(&format!("ipv6_secret = {bad}")),
            Problem::NotASecret,
            "{bad}"
        );
    }
}

#[test]
fn wildcard_names_need_dns01_and_dns01_needs_ddns() {
    let ddns = "ddns = rfc2136\nddns_name = home.example.org\nddns_server = 192.0.2.53\n\
                ddns_key = hmac-sha256:k:MDEyMzQ1Njc4OWFiY2RlZg==\n";
    let text = format!(
        "https = on\nacme = on\nacme_challenge = dns-01\ndomain = example.org, *.Example.org\n{ddns}"
    );
    let parsed = Settings::parse(&text).unwrap();
    let names: Vec<&str> = parsed.domains.iter().map(|n| n.as_str()).collect();
    assert_eq!(names, ["example.org", "*.example.org"]);
    // Without dns-01 the wildcard is left out, and said so.
    let (s, errors) = lenient("https = on\nacme = on\ndomain = example.org, *.example.org\n");
    assert_eq!(s.domains.len(), 1);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].problem, Problem::WildcardNeedsDns01);
    // dns-01 without dynamic DNS is reported.
    let (_, errors) =
        lenient("https = on\nacme = on\nacme_challenge = dns-01\ndomain = example.org\n");
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].problem, Problem::Dns01WithoutDdns);
    assert!(Settings::parse("domain = *.*.example.org\n").is_err());
    assert!(Settings::parse("ddns_name = *.example.org\n").is_err());
}

#[test]
fn publish_url_and_its_interval() {
    let settings = Settings::parse(
        "publish_url = https://static.example/garden/manifest\npublish_every = 60\n",
    )
    .unwrap();
    assert_eq!(
        settings.publish_url.as_deref(),
        Some("https://static.example/garden/manifest")
    );
    assert_eq!(settings.publish_every, 60);
    assert_eq!(Settings::default().publish_url, None);
    assert_eq!(Settings::default().publish_every, 15);
    for bad in [
        "publish_url = http://static.example/manifest",
        "publish_url = https:///manifest",
        "publish_every = 0",
        "publish_every = 1441",
    ] {
        assert!(Settings::parse(bad).is_err(), "{bad}");
    }
    assert_eq!(
        Settings::parse("publish_url = off"),
        Ok(Settings::default())
    );
}
