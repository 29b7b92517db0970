//! smoltcp glue and the appliance loop: sockets, DHCP, HTTP connections (to be written).
#![no_std]
