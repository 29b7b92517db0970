//! Writes the benchmark's 1,000-page docs site into a folder, to measure the search index on
//! it: `cargo run -p bramble-bench --example docs_corpus -- DIR`, then
//! `bramble pack DIR --search`.

fn main() -> std::io::Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .expect("usage: docs_corpus DIR (the folder to write the pages into)");
    bramble_bench::corpus::write_docs(std::path::Path::new(&dir), bramble_bench::corpus::PAGES)?;
    println!(
        "one-word query: {}\nthree-word query: {}",
        bramble_bench::corpus::word(bramble_bench::corpus::ONE_WORD_RANK),
        bramble_bench::corpus::THREE_WORD_RANKS
            .map(bramble_bench::corpus::word)
            .join(" ")
    );
    Ok(())
}
