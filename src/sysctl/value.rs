//! The typed values of sysctl knobs and how they are spelled in `/proc/sys`.

use bitflags::bitflags;

/// A type a knob holds: how it is read from and written to its `/proc/sys`
/// file, and which of its values can be written at all.
pub trait KnobValue: Sized + Send {
    /// The value for the (trimmed) text the kernel shows; `None` if the text
    /// is not of this type.
    fn parse(text: &str) -> Option<Self>;
    /// The text written to the file.
    fn render(&self) -> String;
    /// Why this value can never be written (whatever the knob), if so.
    fn refuse(&self) -> Option<String> {
        None
    }
    /// The value as an integer, for knobs with a range.
    fn as_integer(&self) -> Option<i64> {
        None
    }
}

/// A boolean knob: the kernel stores an integer and treats anything but 0
/// as on, so any integer reads as a `bool`; `true` is written as `1`.
impl KnobValue for bool {
    fn parse(text: &str) -> Option<Self> {
        text.parse::<i64>().ok().map(|v| v != 0)
    }
    fn render(&self) -> String {
        u8::from(*self).to_string()
    }
}

impl KnobValue for i32 {
    fn parse(text: &str) -> Option<Self> {
        text.parse().ok()
    }
    fn render(&self) -> String {
        self.to_string()
    }
    fn as_integer(&self) -> Option<i64> {
        Some(i64::from(*self))
    }
}

impl KnobValue for u64 {
    fn parse(text: &str) -> Option<Self> {
        text.parse().ok()
    }
    fn render(&self) -> String {
        self.to_string()
    }
}

bitflags! {
    /// `net.ipv4.vs.conn_reuse_mode`: what IPVS does with a new connection
    /// that reuses the ports of an old entry. Empty: nothing special (the new
    /// connection goes to the old entry's real server).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct ConnReuseMode: i32 {
        /// Bit 1 (the kernel's default, 1): reschedule when it is safe: the
        /// old TCP entry is in `TIME_WAIT` (NAT), or, with
        /// `expire_nodest_conn`, its real server is gone.
        const RESCHEDULE = 1;
        /// Bit 2: also reschedule when the old TCP entry is in `FIN_WAIT`
        /// and saw no reply traffic (direct routing, tunnelling).
        const FIN_WAIT = 2;
    }
}

impl KnobValue for ConnReuseMode {
    fn parse(text: &str) -> Option<Self> {
        text.parse().ok().map(ConnReuseMode::from_bits_retain)
    }
    fn render(&self) -> String {
        self.bits().to_string()
    }
    fn refuse(&self) -> Option<String> {
        let unknown = self.bits() & !ConnReuseMode::all().bits();
        (unknown != 0).then(|| {
            format!(
                "{} has bits the kernel does not define ({unknown:#x})",
                self.bits()
            )
        })
    }
}

/// `net.ipv4.conf.*.arp_ignore`: which ARP requests for local addresses an
/// interface answers. The kernel uses the larger of `all` and the interface's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ArpIgnore {
    /// 0 (default): answer for any local address, on any interface.
    AnyAddress,
    /// 1: answer only if the target address is configured on the incoming
    /// interface (strict ARP for IPVS: virtual addresses on a dummy interface).
    IncomingInterface,
    /// 2: as 1, and the sender must be in the target address's subnet.
    IncomingInterfaceSameSubnet,
    /// 3: do not answer for addresses of host scope.
    NotHostScope,
    /// 8: never answer.
    Never,
    /// A value the kernel treats as reserved (4 to 7, or another number);
    /// read only: writing it is refused.
    Other(i32),
}

/// An ARP knob's named values and their numbers: the one table that both
/// reading and writing use.
const ARP_IGNORE_CODES: [(ArpIgnore, i32); 5] = [
    (ArpIgnore::AnyAddress, 0),
    (ArpIgnore::IncomingInterface, 1),
    (ArpIgnore::IncomingInterfaceSameSubnet, 2),
    (ArpIgnore::NotHostScope, 3),
    (ArpIgnore::Never, 8),
];

impl KnobValue for ArpIgnore {
    fn parse(text: &str) -> Option<Self> {
        let n = text.parse::<i32>().ok()?;
        Some(named(&ARP_IGNORE_CODES, n).unwrap_or(ArpIgnore::Other(n)))
    }
    fn render(&self) -> String {
        match self {
            ArpIgnore::Other(n) => n.to_string(),
            named_value => code(&ARP_IGNORE_CODES, named_value).to_string(),
        }
    }
    fn refuse(&self) -> Option<String> {
        match self {
            ArpIgnore::Other(n) => Some(not_one_of(*n, &ARP_IGNORE_CODES)),
            _ => None,
        }
    }
}

/// The named value of number `n` in `codes`.
fn named<T: Copy>(codes: &[(T, i32)], n: i32) -> Option<T> {
    codes.iter().find(|(_, c)| *c == n).map(|(v, _)| *v)
}

/// The number of named value `v` in `codes` (every named value is listed).
fn code<T: PartialEq>(codes: &[(T, i32)], v: &T) -> i32 {
    codes
        .iter()
        .find(|(named, _)| named == v)
        .map_or(0, |(_, c)| *c)
}

/// "N is not one of 0, 1, 2" for the numbers of `codes`.
fn not_one_of<T>(n: i32, codes: &[(T, i32)]) -> String {
    let list: Vec<String> = codes.iter().map(|(_, c)| c.to_string()).collect();
    format!("{n} is not one of {}", list.join(", "))
}

/// `net.ipv4.conf.*.arp_announce`: which source address ARP requests sent
/// from an interface carry. The kernel uses the larger of `all` and the
/// interface's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ArpAnnounce {
    /// 0 (default): any local address.
    AnyAddress,
    /// 1: avoid local addresses outside the target's subnet.
    AvoidOtherSubnets,
    /// 2: always the best local address for the target (strict ARP for
    /// IPVS: never announce a virtual address).
    BestLocalAddress,
    /// Any other number; read only: writing it is refused.
    Other(i32),
}

/// See [`ARP_IGNORE_CODES`].
const ARP_ANNOUNCE_CODES: [(ArpAnnounce, i32); 3] = [
    (ArpAnnounce::AnyAddress, 0),
    (ArpAnnounce::AvoidOtherSubnets, 1),
    (ArpAnnounce::BestLocalAddress, 2),
];

impl KnobValue for ArpAnnounce {
    fn parse(text: &str) -> Option<Self> {
        let n = text.parse::<i32>().ok()?;
        Some(named(&ARP_ANNOUNCE_CODES, n).unwrap_or(ArpAnnounce::Other(n)))
    }
    fn render(&self) -> String {
        match self {
            ArpAnnounce::Other(n) => n.to_string(),
            named_value => code(&ARP_ANNOUNCE_CODES, named_value).to_string(),
        }
    }
    fn refuse(&self) -> Option<String> {
        match self {
            ArpAnnounce::Other(n) => Some(not_one_of(*n, &ARP_ANNOUNCE_CODES)),
            _ => None,
        }
    }
}
