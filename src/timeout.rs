//! [`Timeout`]: the one bound of every wait for the kernel, checked once.

use std::fmt;
use std::time::Duration;

/// How long a wait for the kernel may last: every receive of a
/// [`crate::Handle`], a [`crate::vip::VipDevice`] and the
/// [`crate::nodeips`] dumps ends by then, whatever signals the thread gets.
///
/// Between 1 ms and 1 hour ([`Timeout::MIN`], [`Timeout::MAX`]): the kernel
/// counts a socket's receive timeout in microseconds and takes zero as "wait
/// for ever", and a longer bound is no bound in practice. Anything else is
/// refused by [`Timeout::new`] with a [`TimeoutError`] saying which limit it
/// broke, before anything is sent.
///
/// There are two defaults because the waits differ. A handle's timeout
/// also bounds the wait for its socket while another thread's request
/// holds it, and one bulk request can keep it for many seconds:
/// [`Timeout::HANDLE_DEFAULT`], 60 s. The rtnetlink users (VIP devices,
/// node IPs) own their socket and the kernel answers them while it handles
/// the send, so any real wait means something is wrong:
/// [`Timeout::ROUTE_DEFAULT`], 10 s.
///
/// ```
/// use std::time::Duration;
/// use ipvsctl::{Timeout, TimeoutError};
///
/// let t = Timeout::new(Duration::from_secs(5))?;
/// assert_eq!(t.get(), Duration::from_secs(5));
/// assert!(matches!(Timeout::new(Duration::ZERO), Err(TimeoutError::TooShort { .. })));
/// assert!(matches!(Timeout::new(Duration::from_secs(7200)), Err(TimeoutError::TooLong { .. })));
/// # Ok::<(), TimeoutError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timeout(Duration);

impl Timeout {
    /// The shortest timeout: 1 ms.
    pub const MIN: Timeout = Timeout(Duration::from_millis(1));
    /// The longest timeout: 1 hour.
    pub const MAX: Timeout = Timeout(Duration::from_secs(3600));
    /// A [`crate::Handle`]'s timeout unless set: 60 s.
    pub const HANDLE_DEFAULT: Timeout = Timeout::from_secs(60);
    /// The timeout of [`crate::vip::VipDevice`] and [`crate::nodeips`]
    /// unless set: 10 s.
    pub const ROUTE_DEFAULT: Timeout = Timeout::from_secs(10);

    /// `secs` seconds, for the crate's defaults: refused at compile time
    /// when out of range.
    pub(crate) const fn from_secs(secs: u64) -> Timeout {
        match Timeout::new(Duration::from_secs(secs)) {
            Ok(t) => t,
            Err(_) => panic!("a default timeout out of range"),
        }
    }

    /// `duration` as a timeout, if it is within [`Timeout::MIN`] and
    /// [`Timeout::MAX`].
    pub const fn new(duration: Duration) -> Result<Timeout, TimeoutError> {
        if duration.as_nanos() < Self::MIN.0.as_nanos() {
            Err(TimeoutError::TooShort { given: duration })
        } else if duration.as_nanos() > Self::MAX.0.as_nanos() {
            Err(TimeoutError::TooLong { given: duration })
        } else {
            Ok(Timeout(duration))
        }
    }

    /// The bound as a [`Duration`].
    pub const fn get(self) -> Duration {
        self.0
    }
}

impl From<Timeout> for Duration {
    fn from(t: Timeout) -> Duration {
        t.0
    }
}

impl TryFrom<Duration> for Timeout {
    type Error = TimeoutError;

    fn try_from(duration: Duration) -> Result<Timeout, TimeoutError> {
        Timeout::new(duration)
    }
}

impl fmt::Display for Timeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// Why a [`Duration`] is not a [`Timeout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimeoutError {
    /// Shorter than [`Timeout::MIN`] (zero would mean "wait for ever" to the
    /// kernel).
    #[error("timeout {given:?} is shorter than the minimum of 1ms")]
    TooShort {
        /// The duration given.
        given: Duration,
    },
    /// Longer than [`Timeout::MAX`].
    #[error("timeout {given:?} is longer than the maximum of 1h")]
    TooLong {
        /// The duration given.
        given: Duration,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limits_are_inclusive_and_everything_outside_is_refused() {
        assert_eq!(Timeout::new(Duration::from_millis(1)), Ok(Timeout::MIN));
        assert_eq!(Timeout::new(Duration::from_secs(3600)), Ok(Timeout::MAX));
        for short in [Duration::ZERO, Duration::from_micros(999)] {
            assert_eq!(
                Timeout::new(short),
                Err(TimeoutError::TooShort { given: short })
            );
        }
        let long = Duration::from_secs(3600) + Duration::from_nanos(1);
        assert_eq!(
            Timeout::new(long),
            Err(TimeoutError::TooLong { given: long })
        );
        assert!(Timeout::MIN < Timeout::ROUTE_DEFAULT);
        assert!(Timeout::ROUTE_DEFAULT < Timeout::HANDLE_DEFAULT);
        assert!(Timeout::HANDLE_DEFAULT < Timeout::MAX);
    }

    #[test]
    fn errors_name_the_limit() {
        let e = Timeout::new(Duration::ZERO).unwrap_err();
        assert_eq!(
            e.to_string(),
            "timeout 0ns is shorter than the minimum of 1ms"
        );
    }
}
