//! The card writer as the HTTPS server's upload handler (`PUT /.well-known/bramble/site`,
//! [`bramble_http::upload`]) and as the pull's, so that one publish at a time goes to the
//! card whichever way it comes.
//!
//! [`PublishService`] owns the [`Publisher`], the card and the read-back's scratch; the board
//! shares it (a `RefCell`) between the HTTP server and the pull. On top of the writer's own
//! checks it keeps:
//!
//! - **one upload at a time:** while a connection's body is arriving, or a pull is fetching,
//!   any other `PUT` is refused (`busy`, 409), even one with the same manifest;
//! - **resume:** a connection that goes away mid-body leaves the upload detached, with the
//!   bytes received (whole blocks on the card, the tail block and the running SHA-256 in
//!   RAM); a `PUT` of the same manifest with `Content-Range` from that byte continues it.
//!   `GET /.well-known/bramble/site` says how far it got;
//! - **abandon on stall:** a detached upload is dropped when an upload of another manifest
//!   begins (its sender gave up on it), or, for the pull, once it has had no byte for
//!   [`RESUME_MICROS`]; the idle slot stays marked not whole, as the writer left it before
//!   its first block;
//! - **a rate limit per source:** at most [`ATTEMPTS_PER_MINUTE`] `PUT` heads a minute from
//!   one address (429), counted before the Ed25519 check they would cost;
//! - **no write while held:** the idle slot is still being read by responses of the site
//!   switched away from ([`PublishService::hold`]): a manifest that checks is answered
//!   `retiring` (503) until they are done.
//!
//! A refusal is `{"error":"CODE","message":"..."}` with the writer's status and code; a
//! publish answers `{"published":VERSION,"length":BYTES,"slot":"A"|"B","blocks":N}` once the
//! slot was read back, verified and made live; the board then switches to it
//! ([`PublishService::take_published`]) between requests. A signed rollback manifest comes
//! as a `PUT` with no body (`bramble publish --rollback --to`) and is answered at its head:
//! `{"rolled_back":VERSION,"slot":"A"|"B","live_version":V,"length":BYTES}` (one record
//! block), or its refusal.
//!
//! **A nudge** (`bramble publish --nudge --to`): a board that pulls (`publish_url`) checks
//! its manifest on a schedule; the owner's CI, having uploaded a new version to the static
//! host, can have it check at once by sending that version's signed manifest in a `PUT`
//! with no body. It is checked as an upload's head is (signature, host, a version above the
//! accepted one, the rate limit), answered `{"nudged":VERSION,...}` (202), and the pull
//! starts its next check now ([`PublishService::take_nudge`]); what it then fetches is
//! checked in full as any pulled manifest and image are. A replayed nudge costs one
//! manifest fetch at most, and none once its version is live (an old version, 409). On a
//! board that does not pull, an empty body is refused (`no-pull`, 400): send the image.

use crate::manifest::{Manifest, ManifestError};
use crate::writer::{PublishError, Publisher};
use bramble_fat::site_slots::{SlotRecord, Slots};
use bramble_hal::Instant;
use bramble_hal::block::{BlockDevice, BlockError, BlockWrite};
use bramble_http::upload::{Answer, SiteUpload, UploadHead};
use core::fmt::Write as _;
use core::net::IpAddr;

/// A detached upload (its connection gone) with no byte for this long is abandoned when
/// the pull begins (an upload of another manifest replaces it at once).
pub const RESUME_MICROS: u64 = 120_000_000;
/// Upload attempts (`PUT` heads) one source may make per minute.
pub const ATTEMPTS_PER_MINUTE: u32 = 10;
/// Sources the rate limit remembers (the oldest window gives way).
const SOURCES: usize = 8;
const MINUTE_MICROS: u64 = 60_000_000;

/// Who is writing the idle slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// Nobody: the next begin may start.
    Idle,
    /// A network upload, `attached` while its connection sends the body.
    Upload {
        /// Its connection is sending the body.
        attached: bool,
    },
    /// The pull is fetching an image.
    Pull,
}

/// What uploads have done, for the status line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UploadCounters {
    /// Upload heads answered.
    pub attempts: u64,
    /// Sites uploaded, verified and made live.
    pub published: u64,
    /// Heads or bodies refused (signature, host, version, size, busy, hash, rate).
    pub refused: u64,
    /// Uploads resumed after a dropped connection.
    pub resumed: u64,
    /// Detached uploads abandoned after [`RESUME_MICROS`].
    pub abandoned: u64,
    /// Signed rollbacks sent as uploads.
    pub rolled_back: u64,
    /// Signed nudges that started a pull's check.
    pub nudged: u64,
}

/// The card writer, its card and scratch, shared by the upload handler and the pull.
pub struct PublishService<'a> {
    publisher: Publisher,
    card: &'a mut dyn BlockWrite,
    scratch: &'a mut [u8],
    hostname: &'a str,
    owner: Owner,
    /// When the upload under way last took a byte (or began).
    progress_at: Instant,
    /// The board holds writes to the idle slot.
    held: bool,
    /// A site made live, for the board to switch to.
    published: Option<SlotRecord>,
    /// Rate-limit windows: source, window start, attempts in it.
    sources: [Option<(IpAddr, Instant, u32)>; SOURCES],
    blocks_at_begin: u64,
    counters: UploadCounters,
    /// The board pulls (`publish_url`): a signed manifest with no body is a nudge.
    pulls: bool,
    /// A nudge arrived; the pull has not taken it yet.
    nudged: bool,
}

/// The card behind a `dyn` reference, for the writer's generic calls.
struct Card<'c>(&'c mut dyn BlockWrite);

impl BlockDevice for Card<'_> {
    fn block_count(&self) -> u64 {
        self.0.block_count()
    }

    fn read_blocks(&mut self, first_block: u64, buffer: &mut [u8]) -> Result<(), BlockError> {
        self.0.read_blocks(first_block, buffer)
    }
}

impl BlockWrite for Card<'_> {
    fn write_blocks(&mut self, first_block: u64, data: &[u8]) -> Result<(), BlockError> {
        self.0.write_blocks(first_block, data)
    }
}

/// A writer error as an upload's answer.
pub fn answer(error: &PublishError) -> Answer {
    Answer::error(error.status(), error.code(), format_args!("{error}"))
}

fn slot_name(slot: u8) -> &'static str {
    if slot == 0 { "A" } else { "B" }
}

impl<'a> PublishService<'a> {
    /// The service over `publisher` (the slots as boot found them), the `card` its blocks go
    /// to, `scratch` (whole blocks) for the read-back, for the board named `hostname`.
    pub fn new(
        publisher: Publisher,
        card: &'a mut dyn BlockWrite,
        scratch: &'a mut [u8],
        hostname: &'a str,
    ) -> PublishService<'a> {
        PublishService {
            publisher,
            card,
            scratch,
            hostname,
            owner: Owner::Idle,
            progress_at: Instant::from_micros(0),
            held: false,
            published: None,
            sources: [None; SOURCES],
            blocks_at_begin: 0,
            counters: UploadCounters::default(),
            pulls: false,
            nudged: false,
        }
    }

    /// The record as last saved.
    pub fn record(&self) -> &SlotRecord {
        self.publisher.record()
    }

    /// The slots.
    pub fn slots(&self) -> &Slots {
        self.publisher.slots()
    }

    /// Card blocks written since boot.
    pub fn blocks_written(&self) -> u64 {
        self.publisher.blocks_written()
    }

    /// The board's host name, which manifests must name.
    pub fn hostname(&self) -> &'a str {
        self.hostname
    }

    /// What uploads have done.
    pub fn counters(&self) -> UploadCounters {
        self.counters
    }

    /// The upload or pull under way: its manifest and the bytes received.
    pub fn received(&self) -> Option<(&Manifest, u32)> {
        self.publisher.received()
    }

    /// Holds (`true`) or lets go of writes to the idle slot: while held, no upload or pull
    /// begins (the board holds them while the site switched away from is read from it).
    pub fn hold(&mut self, held: bool) {
        self.held = held;
    }

    /// Whether writes are held.
    pub fn held(&self) -> bool {
        self.held
    }

    /// The board pulls: from now on a signed manifest sent with no body is a nudge.
    pub fn set_pulls(&mut self, pulls: bool) {
        self.pulls = pulls;
    }

    /// Whether a nudge waits for the pull.
    pub fn nudged(&self) -> bool {
        self.nudged
    }

    /// A nudge, once: the pull checks its manifest now.
    pub fn take_nudge(&mut self) -> bool {
        core::mem::take(&mut self.nudged)
    }

    /// The record of a site just made live by an upload (once).
    pub fn take_published(&mut self) -> Option<SlotRecord> {
        self.published.take()
    }

    /// Drops a detached upload that has had no byte for [`RESUME_MICROS`].
    pub fn expire(&mut self, now: Instant) {
        if self.owner == (Owner::Upload { attached: false })
            && now.micros_since(self.progress_at) >= RESUME_MICROS
        {
            if let Some((manifest, received)) = self.publisher.received() {
                log::warn!(
                    "publish: upload of version {} abandoned after {received} of {} bytes \
                     (no byte for {} s); the idle slot stays marked not whole",
                    manifest.version,
                    manifest.len,
                    RESUME_MICROS / 1_000_000
                );
            }
            self.publisher.abandon();
            self.owner = Owner::Idle;
            self.counters.abandoned += 1;
        }
    }

    /// The pull starts writing: the manifest checked and the idle slot marked, as
    /// [`Publisher::begin`]. Refused (busy) while an upload is under way or detached.
    pub fn pull_begin(
        &mut self,
        bytes: &[u8],
        signature: &[u8],
        now: Instant,
    ) -> Result<u32, PublishError> {
        self.expire(now);
        if self.owner != Owner::Idle {
            return Err(PublishError::Busy);
        }
        self.blocks_at_begin = self.publisher.blocks_written();
        let mut card = Card(&mut *self.card);
        let received = self
            .publisher
            .begin(&mut card, bytes, signature, self.hostname)?;
        self.owner = Owner::Pull;
        Ok(received)
    }

    /// The pull's next body bytes ([`Publisher::write`]).
    pub fn pull_write(&mut self, offset: u32, data: &[u8]) -> Result<u32, PublishError> {
        let mut card = Card(&mut *self.card);
        self.publisher.write(&mut card, offset, data)
    }

    /// The pull's image is in ([`Publisher::finish`]).
    pub fn pull_finish(&mut self) -> Result<SlotRecord, PublishError> {
        let mut card = Card(&mut *self.card);
        let result = self.publisher.finish(&mut card, self.scratch);
        self.owner = Owner::Idle;
        result
    }

    /// A signed rollback ([`Publisher::rollback`]); refused while an upload is under way.
    pub fn rollback(
        &mut self,
        bytes: &[u8],
        signature: &[u8],
        now: Instant,
    ) -> Result<SlotRecord, PublishError> {
        self.expire(now);
        if self.owner != Owner::Idle {
            return Err(PublishError::Busy);
        }
        self.blocks_at_begin = self.publisher.blocks_written();
        let mut card = Card(&mut *self.card);
        self.publisher
            .rollback(&mut card, bytes, signature, self.hostname)
    }

    /// Card blocks written since the last begin.
    pub fn blocks_since_begin(&self) -> u64 {
        self.publisher.blocks_written() - self.blocks_at_begin
    }

    /// The pull's check ended without a publish: its upload is dropped (the slot stays
    /// marked not whole). A network upload is left alone.
    pub fn pull_abandon(&mut self) {
        if self.owner == Owner::Pull {
            self.publisher.abandon();
            self.owner = Owner::Idle;
        }
    }

    /// Counts an attempt from `peer`; false once it has made [`ATTEMPTS_PER_MINUTE`] in
    /// the current minute.
    fn admit(&mut self, peer: Option<IpAddr>, now: Instant) -> Result<(), u64> {
        let Some(peer) = peer else {
            return Ok(());
        };
        let index = match self
            .sources
            .iter()
            .position(|entry| entry.is_some_and(|(source, _, _)| source == peer))
        {
            Some(index) => index,
            None => {
                // A free entry, or the one whose window began first.
                let index = self
                    .sources
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, entry)| entry.map_or(0, |(_, start, _)| start.as_micros() + 1))
                    .map_or(0, |(index, _)| index);
                self.sources[index] = Some((peer, now, 0));
                index
            }
        };
        let Some((source, mut start, mut count)) = self.sources[index] else {
            return Ok(());
        };
        if now.micros_since(start) >= MINUTE_MICROS {
            start = now;
            count = 0;
        }
        count = count.saturating_add(1);
        self.sources[index] = Some((source, start, count));
        if count > ATTEMPTS_PER_MINUTE {
            let wait = MINUTE_MICROS.saturating_sub(now.micros_since(start)) / 1_000_000 + 1;
            return Err(wait);
        }
        Ok(())
    }

    fn refuse(&mut self, answer: Answer) -> Answer {
        self.counters.refused += 1;
        log::warn!(
            "publish: upload refused ({}): {}; version {} keeps serving",
            answer.status,
            answer.json,
            self.live_version()
        );
        answer
    }

    fn live_version(&self) -> u64 {
        let record = self.publisher.record();
        record.slots[usize::from(record.live)].version
    }

    #[allow(clippy::result_large_err)] // the answer as the trait returns it
    fn begin_upload(&mut self, head: &UploadHead<'_>) -> Result<(), Answer> {
        if let Err(wait) = self.admit(head.peer, head.now) {
            return Err(Answer::error(
                429,
                "rate-limited",
                format_args!(
                    "more than {ATTEMPTS_PER_MINUTE} upload attempts a minute from this \
                     address; try again in {wait} s"
                ),
            ));
        }
        self.expire(head.now);
        let key = self.publisher.slots().publish_key;
        // Checked first, so that a manifest the board would refuse anyway says why even
        // while another upload runs or writes are held.
        let manifest = Manifest::verify(head.manifest, head.signature, key.as_ref(), self.hostname)
            .map_err(|error| answer(&PublishError::Manifest(error)))?;
        if manifest.action == crate::manifest::Action::Rollback {
            return Err(self.rollback_upload(head, &manifest));
        }
        if manifest.action != crate::manifest::Action::Publish {
            return Err(answer(&PublishError::Manifest(ManifestError::Malformed)));
        }
        if head.length == 0 && head.offset == 0 && head.total.is_none() && manifest.len > 0 {
            return Err(self.nudge(head, &manifest));
        }
        let same = self
            .publisher
            .received()
            .is_some_and(|(under_way, _)| *under_way == manifest);
        match self.owner {
            Owner::Pull | Owner::Upload { attached: true } => {
                return Err(answer(&PublishError::Busy));
            }
            Owner::Upload { attached: false } if !same => {
                // Its sender gave up on it (a new CI run signs a new version): the newer
                // publish takes the slot, whose state is still "not whole".
                if let Some((manifest, received)) = self.publisher.received() {
                    log::info!(
                        "publish: cut upload of version {} ({received} of {} bytes) dropped \
                         for another",
                        manifest.version,
                        manifest.len
                    );
                }
                self.publisher.abandon();
                self.owner = Owner::Idle;
            }
            _ => {}
        }
        if !same {
            let record = self.publisher.record();
            if manifest.version <= record.accepted {
                return Err(answer(&PublishError::OldVersion {
                    version: manifest.version,
                    accepted: record.accepted,
                }));
            }
        }
        let slot = self.publisher.slots().slot_bytes();
        if u64::from(manifest.len) > slot {
            return Err(answer(&PublishError::TooLarge {
                len: manifest.len,
                slot,
            }));
        }
        if self.held {
            return Err(Answer::error(
                503,
                "retiring",
                format_args!(
                    "the previous site is still being sent from the slot this upload would \
                     write; try again in a minute"
                ),
            ));
        }
        let end = head.offset.checked_add(head.length);
        if end != Some(u64::from(manifest.len))
            || head
                .total
                .is_some_and(|total| total != u64::from(manifest.len))
        {
            return Err(Answer::error(
                400,
                "bad-range",
                format_args!(
                    "the body must run to the image's end: {} bytes (Content-Range for a \
                     resume)",
                    manifest.len
                ),
            ));
        }
        if !same {
            self.blocks_at_begin = self.publisher.blocks_written();
        }
        let mut card = Card(&mut *self.card);
        let mut received = self
            .publisher
            .begin(&mut card, head.manifest, head.signature, self.hostname)
            .map_err(|error| answer(&error))?;
        if u64::from(received) != head.offset {
            if head.offset != 0 {
                self.owner = Owner::Upload { attached: false };
                return Err(answer(&PublishError::WrongOffset { expected: received }));
            }
            // The whole image again: start over.
            self.publisher.abandon();
            let mut card = Card(&mut *self.card);
            received = self
                .publisher
                .begin(&mut card, head.manifest, head.signature, self.hostname)
                .map_err(|error| answer(&error))?;
        }
        if received > 0 {
            self.counters.resumed += 1;
        }
        self.owner = Owner::Upload { attached: true };
        self.progress_at = head.now;
        log::info!(
            "publish: upload of version {} ({} bytes) signed for {}{}; {}",
            manifest.version,
            manifest.len,
            manifest.host(),
            PeerText(head.peer),
            if received > 0 {
                "resumed"
            } else {
                "writing the idle slot"
            }
        );
        Ok(())
    }
}

impl PublishService<'_> {
    /// A signed rollback sent as a `PUT` with no body (`bramble publish --rollback --to`):
    /// the answer, a success (200) or a refusal.
    fn rollback_upload(&mut self, head: &UploadHead<'_>, manifest: &Manifest) -> Answer {
        if head.length != 0 || head.offset != 0 {
            return Answer::error(400, "bad-range", format_args!("a rollback has no body"));
        }
        if self.held {
            return Answer::error(
                503,
                "retiring",
                format_args!(
                    "the previous switch's site is still being sent; try again in a minute"
                ),
            );
        }
        match self.rollback(head.manifest, head.signature, head.now) {
            Ok(record) => {
                let live = record.slots[usize::from(record.live)];
                self.counters.rolled_back += 1;
                self.published = Some(record);
                log::info!(
                    "publish: rollback version {} signed{}; slot {} (version {}, {} bytes) is \
                     live again; {} card block written",
                    manifest.version,
                    PeerText(head.peer),
                    slot_name(record.live),
                    live.version,
                    live.len,
                    self.blocks_since_begin()
                );
                Answer::json(200, |out| {
                    write!(
                        out,
                        "{{\"rolled_back\":{},\"slot\":\"{}\",\"live_version\":{},\"length\":{}}}",
                        manifest.version,
                        slot_name(record.live),
                        live.version,
                        live.len
                    )
                })
            }
            Err(error) => answer(&error),
        }
    }
}

impl PublishService<'_> {
    /// A signed manifest with no body: on a board that pulls, its next check starts now.
    fn nudge(&mut self, head: &UploadHead<'_>, manifest: &Manifest) -> Answer {
        if !self.pulls {
            return Answer::error(
                400,
                "no-pull",
                format_args!(
                    "an upload with no body nudges a board that pulls (publish_url); this one \
                     does not: send the image ({} bytes)",
                    manifest.len
                ),
            );
        }
        let accepted = self.publisher.record().accepted;
        if manifest.version <= accepted {
            return answer(&PublishError::OldVersion {
                version: manifest.version,
                accepted,
            });
        }
        self.nudged = true;
        self.counters.nudged += 1;
        log::info!(
            "publish: nudge for version {} signed for {}{}; checking publish_url now",
            manifest.version,
            manifest.host(),
            PeerText(head.peer)
        );
        Answer::json(202, |out| {
            write!(
                out,
                "{{\"nudged\":{},\"accepted\":{accepted},\"message\":\"checking publish_url \
                 now\"}}",
                manifest.version
            )
        })
    }
}

/// ` from ADDRESS`, or nothing.
struct PeerText(Option<IpAddr>);

impl core::fmt::Display for PeerText {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(address) => write!(f, " from {address}"),
            None => Ok(()),
        }
    }
}

impl SiteUpload for PublishService<'_> {
    fn state(&mut self, now: Instant) -> Answer {
        self.expire(now);
        let record = *self.publisher.record();
        let live = record.slots[usize::from(record.live)];
        let upload = match self.owner {
            Owner::Upload { .. } => self.publisher.received(),
            _ => None,
        };
        let slot_bytes = self.publisher.slots().slot_bytes();
        let hostname = self.hostname;
        Answer::json(200, |out| {
            write!(
                out,
                "{{\"live_version\":{},\"live_slot\":\"{}\",\"accepted\":{},\
                 \"slot_bytes\":{slot_bytes},\"hostname\":\"",
                live.version,
                slot_name(record.live),
                record.accepted
            )?;
            // A host name is letters, digits, '-' and '.' (settings check it); escaped anyway.
            bramble_http::upload::JsonText(&mut *out).write_str(hostname)?;
            out.write_str("\",\"upload\":")?;
            match upload {
                Some((manifest, received)) => {
                    write!(
                        out,
                        "{{\"version\":{},\"length\":{},\"received\":{received},\"sha256\":\"",
                        manifest.version, manifest.len
                    )?;
                    for byte in manifest.sha256 {
                        write!(out, "{byte:02x}")?;
                    }
                    out.write_str("\"}}")
                }
                None => out.write_str("null}"),
            }
        })
    }

    fn begin(&mut self, head: &UploadHead<'_>) -> Result<(), Answer> {
        self.counters.attempts += 1;
        self.begin_upload(head).map_err(|answer| {
            if answer.status < 300 {
                // A rollback or a nudge, answered at its head.
                answer
            } else {
                self.refuse(answer)
            }
        })
    }

    fn write(&mut self, offset: u64, data: &[u8], now: Instant) -> Result<(), Answer> {
        if self.owner != (Owner::Upload { attached: true }) {
            return Err(self.refuse(answer(&PublishError::NoUpload)));
        }
        self.progress_at = now;
        let offset = u32::try_from(offset).map_err(|_| PublishError::TooLong);
        let mut card = Card(&mut *self.card);
        let written = offset.and_then(|offset| self.publisher.write(&mut card, offset, data));
        match written {
            Ok(_) => Ok(()),
            Err(error) => {
                // A card error dropped the upload; anything else leaves it to resume.
                self.owner = if self.publisher.received().is_some() {
                    Owner::Upload { attached: false }
                } else {
                    Owner::Idle
                };
                Err(self.refuse(answer(&error)))
            }
        }
    }

    fn finish(&mut self, _now: Instant) -> Answer {
        let mut card = Card(&mut *self.card);
        let result = self.publisher.finish(&mut card, self.scratch);
        self.owner = if self.publisher.received().is_some() {
            Owner::Upload { attached: false }
        } else {
            Owner::Idle
        };
        match result {
            Ok(record) => {
                let live = record.slots[usize::from(record.live)];
                let blocks = self.blocks_since_begin();
                self.counters.published += 1;
                self.published = Some(record);
                log::info!(
                    "publish: version {} ({} bytes) written to slot {}, read back and \
                     verified, now live; {blocks} card blocks written",
                    live.version,
                    live.len,
                    slot_name(record.live),
                );
                Answer::json(200, |out| {
                    write!(
                        out,
                        "{{\"published\":{},\"length\":{},\"slot\":\"{}\",\"blocks\":{blocks}}}",
                        live.version,
                        live.len,
                        slot_name(record.live)
                    )
                })
            }
            Err(error) => self.refuse(answer(&error)),
        }
    }

    fn detach(&mut self) {
        if self.owner == (Owner::Upload { attached: true }) {
            self.owner = Owner::Upload { attached: false };
            if let Some((manifest, received)) = self.publisher.received() {
                log::warn!(
                    "publish: upload of version {} cut after {received} of {} bytes; a \
                     resume continues from there",
                    manifest.version,
                    manifest.len
                );
            }
        }
    }
}

#[cfg(test)]
mod tests;
