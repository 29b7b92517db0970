//! Publishing a site without a visit (issue 28): what the owner signs and what the board does
//! with it, apart from how the bytes arrive (the HTTPS request handler) so that both can be
//! tested on the host.
//!
//! - [`manifest`]: the 128-byte manifest (action, version, image length, SHA-256, host name)
//!   the owner signs with Ed25519, and its check against the key on the card.
//! - [`writer`]: the card-writing service: it takes a checked manifest, marks the idle slot
//!   invalid, streams the body into it block by block (never the whole image in RAM), reads it
//!   back and checks its hash, and only then switches the slot record; or switches back to the
//!   other slot for a signed rollback. Every card write goes through `BlockWrite`, so the
//!   tests count them and cut power after any one.
//! - [`pull`]: what the board fetches from `publish_url` (the manifest file, the image's URL
//!   beside it) and the image's response read as a stream.
#![no_std]
#![forbid(unsafe_code)]

pub mod manifest;
pub mod pull;
pub mod upload;
pub mod writer;

#[cfg(test)]
mod test_card;
