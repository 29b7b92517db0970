//! Where a file lies on a FAT16 or FAT32 card: the partition, the boot sector, the root folder
//! entry and the cluster chain, turned once into a short list of contiguous runs of blocks, so
//! that the file is then read by run (multi-block reads), never by walking the FAT again.
//!
//! Everything read from the card is untrusted: every field is checked, arithmetic is checked
//! (in `u32`/`u64`, the same widths on the Pi and the host), and every loop is bounded by the
//! sizes the boot sector declares. Layout from Microsoft's "FAT: General Overview of On-Disk
//! Format" (version 1.03), the same document embedded-sdmmc follows.

use bramble_hal::block::{BLOCK_SIZE, BlockDevice, BlockError, BlockRun, MAX_RUNS_PER_READ};

/// Most runs a file may be split into (a freshly written card has one).
pub const MAX_RUNS: usize = 128;
/// FAT blocks read at once while walking a cluster chain.
const FAT_WINDOW_BLOCKS: usize = 8;

/// Why a file could not be located.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FatError {
    /// A read from the card failed.
    Read(BlockError),
    /// Block 0 is not a master boot record with a FAT partition in it.
    NoPartition,
    /// The partition's boot sector is not a FAT16 or FAT32 one this reader understands
    /// (FAT12, sectors other than 512 bytes, or inconsistent sizes).
    BadBootSector,
    /// No file of that name in the root folder.
    NotFound,
    /// The file's cluster chain is broken: it ends early, points outside the volume, or marks
    /// a bad cluster.
    BrokenChain,
    /// The file is split into more than [`MAX_RUNS`] pieces.
    TooFragmented,
}

impl From<BlockError> for FatError {
    fn from(error: BlockError) -> Self {
        FatError::Read(error)
    }
}

impl core::fmt::Display for FatError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FatError::Read(error) => write!(f, "card read failed: {error}"),
            FatError::NoPartition => f.write_str("no FAT partition in the card's partition table"),
            FatError::BadBootSector => f.write_str("the FAT boot sector is not FAT16 or FAT32"),
            FatError::NotFound => f.write_str("not in the card's root folder"),
            FatError::BrokenChain => f.write_str("its FAT cluster chain is broken"),
            FatError::TooFragmented => write!(
                f,
                "it is split into more than {MAX_RUNS} pieces on the card; write the card again \
                 with `bramble image` or copy the file to a freshly formatted card"
            ),
        }
    }
}

/// One contiguous piece of a file on the card.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// Block of the file (from its start) where the piece begins.
    pub file_block: u32,
    /// Block of the card where it lies.
    pub card_block: u64,
    /// Length in blocks.
    pub blocks: u32,
}

/// Where a file lies on the card: its length and its runs, in file order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileExtents {
    len: u32,
    runs: heapless::Vec<Run, MAX_RUNS>,
}

impl FileExtents {
    /// A file of `len` bytes stored contiguously from `card_block` (a bare image on a block
    /// device, without a filesystem).
    pub fn contiguous(card_block: u64, len: u32) -> Self {
        let mut runs = heapless::Vec::new();
        let blocks = len.div_ceil(BLOCK_SIZE as u32);
        if blocks > 0 {
            // Cannot fail: the vector is empty.
            let _ = runs.push(Run {
                file_block: 0,
                card_block,
                blocks,
            });
        }
        Self { len, runs }
    }

    /// Length of the file in bytes.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// True for an empty file.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The runs, in file order.
    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    /// The card blocks holding file bytes `offset .. offset + len` (whole blocks, the last
    /// one possibly past the end of the file but inside its last cluster), as at most
    /// [`MAX_RUNS_PER_READ`] runs; `None` if the range is not inside the file or needs more.
    pub fn plan(
        &self,
        offset: u32,
        len: u32,
    ) -> Option<heapless::Vec<BlockRun, MAX_RUNS_PER_READ>> {
        let end = offset.checked_add(len)?;
        if len == 0 || end > self.len {
            return None;
        }
        let block = BLOCK_SIZE as u32;
        let mut first = offset / block;
        let last = end.div_ceil(block); // one past the last block
        let mut plan = heapless::Vec::new();
        // The run holding `first`: the last one starting at or before it.
        let mut at = self.runs.partition_point(|run| run.file_block <= first);
        at = at.checked_sub(1)?;
        while first < last {
            let run = self.runs.get(at)?;
            let skip = first.checked_sub(run.file_block)?;
            let available = run.blocks.checked_sub(skip).filter(|&n| n > 0)?;
            let take = available.min(last - first);
            plan.push(BlockRun {
                first_block: run.card_block.checked_add(u64::from(skip))?,
                blocks: take,
            })
            .ok()?;
            first += take;
            at += 1;
        }
        Some(plan)
    }
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    match bytes.get(at..at + 2) {
        Some(&[a, b]) => u16::from_le_bytes([a, b]),
        _ => 0,
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    match bytes.get(at..at + 4) {
        Some(&[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]),
        _ => 0,
    }
}

/// The FAT flavours this reader handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FatKind {
    Fat16,
    Fat32,
}

/// The geometry of a FAT volume, from its boot sector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Volume {
    kind: FatKind,
    /// Card block of the first FAT.
    fat_start: u64,
    /// Length of one FAT in blocks.
    fat_blocks: u32,
    /// Blocks per cluster (a power of two, 1 to 128).
    cluster_blocks: u32,
    /// Card block of cluster 2.
    data_start: u64,
    /// Clusters in the volume (valid cluster numbers are 2 .. cluster_count + 2).
    cluster_count: u32,
    /// FAT16: card block and length in blocks of the fixed root folder.
    root_blocks: (u64, u32),
    /// FAT32: first cluster of the root folder.
    root_cluster: u32,
}

impl Volume {
    /// Reads the partition table and the boot sector of the first FAT partition.
    fn read<D: BlockDevice>(device: &mut D) -> Result<Self, FatError> {
        let mut block = [0u8; BLOCK_SIZE];
        device.read_blocks(0, &mut block)?;
        if u16_at(&block, 510) != 0xAA55 {
            return Err(FatError::NoPartition);
        }
        let start = (0..4)
            .map(|i| 446 + 16 * i)
            .find(|&entry| matches!(block[entry + 4], 0x04 | 0x06 | 0x0B | 0x0C | 0x0E))
            .map(|entry| u32_at(&block, entry + 8))
            .filter(|&lba| lba != 0)
            .ok_or(FatError::NoPartition)?;
        let start = u64::from(start);
        device.read_blocks(start, &mut block)?;
        Self::parse(start, &block)
    }

    /// Checks a boot sector at card block `start`.
    fn parse(start: u64, boot: &[u8; BLOCK_SIZE]) -> Result<Self, FatError> {
        let bad = FatError::BadBootSector;
        let bytes_per_sector = u16_at(boot, 11);
        let cluster_blocks = u32::from(boot[13]);
        let reserved = u32::from(u16_at(boot, 14));
        let fats = u32::from(boot[16]);
        let root_entries = u32::from(u16_at(boot, 17));
        let total = match u16_at(boot, 19) {
            0 => u32_at(boot, 32),
            small => u32::from(small),
        };
        let fat_size = match u16_at(boot, 22) {
            0 => u32_at(boot, 36),
            small => u32::from(small),
        };
        if u16_at(boot, 510) != 0xAA55
            || usize::from(bytes_per_sector) != BLOCK_SIZE
            || !cluster_blocks.is_power_of_two()
            || cluster_blocks > 128
            || reserved == 0
            || fats == 0
            || fat_size == 0
        {
            return Err(bad);
        }
        let root_dir_blocks = (root_entries * 32).div_ceil(BLOCK_SIZE as u32);
        let first_data = fats
            .checked_mul(fat_size)
            .and_then(|n| n.checked_add(reserved))
            .and_then(|n| n.checked_add(root_dir_blocks))
            .ok_or(bad)?;
        let cluster_count = total.checked_sub(first_data).ok_or(bad)? / cluster_blocks;
        let kind = match cluster_count {
            0..4085 => return Err(bad), // FAT12
            4085..65525 => FatKind::Fat16,
            _ => FatKind::Fat32,
        };
        // The FAT must have an entry for every cluster.
        let entry_bytes = match kind {
            FatKind::Fat16 => 2,
            FatKind::Fat32 => 4,
        };
        let needed = (u64::from(cluster_count) + 2) * entry_bytes;
        if u64::from(fat_size) * (BLOCK_SIZE as u64) < needed {
            return Err(bad);
        }
        let fat_start = start + u64::from(reserved);
        let root_start = fat_start + u64::from(fats) * u64::from(fat_size);
        let root_cluster = u32_at(boot, 44);
        match kind {
            FatKind::Fat16 if root_entries == 0 => return Err(bad),
            FatKind::Fat32
                if root_entries != 0
                    || !(2..cluster_count.saturating_add(2)).contains(&root_cluster) =>
            {
                return Err(bad);
            }
            _ => {}
        }
        Ok(Volume {
            kind,
            fat_start,
            fat_blocks: fat_size,
            cluster_blocks,
            data_start: start + u64::from(first_data),
            cluster_count,
            root_blocks: (root_start, root_dir_blocks),
            root_cluster,
        })
    }

    /// Card block of cluster `cluster` (already checked to be a valid cluster number).
    fn cluster_block(&self, cluster: u32) -> u64 {
        self.data_start + u64::from(cluster - 2) * u64::from(self.cluster_blocks)
    }

    fn is_cluster(&self, cluster: u32) -> bool {
        (2..self.cluster_count.saturating_add(2)).contains(&cluster)
    }
}

/// Reads FAT entries through a window of a few blocks.
struct FatReader {
    window: [u8; FAT_WINDOW_BLOCKS * BLOCK_SIZE],
    /// Card block of the window's first block and how many blocks it holds, once filled.
    filled: Option<(u64, u64)>,
}

impl FatReader {
    fn new() -> Self {
        Self {
            window: [0; FAT_WINDOW_BLOCKS * BLOCK_SIZE],
            filled: None,
        }
    }

    /// The cluster after `cluster` in the chain, or `None` at the end of the chain.
    fn next<D: BlockDevice>(
        &mut self,
        device: &mut D,
        volume: &Volume,
        cluster: u32,
    ) -> Result<Option<u32>, FatError> {
        let entry_bytes: u64 = match volume.kind {
            FatKind::Fat16 => 2,
            FatKind::Fat32 => 4,
        };
        let offset = u64::from(cluster) * entry_bytes;
        let fat_end = volume.fat_start + u64::from(volume.fat_blocks);
        let block = volume.fat_start + offset / BLOCK_SIZE as u64;
        if block >= fat_end {
            // `Volume::parse` checked that the FAT covers every cluster.
            return Err(FatError::BrokenChain);
        }
        let within = match self.filled {
            Some((first, count)) if (first..first + count).contains(&block) => block - first,
            _ => {
                // One multi-block read for the next few FAT blocks, never past the FAT.
                let count = (fat_end - block).min(FAT_WINDOW_BLOCKS as u64);
                let bytes = count as usize * BLOCK_SIZE;
                self.filled = None;
                device.read_blocks(block, &mut self.window[..bytes])?;
                self.filled = Some((block, count));
                0
            }
        };
        let at = within as usize * BLOCK_SIZE + (offset % BLOCK_SIZE as u64) as usize;
        let next = match volume.kind {
            FatKind::Fat16 => match u16_at(&self.window, at) {
                0xFFF8..=0xFFFF => return Ok(None),
                value => u32::from(value),
            },
            FatKind::Fat32 => match u32_at(&self.window, at) & 0x0FFF_FFFF {
                0x0FFF_FFF8..=0x0FFF_FFFF => return Ok(None),
                value => value,
            },
        };
        if volume.is_cluster(next) {
            Ok(Some(next))
        } else {
            Err(FatError::BrokenChain)
        }
    }
}

/// Converts a file name to its 8.3 directory form (`SITE.BIN` -> `SITE    BIN`).
fn short_name(name: &str) -> Option<[u8; 11]> {
    let (base, extension) = name.split_once('.').unwrap_or((name, ""));
    if base.is_empty() || base.len() > 8 || extension.len() > 3 || extension.contains('.') {
        return None;
    }
    let mut out = [b' '; 11];
    for (slot, byte) in out.iter_mut().zip(base.bytes()) {
        *slot = byte.to_ascii_uppercase();
    }
    for (slot, byte) in out[8..].iter_mut().zip(extension.bytes()) {
        *slot = byte.to_ascii_uppercase();
    }
    Some(out)
}

/// Looks at the 32-byte folder entries in `entries` for `name`: `Ok(Some((first cluster,
/// size)))` when found, `Ok(None)` to keep looking, `Err(NotFound)` at the end marker.
fn search(entries: &[u8], name: &[u8; 11], kind: FatKind) -> Result<Option<(u32, u32)>, FatError> {
    for entry in entries.chunks_exact(32) {
        match entry[0] {
            0x00 => return Err(FatError::NotFound),
            0xE5 => continue,
            _ => {}
        }
        let attributes = entry[11];
        // Long-name parts, volume labels and folders are not the file.
        if attributes & 0x0F == 0x0F || attributes & 0x18 != 0 || entry[..11] != name[..] {
            continue;
        }
        let high = match kind {
            FatKind::Fat16 => 0,
            FatKind::Fat32 => u32::from(u16_at(entry, 20)),
        };
        let cluster = (high << 16) | u32::from(u16_at(entry, 26));
        return Ok(Some((cluster, u32_at(entry, 28))));
    }
    Ok(None)
}

/// Finds `name` (an 8.3 name such as `SITE.BIN`) in the root folder of the card's first FAT
/// partition and maps it to runs of card blocks.
pub fn locate<D: BlockDevice>(device: &mut D, name: &str) -> Result<FileExtents, FatError> {
    let short = short_name(name).ok_or(FatError::NotFound)?;
    let volume = Volume::read(device)?;
    let mut fat = FatReader::new();
    let mut block = [0u8; BLOCK_SIZE];
    let found = match volume.kind {
        FatKind::Fat16 => {
            let (start, blocks) = volume.root_blocks;
            let mut found = None;
            for i in 0..u64::from(blocks) {
                device.read_blocks(start + i, &mut block)?;
                if let Some(hit) = search(&block, &short, volume.kind)? {
                    found = Some(hit);
                    break;
                }
            }
            found
        }
        FatKind::Fat32 => {
            let mut cluster = volume.root_cluster;
            let mut found = None;
            // A folder chain longer than the volume has a loop in it.
            'clusters: for _ in 0..volume.cluster_count {
                for i in 0..u64::from(volume.cluster_blocks) {
                    device.read_blocks(volume.cluster_block(cluster) + i, &mut block)?;
                    if let Some(hit) = search(&block, &short, volume.kind)? {
                        found = Some(hit);
                        break 'clusters;
                    }
                }
                match fat.next(device, &volume, cluster)? {
                    Some(next) => cluster = next,
                    None => break,
                }
            }
            found
        }
    };
    let (first_cluster, len) = found.ok_or(FatError::NotFound)?;
    chain(device, &volume, &mut fat, first_cluster, len)
}

/// Follows the cluster chain of a file of `len` bytes from `first_cluster`.
fn chain<D: BlockDevice>(
    device: &mut D,
    volume: &Volume,
    fat: &mut FatReader,
    first_cluster: u32,
    len: u32,
) -> Result<FileExtents, FatError> {
    let mut extents = FileExtents {
        len,
        runs: heapless::Vec::new(),
    };
    let cluster_bytes = u64::from(volume.cluster_blocks) * BLOCK_SIZE as u64;
    let clusters = u64::from(len).div_ceil(cluster_bytes);
    if clusters == 0 {
        return Ok(extents);
    }
    if !volume.is_cluster(first_cluster) {
        return Err(FatError::BrokenChain);
    }
    let mut cluster = first_cluster;
    let mut file_block: u32 = 0;
    for index in 0..clusters {
        let card_block = volume.cluster_block(cluster);
        match extents.runs.last_mut() {
            Some(run) if run.card_block + u64::from(run.blocks) == card_block => {
                run.blocks += volume.cluster_blocks;
            }
            _ => extents
                .runs
                .push(Run {
                    file_block,
                    card_block,
                    blocks: volume.cluster_blocks,
                })
                .map_err(|_| FatError::TooFragmented)?,
        }
        // A file of at most 4 GiB has at most 2^23 blocks.
        file_block = file_block
            .checked_add(volume.cluster_blocks)
            .ok_or(FatError::BrokenChain)?;
        if index + 1 < clusters {
            cluster = fat
                .next(device, volume, cluster)?
                .ok_or(FatError::BrokenChain)?;
        }
    }
    Ok(extents)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    fn extents(runs: &[(u32, u64, u32)], len: u32) -> FileExtents {
        FileExtents {
            len,
            runs: runs
                .iter()
                .map(|&(file_block, card_block, blocks)| Run {
                    file_block,
                    card_block,
                    blocks,
                })
                .collect(),
        }
    }

    #[test]
    fn plans_cover_whole_blocks_across_runs() {
        let file = extents(&[(0, 1000, 8), (8, 5000, 8), (16, 100, 4)], 20 * 512 - 7);
        let plan = file.plan(0, 512).unwrap();
        assert_eq!(
            &plan[..],
            &[BlockRun {
                first_block: 1000,
                blocks: 1
            }]
        );
        // Crossing two runs.
        let plan = file.plan(6 * 512, 4 * 512).unwrap();
        assert_eq!(
            &plan[..],
            &[
                BlockRun {
                    first_block: 1006,
                    blocks: 2
                },
                BlockRun {
                    first_block: 5000,
                    blocks: 2
                }
            ]
        );
        // The file's last bytes: its last block, whole.
        let plan = file.plan(19 * 512, 505).unwrap();
        assert_eq!(
            &plan[..],
            &[BlockRun {
                first_block: 103,
                blocks: 1
            }]
        );
        assert!(file.plan(19 * 512, 506).is_none(), "past the end");
        assert!(file.plan(0, 0).is_none());
        assert!(file.plan(u32::MAX, 2).is_none(), "overflow");
        assert_eq!(file.plan(0, file.len()).unwrap().len(), 3);
    }

    #[test]
    fn plans_refuse_more_pieces_than_one_read_takes() {
        let runs: Vec<(u32, u64, u32)> = (0..20).map(|i| (i, 10 * u64::from(i), 1)).collect();
        let file = extents(&runs, 20 * 512);
        assert_eq!(file.plan(0, 8 * 512).unwrap().len(), 8);
        assert!(file.plan(0, 9 * 512).is_none());
    }

    #[test]
    fn contiguous_files_have_one_run() {
        let file = FileExtents::contiguous(0, 1025);
        assert_eq!(file.runs().len(), 1);
        assert_eq!(file.runs()[0].blocks, 3);
        assert!(FileExtents::contiguous(0, 0).runs().is_empty());
    }

    #[test]
    fn short_names() {
        assert_eq!(&short_name("SITE.BIN").unwrap(), b"SITE    BIN");
        assert_eq!(&short_name("bramble.txt").unwrap(), b"BRAMBLE TXT");
        assert_eq!(&short_name("KERNEL").unwrap(), b"KERNEL     ");
        for bad in ["", ".BIN", "TOOLONGNAME.BIN", "A.BINX", "A.B.C"] {
            assert!(short_name(bad).is_none(), "{bad}");
        }
    }

    fn boot_sector(total: u32, cluster_blocks: u8, fat_size: u32, fat32: bool) -> [u8; 512] {
        let mut boot = [0u8; 512];
        boot[11..13].copy_from_slice(&512u16.to_le_bytes());
        boot[13] = cluster_blocks;
        boot[14..16].copy_from_slice(&32u16.to_le_bytes());
        boot[16] = 2;
        if fat32 {
            boot[32..36].copy_from_slice(&total.to_le_bytes());
            boot[36..40].copy_from_slice(&fat_size.to_le_bytes());
            boot[44..48].copy_from_slice(&2u32.to_le_bytes());
        } else {
            boot[17..19].copy_from_slice(&512u16.to_le_bytes());
            boot[32..36].copy_from_slice(&total.to_le_bytes());
            boot[22..24].copy_from_slice(&(fat_size as u16).to_le_bytes());
        }
        boot[510] = 0x55;
        boot[511] = 0xAA;
        boot
    }

    #[test]
    fn boot_sectors_are_checked_with_checked_arithmetic() {
        // A 64 MiB FAT16 volume with 2 KiB clusters.
        let good = boot_sector(131_072, 4, 128, false);
        let volume = Volume::parse(2048, &good).unwrap();
        assert_eq!(volume.kind, FatKind::Fat16);
        assert_eq!(volume.fat_start, 2048 + 32);
        assert_eq!(volume.root_blocks, (2048 + 32 + 256, 32));
        assert_eq!(volume.data_start, 2048 + 32 + 256 + 32);
        // A 1 GiB FAT32 volume with 4 KiB clusters.
        let volume = Volume::parse(2048, &boot_sector(2_097_152, 8, 2048, true)).unwrap();
        assert_eq!(volume.kind, FatKind::Fat32);
        assert_eq!(volume.root_cluster, 2);
        let cases: [(usize, &[u8]); 8] = [
            (11, &[0, 4]),                   // 1 KiB sectors
            (13, &[3]),                      // cluster size not a power of two
            (13, &[0]),                      // no cluster size
            (14, &[0, 0]),                   // no reserved sectors
            (16, &[0]),                      // no FAT
            (22, &[1, 0]),                   // a FAT too small for the clusters
            (32, &[0xFF, 0xFF, 0xFF, 0xFF]), // wrapping sizes: a FAT too small
            (510, &[0, 0]),                  // no signature
        ];
        for (at, bytes) in cases {
            let mut boot = good;
            boot[at..at + bytes.len()].copy_from_slice(bytes);
            assert_eq!(
                Volume::parse(2048, &boot),
                Err(FatError::BadBootSector),
                "{at}"
            );
        }
        // Reserved + FATs larger than the volume: no underflow.
        let mut boot = good;
        boot[32..36].copy_from_slice(&10u32.to_le_bytes());
        assert_eq!(Volume::parse(2048, &boot), Err(FatError::BadBootSector));
        // A FAT12-sized volume.
        assert_eq!(
            Volume::parse(2048, &boot_sector(4_000, 1, 32, false)),
            Err(FatError::BadBootSector)
        );
    }
}
