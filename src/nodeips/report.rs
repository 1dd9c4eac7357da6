//! What the resolver decided: the node IPs and a verdict for every interface
//! and address considered.

use std::fmt;
use std::net::IpAddr;

use super::error::NodeIpsError;
use super::records::InterfaceFlags;

/// One address of this node, with the interface that holds it.
///
/// Ordered by address, then interface index, then prefix length.
///
/// ```
/// use ipvsctl::nodeips::{filter, AddressRecord, InterfaceFlags, LinkRecord, Options};
/// let up = InterfaceFlags::UP | InterfaceFlags::RUNNING | InterfaceFlags::LOWER_UP;
/// let links = [LinkRecord::new(2, "ens3", up)];
/// let addrs = [AddressRecord::new(2, "10.0.0.1".parse()?, 24)];
/// let report = filter(&links, &addrs, &Options::new());
/// let ip = &report.node_ips()[0];
/// assert_eq!(ip.to_string(), "10.0.0.1/24 on ens3 (#2)");
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub struct NodeIp {
    /// The address (for IPv4, the local address, never a point-to-point
    /// peer).
    pub addr: IpAddr,
    /// Name of the interface that holds it.
    pub interface: String,
    /// Index of that interface (the zone of an IPv6 link-local address).
    pub index: u32,
    /// Prefix length of the address.
    pub prefix_len: u8,
}

impl fmt::Display for NodeIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} on {} (#{})",
            self.addr, self.prefix_len, self.interface, self.index
        )
    }
}

/// Why an interface was used or skipped.
///
/// ```
/// use ipvsctl::nodeips::InterfaceVerdict;
/// assert_eq!(InterfaceVerdict::Down.to_string(), "down");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InterfaceVerdict {
    /// At least one of its addresses is a node IP.
    Used,
    /// Its name is in [`Options::exclude`](super::Options::exclude).
    Excluded,
    /// It is the loopback interface and loopback was not asked for.
    Loopback,
    /// Not administratively up (no `IFF_UP`).
    Down,
    /// Up but not running or without carrier, and
    /// [`Options::require_running`](super::Options::require_running) was set.
    NotRunning,
    /// It has no address of the dumped families.
    NoAddresses,
    /// It has addresses but each was skipped (see its address verdicts).
    NoAddressKept,
}

impl fmt::Display for InterfaceVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InterfaceVerdict::Used => "used",
            InterfaceVerdict::Excluded => "excluded by name",
            InterfaceVerdict::Loopback => "loopback interface",
            InterfaceVerdict::Down => "down",
            InterfaceVerdict::NotRunning => "up but not running (no carrier)",
            InterfaceVerdict::NoAddresses => "no address",
            InterfaceVerdict::NoAddressKept => "no address kept",
        })
    }
}

/// Why an address was used or skipped.
///
/// ```
/// use ipvsctl::nodeips::AddressVerdict;
/// assert_eq!(AddressVerdict::OutsideCidrs.to_string(), "outside the CIDRs");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AddressVerdict {
    /// Returned as a node IP.
    Used,
    /// Its interface was skipped (see the interface verdict).
    InterfaceSkipped,
    /// Not of the requested family.
    WrongFamily,
    /// The unspecified address or a multicast address.
    Unusable,
    /// A loopback address (`127.0.0.0/8`, `::1`) and loopback was not asked for.
    Loopback,
    /// An IPv6 link-local address and link-local was not asked for.
    LinkLocal,
    /// IPv6 duplicate address detection failed (`IFA_F_DADFAILED`).
    DadFailed,
    /// IPv6 duplicate address detection not finished (`IFA_F_TENTATIVE`).
    Tentative,
    /// Preferred lifetime expired and [`Options::skip_deprecated`](super::Options::skip_deprecated) was set.
    Deprecated,
    /// Not inside any of [`Options::cidr`](super::Options::cidr).
    OutsideCidrs,
}

impl fmt::Display for AddressVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddressVerdict::Used => "used",
            AddressVerdict::InterfaceSkipped => "interface skipped",
            AddressVerdict::WrongFamily => "other family",
            AddressVerdict::Unusable => "unspecified or multicast",
            AddressVerdict::Loopback => "loopback address",
            AddressVerdict::LinkLocal => "IPv6 link-local",
            AddressVerdict::DadFailed => "duplicate address detection failed",
            AddressVerdict::Tentative => "tentative (duplicate address detection running)",
            AddressVerdict::Deprecated => "deprecated",
            AddressVerdict::OutsideCidrs => "outside the CIDRs",
        })
    }
}

/// One address and what the resolver decided about it.
///
/// ```
/// use ipvsctl::nodeips::{filter, AddressRecord, InterfaceFlags, LinkRecord, Options};
/// let up = InterfaceFlags::UP | InterfaceFlags::RUNNING | InterfaceFlags::LOWER_UP;
/// let links = [LinkRecord::new(2, "ens3", up)];
/// let addrs = [AddressRecord::new(2, "fe80::1".parse()?, 64)];
/// let report = filter(&links, &addrs, &Options::new());
/// let a = &report.interfaces()[0].addresses[0];
/// assert_eq!(a.to_string(), "fe80::1/64: IPv6 link-local");
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct AddressReport {
    /// The local address.
    pub addr: IpAddr,
    /// Its prefix length.
    pub prefix_len: u8,
    /// The decision.
    pub verdict: AddressVerdict,
}

impl fmt::Display for AddressReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}: {}", self.addr, self.prefix_len, self.verdict)
    }
}

/// One interface, what the resolver decided about it and about each of its
/// addresses.
///
/// ```
/// use ipvsctl::nodeips::{filter, InterfaceFlags, LinkRecord, Options};
/// let report = filter(&[LinkRecord::new(3, "eno1", InterfaceFlags::empty())], &[], &Options::new());
/// let r = &report.interfaces()[0];
/// assert_eq!(r.to_string(), "eno1 (#3): down");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InterfaceReport {
    /// Interface index.
    pub index: u32,
    /// Interface name.
    pub name: String,
    /// Interface flags as dumped.
    pub flags: InterfaceFlags,
    /// The decision for the interface as a whole.
    pub verdict: InterfaceVerdict,
    /// Every address of the interface, in dump order, with its decision.
    pub addresses: Vec<AddressReport>,
}

impl fmt::Display for InterfaceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (#{}): {}", self.name, self.index, self.verdict)?;
        if !self.addresses.is_empty() {
            f.write_str(" [")?;
            for (i, a) in self.addresses.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{a}")?;
            }
            f.write_str("]")?;
        }
        Ok(())
    }
}

/// The node IPs together with the reason for every interface and address
/// considered. Returned by [`filter`](super::filter) and [`explain`](super::explain).
///
/// `Display` gives one line with `; ` between interfaces; the alternate form
/// (`{:#}`) gives one interface per line.
///
/// ```
/// use ipvsctl::nodeips::{filter, AddressRecord, InterfaceFlags, LinkRecord, Options};
///
/// let links = [LinkRecord::new(2, "ens3", InterfaceFlags::UP)];
/// let addrs = [AddressRecord::new(2, "10.0.0.1".parse()?, 24)];
/// let report = filter(&links, &addrs, &Options::new());
/// assert_eq!(report.addrs(), vec!["10.0.0.1".parse::<std::net::IpAddr>()?]);
/// assert_eq!(report.to_string(), "ens3 (#2): used [10.0.0.1/24: used]");
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub(crate) interfaces: Vec<InterfaceReport>,
    pub(crate) unknown_interface: Vec<(u32, AddressReport)>,
    pub(crate) node_ips: Vec<NodeIp>,
}

impl Report {
    /// The node IPs: sorted, without duplicates (an address on two
    /// interfaces appears once per interface).
    ///
    /// ```
    /// use ipvsctl::nodeips::Report;
    /// assert!(Report::default().node_ips().is_empty());
    /// ```
    pub fn node_ips(&self) -> &[NodeIp] {
        &self.node_ips
    }

    /// The node IP addresses alone: sorted, each once.
    ///
    /// ```
    /// use ipvsctl::nodeips::Report;
    /// assert!(Report::default().addrs().is_empty());
    /// ```
    pub fn addrs(&self) -> Vec<IpAddr> {
        let mut addrs: Vec<IpAddr> = self.node_ips.iter().map(|n| n.addr).collect();
        addrs.dedup();
        addrs
    }

    /// Whether no node IP was found.
    ///
    /// ```
    /// use ipvsctl::nodeips::Report;
    /// assert!(Report::default().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.node_ips.is_empty()
    }

    /// Every interface considered, in dump order, with its verdict.
    ///
    /// ```
    /// use ipvsctl::nodeips::Report;
    /// assert!(Report::default().interfaces().is_empty());
    /// ```
    pub fn interfaces(&self) -> &[InterfaceReport] {
        &self.interfaces
    }

    /// Addresses whose interface index was not in the link dump (an
    /// interface created or deleted between the two dumps). They are not
    /// node IPs; the next resolution sees them consistently.
    ///
    /// ```
    /// use ipvsctl::nodeips::Report;
    /// assert!(Report::default().unknown_interface_addresses().is_empty());
    /// ```
    pub fn unknown_interface_addresses(&self) -> &[(u32, AddressReport)] {
        &self.unknown_interface
    }

    /// The node IPs, or [`NodeIpsError::NoAddresses`] (carrying this report)
    /// when there are none.
    ///
    /// ```
    /// use ipvsctl::nodeips::{NodeIpsError, Report};
    /// assert!(matches!(Report::default().into_node_ips(), Err(NodeIpsError::NoAddresses(_))));
    /// ```
    pub fn into_node_ips(self) -> Result<Vec<NodeIp>, NodeIpsError> {
        if self.node_ips.is_empty() {
            Err(NodeIpsError::NoAddresses(Box::new(self)))
        } else {
            Ok(self.node_ips)
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sep = if f.alternate() { "\n" } else { "; " };
        if self.interfaces.is_empty() && self.unknown_interface.is_empty() {
            return f.write_str("no interfaces");
        }
        let mut first = true;
        for i in &self.interfaces {
            if !first {
                f.write_str(sep)?;
            }
            first = false;
            write!(f, "{i}")?;
        }
        for (index, a) in &self.unknown_interface {
            if !first {
                f.write_str(sep)?;
            }
            first = false;
            write!(f, "unknown interface #{index}: {a}")?;
        }
        Ok(())
    }
}
