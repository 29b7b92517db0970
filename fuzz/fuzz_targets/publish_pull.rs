//! Fuzz target: the response to the board's GET of a pulled site (`bramble_publish::pull`),
//! bytes from a static host the board does not control. The first four bytes pick the signed
//! length and where the input is cut into pieces; the reader must never panic, never hand on
//! more body bytes than the signed length, and count exactly the bytes it handed on.
#![no_main]

use bramble_publish::pull::{ImageResponse, split_manifest_file, write_image_url};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((control, rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let expected = u32::from(u16::from_le_bytes([control[0], control[1]]));
    let piece = usize::from(control[2]).max(1);
    let mut reader = ImageResponse::new(expected);
    let mut handed = 0u64;
    for chunk in rest.chunks(piece) {
        match reader.push(chunk) {
            Ok(body) => {
                assert!(body.len() <= chunk.len());
                handed += body.len() as u64;
            }
            Err(_) => break,
        }
    }
    assert!(handed <= u64::from(expected));
    assert_eq!(u64::from(reader.received()), handed);
    assert_eq!(reader.finish().is_ok(), handed == u64::from(expected) && reader.complete());
    let _ = split_manifest_file(rest);
    let mut url = String::new();
    if let Ok(text) = core::str::from_utf8(rest) {
        let _ = write_image_url(text, u64::from(control[3]), &mut url);
    }
});
