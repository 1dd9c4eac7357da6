//! Numbers from the kernel's `include/uapi/linux/ip_vs.h`, in one place.

/// Generic-netlink family name.
pub const FAMILY_NAME: &str = "IPVS";
/// Generic-netlink family version.
pub const FAMILY_VERSION: u8 = 1;

/// Top-level attributes (`IPVS_CMD_ATTR_*`).
pub mod cmd_attr {
    /// Nested service attributes.
    pub const SERVICE: u16 = 1;
    /// Nested destination attributes.
    pub const DEST: u16 = 2;
    /// Nested sync-daemon attributes.
    pub const DAEMON: u16 = 3;
    /// TCP timeout, u32 seconds.
    pub const TIMEOUT_TCP: u16 = 4;
    /// TCP FIN timeout, u32 seconds.
    pub const TIMEOUT_TCP_FIN: u16 = 5;
    /// UDP timeout, u32 seconds.
    pub const TIMEOUT_UDP: u16 = 6;
}

/// Service attributes (`IPVS_SVC_ATTR_*`).
pub mod svc_attr {
    /// u16 address family.
    pub const AF: u16 = 1;
    /// u16 IP protocol.
    pub const PROTOCOL: u16 = 2;
    /// Address, up to 16 bytes.
    pub const ADDR: u16 = 3;
    /// Big-endian u16 port.
    pub const PORT: u16 = 4;
    /// u32 firewall mark.
    pub const FWMARK: u16 = 5;
    /// NUL-terminated scheduler name.
    pub const SCHED_NAME: u16 = 6;
    /// `{u32 flags; u32 mask}`.
    pub const FLAGS: u16 = 7;
    /// u32 persistence timeout, seconds.
    pub const TIMEOUT: u16 = 8;
    /// Big-endian u32 netmask (IPv6: prefix length).
    pub const NETMASK: u16 = 9;
    /// Nested 32-bit statistics.
    pub const STATS: u16 = 10;
    /// NUL-terminated persistence-engine name.
    pub const PE_NAME: u16 = 11;
    /// Nested 64-bit statistics.
    pub const STATS64: u16 = 12;
}

/// Destination attributes (`IPVS_DEST_ATTR_*`).
pub mod dest_attr {
    /// Address, up to 16 bytes.
    pub const ADDR: u16 = 1;
    /// Big-endian u16 port.
    pub const PORT: u16 = 2;
    /// u32 forwarding method.
    pub const FWD_METHOD: u16 = 3;
    /// u32 weight.
    pub const WEIGHT: u16 = 4;
    /// u32 upper threshold.
    pub const U_THRESH: u16 = 5;
    /// u32 lower threshold.
    pub const L_THRESH: u16 = 6;
    /// u32 active connections (output).
    pub const ACTIVE_CONNS: u16 = 7;
    /// u32 inactive connections (output).
    pub const INACT_CONNS: u16 = 8;
    /// u32 persistent connections (output).
    pub const PERSIST_CONNS: u16 = 9;
    /// Nested 32-bit statistics.
    pub const STATS: u16 = 10;
    /// u16 address family (3.18+).
    pub const ADDR_FAMILY: u16 = 11;
    /// Nested 64-bit statistics (4.1+).
    pub const STATS64: u16 = 12;
    /// u8 tunnel type (5.2+).
    pub const TUN_TYPE: u16 = 13;
    /// Big-endian u16 tunnel port (5.2+).
    pub const TUN_PORT: u16 = 14;
    /// u16 tunnel flags (5.3+).
    pub const TUN_FLAGS: u16 = 15;
}

/// Statistics attributes (`IPVS_STATS_ATTR_*`).
pub mod stats_attr {
    /// Connections.
    pub const CONNS: u16 = 1;
    /// Incoming packets.
    pub const INPKTS: u16 = 2;
    /// Outgoing packets.
    pub const OUTPKTS: u16 = 3;
    /// Incoming bytes.
    pub const INBYTES: u16 = 4;
    /// Outgoing bytes.
    pub const OUTBYTES: u16 = 5;
    /// Connections per second.
    pub const CPS: u16 = 6;
    /// Incoming packets per second.
    pub const INPPS: u16 = 7;
    /// Outgoing packets per second.
    pub const OUTPPS: u16 = 8;
    /// Incoming bytes per second.
    pub const INBPS: u16 = 9;
    /// Outgoing bytes per second.
    pub const OUTBPS: u16 = 10;
    /// Padding before 64-bit values.
    pub const PAD: u16 = 11;
}

/// Sync-daemon attributes (`IPVS_DAEMON_ATTR_*`).
pub mod daemon_attr {
    /// u32 state (1 master, 2 backup).
    pub const STATE: u16 = 1;
    /// Multicast interface name.
    pub const MCAST_IFN: u16 = 2;
    /// u32 sync id.
    pub const SYNC_ID: u16 = 3;
    /// u16 maximum message length (4.3+).
    pub const SYNC_MAXLEN: u16 = 4;
    /// IPv4 multicast group, network order (4.3+).
    pub const MCAST_GROUP: u16 = 5;
    /// IPv6 multicast group (4.3+).
    pub const MCAST_GROUP6: u16 = 6;
    /// u16 multicast port (4.3+).
    pub const MCAST_PORT: u16 = 7;
    /// u8 multicast TTL (4.3+).
    pub const MCAST_TTL: u16 = 8;
}

/// Info attributes (`IPVS_INFO_ATTR_*`).
pub mod info_attr {
    /// u32 version.
    pub const VERSION: u16 = 1;
    /// u32 connection-table size.
    pub const CONN_TAB_SIZE: u16 = 2;
}

/// The netlink attribute-type mask (drops `NLA_F_NESTED` and
/// `NLA_F_NET_BYTEORDER`).
pub const NLA_TYPE_MASK: u16 = 0x3fff;
