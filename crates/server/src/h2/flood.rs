//! The flood limits the `h2` crate lacks (ADR 0034): a pre-scanner over the client's bytes
//! that reads frame headers only (nine bytes each, no payload decoded) before `h2` sees
//! them, and the rate windows it feeds. Over a limit, the connection answers GOAWAY
//! ENHANCE_YOUR_CALM and never hands `h2` the frames that broke it.
//!
//! Counted here: RST_STREAM frames from the client and the streams we refuse for its errors
//! (`h2_max_reset_rate`, CVE-2023-44487); PING, SETTINGS, PRIORITY, WINDOW_UPDATE and empty
//! or small DATA frames without END_STREAM (`h2_max_control_rate`: each DATA frame costs a
//! stream's request bytes a few segments, so tiny ones would multiply what a window of body
//! holds in memory); the bytes of one header block
//! (HEADERS and its CONTINUATIONs, CVE-2024-27316) against `h2_max_header_list_size`, before
//! HPACK decodes any of it. Control frames are forgiven in proportion to what we write (one
//! per 4 KiB, in `super::io`): a client reading a large response sends WINDOW_UPDATEs at the
//! pace of its download. It must not decode payloads or keep per-stream state (h2 does).

/// DATA frames shorter than this without END_STREAM count as control frames.
const SMALL_DATA: usize = 64;

/// The rate windows' length in seconds: a limit is "per second, averaged over 10 s".
const WINDOW_SECONDS: usize = 10;

/// Events per second averaged over the last [`WINDOW_SECONDS`] whole seconds: one bucket per
/// second, so a burst up to ten times the rate passes and a sustained one does not.
#[derive(Debug)]
pub(crate) struct RateWindow {
    buckets: [u64; WINDOW_SECONDS],
    /// The second the newest bucket counts (seconds since the connection began).
    second: u64,
    total: u64,
    /// Most events allowed in the window (0: no limit).
    limit: u64,
}

impl RateWindow {
    /// A window allowing `per_second` events per second on average (0: no limit).
    pub(crate) fn new(per_second: u32) -> RateWindow {
        RateWindow {
            buckets: [0; WINDOW_SECONDS],
            second: 0,
            total: 0,
            limit: u64::from(per_second) * WINDOW_SECONDS as u64,
        }
    }

    /// Counts `count` events at `second` (never earlier than the last call's): true when the
    /// window now holds more than the limit allows.
    pub(crate) fn record(&mut self, second: u64, count: u64) -> bool {
        if second > self.second {
            let expired = (second - self.second).min(WINDOW_SECONDS as u64);
            for step in 1..=expired {
                let bucket = &mut self.buckets[((self.second + step) as usize) % WINDOW_SECONDS];
                self.total -= *bucket;
                *bucket = 0;
            }
            self.second = second;
        }
        self.buckets[(self.second as usize) % WINDOW_SECONDS] += count;
        self.total += count;
        self.limit != 0 && self.total > self.limit
    }
}

/// What one scan found, to be added to the windows.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Scanned {
    /// RST_STREAM frames.
    pub(crate) resets: u64,
    /// PING, SETTINGS, PRIORITY, WINDOW_UPDATE, empty DATA without END_STREAM.
    pub(crate) control: u64,
    /// A header block grew past the limit.
    pub(crate) block_too_large: bool,
}

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// Walks the client's byte stream frame by frame, resumable at any byte: the preface first,
/// then nine-byte headers whose payloads it skips.
#[derive(Debug)]
pub(crate) struct FrameScanner {
    /// Preface bytes still to skip (h2 checks them).
    preface: usize,
    header: [u8; 9],
    have: usize,
    /// Payload bytes of the current frame still to skip.
    skip: usize,
    /// Bytes of the header block being received (HEADERS without END_HEADERS so far).
    block: Option<usize>,
    max_block: usize,
}

impl FrameScanner {
    /// A scanner for a connection whose first bytes are the preface, bounding header blocks
    /// at `max_block` bytes (encoded).
    pub(crate) fn new(max_block: usize) -> FrameScanner {
        FrameScanner {
            preface: super::PREFACE.len(),
            header: [0; 9],
            have: 0,
            skip: 0,
            block: None,
            max_block,
        }
    }

    /// Scans `bytes` (the next bytes the client sent), adding what it finds to `found`.
    pub(crate) fn scan(&mut self, mut bytes: &[u8], found: &mut Scanned) {
        let skipped = self.preface.min(bytes.len());
        self.preface -= skipped;
        bytes = &bytes[skipped..];
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (9 - self.have).min(bytes.len());
            self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have == 9 {
                self.have = 0;
                self.frame(found);
            }
        }
    }

    fn frame(&mut self, found: &mut Scanned) {
        let [l0, l1, l2, kind, flags, ..] = self.header;
        let length = usize::from(l0) << 16 | usize::from(l1) << 8 | usize::from(l2);
        self.skip = length;
        match kind {
            RST_STREAM => found.resets += 1,
            PING | SETTINGS | PRIORITY | WINDOW_UPDATE => found.control += 1,
            DATA if length < SMALL_DATA && flags & END_STREAM == 0 => found.control += 1,
            HEADERS | CONTINUATION => {
                let so_far = if kind == HEADERS {
                    0
                } else {
                    self.block.unwrap_or(0)
                };
                let size = so_far + length;
                if size > self.max_block {
                    found.block_too_large = true;
                }
                self.block = (flags & END_HEADERS == 0).then_some(size);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn window_allows_ten_seconds_of_the_rate_then_refuses() {
        let mut window = RateWindow::new(2);
        assert!(!window.record(0, 20));
        assert!(window.record(0, 1));
    }

    #[test]
    fn window_forgets_seconds_older_than_ten() {
        let mut window = RateWindow::new(1);
        assert!(!window.record(0, 10));
        // Second 10: second 0's bucket left the window.
        assert!(!window.record(10, 10));
        assert!(window.record(11, 1));
        // A long silence empties it.
        assert!(!window.record(1000, 10));
    }

    #[test]
    fn window_zero_is_no_limit() {
        let mut window = RateWindow::new(0);
        assert!(!window.record(0, u64::from(u32::MAX)));
    }

    #[test]
    fn scanner_counts_across_split_reads() {
        let mut bytes = super::super::PREFACE.to_vec();
        bytes.extend(frame(SETTINGS, 0, 0, &[]));
        bytes.extend(frame(PING, 0, 0, &[0; 8]));
        bytes.extend(frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]));
        bytes.extend(frame(DATA, 0, 1, &[]));
        bytes.extend(frame(DATA, END_STREAM, 1, &[]));
        bytes.extend(frame(DATA, 0, 1, &[b'b'; SMALL_DATA]));
        bytes.extend(frame(WINDOW_UPDATE, 0, 0, &[0, 0, 1, 0]));
        bytes.extend(frame(PRIORITY, 0, 3, &[0, 0, 0, 1, 16]));
        let mut scanner = FrameScanner::new(100);
        let mut found = Scanned::default();
        for byte in bytes.chunks(1) {
            scanner.scan(byte, &mut found);
        }
        assert_eq!(
            found,
            Scanned {
                resets: 1,
                control: 5,
                block_too_large: false
            }
        );
    }

    #[test]
    fn scanner_bounds_a_header_block_across_continuations() {
        let mut scanner = FrameScanner::new(100);
        let mut found = Scanned::default();
        scanner.scan(super::super::PREFACE, &mut found);
        scanner.scan(&frame(HEADERS, END_HEADERS, 1, &[0; 100]), &mut found);
        assert!(!found.block_too_large);
        scanner.scan(&frame(HEADERS, 0, 3, &[0; 60]), &mut found);
        scanner.scan(&frame(CONTINUATION, 0, 3, &[0; 40]), &mut found);
        assert!(!found.block_too_large);
        scanner.scan(&frame(CONTINUATION, END_HEADERS, 3, &[0; 1]), &mut found);
        assert!(found.block_too_large);
    }
}
