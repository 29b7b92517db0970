//! Fuzz target: the publish manifest and its signature (`bramble_publish::manifest`), the
//! first bytes of a publish the board reads from the network. Decoding and verifying must
//! never panic; a manifest that decodes encodes back to the same bytes (one encoding per
//! manifest, so one signature), and nothing verifies against a key that did not sign it.
#![no_main]

use bramble_publish::manifest::{MANIFEST_LEN, Manifest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (manifest, signature) = data.split_at(data.len().min(MANIFEST_LEN));
    if let Ok(decoded) = Manifest::decode(manifest) {
        assert_eq!(&decoded.encode()[..], manifest);
    }
    // The key is the base point's encoding: a valid key no fuzz input holds the secret of.
    let mut key = [0u8; 32];
    key[0] = 0x58;
    key[1..].fill(0x66);
    assert!(Manifest::verify(manifest, signature, Some(&key), "garden").is_err());
});
