//! The mDNS responder's UDP socket: queries in, answers, probes and announcements out.

use super::Appliance;
use crate::mdns::{self, Destination};
use bramble_hal::{EthernetDevice, Instant};
use smoltcp::socket::udp;
use smoltcp::wire::{IpAddress, IpEndpoint, Ipv4Address};

/// Largest mDNS message the responder writes or reads whole.
const MDNS_MESSAGE_LEN: usize = 512;

impl<'a, D: EthernetDevice> Appliance<'a, D> {
    pub(super) fn poll_mdns(&mut self, now: Instant) {
        let Some((handle, responder)) = &mut self.mdns else {
            return;
        };
        let socket = self.sockets.get_mut::<udp::Socket>(*handle);
        let mut out = [0u8; MDNS_MESSAGE_LEN];
        while let Ok((datagram, meta)) = socket.recv() {
            let IpAddress::Ipv4(source) = meta.endpoint.addr;
            let reply = responder.handle(
                datagram,
                (source.octets(), meta.endpoint.port),
                now,
                &mut out,
            );
            match reply {
                Ok(Some((len, destination))) => {
                    let endpoint = match destination {
                        Destination::Multicast => IpEndpoint::new(
                            Ipv4Address::from_octets(mdns::MDNS_GROUP).into(),
                            mdns::MDNS_PORT,
                        ),
                        Destination::Unicast(address, port) => {
                            IpEndpoint::new(Ipv4Address::from_octets(address).into(), port)
                        }
                    };
                    if socket.send_slice(&out[..len], endpoint).is_err() {
                        log::debug!("mdns: transmit queue full; answer dropped");
                    }
                }
                Ok(None) => {}
                Err(_) => self.counters.mdns_malformed += 1,
            }
        }
        if let Some(len) = responder.poll(now, &mut out) {
            let group = IpEndpoint::new(
                Ipv4Address::from_octets(mdns::MDNS_GROUP).into(),
                mdns::MDNS_PORT,
            );
            if socket.send_slice(&out[..len], group).is_err() {
                log::debug!("mdns: transmit queue full; probe or announcement dropped");
            }
        }
    }
}
