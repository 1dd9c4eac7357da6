//! Errors of the conntrack cleanup.

use std::io;
use std::time::Duration;

/// Why conntrack entries could not be read or deleted.
///
/// ```
/// use ipvsctl::conntrack::{ConntrackError, Filter};
/// use ipvsctl::model::ServiceKey;
///
/// let err = Filter::service(&ServiceKey::udp("10.96.0.10:0".parse()?)).unwrap_err();
/// assert!(matches!(err, ConntrackError::InvalidFilter { field: "service.port", .. }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConntrackError {
    /// A filter was refused before anything was sent.
    #[error("conntrack filter: {field} {value}: {reason}")]
    InvalidFilter {
        /// The field refused (`service`, `service.port`, `real_server`,
        /// `protocols`, ...).
        field: &'static str,
        /// The value refused, as given.
        value: String,
        /// Why.
        reason: &'static str,
    },
    /// The kernel has no connection tracking over netlink here: the
    /// `NETLINK_NETFILTER` socket could not be opened (`nfnetlink` missing:
    /// `EPROTONOSUPPORT`), or the kernel refused the dump with `EINVAL`,
    /// which nfnetlink answers when the ctnetlink subsystem
    /// (`nf_conntrack_netlink`) is not there after it tried to load it.
    /// Never reported as an empty table.
    #[error("connection tracking over netlink is not available: {detail}")]
    Unsupported {
        /// What the kernel said.
        detail: String,
    },
    /// The caller may not read or change connection tracking in this
    /// namespace (`EPERM`: `CAP_NET_ADMIN` over the namespace is needed,
    /// for reading too).
    #[error("conntrack {request}: permission denied (CAP_NET_ADMIN needed)")]
    PermissionDenied {
        /// The request (`dump`, `delete`, `create`).
        request: &'static str,
    },
    /// The socket could not be opened (in the requested network namespace).
    #[error("cannot open a netfilter netlink socket: {0}")]
    Socket(#[source] io::Error),
    /// Sending or receiving failed, or answers kept being lost or cut.
    #[error("conntrack {request}: {source}")]
    Io {
        /// The request.
        request: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The kernel refused the request; `source.raw_os_error()` is the errno.
    #[error("kernel refused the conntrack {request}: {source}")]
    Kernel {
        /// The request.
        request: &'static str,
        /// The errno as an I/O error.
        #[source]
        source: io::Error,
    },
    /// Nothing came from the kernel for this long while an answer was due.
    #[error("conntrack {request}: no answer from the kernel in {waited:?}")]
    Timeout {
        /// The request.
        request: &'static str,
        /// How long the wait lasted.
        waited: Duration,
    },
    /// An answer could not be decoded.
    #[error("malformed conntrack {request} answer: {detail}")]
    Malformed {
        /// The request.
        request: &'static str,
        /// What was wrong.
        detail: String,
    },
}
