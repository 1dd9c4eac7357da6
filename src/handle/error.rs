//! Typed errors of the handle: the object, the cause, the kernel's errno and
//! extended-ACK message.

use std::io;
use std::net::SocketAddr;

use crate::codec::DecodeError;
use crate::codec::frame::NlError;
use crate::model::{DaemonRole, ServiceKey, ValidationError};

mod operation;
#[cfg(test)]
mod tests;

pub use operation::Operation;
pub(crate) use operation::describe;

/// What an operation acted on: used to turn an errno into a typed error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// Adding a service (ENOENT: scheduler or engine missing).
    NewService {
        key: ServiceKey,
        scheduler: String,
        engine: Option<String>,
    },
    /// Any other service operation.
    Service(ServiceKey),
    /// A destination operation (`add` tells EEXIST apart).
    Dest { key: ServiceKey, addr: SocketAddr },
    /// A sync-daemon operation.
    Daemon(Option<DaemonRole>),
    /// Namespace-wide operations (flush, zero all, config, info).
    Global,
}

/// Errors of [`crate::Handle`] operations.
///
/// Most variants carry the failed [`Operation`] (`op`) as a value, with the
/// service and real server it acted on, so a caller matches on what failed
/// instead of parsing the message; `Display` writes the operation first
/// (`delete real server 10.244.1.7:8080 of TCP 10.96.0.10:80: real server
/// ... does not exist`). [`Error::operation`] returns it from any variant.
///
/// ```no_run
/// use ipvsctl::{Error, Handle, Operation};
/// use ipvsctl::model::ServiceKey;
///
/// let ipvs = Handle::new()?;
/// let key = ServiceKey::tcp("10.96.0.10:80".parse().unwrap());
/// match ipvs.delete_service(&key) {
///     Ok(()) => {}
///     // Already gone: deleting is idempotent for this caller.
///     Err(Error::ServiceNotFound { op: Operation::DeleteService(k), .. }) if k == key => {}
///     Err(e) if e.errno().is_some() => eprintln!("the kernel refused: {e}"),
///     Err(e) => return Err(e),
/// }
/// # Ok::<(), ipvsctl::Error>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `EEXIST` adding a virtual server.
    #[error("{op}: virtual server {key} already exists")]
    ServiceExists {
        /// The operation.
        op: Operation,
        /// The service.
        key: ServiceKey,
    },
    /// `ESRCH`: the virtual server does not exist.
    #[error("{op}: virtual server {key} does not exist")]
    ServiceNotFound {
        /// The operation.
        op: Operation,
        /// The service.
        key: ServiceKey,
    },
    /// `EEXIST` adding a real server.
    #[error("{op}: real server {server} of {service} already exists")]
    DestinationExists {
        /// The operation.
        op: Operation,
        /// The virtual server.
        service: ServiceKey,
        /// The real server.
        server: SocketAddr,
    },
    /// `ENOENT` editing or deleting a real server.
    #[error("{op}: real server {server} of {service} does not exist")]
    DestinationNotFound {
        /// The operation.
        op: Operation,
        /// The virtual server.
        service: ServiceKey,
        /// The real server.
        server: SocketAddr,
    },
    /// `ENOENT` adding or editing a virtual server: the kernel has no such
    /// scheduler (or persistence engine) registered and could not load it.
    #[error(
        "{op}: the kernel has no scheduler {scheduler:?}{} (is module ip_vs_{scheduler} available?)",
        engine.as_ref().map(|e| format!(" or persistence engine {e:?}")).unwrap_or_default()
    )]
    UnknownScheduler {
        /// The operation.
        op: Operation,
        /// The scheduler asked for.
        scheduler: String,
        /// The persistence engine asked for, if any (the kernel answers the
        /// same errno for both).
        engine: Option<String>,
    },
    /// `ERANGE`: a weight or threshold the kernel refuses.
    #[error("{op}: value out of range (weight or thresholds){}", detail(.message))]
    OutOfRange {
        /// The operation.
        op: Operation,
        /// The kernel's extended-ACK message, if any.
        message: Option<String>,
    },
    /// `EINVAL`: the kernel refused the request's contents.
    #[error("{op}: invalid argument{}", detail(.message))]
    InvalidArgument {
        /// The operation.
        op: Operation,
        /// The kernel's extended-ACK message, if any.
        message: Option<String>,
    },
    /// `EPERM`: IPVS needs `CAP_NET_ADMIN` in the initial user namespace (a
    /// rootless container is refused).
    #[error("{op}: permission denied (IPVS needs CAP_NET_ADMIN in the initial user namespace)")]
    PermissionDenied {
        /// The operation.
        op: Operation,
    },
    /// `EEXIST` starting a sync daemon.
    #[error("{op}: the sync daemon is already running")]
    DaemonRunning {
        /// The operation.
        op: Operation,
    },
    /// `ESRCH` stopping a sync daemon.
    #[error("{op}: the sync daemon is not running")]
    DaemonNotRunning {
        /// The operation.
        op: Operation,
    },
    /// `ENODEV`: the sync daemon's interface does not exist.
    #[error("{op}: no such network interface{}", detail(.message))]
    NoSuchDevice {
        /// The operation.
        op: Operation,
        /// The kernel's extended-ACK message, if any.
        message: Option<String>,
    },
    /// `EOPNOTSUPP` or `EAFNOSUPPORT`.
    #[error("{op}: not supported by this kernel (errno {errno}){}", detail(.message))]
    NotSupported {
        /// The operation.
        op: Operation,
        /// The errno.
        errno: i32,
        /// The kernel's extended-ACK message, if any.
        message: Option<String>,
    },
    /// Any other errno.
    #[error("{op}: {}{}", io::Error::from_raw_os_error(*.errno), detail(.message))]
    Kernel {
        /// The operation.
        op: Operation,
        /// The errno.
        errno: i32,
        /// The kernel's extended-ACK message, if any.
        message: Option<String>,
    },
    /// IPVS cannot be reached: the family is not registered (module missing
    /// and not loadable). Carries the kernel-module check's diagnosis.
    #[error("IPVS unavailable: {reason}")]
    Unavailable {
        /// Why, with the module check's diagnosis.
        reason: String,
    },
    /// The kernel accepted a request but ignored part of it (an attribute it
    /// does not know, such as tunnel settings before Linux 5.2); found by
    /// reading back.
    #[error("{op}: this kernel ignored {what}")]
    Unsupported {
        /// The operation.
        op: Operation,
        /// What was ignored.
        what: String,
    },
    /// Refused before anything was sent, by
    /// [`crate::capabilities::Capabilities::check_service`] or
    /// [`crate::capabilities::Capabilities::check_destination`]: the running kernel lacks
    /// a feature the request needs, and would refuse or silently ignore it.
    #[error("kernel {kernel} has no {feature}: {reason}")]
    KernelLacks {
        /// What is missing, such as `scheduler "twos"` or `GUE tunnels`.
        feature: String,
        /// The running kernel's release (`uname -r`).
        kernel: String,
        /// What showed it is missing.
        reason: String,
    },
    /// The value was refused before anything was sent.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// The kernel's answer to a request was dropped; whether it took effect is
    /// unknown (read back to find out).
    #[error("{op}: the kernel's answer was lost (receive buffer overrun); outcome unknown")]
    Lost {
        /// The operation.
        op: Operation,
    },
    /// The kernel handled a later request of the same datagram but never
    /// answered this one (netlink sends no answer when a handler returns
    /// `EINTR`); whether it took effect is unknown.
    #[error(
        "{op}: the kernel sent no answer (its handler was interrupted, EINTR); outcome unknown"
    )]
    Unanswered {
        /// The operation.
        op: Operation,
    },
    /// A real-server list was dumped in several passes (the kernel resumes
    /// each pass by position) and the table changed between them: the reads
    /// disagreed every time they were repeated, so no list is returned rather
    /// than one that repeats or misses real servers.
    #[error("{op}: the list changed while it was read in several passes ({reads} reads disagreed)")]
    Inconsistent {
        /// The operation.
        op: Operation,
        /// How many times the list was read.
        reads: usize,
    },
    /// The socket failed.
    #[error("{op}: {source}")]
    Io {
        /// The operation.
        op: Operation,
        /// The I/O error.
        source: io::Error,
    },
    /// A reply could not be decoded.
    #[error("{op}: undecodable reply: {source}")]
    Decode {
        /// The operation.
        op: Operation,
        /// The decode error.
        source: DecodeError,
    },
    /// A wait ran out of the handle's timeout
    /// ([`crate::HandleOptions::with_timeout`]): the kernel sent nothing for
    /// that long, or another thread held the handle's socket that long.
    /// Whether a request that was sent took effect is unknown (read back to
    /// find out).
    #[error("{op}: timed out after {waited:?}")]
    Timeout {
        /// The operation.
        op: Operation,
        /// How long it waited.
        waited: std::time::Duration,
    },
}

fn detail(message: &Option<String>) -> String {
    message
        .as_deref()
        .map(|m| format!(": {m}"))
        .unwrap_or_default()
}

impl Error {
    /// The kernel's errno, where the error came from the kernel.
    pub fn errno(&self) -> Option<i32> {
        use libc_errno::*;
        Some(match self {
            Error::ServiceExists { .. } | Error::DestinationExists { .. } => EEXIST,
            Error::DaemonRunning { .. } => EEXIST,
            Error::ServiceNotFound { .. } | Error::DaemonNotRunning { .. } => ESRCH,
            Error::DestinationNotFound { .. } | Error::UnknownScheduler { .. } => ENOENT,
            Error::OutOfRange { .. } => ERANGE,
            Error::InvalidArgument { .. } => EINVAL,
            Error::PermissionDenied { .. } => EPERM,
            Error::NoSuchDevice { .. } => ENODEV,
            Error::NotSupported { errno, .. } | Error::Kernel { errno, .. } => *errno,
            Error::Io { source, .. } => return source.raw_os_error(),
            _ => return None,
        })
    }

    /// The kernel's extended-ACK message, if it sent one.
    pub fn kernel_message(&self) -> Option<&str> {
        match self {
            Error::OutOfRange { message, .. }
            | Error::InvalidArgument { message, .. }
            | Error::NoSuchDevice { message, .. }
            | Error::NotSupported { message, .. }
            | Error::Kernel { message, .. } => message.as_deref(),
            _ => None,
        }
    }

    /// Whether this says the virtual server or the real server does not
    /// exist.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            Error::ServiceNotFound { .. } | Error::DestinationNotFound { .. }
        )
    }

    /// Whether this says the object already exists.
    pub fn is_exists(&self) -> bool {
        matches!(
            self,
            Error::ServiceExists { .. } | Error::DestinationExists { .. }
        )
    }

    /// The operation that failed, where the error names one (every variant
    /// with an `op` field; not [`Error::Invalid`], [`Error::Unavailable`] or
    /// [`Error::KernelLacks`], which come before any request).
    pub fn operation(&self) -> Option<&Operation> {
        match self {
            Error::ServiceExists { op, .. }
            | Error::ServiceNotFound { op, .. }
            | Error::DestinationExists { op, .. }
            | Error::DestinationNotFound { op, .. }
            | Error::UnknownScheduler { op, .. }
            | Error::OutOfRange { op, .. }
            | Error::InvalidArgument { op, .. }
            | Error::PermissionDenied { op }
            | Error::DaemonRunning { op }
            | Error::DaemonNotRunning { op }
            | Error::NoSuchDevice { op, .. }
            | Error::NotSupported { op, .. }
            | Error::Kernel { op, .. }
            | Error::Unsupported { op, .. }
            | Error::Lost { op }
            | Error::Unanswered { op }
            | Error::Inconsistent { op, .. }
            | Error::Io { op, .. }
            | Error::Decode { op, .. }
            | Error::Timeout { op, .. } => Some(op),
            Error::Unavailable { .. } | Error::KernelLacks { .. } | Error::Invalid(_) => None,
        }
    }

    pub(crate) fn io(op: Operation, source: io::Error) -> Self {
        Error::Io { op, source }
    }

    /// Maps a kernel error answer for an operation on `target`.
    pub(crate) fn from_kernel(op: Operation, target: &Target, e: NlError) -> Self {
        use libc_errno::*;
        let errno = e.errno();
        let message = e.message;
        match (errno, target) {
            (EEXIST, Target::NewService { key, .. }) => Error::ServiceExists { op, key: *key },
            (EEXIST, Target::Dest { key, addr }) => Error::DestinationExists {
                op,
                service: *key,
                server: *addr,
            },
            (EEXIST, Target::Daemon(_)) => Error::DaemonRunning { op },
            (
                ESRCH,
                Target::NewService { key, .. } | Target::Service(key) | Target::Dest { key, .. },
            ) => Error::ServiceNotFound { op, key: *key },
            (ESRCH, Target::Daemon(_)) => Error::DaemonNotRunning { op },
            (ENOENT, Target::Dest { key, addr }) => Error::DestinationNotFound {
                op,
                service: *key,
                server: *addr,
            },
            (
                ENOENT,
                Target::NewService {
                    scheduler, engine, ..
                },
            ) => Error::UnknownScheduler {
                op,
                scheduler: scheduler.clone(),
                engine: engine.clone(),
            },
            (ERANGE, _) => Error::OutOfRange { op, message },
            (EINVAL, _) => Error::InvalidArgument { op, message },
            (EPERM, _) => Error::PermissionDenied { op },
            (ENODEV, _) => Error::NoSuchDevice { op, message },
            (errno @ (EOPNOTSUPP | EAFNOSUPPORT), _) => Error::NotSupported { op, errno, message },
            (errno, _) => Error::Kernel { op, errno, message },
        }
    }
}

/// The errno values the kernel's IPVS code returns (Linux, all
/// architectures this crate builds for).
pub(crate) mod libc_errno {
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const ESRCH: i32 = 3;
    pub const EEXIST: i32 = 17;
    pub const ENODEV: i32 = 19;
    pub const EINVAL: i32 = 22;
    pub const ERANGE: i32 = 34;
    pub const EOPNOTSUPP: i32 = 95;
    pub const EAFNOSUPPORT: i32 = 97;
}

/// Result of handle operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
