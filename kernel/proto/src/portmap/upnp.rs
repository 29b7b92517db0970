//! UPnP IGD, the fallback when the gateway speaks neither PCP nor NAT-PMP: the SSDP search
//! (UDP multicast to 239.255.255.250:1900) and a checked reading of its answers, the device
//! description's control URL found by a small bounded scanner (no XML parser: the scanner
//! looks for a WANIPConnection or WANPPPConnection `<serviceType>` and the `<controlURL>` of
//! the same `<service>`), and the SOAP requests (AddPortMapping, GetExternalIPAddress,
//! DeletePortMapping) with a checked reading of their HTTP answers.
//!
//! Everything here works on byte slices with checked bounds; nothing allocates.

use core::fmt::Write;

/// SSDP's multicast group and port.
pub const SSDP_GROUP: [u8; 4] = [239, 255, 255, 250];
/// See [`SSDP_GROUP`].
pub const SSDP_PORT: u16 = 1900;
/// The services that map ports, in order of preference.
const SERVICES: [&str; 3] = [
    "urn:schemas-upnp-org:service:WANIPConnection:2",
    "urn:schemas-upnp-org:service:WANIPConnection:1",
    "urn:schemas-upnp-org:service:WANPPPConnection:1",
];
/// Longest path kept (a control URL's or the description's).
pub const MAX_PATH_LEN: usize = 128;

/// The M-SEARCH request (UPnP Device Architecture 1.1 §1.3.2), MX 2.
pub const fn search_request() -> &'static [u8] {
    b"M-SEARCH * HTTP/1.1\r\nHOST: 239.255.255.250:1900\r\nMAN: \"ssdp:discover\"\r\n\
      MX: 2\r\nST: urn:schemas-upnp-org:device:InternetGatewayDevice:1\r\n\r\n"
}

/// An `http://A.B.C.D[:PORT]/path` URL (IPv4 only: the gateway's own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpUrl {
    /// The host's address.
    pub address: [u8; 4],
    /// The port (80 when not named).
    pub port: u16,
    /// The path, `/` at least.
    pub path: heapless::String<MAX_PATH_LEN>,
}

fn ipv4(text: &str) -> Option<[u8; 4]> {
    let mut out = [0u8; 4];
    let mut parts = text.split('.');
    for slot in &mut out {
        let part = parts.next()?;
        if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *slot = part.parse().ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// Parses `http://A.B.C.D[:PORT][/path]`.
pub fn parse_url(text: &str) -> Option<HttpUrl> {
    let rest = text
        .get(..7)?
        .eq_ignore_ascii_case("http://")
        .then(|| &text[7..])?;
    let (authority, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    let (host, port) = match authority.split_once(':') {
        Some((host, port)) => {
            let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
            (host, port)
        }
        None => (authority, 80),
    };
    if path.bytes().any(|b| !b.is_ascii_graphic()) {
        return None;
    }
    Some(HttpUrl {
        address: ipv4(host)?,
        port,
        path: heapless::String::try_from(path).ok()?,
    })
}

/// The LOCATION of an SSDP answer (an `HTTP/1.1 200` whose ST or USN names an Internet
/// Gateway Device), if it is one.
pub fn parse_search_answer(bytes: &[u8]) -> Option<HttpUrl> {
    let text = core::str::from_utf8(bytes).ok()?;
    let mut lines = text.split("\r\n");
    let status = lines.next()?;
    if !status.starts_with("HTTP/1.1 200") && !status.starts_with("HTTP/1.0 200") {
        return None;
    }
    let mut location = None;
    let mut gateway = false;
    for line in lines.take(32) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("location") {
            location = parse_url(value);
        } else if (name.eq_ignore_ascii_case("st") || name.eq_ignore_ascii_case("usn"))
            && value.contains("InternetGatewayDevice")
        {
            gateway = true;
        }
    }
    location.filter(|_| gateway)
}

/// Finds `needle` in `haystack` from `from`, ASCII case-insensitively.
fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    let tail = haystack.get(from..)?;
    if needle.is_empty() || tail.len() < needle.len() {
        return None;
    }
    (0..=tail.len() - needle.len())
        .find(|&i| tail[i..i + needle.len()].eq_ignore_ascii_case(needle))
        .map(|i| i + from)
}

/// The text of the first `<tag>...</tag>` element at or after `from` and before `end`.
fn element<'d>(doc: &'d [u8], tag: &str, from: usize, end: usize) -> Option<(&'d str, usize)> {
    let mut open: heapless::String<48> = heapless::String::new();
    write!(open, "<{tag}>").ok()?;
    let mut close: heapless::String<48> = heapless::String::new();
    write!(close, "</{tag}>").ok()?;
    let start = find(doc, open.as_bytes(), from)? + open.len();
    let stop = find(doc, close.as_bytes(), start)?;
    if stop > end {
        return None;
    }
    let text = core::str::from_utf8(doc.get(start..stop)?).ok()?;
    Some((text.trim(), stop + close.len()))
}

/// The control URL of the description's port-mapping service (WANIPConnection:2 or :1, else
/// WANPPPConnection:1) and the service's type, resolved against `base` (the description's
/// own URL) when it is a path. At most 64 `<service>` elements are looked at.
pub fn find_control_url(description: &[u8], base: &HttpUrl) -> Option<(HttpUrl, &'static str)> {
    for wanted in SERVICES {
        let mut at = 0;
        for _ in 0..64 {
            let Some(start) = find(description, b"<service>", at) else {
                break;
            };
            let end = find(description, b"</service>", start).unwrap_or(description.len());
            at = end;
            let Some((kind, _)) = element(description, "serviceType", start, end) else {
                continue;
            };
            if kind != wanted {
                continue;
            }
            let (control, _) = element(description, "controlURL", start, end)?;
            let url = if control.starts_with('/') {
                HttpUrl {
                    path: heapless::String::try_from(control).ok()?,
                    ..base.clone()
                }
            } else {
                parse_url(control)?
            };
            return Some((url, wanted));
        }
    }
    None
}

/// Longest SOAP request written.
pub const REQUEST_LEN: usize = 1024;

/// Writes a SOAP `action` request for `service` to `url`, with `arguments` (name, value).
pub fn soap_request(
    url: &HttpUrl,
    service: &str,
    action: &str,
    arguments: &[(&str, &dyn core::fmt::Display)],
) -> Option<heapless::Vec<u8, REQUEST_LEN>> {
    let mut body: heapless::String<768> = heapless::String::new();
    write!(
        body,
        "<?xml version=\"1.0\"?>\r\n<s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\" \
         s:encodingStyle=\"http://schemas.xmlsoap.org/soap/encoding/\"><s:Body>\
         <u:{action} xmlns:u=\"{service}\">"
    )
    .ok()?;
    for (name, value) in arguments {
        write!(body, "<{name}>{value}</{name}>").ok()?;
    }
    write!(body, "</u:{action}></s:Body></s:Envelope>\r\n").ok()?;
    let [a, b, c, d] = url.address;
    let mut out: heapless::String<REQUEST_LEN> = heapless::String::new();
    write!(
        out,
        "POST {} HTTP/1.1\r\nHost: {a}.{b}.{c}.{d}:{}\r\nContent-Type: text/xml; charset=\"utf-8\"\r\n\
         SOAPAction: \"{service}#{action}\"\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        url.path,
        url.port,
        body.len()
    )
    .ok()?;
    heapless::Vec::from_slice(out.as_bytes()).ok()
}

/// A GET of `url` (the device description).
pub fn get_request(url: &HttpUrl) -> Option<heapless::Vec<u8, REQUEST_LEN>> {
    let [a, b, c, d] = url.address;
    let mut out: heapless::String<REQUEST_LEN> = heapless::String::new();
    write!(
        out,
        "GET {} HTTP/1.1\r\nHost: {a}.{b}.{c}.{d}:{}\r\nConnection: close\r\n\r\n",
        url.path, url.port
    )
    .ok()?;
    heapless::Vec::from_slice(out.as_bytes()).ok()
}

/// A SOAP answer, as far as the client reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SoapAnswer<'d> {
    /// 200, with the body.
    Ok(&'d [u8]),
    /// A UPnP error (500 with `<errorCode>`), or another status (its code).
    Error(u16),
}

/// The status and body of a whole HTTP response (`Connection: close`: the body is what
/// follows the head). `None` when it is not one.
pub fn http_response(bytes: &[u8]) -> Option<(u16, &[u8])> {
    let head_end = find(bytes, b"\r\n\r\n", 0)?;
    let status = bytes.get(..12)?;
    if !(status.starts_with(b"HTTP/1.1 ") || status.starts_with(b"HTTP/1.0 ")) {
        return None;
    }
    let code = core::str::from_utf8(&status[9..12]).ok()?.parse().ok()?;
    Some((code, bytes.get(head_end + 4..)?))
}

/// Reads a SOAP answer.
pub fn parse_soap(bytes: &[u8]) -> Option<SoapAnswer<'_>> {
    let (code, body) = http_response(bytes)?;
    if code == 200 {
        return Some(SoapAnswer::Ok(body));
    }
    let upnp = element(body, "errorCode", 0, body.len()).and_then(|(text, _)| text.parse().ok());
    Some(SoapAnswer::Error(upnp.unwrap_or(code)))
}

/// The address in a GetExternalIPAddress answer's body.
pub fn external_address(body: &[u8]) -> Option<[u8; 4]> {
    let (text, _) = element(body, "NewExternalIPAddress", 0, body.len())?;
    ipv4(text)
}

/// UPnP error 725: the IGD keeps only mappings without a lease time.
pub const ERROR_ONLY_PERMANENT_LEASES: u16 = 725;

#[cfg(test)]
mod tests {
    use super::*;

    const DESCRIPTION: &[u8] = b"<?xml version=\"1.0\"?><root><device><serviceList>\
        <service><serviceType>urn:schemas-upnp-org:service:Layer3Forwarding:1</serviceType>\
        <controlURL>/ctl/L3F</controlURL></service></serviceList><deviceList><device>\
        <serviceList><service><serviceType>urn:schemas-upnp-org:service:WANIPConnection:1\
        </serviceType><serviceId>urn:upnp-org:serviceId:WANIPConn1</serviceId>\
        <controlURL>/ctl/IPConn</controlURL><eventSubURL>/evt/IPConn</eventSubURL>\
        </service></serviceList></device></deviceList></device></root>";

    #[test]
    fn search_answers_and_urls() {
        let answer = b"HTTP/1.1 200 OK\r\nCACHE-CONTROL: max-age=120\r\n\
            ST: urn:schemas-upnp-org:device:InternetGatewayDevice:1\r\n\
            LOCATION: http://192.168.77.1:5000/rootDesc.xml\r\nSERVER: x\r\n\r\n";
        let url = parse_search_answer(answer).unwrap();
        assert_eq!(url.address, [192, 168, 77, 1]);
        assert_eq!(url.port, 5000);
        assert_eq!(url.path.as_str(), "/rootDesc.xml");
        assert_eq!(parse_search_answer(b"NOTIFY * HTTP/1.1\r\n\r\n"), None);
        assert_eq!(parse_url("http://host.example/x"), None);
        assert_eq!(parse_url("http://1.2.3.4:0/"), None);
        assert_eq!(parse_url("http://1.2.3.4").unwrap().path.as_str(), "/");
        assert_eq!(parse_url("https://1.2.3.4/"), None);
    }

    #[test]
    fn the_control_url_is_the_wan_services() {
        let base = parse_url("http://192.168.77.1:5000/rootDesc.xml").unwrap();
        let (url, service) = find_control_url(DESCRIPTION, &base).unwrap();
        assert_eq!(url.path.as_str(), "/ctl/IPConn");
        assert_eq!(url.port, 5000);
        assert_eq!(service, "urn:schemas-upnp-org:service:WANIPConnection:1");
        assert_eq!(find_control_url(&DESCRIPTION[..300], &base), None);
    }

    #[test]
    fn soap_requests_and_answers() {
        let url = parse_url("http://192.168.77.1:5000/ctl/IPConn").unwrap();
        let request = soap_request(
            &url,
            SERVICES[1],
            "AddPortMapping",
            &[("NewExternalPort", &80), ("NewProtocol", &"TCP")],
        )
        .unwrap();
        let text = core::str::from_utf8(&request).unwrap();
        assert!(text.starts_with("POST /ctl/IPConn HTTP/1.1\r\nHost: 192.168.77.1:5000\r\n"));
        assert!(text.contains(
            "SOAPAction: \"urn:schemas-upnp-org:service:WANIPConnection:1#AddPortMapping\""
        ));
        assert!(
            text.contains("<NewExternalPort>80</NewExternalPort><NewProtocol>TCP</NewProtocol>")
        );
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&std::format!("Content-Length: {}", body.len())));
        let ok = b"HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\n\r\n<s:Envelope><s:Body>\
            <u:GetExternalIPAddressResponse><NewExternalIPAddress>11.0.0.1</NewExternalIPAddress>\
            </u:GetExternalIPAddressResponse></s:Body></s:Envelope>";
        let Some(SoapAnswer::Ok(body)) = parse_soap(ok) else {
            panic!("not ok");
        };
        assert_eq!(external_address(body), Some([11, 0, 0, 1]));
        let error = b"HTTP/1.1 500 Internal Server Error\r\n\r\n<s:Envelope><s:Body><s:Fault>\
            <detail><UPnPError><errorCode>725</errorCode></UPnPError></detail></s:Fault>";
        assert_eq!(parse_soap(error), Some(SoapAnswer::Error(725)));
        assert_eq!(
            parse_soap(b"HTTP/1.1 404 Not Found\r\n\r\n"),
            Some(SoapAnswer::Error(404))
        );
        assert_eq!(parse_soap(b"HTTP/1.1 200 OK\r\n"), None);
    }
}
