//! The card store over a card in RAM: every body served byte for byte through a cache smaller
//! than the site, corrupt segments and failing reads never served (and read again when asked
//! for), a slow card that holds back only the responses waiting for it, and the index checks.

use bramble_hal::Instant;
use bramble_site::{
    Body, BodyRequest, BodySource, BodyStatus, FileSpec, SiteImageWriter, SiteIndex, VariantSpec,
    http_date,
};
use bramble_store::{
    CardStore, FileExtents, IndexError, MemoryCard, Page, SwitchError, read_index,
};

/// A small deterministic pseudo-random generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

const SEGMENT: u32 = 4096;

/// A site of small pages (with a gzip variant each) and a few bodies spanning many segments,
/// in 4 KiB segments.
fn site() -> Vec<u8> {
    site_with(42, SEGMENT)
}

/// [`site`] with other bytes (`seed`) and segment length.
fn site_with(seed: u64, segment_len: u32) -> Vec<u8> {
    let mut rng = Rng(seed);
    let mut writer = SiteImageWriter::with_segment_len(segment_len).unwrap();
    let file = |path: String, body: Vec<u8>, gzip: Option<Vec<u8>>| FileSpec {
        path,
        content_type: "application/octet-stream".into(),
        cache_control: "no-cache".into(),
        last_modified: 0,
        last_modified_http: http_date(0),
        identity: VariantSpec {
            body,
            etag: "\"i\"".into(),
        },
        gzip: gzip.map(|body| VariantSpec {
            body,
            etag: "\"g\"".into(),
        }),
        brotli: None,
    };
    for page in 0..30 {
        let len = 100 + (rng.next() % 1800) as usize;
        let body = rng.bytes(len);
        let gzip = rng.bytes(len / 3);
        writer
            .add(file(format!("/p/{page:02}.html"), body, Some(gzip)))
            .unwrap();
    }
    for big in 0..3 {
        let body = rng.bytes(20_000 + big * 7_000);
        writer
            .add(file(format!("/big/{big}.bin"), body, None))
            .unwrap();
    }
    writer.add(file("/empty".into(), Vec::new(), None)).unwrap();
    writer.finish().unwrap()
}

/// Every non-empty body of the site with its expected bytes.
fn bodies(image: &[u8]) -> Vec<(String, Body, Vec<u8>)> {
    let whole = bramble_site::SiteImage::new_checked(image).unwrap();
    let mut out = Vec::new();
    for file in whole.files() {
        for variant in [Some(file.identity), file.gzip].into_iter().flatten() {
            if !variant.body.is_empty() {
                out.push((
                    file.path.to_string(),
                    variant.body,
                    whole.body(variant.body).to_vec(),
                ));
            }
        }
    }
    out
}

/// The first body of a file whose path starts with `prefix`.
fn body_of(image: &[u8], prefix: &str) -> (Body, Vec<u8>) {
    bodies(image)
        .into_iter()
        .find(|(path, ..)| path.starts_with(prefix))
        .map(|(_, body, bytes)| (body, bytes))
        .unwrap()
}

/// Memory for one store: the index buffer, the segment table and the cache pages.
struct Memory {
    index: Vec<u8>,
    table: Vec<u32>,
    pages: Vec<u8>,
}

impl Memory {
    fn new(pages: usize) -> Self {
        Self {
            index: vec![0; 64 * 1024],
            table: vec![0; 1024],
            pages: vec![0; pages * SEGMENT as usize],
        }
    }
}

/// A store over `card` (the image as a bare device) with `pages` cache pages.
fn open<'m, 'd>(
    card: MemoryCard<'d, 'm>,
    extents: FileExtents,
    memory: &'m mut Memory,
    page_slots: &'m mut Vec<Page<'m>>,
) -> CardStore<'m, 'm, MemoryCard<'d, 'm>> {
    let mut card = card;
    let (index, _) = read_index(&mut card, &extents, &mut memory.index).unwrap();
    let segments = CardStore::<MemoryCard>::table_len(&index);
    let store = CardStore::new(card, index, extents, &mut memory.table[..segments]);
    page_slots.extend(
        memory
            .pages
            .chunks_exact_mut(SEGMENT as usize)
            .map(Page::new),
    );
    store.attach_pages(page_slots);
    store
}

/// Reads `body` whole through the store, polling it whenever it is not ready: one lookup per
/// segment as the engine does. Returns the bytes, or `None` if the store said Failed.
fn get<'b>(
    store: &CardStore<'_, 'b, MemoryCard<'_, 'b>>,
    body: Body,
    now: &mut u64,
) -> Option<Vec<u8>> {
    get_from(store, store, body, now)
}

/// [`get`] through `source` (the store itself, or one of its sides).
fn get_from<'b>(
    source: &dyn BodySource,
    store: &CardStore<'_, 'b, MemoryCard<'_, 'b>>,
    body: Body,
    now: &mut u64,
) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut last_segment = None;
    let mut buffer = [0u8; 1500];
    let mut waits = 0;
    while (out.len() as u32) < body.len {
        let offset = out.len() as u32;
        let segment = (body.offset + offset) / SEGMENT;
        let lookup = last_segment != Some(segment);
        last_segment = Some(segment);
        let request = BodyRequest {
            body,
            offset,
            lookup,
        };
        match source.read(request, &mut buffer) {
            BodyStatus::Ready(n) => {
                assert!(n > 0 && n <= buffer.len());
                out.extend_from_slice(&buffer[..n]);
            }
            BodyStatus::Pending => {
                waits += 1;
                assert!(waits < 10_000, "a read that never ends");
                *now += 500;
                store.poll(Instant::from_micros(*now));
            }
            BodyStatus::Failed => return None,
        }
    }
    Some(out)
}

#[test]
fn every_body_is_served_byte_for_byte_through_a_cache_smaller_than_the_site() {
    let image = site();
    let extents = FileExtents::contiguous(0, image.len() as u32);
    let mut memory = Memory::new(3);
    let mut slots = Vec::new();
    let store = open(MemoryCard::new(&image), extents, &mut memory, &mut slots);
    let index = store.index().unwrap();
    assert!(index.segment_count() > 10, "{}", index.segment_count());
    let mut now = 1_000_000;
    for round in 0..2 {
        for (path, body, expected) in bodies(&image) {
            let got = get(&store, body, &mut now).unwrap_or_else(|| panic!("{path} failed"));
            assert!(got == expected, "{path}, round {round}");
        }
    }
    let counters = store.counters();
    assert_eq!(counters.pages, 3);
    assert!(counters.evictions > 0, "{counters:?}");
    assert!(counters.bytes_read > index.bodies_len() as u64);
    assert_eq!(counters.checksum_failures, 0);
    assert_eq!(counters.read_errors, 0);
    assert!(counters.misses > 0 && counters.hits > 0, "{counters:?}");
}

#[test]
fn cached_segments_are_hits_and_the_cache_keeps_what_is_asked_for_again() {
    let image = site();
    let extents = FileExtents::contiguous(0, image.len() as u32);
    let mut memory = Memory::new(64);
    let mut slots = Vec::new();
    let store = open(MemoryCard::new(&image), extents, &mut memory, &mut slots);
    store.set_warm_up(false);
    let (body, expected) = body_of(&image, "/p/00");
    let mut now = 1_000_000;
    assert_eq!(get(&store, body, &mut now).unwrap(), expected);
    let cold = store.counters();
    assert_eq!((cold.hits, cold.misses, cold.segments_read), (0, 1, 1));
    assert_eq!(get(&store, body, &mut now).unwrap(), expected);
    let warm = store.counters();
    assert_eq!((warm.hits, warm.misses, warm.segments_read), (1, 1, 1));
    assert_eq!(warm.pages_used, 1);
    store.clear();
    assert_eq!(store.counters().pages_used, 0);
    assert_eq!(get(&store, body, &mut now).unwrap(), expected);
    assert_eq!(store.counters().segments_read, 2, "read again after clear");
}

#[test]
fn cached_bytes_are_handed_to_the_callers_copy_where_they_lie() {
    let image = site();
    let extents = FileExtents::contiguous(0, image.len() as u32);
    let mut memory = Memory::new(64);
    let mut slots = Vec::new();
    let store = open(MemoryCard::new(&image), extents, &mut memory, &mut slots);
    let (body, expected) = body_of(&image, "/p/00");
    let request = |offset| BodyRequest {
        body,
        offset,
        lookup: false,
    };
    // Nothing cached: no address, and read_with hands nothing over.
    assert_eq!(store.address(request(0)), None);
    let mut now = 1_000_000;
    assert_eq!(get(&store, body, &mut now).unwrap(), expected);
    let offset = 7;
    let address = store.address(request(offset)).expect("cached now");
    let mut out = [0u8; 100];
    let mut handed = Vec::new();
    let status = store.read_with(request(offset), &mut out, &mut |to, from| {
        let from = from.expect("a cached segment hands its bytes over");
        assert_eq!(to.len(), from.len());
        assert_eq!(
            from.as_ptr() as usize,
            address,
            "the bytes where address said"
        );
        to.copy_from_slice(from);
        handed.push(from.len());
    });
    let BodyStatus::Ready(n) = status else {
        panic!("{status:?}")
    };
    assert_eq!(handed, [n]);
    assert_eq!(out[..n], expected[offset as usize..offset as usize + n]);
    // Past the body: no address.
    assert_eq!(store.address(request(body.len)), None);
}

#[test]
fn a_corrupt_byte_costs_only_its_file_and_is_read_again_when_asked_for() {
    let image = site();
    let all = bodies(&image);
    let (victim_path, victim, _) = all
        .iter()
        .find(|(path, ..)| path == "/p/05.html")
        .unwrap()
        .clone();
    let index = SiteIndex::new_checked(&image).unwrap();
    let mut corrupt = image.clone();
    let at = (index.bodies_offset() + victim.offset + victim.len / 2) as usize;
    corrupt[at] ^= 0x01;
    let bad_segment = (victim.offset + victim.len / 2) / SEGMENT;

    let extents = FileExtents::contiguous(0, corrupt.len() as u32);
    let mut memory = Memory::new(8);
    let mut slots = Vec::new();
    let store = open(MemoryCard::new(&corrupt), extents, &mut memory, &mut slots);
    let mut now = 1_000_000;
    let mut neighbours = 0;
    for (path, body, expected) in &all {
        let first = body.offset / SEGMENT;
        let last = (body.offset + body.len - 1) / SEGMENT;
        let got = get(&store, *body, &mut now);
        if body == &victim {
            assert!(got.is_none(), "{path}: the corrupt body was served");
        } else if first == bad_segment && last == bad_segment {
            // In the bad segment but intact: served, after its own check.
            assert!(got.as_ref() == Some(expected), "{path}");
            neighbours += 1;
        } else if (first..=last).contains(&bad_segment) {
            // Spans the bad segment: cannot be checked piece by piece, never served.
            assert!(got.is_none(), "{path}");
        } else {
            assert!(got.as_ref() == Some(expected), "{path}");
        }
    }
    assert!(
        neighbours > 0,
        "the test needs intact neighbours in the bad segment"
    );
    let counters = store.counters();
    assert!(counters.checksum_failures >= 1, "{counters:?}");
    assert!(counters.body_failures >= 1, "{counters:?}");
    let before = counters.checksum_failures;
    // Asking again reads the segment again (and fails again: the card is still corrupt).
    assert!(get(&store, victim, &mut now).is_none(), "{victim_path}");
    assert_eq!(store.counters().checksum_failures, before + 1);
}

#[test]
fn a_failing_card_fails_only_the_bodies_on_its_bad_blocks() {
    let image = site();
    let index = SiteIndex::new_checked(&image).unwrap();
    let all = bodies(&image);
    let (_, victim, _) = all.last().unwrap().clone();
    let bad_block = u64::from((index.bodies_offset() + victim.offset) / 512);
    let card = MemoryCard::new(&image).with_failing_blocks(bad_block..bad_block + 1);
    let extents = FileExtents::contiguous(0, image.len() as u32);
    let mut memory = Memory::new(8);
    let mut slots = Vec::new();
    let store = open(card, extents, &mut memory, &mut slots);
    let mut now = 1_000_000;
    assert!(get(&store, victim, &mut now).is_none());
    assert!(store.counters().read_errors >= 1);
    // A page in the first segment, far from the bad block, is served.
    let (body, expected) = body_of(&image, "/p/00");
    assert_ne!(body.offset / SEGMENT, victim.offset / SEGMENT);
    assert!(get(&store, body, &mut now) == Some(expected));
}

#[test]
fn a_slow_card_holds_back_only_the_responses_waiting_for_it() {
    let image = site();
    let extents = FileExtents::contiguous(0, image.len() as u32);
    let mut memory = Memory::new(16);
    let mut slots = Vec::new();
    let store = open(
        MemoryCard::new(&image).with_delay(20),
        extents,
        &mut memory,
        &mut slots,
    );
    store.set_warm_up(false);
    let mut now = 1_000_000;
    // Cache the first page.
    let (cached, expected) = body_of(&image, "/p/00");
    assert!(get(&store, cached, &mut now) == Some(expected));
    // A response for a big body starts waiting on the slow card...
    let (big, _) = body_of(&image, "/big/2");
    let first = BodyRequest {
        body: big,
        offset: 0,
        lookup: true,
    };
    let mut out = [0u8; 100];
    assert_eq!(store.read(first, &mut out), BodyStatus::Pending);
    store.poll(Instant::from_micros(now));
    // ...while the cached one is served at once, several times, without a poll.
    for _ in 0..3 {
        let request = BodyRequest {
            body: cached,
            offset: 0,
            lookup: true,
        };
        assert_eq!(store.read(request, &mut out), BodyStatus::Ready(100));
    }
    assert!(store.next_deadline().is_some());
    let again = BodyRequest {
        lookup: false,
        ..first
    };
    let mut polls = 0;
    loop {
        match store.read(again, &mut out) {
            BodyStatus::Pending => {
                polls += 1;
                now += 500;
                store.poll(Instant::from_micros(now));
            }
            BodyStatus::Ready(n) => {
                assert_eq!(n, 100);
                break;
            }
            BodyStatus::Failed => panic!("failed"),
        }
    }
    assert!(polls >= 20, "{polls}");
}

#[test]
fn idle_warm_up_fills_free_pages_without_pushing_anything_out() {
    let image = site();
    let index = SiteIndex::new_checked(&image).unwrap();
    let extents = FileExtents::contiguous(0, image.len() as u32);
    let mut memory = Memory::new(8);
    let mut slots = Vec::new();
    let store = open(MemoryCard::new(&image), extents, &mut memory, &mut slots);
    let mut now = 1_000_000u64;
    // No request for a while: warm-up reads from the first segment on.
    for _ in 0..100 {
        if let Some(deadline) = store.next_deadline() {
            now = now.max(deadline.as_micros());
        } else {
            break;
        }
        store.poll(Instant::from_micros(now));
    }
    let counters = store.counters();
    assert!(index.segment_count() > 8);
    // Stops with a quarter of the pages free, pushes nothing out.
    assert_eq!(counters.pages_used, 6, "{counters:?}");
    assert_eq!(counters.warmed, 6);
    assert_eq!(counters.evictions, 0);
    assert_eq!(store.next_deadline(), None, "nothing left to do");
    // The first page is now a hit.
    let (body, expected) = body_of(&image, "/p/00");
    assert!(get(&store, body, &mut now) == Some(expected));
    assert_eq!(store.counters().hits, 1);
}

#[test]
fn requests_outside_the_body_region_fail_without_panicking() {
    let image = site();
    let extents = FileExtents::contiguous(0, image.len() as u32);
    let mut memory = Memory::new(2);
    let mut slots = Vec::new();
    let store = open(MemoryCard::new(&image), extents, &mut memory, &mut slots);
    let mut out = [0u8; 64];
    for (offset, len, at) in [
        (u32::MAX, 1, 0),
        (u32::MAX - 10, 100, 5),
        (0, u32::MAX, u32::MAX - 1),
        (0, 10, 10),
        (0, 10, u32::MAX),
        (4_000_000, 10, 0),
    ] {
        let request = BodyRequest {
            body: Body {
                file: 0,
                offset,
                len,
                crc: 0,
            },
            offset: at,
            lookup: true,
        };
        assert_eq!(
            store.read(request, &mut out),
            BodyStatus::Failed,
            "{offset} {len} {at}"
        );
    }
}

#[test]
fn the_index_is_checked_before_anything_is_served() {
    let image = site();
    let index_len = SiteIndex::index_len(&image).unwrap();
    let mut buffer = vec![0u8; 64 * 1024];
    // A truncated copy of SITE.BIN.
    let mut card = MemoryCard::new(&image);
    let short = FileExtents::contiguous(0, image.len() as u32 - 1);
    assert!(matches!(
        read_index(&mut card, &short, &mut buffer),
        Err(IndexError::Truncated { .. })
    ));
    // The header whole, the index cut short.
    let short = FileExtents::contiguous(0, bramble_site::HEADER_LEN as u32 + 36);
    assert!(matches!(
        read_index(&mut card, &short, &mut buffer),
        Err(IndexError::Truncated { .. })
    ));
    // Shorter than the header.
    let short = FileExtents::contiguous(0, bramble_site::HEADER_LEN as u32 - 1);
    assert!(matches!(
        read_index(&mut card, &short, &mut buffer),
        Err(IndexError::Format(
            bramble_site::FormatError::TooShort { .. }
        ))
    ));
    let empty = FileExtents::contiguous(0, 0);
    assert!(read_index(&mut card, &empty, &mut buffer).is_err());
    // Too little memory for the index.
    let whole = FileExtents::contiguous(0, image.len() as u32);
    assert!(matches!(
        read_index(&mut card, &whole, &mut buffer[..index_len - 1]),
        Err(IndexError::NoMemory { .. })
    ));
    // A corrupt table.
    let mut corrupt = image.clone();
    corrupt[bramble_site::HEADER_LEN + 3] ^= 0x20;
    let mut card = MemoryCard::new(&corrupt);
    assert!(matches!(
        read_index(&mut card, &whole, &mut buffer),
        Err(IndexError::Format(
            bramble_site::FormatError::ChecksumMismatch { .. }
        ))
    ));
    // Not a site image at all.
    let zeros = vec![0u8; 8192];
    let mut card = MemoryCard::new(&zeros);
    assert!(matches!(
        read_index(&mut card, &FileExtents::contiguous(0, 8192), &mut buffer),
        Err(IndexError::Format(bramble_site::FormatError::BadMagic))
    ));
    // A good one, and the memory it leaves.
    let mut card = MemoryCard::new(&image);
    let (index, rest) = read_index(&mut card, &whole, &mut buffer).unwrap();
    assert_eq!(index.index_bytes(), index_len);
    assert_eq!(rest.len(), 64 * 1024 - index_len.next_multiple_of(512));
}

#[test]
fn the_whole_image_check_and_the_store_agree_on_every_segment() {
    let image = site();
    let index = SiteIndex::new_checked(&image).unwrap();
    for segment in 0..index.segment_count() {
        let (start, len) = index.segment(segment).unwrap();
        let at = (index.bodies_offset() + start) as usize;
        assert_eq!(
            bramble_site::crc32(&image[at..at + len as usize]),
            index.segment_checksum(segment).unwrap()
        );
    }
}

#[test]
fn mutated_images_through_the_whole_card_path_never_panic() {
    let original = site();
    let mut rng = Rng(0xC0FFEE);
    let (mut accepted, mut rejected) = (0, 0);
    for round in 0..1500 {
        let mut bytes = original.clone();
        for _ in 0..=(rng.next() % 4) {
            let at = if rng.next().is_multiple_of(2) {
                // Header and table, where the offsets live.
                (rng.next() as usize) % 2048
            } else {
                (rng.next() as usize) % bytes.len()
            };
            bytes[at] = rng.next() as u8;
        }
        if round % 7 == 0 {
            let len = (rng.next() as usize) % bytes.len();
            bytes.truncate(len);
        }
        bramble_store::exercise::exercise_site_bin(&bytes);
        bramble_http::exercise::reseal_image(&mut bytes);
        if bramble_store::exercise::exercise_site_bin(&bytes) {
            accepted += 1;
        } else {
            rejected += 1;
        }
    }
    assert!(
        accepted > 50 && rejected > 50,
        "{accepted} accepted, {rejected} rejected"
    );
}

#[test]
fn a_switch_serves_the_new_site_while_the_old_one_finishes_from_its_own_blocks() {
    let old = site();
    let new = site_with(7, SEGMENT);
    assert_ne!(old, new);
    // Two slots on one card: the old site at block 0, the new one after it.
    let new_block = old.len().div_ceil(512) as u64 + 3;
    let mut card_bytes = old.clone();
    card_bytes.resize(new_block as usize * 512, 0xEE);
    card_bytes.extend_from_slice(&new);
    let old_extents = FileExtents::contiguous(0, old.len() as u32);
    let new_extents = FileExtents::contiguous(new_block, new.len() as u32);
    let mut card = MemoryCard::new(&card_bytes).with_delay(2);
    let mut old_index_memory = vec![0u8; 64 * 1024];
    let mut new_index_memory = vec![0u8; 64 * 1024];
    let (old_index, _) = read_index(&mut card, &old_extents, &mut old_index_memory).unwrap();
    let (new_index, _) = read_index(&mut card, &new_extents, &mut new_index_memory).unwrap();
    let slot_bytes = old.len().max(new.len()) as u64;
    let table_len = CardStore::<MemoryCard>::switch_table_len(&old_index, slot_bytes);
    assert!(table_len >= 2 * old_index.segment_count() as usize);
    let mut table = vec![0u32; table_len];
    // Three pages: far fewer than either site's segments, so both are read from the card
    // again and again, each from its own blocks.
    let mut pages_memory = vec![0u8; 3 * SEGMENT as usize];
    let mut pages: Vec<Page> = pages_memory
        .chunks_exact_mut(SEGMENT as usize)
        .map(Page::new)
        .collect();
    let store = CardStore::new(card, old_index, old_extents.clone(), &mut table);
    store.attach_pages(&mut pages);
    let mut now = 1_000_000;
    let (big, big_old) = body_of(&old, "/big/2");
    // A response of the old site has its first segment; then the switch.
    let first = BodyRequest {
        body: big,
        offset: 0,
        lookup: true,
    };
    while store.side(0).read(first, &mut [0u8; 16]) == BodyStatus::Pending {
        now += 500;
        store.poll(Instant::from_micros(now));
    }
    assert_eq!(store.switch(new_index, new_extents.clone()), Ok(1));
    assert_eq!(store.live_side(), 1);
    assert_eq!(store.index().unwrap().checksum(), new_index.checksum());
    assert_eq!(store.extents(), Some(new_extents.clone()));
    assert_eq!(
        store.switch(old_index, old_extents.clone()),
        Err(SwitchError::Retiring)
    );
    // Both sites, interleaved, byte for byte: the old side from the old blocks, the new side
    // (and the store's own source, the live site) from the new ones.
    for ((path, body, expected), (new_path, new_body, new_expected)) in
        bodies(&old).into_iter().zip(bodies(&new))
    {
        let got = get_from(&store.side(0), &store, body, &mut now);
        assert!(got.as_deref() == Some(&expected[..]), "old {path}");
        let got = get_from(&store.side(1), &store, new_body, &mut now);
        assert!(got.as_deref() == Some(&new_expected[..]), "new {new_path}");
        let got = get(&store, new_body, &mut now);
        assert!(got.as_deref() == Some(&new_expected[..]), "live {new_path}");
    }
    assert_eq!(
        get_from(&store.side(0), &store, big, &mut now).unwrap(),
        big_old
    );
    assert_eq!(store.counters().checksum_failures, 0);

    // The live side cannot retire. A read of the old side is out when it retires: its bytes
    // go nowhere, and the old side fails from then on.
    assert!(!store.retire(1));
    let (page, _) = body_of(&old, "/p/07");
    let request = BodyRequest {
        body: page,
        offset: 0,
        lookup: true,
    };
    let mut out = [0u8; 64];
    // Evict it first, by reading the new site's bodies.
    for (_, body, _) in bodies(&new).into_iter().take(12) {
        get_from(&store.side(1), &store, body, &mut now).unwrap();
    }
    assert_eq!(store.side(0).read(request, &mut out), BodyStatus::Pending);
    now += 500;
    store.poll(Instant::from_micros(now)); // starts the read: busy for two polls
    let pages_used = store.counters().pages_used;
    assert!(store.retire(0));
    assert!(!store.retire(0), "retired once");
    for _ in 0..5 {
        now += 500;
        store.poll(Instant::from_micros(now));
    }
    assert_eq!(store.side(0).read(request, &mut out), BodyStatus::Failed);
    assert!(
        store.counters().pages_used <= pages_used,
        "the retired site's read was not cached"
    );
    assert_eq!(store.counters().checksum_failures, 0);
    for (path, body, expected) in bodies(&new) {
        let got = get(&store, body, &mut now);
        assert!(
            got.as_deref() == Some(&expected[..]),
            "after the retire: {path}"
        );
    }

    // And back to the old site, whose entries now go at the other end of the table.
    assert_eq!(store.switch(old_index, old_extents), Ok(0));
    for ((path, body, expected), (new_path, new_body, new_expected)) in
        bodies(&old).into_iter().zip(bodies(&new))
    {
        let got = get(&store, body, &mut now);
        assert!(got.as_deref() == Some(&expected[..]), "old again {path}");
        let got = get_from(&store.side(1), &store, new_body, &mut now);
        assert!(
            got.as_deref() == Some(&new_expected[..]),
            "retiring {new_path}"
        );
    }
    assert!(store.retire(1));
    assert_eq!(store.counters().read_errors, 0);
}

#[test]
fn a_switch_the_store_cannot_hold_is_refused_and_the_live_site_keeps_serving() {
    let old = site();
    let other_segments = site_with(7, 2 * SEGMENT);
    let new = site_with(7, SEGMENT);
    let mut card_bytes = old.clone();
    let other_block = card_bytes.len().div_ceil(512) as u64;
    card_bytes.resize(other_block as usize * 512, 0);
    card_bytes.extend_from_slice(&other_segments);
    let new_block = card_bytes.len().div_ceil(512) as u64;
    card_bytes.resize(new_block as usize * 512, 0);
    card_bytes.extend_from_slice(&new);
    let old_extents = FileExtents::contiguous(0, old.len() as u32);
    let other_extents = FileExtents::contiguous(other_block, other_segments.len() as u32);
    let new_extents = FileExtents::contiguous(new_block, new.len() as u32);
    let mut card = MemoryCard::new(&card_bytes);
    let mut memory = [
        vec![0u8; 64 * 1024],
        vec![0u8; 64 * 1024],
        vec![0u8; 64 * 1024],
    ];
    let [old_memory, other_memory, new_memory] = &mut memory;
    let (old_index, _) = read_index(&mut card, &old_extents, old_memory).unwrap();
    let (other_index, _) = read_index(&mut card, &other_extents, other_memory).unwrap();
    let (new_index, _) = read_index(&mut card, &new_extents, new_memory).unwrap();
    // A table for the boot site alone (a site on FAT, no slots).
    let mut table = vec![0u32; CardStore::<MemoryCard>::table_len(&old_index)];
    let mut pages_memory = vec![0u8; 4 * SEGMENT as usize];
    let mut pages: Vec<Page> = pages_memory
        .chunks_exact_mut(SEGMENT as usize)
        .map(Page::new)
        .collect();
    let store = CardStore::new(card, old_index, old_extents, &mut table);
    store.attach_pages(&mut pages);
    assert_eq!(
        store.switch(other_index, other_extents),
        Err(SwitchError::SegmentLength {
            pages: SEGMENT,
            new: 2 * SEGMENT
        })
    );
    assert!(matches!(
        store.switch(new_index, new_extents),
        Err(SwitchError::TableTooSmall { .. })
    ));
    assert_eq!(store.live_side(), 0);
    let mut now = 1_000_000;
    for (path, body, expected) in bodies(&old) {
        let got = get(&store, body, &mut now);
        assert!(got.as_deref() == Some(&expected[..]), "{path}");
    }
}
