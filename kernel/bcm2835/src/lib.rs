//! BCM2835 drivers (being written).
#![no_std]
