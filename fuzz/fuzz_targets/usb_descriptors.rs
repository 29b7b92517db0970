//! Fuzz target: arbitrary bytes as the descriptors a USB device sends: device, hub, string
//! and configuration descriptors, and the three NIC drivers' searches through a
//! configuration. Every parser must accept or refuse without panicking, and an accepted
//! configuration must be walkable in full. Inputs whose first byte is odd get a
//! configuration header whose wTotalLength matches their length, so mutations reach the
//! descriptors inside instead of stopping at the header.
#![no_main]

use bramble_usb::cdc_ecm::EcmBinding;
use bramble_usb::descriptor::{
    ConfigurationDescriptor, DeviceDescriptor, EndpointKind, HubDescriptor, StringDescriptor,
};
use bramble_usb::rndis::RndisBinding;
use bramble_usb::smsc95xx::SmscBinding;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = rest.to_vec();
    if first & 1 == 1 && bytes.len() >= 9 && bytes.len() <= usize::from(u16::MAX) {
        bytes[1] = 2;
        let total = (bytes.len() as u16).to_le_bytes();
        bytes[2..4].copy_from_slice(&total);
    }
    let _ = DeviceDescriptor::max_packet_size0_from_prefix(&bytes);
    let _ = DeviceDescriptor::parse(&bytes);
    let _ = HubDescriptor::parse(&bytes);
    if let Ok(string) = StringDescriptor::new_checked(&bytes) {
        let _ = string.chars().count();
        let _ = string.first_language();
        let _ = string.to_mac_address();
    }
    let _ = ConfigurationDescriptor::total_length_from_header(&bytes);
    let Ok(config) = ConfigurationDescriptor::new_checked(&bytes) else {
        return;
    };
    let _ = (
        config.num_interfaces(),
        config.value(),
        config.string_index(),
        config.attributes(),
    );
    let mut covered = 0;
    for descriptor in config.descriptors() {
        assert!(descriptor.bytes.len() >= 2);
        covered += descriptor.bytes.len();
    }
    assert!(covered <= config.as_bytes().len());
    for interface in config.interfaces() {
        let _ = (
            interface.number(),
            interface.alternate_setting(),
            interface.num_endpoints(),
            interface.class(),
            interface.subclass(),
            interface.protocol(),
            interface.string_index(),
        );
        for endpoint in interface.endpoints() {
            let _ = (endpoint.is_in(), endpoint.number(), endpoint.kind());
            assert!(endpoint.max_packet_size <= 0x7FF);
        }
        let _ = interface.functional_descriptors().count();
        let _ = interface.ethernet_functional();
        let _ = interface.find_endpoint(EndpointKind::Bulk, true);
        let _ = interface.find_endpoint(EndpointKind::Interrupt, true);
        let _ = config.interface(interface.number(), interface.alternate_setting());
    }
    let _ = RndisBinding::find(&config);
    let _ = EcmBinding::find(&config);
    let _ = SmscBinding::find(&config);
});
