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
//! Every wait for the kernel is bounded ([`VipDevice::timeout`], 10 s by
//! default). [`crate::nodeips`] skips `kube-ipvs0` ([`DEFAULT_DEVICE`]) by
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
//! In the namespace of a [`Handle`](crate::Handle) (the namespace it pinned
//! when it opened, whatever its name leads to now):
//!
//! ```no_run
//! use ipvsctl::{Handle, NetNs};
//! use ipvsctl::vip::VipDevice;
//!
//! let ipvs = Handle::open(&NetNs::named("lb"))?;
//! let device = VipDevice::new("kube-ipvs0")?.netns_of(&ipvs);
//! device.converge(["10.96.0.10".parse()?])?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod plan;
mod report;
mod wire;

use std::collections::BTreeSet;
use std::io;
use std::net::IpAddr;
use std::time::Duration;

use ipnetwork::IpNetwork;

use crate::Handle;
use crate::codec::frame::{self, FrameBody, NlError};
use crate::netlink::netns::NetNs;
use crate::netlink::route::{DEFAULT_TIMEOUT, Received, RecvError, RouteSocket, check_timeout};
use crate::nodeips::{self, Family};

pub use error::{AddressFailure, Change, VipError};
pub use report::VipReport;

/// kube-proxy's device name, which [`crate::nodeips`] skips by default.
pub const DEFAULT_DEVICE: &str = nodeips::DEFAULT_EXCLUDED;

/// The longest Linux interface name (`IFNAMSIZ` less the NUL).
const MAX_NAME_LEN: usize = 15;
/// How many address changes go in one datagram: their ACKs fit a receive
/// buffer of the default size many times over.
const BATCH: usize = 256;
/// `ENODEV`, `EEXIST`, `EADDRNOTAVAIL`: no such device, exists already, no
/// such address.
const ENODEV: i32 = 19;
const EEXIST: i32 = 17;
const EADDRNOTAVAIL: i32 = 99;

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
    timeout: Duration,
}

impl VipDevice {
    /// The device `name` in the caller's namespace. The name is checked as
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
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// Works in `netns` instead of the caller's namespace. A name or path is
    /// looked up at every call; pin it ([`NetNs::pin`]) to keep working in
    /// the namespace it leads to now.
    ///
    /// ```
    /// use ipvsctl::NetNs;
    /// use ipvsctl::vip::VipDevice;
    /// let device = VipDevice::new("kube-ipvs0")?.netns(NetNs::named("lb"));
    /// assert_eq!(device.namespace().to_string(), "/run/netns/lb");
    /// # Ok::<(), ipvsctl::vip::VipError>(())
    /// ```
    pub fn netns(mut self, netns: NetNs) -> Self {
        self.netns = netns;
        self
    }

    /// Works in the namespace `handle` pinned when it opened
    /// ([`Handle::netns`]): the same namespace as its IPVS table.
    pub fn netns_of(self, handle: &Handle) -> Self {
        self.netns(handle.netns().clone())
    }

    /// Waits at most `timeout` for each answer of the kernel (default 10 s;
    /// 1 ms to 1 h, else [`VipError::InvalidTimeout`] before anything is
    /// sent); a silent kernel is [`VipError::Timeout`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use ipvsctl::vip::VipDevice;
    /// let device = VipDevice::new("kube-ipvs0")?.timeout(Duration::from_secs(2));
    /// # drop(device);
    /// # Ok::<(), ipvsctl::vip::VipError>(())
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace the device is in.
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
    /// [`VipReport::failed`]; the other changes still go through.
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
        for batch in ops.chunks(BATCH) {
            self.apply(&mut rtnl, link.index, batch, &mut report)?;
        }
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

    fn open(&self) -> Result<RouteSocket, VipError> {
        if let Some(reason) = check_timeout(self.timeout) {
            return Err(VipError::InvalidTimeout { reason });
        }
        RouteSocket::open(&self.netns, self.timeout).map_err(|source| VipError::Socket {
            device: self.name.clone(),
            source,
        })
    }

    /// The device as a dummy that is up, created if missing; whether it was
    /// created, whether it was brought up.
    fn ensure(&self, rtnl: &mut RouteSocket) -> Result<(wire::Link, bool, bool), VipError> {
        if let Some(link) = self.get_link(rtnl)? {
            let link = self.check_dummy(link)?;
            if link.flags & wire::IFF_UP != 0 {
                return Ok((link, false, false));
            }
            let mut bytes = Vec::new();
            let seq = rtnl.next_seq();
            wire::set_up(&mut bytes, seq, link.index);
            if let Some(err) = self.request(rtnl, &bytes, seq, BRING_UP, &mut |_| Ok(()))? {
                return Err(self.kernel(BRING_UP, &err));
            }
            return Ok((link, false, true));
        }
        let mut bytes = Vec::new();
        let seq = rtnl.next_seq();
        wire::create_dummy(&mut bytes, seq, &self.name);
        let created = match self.request(rtnl, &bytes, seq, CREATE_DEVICE, &mut |_| Ok(()))? {
            None => true,
            // Created by someone else since the lookup: check it as found.
            Some(err) if err.errno() == EEXIST => false,
            Some(err) => return Err(self.kernel(CREATE_DEVICE, &err)),
        };
        let link = self
            .get_link(rtnl)?
            .ok_or_else(|| self.kernel(READ_DEVICE, &errno_error(ENODEV)))?;
        let link = self.check_dummy(link)?;
        if !created && link.flags & wire::IFF_UP == 0 {
            // Someone else's fresh dummy of that name, still down.
            let mut bytes = Vec::new();
            let seq = rtnl.next_seq();
            wire::set_up(&mut bytes, seq, link.index);
            if let Some(err) = self.request(rtnl, &bytes, seq, BRING_UP, &mut |_| Ok(()))? {
                return Err(self.kernel(BRING_UP, &err));
            }
            return Ok((link, false, true));
        }
        Ok((link, created, false))
    }

    fn check_dummy(&self, link: wire::Link) -> Result<wire::Link, VipError> {
        if link.kind.as_deref() == Some("dummy") {
            Ok(link)
        } else {
            Err(VipError::NotDummy {
                device: self.name.clone(),
                kind: link.kind,
            })
        }
    }

    /// The device's link message, `None` when there is no such device.
    fn get_link(&self, rtnl: &mut RouteSocket) -> Result<Option<wire::Link>, VipError> {
        let mut bytes = Vec::new();
        let seq = rtnl.next_seq();
        wire::get_link(&mut bytes, seq, &self.name);
        let mut found = None;
        let answer = self.request(rtnl, &bytes, seq, READ_DEVICE, &mut |(kind, payload)| {
            if kind == wire::RTM_NEWLINK {
                found = Some(wire::decode_link(payload).map_err(|detail| VipError::Io {
                    device: self.name.clone(),
                    request: READ_DEVICE,
                    source: io::Error::other(format!("malformed link message: {detail}")),
                })?);
            }
            Ok(())
        })?;
        match answer {
            None => Ok(found.filter(|link| link.name == self.name)),
            Some(err) if err.errno() == ENODEV => Ok(None),
            Some(err) => Err(self.kernel(READ_DEVICE, &err)),
        }
    }

    /// The addresses on interface `index`, from one address dump.
    fn read(&self, rtnl: &mut RouteSocket, index: u32) -> Result<Vec<IpNetwork>, VipError> {
        let records =
            nodeips::dump::dump_addresses(rtnl, Family::Both).map_err(|source| VipError::Read {
                device: self.name.clone(),
                source,
            })?;
        Ok(records
            .iter()
            .filter(|r| r.index == index)
            .filter_map(|r| IpNetwork::new(r.local_address()?, r.prefix_len).ok())
            .collect())
    }

    /// Sends one request and waits for its answer: `None` for an ACK, the
    /// error otherwise. Data messages go to `on_data`.
    fn request(
        &self,
        rtnl: &mut RouteSocket,
        bytes: &[u8],
        seq: u32,
        what: &'static str,
        on_data: &mut dyn FnMut((u16, &[u8])) -> Result<(), VipError>,
    ) -> Result<Option<NlError>, VipError> {
        let mut answers = self.exchange(rtnl, bytes, seq, 1, what, on_data)?;
        Ok(answers.pop().flatten())
    }

    /// Sends `count` requests (sequence numbers `first..first + count`) in
    /// one datagram and waits for the answer to each.
    fn exchange(
        &self,
        rtnl: &mut RouteSocket,
        bytes: &[u8],
        first: u32,
        count: usize,
        what: &'static str,
        on_data: &mut dyn FnMut((u16, &[u8])) -> Result<(), VipError>,
    ) -> Result<Vec<Option<NlError>>, VipError> {
        rtnl.send(bytes).map_err(|source| self.io(what, source))?;
        let mut answers: Vec<Option<Option<NlError>>> = vec![None; count];
        let mut pending = count;
        while pending > 0 {
            let datagram = match rtnl.recv() {
                Ok(Received::Whole(d)) => d,
                Ok(Received::Truncated(len)) => {
                    return Err(self.io(
                        what,
                        io::Error::other(format!("a reply of {len} bytes did not fit")),
                    ));
                }
                Err(RecvError::TimedOut(waited)) => {
                    return Err(VipError::Timeout {
                        device: self.name.clone(),
                        request: what,
                        waited,
                    });
                }
                Err(RecvError::Io(source)) => return Err(self.io(what, source)),
            };
            for f in frame::frames(datagram) {
                let f = f.map_err(|e| self.io(what, io::Error::other(e.to_string())))?;
                let slot = f.header.seq.wrapping_sub(first) as usize;
                let Some(answer) = answers.get_mut(slot) else {
                    continue;
                };
                match f.body {
                    FrameBody::Error(err) => {
                        if answer.is_none() {
                            pending -= 1;
                        }
                        *answer = Some((!err.is_ack()).then_some(err));
                    }
                    FrameBody::Data(payload) => on_data((f.header.kind, payload))?,
                    _ => {}
                }
            }
        }
        Ok(answers.into_iter().map(Option::flatten).collect())
    }

    /// One datagram of address changes; the report gets each outcome.
    fn apply(
        &self,
        rtnl: &mut RouteSocket,
        index: u32,
        batch: &[(Change, IpNetwork)],
        report: &mut VipReport,
    ) -> Result<(), VipError> {
        let mut bytes = Vec::new();
        let first = rtnl.seq().wrapping_add(1);
        for (change, net) in batch {
            let seq = rtnl.next_seq();
            match change {
                Change::Add => wire::add_address(&mut bytes, seq, index, *net),
                Change::Remove => wire::remove_address(&mut bytes, seq, index, *net),
            }
        }
        let answers = self.exchange(
            rtnl,
            &bytes,
            first,
            batch.len(),
            CHANGE_ADDRESSES,
            &mut |_| Ok(()),
        )?;
        for ((change, net), answer) in batch.iter().zip(answers) {
            match (change, answer) {
                (Change::Add, None) => report.added.push(*net),
                (Change::Remove, None) => report.removed.push(*net),
                // Gone already: what was wanted.
                (Change::Remove, Some(err)) if err.errno() == EADDRNOTAVAIL => {
                    report.removed.push(*net)
                }
                (change, Some(err)) => report.failed.push(AddressFailure {
                    device: self.name.clone(),
                    change: *change,
                    addr: *net,
                    error: io::Error::from_raw_os_error(err.errno()),
                    message: err.message,
                }),
            }
        }
        Ok(())
    }

    fn kernel(&self, request: &'static str, err: &NlError) -> VipError {
        VipError::Kernel {
            device: self.name.clone(),
            request,
            source: io::Error::from_raw_os_error(err.errno()),
            message: err.message.clone(),
        }
    }

    fn io(&self, request: &'static str, source: io::Error) -> VipError {
        VipError::Io {
            device: self.name.clone(),
            request,
            source,
        }
    }
}

/// An error answer with `errno`, for the cases decided here.
fn errno_error(errno: i32) -> NlError {
    NlError {
        code: -errno,
        ..NlError::default()
    }
}

/// The guide's examples (`docs/guide.md`), compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide.md")]
pub struct GuideDoctests;
