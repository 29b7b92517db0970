//! `pack-bench`: how long a first (cold) and a repeated (warm) `bramble pack` of a site take,
//! and what they produce, against single-threaded `gzip -9` over the same files.
//!
//! `cargo run --release -p bramble-bench --bin pack-bench -- SITE_DIR [--runs N]
//! [--baseline OLD_BRAMBLE]` (or `--sizes IMAGE...` for the size figures of images packed
//! elsewhere): each round runs, in turn, gzip -9 (one process over every
//! file the packer compresses, one thread), an older `bramble pack` if given (cold: an empty
//! cache folder; warm: the same folder again), and this build's pack at its default effort and
//! at `--fast` (cold, then warm). Rounds interleave the commands so a machine whose speed
//! drifts (a shared one) affects them alike; the table gives each figure's median and range,
//! the load average before and after, and the bodies' sizes: brotli and gzip totals, and
//! what a client that accepts brotli downloads for the whole site.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use bramble::pack::compress::Effort;
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

fn median(values: &mut [f64]) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    (
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    )
}

/// Seconds for gzip -9 over the files the packer compresses, one process, one thread.
fn gzip_seconds(files: &[PathBuf]) -> f64 {
    let started = Instant::now();
    let status = Command::new("gzip")
        .args(["-9", "-c"])
        .args(files)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run gzip");
    assert!(status.success());
    started.elapsed().as_secs_f64()
}

/// (seconds, image bytes) of an older bramble's pack with `cache` as its cache folder.
fn baseline_pack(tool: &Path, site: &Path, cache: &Path, output: &Path) -> (f64, Vec<u8>) {
    let started = Instant::now();
    let status = Command::new(tool)
        .arg("pack")
        .arg(site)
        .arg("-o")
        .arg(output)
        .arg("--cache-dir")
        .arg(cache)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run the baseline bramble");
    assert!(status.success());
    (
        started.elapsed().as_secs_f64(),
        std::fs::read(output).expect("the baseline's image"),
    )
}

fn this_pack(site: &Path, cache: &Path, effort: Effort) -> (f64, Vec<u8>) {
    let options = PackOptions {
        cache_dir: Some(cache.to_path_buf()),
        effort,
        ..PackOptions::default()
    };
    let started = Instant::now();
    let output = pack_site(site, &options).expect("pack");
    (started.elapsed().as_secs_f64(), output.image)
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
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => runs = args.next().and_then(|n| n.parse().ok()).expect("--runs N"),
            "--baseline" => baseline = Some(PathBuf::from(args.next().expect("--baseline PATH"))),
            _ => site = Some(PathBuf::from(arg)),
        }
    }
    let Some(site) = site else {
        eprintln!("usage: pack-bench SITE_DIR [--runs N] [--baseline OLD_BRAMBLE]");
        std::process::exit(2);
    };
    let walked = bramble::pack::walk::walk(&site, false).expect("walk the site");
    let compressible: Vec<PathBuf> = walked
        .iter()
        .filter(|f| bramble::pack::mime::content_type(&f.url_path).1 && f.len > 0)
        .map(|f| f.fs_path.clone())
        .collect();
    let raw: u64 = walked.iter().map(|f| f.len).sum();
    let scratch = tempfile::tempdir().expect("a scratch folder");
    let load_before = load();
    let mut names: Vec<&str> = vec!["gzip -9, 1 thread"];
    if baseline.is_some() {
        names.extend(["before: cold", "before: warm"]);
    }
    names.extend([
        "after: cold",
        "after: warm",
        "after --fast: cold",
        "after --fast: warm",
    ]);
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut produced: Vec<Option<Sizes>> = vec![None; names.len()];
    for round in 0..runs {
        let mut column = 0;
        let mut record = |column: &mut usize, seconds: f64, image: Option<&[u8]>| {
            times[*column].push(seconds);
            if let Some(image) = image {
                produced[*column] = Some(sizes(image));
            }
            *column += 1;
        };
        record(&mut column, gzip_seconds(&compressible), None);
        if let Some(tool) = &baseline {
            let cache = scratch.path().join(format!("before-{round}"));
            let output = scratch.path().join("before.bin");
            let (cold, image) = baseline_pack(tool, &site, &cache, &output);
            record(&mut column, cold, Some(&image));
            let (warm, image) = baseline_pack(tool, &site, &cache, &output);
            record(&mut column, warm, Some(&image));
        }
        for (effort, name) in [(Effort::Thorough, "after"), (Effort::Fast, "fast")] {
            let cache = scratch.path().join(format!("{name}-{round}"));
            let (cold, image) = this_pack(&site, &cache, effort);
            record(&mut column, cold, Some(&image));
            let (warm, image) = this_pack(&site, &cache, effort);
            record(&mut column, warm, Some(&image));
        }
        eprintln!("round {} of {runs} done", round + 1);
    }
    let gzip_median = median(&mut times[0].clone()).0;
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
        "| | median s (min-max) | x gzip -9 | brotli bytes | gzip bytes | a brotli client gets |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (index, name) in names.iter().enumerate() {
        let (mid, low, high) = median(&mut times[index]);
        let sizes = produced[index].map_or_else(
            || "| | |".to_string(),
            |s| format!("{} | {} | {}", s.brotli, s.gzip, s.brotli_client),
        );
        println!(
            "| {name} | {mid:.2} ({low:.2}-{high:.2}) | {:.1} | {sizes} |",
            mid / gzip_median
        );
    }
}
