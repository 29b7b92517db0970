//! Kernel (being written).
#![no_std]
#![no_main]
