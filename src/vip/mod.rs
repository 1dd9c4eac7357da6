//! Virtual IPs on a dummy device, over rtnetlink: what kube-proxy's IPVS
//! mode does with `kube-ipvs0` so that the node accepts traffic for every
//! service address.
//!
//! A [`VipDevice`] names the device and the network namespace.
//! [`VipDevice::converge`] makes sure a dummy interface of that name exists
//! and is up (creating it if missing, refusing an interface of that name that
//! is not a dummy), then makes its addresses equal to the given set, each at
//! host prefix (`/32`, `/128`, as kube-proxy binds them): one link request
//! and one address dump to read, then only the addresses that differ are
//! added or removed, pipelined. No other interface is ever touched; the IPv6
//! link-local address the kernel gives the device is left alone. The
//! [`VipReport`] says what was added and removed, and which changes the
//! kernel refused.
//!
//! Every change is accounted for. The changes go through the crate's one
//! request pipeline, so when the kernel drops answers (a receive-buffer
//! overrun), the changes whose answers were lost are not taken as done nor
//! abandoned: the device's addresses are read again, and each such change
//! is added or removed if the device shows it so, otherwise failed with
//! `ENOBUFS` and a message saying what the re-read found.
//!
//! Every wait for the kernel is bounded ([`VipDevice::timeout`],
//! [`Timeout::ROUTE_DEFAULT`] by default). [`crate::nodeips`] skips `kube-ipvs0` ([`DEFAULT_DEVICE`]) by
//! default; exclude any other device name explicitly.
//!
//! ```no_run
//! use ipvsctl::vip::VipDevice;
//!
//! let device = VipDevice::new("kube-ipvs0")?;
//! let report = device.converge(["10.96.0.10".parse()?, "2001:db8::a".parse()?])?;
//! for failure in &report.failed {
//!     eprintln!("{failure}");
//! }
//! println!("+{:?} -{:?}", report.added, report.removed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A device works in the namespace of the thread that calls it unless given a
//! pinned namespace ([`VipDevice::netns`]), for example a [`Handle`](crate::Handle)'s (the
//! namespace it pinned when it opened, whatever its name leads to now):
//!
//! ```no_run
//! use ipvsctl::{Handle, HandleOptions, NetNs};
//! use ipvsctl::vip::VipDevice;
//!
//! let ipvs = Handle::open(&NetNs::named("lb"), &HandleOptions::new())?;
//! let device = VipDevice::new("kube-ipvs0")?.netns(ipvs.netns().clone());
//! device.converge(["10.96.0.10".parse()?])?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod ops;
mod plan;
mod report;

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::Timeout;
use crate::netlink::netns::{NetNs, PinnedNetNs};
use crate::nodeips;

pub use error::{AddressFailure, Change, VipError};
use ops::errno_error;
pub use report::VipReport;

/// kube-proxy's device name, which [`crate::nodeips`] skips by default.
pub const DEFAULT_DEVICE: &str = nodeips::DEFAULT_EXCLUDED;

/// The longest Linux interface name (`IFNAMSIZ` less the NUL).
const MAX_NAME_LEN: usize = 15;
/// `ENODEV`, `EEXIST`, `EADDRNOTAVAIL`, `ENOBUFS`: no such device, exists
/// already, no such address, answers dropped.
const ENODEV: i32 = 19;
const EEXIST: i32 = 17;
const EADDRNOTAVAIL: i32 = 99;
const ENOBUFS: i32 = 105;

const READ_DEVICE: &str = "read the device";
const CREATE_DEVICE: &str = "create the dummy device";
const BRING_UP: &str = "bring the device up";
const CHANGE_ADDRESSES: &str = "change the addresses";

/// A dummy interface that holds virtual IPs, in a network namespace.
///
/// Cheap to clone; holds no socket (each call opens one and closes it).
#[derive(Clone, Debug)]
pub struct VipDevice {
    name: String,
    netns: NetNs,
    timeout: Timeout,
}

impl VipDevice {
    /// The device `name` in the namespace of the thread that calls it, at
    /// each call (see [`VipDevice::netns`]). The name is checked as
    /// the kernel checks interface names: 1 to 15 bytes, not `.` or `..`, no
    /// `/`, `:` or whitespace ([`VipError::InvalidName`]).
    ///
    /// ```
    /// use ipvsctl::vip::{VipDevice, VipError};
    ///
    /// assert_eq!(VipDevice::new("kube-ipvs0")?.name(), "kube-ipvs0");
    /// assert!(matches!(VipDevice::new("a-name-too-long-for-linux"), Err(VipError::InvalidName { .. })));
    /// assert!(matches!(VipDevice::new("eth0:1"), Err(VipError::InvalidName { .. })));
    /// # Ok::<(), VipError>(())
    /// ```
    pub fn new(name: impl Into<String>) -> Result<Self, VipError> {
        let name = name.into();
        let reason = if name.is_empty() {
            Some("empty")
        } else if name.len() > MAX_NAME_LEN {
            Some("longer than 15 bytes")
        } else if name == "." || name == ".." {
            Some("not a name")
        } else if name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c == '\0')
        {
            Some("contains '/', ':', NUL or whitespace")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(VipError::InvalidName { name, reason });
        }
        Ok(VipDevice {
            name,
            netns: NetNs::Current,
            timeout: Timeout::ROUTE_DEFAULT,
        })
    }

    /// Works in the pinned namespace `netns` ([`NetNs::pin`], or
    /// [`crate::Handle::netns`] for the namespace of a handle's IPVS table)
    /// instead of the calling thread's, for as long as the device lives:
    /// deleting the name it was pinned by and creating another namespace of
    /// that name does not move it.
    ///
    /// ```no_run
    /// use ipvsctl::NetNs;
    /// use ipvsctl::vip::VipDevice;
    /// let lb = NetNs::named("lb").pin()?;
    /// let device = VipDevice::new("kube-ipvs0")?.netns(lb);
    /// assert!(device.namespace().to_string().starts_with("/run/netns/lb (net:["));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn netns(mut self, netns: PinnedNetNs) -> Self {
        self.netns = NetNs::Pinned(netns);
        self
    }

    /// Waits at most `timeout` for each answer of the kernel (default
    /// [`Timeout::ROUTE_DEFAULT`], 10 s); a silent kernel is
    /// [`VipError::Timeout`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use ipvsctl::Timeout;
    /// use ipvsctl::vip::VipDevice;
    /// let device = VipDevice::new("kube-ipvs0")?.timeout(Timeout::new(Duration::from_secs(2))?);
    /// # drop(device);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn timeout(mut self, timeout: Timeout) -> Self {
        self.timeout = timeout;
        self
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace the device is in: [`NetNs::Pinned`] once set with
    /// [`VipDevice::netns`], else [`NetNs::Current`] (the calling thread's).
    pub fn namespace(&self) -> &NetNs {
        &self.netns
    }

    /// Makes the device exist as a dummy, up, holding exactly `vips` (each
    /// at host prefix) besides the kernel's IPV6 link-local address.
    ///
    /// Every address is checked first ([`VipError::InvalidAddress`]:
    /// unspecified, multicast, loopback, broadcast, IPv6 link-local). An
    /// interface of that name that is not a dummy is refused and left alone
    /// ([`VipError::NotDummy`]). Address changes the kernel refuses are in
    /// [`VipReport::failed`]; the other changes still go through. A change
    /// whose answer the kernel dropped is settled by reading the device
    /// again (see the [module documentation](self)).
    pub fn converge<I>(&self, vips: I) -> Result<VipReport, VipError>
    where
        I: IntoIterator<Item = IpAddr>,
    {
        let mut wanted = BTreeSet::new();
        for addr in vips {
            plan::check_vip(addr)?;
            wanted.insert(addr);
        }
        let mut rtnl = self.open()?;
        let (link, created, brought_up) = self.ensure(&mut rtnl)?;
        let current = self.read(&mut rtnl, link.index)?;
        let changes = plan::changes(&current, &wanted);
        let mut report = VipReport {
            device: self.name.clone(),
            index: link.index,
            created,
            brought_up,
            added: Vec::new(),
            removed: Vec::new(),
            unchanged: changes.unchanged,
            failed: Vec::new(),
        };
        let ops: Vec<(Change, IpNetwork)> = changes
            .remove
            .iter()
            .map(|n| (Change::Remove, *n))
            .chain(changes.add.iter().map(|n| (Change::Add, *n)))
            .collect();
        self.apply(&mut rtnl, link.index, &ops, &mut report)?;
        Ok(report)
    }

    /// The addresses the device holds now (its IPv6 link-local address
    /// left out), without creating or changing anything. A missing device
    /// is [`VipError::Kernel`] with `ENODEV`; one that is not a dummy is
    /// [`VipError::NotDummy`].
    pub fn addresses(&self) -> Result<Vec<IpNetwork>, VipError> {
        let mut rtnl = self.open()?;
        let link = match self.get_link(&mut rtnl)? {
            Some(link) => self.check_dummy(link)?,
            None => {
                return Err(self.kernel(READ_DEVICE, &errno_error(ENODEV)));
            }
        };
        let mut current = self.read(&mut rtnl, link.index)?;
        current.retain(|n| !plan::is_ipv6_link_local(&n.ip()));
        Ok(current)
    }
}
