//! Where a file lies on a FAT16 or FAT32 card: the partition and boot sector (checked by
//! `bramble-fat`), the root folder entry and the cluster chain, turned once into a short list
//! of contiguous runs of blocks, so that the file is then read by run (multi-block reads),
//! never by walking the FAT again.
//!
//! Everything read from the card is untrusted: every field is checked, arithmetic is checked
//! (in `u32`/`u64`, the same widths on the Pi and the host), and every loop is bounded by the
//! sizes the boot sector declares. Layout from Microsoft's "FAT: General Overview of On-Disk
//! Format" (version 1.03), the same document embedded-sdmmc follows.

use bramble_fat::{BootSector, FatLayoutError, FatType, Partition};
use bramble_hal::block::{BLOCK_SIZE, BlockDevice, BlockError, BlockRun, MAX_RUNS_PER_READ};

/// Most runs a file may be split into (a freshly written card has one).
pub const MAX_RUNS: usize = 128;
/// FAT blocks read at once while walking a cluster chain.
/// FAT blocks read at once while walking a cluster chain (16 KiB: a 93 MB file on a card with
/// 1 KiB clusters has a 366 KB chain, 23 reads).
const FAT_WINDOW_BLOCKS: usize = 32;

/// The FAT window's memory, aligned to a cache line so that a driver may fill it by DMA.
#[repr(C, align(32))]
struct Window([u8; FAT_WINDOW_BLOCKS * BLOCK_SIZE]);

/// Why a file could not be located.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FatError {
    /// A read from the card failed.
    Read(BlockError),
    /// The partition table or the FAT boot sector is not one the kernel reads.
    Layout(FatLayoutError),
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
            FatError::Layout(error) => write!(f, "{error}"),
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

/// The geometry of a FAT volume, from its checked boot sector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Volume {
    kind: FatType,
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
    /// The boot sector, for checking file entries.
    boot: BootSector,
}

impl Volume {
    /// Reads and checks the partition table and the boot sector of the first partition.
    fn read<D: BlockDevice>(device: &mut D) -> Result<Self, FatError> {
        let mut block = [0u8; BLOCK_SIZE];
        device.read_blocks(0, &mut block)?;
        let partition = Partition::first(&block, device.block_count()).map_err(FatError::Layout)?;
        let start = u64::from(partition.first_sector);
        device.read_blocks(start, &mut block)?;
        let boot = BootSector::new_checked(&block, partition.sectors).map_err(FatError::Layout)?;
        Ok(Self::from_boot_sector(start, boot))
    }

    /// The geometry of the checked `boot` sector of a volume at card block `start` (its sums
    /// stay inside the partition, which lies on the card: `bramble-fat` checked both).
    fn from_boot_sector(start: u64, boot: BootSector) -> Self {
        let fat_start = start + u64::from(boot.reserved_sectors());
        let root_start = fat_start + u64::from(boot.fat_count()) * u64::from(boot.fat_sectors());
        let root_dir_blocks = (u32::from(boot.root_entries()) * 32).div_ceil(BLOCK_SIZE as u32);
        Volume {
            kind: boot.fat_type(),
            fat_start,
            fat_blocks: boot.fat_sectors(),
            cluster_blocks: u32::from(boot.sectors_per_cluster()),
            data_start: start + u64::from(boot.first_data_sector()),
            cluster_count: boot.clusters(),
            root_blocks: (root_start, root_dir_blocks),
            root_cluster: boot.root_cluster().unwrap_or(0),
            boot,
        }
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
    window: Window,
    /// Card block of the window's first block and how many blocks it holds, once filled.
    filled: Option<(u64, u64)>,
}

impl FatReader {
    fn new() -> Self {
        Self {
            window: Window([0; FAT_WINDOW_BLOCKS * BLOCK_SIZE]),
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
            FatType::Fat16 => 2,
            FatType::Fat32 => 4,
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
                device.read_blocks(block, &mut self.window.0[..bytes])?;
                self.filled = Some((block, count));
                0
            }
        };
        let at = within as usize * BLOCK_SIZE + (offset % BLOCK_SIZE as u64) as usize;
        let next = match volume.kind {
            FatType::Fat16 => match u16_at(&self.window.0, at) {
                0xFFF8..=0xFFFF => return Ok(None),
                value => u32::from(value),
            },
            FatType::Fat32 => match u32_at(&self.window.0, at) & 0x0FFF_FFFF {
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
fn search(
    entries: &[u8],
    name: &[u8; 11],
    volume: &Volume,
) -> Result<Option<(u32, u32)>, FatError> {
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
        volume
            .boot
            .check_file_entry(entry)
            .map_err(FatError::Layout)?;
        let high = match volume.kind {
            FatType::Fat16 => 0,
            FatType::Fat32 => u32::from(u16_at(entry, 20)),
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
        FatType::Fat16 => {
            let (start, blocks) = volume.root_blocks;
            let mut found = None;
            for i in 0..u64::from(blocks) {
                device.read_blocks(start + i, &mut block)?;
                if let Some(hit) = search(&block, &short, &volume)? {
                    found = Some(hit);
                    break;
                }
            }
            found
        }
        FatType::Fat32 => {
            let mut cluster = volume.root_cluster;
            let mut found = None;
            // A folder chain longer than the volume has a loop in it.
            'clusters: for _ in 0..volume.cluster_count {
                for i in 0..u64::from(volume.cluster_blocks) {
                    device.read_blocks(volume.cluster_block(cluster) + i, &mut block)?;
                    if let Some(hit) = search(&block, &short, &volume)? {
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

/// Reads the whole file at `extents` into the start of `out` (which must hold the file's
/// length rounded up to whole blocks), one multi-block read per run; returns the file's bytes.
pub fn read_whole<'o, D: BlockDevice>(
    device: &mut D,
    extents: &FileExtents,
    out: &'o mut [u8],
) -> Result<&'o [u8], FatError> {
    let len = extents.len() as usize;
    let blocks_len = len.next_multiple_of(BLOCK_SIZE);
    let buffer = out
        .get_mut(..blocks_len)
        .ok_or(FatError::Read(BlockError::BadBuffer))?;
    let mut filled = 0usize;
    for run in extents.runs() {
        if filled >= blocks_len {
            break;
        }
        let bytes = (run.blocks as usize * BLOCK_SIZE).min(blocks_len - filled);
        device.read_blocks(run.card_block, &mut buffer[filled..filled + bytes])?;
        filled += bytes;
    }
    Ok(&buffer[..len])
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
    fn geometry_from_checked_boot_sectors() {
        // A 64 MiB FAT16 volume with 2 KiB clusters at block 2048.
        let boot = BootSector::new_checked(&boot_sector(131_072, 4, 128, false), 131_072).unwrap();
        let volume = Volume::from_boot_sector(2048, boot);
        assert_eq!(volume.kind, FatType::Fat16);
        assert_eq!(volume.fat_start, 2048 + 32);
        assert_eq!(volume.root_blocks, (2048 + 32 + 256, 32));
        assert_eq!(volume.data_start, 2048 + 32 + 256 + 32);
        assert_eq!(volume.cluster_blocks, 4);
        // A 1 GiB FAT32 volume with 4 KiB clusters.
        let boot =
            BootSector::new_checked(&boot_sector(2_097_152, 8, 2048, true), 2_097_152).unwrap();
        let volume = Volume::from_boot_sector(2048, boot);
        assert_eq!(volume.kind, FatType::Fat32);
        assert_eq!(volume.root_cluster, 2);
        assert_eq!(volume.data_start, 2048 + 32 + 2 * 2048);
        // What bramble-fat refuses never gets here: no cluster size, for one.
        let mut bad = boot_sector(131_072, 4, 128, false);
        bad[13] = 0;
        assert!(BootSector::new_checked(&bad, 131_072).is_err());
    }
}
