//! The appliance the board runs, named once: the network loop (`bramble_net`) over the USB
//! NIC.

use bramble_bcm2835::dwc2::Dwc2Host;
use bramble_net::appliance::Appliance;
use bramble_usb::recovery::ReprobingNic;

/// The running appliance over the USB NIC, which is probed again whenever it goes away.
pub type Network = Appliance<'static, ReprobingNic<Dwc2Host>>;
