//! Little-endian reads of the image's fields, checked: out of range reads as 0 (the
//! validation before has ruled that out), and a reference is a range only inside its region.

/// Reads a little-endian `u16` at `offset`, or 0 if out of range (never after validation).
pub(crate) fn read_u16(bytes: &[u8], offset: usize) -> u16 {
    match bytes.get(offset..offset.wrapping_add(2)) {
        Some(&[a, b]) => u16::from_le_bytes([a, b]),
        _ => 0,
    }
}

/// Reads a little-endian `u32` at `offset`, or 0 if out of range (never after validation).
pub(crate) fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    match bytes.get(offset..offset.wrapping_add(4)) {
        Some(&[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]),
        _ => 0,
    }
}

/// Reads a little-endian `u64` at `offset`, or 0 if out of range (never after validation).
pub(crate) fn read_u64(bytes: &[u8], offset: usize) -> u64 {
    u64::from(read_u32(bytes, offset)) | (u64::from(read_u32(bytes, offset.wrapping_add(4))) << 32)
}

/// Reads a `(u32 offset, u32 length)` reference at `field` and returns the range it names,
/// if it lies inside a region of `region_len` bytes.
pub(crate) fn reference(
    record: &[u8],
    field: usize,
    region_len: usize,
) -> Option<core::ops::Range<usize>> {
    let start = usize::try_from(read_u32(record, field)).ok()?;
    let len = usize::try_from(read_u32(record, field.wrapping_add(4))).ok()?;
    let end = start.checked_add(len)?;
    (end <= region_len).then_some(start..end)
}
