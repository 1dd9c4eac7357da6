//! What a delete did, entry by entry.

use std::fmt;
use std::time::Duration;

use crate::codec::conntrack::Entry;

/// Counts of one filter (or of the whole delete).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counts {
    /// Entries the dump showed that the filter selects.
    pub found: usize,
    /// Entries the kernel deleted.
    pub deleted: usize,
    /// Entries gone before their delete arrived (`ENOENT`: expired between
    /// the dump and the delete, or replaced by a newer entry of the same
    /// tuple, which is left alone). Not a failure.
    pub already_gone: usize,
    /// Entries whose delete failed (see [`DeleteReport::failed`]).
    pub failed: usize,
}

/// Why one entry's delete failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeleteFailureReason {
    /// The kernel refused it with this errno (and its extended-ACK message).
    Kernel {
        /// The positive errno.
        errno: i32,
        /// The kernel's message, if it sent one.
        message: Option<String>,
    },
    /// Its answer was lost (receive buffer overrun): whether it was deleted
    /// is unknown.
    Lost,
    /// Nothing came back for it within the timeout: whether it was deleted
    /// is unknown.
    TimedOut {
        /// How long the wait lasted.
        waited: Duration,
    },
    /// Anything else the transport reported.
    Other(String),
}

/// One entry whose delete failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeleteFailure {
    /// The entry, as the dump showed it.
    pub entry: Entry,
    /// Why.
    pub reason: DeleteFailureReason,
}

impl fmt::Display for DeleteFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.entry.orig;
        write!(
            f,
            "{} {}:{} -> {}:{} (id {:?}): ",
            o.protocol, o.src, o.src_port, o.dst, o.dst_port, self.entry.id
        )?;
        match &self.reason {
            DeleteFailureReason::Kernel { errno, message } => {
                write!(f, "{}", std::io::Error::from_raw_os_error(*errno))?;
                if let Some(m) = message {
                    write!(f, " ({m})")?;
                }
                Ok(())
            }
            DeleteFailureReason::Lost => f.write_str("answer lost"),
            DeleteFailureReason::TimedOut { waited } => write!(f, "no answer in {waited:?}"),
            DeleteFailureReason::Other(s) => f.write_str(s),
        }
    }
}

/// What [`super::Conntrack::delete`] and [`super::Conntrack::delete_all`]
/// did: every entry found is deleted, already gone, or failed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeleteReport {
    /// The whole delete; an entry selected by several filters counts once.
    pub total: Counts,
    /// Per filter, in the order given; an entry selected by several
    /// filters counts for each.
    pub per_filter: Vec<Counts>,
    /// The entries whose delete failed.
    pub failed: Vec<DeleteFailure>,
    /// How many dumps were asked for (more than one when the kernel's
    /// answer was lost or cut and the dump was asked again).
    pub dumps: u32,
}

impl DeleteReport {
    /// Whether no delete failed.
    pub fn is_ok(&self) -> bool {
        self.failed.is_empty()
    }
}
