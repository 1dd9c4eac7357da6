//! The pure part of the resolver: decoded records + options → node IPs and
//! an explanation of every decision. No I/O.

use std::collections::HashMap;
use std::net::IpAddr;

use super::options::Options;
use super::records::{AddressFlags, AddressRecord, InterfaceFlags, LinkRecord};
use super::report::{
    AddressReport, AddressVerdict, InterfaceReport, InterfaceVerdict, NodeIp, Report,
};

/// Decides which of `addresses` are node IPs under `opts`. Pure: no I/O, so
/// it can be tested and benchmarked on synthetic records.
///
/// An interface counts when it is administratively up (`IFF_UP`), whatever
/// its name, and is neither excluded by exact name nor (unless asked) the
/// loopback interface; with [`Options::require_running`] it must also have
/// `IFF_RUNNING` and `IFF_LOWER_UP`. Each of its addresses (primary and
/// secondary alike) then counts unless it is of another family, unspecified
/// or multicast, a loopback address (unless asked), IPv6 link-local (unless
/// asked), DAD-failed, tentative, deprecated (if asked to skip those) or
/// outside every given CIDR. The address used is `IFA_LOCAL`, falling back to
/// `IFA_ADDRESS`. [`Options::netns`] is not used here.
///
/// ```
/// use ipvsctl::nodeips::{filter, AddressRecord, InterfaceFlags, LinkRecord, Options};
///
/// let up = InterfaceFlags::UP | InterfaceFlags::RUNNING | InterfaceFlags::LOWER_UP;
/// let links = [LinkRecord::new(2, "enp0s3", up), LinkRecord::new(3, "bond0", InterfaceFlags::empty())];
/// let addrs = [
///     AddressRecord::new(2, "192.0.2.10".parse()?, 24),
///     AddressRecord::new(3, "198.51.100.7".parse()?, 24),
/// ];
/// let report = filter(&links, &addrs, &Options::new());
/// assert_eq!(report.addrs(), vec!["192.0.2.10".parse::<std::net::IpAddr>()?]);
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
pub fn filter(links: &[LinkRecord], addresses: &[AddressRecord], opts: &Options) -> Report {
    let mut interfaces: Vec<InterfaceReport> = Vec::with_capacity(links.len());
    let mut by_index: HashMap<u32, usize> = HashMap::with_capacity(links.len());
    for link in links {
        let verdict = interface_verdict(link, opts);
        match by_index.get(&link.index) {
            // A repeated index (should not happen): the later record wins.
            Some(&slot) => {
                if let Some(r) = interfaces.get_mut(slot) {
                    r.name.clone_from(&link.name);
                    r.flags = link.flags;
                    r.verdict = verdict;
                }
            }
            None => {
                by_index.insert(link.index, interfaces.len());
                interfaces.push(InterfaceReport {
                    index: link.index,
                    name: link.name.clone(),
                    flags: link.flags,
                    verdict,
                    addresses: Vec::new(),
                });
            }
        }
    }

    let mut node_ips = Vec::new();
    let mut unknown_interface = Vec::new();
    for record in addresses {
        let Some(addr) = record.local_address() else {
            continue;
        };
        let Some(iface) = by_index
            .get(&record.index)
            .and_then(|&i| interfaces.get_mut(i))
        else {
            let verdict = address_verdict(addr, record.flags, opts);
            let verdict = if verdict == AddressVerdict::Used {
                AddressVerdict::InterfaceSkipped
            } else {
                verdict
            };
            unknown_interface.push((
                record.index,
                AddressReport {
                    addr,
                    prefix_len: record.prefix_len,
                    verdict,
                },
            ));
            continue;
        };
        let verdict = if iface.verdict == InterfaceVerdict::Used {
            address_verdict(addr, record.flags, opts)
        } else {
            AddressVerdict::InterfaceSkipped
        };
        if verdict == AddressVerdict::Used {
            node_ips.push(NodeIp {
                addr,
                interface: iface.name.clone(),
                index: iface.index,
                prefix_len: record.prefix_len,
            });
        }
        iface.addresses.push(AddressReport {
            addr,
            prefix_len: record.prefix_len,
            verdict,
        });
    }

    // Interfaces that passed the interface checks but contributed nothing.
    for iface in &mut interfaces {
        if iface.verdict == InterfaceVerdict::Used
            && !iface
                .addresses
                .iter()
                .any(|a| a.verdict == AddressVerdict::Used)
        {
            iface.verdict = if iface.addresses.is_empty() {
                InterfaceVerdict::NoAddresses
            } else {
                InterfaceVerdict::NoAddressKept
            };
        }
    }

    node_ips.sort();
    node_ips.dedup_by(|a, b| a.addr == b.addr && a.index == b.index);
    Report {
        interfaces,
        unknown_interface,
        node_ips,
    }
}

/// The interface-level decision; `Used` means "its addresses are examined".
fn interface_verdict(link: &LinkRecord, opts: &Options) -> InterfaceVerdict {
    if opts.exclude.contains(&link.name) {
        InterfaceVerdict::Excluded
    } else if !opts.loopback && link.flags.contains(InterfaceFlags::LOOPBACK) {
        InterfaceVerdict::Loopback
    } else if !link.flags.contains(InterfaceFlags::UP) {
        InterfaceVerdict::Down
    } else if opts.require_running
        && !link
            .flags
            .contains(InterfaceFlags::RUNNING | InterfaceFlags::LOWER_UP)
    {
        InterfaceVerdict::NotRunning
    } else {
        InterfaceVerdict::Used
    }
}

/// The address-level decision for an address on an examined interface.
fn address_verdict(addr: IpAddr, flags: AddressFlags, opts: &Options) -> AddressVerdict {
    if !opts.family.admits(&addr) {
        AddressVerdict::WrongFamily
    } else if addr.is_unspecified() || addr.is_multicast() {
        AddressVerdict::Unusable
    } else if !opts.loopback && addr.is_loopback() {
        AddressVerdict::Loopback
    } else if !opts.link_local && is_ipv6_link_local(&addr) {
        AddressVerdict::LinkLocal
    } else if flags.contains(AddressFlags::DADFAILED) {
        AddressVerdict::DadFailed
    } else if flags.contains(AddressFlags::TENTATIVE) {
        AddressVerdict::Tentative
    } else if opts.skip_deprecated && flags.contains(AddressFlags::DEPRECATED) {
        AddressVerdict::Deprecated
    } else if !opts.cidrs.is_empty() && !opts.cidrs.iter().any(|net| net.contains(addr)) {
        AddressVerdict::OutsideCidrs
    } else {
        AddressVerdict::Used
    }
}

/// `fe80::/10`.
fn is_ipv6_link_local(addr: &IpAddr) -> bool {
    match addr {
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
        IpAddr::V4(_) => false,
    }
}
