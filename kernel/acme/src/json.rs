//! A small, strict JSON parser (RFC 8259) for what the CA sends: bounded in nesting and in the
//! number of values, so hostile input costs at most a known amount of heap and stack. Our own
//! rather than serde_json-core: the kernel has no serde, the CA's objects are read by a few
//! field names (a tree is simpler to read than derived types), and the parser is ~300 lines
//! that the fuzz target `acme_json` covers.
//!
//! Numbers are kept as integers when they are one (ACME has none that are not); others are
//! accepted and kept as [`Value::Number`] `None`.

use alloc::string::String;
use alloc::vec::Vec;

/// Deepest nesting of arrays and objects accepted.
pub const MAX_DEPTH: usize = 16;
/// Most values (of any kind) in one document.
pub const MAX_VALUES: usize = 4096;

/// A parsed JSON value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number: its value when it is an integer that fits an i64, otherwise `None`.
    Number(Option<i64>),
    /// A string, unescaped.
    String(String),
    /// An array.
    Array(Vec<Value>),
    /// An object's members in document order (a repeated name: the first one wins in
    /// [`Value::get`]).
    Object(Vec<(String, Value)>),
}

/// Why a document is not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonError {
    /// Not JSON at this byte offset.
    Syntax(usize),
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// More than [`MAX_VALUES`] values.
    TooManyValues,
}

impl core::fmt::Display for JsonError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Syntax(at) => write!(f, "not JSON at byte {at}"),
            Self::TooDeep => write!(f, "JSON nested deeper than {MAX_DEPTH}"),
            Self::TooManyValues => write!(f, "JSON with more than {MAX_VALUES} values"),
        }
    }
}

impl Value {
    /// The member `name` of an object (`None` for other values or a missing member).
    pub fn get(&self, name: &str) -> Option<&Value> {
        match self {
            Value::Object(members) => members.iter().find(|(n, _)| n == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(text) => Some(text),
            _ => None,
        }
    }

    /// The elements, if this is an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The integer, if this is an integer number.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Number(n) => *n,
            _ => None,
        }
    }

    /// The member `name` as a string.
    pub fn str_field(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(Value::as_str)
    }
}

struct Parser<'t> {
    text: &'t [u8],
    at: usize,
    values: usize,
}

/// Parses one JSON document (whitespace around it allowed, nothing else).
pub fn parse(text: &[u8]) -> Result<Value, JsonError> {
    let mut parser = Parser {
        text,
        at: 0,
        values: 0,
    };
    let value = parser.value(0)?;
    parser.skip_space();
    if parser.at != text.len() {
        return Err(JsonError::Syntax(parser.at));
    }
    Ok(value)
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn error(&self) -> JsonError {
        JsonError::Syntax(self.at)
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), JsonError> {
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.error())
        }
    }

    fn literal(&mut self, word: &[u8], value: Value) -> Result<Value, JsonError> {
        if self.text.get(self.at..self.at + word.len()) == Some(word) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(self.error())
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.values += 1;
        if self.values > MAX_VALUES {
            return Err(JsonError::TooManyValues);
        }
        self.skip_space();
        match self.peek() {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => self.string().map(Value::String),
            Some(b't') => self.literal(b"true", Value::Bool(true)),
            Some(b'f') => self.literal(b"false", Value::Bool(false)),
            Some(b'n') => self.literal(b"null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.error()),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, JsonError> {
        if depth > MAX_DEPTH {
            return Err(JsonError::TooDeep);
        }
        self.expect(b'{')?;
        let mut members = Vec::new();
        self.skip_space();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Value::Object(members));
        }
        loop {
            self.skip_space();
            let name = self.string()?;
            self.skip_space();
            self.expect(b':')?;
            let value = self.value(depth)?;
            members.push((name, value));
            self.skip_space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Value::Object(members));
                }
                _ => return Err(self.error()),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, JsonError> {
        if depth > MAX_DEPTH {
            return Err(JsonError::TooDeep);
        }
        self.expect(b'[')?;
        let mut items = Vec::new();
        self.skip_space();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.value(depth)?);
            self.skip_space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.error()),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let digits = self
            .text
            .get(self.at..self.at + 4)
            .ok_or_else(|| self.error())?;
        let mut n = 0u32;
        for &digit in digits {
            let value = (digit as char).to_digit(16).ok_or_else(|| self.error())?;
            n = n * 16 + value;
        }
        self.at += 4;
        Ok(n)
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.expect(b'"')?;
        let mut out = Vec::new();
        loop {
            let byte = self.peek().ok_or_else(|| self.error())?;
            match byte {
                b'"' => {
                    self.at += 1;
                    break;
                }
                b'\\' => {
                    self.at += 1;
                    let escape = self.peek().ok_or_else(|| self.error())?;
                    self.at += 1;
                    let plain = match escape {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => 8,
                        b'f' => 12,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'u' => {
                            let mut code = self.hex4()?;
                            if (0xD800..0xDC00).contains(&code) {
                                // A high surrogate must be followed by an escaped low one.
                                if self.text.get(self.at..self.at + 2) != Some(b"\\u") {
                                    return Err(self.error());
                                }
                                self.at += 2;
                                let low = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&low) {
                                    return Err(self.error());
                                }
                                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                            } else if (0xDC00..0xE000).contains(&code) {
                                return Err(self.error());
                            }
                            let ch = char::from_u32(code).ok_or_else(|| self.error())?;
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                            continue;
                        }
                        _ => return Err(JsonError::Syntax(self.at - 1)),
                    };
                    out.push(plain);
                }
                0..=0x1f => return Err(self.error()),
                _ => {
                    out.push(byte);
                    self.at += 1;
                }
            }
        }
        String::from_utf8(out).map_err(|_| self.error())
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        self.at - start
    }

    fn number(&mut self) -> Result<Value, JsonError> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.error()),
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            self.at += 1;
            integer = false;
            if self.digits() == 0 {
                return Err(self.error());
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            integer = false;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return Err(self.error());
            }
        }
        let text = core::str::from_utf8(&self.text[start..self.at]).map_err(|_| self.error())?;
        Ok(Value::Number(if integer {
            text.parse().ok()
        } else {
            None
        }))
    }
}

/// Appends `text` to `out` as a JSON string literal (quotes and escapes).
pub fn write_string(out: &mut String, text: &str) {
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                use core::fmt::Write;
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn parses_an_order() {
        let text = br#"{"status":"pending","expires":"2026-12-08T00:00:00Z",
            "identifiers":[{"type":"dns","value":"example.org"}],
            "authorizations":["https://ca/authz/1"],"finalize":"https://ca/finalize/1",
            "n": -12, "f": 1.5e3, "ok": true, "none": null}"#;
        let value = parse(text).unwrap();
        assert_eq!(value.str_field("status"), Some("pending"));
        let ids = value.get("identifiers").unwrap().as_array().unwrap();
        assert_eq!(ids[0].str_field("value"), Some("example.org"));
        assert_eq!(value.get("n").unwrap().as_i64(), Some(-12));
        assert_eq!(value.get("f"), Some(&Value::Number(None)));
        assert_eq!(value.get("ok"), Some(&Value::Bool(true)));
        assert_eq!(value.get("none"), Some(&Value::Null));
    }

    #[test]
    fn unescapes_strings() {
        let value = parse(br#""a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00""#).unwrap();
        assert_eq!(value.as_str(), Some("a\"\\/\u{8}\u{c}\n\r\té😀"));
    }

    #[test]
    fn rejects_what_is_not_json() {
        for bad in [
            &b""[..],
            b"{",
            b"{\"a\"}",
            b"[1,]",
            b"{\"a\":1,}",
            b"01",
            b"1.",
            b"1e",
            b"-",
            b"\"\\x\"",
            b"\"\\ud800\"",
            b"\"\\udc00\"",
            b"\"a\nb\"",
            b"tru",
            b"[] []",
            b"\"\xff\"",
        ] {
            assert!(parse(bad).is_err(), "{:?}", core::str::from_utf8(bad));
        }
    }

    #[test]
    fn bounds_depth_and_size() {
        let deep: Vec<u8> = core::iter::repeat_n(b'[', MAX_DEPTH + 1)
            .chain(core::iter::repeat_n(b']', MAX_DEPTH + 1))
            .collect();
        assert_eq!(parse(&deep), Err(JsonError::TooDeep));
        let ok: Vec<u8> = core::iter::repeat_n(b'[', MAX_DEPTH)
            .chain(core::iter::repeat_n(b']', MAX_DEPTH))
            .collect();
        assert!(parse(&ok).is_ok());
        let mut wide = vec![b'['];
        for _ in 0..MAX_VALUES {
            wide.extend_from_slice(b"0,");
        }
        wide.extend_from_slice(b"0]");
        assert_eq!(parse(&wide), Err(JsonError::TooManyValues));
    }

    #[test]
    fn writes_escaped_strings_that_parse_back() {
        let mut out = String::new();
        write_string(&mut out, "a\"b\\c\nd\u{1}é");
        assert_eq!(
            parse(out.as_bytes()).unwrap().as_str(),
            Some("a\"b\\c\nd\u{1}é")
        );
    }
}
