//! Cards the image tool makes, read back the way the kernel reads them: SITE.BIN found through
//! the FAT (FAT16 and FAT32, and a fragmented copy), its index read and verified, and every body
//! served byte for byte by the card store over the card's bytes.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use bramble::image::{ImageInputs, build_image};
use bramble::pack::{PackOptions, pack_site};
use bramble_hal::Instant;
use bramble_site::{Body, BodyRequest, BodySource, BodyStatus, SiteImage};
use bramble_store::fat::{self, FatError, FileExtents};
use bramble_store::{CardStore, MemoryCard, Page, read_index};

/// A site with pages, a stylesheet and incompressible files of several sizes.
fn site(dir: &Path) {
    fs::create_dir_all(dir.join("docs")).unwrap();
    for page in 0..20 {
        let text = format!("<h1>Page {page}</h1>\n").repeat(40 + page * 10);
        fs::write(dir.join(format!("docs/page-{page}.html")), text).unwrap();
    }
    fs::write(dir.join("style.css"), "body { margin: 0 }\n".repeat(200)).unwrap();
    let mut state = 7u64;
    for (name, len) in [("a.bin", 1_000), ("b.jpg", 90_000), ("c.mp4", 700_000)] {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        fs::write(dir.join(name), bytes).unwrap();
    }
}

/// Serves every body of `expected` through a store over `card` at `extents`, checking bytes.
fn serve_everything(card: &[u8], extents: FileExtents, expected: &SiteImage<'_>) {
    let mut device = MemoryCard::new(card);
    let mut index_memory = vec![0u8; 1 << 20];
    let (index, _) = read_index(&mut device, &extents, &mut index_memory).unwrap();
    assert_eq!(index.checksum(), expected.checksum());
    let mut table = vec![0u32; CardStore::<MemoryCard>::table_len(&index)];
    let segment_len = index.segment_len() as usize;
    let mut pages_memory = vec![0u8; 4 * segment_len];
    let mut pages: Vec<Page> = pages_memory
        .chunks_exact_mut(segment_len)
        .map(Page::new)
        .collect();
    let store = CardStore::new(device, index, extents, &mut table);
    store.attach_pages(&mut pages);
    let mut now = 0u64;
    for file in expected.files() {
        for variant in [Some(file.identity), file.gzip, file.brotli]
            .into_iter()
            .flatten()
        {
            let got = fetch(&store, variant.body, &mut now);
            assert!(
                got == expected.body(variant.body),
                "{}: bytes differ",
                file.path
            );
        }
    }
    let counters = store.counters();
    assert_eq!(counters.checksum_failures, 0);
    assert_eq!(counters.read_errors, 0);
}

fn fetch<'b>(store: &CardStore<'_, 'b, MemoryCard<'_, 'b>>, body: Body, now: &mut u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buffer = [0u8; 4096];
    let mut first = true;
    let mut last_segment = None;
    while (out.len() as u32) < body.len {
        let offset = out.len() as u32;
        let segment = (body.offset + offset) / 65536;
        let lookup = first || last_segment != Some(segment);
        first = false;
        last_segment = Some(segment);
        match store.read(
            BodyRequest {
                body,
                offset,
                lookup,
            },
            &mut buffer,
        ) {
            BodyStatus::Ready(n) => out.extend_from_slice(&buffer[..n]),
            BodyStatus::Pending => {
                *now += 1000;
                store.poll(Instant::from_micros(*now));
            }
            BodyStatus::Failed => panic!("read failed"),
        }
    }
    out
}

fn card_with(site_image: Vec<u8>, size_mib: Option<u64>) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("card.img");
    let inputs = ImageInputs {
        kernel: vec![0xEA; 4096],
        site: site_image,
        settings: bramble_settings::TEMPLATE.to_string(),
        firmware: Vec::new(),
        size_mib,
        tls: None,
    };
    build_image(&inputs, &path).unwrap();
    fs::read(&path).unwrap()
}

#[test]
fn the_kernel_finds_and_serves_site_bin_on_fat16_and_fat32_cards() {
    let dir = tempfile::tempdir().unwrap();
    site(dir.path());
    let packed = pack_site(dir.path(), &PackOptions::default()).unwrap();
    let expected = SiteImage::new_checked(&packed.image).unwrap();
    // 32 MiB: FAT16. 256 MiB: FAT32.
    for size in [None, Some(256)] {
        let card = card_with(packed.image.clone(), size);
        let mut device = MemoryCard::new(&card);
        let extents = fat::locate(&mut device, "SITE.BIN").unwrap();
        assert_eq!(extents.len() as usize, packed.image.len());
        assert_eq!(
            extents.runs().len(),
            1,
            "the image tool writes it in one piece"
        );
        serve_everything(&card, extents, &expected);
        assert_eq!(
            fat::locate(&mut MemoryCard::new(&card), "NOPE.BIN"),
            Err(FatError::NotFound)
        );
        // BRAMBLE.TXT is found the same way (a file embedded-sdmmc reads for the kernel).
        let settings = fat::locate(&mut MemoryCard::new(&card), "bramble.txt").unwrap();
        assert_eq!(settings.len() as usize, bramble_settings::TEMPLATE.len());
    }
}

/// A window of a stream: the partition inside a disk.
struct Window<'a> {
    disk: &'a mut std::io::Cursor<Vec<u8>>,
    start: u64,
    len: u64,
    at: u64,
}

impl Read for Window<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min((self.len - self.at) as usize);
        self.disk.seek(SeekFrom::Start(self.start + self.at))?;
        let n = self.disk.read(&mut buf[..n])?;
        self.at += n as u64;
        Ok(n)
    }
}

impl Write for Window<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = buf.len().min((self.len - self.at) as usize);
        self.disk.seek(SeekFrom::Start(self.start + self.at))?;
        let n = self.disk.write(&buf[..n])?;
        self.at += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Seek for Window<'_> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.at = match to {
            SeekFrom::Start(at) => at,
            SeekFrom::Current(delta) => (self.at as i64 + delta) as u64,
            SeekFrom::End(delta) => (self.len as i64 + delta) as u64,
        };
        Ok(self.at)
    }
}

#[test]
fn a_fragmented_site_bin_is_read_by_its_runs() {
    let dir = tempfile::tempdir().unwrap();
    site(dir.path());
    let packed = pack_site(dir.path(), &PackOptions::default()).unwrap();
    let expected = SiteImage::new_checked(&packed.image).unwrap();
    // A 48 MiB disk, one FAT16 partition from 1 MiB, 2 KiB clusters.
    let disk_len = 48u64 << 20;
    let mut disk = std::io::Cursor::new(vec![0u8; disk_len as usize]);
    {
        let mbr = disk.get_mut();
        mbr[446 + 4] = 0x0E;
        mbr[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
        mbr[446 + 12..446 + 16].copy_from_slice(&((disk_len / 512 - 2048) as u32).to_le_bytes());
        mbr[510] = 0x55;
        mbr[511] = 0xAA;
    }
    let mut window = Window {
        disk: &mut disk,
        start: 1 << 20,
        len: disk_len - (1 << 20),
        at: 0,
    };
    fatfs::format_volume(
        &mut window,
        fatfs::FormatVolumeOptions::new()
            .fat_type(fatfs::FatType::Fat16)
            .bytes_per_cluster(2048),
    )
    .unwrap();
    {
        let fs = fatfs::FileSystem::new(&mut window, fatfs::FsOptions::new()).unwrap();
        let root = fs.root_dir();
        // Holes: write two files, delete the first, and write SITE.BIN in pieces between
        // appends to another file, so its clusters interleave.
        root.create_file("A.BIN")
            .unwrap()
            .write_all(&[1; 150_000])
            .unwrap();
        root.create_file("B.BIN")
            .unwrap()
            .write_all(&[2; 10_000])
            .unwrap();
        root.remove("A.BIN").unwrap();
        let mut site_bin = root.create_file("SITE.BIN").unwrap();
        let mut other = root.create_file("C.BIN").unwrap();
        for piece in packed.image.chunks(40_000) {
            site_bin.write_all(piece).unwrap();
            site_bin.flush().unwrap();
            other.write_all(&[3; 6_000]).unwrap();
            other.flush().unwrap();
        }
    }
    let card = disk.into_inner();
    let extents = fat::locate(&mut MemoryCard::new(&card), "SITE.BIN").unwrap();
    assert!(extents.runs().len() > 5, "{} runs", extents.runs().len());
    serve_everything(&card, extents, &expected);
}
