//! Log lines as keepalived writes them with `-l` (console) and `-n`
//! (no fork): `Sat Dec  5 12:00:00 2026: message` on standard error, the
//! time as C's `%c` prints it. Without `-l` keepalived writes to syslog;
//! keepalived-lite writes the message alone to standard error then.

use std::io::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where the lines go and how they look.
#[derive(Debug, Clone, Copy)]
pub struct Log {
    console: bool,
}

impl Log {
    /// `-l`: each line starts with the time.
    pub fn new(console: bool) -> Log {
        Log { console }
    }

    /// Writes one line.
    pub fn line(&self, msg: &str) {
        let mut err = std::io::stderr().lock();
        let _ = if self.console {
            writeln!(err, "{}: {msg}", c_time(SystemTime::now()))
        } else {
            writeln!(err, "{msg}")
        };
    }

    /// Writes each line.
    pub fn lines(&self, msgs: impl IntoIterator<Item = String>) {
        for m in msgs {
            self.line(&m);
        }
    }
}

/// `%c` in the C locale, in UTC: `Sat Dec  5 12:00:00 2026`.
pub fn c_time(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{} {} {:2} {:02}:{:02}:{:02} {}",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[(m - 1) as usize],
        d,
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        y
    )
}

/// Year, month (1-12) and day of a count of days since 1970-01-01
/// (Howard Hinnant's civil-from-days algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}
