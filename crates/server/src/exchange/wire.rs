//! Which of a response's bytes on the wire are body, for the access log of a response the
//! poller finishes (a slow reader): of the bytes it never wrote, only the body's share comes
//! off the logged body bytes, not the head or the chunk framing queued with them.
//!
//! Owns [`WireMap`]: a count of the response's bytes emitted (one add per write), and, only
//! once the response is handed over to the poller, the head and framing stretches of what was
//! queued, found by reading the queued bytes as the HTTP/1.1 framing the exchange wrote them
//! in. Must not allocate, scan or record anything for a response the socket took at once.

/// Where the next byte of the response falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// In the head; this many bytes of its closing `\r\n\r\n` seen.
    Head(u8),
    /// In a body that is not chunked (or none: a HEAD response has nothing after its head).
    Body,
    /// In a chunk-size line, the size so far.
    Size(u64),
    /// In a chunk's data: this many bytes left.
    Data(u64),
    /// In the `\r\n` after a chunk's data: this many bytes left.
    DataEnd(u8),
    /// In the last chunk's trailer section: this many bytes on the current line so far.
    Trailers(u64),
    /// After the last chunk.
    Done,
}

/// The layout of one response's bytes on the wire, as far as the access log needs it.
#[derive(Debug)]
pub(crate) struct WireMap {
    /// Bytes of the response emitted so far: head, framing and body.
    emitted: u64,
    /// The framing state at `emitted`.
    state: Scan,
    /// The bytes are being read as they are emitted (the response was handed over).
    tracking: bool,
    /// The stretches `[start, end)` (offsets in the response) that are not body, among what
    /// was read; adjacent ones merged.
    framing: Vec<(u64, u64)>,
}

impl Default for WireMap {
    fn default() -> Self {
        WireMap {
            emitted: 0,
            state: Scan::Head(0),
            tracking: false,
            framing: Vec::new(),
        }
    }
}

impl WireMap {
    /// `parts` (`len` bytes) were emitted (written or queued) as the response's next bytes;
    /// `chunked`: its body is chunked; `queued`: the response has been handed over to the
    /// poller, so these bytes (and every later one) are read for their framing.
    pub(crate) fn emitted(&mut self, parts: &[&[u8]], len: u64, chunked: bool, queued: bool) {
        self.tracking |= queued;
        if !self.tracking {
            // Every write of a response ends on a frame boundary (its head whole, whole
            // chunks; `file_bytes` says where a file's chunk ends): nothing to read.
            self.emitted += len;
            self.state = if chunked { Scan::Size(0) } else { Scan::Body };
            return;
        }
        for part in parts {
            self.read(part, chunked);
        }
    }

    /// `count` bytes of a file went (or were queued) as body after the chunk-size line just
    /// emitted (`chunked`), or as the body itself.
    pub(crate) fn file_bytes(&mut self, count: u64, chunked: bool, queued: bool) {
        self.tracking |= queued;
        self.emitted += count;
        if chunked && count > 0 {
            self.state = Scan::DataEnd(2);
        }
    }

    /// Of the response's last `unsent` bytes (never written), how many are body.
    pub(crate) fn body_unsent(&self, unsent: u64) -> u64 {
        let from = self.emitted.saturating_sub(unsent);
        let framing: u64 = self
            .framing
            .iter()
            .map(|&(start, end)| end.saturating_sub(start.max(from)))
            .sum();
        unsent.saturating_sub(framing)
    }

    fn mark_framing(&mut self, start: u64, end: u64) {
        match self.framing.last_mut() {
            Some(last) if last.1 == start => last.1 = end,
            _ => self.framing.push((start, end)),
        }
    }

    /// Reads `bytes`, the response's next ones, noting its framing.
    fn read(&mut self, bytes: &[u8], chunked: bool) {
        let mut at = 0;
        while at < bytes.len() {
            let start = self.emitted + at as u64;
            let (taken, body) = match self.state {
                Scan::Body => (bytes.len() - at, true),
                Scan::Data(left) => {
                    let taken = left.min((bytes.len() - at) as u64);
                    self.state = if taken == left {
                        Scan::DataEnd(2)
                    } else {
                        Scan::Data(left - taken)
                    };
                    (taken as usize, true)
                }
                Scan::Done => (bytes.len() - at, false),
                state => {
                    self.state = step(state, bytes[at], chunked);
                    (1, false)
                }
            };
            if !body {
                self.mark_framing(start, start + taken as u64);
            }
            at += taken;
        }
        self.emitted += bytes.len() as u64;
    }
}

/// The state after `byte` in a framing state (head, chunk line, trailers).
fn step(state: Scan, byte: u8, chunked: bool) -> Scan {
    match state {
        Scan::Head(seen) => {
            let seen = match (seen, byte) {
                (0 | 2, b'\r') => seen + 1,
                (1 | 3, b'\n') => seen + 1,
                (_, b'\r') => 1,
                _ => 0,
            };
            match (seen, chunked) {
                (4, true) => Scan::Size(0),
                (4, false) => Scan::Body,
                _ => Scan::Head(seen),
            }
        }
        Scan::Size(size) => match byte {
            b'\n' if size == 0 => Scan::Trailers(0),
            b'\n' => Scan::Data(size),
            _ => match (byte as char).to_digit(16) {
                // Digits come first; an extension (none is written) would add none.
                Some(digit) if size >> 60 == 0 => Scan::Size(size << 4 | u64::from(digit)),
                _ => Scan::Size(size),
            },
        },
        Scan::DataEnd(left) if left > 1 => Scan::DataEnd(left - 1),
        Scan::DataEnd(_) => Scan::Size(0),
        Scan::Trailers(line) => match byte {
            b'\n' if line <= 1 => Scan::Done,
            b'\n' => Scan::Trailers(0),
            _ => Scan::Trailers(line + 1),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";

    /// Head, two chunks (`hello`, `0123456789abcdef0`: 17 bytes) and the last chunk with a
    /// trailer, as written, and the body bytes among each suffix of it counted by hand.
    fn chunked_response() -> Vec<&'static [u8]> {
        vec![
            HEAD,
            b"5\r\nhello\r\n",
            b"11\r\n0123456789abcdef0\r\n",
            b"0\r\nx-sum: 1\r\n\r\n",
        ]
    }

    fn body_in_suffix(parts: &[&[u8]], body: &[bool], unsent: usize) -> u64 {
        let total: usize = parts.iter().map(|part| part.len()).sum();
        body[total - unsent..].iter().filter(|&&b| b).count() as u64
    }

    /// Which bytes of the chunked response are body, by its layout.
    fn body_bytes() -> Vec<bool> {
        let mut body = vec![false; HEAD.len()];
        body.extend([false; 3]);
        body.extend([true; 5]);
        body.extend([false; 2]);
        body.extend([false; 4]);
        body.extend([true; 17]);
        body.extend([false; 2]);
        body.extend([false; 15]);
        body
    }

    #[test]
    fn of_unsent_bytes_only_the_body_counts_wherever_the_cut_falls() {
        let parts = chunked_response();
        let body = body_bytes();
        let total: usize = parts.iter().map(|part| part.len()).sum();
        assert_eq!(body.len(), total);
        // Handed over at the first write (the head partly unsent), or at a later one.
        for handed_over_at in 0..parts.len() {
            let mut map = WireMap::default();
            for (index, part) in parts.iter().enumerate() {
                map.emitted(&[part], part.len() as u64, true, index >= handed_over_at);
            }
            let queued: usize = parts[handed_over_at..].iter().map(|p| p.len()).sum();
            for unsent in 0..=queued {
                assert_eq!(
                    map.body_unsent(unsent as u64),
                    body_in_suffix(&parts, &body, unsent),
                    "handed over at {handed_over_at}, {unsent} unsent"
                );
            }
        }
    }

    #[test]
    fn parts_split_anywhere_read_alike() {
        // One emit of head and first chunk split mid-line, then the rest byte by byte.
        let whole: Vec<u8> = chunked_response().concat();
        let body = body_bytes();
        for split in 1..whole.len() {
            let mut map = WireMap::default();
            map.emitted(
                &[&whole[..split / 2], &whole[split / 2..split]],
                split as u64,
                true,
                true,
            );
            for byte in &whole[split..] {
                map.emitted(&[std::slice::from_ref(byte)], 1, true, true);
            }
            for unsent in 0..=whole.len() {
                let want = body[whole.len() - unsent..].iter().filter(|&&b| b).count();
                assert_eq!(
                    map.body_unsent(unsent as u64),
                    want as u64,
                    "{split}/{unsent}"
                );
            }
        }
    }

    #[test]
    fn a_file_s_chunk_and_a_body_of_known_length_count_their_bytes() {
        // A chunk whose data went by sendfile, queued: its line written, data and CRLF not.
        let mut map = WireMap::default();
        map.emitted(&[HEAD, b"4\r\n"], HEAD.len() as u64 + 3, true, false);
        map.file_bytes(4, true, true);
        map.emitted(&[b"\r\n0\r\n\r\n"], 7, true, true);
        assert_eq!(map.body_unsent(7), 0);
        assert_eq!(map.body_unsent(9), 2);
        assert_eq!(map.body_unsent(11), 4);
        // Content-Length: the head partly unsent, then every body byte.
        let mut map = WireMap::default();
        let head: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n";
        map.emitted(&[head, b"abcdef"], head.len() as u64 + 6, false, true);
        assert_eq!(map.body_unsent(6), 6);
        assert_eq!(map.body_unsent(10), 6);
        // Nothing queued: nothing read, nothing recorded.
        let mut map = WireMap::default();
        let parts = chunked_response();
        let len = parts.iter().map(|part| part.len() as u64).sum();
        map.emitted(&parts, len, true, false);
        assert!(map.framing.is_empty());
        assert_eq!(map.body_unsent(0), 0);
    }
}
