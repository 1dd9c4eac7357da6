//! What the resolver keeps: [`Options`] and [`Family`].

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnetwork::IpNetwork;

use crate::Timeout;
use crate::netlink::netns::{NetNs, PinnedNetNs};

/// The interface excluded by default: where kube-proxy (and
/// [`crate::vip::VipDevice`] by default) binds service addresses. Its
/// addresses are service VIPs, not node IPs.
pub const DEFAULT_EXCLUDED: &str = "kube-ipvs0";

/// Which address families to return.
///
/// ```
/// use ipvsctl::nodeips::Family;
/// assert_eq!("4".parse::<Family>(), Ok(Family::V4));
/// assert_eq!("ipv6".parse::<Family>(), Ok(Family::V6));
/// assert_eq!(Family::default(), Family::Both);
/// assert!(Family::Both.admits(&"::1".parse()?));
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4 only.
    V4,
    /// IPv6 only.
    V6,
    /// IPv4 and IPv6 (the default).
    #[default]
    Both,
}

impl Family {
    /// Whether `addr` is of this family.
    ///
    /// ```
    /// use ipvsctl::nodeips::Family;
    /// assert!(!Family::V4.admits(&"2001:db8::1".parse()?));
    /// # Ok::<(), std::net::AddrParseError>(())
    /// ```
    pub fn admits(self, addr: &IpAddr) -> bool {
        match self {
            Family::V4 => addr.is_ipv4(),
            Family::V6 => addr.is_ipv6(),
            Family::Both => true,
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
            Family::Both => "IPv4 and IPv6",
        })
    }
}

/// The error of parsing a [`Family`] from text.
///
/// ```
/// use ipvsctl::nodeips::Family;
/// assert!("5".parse::<Family>().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown address family {0:?} (expected 4, 6 or both)")]
pub struct ParseFamilyError(String);

impl FromStr for Family {
    type Err = ParseFamilyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "4" | "v4" | "ipv4" | "inet" => Ok(Family::V4),
            "6" | "v6" | "ipv6" | "inet6" => Ok(Family::V6),
            "both" | "all" | "any" | "dual" => Ok(Family::Both),
            _ => Err(ParseFamilyError(s.to_owned())),
        }
    }
}

/// What the node-IP resolver keeps. Built with chained calls; the defaults
/// are the safe choice for NodePort virtual servers.
///
/// | option | default | meaning |
/// | --- | --- | --- |
/// | [`family`](Options::family) | both | IPv4, IPv6 or both |
/// | [`exclude`](Options::exclude) | `kube-ipvs0` | skip interfaces with exactly this name (never a prefix) |
/// | [`include`](Options::include) | | undo an exclusion (the default one too) |
/// | [`cidr`](Options::cidr) | none = all | keep only addresses inside one of these networks |
/// | [`loopback`](Options::loopback) | off | keep the loopback interface and loopback addresses |
/// | [`link_local`](Options::link_local) | off | keep IPv6 link-local addresses (`fe80::/10`) |
/// | [`skip_deprecated`](Options::skip_deprecated) | off | drop addresses whose preferred lifetime expired |
/// | [`require_running`](Options::require_running) | off | also require `IFF_RUNNING` and `IFF_LOWER_UP` |
/// | [`netns`](Options::netns) | the calling thread's | the pinned network namespace to look in |
/// | [`timeout`](Options::timeout) | 10 s | the longest wait for the kernel |
///
/// Always: interfaces must be administratively up (`IFF_UP`), whatever their
/// name; tentative and DAD-failed addresses are dropped; unspecified and
/// multicast addresses are dropped.
///
/// ```
/// use ipvsctl::nodeips::{Family, Options};
///
/// let opts = Options::new()
///     .family(Family::V4)
///     .exclude("kube-ipvs0")
///     .cidr("10.0.0.0/8".parse()?)
///     .require_running(true);
/// # drop(opts);
/// # Ok::<(), ipnetwork::IpNetworkError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Options {
    pub(crate) family: Family,
    pub(crate) exclude: Vec<String>,
    pub(crate) cidrs: Vec<IpNetwork>,
    pub(crate) loopback: bool,
    pub(crate) link_local: bool,
    pub(crate) skip_deprecated: bool,
    pub(crate) require_running: bool,
    pub(crate) netns: NetNs,
    pub(crate) timeout: Timeout,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            family: Family::default(),
            exclude: vec![DEFAULT_EXCLUDED.to_owned()],
            cidrs: Vec::new(),
            loopback: false,
            link_local: false,
            skip_deprecated: false,
            require_running: false,
            netns: NetNs::default(),
            timeout: Timeout::ROUTE_DEFAULT,
        }
    }
}

impl Options {
    /// The defaults: both families, `kube-ipvs0` excluded (as kube-proxy
    /// does: its addresses are service VIPs), no CIDR filter, no loopback, no
    /// IPv6 link-local, deprecated addresses kept, UP suffices, the
    /// namespace of the thread that resolves (at each call), waits of at
    /// most 10 s.
    ///
    /// ```
    /// let opts = ipvsctl::nodeips::Options::new();
    /// # drop(opts);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Keep only addresses of `family`.
    ///
    /// ```
    /// use ipvsctl::nodeips::{Family, Options};
    /// let opts = Options::new().family(Family::V6);
    /// # drop(opts);
    /// ```
    pub fn family(mut self, family: Family) -> Self {
        self.family = family;
        self
    }

    /// Skip the interface named exactly `name` (for example `kube-ipvs0`,
    /// where kube-proxy binds service addresses). Repeatable. Names are
    /// compared whole and case-sensitively: `eth` excludes neither `eth0` nor
    /// `eth1`.
    ///
    /// ```
    /// use ipvsctl::nodeips::Options;
    /// let opts = Options::new().exclude("kube-ipvs0").exclude("docker0");
    /// # drop(opts);
    /// ```
    pub fn exclude(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        if !self.exclude.contains(&name) {
            self.exclude.push(name);
        }
        self
    }

    /// Examine the interface named exactly `name` again: undoes
    /// [`exclude`](Options::exclude), including the default exclusion of
    /// [`DEFAULT_EXCLUDED`] (`kube-ipvs0`).
    ///
    /// ```
    /// use ipvsctl::nodeips::Options;
    /// let opts = Options::new().include("kube-ipvs0");
    /// assert!(opts.excluded().is_empty());
    /// ```
    pub fn include(mut self, name: &str) -> Self {
        self.exclude.retain(|n| n != name);
        self
    }

    /// The interface names skipped.
    ///
    /// ```
    /// use ipvsctl::nodeips::Options;
    /// assert_eq!(Options::new().excluded(), ["kube-ipvs0"]);
    /// assert_eq!(Options::new().exclude("ipvs0").excluded(), ["kube-ipvs0", "ipvs0"]);
    /// ```
    pub fn excluded(&self) -> &[String] {
        &self.exclude
    }

    /// Keep only addresses inside `network` (the meaning of kube-proxy's
    /// `--nodeport-addresses`). Repeatable: an address is kept if it is inside
    /// any of them. With none given, every address passes.
    ///
    /// The list covers both families at once: once it is non-empty, an address
    /// of a family that has no network in it is dropped. Add `0.0.0.0/0` or
    /// `::/0` to keep a whole family.
    ///
    /// ```
    /// use ipvsctl::nodeips::Options;
    /// let opts = Options::new().cidr("10.0.0.0/8".parse()?).cidr("::/0".parse()?);
    /// # drop(opts);
    /// # Ok::<(), ipnetwork::IpNetworkError>(())
    /// ```
    pub fn cidr(mut self, network: IpNetwork) -> Self {
        self.cidrs.push(network);
        self
    }

    /// Keep (`true`) or skip (`false`, the default) loopback.
    ///
    /// "Loopback" means both the loopback interface (`IFF_LOOPBACK`, `lo`)
    /// with every address on it, and loopback addresses (`127.0.0.0/8`, `::1`)
    /// on any interface. Note that an address configured on `lo` for direct
    /// server return is therefore skipped by default.
    ///
    /// ```
    /// use ipvsctl::nodeips::Options;
    /// let opts = Options::new().loopback(true);
    /// # drop(opts);
    /// ```
    pub fn loopback(mut self, keep: bool) -> Self {
        self.loopback = keep;
        self
    }

    /// Keep (`true`) or skip (`false`, the default) IPv6 link-local addresses
    /// (`fe80::/10`). They are only reachable together with a zone (the
    /// interface index, [`NodeIp::index`](super::NodeIp::index)). IPv4
    /// link-local addresses (`169.254.0.0/16`) need no zone and are not
    /// affected; drop them with [`cidr`](Options::cidr) if needed.
    ///
    /// ```
    /// use ipvsctl::nodeips::Options;
    /// let opts = Options::new().link_local(true);
    /// # drop(opts);
    /// ```
    pub fn link_local(mut self, keep: bool) -> Self {
        self.link_local = keep;
        self
    }

    /// Skip addresses flagged deprecated (`IFA_F_DEPRECATED`: preferred
    /// lifetime expired, still valid). Off by default: a deprecated address
    /// still receives traffic.
    ///
    /// ```
    /// use ipvsctl::nodeips::Options;
    /// let opts = Options::new().skip_deprecated(true);
    /// # drop(opts);
    /// ```
    pub fn skip_deprecated(mut self, skip: bool) -> Self {
        self.skip_deprecated = skip;
        self
    }

    /// Also require the interface to be running: operationally up
    /// (`IFF_RUNNING`) and with carrier (`IFF_LOWER_UP`), not only
    /// administratively up. Off by default: an interface without carrier
    /// keeps its addresses and gets them back when the cable returns.
    ///
    /// ```
    /// use ipvsctl::nodeips::Options;
    /// let opts = Options::new().require_running(true);
    /// # drop(opts);
    /// ```
    pub fn require_running(mut self, require: bool) -> Self {
        self.require_running = require;
        self
    }

    /// Look in the pinned namespace `netns` ([`NetNs::pin`], or
    /// [`crate::Handle::netns`]) instead of the calling thread's: every
    /// resolution with these options looks there, even after the name it
    /// was pinned by leads to another namespace.
    ///
    /// ```no_run
    /// use ipvsctl::NetNs;
    /// use ipvsctl::nodeips::Options;
    /// let opts = Options::new().netns(NetNs::named("blue").pin()?);
    /// # drop(opts);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn netns(mut self, netns: PinnedNetNs) -> Self {
        self.netns = NetNs::Pinned(netns);
        self
    }

    /// Wait at most `timeout` for each answer of the kernel (default
    /// [`Timeout::ROUTE_DEFAULT`], 10 s). The kernel answers while it
    /// handles a request, so a wait this long means it is stuck:
    /// [`NodeIpsError::Timeout`] names the dump and the time waited.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ipvsctl::Timeout;
    /// use ipvsctl::nodeips::Options;
    /// let two_seconds = Timeout::new(Duration::from_secs(2))?;
    /// let opts = Options::new().timeout(two_seconds);
    /// assert_eq!(opts.recv_timeout(), two_seconds);
    /// # Ok::<(), ipvsctl::TimeoutError>(())
    /// ```
    ///
    /// [`NodeIpsError::Timeout`]: super::NodeIpsError::Timeout
    pub fn timeout(mut self, timeout: Timeout) -> Self {
        self.timeout = timeout;
        self
    }

    /// The longest wait for the kernel these options allow.
    ///
    /// ```
    /// use ipvsctl::Timeout;
    /// use ipvsctl::nodeips::Options;
    /// assert_eq!(Options::new().recv_timeout(), Timeout::ROUTE_DEFAULT);
    /// ```
    pub fn recv_timeout(&self) -> Timeout {
        self.timeout
    }

    /// The namespace these options look in: [`NetNs::Pinned`] once set with
    /// [`Options::netns`], else [`NetNs::Current`] (the calling thread's).
    ///
    /// ```
    /// use ipvsctl::nodeips::Options;
    /// assert!(Options::new().namespace().is_current());
    /// ```
    pub fn namespace(&self) -> &NetNs {
        &self.netns
    }

    /// The address family these options keep.
    ///
    /// ```
    /// use ipvsctl::nodeips::{Family, Options};
    /// assert_eq!(Options::new().address_family(), Family::Both);
    /// ```
    pub fn address_family(&self) -> Family {
        self.family
    }
}
