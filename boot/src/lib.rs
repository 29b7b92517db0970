//! Pi boot stub (being written).
#![no_std]
