//! Virtual servers (IPVS "services").

use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use super::{AddressFamily, PersistenceEngine, Protocol, Scheduler};

/// The identity of a virtual server: what the kernel looks it up by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum ServiceKey {
    /// A service on a transport protocol and socket address (`-t`, `-u`,
    /// `--sctp-service` in ipvsadm).
    Addr {
        /// The transport protocol.
        protocol: Protocol,
        /// The virtual address and port.
        addr: SocketAddr,
    },
    /// A service matching packets by firewall mark (`-f` in ipvsadm). The
    /// kernel treats such services as TCP internally.
    FwMark {
        /// The firewall mark (non-zero).
        mark: u32,
        /// The address family of the packets it matches.
        family: AddressFamily,
    },
}

impl ServiceKey {
    /// A TCP service.
    ///
    /// ```
    /// use ipvsctl::model::ServiceKey;
    /// let key = ServiceKey::tcp("10.96.0.1:443".parse().unwrap());
    /// assert_eq!(key.to_string(), "TCP 10.96.0.1:443");
    /// ```
    pub fn tcp(addr: SocketAddr) -> Self {
        ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr,
        }
    }

    /// A UDP service.
    pub fn udp(addr: SocketAddr) -> Self {
        ServiceKey::Addr {
            protocol: Protocol::Udp,
            addr,
        }
    }

    /// An SCTP service.
    pub fn sctp(addr: SocketAddr) -> Self {
        ServiceKey::Addr {
            protocol: Protocol::Sctp,
            addr,
        }
    }

    /// A firewall-mark service.
    pub fn fwmark(mark: u32, family: AddressFamily) -> Self {
        ServiceKey::FwMark { mark, family }
    }

    /// The address family of the service.
    pub fn family(&self) -> AddressFamily {
        match self {
            ServiceKey::Addr { addr, .. } => AddressFamily::of(&addr.ip()),
            ServiceKey::FwMark { family, .. } => *family,
        }
    }
}

/// One write of the key's bytes. Every sync looks keys up in several maps
/// per service (the desired state, the memory, the owned set), and the
/// standard hasher pays per write: the derived impl made six (the variant,
/// the protocol, the address's variant, the octets' length, the octets and
/// the port). Equal keys write equal bytes; an IPv6 address's flow label
/// and scope id are left out, which only lets keys that differ in them
/// share a hash.
impl Hash for ServiceKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // [kind, 0, protocol (2), port (2), 0, 0, address or mark (16)]
        let mut bytes = [0u8; 24];
        match *self {
            ServiceKey::Addr { protocol, addr } => {
                bytes[2..4].copy_from_slice(&protocol.to_raw().to_ne_bytes());
                bytes[4..6].copy_from_slice(&addr.port().to_ne_bytes());
                match addr.ip() {
                    IpAddr::V4(ip) => bytes[8..12].copy_from_slice(&ip.octets()),
                    IpAddr::V6(ip) => {
                        bytes[0] = 1;
                        bytes[8..24].copy_from_slice(&ip.octets());
                    }
                }
            }
            ServiceKey::FwMark { mark, family } => {
                bytes[0] = 2 + u8::from(family == AddressFamily::Inet6);
                bytes[8..12].copy_from_slice(&mark.to_ne_bytes());
            }
        }
        state.write(&bytes);
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServiceKey::Addr { protocol, addr } => write!(f, "{protocol} {addr}"),
            ServiceKey::FwMark { mark, family } => write!(f, "FWM {mark} {family}"),
        }
    }
}

bitflags::bitflags! {
    /// Service flags as the kernel defines them (`IP_VS_SVC_F_*`).
    ///
    /// The kernel-internal `HASHED` bit (0x2) is never part of this type: the
    /// codec drops it from replies and never sends it. Bits that a newer kernel
    /// may define are kept (`from_bits_retain`) so that an update never clears
    /// them by accident.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    pub struct ServiceFlags: u32 {
        /// Persistent service (`-p`).
        const PERSISTENT = 0x0001;
        /// One-packet scheduling, for UDP (`-o`).
        const ONE_PACKET = 0x0004;
        /// Scheduler flag 1: `sh-fallback` for sh, `mh-fallback` for mh.
        const SCHED1 = 0x0008;
        /// Scheduler flag 2: `sh-port` for sh, `mh-port` for mh.
        const SCHED2 = 0x0010;
        /// Scheduler flag 3 (unused by the in-tree schedulers).
        const SCHED3 = 0x0020;
        /// `sh-fallback`: the sh scheduler falls back to another server when
        /// the chosen one is unavailable.
        const SH_FALLBACK = Self::SCHED1.bits();
        /// `sh-port`: the sh scheduler hashes the source port too.
        const SH_PORT = Self::SCHED2.bits();
        /// `mh-fallback`: as `sh-fallback`, for the mh scheduler.
        const MH_FALLBACK = Self::SCHED1.bits();
        /// `mh-port`: as `sh-port`, for the mh scheduler.
        const MH_PORT = Self::SCHED2.bits();
    }
}

// Any 32-bit value, unknown bits included: replies from newer kernels carry
// bits this crate does not name, and they must survive like known ones.
#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for ServiceFlags {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(ServiceFlags::from_bits_retain(u.arbitrary()?))
    }

    fn size_hint(depth: usize) -> (usize, Option<usize>) {
        <u32 as arbitrary::Arbitrary>::size_hint(depth)
    }
}

impl ServiceFlags {
    /// The kernel-internal "service is in the hash table" bit.
    pub const KERNEL_HASHED: u32 = 0x0002;

    /// The flags a kernel reply carries, with `HASHED` removed.
    pub fn from_kernel(raw: u32) -> Self {
        ServiceFlags::from_bits_retain(raw & !Self::KERNEL_HASHED)
    }
}

/// The persistence granularity of a virtual server.
///
/// For IPv4 it is a netmask, sent to the kernel in network byte order; for
/// IPv6 it is a prefix length from 1 to 128, sent as a plain number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Netmask {
    /// An IPv4 netmask (contiguous for valid values).
    V4(Ipv4Addr),
    /// An IPv6 prefix length (1..=128 for valid values).
    V6(u8),
}

impl Netmask {
    /// The host mask of a family (`255.255.255.255` or `/128`), ipvsadm's
    /// default.
    pub fn full(family: AddressFamily) -> Self {
        match family {
            AddressFamily::Inet => Netmask::V4(Ipv4Addr::BROADCAST),
            AddressFamily::Inet6 => Netmask::V6(128),
        }
    }

    /// A netmask of the given prefix length for the family.
    ///
    /// ```
    /// use ipvsctl::model::{AddressFamily, Netmask};
    /// assert_eq!(
    ///     Netmask::from_prefix(AddressFamily::Inet, 24),
    ///     Netmask::V4("255.255.255.0".parse().unwrap())
    /// );
    /// ```
    pub fn from_prefix(family: AddressFamily, prefix: u8) -> Self {
        match family {
            AddressFamily::Inet => {
                let bits = match prefix {
                    0 => 0,
                    p if p >= 32 => u32::MAX,
                    p => u32::MAX << (32 - u32::from(p)),
                };
                Netmask::V4(Ipv4Addr::from(bits))
            }
            AddressFamily::Inet6 => Netmask::V6(prefix),
        }
    }

    /// The prefix length, or `None` for a non-contiguous IPv4 mask.
    pub fn prefix_len(&self) -> Option<u8> {
        match self {
            Netmask::V4(mask) => {
                let bits = u32::from(*mask);
                let ones = bits.leading_ones();
                (bits.checked_shl(ones).unwrap_or(0) == 0).then_some(ones as u8)
            }
            Netmask::V6(prefix) => Some(*prefix),
        }
    }

    /// The family this netmask belongs to.
    pub fn family(&self) -> AddressFamily {
        match self {
            Netmask::V4(_) => AddressFamily::Inet,
            Netmask::V6(_) => AddressFamily::Inet6,
        }
    }

    /// The 32-bit value as it goes on the wire (the kernel reads it with
    /// `nla_get_be32`): IPv4 masks in network byte order, IPv6 prefix lengths
    /// as a host-order number.
    pub fn to_wire(self) -> [u8; 4] {
        match self {
            Netmask::V4(mask) => mask.octets(),
            Netmask::V6(prefix) => u32::from(prefix).to_ne_bytes(),
        }
    }

    /// Reads the wire value for a service of `family`. IPv6 values above 255
    /// (which the kernel never accepts) saturate to 255 so that they fail
    /// validation instead of wrapping into a valid prefix.
    pub fn from_wire(family: AddressFamily, raw: [u8; 4]) -> Self {
        match family {
            AddressFamily::Inet => Netmask::V4(Ipv4Addr::from(raw)),
            AddressFamily::Inet6 => {
                Netmask::V6(u8::try_from(u32::from_ne_bytes(raw)).unwrap_or(u8::MAX))
            }
        }
    }
}

impl fmt::Display for Netmask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Netmask::V4(mask) => write!(f, "{mask}"),
            Netmask::V6(prefix) => write!(f, "{prefix}"),
        }
    }
}

/// A virtual server: its identity ([`ServiceKey`]) and its configuration.
///
/// `==` compares identity and configuration; see the [module
/// documentation](crate::model) for the exactness rule. Construct with
/// [`VirtualServer::new`], which applies ipvsadm's defaults, then use the
/// `with_*` methods (or assign the public fields). The struct is
/// `#[non_exhaustive]`: a field for a new kernel attribute can be added
/// without breaking callers, so it cannot be built with a struct literal
/// outside this crate.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub struct VirtualServer {
    /// What the kernel identifies the service by.
    pub key: ServiceKey,
    /// The scheduling algorithm.
    pub scheduler: Scheduler,
    /// Service flags (persistence, one-packet, scheduler flags).
    #[cfg_attr(feature = "serde", serde(default))]
    pub flags: ServiceFlags,
    /// Persistence timeout in seconds (meaningful with
    /// [`ServiceFlags::PERSISTENT`]; stored by the kernel either way).
    #[cfg_attr(feature = "serde", serde(default))]
    pub timeout: u32,
    /// Persistence granularity.
    pub netmask: Netmask,
    /// Persistence engine, if any.
    #[cfg_attr(feature = "serde", serde(default))]
    pub persistence_engine: Option<PersistenceEngine>,
}

impl VirtualServer {
    /// ipvsadm's default persistence timeout (`-p` without a value), seconds.
    pub const DEFAULT_PERSISTENCE_TIMEOUT: u32 = 360;

    /// A virtual server with ipvsadm's defaults: scheduler `wlc`, no flags,
    /// timeout 0, full-host netmask, no persistence engine.
    ///
    /// ```
    /// use ipvsctl::model::{Scheduler, ServiceKey, VirtualServer};
    /// let vs = VirtualServer::new(ServiceKey::tcp("10.0.0.1:80".parse().unwrap()))
    ///     .with_scheduler(Scheduler::RoundRobin)
    ///     .with_persistence(600);
    /// assert!(vs.validate().is_ok());
    /// ```
    pub fn new(key: ServiceKey) -> Self {
        VirtualServer {
            key,
            scheduler: Scheduler::default(),
            flags: ServiceFlags::empty(),
            timeout: 0,
            netmask: Netmask::full(key.family()),
            persistence_engine: None,
        }
    }

    /// Sets the scheduler.
    pub fn with_scheduler(mut self, scheduler: Scheduler) -> Self {
        self.scheduler = scheduler;
        self
    }

    /// Makes the service persistent with the given timeout in seconds.
    pub fn with_persistence(mut self, timeout: u32) -> Self {
        self.flags |= ServiceFlags::PERSISTENT;
        self.timeout = timeout;
        self
    }

    /// Adds flags.
    pub fn with_flags(mut self, flags: ServiceFlags) -> Self {
        self.flags |= flags;
        self
    }

    /// Sets the persistence timeout in seconds without touching the flags
    /// (the kernel stores it whether or not the service is persistent).
    pub fn with_timeout(mut self, timeout: u32) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the persistence netmask.
    pub fn with_netmask(mut self, netmask: Netmask) -> Self {
        self.netmask = netmask;
        self
    }

    /// Sets the persistence engine.
    pub fn with_persistence_engine(mut self, pe: PersistenceEngine) -> Self {
        self.persistence_engine = Some(pe);
        self
    }

    /// The address family of the service.
    pub fn family(&self) -> AddressFamily {
        self.key.family()
    }

    /// The service's virtual address, if it is address-based.
    pub fn addr(&self) -> Option<IpAddr> {
        match self.key {
            ServiceKey::Addr { addr, .. } => Some(addr.ip()),
            ServiceKey::FwMark { .. } => None,
        }
    }
}

/// Keys that differ from each other in one field each (for the tests of
/// anything that hashes or orders keys).
#[cfg(test)]
pub(crate) fn keys_differing_in_one_field() -> Vec<ServiceKey> {
    vec![
        ServiceKey::tcp("10.96.0.1:80".parse().unwrap()),
        ServiceKey::udp("10.96.0.1:80".parse().unwrap()),
        ServiceKey::Addr {
            protocol: Protocol::Sctp,
            addr: "10.96.0.1:80".parse().unwrap(),
        },
        ServiceKey::tcp("10.96.0.1:81".parse().unwrap()),
        ServiceKey::tcp("10.96.0.2:80".parse().unwrap()),
        ServiceKey::tcp("[::ffff:10.96.0.1]:80".parse().unwrap()),
        ServiceKey::tcp("[2001:db8::1]:80".parse().unwrap()),
        ServiceKey::tcp("[2001:db8::1]:81".parse().unwrap()),
        ServiceKey::fwmark(1, AddressFamily::Inet),
        ServiceKey::fwmark(1, AddressFamily::Inet6),
        ServiceKey::fwmark(2, AddressFamily::Inet),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn equal_keys_hash_equal_and_these_distinct_keys_do_not() {
        let state = std::collections::hash_map::RandomState::new();
        let keys = keys_differing_in_one_field();
        for (i, a) in keys.iter().enumerate() {
            assert_eq!(state.hash_one(a), state.hash_one(*a), "{a}");
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
                assert_ne!(state.hash_one(a), state.hash_one(b), "{a} and {b}");
            }
        }
        let set: std::collections::HashSet<ServiceKey> = keys.iter().copied().collect();
        assert_eq!(set.len(), keys.len());
        assert!(keys.iter().all(|k| set.contains(k)));
    }
}
