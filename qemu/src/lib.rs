//! QEMU argument sets (being written).
