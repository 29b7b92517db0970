//! The server's event loop: listens on a Unix socket for QEMU, runs one [`Session`] per
//! connection against the LAN9514 model, moves frames between the model and the TAP device,
//! writes the register log, and takes fault-injection commands from stdin and a control
//! socket. One thread per input feeds a channel; this loop owns all state.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use crate::device::{Micros, UsbFunction};
use crate::session::Session;
use crate::smsc::{Partner, Smsc95xx};

/// How the server is set up.
#[derive(Clone, Debug)]
pub struct Options {
    /// Unix socket QEMU connects to (`-chardev socket,path=...`).
    pub socket: PathBuf,
    /// TAP device for the wire (must exist; the process must be in its namespace).
    pub tap: Option<String>,
    /// Connect at full speed instead of high speed.
    pub full_speed: bool,
    /// Register log file.
    pub log: Option<PathBuf>,
    /// Control socket for fault-injection commands.
    pub control: Option<PathBuf>,
    /// Fit an EEPROM with this MAC (a Pi B+ has none).
    pub eeprom_mac: Option<[u8; 6]>,
    /// Auto-negotiation time.
    pub aneg: Duration,
    /// Read commands from stdin too.
    pub stdin_commands: bool,
}

/// A fault-injection or query command (one line of text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Pull the cable: link down, PHY interrupt.
    LinkDown,
    /// Plug it back: auto-negotiation, link up, PHY interrupt.
    LinkUp,
    /// Halt the bulk-IN (`true`) or bulk-OUT endpoint until CLEAR_FEATURE(ENDPOINT_HALT).
    Stall(bool),
    /// The next N frames from the wire each come with a CRC-error copy before them.
    RxErrors(u32),
    /// Unplug the device (device_disconnect).
    Unplug,
    /// Plug it in again, powered up from scratch.
    Plug,
    /// Unplug, and plug in again after this many milliseconds.
    Replug(u64),
    /// Hold the next N frames from the wire and let them into the FIFO all at once.
    Burst(u32),
    /// Print the counters.
    Stats,
    /// Put a note in the register log.
    Note(String),
}

impl FromStr for Command {
    type Err = String;

    fn from_str(line: &str) -> Result<Self, String> {
        let mut words = line.split_whitespace();
        let verb = words.next().unwrap_or("");
        let arg = words.next();
        let number = |arg: Option<&str>| -> Result<u64, String> {
            arg.ok_or_else(|| format!("{verb} needs a number"))?
                .parse()
                .map_err(|_| format!("{verb}: not a number"))
        };
        Ok(match (verb, arg) {
            ("link", Some("down")) => Command::LinkDown,
            ("link", Some("up")) => Command::LinkUp,
            ("stall", Some("in")) => Command::Stall(true),
            ("stall", Some("out")) => Command::Stall(false),
            ("rx-errors", _) => Command::RxErrors(number(arg)? as u32),
            ("unplug", None) => Command::Unplug,
            ("plug", None) => Command::Plug,
            ("replug", _) => Command::Replug(number(arg)?),
            ("burst", _) => Command::Burst(number(arg)? as u32),
            ("stats", None) => Command::Stats,
            ("note", Some(_)) => Command::Note(line.trim_start()[4..].trim().to_string()),
            _ => {
                return Err(format!(
                    "unknown command {line:?} (link down|up, stall in|out, rx-errors N, \
                     unplug, plug, replug MS, burst N, stats, note TEXT)"
                ));
            }
        })
    }
}

enum Event {
    Connected(UnixStream),
    Guest(u64, Vec<u8>),
    Closed(u64),
    Wire(Vec<u8>),
    Command(String, Sender<String>),
}

/// Frames held back by a `burst` command.
struct Burst {
    wanted: usize,
    frames: Vec<Vec<u8>>,
    until: Micros,
}

struct Server {
    options: Options,
    start: Instant,
    chip: Smsc95xx,
    session: Option<(u64, Session, UnixStream)>,
    next_connection: u64,
    plugged: bool,
    plug_at: Option<Micros>,
    burst: Option<Burst>,
    /// Frames of a released burst, arriving one after another at the wire's speed.
    wire_queue: std::collections::VecDeque<(Micros, Vec<u8>)>,
    tap: Option<std::fs::File>,
    log: Option<std::fs::File>,
    logged: usize,
    /// Counters kept across connections and re-plugs.
    connections: u64,
    replugs: u64,
    wire_in: u64,
}

/// Runs the server until the process ends; `ready` is called once the socket listens.
pub fn run(options: Options, ready: impl FnOnce(&str)) -> io::Result<()> {
    let _ = std::fs::remove_file(&options.socket);
    let listener = UnixListener::bind(&options.socket)?;
    let (events, inbox) = mpsc::channel();
    spawn_acceptor(listener, events.clone());
    let tap = match &options.tap {
        Some(name) => {
            let file = crate::tap::open(name)
                .map_err(|e| io::Error::new(e.kind(), format!("TAP device {name}: {e}")))?;
            spawn_wire_reader(file.try_clone()?, events.clone());
            Some(file)
        }
        None => None,
    };
    if let Some(path) = &options.control {
        let _ = std::fs::remove_file(path);
        spawn_control(UnixListener::bind(path)?, events.clone());
    }
    if options.stdin_commands {
        spawn_stdin(events.clone());
    }
    let log = match &options.log {
        Some(path) => Some(std::fs::File::create(path)?),
        None => None,
    };
    let chip = new_chip(&options);
    let mut server = Server {
        options,
        start: Instant::now(),
        chip,
        session: None,
        next_connection: 0,
        plugged: true,
        plug_at: None,
        burst: None,
        wire_queue: Default::default(),
        tap,
        log,
        logged: 0,
        connections: 0,
        replugs: 0,
        wire_in: 0,
    };
    ready(&server.options.socket.display().to_string());
    server.serve(inbox, events)
}

fn new_chip(options: &Options) -> Smsc95xx {
    let mut chip = Smsc95xx::new(!options.full_speed, Partner::Switch)
        .with_aneg_time(options.aneg.as_micros() as Micros);
    if let Some(mac) = options.eeprom_mac {
        chip = chip.with_eeprom_mac(mac);
    }
    chip
}

impl Server {
    fn now(&self) -> Micros {
        self.start.elapsed().as_micros() as Micros
    }

    fn serve(&mut self, inbox: Receiver<Event>, events: Sender<Event>) -> io::Result<()> {
        loop {
            let now = self.now();
            let deadline = [
                self.chip.poll(now),
                self.session
                    .as_ref()
                    .and_then(|(_, s, _)| s.next_deadline()),
                self.plug_at,
                self.burst.as_ref().map(|b| b.until),
                self.wire_queue.front().map(|(due, _)| *due),
            ]
            .into_iter()
            .flatten()
            .min();
            let wait = deadline.map_or(100_000, |d| d.saturating_sub(now).clamp(50, 100_000));
            match inbox.recv_timeout(Duration::from_micros(wait)) {
                Ok(event) => self.handle(event, &events),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
            self.after_event()?;
        }
    }

    fn handle(&mut self, event: Event, events: &Sender<Event>) {
        let now = self.now();
        match event {
            Event::Connected(stream) => {
                // A new guest: the device it sees is freshly powered.
                self.next_connection += 1;
                self.connections += 1;
                let id = self.next_connection;
                if let Ok(reader) = stream.try_clone() {
                    spawn_guest_reader(id, reader, events.clone());
                }
                self.chip = new_chip(&self.options);
                self.chip.log_note(now, "guest connected");
                let mut session = Session::new();
                if !self.plugged {
                    session.unplug();
                }
                self.session = Some((id, session, stream));
                println!("usbredir: guest connected");
            }
            Event::Guest(id, bytes) => {
                let Some((current, session, _)) = self.session.as_mut() else {
                    return;
                };
                if *current != id {
                    return;
                }
                let was_announced = session.device_announced();
                if let Err(error) = session.receive(&mut self.chip, now, &bytes) {
                    eprintln!("usbredir: protocol error, dropping the guest: {error}");
                    self.session = None;
                    return;
                }
                if !was_announced && session.device_announced() {
                    println!(
                        "usbredir: device announced to {} at {} speed",
                        session.peer_version().unwrap_or("?"),
                        if self.options.full_speed {
                            "full"
                        } else {
                            "high"
                        }
                    );
                }
            }
            Event::Closed(id) => {
                if self
                    .session
                    .as_ref()
                    .is_some_and(|(current, _, _)| *current == id)
                {
                    self.session = None;
                    println!("usbredir: guest disconnected");
                }
            }
            Event::Wire(frame) => {
                self.wire_in += 1;
                if let Some(burst) = self.burst.as_mut() {
                    burst.frames.push(frame);
                    if burst.frames.len() >= burst.wanted {
                        self.release_burst(now);
                    }
                } else {
                    self.chip.receive_from_wire(now, &frame);
                }
            }
            Event::Command(line, reply) => {
                let answer = match line.parse::<Command>() {
                    Ok(command) => self.command(now, command),
                    Err(error) => format!("error: {error}"),
                };
                let _ = reply.send(answer);
            }
        }
    }

    /// Lets a held burst onto the wire: back to back at 100 Mbit/s (preamble, FCS and the
    /// inter-frame gap included), as a switch would forward a queue of frames.
    fn release_burst(&mut self, now: Micros) {
        if let Some(burst) = self.burst.take() {
            let count = burst.frames.len();
            let mut at = now;
            for frame in burst.frames {
                let bits = (frame.len().max(60) as u64 + 4 + 8 + 12) * 8;
                self.wire_queue.push_back((at, frame));
                at += bits.div_ceil(100);
            }
            self.chip
                .log_note(now, &format!("burst of {count} frames released"));
        }
    }

    fn command(&mut self, now: Micros, command: Command) -> String {
        match command {
            Command::LinkDown => self.chip.set_cable(now, false),
            Command::LinkUp => self.chip.set_cable(now, true),
            Command::Stall(bulk_in) => self.chip.halt_endpoint(now, bulk_in),
            Command::RxErrors(n) => self.chip.inject_rx_errors(n),
            Command::Unplug => self.unplug(now),
            Command::Plug => self.plug(now),
            Command::Replug(ms) => {
                self.unplug(now);
                self.plug_at = Some(now + ms * 1000);
            }
            Command::Burst(n) => {
                self.burst = Some(Burst {
                    wanted: n as usize,
                    frames: Vec::new(),
                    until: now + 5_000_000,
                });
            }
            Command::Stats => return format!("stats: {}", self.stats_line()),
            Command::Note(text) => self.chip.log_note(now, &text),
        }
        "ok".to_string()
    }

    fn stats_line(&self) -> String {
        let session = self
            .session
            .as_ref()
            .map(|(_, s, _)| s.stats)
            .unwrap_or_default();
        format!(
            "link={} plugged={} configured={} fifo_frames={} connections={} replugs={} wire_in={} \
             connects={} disconnects={} cancelled={} resets={} {}",
            if self.chip.link_is_up() { "up" } else { "down" },
            self.plugged,
            self.chip.configuration(),
            self.chip.rx_fifo_frames(),
            self.connections,
            self.replugs,
            self.wire_in,
            session.connects,
            session.disconnects,
            session.cancelled,
            session.resets,
            self.chip.stats.line()
        )
    }

    fn unplug(&mut self, now: Micros) {
        self.chip.log_note(now, "unplugged");
        self.plugged = false;
        if let Some((_, session, _)) = self.session.as_mut() {
            session.unplug();
        }
    }

    fn plug(&mut self, now: Micros) {
        self.plug_at = None;
        if self.plugged {
            return;
        }
        self.plugged = true;
        self.replugs += 1;
        // Power comes back: the chip starts from its reset state.
        let stats = self.chip.stats;
        let log = std::mem::take(&mut self.chip.log);
        self.chip = new_chip(&self.options);
        self.chip.stats = stats;
        self.chip.log = log;
        self.chip.log_note(now, "plugged in");
        if let Some((_, session, _)) = self.session.as_mut() {
            session.plug(&self.chip);
        }
    }

    fn after_event(&mut self) -> io::Result<()> {
        let now = self.now();
        if self.plug_at.is_some_and(|t| now >= t) {
            self.plug(now);
        }
        if self.burst.as_ref().is_some_and(|b| now >= b.until) {
            self.release_burst(now);
        }
        while self.wire_queue.front().is_some_and(|(due, _)| *due <= now) {
            let (_, frame) = self.wire_queue.pop_front().expect("checked");
            self.chip.receive_from_wire(now, &frame);
        }
        self.chip.poll(now);
        let mut drop_session = false;
        if let Some((_, session, stream)) = self.session.as_mut() {
            session.service(&mut self.chip, now);
            let out = session.take_output();
            if !out.is_empty() && stream.write_all(&out).is_err() {
                drop_session = true;
            }
        }
        if drop_session {
            self.session = None;
        }
        for frame in self.chip.take_wire_frames() {
            if let Some(tap) = self.tap.as_mut() {
                // A TAP write takes one frame; an error (interface down) loses the frame
                // as a wire would.
                let _ = tap.write(&frame);
            }
        }
        if let Some(log) = self.log.as_mut() {
            for entry in &self.chip.log[self.logged..] {
                writeln!(log, "{}", entry.line())?;
            }
            self.logged = self.chip.log.len();
            log.flush()?;
        }
        Ok(())
    }
}

fn spawn_acceptor(listener: UnixListener, events: Sender<Event>) {
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            if events.send(Event::Connected(stream)).is_err() {
                break;
            }
        }
    });
}

fn spawn_guest_reader(id: u64, mut stream: UnixStream, events: Sender<Event>) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = events.send(Event::Closed(id));
                    break;
                }
                Ok(n) => {
                    if events.send(Event::Guest(id, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
    });
}

fn spawn_wire_reader(mut tap: std::fs::File, events: Sender<Event>) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = tap.read(&mut buf) {
            if n > 0 && events.send(Event::Wire(buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
}

fn spawn_control(listener: UnixListener, events: Sender<Event>) {
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let events = events.clone();
            std::thread::spawn(move || {
                let Ok(mut writer) = stream.try_clone() else {
                    return;
                };
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    let (reply, answer) = mpsc::channel();
                    if events.send(Event::Command(line, reply)).is_err() {
                        break;
                    }
                    let text = answer
                        .recv()
                        .unwrap_or_else(|_| "error: server gone".into());
                    if writeln!(writer, "{text}").is_err() {
                        break;
                    }
                }
            });
        }
    });
}

fn spawn_stdin(events: Sender<Event>) {
    std::thread::spawn(move || {
        for line in io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if line.trim().is_empty() {
                continue;
            }
            let (reply, answer) = mpsc::channel();
            if events.send(Event::Command(line, reply)).is_err() {
                break;
            }
            if let Ok(text) = answer.recv() {
                println!("{text}");
            }
        }
    });
}

/// Sends one command to a running server's control socket and returns its answer.
pub fn send_command(control: &std::path::Path, line: &str) -> io::Result<String> {
    let mut stream = UnixStream::connect(control)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    writeln!(stream, "{line}")?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer)?;
    Ok(answer.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::Command;

    #[test]
    fn commands_parse() {
        assert_eq!("link down".parse(), Ok(Command::LinkDown));
        assert_eq!("stall in".parse(), Ok(Command::Stall(true)));
        assert_eq!("rx-errors 3".parse(), Ok(Command::RxErrors(3)));
        assert_eq!("replug 500".parse(), Ok(Command::Replug(500)));
        assert_eq!(
            "note first ping".parse(),
            Ok(Command::Note("first ping".into()))
        );
        assert!("burst".parse::<Command>().is_err());
        assert!("explode".parse::<Command>().is_err());
    }
}
