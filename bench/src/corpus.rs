//! A documentation-like site of many pages for the search targets: deterministic pseudo-English
//! (words of two to four syllables, drawn with Zipf's law from a 5,000-word vocabulary), a
//! title, three headings and eight paragraphs per page, about 3.5 KB of text each. The same
//! bytes on every run, so index sizes and instruction counts compare across commits.

use std::fmt::Write;
use std::path::Path;

/// Pages the benchmark's site holds under `/docs/`.
pub const PAGES: usize = 1000;
/// Words in the vocabulary.
const VOCABULARY: usize = 5000;
/// One word of middling frequency (rank 120): the one-word search target.
pub const ONE_WORD_RANK: usize = 120;
/// Three words (ranks 60, 300 and 900) for the three-word search target.
pub const THREE_WORD_RANKS: [usize; 3] = [60, 300, 900];

const SYLLABLES: [&str; 24] = [
    "ka", "ro", "mi", "ten", "sa", "lo", "ver", "nu", "pe", "dra", "shi", "on", "al", "be", "cor",
    "di", "fen", "gu", "har", "is", "jo", "mar", "qua", "tre",
];

/// Word number `rank` of the vocabulary (the same word for the same rank, always): the 576
/// most frequent have two syllables, the others three, shuffled by a multiplication that is a
/// bijection modulo the number of syllable sequences.
pub fn word(rank: usize) -> String {
    let base = SYLLABLES.len();
    let (count, n) = if rank < base * base {
        (2, rank)
    } else {
        (3, rank - base * base)
    };
    let modulus = base.pow(count);
    let mut n = (n * 7919) % modulus;
    let mut out = String::new();
    for _ in 0..count {
        out.push_str(SYLLABLES[n % base]);
        n /= base;
    }
    out
}

/// xorshift32.
struct Random(u32);

impl Random {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0
    }
}

/// Zipf's law over the vocabulary: cumulative weights of 1/rank.
fn cumulative() -> Vec<f64> {
    let mut total = 0.0;
    (1..=VOCABULARY)
        .map(|rank| {
            total += 1.0 / rank as f64;
            total
        })
        .collect()
}

fn draw(random: &mut Random, weights: &[f64]) -> usize {
    let total = weights[weights.len() - 1];
    let at = f64::from(random.next()) / f64::from(u32::MAX) * total;
    weights.partition_point(|&w| w < at).min(weights.len() - 1)
}

fn words(random: &mut Random, weights: &[f64], count: usize) -> String {
    let mut out = String::new();
    for i in 0..count {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&word(draw(random, weights)));
    }
    out
}

/// Writes `pages` pages under `dir/docs/` (and an index of them at `dir/docs/index.html`).
pub fn write_docs(dir: &Path, pages: usize) -> std::io::Result<()> {
    let weights = cumulative();
    let mut random = Random(0x9e37_79b9);
    let docs = dir.join("docs");
    std::fs::create_dir_all(&docs)?;
    let mut index = String::from(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Docs</title>\
         </head><body><h1>Docs</h1><ul>\n",
    );
    for page in 0..pages {
        let title = words(&mut random, &weights, 4);
        let mut html = format!(
            "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\
             </head><body><nav><a href=\"/docs/\">Docs</a></nav><main><h1>{title}</h1>\n"
        );
        for section in 0..3 {
            let _ = writeln!(html, "<h2>{}</h2>", words(&mut random, &weights, 3));
            for _ in 0..(2 + section % 2) {
                let _ = writeln!(html, "<p>{}.</p>", words(&mut random, &weights, 60));
            }
        }
        html.push_str("</main></body></html>\n");
        std::fs::write(docs.join(format!("{page:04}.html")), html)?;
        let _ = writeln!(index, "<li><a href=\"{page:04}.html\">{title}</a></li>");
    }
    index.push_str("</ul></body></html>\n");
    std::fs::write(docs.join("index.html"), index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_stable_and_distinct_enough() {
        assert_eq!(word(0), word(0));
        let distinct: std::collections::HashSet<String> = (0..VOCABULARY).map(word).collect();
        assert!(distinct.len() > VOCABULARY * 9 / 10, "{}", distinct.len());
    }
}
