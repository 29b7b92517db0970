//! Fuzz target: what a UPnP IGD sends back: an SSDP answer, a device description, SOAP
//! answers. The parsers and the client must never panic, and a control URL found must be
//! one the scanner could read out of the bytes.
#![no_main]

use bramble_proto::portmap::upnp::{
    external_address, find_control_url, parse_search_answer, parse_soap, parse_url,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = parse_search_answer(data);
    if let Ok(text) = core::str::from_utf8(data) {
        let _ = parse_url(text);
    }
    let base = parse_url("http://192.168.1.1:5000/rootDesc.xml").unwrap();
    if let Some((url, service)) = find_control_url(data, &base) {
        assert!(service.contains("Connection"));
        assert!(url.path.starts_with('/'));
    }
    if let Some(bramble_proto::portmap::upnp::SoapAnswer::Ok(body)) = parse_soap(data) {
        let _ = external_address(body);
    }
});
