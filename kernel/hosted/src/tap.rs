//! A Linux TAP device (`/dev/net/tun`, `IFF_TAP | IFF_NO_PI`) as a [`EthernetDevice`].

use bramble_hal::ethernet::MAX_FRAME_LEN;
use bramble_hal::{DeviceError, EthernetDevice, LinkState, MacAddress};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

/// `TUNSETIFF`: `_IOW('T', 202, int)` from `<linux/if_tun.h>`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// `IFF_TAP` from `<linux/if_tun.h>`: Ethernet frames, not IP packets.
const IFF_TAP: libc::c_short = 0x0002;
/// `IFF_NO_PI` from `<linux/if_tun.h>`: no 4-byte packet-information prefix.
const IFF_NO_PI: libc::c_short = 0x1000;
/// How long a link check is reused. The appliance asks for the link state on every turn of
/// its loop; under load that is thousands of `SIOCGIFFLAGS` ioctls a second for a state that
/// changes when someone types `ip link set`. A tenth of a second is far below what a person
/// (or the link tests' 10 s) can notice.
const LINK_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// `struct ifreq` as `TUNSETIFF` reads it: the name and the flags word of the union.
#[repr(C)]
struct InterfaceRequest {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// An open TAP interface. The guest side of the wire: frames the host kernel sends to the
/// interface arrive here, and frames written here appear on the interface.
pub struct TapDevice {
    file: File,
    /// The interface name as the kernel returned it (NUL-padded).
    name: [libc::c_char; libc::IFNAMSIZ],
    mac: MacAddress,
    frame: [u8; MAX_FRAME_LEN + 4],
    /// A datagram socket kept open for the `SIOCGIFFLAGS` ioctl.
    control: File,
    /// The last link check: when, and what it found.
    link: Option<(Instant, LinkState)>,
}

impl TapDevice {
    /// Attaches to (or creates) the TAP interface `name`; frames are sent from `mac`.
    /// Needs `CAP_NET_ADMIN` unless the interface already exists and belongs to the user.
    pub fn open(name: &str, mac: MacAddress) -> io::Result<Self> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("TAP name {name:?} must be 1-15 bytes"),
            ));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")?;
        let mut request = InterfaceRequest {
            name: [0; libc::IFNAMSIZ],
            flags: IFF_TAP | IFF_NO_PI,
            _pad: [0; 22],
        };
        for (slot, byte) in request.name.iter_mut().zip(name.bytes()) {
            *slot = byte as libc::c_char;
        }
        // SAFETY: `file` is an open /dev/net/tun descriptor and `request` is a live,
        // correctly laid out `struct ifreq` (name, then the flags of the union, padded to the
        // kernel's 40 bytes) that outlives the call; TUNSETIFF only reads and writes it.
        let result = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF, &mut request) };
        if result < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            file,
            name: request.name,
            mac,
            frame: [0; MAX_FRAME_LEN + 4],
            control: control_socket()?,
            link: None,
        })
    }

    /// Whether the host has the interface administratively up (`IFF_UP`).
    pub fn host_side_up(&self) -> io::Result<bool> {
        let mut request = InterfaceRequest {
            name: self.name,
            flags: 0,
            _pad: [0; 22],
        };
        // SAFETY: `request` is a live `struct ifreq` with the interface name set, outliving
        // the call; SIOCGIFFLAGS writes only the flags field of it.
        let result =
            unsafe { libc::ioctl(self.control.as_raw_fd(), libc::SIOCGIFFLAGS, &mut request) };
        if result < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(request.flags & libc::IFF_UP as libc::c_short != 0)
    }

    /// The file descriptor, for `poll(2)`.
    pub fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// An `AF_INET` datagram socket, the handle interface ioctls go through.
fn control_socket() -> io::Result<File> {
    // SAFETY: plain socket(2) call; the descriptor is checked and wrapped in `File` (which
    // closes it) before any other use.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

impl EthernetDevice for TapDevice {
    fn mac_address(&self) -> MacAddress {
        self.mac
    }

    fn link_state(&mut self) -> LinkState {
        // The carrier is up while the descriptor is open; what a cable pull looks like here
        // is the host side taking the interface down (`ip link set NAME down`).
        if let Some((checked, state)) = self.link
            && checked.elapsed() < LINK_CHECK_INTERVAL
        {
            return state;
        }
        let state = match self.host_side_up() {
            Ok(false) => LinkState::Down,
            _ => LinkState::Up,
        };
        self.link = Some((Instant::now(), state));
        state
    }

    fn receive<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, DeviceError> {
        loop {
            match self.file.read(&mut self.frame) {
                Ok(0) => return Ok(None),
                Ok(len) => return Ok(Some(f(&self.frame[..len]))),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("tap: read failed: {e}");
                    return Err(DeviceError::Transfer);
                }
            }
        }
    }

    fn can_transmit(&mut self) -> bool {
        true
    }

    fn transmit<R>(
        &mut self,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, DeviceError> {
        if len > MAX_FRAME_LEN {
            return Err(DeviceError::FrameTooLarge);
        }
        let result = f(&mut self.frame[..len]);
        match self.file.write(&self.frame[..len]) {
            Ok(_) => Ok(result),
            // The interface's queue is full: the frame is lost, as on a busy wire.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(DeviceError::Busy),
            // Typically EIO while the host side is down.
            Err(e) => {
                log::debug!("tap: write failed: {e}");
                Err(DeviceError::Transfer)
            }
        }
    }

    /// The kernel queues frames for the TAP file descriptor, which the caller waits on: no
    /// timed work.
    fn poll_at(&mut self) -> Option<bramble_hal::Instant> {
        None
    }

    fn poll_timers(&mut self) -> bool {
        false
    }
}
