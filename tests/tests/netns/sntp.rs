//! An SNTP responder inside a test namespace, for guests whose certificates are checked
//! against the clock (the ACME tests, the heartbeat in owner_view.rs).

use super::{HOST_ADDRESS, Netns};
use bramble_tests::sntp;
use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// An SNTP responder on the namespace's address, giving the host's time moved on by
/// `offset` seconds (0 unless a test makes a certificate due for renewal).
pub struct Sntp {
    stop: Arc<AtomicBool>,
    /// Seconds added to the host's time.
    pub offset: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sntp {
    /// Starts answering on the namespace's address, port 123.
    pub fn start(netns: &Netns) -> Sntp {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let offset = Arc::new(AtomicU64::new(0));
        let ahead = Arc::clone(&offset);
        let (ready, bound) = std::sync::mpsc::channel();
        let thread = bramble_testkit::netns::spawn_inside(netns.name(), move || {
            let socket = UdpSocket::bind((HOST_ADDRESS, 123)).expect("bind port 123");
            socket
                .set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            ready.send(()).unwrap();
            let mut request = [0u8; 512];
            while !stopping.load(Ordering::Relaxed) {
                let Ok((len, peer)) = socket.recv_from(&mut request) else {
                    continue;
                };
                if len < 48 {
                    continue;
                }
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    + Duration::from_secs(ahead.load(Ordering::Relaxed));
                let _ = socket.send_to(&sntp::reply(&request, now), peer);
            }
        });
        bound
            .recv_timeout(Duration::from_secs(10))
            .expect("the SNTP responder did not start");
        Sntp {
            stop,
            offset,
            thread: Some(thread),
        }
    }
}

impl Drop for Sntp {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
