//! `pack-bench`: how long a first (cold) and a repeated (warm) `bramble pack` of a site take,
//! and what they produce, against single-threaded `gzip -9` over the same files; and the
//! quality/size/time curve of the compressors per class of file that the packer's policy is
//! chosen from.
//!
//! `cargo run --release -p bramble-bench --bin pack-bench -- SITE_DIR [--runs N]
//! [--baseline OLD_BRAMBLE]` (or `--sizes IMAGE...` for the size figures of images packed
//! elsewhere): each round runs, in turn, gzip -9 (one process over every file the packer
//! compresses, one thread), an older `bramble pack` if given (default and `--fast`; cold: an
//! empty cache folder; warm: the same folder again), and this build's pack at its default
//! effort and at `--fast` (cold, then warm). Rounds interleave the commands so a machine whose
//! speed drifts (a shared one) affects them alike; the table gives each figure's median and
//! range in CPU seconds (user + system, this process's and its children's, from
//! /proc/self/stat: a shared machine's wall times say more about the other users than about
//! the pack) and wall seconds, the load average before and after, and the bodies' sizes:
//! brotli and gzip totals, and what a client that accepts brotli downloads for the whole site.
//!
//! `pack-bench --curve SITE_DIR [--sample N] [--threads N]`: every file the packer compresses
//! (or every Nth by size), compressed with gzip -9 and with brotli at each quality the policy
//! could use, each compression's CPU time taken on its own thread (so other processes do not
//! count); per class of size and type, and in total, each quality's bytes against quality
//! 11's and its CPU time against gzip -9's, and the same for the tool's two efforts as they
//! choose per file.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bramble::pack::compress::{Effort, Encoding, Setting};
use bramble::pack::{PackOptions, pack_site};

/// Sizes of a packed site.
#[derive(Clone, Copy, Default)]
struct Sizes {
    brotli: u64,
    gzip: u64,
    /// For each file: its brotli body, else its gzip body, else the file.
    brotli_client: u64,
}

fn sizes(image: &[u8]) -> Sizes {
    let image = bramble_site::SiteImage::new_checked(image).expect("a valid image");
    let mut sizes = Sizes::default();
    for file in image.files() {
        let identity = u64::from(file.identity.body.len);
        let gzip = file.gzip.map(|v| u64::from(v.body.len));
        let brotli = file.brotli.map(|v| u64::from(v.body.len));
        sizes.gzip += gzip.unwrap_or(0);
        sizes.brotli += brotli.unwrap_or(0);
        sizes.brotli_client += brotli.or(gzip).unwrap_or(identity);
    }
    sizes
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "?".into())
}

/// CPU seconds (user + system) this process and its waited-for children have used so far.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
    let rest = &stat[stat.rfind(')').expect("a /proc stat line") + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': field 3 (state) is index 0; utime, stime, cutime, cstime are fields 14-17.
    let ticks: u64 = (14..=17)
        .map(|field| fields[field - 3].parse::<u64>().expect("a tick count"))
        .sum();
    ticks as f64 / rustix::param::clock_ticks_per_second().max(1) as f64
}

/// This thread's CPU time so far, in seconds.
fn thread_cpu_seconds() -> f64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    now.tv_sec as f64 + now.tv_nsec as f64 * 1e-9
}

/// (CPU seconds, wall seconds) that `work` takes, and what it returns.
fn timed<T>(work: impl FnOnce() -> T) -> (f64, f64, T) {
    let (cpu, wall) = (cpu_seconds(), Instant::now());
    let value = work();
    (cpu_seconds() - cpu, wall.elapsed().as_secs_f64(), value)
}

fn median(values: &mut [f64]) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    (
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    )
}

/// gzip -9 over the files the packer compresses, one process, one thread.
fn run_gzip(files: &[PathBuf]) {
    let status = Command::new("gzip")
        .args(["-9", "-c"])
        .args(files)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run gzip");
    assert!(status.success());
}

/// The image bytes of an older bramble's pack (with `--fast` if `fast`) with `cache` as its
/// cache folder.
fn baseline_pack(tool: &Path, site: &Path, cache: &Path, output: &Path, fast: bool) -> Vec<u8> {
    let status = Command::new(tool)
        .arg("pack")
        .arg(site)
        .arg("-o")
        .arg(output)
        .arg("--cache-dir")
        .arg(cache)
        .args(fast.then_some("--fast"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run the baseline bramble");
    assert!(status.success());
    std::fs::read(output).expect("the baseline's image")
}

fn this_pack(site: &Path, cache: &Path, effort: Effort) -> Vec<u8> {
    let options = PackOptions {
        cache_dir: Some(cache.to_path_buf()),
        effort,
        ..PackOptions::default()
    };
    pack_site(site, &options).expect("pack").image
}

/// The files `pack` would compress in `site`, with their sizes.
fn compressible_files(site: &Path) -> (Vec<bramble::pack::walk::SourceFile>, Vec<PathBuf>) {
    let walked = bramble::pack::walk::walk(site, false).expect("walk the site");
    let compressible = walked
        .iter()
        .filter(|f| {
            bramble::pack::mime::content_type(&f.url_path).1
                && f.len >= bramble::pack::compress::MIN_COMPRESS_BYTES as u64
        })
        .map(|f| f.fs_path.clone())
        .collect();
    (walked, compressible)
}

/// The brotli qualities the curve measures (window 22 below 10, as the fast effort uses them;
/// 10 and 11 with the window fitted to the file, as the thorough effort does).
const CURVE_QUALITIES: [u32; 7] = [5, 6, 7, 8, 9, 10, 11];

fn curve_setting(quality: u32, len: usize) -> Setting {
    Setting {
        encoding: Encoding::Brotli,
        level: quality,
        window: if quality >= 10 {
            bramble::pack::compress::fitted_window(len)
        } else {
            22
        },
    }
}

/// One file's measurements: (bytes, thread CPU seconds) for gzip -9 and each quality.
struct Measured {
    len: usize,
    kind: &'static str,
    gzip: (u64, f64),
    brotli: Vec<(u64, f64)>,
}

fn measure(data: &[u8], kind: &'static str) -> Measured {
    let time = |setting: Setting| {
        let started = thread_cpu_seconds();
        let bytes = setting.compress(data).len() as u64;
        (bytes, thread_cpu_seconds() - started)
    };
    Measured {
        len: data.len(),
        kind,
        gzip: time(Effort::Thorough.setting(Encoding::Gzip, data.len())),
        brotli: CURVE_QUALITIES
            .iter()
            .map(|&quality| time(curve_setting(quality, data.len())))
            .collect(),
    }
}

/// A size class: its place in the table and its name.
fn size_class(len: usize) -> (u8, &'static str) {
    match len {
        0..4096 => (0, "< 4 KiB"),
        4096..16384 => (1, "4-16 KiB"),
        16384..65536 => (2, "16-64 KiB"),
        65536..262144 => (3, "64-256 KiB"),
        262144..1048576 => (4, "256 KiB-1 MiB"),
        _ => (5, ">= 1 MiB"),
    }
}

/// The quality `effort` gives a body of `len` bytes (the curve measured each of them).
fn policy_quality(effort: Effort, len: usize) -> usize {
    let level = effort.setting(Encoding::Brotli, len).level;
    CURVE_QUALITIES
        .iter()
        .position(|&quality| quality == level)
        .expect("the curve measures every quality the policy uses")
}

fn curve(site: &Path, sample: usize, threads: usize) {
    let (_, files) = compressible_files(site);
    let mut sized: Vec<(u64, PathBuf)> = files
        .into_iter()
        .map(|path| (std::fs::metadata(&path).map_or(0, |m| m.len()), path))
        .collect();
    sized.sort();
    let chosen: Vec<PathBuf> = sized
        .into_iter()
        .enumerate()
        .filter(|(index, _)| index % sample == sample / 2)
        .map(|(_, (_, path))| path)
        .collect();
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::new());
    let load_before = load();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(path) = chosen.get(index) else { break };
                    let data = std::fs::read(path).expect("read a site file");
                    let name = path.to_string_lossy();
                    let kind = if name.ends_with(".html") {
                        "html"
                    } else if name.ends_with(".txt") {
                        "text"
                    } else {
                        "other"
                    };
                    let measured = measure(&data, kind);
                    results.lock().expect("no panics").push(measured);
                }
            });
        }
    });
    let results = results.into_inner().expect("no panics");
    let total: usize = results.iter().map(|m| m.len).sum();
    println!(
        "site {}: {} files measured ({:.1} MB; every {sample}th compressible file by size), \
         {threads} threads; load average before {load_before}, after {}",
        site.display(),
        results.len(),
        total as f64 / 1e6,
        load()
    );
    println!(
        "Per class: brotli bytes against quality 11's / CPU time against gzip -9's (flate2, \
         level 9), each compression timed on its own thread; qualities 5-9 with a 4 MiB \
         window, 10 and 11 with the window fitted to the file."
    );
    println!();
    let mut header = "| class | files | MB | gzip -9 |".to_string();
    let mut rule = "|---|---:|---:|---:|".to_string();
    for quality in CURVE_QUALITIES {
        header.push_str(&format!(" q{quality} |"));
        rule.push_str("---:|");
    }
    header.push_str(" thorough | --fast |");
    rule.push_str("---:|---:|");
    println!(
        "{header}
{rule}"
    );
    let mut classes: Vec<((&str, u8), String, Vec<&Measured>)> = Vec::new();
    for measured in &results {
        let (order, size) = size_class(measured.len);
        for kind in ["all", measured.kind] {
            let key = (kind, order);
            match classes.iter_mut().find(|(class, _, _)| *class == key) {
                Some((_, _, members)) => members.push(measured),
                None => classes.push((key, format!("{kind} {size}"), vec![measured])),
            }
        }
    }
    classes.sort_by(|a, b| a.0.cmp(&b.0));
    classes.push((("", 0), "all files".into(), results.iter().collect()));
    let eleven = CURVE_QUALITIES.len() - 1;
    for (_, name, members) in &classes {
        let gzip_cpu: f64 = members.iter().map(|m| m.gzip.1).sum();
        let gzip_bytes: u64 = members.iter().map(|m| m.gzip.0).sum();
        let q11: u64 = members.iter().map(|m| m.brotli[eleven].0).sum();
        let cell = |bytes: u64, cpu: f64| {
            format!(
                "{:+.1}% / {:.1}x",
                (bytes as f64 / q11 as f64 - 1.0) * 100.0,
                cpu / gzip_cpu
            )
        };
        let mut row = format!(
            "| {} | {} | {:.1} | {:+.1}% |",
            name,
            members.len(),
            members.iter().map(|m| m.len).sum::<usize>() as f64 / 1e6,
            (gzip_bytes as f64 / q11 as f64 - 1.0) * 100.0
        );
        for index in 0..CURVE_QUALITIES.len() {
            let bytes = members.iter().map(|m| m.brotli[index].0).sum();
            let cpu = members.iter().map(|m| m.brotli[index].1).sum();
            row.push_str(&format!(" {} |", cell(bytes, cpu)));
        }
        for effort in [Effort::Thorough, Effort::Fast] {
            let chosen = |m: &Measured| m.brotli[policy_quality(effort, m.len)];
            let bytes = members.iter().map(|m| chosen(m).0).sum();
            let cpu = members.iter().map(|m| chosen(m).1).sum();
            row.push_str(&format!(" {} |", cell(bytes, cpu)));
        }
        println!("{row}");
    }
    let gzip_cpu: f64 = results.iter().map(|m| m.gzip.1).sum();
    println!();
    println!(
        "gzip -9 (flate2) took {gzip_cpu:.2} CPU s over these files. A pack within 4 times \
         single-threaded gzip -9 on 2 cores has about 8 times gzip -9's CPU time for brotli, \
         gzip and the rest."
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    // `--sizes IMAGE...`: the size figures of images made elsewhere (by `bramble pack` timed
    // with /usr/bin/time, say), one line each.
    if std::env::args().nth(1).as_deref() == Some("--sizes") {
        for path in std::env::args().skip(2) {
            let image = std::fs::read(&path).expect("read the image");
            let sizes = sizes(&image);
            println!(
                "{path}: image {} bytes, brotli bodies {}, gzip bodies {}, a brotli client gets {}",
                image.len(),
                sizes.brotli,
                sizes.gzip,
                sizes.brotli_client
            );
        }
        return;
    }
    let mut site = None;
    let mut runs = 3usize;
    let mut baseline = None;
    let mut curve_mode = false;
    let mut sample = 1usize;
    let mut threads = 2usize;
    let number = |value: Option<String>, flag: &str| -> usize {
        value
            .and_then(|n| n.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| panic!("{flag} N, N > 0"))
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => runs = number(args.next(), "--runs"),
            "--baseline" => baseline = Some(PathBuf::from(args.next().expect("--baseline PATH"))),
            "--curve" => curve_mode = true,
            "--sample" => sample = number(args.next(), "--sample"),
            "--threads" => threads = number(args.next(), "--threads"),
            _ => site = Some(PathBuf::from(arg)),
        }
    }
    let Some(site) = site else {
        eprintln!(
            "usage: pack-bench SITE_DIR [--runs N] [--baseline OLD_BRAMBLE]\n       \
             pack-bench --curve SITE_DIR [--sample N] [--threads N]\n       \
             pack-bench --sizes IMAGE..."
        );
        std::process::exit(2);
    };
    if curve_mode {
        curve(&site, sample, threads);
        return;
    }
    let (walked, compressible) = compressible_files(&site);
    let raw: u64 = walked.iter().map(|f| f.len).sum();
    let scratch = tempfile::tempdir().expect("a scratch folder");
    let load_before = load();
    let mut names: Vec<&str> = vec!["gzip -9, 1 thread"];
    if baseline.is_some() {
        names.extend([
            "before: cold",
            "before: warm",
            "before --fast: cold",
            "before --fast: warm",
        ]);
    }
    names.extend([
        "after: cold",
        "after: warm",
        "after --fast: cold",
        "after --fast: warm",
    ]);
    // Per column: CPU seconds, wall seconds.
    let mut times: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); names.len()];
    let mut produced: Vec<Option<Sizes>> = vec![None; names.len()];
    for round in 0..runs {
        let mut column = 0;
        let mut record = |column: &mut usize, (cpu, wall, image): (f64, f64, Option<Vec<u8>>)| {
            times[*column].0.push(cpu);
            times[*column].1.push(wall);
            if let Some(image) = image {
                produced[*column] = Some(sizes(&image));
            }
            *column += 1;
        };
        record(
            &mut column,
            timed(|| {
                run_gzip(&compressible);
                None
            }),
        );
        if let Some(tool) = &baseline {
            for fast in [false, true] {
                let cache = scratch.path().join(format!("before-{fast}-{round}"));
                let output = scratch.path().join("before.bin");
                for _cold_then_warm in 0..2 {
                    record(
                        &mut column,
                        timed(|| Some(baseline_pack(tool, &site, &cache, &output, fast))),
                    );
                }
            }
        }
        for (effort, name) in [(Effort::Thorough, "after"), (Effort::Fast, "fast")] {
            let cache = scratch.path().join(format!("{name}-{round}"));
            for _cold_then_warm in 0..2 {
                record(
                    &mut column,
                    timed(|| Some(this_pack(&site, &cache, effort))),
                );
            }
        }
        eprintln!("round {} of {runs} done", round + 1);
    }
    let gzip_cpu = median(&mut times[0].0.clone()).0;
    let gzip_wall = median(&mut times[0].1.clone()).0;
    println!(
        "site {}: {} files, {:.1} MB ({} compressible files); {} rounds; load average before {}, \
         after {}; {} cores",
        site.display(),
        walked.len(),
        raw as f64 / 1e6,
        compressible.len(),
        runs,
        load_before,
        load(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!(
        "| | CPU s, median (min-max) | x gzip -9 CPU | wall s, median (min-max) | x gzip -9 \
         wall | brotli bytes | gzip bytes | a brotli client gets |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (index, name) in names.iter().enumerate() {
        let (cpu, cpu_low, cpu_high) = median(&mut times[index].0);
        let (wall, wall_low, wall_high) = median(&mut times[index].1);
        let sizes = produced[index].map_or_else(
            || "| |".to_string(),
            |s| format!("{} | {} | {}", s.brotli, s.gzip, s.brotli_client),
        );
        println!(
            "| {name} | {cpu:.2} ({cpu_low:.2}-{cpu_high:.2}) | {:.1} | {wall:.2} \
             ({wall_low:.2}-{wall_high:.2}) | {:.1} | {sizes} |",
            cpu / gzip_cpu,
            wall / gzip_wall
        );
    }
}
