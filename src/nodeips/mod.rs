//! Node IPs: the addresses of every interface that is administratively up,
//! whatever its name — the addresses NodePort virtual servers are created on.
//!
//! kube-proxy v1.9's IPVS proxier kept only interfaces named `eth*`; on hosts
//! whose interfaces are `ens3`, `enp0s3`, `eno1`, `bond0` or `em1` it found no
//! node IP, created no NodePort virtual server and logged nothing. Later
//! versions dumped every address once *per interface*, which took close to a
//! minute per sync on hosts with tens of thousands of addresses. This module
//! never looks at name prefixes, costs exactly one link dump and one address
//! dump whatever the number of interfaces, and turns an empty result into an
//! error that says why each interface was skipped.
//!
//! The work is split in two:
//!
//! * [`dump_records`] — the I/O: one `RTM_GETLINK` and one `RTM_GETADDR` dump
//!   over rtnetlink, in the calling thread's network namespace or a pinned
//!   one ([`Options::netns`], [`PinnedNetNs`]).
//! * [`filter`] — pure: decoded [`LinkRecord`]s and [`AddressRecord`]s plus
//!   [`Options`] → a [`Report`] holding the [`NodeIp`]s and the verdict for
//!   every interface and address.
//!
//! [`node_ips`], [`node_ip_addrs`] and [`explain`] combine the two.
//!
//! ```no_run
//! use ipvsctl::nodeips::{self, Family, NodeIpsError, Options};
//!
//! // kube-ipvs0, where service VIPs are bound, is excluded by default.
//! let opts = Options::new().family(Family::V4).exclude("docker0");
//! match nodeips::node_ips(&opts) {
//!     Ok(ips) => {
//!         for ip in &ips {
//!             println!("{ip}");
//!         }
//!     }
//!     // Nothing kept: say why, per interface.
//!     Err(NodeIpsError::NoAddresses(report)) => eprintln!("no node IPs:\n{report:#}"),
//!     Err(other) => return Err(other),
//! }
//! # Ok::<(), NodeIpsError>(())
//! ```
//!
//! [`PinnedNetNs`]: crate::netlink::netns::PinnedNetNs

pub(crate) mod dump;
mod error;
mod filter;
mod options;
mod records;
mod report;

use std::net::IpAddr;

pub use dump::dump_records;
pub use error::NodeIpsError;
pub use filter::filter;
pub use options::{DEFAULT_EXCLUDED, Family, Options, ParseFamilyError};
pub use records::{AddressFlags, AddressRecord, InterfaceFlags, LinkRecord, Records};
pub use report::{
    AddressReport, AddressVerdict, InterfaceReport, InterfaceVerdict, NodeIp, Report,
};

/// Resolves the node IPs under `opts`: sorted, without duplicates.
///
/// Costs one link dump and one address dump in the options' namespace
/// ([`Options::netns`]; the calling thread's unless set). When no
/// address is kept the result is [`NodeIpsError::NoAddresses`], whose
/// [`Report`] says why each interface and address was skipped — an empty list
/// is never returned.
///
/// ```no_run
/// use ipvsctl::nodeips::{node_ips, Options};
///
/// for ip in node_ips(&Options::new())? {
///     println!("{} on {}", ip.addr, ip.interface);
/// }
/// # Ok::<(), ipvsctl::nodeips::NodeIpsError>(())
/// ```
pub fn node_ips(opts: &Options) -> Result<Vec<NodeIp>, NodeIpsError> {
    explain(opts)?.into_node_ips()
}

/// Like [`node_ips`], the addresses alone: sorted, each once (an address held
/// by two interfaces appears once).
///
/// ```no_run
/// use ipvsctl::nodeips::{node_ip_addrs, Family, Options};
///
/// let v6 = node_ip_addrs(&Options::new().family(Family::V6))?;
/// println!("{v6:?}");
/// # Ok::<(), ipvsctl::nodeips::NodeIpsError>(())
/// ```
pub fn node_ip_addrs(opts: &Options) -> Result<Vec<IpAddr>, NodeIpsError> {
    let report = explain(opts)?;
    let addrs = report.addrs();
    if addrs.is_empty() {
        Err(NodeIpsError::NoAddresses(Box::new(report)))
    } else {
        Ok(addrs)
    }
}

/// Dumps and filters, returning the whole [`Report`] even when it holds no
/// node IP (so never [`NodeIpsError::NoAddresses`]). Useful for logging the
/// decision at every sync.
///
/// ```no_run
/// use ipvsctl::nodeips::{explain, Options};
///
/// let report = explain(&Options::new())?;
/// println!("{report:#}");
/// # Ok::<(), ipvsctl::nodeips::NodeIpsError>(())
/// ```
pub fn explain(opts: &Options) -> Result<Report, NodeIpsError> {
    let records = dump_records(opts)?;
    Ok(filter(&records.links, &records.addresses, opts))
}

#[cfg(test)]
mod tests;
