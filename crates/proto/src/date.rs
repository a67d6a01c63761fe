//! The `Date` field value (RFC 9110 section 6.6.1), cached per second.
//!
//! Owns: formatting the IMF-fixdate. Must not: start a timer thread (the
//! master forks, and forked children must not inherit threads); each thread
//! that writes responses owns a `DateCache` and calls `now()` per response.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
const IMF_FIXDATE_LEN: usize = 29;

/// `Date: ` before the value in a header line.
const LINE_PREFIX: &[u8; 6] = b"Date: ";
/// Length of the whole header line: `Date: <IMF-fixdate>\r\n`.
const LINE_LEN: usize = LINE_PREFIX.len() + IMF_FIXDATE_LEN + 2;

/// The current date as an IMF-fixdate, formatted at most once per second, kept as a whole
/// header line (a response copies it in one piece).
#[derive(Clone, Debug)]
pub struct DateCache {
    /// The second `line` was formatted for; `u64::MAX` before the first call.
    second: u64,
    line: [u8; LINE_LEN],
}

impl Default for DateCache {
    fn default() -> Self {
        Self::new()
    }
}

impl DateCache {
    /// An empty cache; the first `now()` formats.
    pub fn new() -> Self {
        let mut line = [0; LINE_LEN];
        line[..LINE_PREFIX.len()].copy_from_slice(LINE_PREFIX);
        line[LINE_LEN - 2..].copy_from_slice(b"\r\n");
        DateCache {
            second: u64::MAX,
            line,
        }
    }

    /// IMF-fixdate, 29 bytes, recomputed only when the second changes.
    ///
    /// Reads the coarse real-time clock (the time of the last scheduler tick, a few ms old at
    /// most): the field has one-second resolution, and the coarse read costs a few ns where
    /// the precise one costs ~25 ns, once per response.
    pub fn now(&mut self) -> &[u8] {
        self.format(coarse_second());
        self.value()
    }

    /// The whole header line for now, `Date: <IMF-fixdate>\r\n` (as [`DateCache::now`]).
    pub fn line_now(&mut self) -> &[u8] {
        self.format(coarse_second());
        &self.line
    }

    /// The date for `time` (reformatted only if its second differs from the
    /// last call's). Times before 1970 are clamped to the epoch.
    pub fn at(&mut self, time: SystemTime) -> &[u8] {
        self.format(time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()));
        self.value()
    }

    fn value(&self) -> &[u8] {
        &self.line[LINE_PREFIX.len()..LINE_LEN - 2]
    }

    /// Formats the date for `second` (seconds since the epoch) unless it is the last one's.
    fn format(&mut self, second: u64) {
        if second != self.second {
            let whole_second = UNIX_EPOCH + std::time::Duration::from_secs(second);
            let mut out = &mut self.line[LINE_PREFIX.len()..LINE_LEN - 2];
            // INVARIANT: httpdate always writes exactly 29 bytes for years
            // 1970-9999; a write error would mean a longer string.
            if write!(out, "{}", httpdate::HttpDate::from(whole_second)).is_ok() && out.is_empty() {
                self.second = second;
            }
        }
    }
}

/// The seconds since the epoch, from the coarse real-time clock (no `SystemTime`
/// arithmetic: only the second is needed). Times before 1970 count as the epoch.
#[cfg(target_os = "linux")]
fn coarse_second() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid out-pointer; CLOCK_REALTIME_COARSE exists since Linux 2.6.32.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut now) } != 0 {
        return precise_second();
    }
    now.tv_sec.max(0) as u64
}

#[cfg(not(target_os = "linux"))]
fn coarse_second() -> u64 {
    precise_second()
}

fn precise_second() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_an_imf_fixdate() {
        let mut cache = DateCache::new();
        let time = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(cache.at(time), b"Sun, 06 Nov 1994 08:49:37 GMT");
    }

    #[test]
    fn reformats_only_when_the_second_changes() {
        let mut cache = DateCache::new();
        let time = UNIX_EPOCH + Duration::from_secs(784_111_777);
        cache.at(time);
        assert_eq!(
            cache.at(time + Duration::from_millis(999)),
            b"Sun, 06 Nov 1994 08:49:37 GMT"
        );
        assert_eq!(
            cache.at(time + Duration::from_secs(1)),
            b"Sun, 06 Nov 1994 08:49:38 GMT"
        );
    }

    #[test]
    fn gives_29_bytes_for_now() {
        assert_eq!(DateCache::new().now().len(), 29);
    }

    #[test]
    fn the_coarse_clock_is_within_a_second_of_the_precise_one() {
        let before = precise_second();
        let coarse = coarse_second();
        let after = precise_second();
        assert!(
            before.saturating_sub(1) <= coarse && coarse <= after,
            "{before} {coarse} {after}"
        );
    }

    #[test]
    fn the_line_is_the_date_field_with_its_value() {
        let mut cache = DateCache::new();
        let time = UNIX_EPOCH + Duration::from_secs(784_111_777);
        cache.at(time);
        assert_eq!(cache.line, *b"Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
        let line = cache.line_now().to_vec();
        assert_eq!(&line[..6], b"Date: ");
        assert_eq!(&line[6..35], cache.now());
        assert_eq!(&line[35..], b"\r\n");
    }
}
