//! Read-only status values: statistics, connection counts, timeouts, info.
//! None of these take part in the equality of configuration types.
//!
//! Every struct here is `#[non_exhaustive]`: its fields are public to read,
//! and a counter or attribute a newer kernel reports can be added as a field
//! without breaking callers. Outside this crate, build values with the
//! constructors (or `Default` and field assignment), not struct literals.

use std::fmt;

use super::{RealServer, VirtualServer};

/// Where a [`Stats`] value came from (`#[non_exhaustive]`: a kernel may add
/// another statistics attribute, as 4.1 added `STATS64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub enum StatsSource {
    /// No statistics attribute was present.
    #[default]
    Absent,
    /// The 32-bit `STATS` attribute (kernels before 4.1): counters other than
    /// bytes wrap at 2³².
    Stats32,
    /// The 64-bit `STATS64` attribute (4.1+).
    Stats64,
    /// The namespace's totals in `/proc/net/ip_vs_stats` (64-bit), read by
    /// [`crate::conns::ConnTable::totals`].
    Procfs,
}

/// Traffic counters and rate estimates of a service or destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub struct Stats {
    /// Connections scheduled.
    pub conns: u64,
    /// Incoming packets.
    pub in_pkts: u64,
    /// Outgoing packets.
    pub out_pkts: u64,
    /// Incoming bytes.
    pub in_bytes: u64,
    /// Outgoing bytes.
    pub out_bytes: u64,
    /// Connections per second (estimate).
    pub cps: u64,
    /// Incoming packets per second (estimate).
    pub in_pps: u64,
    /// Outgoing packets per second (estimate).
    pub out_pps: u64,
    /// Incoming bytes per second (estimate).
    pub in_bps: u64,
    /// Outgoing bytes per second (estimate).
    pub out_bps: u64,
    /// Which attribute these values came from.
    pub source: StatsSource,
}

/// Connection counts of a real server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub struct ConnCounts {
    /// Active connections (TCP established).
    pub active: u32,
    /// Inactive connections (other states).
    pub inactive: u32,
    /// Persistence templates.
    pub persistent: u32,
}

impl ConnCounts {
    /// Counts of active, inactive and persistence-template connections.
    pub const fn new(active: u32, inactive: u32, persistent: u32) -> Self {
        ConnCounts {
            active,
            inactive,
            persistent,
        }
    }
}

/// A virtual server as the kernel reported it, with its statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub struct ServiceSnapshot {
    /// The configuration (compare this, not the snapshot).
    pub service: VirtualServer,
    /// Statistics at the time of the read.
    pub stats: Stats,
}

impl ServiceSnapshot {
    /// A snapshot of `service` with zero statistics (`Stats::default()`).
    pub fn new(service: VirtualServer) -> Self {
        ServiceSnapshot {
            service,
            stats: Stats::default(),
        }
    }

    /// Sets the statistics.
    pub fn with_stats(mut self, stats: Stats) -> Self {
        self.stats = stats;
        self
    }
}

/// A real server as the kernel reported it, with its counters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub struct DestinationSnapshot {
    /// The configuration (compare this, not the snapshot).
    pub server: RealServer,
    /// Connection counts.
    pub conns: ConnCounts,
    /// Statistics at the time of the read.
    pub stats: Stats,
}

impl DestinationSnapshot {
    /// A snapshot of `server` with zero connection counts and statistics.
    pub fn new(server: RealServer) -> Self {
        DestinationSnapshot {
            server,
            conns: ConnCounts::default(),
            stats: Stats::default(),
        }
    }

    /// Sets the connection counts.
    pub fn with_conns(mut self, conns: ConnCounts) -> Self {
        self.conns = conns;
        self
    }

    /// Sets the statistics.
    pub fn with_stats(mut self, stats: Stats) -> Self {
        self.stats = stats;
        self
    }
}

/// Connection timeouts in seconds (`ipvsadm --set`). When setting, 0 keeps the
/// kernel's current value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub struct Timeouts {
    /// Established TCP sessions.
    pub tcp: u32,
    /// TCP sessions after a FIN.
    pub tcp_fin: u32,
    /// UDP.
    pub udp: u32,
}

impl Timeouts {
    /// The three timeouts of `ipvsadm --set tcp tcpfin udp`, in seconds (0
    /// keeps the kernel's current value).
    ///
    /// ```
    /// use ipvsctl::model::Timeouts;
    /// let t = Timeouts::new(900, 120, 300);
    /// assert_eq!((t.tcp, t.tcp_fin, t.udp), (900, 120, 300));
    /// ```
    pub const fn new(tcp: u32, tcp_fin: u32, udp: u32) -> Self {
        Timeouts { tcp, tcp_fin, udp }
    }
}

/// The IPVS version the kernel reports (1.2.1 on every kernel since 2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Version(pub u32);

impl Version {
    /// Major number.
    pub fn major(self) -> u32 {
        (self.0 >> 16) & 0xff
    }
    /// Minor number.
    pub fn minor(self) -> u32 {
        (self.0 >> 8) & 0xff
    }
    /// Patch number.
    pub fn patch(self) -> u32 {
        self.0 & 0xff
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major(), self.minor(), self.patch())
    }
}

/// What `GET_INFO` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub struct Info {
    /// IPVS version.
    pub version: Version,
    /// Size of the connection hash table.
    pub conn_tab_size: u32,
}

impl Info {
    /// An IPVS version and connection-table size.
    pub const fn new(version: Version, conn_tab_size: u32) -> Self {
        Info {
            version,
            conn_tab_size,
        }
    }
}
