//! Decoded rtnetlink records: what the resolver keeps of each link and
//! address message. Plain data, so the filter can be tested and benchmarked
//! without a kernel.

use std::net::IpAddr;

use bitflags::bitflags;

bitflags! {
    /// Interface flags (`IFF_*` from `<linux/if.h>`) as reported in
    /// `ifinfomsg.ifi_flags`. Only the flags the resolver looks at are named;
    /// others are kept as unnamed bits.
    ///
    /// ```
    /// use ipvsctl::nodeips::InterfaceFlags;
    /// let f = InterfaceFlags::UP | InterfaceFlags::LOWER_UP;
    /// assert!(f.contains(InterfaceFlags::UP));
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct InterfaceFlags: u32 {
        /// `IFF_UP`: administratively up (`ip link set X up`).
        const UP = 1 << 0;
        /// `IFF_BROADCAST`.
        const BROADCAST = 1 << 1;
        /// `IFF_LOOPBACK`: the loopback interface (`lo`).
        const LOOPBACK = 1 << 3;
        /// `IFF_POINTOPOINT`.
        const POINTOPOINT = 1 << 4;
        /// `IFF_RUNNING`: operationally up (RFC 2863 state UP or UNKNOWN).
        const RUNNING = 1 << 6;
        /// `IFF_NOARP`.
        const NOARP = 1 << 7;
        /// `IFF_LOWER_UP`: the link layer has carrier.
        const LOWER_UP = 1 << 16;
        /// `IFF_DORMANT`: carrier but waiting for an external event (802.1X).
        const DORMANT = 1 << 17;
        // Keep every other bit the kernel sends.
        const _ = !0;
    }
}

bitflags! {
    /// Address flags (`IFA_F_*` from `<linux/if_addr.h>`).
    ///
    /// The kernel reports the low 8 bits in `ifaddrmsg.ifa_flags` and all 32
    /// in the `IFA_FLAGS` attribute; the decoder merges both.
    ///
    /// ```
    /// use ipvsctl::nodeips::AddressFlags;
    /// assert!(AddressFlags::TENTATIVE.bits() == 0x40);
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct AddressFlags: u32 {
        /// `IFA_F_SECONDARY` (IPv4: not the primary address of its prefix;
        /// IPv6: a temporary address).
        const SECONDARY = 0x01;
        /// `IFA_F_NODAD`: duplicate address detection disabled.
        const NODAD = 0x02;
        /// `IFA_F_OPTIMISTIC`: usable while DAD runs (RFC 4429).
        const OPTIMISTIC = 0x04;
        /// `IFA_F_DADFAILED`: duplicate address detection failed.
        const DADFAILED = 0x08;
        /// `IFA_F_HOMEADDRESS` (Mobile IPv6).
        const HOMEADDRESS = 0x10;
        /// `IFA_F_DEPRECATED`: preferred lifetime expired.
        const DEPRECATED = 0x20;
        /// `IFA_F_TENTATIVE`: duplicate address detection not finished.
        const TENTATIVE = 0x40;
        /// `IFA_F_PERMANENT`: configured, not autoconfigured.
        const PERMANENT = 0x80;
        /// `IFA_F_MANAGETEMPADDR`.
        const MANAGETEMPADDR = 0x100;
        /// `IFA_F_NOPREFIXROUTE`.
        const NOPREFIXROUTE = 0x200;
        /// `IFA_F_MCAUTOJOIN`.
        const MCAUTOJOIN = 0x400;
        /// `IFA_F_STABLE_PRIVACY`.
        const STABLE_PRIVACY = 0x800;
        // Keep every other bit the kernel sends.
        const _ = !0;
    }
}

/// One network interface from the link dump (`RTM_NEWLINK`).
///
/// ```
/// use ipvsctl::nodeips::{InterfaceFlags, LinkRecord};
/// let ens3 = LinkRecord::new(2, "ens3", InterfaceFlags::UP);
/// assert_eq!(ens3.name, "ens3");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct LinkRecord {
    /// Interface index (`ifi_index`).
    pub index: u32,
    /// Interface name (`IFLA_IFNAME`); empty if the kernel sent none.
    pub name: String,
    /// Interface flags (`ifi_flags`).
    pub flags: InterfaceFlags,
}

impl LinkRecord {
    /// A link record.
    ///
    /// ```
    /// use ipvsctl::nodeips::{InterfaceFlags, LinkRecord};
    /// let lo = LinkRecord::new(1, "lo", InterfaceFlags::UP | InterfaceFlags::LOOPBACK);
    /// assert_eq!(lo.index, 1);
    /// ```
    pub fn new(index: u32, name: impl Into<String>, flags: InterfaceFlags) -> Self {
        LinkRecord {
            index,
            name: name.into(),
            flags,
        }
    }
}

/// One address from the address dump (`RTM_NEWADDR`).
///
/// On point-to-point links `IFA_LOCAL` is this host's address and
/// `IFA_ADDRESS` the peer's; elsewhere both are the same, or (IPv6) only
/// `IFA_ADDRESS` is sent. [`AddressRecord::local_address`] picks the right one.
///
/// ```
/// use ipvsctl::nodeips::AddressRecord;
/// let a = AddressRecord::new(2, "10.0.0.1".parse()?, 32).with_peer("10.0.0.2".parse()?);
/// assert_eq!(a.local_address(), Some("10.0.0.1".parse()?));
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct AddressRecord {
    /// Index of the interface that holds the address (`ifa_index`).
    pub index: u32,
    /// Prefix length (`ifa_prefixlen`).
    pub prefix_len: u8,
    /// `IFA_LOCAL`, if sent.
    pub local: Option<IpAddr>,
    /// `IFA_ADDRESS`, if sent.
    pub address: Option<IpAddr>,
    /// Header flags merged with the `IFA_FLAGS` attribute.
    pub flags: AddressFlags,
}

impl AddressRecord {
    /// An address `addr/prefix_len` on interface `index`, no flags (as the
    /// kernel reports it: `IFA_LOCAL` and `IFA_ADDRESS` both `addr`).
    ///
    /// ```
    /// use ipvsctl::nodeips::AddressRecord;
    /// let a = AddressRecord::new(3, "2001:db8::1".parse()?, 64);
    /// assert_eq!(a.local_address(), Some("2001:db8::1".parse()?));
    /// # Ok::<(), std::net::AddrParseError>(())
    /// ```
    pub fn new(index: u32, addr: IpAddr, prefix_len: u8) -> Self {
        AddressRecord {
            index,
            prefix_len,
            local: Some(addr),
            address: Some(addr),
            flags: AddressFlags::empty(),
        }
    }

    /// The same record with `flags` added.
    ///
    /// ```
    /// use ipvsctl::nodeips::{AddressFlags, AddressRecord};
    /// let a = AddressRecord::new(3, "2001:db8::1".parse()?, 64).with_flags(AddressFlags::TENTATIVE);
    /// assert!(a.flags.contains(AddressFlags::TENTATIVE));
    /// # Ok::<(), std::net::AddrParseError>(())
    /// ```
    pub fn with_flags(mut self, flags: AddressFlags) -> Self {
        self.flags |= flags;
        self
    }

    /// The same record with `IFA_ADDRESS` set to a point-to-point `peer`.
    ///
    /// ```
    /// use ipvsctl::nodeips::AddressRecord;
    /// let a = AddressRecord::new(3, "10.0.0.1".parse()?, 32).with_peer("10.0.0.2".parse()?);
    /// assert_eq!(a.address, Some("10.0.0.2".parse()?));
    /// # Ok::<(), std::net::AddrParseError>(())
    /// ```
    pub fn with_peer(mut self, peer: IpAddr) -> Self {
        self.address = Some(peer);
        self
    }

    /// This host's address: `IFA_LOCAL`, or `IFA_ADDRESS` when `IFA_LOCAL`
    /// is absent (IPv6 without a peer).
    ///
    /// ```
    /// use ipvsctl::nodeips::AddressRecord;
    /// let mut a = AddressRecord::new(3, "2001:db8::1".parse()?, 64);
    /// a.local = None;
    /// assert_eq!(a.local_address(), Some("2001:db8::1".parse()?));
    /// # Ok::<(), std::net::AddrParseError>(())
    /// ```
    pub fn local_address(&self) -> Option<IpAddr> {
        self.local.or(self.address)
    }
}

/// The result of one link dump and one address dump.
///
/// ```
/// use ipvsctl::nodeips::{InterfaceFlags, LinkRecord, Records};
/// let mut records = Records::default();
/// records.links.push(LinkRecord::new(1, "lo", InterfaceFlags::LOOPBACK));
/// assert_eq!(records.links.len(), 1);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Records {
    /// Every interface, in dump order.
    pub links: Vec<LinkRecord>,
    /// Every address of the dumped families, in dump order.
    pub addresses: Vec<AddressRecord>,
}
