//! Bramble site-image format (to be written).
#![no_std]
