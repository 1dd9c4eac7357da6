//! Errors and failures of VIP binding.

use std::fmt;
use std::io;
use std::net::IpAddr;
use std::time::Duration;

use ipnetwork::IpNetwork;

use crate::nodeips::NodeIpsError;

/// Why a device could not be made to hold its VIPs. Every variant names the
/// device (or the bad value); nothing has been sent for the `Invalid*` ones.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VipError {
    /// The device name is not a valid Linux interface name.
    #[error("invalid VIP device name {name:?}: {reason}")]
    InvalidName {
        /// The name given.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// An address cannot serve as a virtual IP.
    #[error("invalid VIP {addr}: {reason}")]
    InvalidAddress {
        /// The address given.
        addr: IpAddr,
        /// Why it is refused.
        reason: &'static str,
    },
    /// An interface of that name exists and is not a dummy: it is left
    /// alone.
    #[error(
        "interface {device} exists and is {}, not a dummy: left alone",
        kind.as_deref().map_or_else(|| "of no reported kind".to_owned(), |k| format!("a {k}"))
    )]
    NotDummy {
        /// The device name.
        device: String,
        /// Its kind (`IFLA_INFO_KIND`, such as `veth` or `bridge`), if the
        /// kernel reported one (physical interfaces have none).
        kind: Option<String>,
    },
    /// The rtnetlink socket could not be opened (in the namespace).
    #[error("VIP device {device}: cannot open an rtnetlink socket: {source}")]
    Socket {
        /// The device name.
        device: String,
        /// The cause (naming the namespace when that was the problem).
        #[source]
        source: io::Error,
    },
    /// The kernel refused a request about the device.
    #[error(
        "VIP device {device}: the kernel refused to {request}: {source}{}",
        detail(message)
    )]
    Kernel {
        /// The device name.
        device: String,
        /// What was asked (`read the device`, `create the dummy device`,
        /// `bring the device up`).
        request: &'static str,
        /// The errno as an I/O error.
        #[source]
        source: io::Error,
        /// The kernel's extended-ACK message, if any.
        message: Option<String>,
    },
    /// The kernel sent nothing for this long while an answer was expected.
    #[error("VIP device {device}: no answer from the kernel to {request} in {waited:?}")]
    Timeout {
        /// The device name.
        device: String,
        /// What was waited for.
        request: &'static str,
        /// How long the receive waited.
        waited: Duration,
    },
    /// Sending or receiving failed, or an answer could not be decoded.
    #[error("VIP device {device}: {request}: {source}")]
    Io {
        /// The device name.
        device: String,
        /// What was being done.
        request: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The address dump failed.
    #[error("VIP device {device}: cannot read its addresses: {source}")]
    Read {
        /// The device name.
        device: String,
        /// The dump's error.
        #[source]
        source: NodeIpsError,
    },
}

fn detail(message: &Option<String>) -> String {
    message
        .as_deref()
        .map(|m| format!(" ({m})"))
        .unwrap_or_default()
}

/// Which change of an address failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Adding it to the device.
    Add,
    /// Removing it from the device.
    Remove,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Change::Add => "add",
            Change::Remove => "remove",
        })
    }
}

/// One address change the kernel refused (the others of the same call
/// still went through).
///
/// ```
/// use ipvsctl::vip::{AddressFailure, Change};
///
/// let failure = AddressFailure {
///     device: "kube-ipvs0".into(),
///     change: Change::Add,
///     addr: "10.96.0.10/32".parse()?,
///     error: std::io::Error::from_raw_os_error(19),
///     message: None,
/// };
/// assert!(failure.to_string().starts_with("cannot add 10.96.0.10/32 on kube-ipvs0: "));
/// # Ok::<(), ipnetwork::IpNetworkError>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[error("cannot {change} {addr} on {device}: {error}{}", detail(message))]
pub struct AddressFailure {
    /// The device name.
    pub device: String,
    /// Adding or removing.
    pub change: Change,
    /// The address with its prefix.
    pub addr: IpNetwork,
    /// The errno as an I/O error.
    #[source]
    pub error: io::Error,
    /// The kernel's extended-ACK message, if any.
    pub message: Option<String>,
}
