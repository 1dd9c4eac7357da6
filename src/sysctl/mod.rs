//! IPVS sysctls (`net.ipv4.vs.*`) and the ARP knobs of strict ARP
//! (`net.ipv4.conf.*.arp_ignore`/`arp_announce`) as typed values, read and
//! written per network namespace.
//!
//! Every [`Knob`] knows its file under `/proc/sys`, the type of its value
//! and the values the kernel accepts; [`Sysctls::write`] refuses anything
//! else with [`SysctlError::Invalid`] before the file is opened. The
//! `/proc/sys/net` tree is per network namespace and shows the namespace of
//! the thread that opens a file. [`Sysctls`] works in the calling thread's
//! namespace, or in a pinned one ([`Sysctls::netns`]): then it opens the
//! file from a thread inside that namespace (see [`run_in`]), unless the
//! calling thread is in it already.
//!
//! `/proc/sys/net/ipv4/vs` exists only while `ip_vs` is loaded
//! ([`SysctlError::IpvsNotLoaded`]); knobs newer than the running kernel are
//! [`SysctlError::NotAvailable`].
//!
//! ```no_run
//! use ipvsctl::NetNs;
//! use ipvsctl::sysctl::{ArpAnnounce, ArpIgnore, ConnReuseMode, Sysctls, knobs};
//!
//! let lb = Sysctls::new().netns(NetNs::named("lb").pin()?);
//! // What kube-proxy's IPVS mode sets.
//! lb.write(&knobs::CONNTRACK, &true)?;
//! lb.write(&knobs::EXPIRE_NODEST_CONN, &true)?;
//! lb.write(&knobs::EXPIRE_QUIESCENT_TEMPLATE, &true)?;
//! lb.write(&knobs::CONN_REUSE_MODE, &ConnReuseMode::empty())?;
//! // Strict ARP.
//! lb.write(&knobs::arp_ignore("all")?, &ArpIgnore::IncomingInterface)?;
//! lb.write(&knobs::arp_announce("all")?, &ArpAnnounce::BestLocalAddress)?;
//! assert!(lb.read(&knobs::CONNTRACK)?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod knobs;
mod value;

use std::borrow::Cow;
use std::fmt;
use std::io::{self, Write as _};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use crate::netlink::netns::{NetNs, PinnedNetNs, run_in};

pub use value::{ArpAnnounce, ArpIgnore, ConnReuseMode, KnobValue};

/// Where the kernel's sysctls are.
const PROC_SYS: &str = "/proc/sys";
/// The IPVS directory, present only while `ip_vs` is loaded.
const IPVS_DIR: &str = "net/ipv4/vs";

/// The values a knob accepts beyond what its type allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// Whatever the type allows.
    None,
    /// An integer from `min` to `max`, both included.
    Range {
        /// The smallest value accepted.
        min: i64,
        /// The largest value accepted.
        max: i64,
    },
    /// A power of two from 1 to `max`.
    PowerOfTwo {
        /// The largest value accepted.
        max: i64,
    },
}

/// One sysctl: its file under `/proc/sys`, the type `V` of its value and
/// the values it accepts. The knobs are in [`knobs`].
#[derive(Clone, Debug)]
pub struct Knob<V> {
    path: Cow<'static, str>,
    limit: Limit,
    value: PhantomData<fn() -> V>,
}

impl<V: KnobValue> Knob<V> {
    const fn fixed(path: &'static str, limit: Limit) -> Knob<V> {
        Knob {
            path: Cow::Borrowed(path),
            limit,
            value: PhantomData,
        }
    }

    fn owned(path: String, limit: Limit) -> Knob<V> {
        Knob {
            path: Cow::Owned(path),
            limit,
            value: PhantomData,
        }
    }

    /// The sysctl's dotted name, as `sysctl(8)` spells it.
    ///
    /// ```
    /// use ipvsctl::sysctl::knobs;
    /// assert_eq!(knobs::CONNTRACK.name(), "net.ipv4.vs.conntrack");
    /// ```
    pub fn name(&self) -> String {
        self.path.replace('/', ".")
    }

    /// The file, under `/proc/sys`.
    ///
    /// ```
    /// use ipvsctl::sysctl::knobs;
    /// assert_eq!(knobs::SYNC_RETRIES.path().to_str(), Some("/proc/sys/net/ipv4/vs/sync_retries"));
    /// ```
    pub fn path(&self) -> PathBuf {
        Path::new(PROC_SYS).join(&*self.path)
    }

    /// The values accepted beyond what the type allows.
    pub fn limit(&self) -> Limit {
        self.limit
    }

    /// Whether `value` may be written to this knob; the error names the knob
    /// and the reason.
    ///
    /// ```
    /// use ipvsctl::sysctl::{SysctlError, knobs};
    /// assert!(knobs::SYNC_RETRIES.check(&3).is_ok());
    /// assert!(matches!(knobs::SYNC_RETRIES.check(&4), Err(SysctlError::Invalid { .. })));
    /// ```
    pub fn check(&self, value: &V) -> Result<(), SysctlError> {
        let invalid = |reason: String| SysctlError::Invalid {
            knob: self.name(),
            value: value.render(),
            reason,
        };
        if let Some(reason) = value.refuse() {
            return Err(invalid(reason));
        }
        let Some(n) = value.as_integer() else {
            return Ok(());
        };
        match self.limit {
            Limit::None => Ok(()),
            Limit::Range { min, max } if n < min || n > max => {
                Err(invalid(format!("must be from {min} to {max}")))
            }
            Limit::PowerOfTwo { max } if n < 1 || n > max || n & (n - 1) != 0 => {
                Err(invalid(format!("must be a power of two from 1 to {max}")))
            }
            _ => Ok(()),
        }
    }

    fn in_ipvs_dir(&self) -> bool {
        self.path.starts_with(IPVS_DIR)
    }
}

/// Why a sysctl could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SysctlError {
    /// The value is not accepted by the knob; nothing was written.
    #[error("{knob}: cannot set {value}: {reason}")]
    Invalid {
        /// The sysctl's dotted name.
        knob: String,
        /// The value refused, as it would have been written.
        value: String,
        /// Why.
        reason: String,
    },
    /// A name given to build a knob (an interface, an IPVS knob) is not one.
    #[error("{what} {name:?} is not valid: {reason}")]
    InvalidName {
        /// What the name names.
        what: &'static str,
        /// The name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// The running kernel has no such knob (it is newer or older, or built
    /// without the option).
    #[error("{knob} is not available on kernel {kernel}")]
    NotAvailable {
        /// The sysctl's dotted name.
        knob: String,
        /// The running kernel's release (`uname -r`).
        kernel: String,
    },
    /// `/proc/sys/net/ipv4/vs` is absent: the `ip_vs` module is not loaded.
    #[error("{knob} is not available: /proc/sys/net/ipv4/vs is absent (ip_vs is not loaded)")]
    IpvsNotLoaded {
        /// The sysctl's dotted name.
        knob: String,
    },
    /// The interface of a per-interface knob does not exist in the namespace.
    #[error("{knob}: no interface {interface} in network namespace {netns}")]
    NoSuchInterface {
        /// The sysctl's dotted name.
        knob: String,
        /// The interface.
        interface: String,
        /// The namespace.
        netns: String,
    },
    /// The file holds text that is not a value of the knob's type.
    #[error("{knob}: unexpected value {text:?}")]
    Unexpected {
        /// The sysctl's dotted name.
        knob: String,
        /// What the file held.
        text: String,
    },
    /// Entering the namespace, or reading or writing the file failed (a
    /// value the kernel refuses itself comes back as `InvalidInput`).
    #[error("{knob}: cannot {action} in network namespace {netns}: {source}")]
    Io {
        /// The sysctl's dotted name.
        knob: String,
        /// `read` or `write`.
        action: &'static str,
        /// The namespace.
        netns: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// What an `ENOENT` on a knob's file means, found out inside the namespace.
enum Missing {
    Knob,
    IpvsDir,
    Interface(String),
}

/// The sysctls of one network namespace: [`Sysctls::read`] and
/// [`Sysctls::write`] there.
///
/// [`Sysctls::new`] works in the namespace of the thread that calls it, at
/// each call, at the cost of the file access alone; [`Sysctls::netns`] fixes
/// a pinned namespace (for example a handle's, [`crate::Handle::netns`]).
/// Cheap to clone.
///
/// ```no_run
/// use ipvsctl::sysctl::{Sysctls, knobs};
///
/// let here = Sysctls::new();
/// println!("conntrack: {}", here.read(&knobs::CONNTRACK)?);
/// # Ok::<(), ipvsctl::sysctl::SysctlError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Sysctls {
    netns: NetNs,
}

impl Sysctls {
    /// The sysctls of the calling thread's namespace, looked up at each
    /// call.
    pub fn new() -> Sysctls {
        Sysctls::default()
    }

    /// The sysctls of the pinned namespace `netns` ([`NetNs::pin`], or
    /// [`crate::Handle::netns`]) instead: every read and write goes there,
    /// even after the name it was pinned by leads to another namespace.
    ///
    /// ```
    /// use ipvsctl::NetNs;
    /// use ipvsctl::sysctl::Sysctls;
    ///
    /// let here = Sysctls::new().netns(NetNs::Current.pin()?);
    /// assert!(here.namespace().to_string().starts_with("current (net:["));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn netns(mut self, netns: PinnedNetNs) -> Sysctls {
        self.netns = NetNs::Pinned(netns);
        self
    }

    /// The namespace: [`NetNs::Pinned`] once set with [`Sysctls::netns`],
    /// else [`NetNs::Current`] (the calling thread's).
    pub fn namespace(&self) -> &NetNs {
        &self.netns
    }

    /// Reads `knob` as the namespace sees it.
    ///
    /// Errors: [`SysctlError::NotAvailable`], [`SysctlError::IpvsNotLoaded`],
    /// [`SysctlError::NoSuchInterface`], [`SysctlError::Unexpected`], or
    /// [`SysctlError::Io`] (including failing to enter the namespace).
    pub fn read<V: KnobValue>(&self, knob: &Knob<V>) -> Result<V, SysctlError> {
        let path = knob.path();
        let text = access(&self.netns, knob, "read", || std::fs::read_to_string(&path))?;
        let trimmed = text.trim();
        V::parse(trimmed).ok_or_else(|| SysctlError::Unexpected {
            knob: knob.name(),
            text: trimmed.to_owned(),
        })
    }

    /// Sets `knob` to `value` in the namespace, after [`Knob::check`].
    ///
    /// Errors: as [`Sysctls::read`], and [`SysctlError::Invalid`] before
    /// anything is opened.
    pub fn write<V: KnobValue>(&self, knob: &Knob<V>, value: &V) -> Result<(), SysctlError> {
        knob.check(value)?;
        let path = knob.path();
        let mut text = value.render();
        text.push('\n');
        access(&self.netns, knob, "write", || {
            // No O_CREAT: a missing knob must stay missing.
            let mut file = std::fs::OpenOptions::new().write(true).open(&path)?;
            file.write_all(text.as_bytes())
        })
    }
}

/// Runs `op` on `knob`'s file from inside `ns`, classifying a missing file.
fn access<V: KnobValue, T: Send>(
    ns: &NetNs,
    knob: &Knob<V>,
    action: &'static str,
    op: impl FnOnce() -> io::Result<T> + Send,
) -> Result<T, SysctlError> {
    let io_error = |source| SysctlError::Io {
        knob: knob.name(),
        action,
        netns: ns.to_string(),
        source,
    };
    let outcome = run_in(ns, || match op() {
        Ok(t) => Ok(Ok(t)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Err(missing(knob))),
        Err(e) => Err(e),
    })
    .map_err(io_error)?;
    outcome.map_err(|why| match why {
        Missing::IpvsDir => SysctlError::IpvsNotLoaded { knob: knob.name() },
        Missing::Interface(interface) => SysctlError::NoSuchInterface {
            knob: knob.name(),
            interface,
            netns: ns.to_string(),
        },
        Missing::Knob => SysctlError::NotAvailable {
            knob: knob.name(),
            kernel: crate::capabilities::running_release(),
        },
    })
}

/// Why `knob`'s file is absent; runs inside the namespace.
fn missing<V: KnobValue>(knob: &Knob<V>) -> Missing {
    let path = knob.path();
    let parent_exists = path.parent().is_some_and(Path::is_dir);
    if parent_exists {
        Missing::Knob
    } else if knob.in_ipvs_dir() {
        Missing::IpvsDir
    } else {
        let interface = path
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Missing::Interface(interface)
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::None => f.write_str("any value of the type"),
            Limit::Range { min, max } => write!(f, "{min} to {max}"),
            Limit::PowerOfTwo { max } => write!(f, "a power of two from 1 to {max}"),
        }
    }
}

#[cfg(test)]
mod tests;
