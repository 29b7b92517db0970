//! Publishing a site without a visit (issue 28): the owner's key pair (`bramble keygen`,
//! [`keys`]) and `bramble publish --card` ([`card`]), which writes a signed site into a card
//! image's idle slot with the kernel's own writer, or uploads it to the board over HTTPS
//! (`--to`, [`upload`]). The card's two site slots are laid out by
//! `bramble image` (`--slot-mib`, `--publish-key`) and described in
//! `bramble_fat::site_slots`; the manifest and the writer are `bramble_publish`'s. See
//! doc/publish.md.

pub mod card;
pub mod keys;
pub mod upload;
