//! Calendar time for the logs, in UTC: days since the epoch to a civil date, and the
//! access log's once-per-second timestamp. Both the error log ([`crate::log`]) and the access
//! log ([`crate::access_log`]) format their timestamps from here.
//!
//! It knows nothing of requests or of where lines go, and imports nothing from the crate. (The
//! HTTP `Date` header is `tines_proto::DateCache`.)
//!
//! And the monotonic clock as each thread last read it ([`now`], [`recent`]).

use std::cell::Cell;
use std::io::Write;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

thread_local! {
    /// This thread's last reading of the monotonic clock ([`now`]).
    static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Reads the monotonic clock, and keeps the reading for [`recent`]. For the points that must
/// be exact: a request's start on a thread that may have waited since its last reading, the
/// app's return, the response's last write, the loop's wake-up.
pub fn now() -> Instant {
    let now = Instant::now();
    LAST.with(|last| last.set(Some(now)));
    now
}

/// This thread's last reading ([`now`]; a new one on its first call): for marks that may be
/// as old as this thread's last exact point, which is microseconds when it did nothing that
/// waits since (a deadline set just after a response, the head of a request that arrived
/// before the loop woke).
///
/// Why: a request read the clock six times (the loop's dispatch, the head's arrival, the
/// keep-alive and send deadlines, the app's return, the last write), about 18 ns each in
/// this VM's vDSO, 2% of a hello-world request's CPU (perf); the loop now reads it once per
/// wake-up and the request twice.
pub fn recent() -> Instant {
    LAST.with(|last| last.get()).unwrap_or_else(now)
}

/// Seconds since 1970-01-01 UTC (0 if the system clock is before the epoch).
pub(crate) fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Converts days since 1970-01-01 to (year, month 1-12, day 1-31) (Howard Hinnant's
/// `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The access-log timestamp, formatted once per second.
#[derive(Default)]
pub struct LogClock {
    second: u64,
    text: Vec<u8>,
    iso_second: u64,
    iso: Vec<u8>,
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

impl LogClock {
    /// `22/Nov/2026:10:20:00 +0000` for now.
    pub fn now(&mut self) -> &[u8] {
        let secs = unix_seconds();
        if secs != self.second || self.text.is_empty() {
            self.second = secs;
            let (year, month, day) = civil_from_days((secs / 86_400) as i64);
            let rem = secs % 86_400;
            self.text.clear();
            let _ = write!(
                self.text,
                "{:02}/{}/{}:{:02}:{:02}:{:02} +0000",
                day,
                MONTHS[(month - 1) as usize],
                year,
                rem / 3600,
                rem / 60 % 60,
                rem % 60
            );
        }
        &self.text
    }

    /// `2026-11-22T10:20:00Z` (RFC 3339, UTC) for now: the JSON access log's time.
    pub fn iso_now(&mut self) -> &[u8] {
        let secs = unix_seconds();
        if secs != self.iso_second || self.iso.is_empty() {
            self.iso_second = secs;
            let (year, month, day) = civil_from_days((secs / 86_400) as i64);
            let rem = secs % 86_400;
            self.iso.clear();
            let _ = write!(
                self.iso,
                "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
                rem / 3600,
                rem / 60 % 60,
                rem % 60
            );
        }
        &self.iso
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_from_days_matches_known_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_414), (2025, 11, 22));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
