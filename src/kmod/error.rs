//! Errors of the kernel module check.

use std::io;

/// What can go wrong in [`crate::kmod`].
///
/// The check itself never fails: what it cannot read becomes evidence in the
/// [`Report`](super::Report). Errors are for bad input and for the netlink
/// probe's own failures.
///
/// ```
/// use ipvsctl::kmod::{KmodError, Requirements};
///
/// let err = Requirements::empty().with_module("ip vs").unwrap_err();
/// assert!(matches!(err, KmodError::InvalidModuleName { .. }));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KmodError {
    /// A module, scheduler or persistence engine name that cannot be a
    /// kernel module name.
    #[error("invalid module name {name:?}: {reason}")]
    InvalidModuleName {
        /// The name as given.
        name: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A `modprobe` program named by a path that is not absolute.
    #[error("invalid modprobe program {path:?}: {reason}")]
    InvalidModprobePath {
        /// The path as given.
        path: std::path::PathBuf,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The scheduler probe did not finish within its timeout. Its thread,
    /// stuck in the kernel (no signal ends that wait), was left detached: it
    /// ends, and its namespace goes away, whenever the kernel lets it go.
    #[error(
        "the probe of scheduler {scheduler:?} did not finish within {timeout:?}; \
         its thread is stuck in the kernel and was left behind"
    )]
    ProbeTimedOut {
        /// The scheduler probed.
        scheduler: String,
        /// How long the probe was allowed.
        timeout: std::time::Duration,
    },
    /// A generic netlink family name longer than the kernel allows (15
    /// bytes), or empty.
    #[error("invalid generic netlink family name {0:?}: 1 to 15 bytes")]
    InvalidFamilyName(String),
    /// A netlink socket operation failed.
    #[error("netlink: {during}: {source}")]
    Netlink {
        /// What the probe was doing.
        during: &'static str,
        /// The error from the socket.
        #[source]
        source: io::Error,
    },
    /// The kernel's reply could not be understood.
    #[error("unexpected netlink reply: {0}")]
    Protocol(String),
    /// A private network namespace could not be created for the probe.
    #[error("cannot create a private network namespace (needs CAP_SYS_ADMIN): {0}")]
    Netns(#[source] io::Error),
    /// The probe's worker thread could not be started, or died.
    #[error("probe thread: {0}")]
    ProbeThread(String),
}
