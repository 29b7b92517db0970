//! The model's wire: an existing TAP device (created by the test inside its network
//! namespace), opened through `/dev/net/tun` without packet information headers.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags in the union.
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

const TUNSETIFF: libc::c_ulong = 0x4004_54CA;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;

/// Attaches to the TAP device `name`; reads and writes on the file are whole frames.
pub fn open(name: &str) -> io::Result<File> {
    if name.is_empty() || name.len() >= 16 || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {name:?}"),
        ));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")?;
    let mut request = IfReq {
        name: [0; 16],
        flags: IFF_TAP | IFF_NO_PI,
        _pad: [0; 22],
    };
    request.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes a `struct ifreq` (40 bytes on Linux); `request` is
    // a live, properly sized and aligned #[repr(C)] value with that layout, and `file` is
    // an open /dev/net/tun descriptor for the duration of the call.
    let result =
        unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, &mut request as *mut IfReq) };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ifreq_has_the_kernel_layout() {
        assert_eq!(std::mem::size_of::<super::IfReq>(), 40);
        assert!(super::open("").is_err());
        assert!(super::open("a-name-that-is-far-too-long").is_err());
    }
}
