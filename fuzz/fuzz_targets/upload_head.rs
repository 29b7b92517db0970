//! Fuzz target: a site upload's request on a secure connection (`bramble_http::upload`): the
//! `Bramble-Manifest`/`Bramble-Signature` hex fields, `Content-Range`, and the body handed
//! to the upload handler. The input, after a selector byte, is the request as received, in
//! pieces the selector sizes. Nothing may panic; the handler sees its body in order, from
//! the offset it accepted, never past the length the head declared; every field the
//! parser accepts reads back (hex) as it was written.
#![no_main]

use bramble_hal::Instant;
use bramble_http::upload::{
    Answer, SiteUpload, UploadHead, decode_hex, parse_content_range, parse_upload_fields,
};
use bramble_http::{Connection, Server, ServerConfig, SiteSource};
use core::cell::RefCell;
use libfuzzer_sys::fuzz_target;

/// Accepts every head (or refuses it, by the selector) and checks the body's order.
struct Checker {
    refuse: bool,
    next: Option<u64>,
    end: u64,
}

impl SiteUpload for Checker {
    fn state(&mut self, _now: Instant) -> Answer {
        Answer::json(200, |out| out.write_str("{}"))
    }

    fn begin(&mut self, head: &UploadHead<'_>) -> Result<(), Answer> {
        assert!(self.next.is_none(), "a head while a body is open");
        if self.refuse {
            return Err(Answer::error(403, "no", format_args!("refused")));
        }
        self.next = Some(head.offset);
        self.end = head.offset + head.length;
        Ok(())
    }

    fn write(&mut self, offset: u64, data: &[u8], _now: Instant) -> Result<(), Answer> {
        assert_eq!(Some(offset), self.next, "the body out of order");
        let next = offset + data.len() as u64;
        assert!(next <= self.end, "more body than the head declared");
        self.next = Some(next);
        Ok(())
    }

    fn finish(&mut self, _now: Instant) -> Answer {
        assert_eq!(self.next, Some(self.end), "finished early");
        self.next = None;
        Answer::json(200, |out| out.write_str("{}"))
    }

    fn detach(&mut self) {
        self.next = None;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, input)) = data.split_first() else {
        return;
    };
    // The parsers alone: each line as a field value.
    for line in input.split(|&b| b == b'\n') {
        if let Some(bytes) = decode_hex::<128>(line) {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(hex, String::from_utf8_lossy(line.trim_ascii()).to_ascii_lowercase());
        }
        if let Some((first, last, total)) = parse_content_range(line) {
            assert!(first <= last && last < total);
        }
    }
    let fields = input
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let colon = line.iter().position(|&b| b == b':')?;
            Some((core::str::from_utf8(&line[..colon]).ok()?, &line[colon + 1..]))
        });
    if let Ok(fields) = parse_upload_fields(fields, u64::from(selector)) {
        if let Some(total) = fields.total {
            assert_eq!(total - fields.offset, u64::from(selector));
        }
    }
    // The engine: the input as a request stream on an HTTPS connection.
    let handler = RefCell::new(Checker {
        refuse: selector & 1 == 1,
        next: None,
        end: 0,
    });
    let mut server = Server::new(SiteSource::Unavailable("fuzz"), ServerConfig::default());
    server.set_upload(&handler);
    let mut connection = Connection::new();
    let mut now = Instant::from_micros(1);
    connection.open_secure(&mut server, now);
    let piece = usize::from(selector >> 1).max(1);
    let mut out = [0u8; 2048];
    for chunk in input.chunks(piece) {
        let mut at = 0;
        let mut stalls = 0;
        while at < chunk.len() && stalls < 4 {
            let taken = connection.receive(&mut server, &chunk[at..], now);
            at += taken;
            let sent = connection.transmit(&mut server, &mut out, now);
            stalls = if taken == 0 && sent == 0 { stalls + 1 } else { 0 };
        }
        now = now.add_micros(1000);
    }
    while connection.transmit(&mut server, &mut out, now) > 0 {}
    connection.close(&mut server);
    assert!(handler.borrow().next.is_none(), "a body left attached after the close");
});
