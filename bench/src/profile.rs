//! `--profile`: where the guest's instructions go, by kernel function. The instruction-counting
//! boot loads bench/plugin/tbcount.c, a QEMU TCG plugin of ours built here with the system C
//! compiler, which counts the instructions executed in every translation block and writes a
//! snapshot of all counters when asked on a FIFO. Two snapshots around a load run, subtracted,
//! give the instructions of that window per block address; the kernel ELF's symbol table
//! attributes each block to the function it starts in (a block never spans a branch, so it
//! lies in one function). Divided by the good responses of the run: instructions per request,
//! by function, every instruction the guest ran in the window (interrupts, timers and idle
//! polling included).

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Functions listed per target in the report.
pub const TOP_FUNCTIONS: usize = 15;

/// The plugin's source, relative to the workspace root.
const PLUGIN_SOURCE: &str = "bench/plugin/tbcount.c";

/// One target's profile.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetProfile {
    /// The load target (`page`, `304`, ...).
    pub target: String,
    /// Good responses in the window.
    pub requests: u64,
    /// Every guest instruction executed in the window, as the plugin counted them.
    pub instructions: u64,
    /// `instructions / requests`.
    pub instructions_per_request: f64,
    /// The functions that ran the most instructions, most first, at most [`TOP_FUNCTIONS`].
    pub top: Vec<FunctionCost>,
}

/// One function's share of a profile.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionCost {
    /// Demangled name without the hash (`?` for addresses outside every symbol).
    pub function: String,
    /// Instructions per request executed in blocks that start in this function.
    pub instructions_per_request: f64,
    /// Percent of all instructions in the window.
    pub share_percent: f64,
}

/// A snapshot: instructions executed so far, by translation block start address.
pub type Snapshot = BTreeMap<u32, u64>;

/// Parses a snapshot file of the plugin: `ADDRESS INSNS EXECUTED` lines (hexadecimal address,
/// decimal counts; EXECUTED is instructions, not runs, the inline op adds INSNS per run) and a
/// last line starting with `end`. A block translated more than once (after a flush) appears
/// once per translation; their counts add up.
pub fn parse_snapshot(text: &str) -> anyhow::Result<Snapshot> {
    let mut snapshot = Snapshot::new();
    let mut ended = false;
    for (number, line) in text.lines().enumerate() {
        if ended {
            bail!("line {}: data after the end line", number + 1);
        }
        if line.starts_with("end") {
            ended = true;
            continue;
        }
        let mut fields = line.split_ascii_whitespace();
        let (Some(address), Some(insns), Some(executed), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            bail!("line {}: not ADDRESS INSNS EXECUTED: {line:?}", number + 1);
        };
        let address = u64::from_str_radix(address, 16)
            .ok()
            .and_then(|a| u32::try_from(a).ok())
            .with_context(|| format!("line {}: bad address {address:?}", number + 1))?;
        let insns: u64 = insns
            .parse()
            .with_context(|| format!("line {}: bad instruction count", number + 1))?;
        let executed: u64 = executed
            .parse()
            .with_context(|| format!("line {}: bad executed count", number + 1))?;
        if insns == 0 || !executed.is_multiple_of(insns) {
            bail!(
                "line {}: {executed} instructions executed is no multiple of the block's {insns}",
                number + 1
            );
        }
        let total = snapshot.entry(address).or_insert(0);
        *total = total.checked_add(executed).context("count overflow")?;
    }
    if !ended {
        bail!("snapshot without its end line (cut short)");
    }
    Ok(snapshot)
}

/// `after - before` per address (counters only grow; a block missing later is an error).
pub fn difference(before: &Snapshot, after: &Snapshot) -> anyhow::Result<Snapshot> {
    let mut delta = Snapshot::new();
    for (address, earlier) in before {
        let later = after.get(address).copied().unwrap_or(0);
        if later < *earlier {
            bail!("the counter of block {address:#x} went down ({earlier} -> {later})");
        }
    }
    for (address, later) in after {
        let earlier = before.get(address).copied().unwrap_or(0);
        if *later > earlier {
            delta.insert(*address, later - earlier);
        }
    }
    Ok(delta)
}

/// A kernel's functions by address, from its ELF symbol table.
#[derive(Clone, Debug, Default)]
pub struct Symbols {
    /// (start, end or None when the symbol has no size, name), sorted by start.
    entries: Vec<(u32, Option<u32>, String)>,
}

impl Symbols {
    /// Reads the `.symtab` of a 32-bit little-endian ELF: functions (`STT_FUNC`) and untyped
    /// code labels (`STT_NOTYPE`, the assembly entry points), without ARM mapping symbols
    /// (`$a`, `$d`, `$t`) and absolute ones. Rust names are demangled without their hash.
    pub fn from_elf(elf: &[u8]) -> anyhow::Result<Symbols> {
        let u16_at = |offset: usize| -> anyhow::Result<u16> {
            let bytes = elf.get(offset..offset + 2).context("ELF truncated")?;
            Ok(u16::from_le_bytes([bytes[0], bytes[1]]))
        };
        let u32_at = |offset: usize| -> anyhow::Result<u32> {
            let bytes = elf.get(offset..offset + 4).context("ELF truncated")?;
            Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
        };
        if elf.get(..6) != Some(b"\x7fELF\x01\x01") {
            bail!("not a 32-bit little-endian ELF");
        }
        let sections = u32_at(32)? as usize;
        let section_size = u16_at(46)? as usize;
        let section_count = u16_at(48)? as usize;
        if section_size < 40 {
            bail!("ELF section headers of {section_size} bytes");
        }
        let section = |index: usize| -> anyhow::Result<(u32, usize, usize, usize, usize)> {
            let header = index
                .checked_mul(section_size)
                .and_then(|o| o.checked_add(sections))
                .context("section header offset")?;
            Ok((
                u32_at(header + 4)?,
                u32_at(header + 16)? as usize,
                u32_at(header + 20)? as usize,
                u32_at(header + 24)? as usize,
                u32_at(header + 36)? as usize,
            ))
        };
        const SHT_SYMTAB: u32 = 2;
        let mut entries = Vec::new();
        for index in 0..section_count {
            let (kind, offset, size, link, entry_size) = section(index)?;
            if kind != SHT_SYMTAB {
                continue;
            }
            if entry_size < 16 {
                bail!("symbol entries of {entry_size} bytes");
            }
            let (_, strings, strings_size, _, _) = section(link)?;
            let names = elf
                .get(strings..strings.checked_add(strings_size).context("strtab")?)
                .context("string table past the end of the ELF")?;
            for symbol in (0..size / entry_size).map(|i| offset + i * entry_size) {
                let name_offset = u32_at(symbol)? as usize;
                let value = u32_at(symbol + 4)?;
                let length = u32_at(symbol + 8)?;
                let info = *elf.get(symbol + 12).context("ELF truncated")?;
                let section_index = u16_at(symbol + 14)?;
                const STT_NOTYPE: u8 = 0;
                const STT_FUNC: u8 = 2;
                const SHN_UNDEF: u16 = 0;
                const SHN_ABS: u16 = 0xfff1;
                if !matches!(info & 0xf, STT_NOTYPE | STT_FUNC)
                    || section_index == SHN_UNDEF
                    || (0xff00..=SHN_ABS).contains(&section_index)
                {
                    continue;
                }
                let raw = names
                    .get(name_offset..)
                    .and_then(|rest| rest.split(|&b| b == 0).next())
                    .context("symbol name past the string table")?;
                let raw = String::from_utf8_lossy(raw);
                if raw.is_empty() || raw.starts_with('$') {
                    continue;
                }
                let name = format!("{:#}", rustc_demangle::demangle(&raw));
                // Bit 0 marks Thumb code; the address is the rest.
                let start = value & !1;
                let end = (length > 0).then(|| start.saturating_add(length));
                entries.push((start, end, name, info & 0xf == STT_FUNC));
            }
        }
        if entries.is_empty() {
            bail!("the ELF has no function symbols (stripped?)");
        }
        // At one address, a function before an untyped label, a sized symbol before an
        // unsized one, then by name, so the choice is stable.
        entries.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then(b.3.cmp(&a.3))
                .then(b.1.is_some().cmp(&a.1.is_some()))
                .then(a.2.cmp(&b.2))
        });
        entries.dedup_by_key(|entry| entry.0);
        Ok(Symbols {
            entries: entries
                .into_iter()
                .map(|(start, end, name, _)| (start, end, name))
                .collect(),
        })
    }

    /// Symbols from (start, size, name) triples, for tests.
    #[cfg(test)]
    fn from_list(list: &[(u32, u32, &str)]) -> Symbols {
        let mut entries: Vec<_> = list
            .iter()
            .map(|&(start, size, name)| (start, (size > 0).then(|| start + size), name.into()))
            .collect();
        entries.sort();
        Symbols { entries }
    }

    /// The function `address` lies in: the last symbol starting at or below it, unless that
    /// symbol has a size and ends at or below the address.
    pub fn function(&self, address: u32) -> Option<&str> {
        let index = self
            .entries
            .partition_point(|(start, _, _)| *start <= address)
            .checked_sub(1)?;
        let (_, end, name) = &self.entries[index];
        match end {
            Some(end) if address >= *end => None,
            _ => Some(name),
        }
    }
}

/// Sums a window's counts by function and keeps the [`TOP_FUNCTIONS`] costliest.
pub fn attribute(
    target: &str,
    symbols: &Symbols,
    window: &Snapshot,
    requests: u64,
) -> Option<TargetProfile> {
    let instructions: u64 = window.values().sum();
    if requests == 0 || instructions == 0 {
        return None;
    }
    let mut by_function: BTreeMap<&str, u64> = BTreeMap::new();
    for (address, count) in window {
        *by_function
            .entry(symbols.function(*address).unwrap_or("?"))
            .or_insert(0) += count;
    }
    let mut ranked: Vec<(&str, u64)> = by_function.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    Some(TargetProfile {
        target: target.into(),
        requests,
        instructions,
        instructions_per_request: instructions as f64 / requests as f64,
        top: ranked
            .into_iter()
            .take(TOP_FUNCTIONS)
            .map(|(function, count)| FunctionCost {
                function: function.into(),
                instructions_per_request: count as f64 / requests as f64,
                share_percent: 100.0 * count as f64 / instructions as f64,
            })
            .collect(),
    })
}

/// Builds the plugin with the system C compiler (`$CC`, else `cc`) into
/// target/bench/plugin/, unless the library there is newer than its source.
pub fn build_plugin(root: &Path) -> anyhow::Result<PathBuf> {
    let source = root.join(PLUGIN_SOURCE);
    let dir = root.join("target/bench/plugin");
    std::fs::create_dir_all(&dir)?;
    let library = dir.join("libtbcount.so");
    let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    if let (Some(built), Some(written)) = (modified(&library), modified(&source))
        && built > written
    {
        return Ok(library);
    }
    let compiler = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let status = std::process::Command::new(&compiler)
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror"])
        .arg("-fvisibility=hidden")
        .arg("-o")
        .arg(&library)
        .arg(&source)
        .arg("-pthread")
        .status()
        .with_context(|| {
            format!(
                "running the C compiler {} for the profiling plugin (Debian: gcc)",
                Path::new(&compiler).display()
            )
        })?;
    if !status.success() {
        bail!("building {} failed ({status})", source.display());
    }
    Ok(library)
}

/// A plugin loaded into one QEMU: its FIFO and snapshot folder.
pub struct Profiler {
    dir: PathBuf,
    fifo: PathBuf,
    library: PathBuf,
}

impl Profiler {
    /// Builds the plugin and makes a fresh snapshot folder and FIFO under `dir`.
    pub fn new(root: &Path, dir: &Path) -> anyhow::Result<Profiler> {
        let library = build_plugin(root)?;
        let dir = dir.join("profile");
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        let fifo = dir.join("control");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .with_context(|| format!("creating the FIFO {}", fifo.display()))?;
        for path in [&dir, &fifo, &library] {
            if path.as_os_str().to_string_lossy().contains(',') {
                bail!(
                    "{}: QEMU's -plugin option cannot take a comma",
                    path.display()
                );
            }
        }
        Ok(Profiler { dir, fifo, library })
    }

    /// The QEMU arguments that load the plugin.
    pub fn qemu_args(&self) -> Vec<OsString> {
        let mut plugin = OsString::from(&self.library);
        plugin.push(",out=");
        plugin.push(&self.dir);
        plugin.push(",ctl=");
        plugin.push(&self.fifo);
        vec!["-plugin".into(), plugin]
    }

    /// Asks the plugin for a snapshot named `name` (letters, digits, `-`, `_`: the plugin
    /// ignores any other name) and reads it back.
    pub fn snapshot(&self, name: &str) -> anyhow::Result<Snapshot> {
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            bail!("snapshot name {name:?}: letters, digits, '-' and '_' only");
        }
        let path = self.dir.join(format!("{name}.txt"));
        let _ = std::fs::remove_file(&path);
        let deadline = Instant::now() + Duration::from_secs(20);
        // Non-blocking: opening a FIFO with no reader fails (ENXIO) instead of hanging when
        // the plugin's thread is between two reads or QEMU is gone.
        let mut fifo = loop {
            match std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
                .open(&self.fifo)
            {
                Ok(file) => break file,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(error) => {
                    return Err(error).context("the profiling plugin does not read its FIFO");
                }
            }
        };
        writeln!(fifo, "{name}").context("writing to the profiling plugin's FIFO")?;
        drop(fifo);
        while !path.exists() {
            if Instant::now() > deadline {
                bail!("the profiling plugin wrote no {}", path.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        parse_snapshot(&std::fs::read_to_string(&path)?)
            .with_context(|| format!("reading {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_parse_add_translations_and_need_their_end() {
        let text = "8000 4 40\n8010 2 6\n8000 4 8\nend 3 blocks 0 dropped\n";
        let snapshot = parse_snapshot(text).unwrap();
        assert_eq!(snapshot, BTreeMap::from([(0x8000, 48), (0x8010, 6)]));
        assert!(parse_snapshot("8000 4 40\n").is_err(), "cut short");
        assert!(
            parse_snapshot("8000 4 41\nend\n").is_err(),
            "not a multiple"
        );
        assert!(parse_snapshot("8000 4\nend\n").is_err());
        assert!(parse_snapshot("zz 4 4\nend\n").is_err());
        assert!(
            parse_snapshot("1ffffffff 4 4\nend\n").is_err(),
            "beyond 32 bits"
        );
        assert!(parse_snapshot("end\n8000 1 1\n").is_err());
    }

    #[test]
    fn windows_subtract_and_refuse_counters_that_shrink() {
        let before = BTreeMap::from([(0x8000, 10), (0x9000, 5)]);
        let after = BTreeMap::from([(0x8000, 30), (0x9000, 5), (0xa000, 7)]);
        assert_eq!(
            difference(&before, &after).unwrap(),
            BTreeMap::from([(0x8000, 20), (0xa000, 7)])
        );
        assert!(difference(&after, &before).is_err());
    }

    #[test]
    fn addresses_go_to_the_function_they_lie_in() {
        let symbols = Symbols::from_list(&[
            (0x8000, 0x20, "start"),
            (0x8040, 0, "label"),
            (0x8100, 0x10, "memcpy"),
        ]);
        assert_eq!(symbols.function(0x7fff), None);
        assert_eq!(symbols.function(0x8000), Some("start"));
        assert_eq!(symbols.function(0x801f), Some("start"));
        assert_eq!(symbols.function(0x8020), None, "past start's size");
        assert_eq!(
            symbols.function(0x80ff),
            Some("label"),
            "unsized: to the next"
        );
        assert_eq!(symbols.function(0x810f), Some("memcpy"));
        assert_eq!(symbols.function(0x8110), None);
    }

    #[test]
    fn profiles_rank_functions_per_request() {
        let symbols = Symbols::from_list(&[(0x8000, 0x100, "poll"), (0x9000, 0x100, "memcpy")]);
        let window = BTreeMap::from([(0x8000, 100), (0x8010, 50), (0x9000, 250), (0xf000, 100)]);
        let profile = attribute("page", &symbols, &window, 10).unwrap();
        assert_eq!(profile.instructions, 500);
        assert_eq!(profile.instructions_per_request, 50.0);
        let names: Vec<_> = profile.top.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(names, ["memcpy", "poll", "?"]);
        assert_eq!(profile.top[0].instructions_per_request, 25.0);
        assert_eq!(profile.top[0].share_percent, 50.0);
        assert_eq!(profile.top[1].instructions_per_request, 15.0);
        assert!(attribute("page", &symbols, &window, 0).is_none());
    }

    /// A hand-made ELF with a symbol table: a Rust (v0-mangled) function, an assembly label, a
    /// mapping symbol and an absolute symbol, the last two left out.
    #[test]
    fn elf_symbols_are_read_and_demangled() {
        let names = b"\0_RNvCs1234_7example4poll\0irq_entry\0$a\0STACK\0";
        let mut symbols = vec![0u8; 16]; // the null symbol
        let mut symbol = |name: u32, value: u32, size: u32, info: u8, section: u16| {
            symbols.extend_from_slice(&name.to_le_bytes());
            symbols.extend_from_slice(&value.to_le_bytes());
            symbols.extend_from_slice(&size.to_le_bytes());
            symbols.extend_from_slice(&[info, 0]);
            symbols.extend_from_slice(&section.to_le_bytes());
        };
        symbol(1, 0x8100, 0x40, 0x12, 1); // global function
        symbol(26, 0x8080, 0, 0x00, 1); // untyped label
        symbol(36, 0x8080, 0, 0x00, 1); // $a
        symbol(39, 0x4000, 0, 0x00, 0xfff1); // absolute
        let mut elf = vec![0u8; 52];
        elf[..6].copy_from_slice(b"\x7fELF\x01\x01");
        let symtab_offset = 52;
        let strtab_offset = symtab_offset + symbols.len();
        let headers = strtab_offset + names.len();
        elf[32..36].copy_from_slice(&(headers as u32).to_le_bytes());
        elf[46..48].copy_from_slice(&40u16.to_le_bytes());
        elf[48..50].copy_from_slice(&3u16.to_le_bytes());
        elf.extend_from_slice(&symbols);
        elf.extend_from_slice(names);
        elf.extend_from_slice(&[0u8; 40]); // null section
        let header = |kind: u32, offset: usize, size: usize, link: u32, entry: u32| {
            let mut h = [0u8; 40];
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[16..20].copy_from_slice(&(offset as u32).to_le_bytes());
            h[20..24].copy_from_slice(&(size as u32).to_le_bytes());
            h[24..28].copy_from_slice(&link.to_le_bytes());
            h[36..40].copy_from_slice(&entry.to_le_bytes());
            h
        };
        elf.extend_from_slice(&header(2, symtab_offset, symbols.len(), 2, 16));
        elf.extend_from_slice(&header(3, strtab_offset, names.len(), 0, 0));
        let table = Symbols::from_elf(&elf).unwrap();
        assert_eq!(table.function(0x8120), Some("example::poll"));
        assert_eq!(table.function(0x8090), Some("irq_entry"));
        assert_eq!(table.function(0x8140), None);
        assert_eq!(table.function(0x4000), None);
        assert!(Symbols::from_elf(&elf[..40]).is_err());
    }
}
