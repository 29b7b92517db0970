//! The QEMU human monitor over its Unix socket (`QemuConfig::monitor_socket`): tests use it to
//! change the machine under a running guest (take a link down, pull the SD card).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// What the monitor prints when it waits for a command.
const PROMPT: &str = "(qemu) ";

/// A connection to a guest's monitor.
pub struct Monitor {
    stream: UnixStream,
}

impl Monitor {
    /// Connects to the monitor socket (QEMU creates it while starting) and reads the banner.
    pub fn connect(path: &Path) -> Monitor {
        let deadline = Instant::now() + Duration::from_secs(30);
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(stream) => break stream,
                Err(error) if Instant::now() > deadline => {
                    panic!(
                        "cannot connect to the QEMU monitor at {}: {error}",
                        path.display()
                    )
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("set the monitor's read timeout");
        let mut monitor = Monitor { stream };
        monitor.read_to_prompt();
        monitor
    }

    /// Reads until the next prompt; returns what came before it.
    fn read_to_prompt(&mut self) -> String {
        let mut text = Vec::new();
        let mut byte = [0u8; 1];
        while !text.ends_with(PROMPT.as_bytes()) {
            let n = self
                .stream
                .read(&mut byte)
                .expect("reading from the QEMU monitor");
            assert!(n == 1, "the QEMU monitor closed its socket");
            text.push(byte[0]);
        }
        String::from_utf8_lossy(&text[..text.len() - PROMPT.len()]).to_string()
    }

    /// Runs `command` and returns the monitor's reply (without the echoed command line).
    pub fn run(&mut self, command: &str) -> String {
        self.stream
            .write_all(format!("{command}\n").as_bytes())
            .expect("writing to the QEMU monitor");
        let reply = self.read_to_prompt();
        // The monitor echoes the line being edited (with cursor escapes) up to a newline.
        reply
            .split_once('\n')
            .map(|(_, rest)| rest.trim().to_string())
            .unwrap_or_default()
    }
}
