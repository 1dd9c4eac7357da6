//! Errors of the node-IP resolver.

use std::io;
use std::time::Duration;

use super::report::Report;

/// Why node IPs could not be resolved.
///
/// [`NodeIpsError::NoAddresses`] is distinct from the failures: the dumps
/// worked but every interface or address was skipped. Its [`Report`] says why
/// for each one (also reachable through [`NodeIpsError::report`]).
///
/// ```
/// use ipvsctl::nodeips::{filter, Options, NodeIpsError};
///
/// let err = filter(&[], &[], &Options::new()).into_node_ips().unwrap_err();
/// assert!(matches!(err, NodeIpsError::NoAddresses(_)));
/// assert!(err.report().is_some());
/// assert_eq!(err.to_string(), "no node IP address found (no interfaces)");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeIpsError {
    /// The rtnetlink socket could not be opened (in the requested network
    /// namespace): the message names the namespace and the cause.
    #[error("cannot open an rtnetlink socket: {0}")]
    Socket(#[source] io::Error),
    /// Sending the request or receiving the reply failed.
    #[error("rtnetlink {request}: {source}")]
    Io {
        /// The request (`link dump` or `address dump`).
        request: &'static str,
        /// The socket error.
        #[source]
        source: io::Error,
    },
    /// The kernel answered the request with an error (`NLMSG_ERROR` or an
    /// error in `NLMSG_DONE`); `source.raw_os_error()` is the errno.
    #[error("kernel refused the rtnetlink {request}: {source}")]
    Kernel {
        /// The request (`link dump` or `address dump`).
        request: &'static str,
        /// The errno as an I/O error.
        #[source]
        source: io::Error,
    },
    /// The kernel sent nothing for this long while a reply was expected
    /// (see [`Options::timeout`](super::Options::timeout)).
    #[error("rtnetlink {request}: no answer from the kernel in {waited:?}")]
    Timeout {
        /// The request (`link dump` or `address dump`).
        request: &'static str,
        /// How long the receive waited.
        waited: Duration,
    },
    /// A reply could not be decoded.
    #[error("malformed rtnetlink {request} reply: {detail}")]
    Malformed {
        /// The request (`link dump` or `address dump`).
        request: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// The kernel kept flagging the dump as inconsistent
    /// (`NLM_F_DUMP_INTR`: interfaces changed while dumping) on every try.
    #[error("rtnetlink {request} was interrupted by concurrent changes {attempts} times in a row")]
    DumpInterrupted {
        /// The request (`link dump` or `address dump`).
        request: &'static str,
        /// How many times it was tried.
        attempts: u32,
    },
    /// The dumps worked but no address was kept. The report lists every
    /// interface and address considered and why each was skipped.
    #[error("no node IP address found ({0})")]
    NoAddresses(Box<Report>),
}

impl NodeIpsError {
    /// The explanation, for [`NodeIpsError::NoAddresses`].
    ///
    /// ```
    /// use ipvsctl::nodeips::NodeIpsError;
    /// let err = NodeIpsError::Malformed { request: "link dump", detail: "short".into() };
    /// assert!(err.report().is_none());
    /// ```
    pub fn report(&self) -> Option<&Report> {
        match self {
            NodeIpsError::NoAddresses(report) => Some(report),
            _ => None,
        }
    }
}
