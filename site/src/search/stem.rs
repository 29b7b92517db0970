//! The English (Porter2) stemmer, written from the published description of the algorithm
//! (Martin Porter, "The English (Porter2) stemming algorithm", snowballstem.org): `running`,
//! `runs` -> `run`, `generously` -> `generous`, `happiness` -> `happi`. It works on lowercase
//! ASCII words of at most [`MAX_WORD`] bytes, in place, without allocating; the packer and the
//! Pi run the same code, so a word stems the same way in the index and in a query.

/// Longest word the stemmer takes (longer words are left as they are).
pub const MAX_WORD: usize = 32;

/// A word being stemmed: bytes `a`-`z`, with `Y` marking a consonant y.
struct Word {
    b: [u8; MAX_WORD],
    n: usize,
    r1: usize,
    r2: usize,
}

fn vowel(c: u8) -> bool {
    matches!(c, b'a' | b'e' | b'i' | b'o' | b'u' | b'y')
}

fn double(a: u8, b: u8) -> bool {
    a == b
        && matches!(
            a,
            b'b' | b'd' | b'f' | b'g' | b'm' | b'n' | b'p' | b'r' | b't'
        )
}

fn li_ending(c: u8) -> bool {
    matches!(
        c,
        b'c' | b'd' | b'e' | b'g' | b'h' | b'k' | b'm' | b'n' | b'r' | b't'
    )
}

impl Word {
    fn text(&self) -> &[u8] {
        &self.b[..self.n]
    }

    fn ends(&self, suffix: &[u8]) -> bool {
        self.text().ends_with(suffix)
    }

    /// Position where `suffix` would start.
    fn start(&self, suffix: &[u8]) -> usize {
        self.n.saturating_sub(suffix.len())
    }

    /// Replaces the last `cut` bytes by `with` (which fits: every replacement is shorter than
    /// or as long as what it replaces, plus one `e`).
    fn replace(&mut self, cut: usize, with: &[u8]) {
        let at = self.n.saturating_sub(cut);
        let end = (at + with.len()).min(MAX_WORD);
        self.b[at..end].copy_from_slice(&with[..end - at]);
        self.n = end;
    }

    fn has_vowel(&self, end: usize) -> bool {
        self.b[..end.min(self.n)].iter().any(|&c| vowel(c))
    }

    /// Does `self.b[..end]` end in a short syllable?
    fn short_syllable_at(&self, end: usize) -> bool {
        let b = &self.b[..end];
        match end {
            2 => vowel(b[0]) && !vowel(b[1]),
            e if e >= 3 => {
                !vowel(b[e - 3])
                    && vowel(b[e - 2])
                    && !vowel(b[e - 1])
                    && !matches!(b[e - 1], b'w' | b'x' | b'Y')
            }
            _ => false,
        }
    }

    fn is_short(&self) -> bool {
        self.short_syllable_at(self.n) && self.r1 >= self.n
    }

    /// The longest of `suffixes` the word ends with.
    fn longest<'s, T>(&self, suffixes: &'s [(&'s [u8], T)]) -> Option<&'s (&'s [u8], T)> {
        suffixes
            .iter()
            .filter(|(suffix, _)| self.ends(suffix))
            .max_by_key(|(suffix, _)| suffix.len())
    }
}

/// Region start after the first non-vowel that follows a vowel, at or after `from`.
fn region(b: &[u8], from: usize) -> usize {
    let mut i = from + 1;
    while i < b.len() {
        if vowel(b[i - 1]) && !vowel(b[i]) {
            return i + 1;
        }
        i += 1;
    }
    b.len()
}

/// Words the algorithm treats as exceptions (before any step).
const EXCEPTIONS: [(&[u8], &[u8]); 18] = [
    (b"skis", b"ski"),
    (b"skies", b"sky"),
    (b"dying", b"die"),
    (b"lying", b"lie"),
    (b"tying", b"tie"),
    (b"idly", b"idl"),
    (b"gently", b"gentl"),
    (b"ugly", b"ugli"),
    (b"early", b"earli"),
    (b"only", b"onli"),
    (b"singly", b"singl"),
    (b"sky", b"sky"),
    (b"news", b"news"),
    (b"howe", b"howe"),
    (b"atlas", b"atlas"),
    (b"cosmos", b"cosmos"),
    (b"bias", b"bias"),
    (b"andes", b"andes"),
];

/// Words left as they are after step 1a.
const AFTER_1A: [&[u8]; 8] = [
    b"inning", b"outing", b"canning", b"herring", b"earring", b"proceed", b"exceed", b"succeed",
];

/// Stems `word` (lowercase ASCII letters, at most [`MAX_WORD`] bytes) in place and returns
/// its new length. Anything else (other bytes, longer words) is left as it is.
pub fn stem_english(word: &mut [u8], len: usize) -> usize {
    let len = len.min(word.len());
    if len <= 2 || len > MAX_WORD || !word[..len].iter().all(u8::is_ascii_lowercase) {
        return len;
    }
    if let Some((_, to)) = EXCEPTIONS.iter().find(|(from, _)| *from == &word[..len]) {
        word[..to.len()].copy_from_slice(to);
        return to.len();
    }
    let mut w = Word {
        b: [0; MAX_WORD],
        n: len,
        r1: 0,
        r2: 0,
    };
    w.b[..len].copy_from_slice(&word[..len]);
    if w.b[0] == b'y' {
        w.b[0] = b'Y';
    }
    for i in 1..w.n {
        if w.b[i] == b'y' && vowel(w.b[i - 1]) {
            w.b[i] = b'Y';
        }
    }
    w.r1 = if [&b"gener"[..], b"commun", b"arsen"]
        .iter()
        .any(|prefix| w.text().starts_with(prefix))
    {
        if w.text().starts_with(b"commun") {
            6
        } else {
            5
        }
    } else {
        region(w.text(), 0)
    };
    w.r2 = region(w.text(), w.r1);

    step_1a(&mut w);
    if !AFTER_1A.contains(&w.text()) {
        step_1b(&mut w);
        step_1c(&mut w);
        step_2(&mut w);
        step_3(&mut w);
        step_4(&mut w);
        step_5(&mut w);
    }
    for c in &mut w.b[..w.n] {
        if *c == b'Y' {
            *c = b'y';
        }
    }
    word[..w.n].copy_from_slice(w.text());
    w.n
}

fn step_1a(w: &mut Word) {
    if w.ends(b"sses") {
        w.replace(4, b"ss");
    } else if w.ends(b"ied") || w.ends(b"ies") {
        if w.n > 4 {
            w.replace(3, b"i");
        } else {
            w.replace(3, b"ie");
        }
    } else if w.ends(b"us") || w.ends(b"ss") {
    } else if w.ends(b"s") && w.n >= 2 && w.has_vowel(w.n - 2) {
        w.replace(1, b"");
    }
}

fn step_1b(w: &mut Word) {
    const SUFFIXES: [(&[u8], bool); 6] = [
        (b"eedly", true),
        (b"eed", true),
        (b"ingly", false),
        (b"edly", false),
        (b"ing", false),
        (b"ed", false),
    ];
    let Some(&(suffix, is_eed)) = w.longest(&SUFFIXES) else {
        return;
    };
    let start = w.start(suffix);
    if is_eed {
        if start >= w.r1 {
            w.replace(suffix.len(), b"ee");
        }
        return;
    }
    if !w.has_vowel(start) {
        return;
    }
    w.replace(suffix.len(), b"");
    if w.ends(b"at") || w.ends(b"bl") || w.ends(b"iz") {
        w.replace(0, b"e");
    } else if w.n >= 2 && double(w.b[w.n - 2], w.b[w.n - 1]) {
        w.replace(1, b"");
    } else if w.is_short() {
        w.replace(0, b"e");
    }
}

fn step_1c(w: &mut Word) {
    if (w.ends(b"y") || w.ends(b"Y")) && w.n > 2 && !vowel(w.b[w.n - 2]) {
        w.b[w.n - 1] = b'i';
    }
}

/// What a step 2 suffix becomes; `None` for the two with a condition on the letter before.
type Replacement = &'static [u8];

fn step_2(w: &mut Word) {
    const SUFFIXES: [(&[u8], Replacement); 24] = [
        (b"tional", b"tion"),
        (b"enci", b"ence"),
        (b"anci", b"ance"),
        (b"abli", b"able"),
        (b"entli", b"ent"),
        (b"izer", b"ize"),
        (b"ization", b"ize"),
        (b"ational", b"ate"),
        (b"ation", b"ate"),
        (b"ator", b"ate"),
        (b"alism", b"al"),
        (b"aliti", b"al"),
        (b"alli", b"al"),
        (b"fulness", b"ful"),
        (b"ousli", b"ous"),
        (b"ousness", b"ous"),
        (b"iveness", b"ive"),
        (b"iviti", b"ive"),
        (b"biliti", b"ble"),
        (b"bli", b"ble"),
        (b"ogi", b"og"),
        (b"fulli", b"ful"),
        (b"lessli", b"less"),
        (b"li", b""),
    ];
    let Some(&(suffix, with)) = w.longest(&SUFFIXES) else {
        return;
    };
    let start = w.start(suffix);
    if start < w.r1 {
        return;
    }
    let ok = match suffix {
        b"ogi" => start >= 1 && w.b[start - 1] == b'l',
        b"li" => start >= 1 && li_ending(w.b[start - 1]),
        _ => true,
    };
    if ok {
        w.replace(suffix.len(), with);
    }
}

fn step_3(w: &mut Word) {
    const SUFFIXES: [(&[u8], Replacement); 9] = [
        (b"tional", b"tion"),
        (b"ational", b"ate"),
        (b"alize", b"al"),
        (b"icate", b"ic"),
        (b"iciti", b"ic"),
        (b"ical", b"ic"),
        (b"ful", b""),
        (b"ness", b""),
        (b"ative", b""),
    ];
    let Some(&(suffix, with)) = w.longest(&SUFFIXES) else {
        return;
    };
    let start = w.start(suffix);
    if start < w.r1 || (suffix == b"ative" && start < w.r2) {
        return;
    }
    w.replace(suffix.len(), with);
}

fn step_4(w: &mut Word) {
    const SUFFIXES: [(&[u8], ()); 18] = [
        (b"al", ()),
        (b"ance", ()),
        (b"ence", ()),
        (b"er", ()),
        (b"ic", ()),
        (b"able", ()),
        (b"ible", ()),
        (b"ant", ()),
        (b"ement", ()),
        (b"ment", ()),
        (b"ent", ()),
        (b"ism", ()),
        (b"ate", ()),
        (b"iti", ()),
        (b"ous", ()),
        (b"ive", ()),
        (b"ize", ()),
        (b"ion", ()),
    ];
    let Some(&(suffix, ())) = w.longest(&SUFFIXES) else {
        return;
    };
    let start = w.start(suffix);
    if start < w.r2 {
        return;
    }
    if suffix == b"ion" && !(start >= 1 && matches!(w.b[start - 1], b's' | b't')) {
        return;
    }
    w.replace(suffix.len(), b"");
}

fn step_5(w: &mut Word) {
    if w.ends(b"e") {
        let start = w.n - 1;
        if start >= w.r2 || (start >= w.r1 && !w.short_syllable_at(start)) {
            w.replace(1, b"");
        }
    } else if w.ends(b"l") {
        let start = w.n - 1;
        if start >= w.r2 && start >= 1 && w.b[start - 1] == b'l' {
            w.replace(1, b"");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stem(word: &str) -> std::string::String {
        let mut bytes = [0u8; 64];
        bytes[..word.len()].copy_from_slice(word.as_bytes());
        let n = stem_english(&mut bytes, word.len());
        std::string::String::from_utf8(bytes[..n].to_vec()).unwrap()
    }

    #[test]
    fn porter2_examples() {
        for (word, expected) in [
            ("consign", "consign"),
            ("consigned", "consign"),
            ("consigning", "consign"),
            ("consignment", "consign"),
            ("consist", "consist"),
            ("consisted", "consist"),
            ("consistency", "consist"),
            ("consistent", "consist"),
            ("consistently", "consist"),
            ("knack", "knack"),
            ("knackeries", "knackeri"),
            ("knaves", "knave"),
            ("running", "run"),
            ("runs", "run"),
            ("happiness", "happi"),
            ("happy", "happi"),
            ("caresses", "caress"),
            ("ponies", "poni"),
            ("ties", "tie"),
            ("cries", "cri"),
            ("cats", "cat"),
            ("gas", "gas"),
            ("this", "this"),
            ("kiwis", "kiwi"),
            ("agreed", "agre"),
            ("plastered", "plaster"),
            ("motoring", "motor"),
            ("sing", "sing"),
            ("hopping", "hop"),
            ("filing", "file"),
            ("generously", "generous"),
            ("generate", "generat"),
            ("communism", "communism"),
            ("traditional", "tradit"),
            ("sensational", "sensat"),
            ("itemization", "item"),
            ("reference", "refer"),
            ("colonizer", "colon"),
            ("plotted", "plot"),
            ("meeting", "meet"),
            ("stating", "state"),
            ("owned", "own"),
            ("humbled", "humbl"),
            ("sized", "size"),
            ("denied", "deni"),
            ("died", "die"),
            ("flies", "fli"),
            ("skies", "sky"),
            ("news", "news"),
            ("exceed", "exceed"),
            ("cry", "cri"),
            ("by", "by"),
            ("say", "say"),
            ("yes", "yes"),
            ("configuration", "configur"),
            ("configure", "configur"),
            ("configured", "configur"),
            ("searching", "search"),
            ("searches", "search"),
            ("servers", "server"),
            ("installation", "instal"),
            ("installed", "instal"),
        ] {
            assert_eq!(stem(word), expected, "{word}");
        }
    }

    #[test]
    fn other_input_is_left_alone() {
        assert_eq!(stem("ab"), "ab");
        assert_eq!(stem("caf\u{e9}s"), "caf\u{e9}s");
        assert_eq!(stem("x86_64"), "x86_64");
        assert_eq!(stem(&"a".repeat(40)), "a".repeat(40));
    }
}
