//! The `Date` field value (RFC 9110 section 6.6.1), cached per second.
//!
//! Owns: formatting the IMF-fixdate. Must not: start a timer thread (the
//! master forks, and forked children must not inherit threads); each thread
//! that writes responses owns a `DateCache` and calls `now()` per response.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
const IMF_FIXDATE_LEN: usize = 29;

/// The current date as an IMF-fixdate, formatted at most once per second.
#[derive(Clone, Debug)]
pub struct DateCache {
    /// The second `text` was formatted for; `u64::MAX` before the first call.
    second: u64,
    text: [u8; IMF_FIXDATE_LEN],
}

impl Default for DateCache {
    fn default() -> Self {
        Self::new()
    }
}

impl DateCache {
    /// An empty cache; the first `now()` formats.
    pub fn new() -> Self {
        DateCache {
            second: u64::MAX,
            text: [0; IMF_FIXDATE_LEN],
        }
    }

    /// IMF-fixdate, 29 bytes, recomputed only when the second changes.
    ///
    /// Reads the coarse real-time clock (the time of the last scheduler tick, a few ms old at
    /// most): the field has one-second resolution, and the coarse read costs a few ns where
    /// the precise one costs ~25 ns, once per response.
    pub fn now(&mut self) -> &[u8] {
        self.at(coarse_now())
    }

    /// The date for `time` (reformatted only if its second differs from the
    /// last call's). Times before 1970 are clamped to the epoch.
    pub fn at(&mut self, time: SystemTime) -> &[u8] {
        let second = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if second != self.second {
            let whole_second = UNIX_EPOCH + std::time::Duration::from_secs(second);
            let mut out = &mut self.text[..];
            // INVARIANT: httpdate always writes exactly 29 bytes for years
            // 1970-9999; a write error would mean a longer string.
            if write!(out, "{}", httpdate::HttpDate::from(whole_second)).is_ok() && out.is_empty() {
                self.second = second;
            }
        }
        &self.text
    }
}

#[cfg(target_os = "linux")]
fn coarse_now() -> SystemTime {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid out-pointer; CLOCK_REALTIME_COARSE exists since Linux 2.6.32.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut now) } != 0 {
        return SystemTime::now();
    }
    UNIX_EPOCH + std::time::Duration::new(now.tv_sec.max(0) as u64, now.tv_nsec as u32)
}

#[cfg(not(target_os = "linux"))]
fn coarse_now() -> SystemTime {
    SystemTime::now()
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
        let precise = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let coarse = coarse_now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!((precise - coarse).abs() < 1.0, "{precise} {coarse}");
    }
}
