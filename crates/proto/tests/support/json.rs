//! A minimal JSON reader (RFC 8259) for test data, plus base64 decoding.
//!
//! Only what `expectations.json` needs; errors panic with the offset, since
//! a malformed data file is a broken test, not a case to handle.

/// A JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// Any number.
    Number(f64),
    /// A string, escapes resolved.
    String(String),
    /// An array.
    Array(Vec<Json>),
    /// An object, member order kept.
    Object(Vec<(String, Json)>),
}

impl Json {
    /// The member `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// The elements, if this is an array.
    pub fn as_array(&self) -> Option<&[Json]> {
        match self {
            Json::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The number, if this is one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Json::Number(n) => Some(*n),
            _ => None,
        }
    }
}

/// Parses a whole document.
pub fn parse(text: &str) -> Json {
    let mut reader = Reader {
        bytes: text.as_bytes(),
        pos: 0,
    };
    let value = reader.value();
    reader.skip_space();
    assert_eq!(
        reader.pos,
        reader.bytes.len(),
        "trailing data after JSON value"
    );
    value
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn skip_space(&mut self) {
        while self
            .bytes
            .get(self.pos)
            .is_some_and(|b| b" \t\r\n".contains(b))
        {
            self.pos += 1;
        }
    }

    fn next(&mut self) -> u8 {
        let byte = *self
            .bytes
            .get(self.pos)
            .unwrap_or_else(|| panic!("JSON ends early"));
        self.pos += 1;
        byte
    }

    fn expect(&mut self, literal: &[u8]) {
        assert!(
            self.bytes[self.pos..].starts_with(literal),
            "JSON: expected {literal:?} at {}",
            self.pos
        );
        self.pos += literal.len();
    }

    fn value(&mut self) -> Json {
        self.skip_space();
        match self.bytes.get(self.pos) {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => Json::String(self.string()),
            Some(b't') => {
                self.expect(b"true");
                Json::Bool(true)
            }
            Some(b'f') => {
                self.expect(b"false");
                Json::Bool(false)
            }
            Some(b'n') => {
                self.expect(b"null");
                Json::Null
            }
            _ => self.number(),
        }
    }

    fn object(&mut self) -> Json {
        self.expect(b"{");
        let mut members = Vec::new();
        self.skip_space();
        if self.bytes.get(self.pos) == Some(&b'}') {
            self.pos += 1;
            return Json::Object(members);
        }
        loop {
            self.skip_space();
            let key = self.string();
            self.skip_space();
            self.expect(b":");
            members.push((key, self.value()));
            self.skip_space();
            match self.next() {
                b',' => continue,
                b'}' => return Json::Object(members),
                other => panic!("JSON: unexpected {:?} at {}", other as char, self.pos),
            }
        }
    }

    fn array(&mut self) -> Json {
        self.expect(b"[");
        let mut items = Vec::new();
        self.skip_space();
        if self.bytes.get(self.pos) == Some(&b']') {
            self.pos += 1;
            return Json::Array(items);
        }
        loop {
            items.push(self.value());
            self.skip_space();
            match self.next() {
                b',' => continue,
                b']' => return Json::Array(items),
                other => panic!("JSON: unexpected {:?} at {}", other as char, self.pos),
            }
        }
    }

    fn number(&mut self) -> Json {
        let start = self.pos;
        while self
            .bytes
            .get(self.pos)
            .is_some_and(|b| b"+-.eE0123456789".contains(b))
        {
            self.pos += 1;
        }
        let text = std::str::from_utf8(&self.bytes[start..self.pos]).unwrap();
        Json::Number(
            text.parse()
                .unwrap_or_else(|_| panic!("JSON: bad number {text:?} at {start}")),
        )
    }

    fn string(&mut self) -> String {
        self.expect(b"\"");
        let mut out = String::new();
        loop {
            let start = self.pos;
            while !matches!(self.bytes.get(self.pos), Some(b'"' | b'\\') | None) {
                self.pos += 1;
            }
            out.push_str(std::str::from_utf8(&self.bytes[start..self.pos]).unwrap());
            match self.next() {
                b'"' => return out,
                _ => {
                    let escaped = match self.next() {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape(),
                        other => panic!("JSON: bad escape {:?}", other as char),
                    };
                    out.push(escaped);
                }
            }
        }
    }

    fn hex4(&mut self) -> u32 {
        let text = std::str::from_utf8(&self.bytes[self.pos..self.pos + 4]).unwrap();
        self.pos += 4;
        u32::from_str_radix(text, 16).unwrap()
    }

    fn unicode_escape(&mut self) -> char {
        let first = self.hex4();
        let code = if (0xD800..0xDC00).contains(&first) {
            self.expect(b"\\u");
            let low = self.hex4();
            0x10000 + ((first - 0xD800) << 10) + (low - 0xDC00)
        } else {
            first
        };
        char::from_u32(code).unwrap_or('\u{fffd}')
    }
}

/// Decodes standard base64 (RFC 4648 section 4), padding optional.
pub fn base64_decode(text: &str) -> Vec<u8> {
    fn sextet(c: u8) -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("base64: bad byte {:?}", c as char),
        }
    }
    let digits: Vec<u8> = text.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for group in digits.chunks(4) {
        let bits = group
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &c)| acc | sextet(c) << (18 - 6 * i));
        let bytes = bits.to_be_bytes();
        out.extend_from_slice(&bytes[1..group.len()]);
    }
    out
}

#[test]
fn reads_nested_json_with_escapes() {
    let value = parse(r#"{"a": [1, -2.5e1, true, null], "b": "x\"\u00e9\ud83d\ude00"}"#);
    assert_eq!(
        value.get("a").unwrap().as_array().unwrap()[1].as_f64(),
        Some(-25.0)
    );
    assert_eq!(value.get("b").unwrap().as_str(), Some("x\"\u{e9}\u{1f600}"));
}

#[test]
fn decodes_base64_with_and_without_padding() {
    assert_eq!(base64_decode("aGVsbG8="), b"hello");
    assert_eq!(base64_decode("aGVsbG8gd29ybGQ"), b"hello world");
    assert_eq!(base64_decode(""), b"");
}
