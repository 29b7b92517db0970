//! Publishing a site without a visit (issue 28): the owner's key pair (`bramble keygen`,
//! [`keys`]); the card's two site slots are laid out by `bramble image` (`--slot-mib`,
//! `--publish-key`) and described in `bramble_fat::site_slots`.

pub mod keys;
