//! UTF-8 checked as a text message streams in: the bytes of a code point may be split across
//! reads and fragments, and an invalid sequence fails as soon as its first wrong byte arrives
//! (the Autobahn suite's "fail fast" cases), not at the end of the message.

/// The state between two pieces of one message: the start of a code point not yet complete.
#[derive(Clone, Copy, Debug, Default)]
pub struct Utf8Stream {
    pending: [u8; 4],
    len: usize,
}

/// The length of the code point a lead byte starts (0: not a lead byte).
fn width(lead: u8) -> usize {
    match lead {
        0x00..=0x7f => 1,
        0xc2..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf4 => 4,
        _ => 0,
    }
}

/// Whether `bytes` (shorter than its code point) can still become a valid one.
fn valid_prefix(bytes: &[u8]) -> bool {
    match std::str::from_utf8(bytes) {
        Ok(_) => true,
        Err(err) => err.error_len().is_none(),
    }
}

impl Utf8Stream {
    /// Checks the next piece of the message: false from the first invalid byte on.
    pub fn feed(&mut self, data: &[u8]) -> bool {
        self.check(data).is_ok()
    }

    fn check(&mut self, mut data: &[u8]) -> Result<(), ()> {
        if self.len > 0 {
            let need = width(self.pending[0]);
            while self.len < need && !data.is_empty() {
                self.pending[self.len] = data[0];
                self.len += 1;
                data = &data[1..];
            }
            if self.len < need {
                return if valid_prefix(&self.pending[..self.len]) {
                    Ok(())
                } else {
                    Err(())
                };
            }
            std::str::from_utf8(&self.pending[..need]).map_err(|_| ())?;
            self.len = 0;
        }
        match std::str::from_utf8(data) {
            Ok(_) => Ok(()),
            Err(err) if err.error_len().is_some() => Err(()),
            Err(err) => {
                // The piece ends part-way through a code point that may still be valid.
                let tail = &data[err.valid_up_to()..];
                self.pending[..tail.len()].copy_from_slice(tail);
                self.len = tail.len();
                Ok(())
            }
        }
    }

    /// Whether the message may end here (no code point left incomplete); resets.
    pub fn finish(&mut self) -> bool {
        let complete = self.len == 0;
        self.len = 0;
        complete
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `bytes` cut at every position into two pieces and one byte at a time.
    fn check_all_splits(bytes: &[u8]) -> bool {
        let whole = std::str::from_utf8(bytes).is_ok();
        for cut in 0..=bytes.len() {
            let mut stream = Utf8Stream::default();
            let ok = stream.feed(&bytes[..cut]) && stream.feed(&bytes[cut..]) && stream.finish();
            assert_eq!(ok, whole, "{bytes:02x?} cut at {cut}");
        }
        let mut stream = Utf8Stream::default();
        let ok = bytes.chunks(1).all(|byte| stream.feed(byte)) && stream.finish();
        assert_eq!(ok, whole, "{bytes:02x?} byte by byte");
        whole
    }

    #[test]
    fn agrees_with_the_standard_library_however_the_bytes_are_split() {
        let cases: &[&[u8]] = &[
            b"",
            b"Hello-\xc2\xb5@\xc3\x9f\xc3\xb6\xc3\xa4\xc3\xbc\xc3\xa0\xc3\xa1-UTF-8!!",
            "κόσμε".as_bytes(),
            b"\xf0\x90\x80\x80",
            b"\xf4\x8f\xbf\xbf",
            b"\xf4\x90\x80\x80", // past U+10FFFF
            b"\xed\xa0\x80",     // a surrogate
            b"\xc0\xaf",         // overlong
            b"\xe0\x80\xaf",     // overlong
            b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80edited",
            b"\x80",
            b"\xfe",
            b"\xf8\x88\x80\x80\x80",
        ];
        let valid: Vec<bool> = cases.iter().map(|case| check_all_splits(case)).collect();
        assert_eq!(
            valid,
            [
                true, true, true, true, true, false, false, false, false, false, false, false,
                false
            ]
        );
    }

    #[test]
    fn an_invalid_byte_fails_at_once_not_at_the_end_of_the_message() {
        let mut stream = Utf8Stream::default();
        // "κόσμε" then the first byte of a surrogate's second byte, which no code point allows.
        assert!(stream.feed("κόσμε".as_bytes()));
        assert!(stream.feed(b"\xed"));
        assert!(!stream.feed(b"\xa0"));
        let mut stream = Utf8Stream::default();
        assert!(stream.feed(b"\xf4"));
        assert!(!stream.feed(b"\x90"));
    }

    #[test]
    fn a_message_cut_inside_a_code_point_does_not_finish() {
        let mut stream = Utf8Stream::default();
        assert!(stream.feed(b"ok\xe2\x82"));
        assert!(!stream.finish());
        assert!(stream.finish()); // reset for the next message
    }
}
