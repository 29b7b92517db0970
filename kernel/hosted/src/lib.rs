//! The Bramble appliance as a Linux process over a TAP device (to be written).
