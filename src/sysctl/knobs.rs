//! The knobs: the `net/ipv4/vs/*` entries of ip_vs_ctl.c with the types and
//! limits the kernel gives them, and the per-interface ARP knobs.
//!
//! Limits are the kernel's own where it checks (`sync_retries`,
//! `sync_version`, `sync_ports`, the defense modes, `est_nice`); booleans are
//! knobs the kernel tests for zero/non-zero; other integers take what
//! `proc_dointvec` takes, bounded below by 0 where a negative value has no
//! meaning.

use super::{ArpAnnounce, ArpIgnore, ConnReuseMode, Knob, Limit, SysctlError};

const NON_NEGATIVE: Limit = Limit::Range {
    min: 0,
    max: i32::MAX as i64,
};
const DEFENSE_MODE: Limit = Limit::Range { min: 0, max: 3 };

/// `net.ipv4.vs.conntrack`: keep netfilter conntrack entries for IPVS
/// connections (needed for iptables/nftables rules that match them, e.g.
/// masquerading). Default off.
pub const CONNTRACK: Knob<bool> = Knob::fixed("net/ipv4/vs/conntrack", Limit::None);
/// `net.ipv4.vs.expire_nodest_conn`: drop entries whose real server was
/// removed at their next packet instead of letting them time out. Default off.
pub const EXPIRE_NODEST_CONN: Knob<bool> =
    Knob::fixed("net/ipv4/vs/expire_nodest_conn", Limit::None);
/// `net.ipv4.vs.expire_quiescent_template`: expire persistence templates of
/// real servers with weight 0. Default off.
pub const EXPIRE_QUIESCENT_TEMPLATE: Knob<bool> =
    Knob::fixed("net/ipv4/vs/expire_quiescent_template", Limit::None);
/// `net.ipv4.vs.conn_reuse_mode`: see [`ConnReuseMode`]. Default
/// [`ConnReuseMode::RESCHEDULE`].
pub const CONN_REUSE_MODE: Knob<ConnReuseMode> =
    Knob::fixed("net/ipv4/vs/conn_reuse_mode", Limit::None);
/// `net.ipv4.vs.cache_bypass`: send packets for a service without an
/// available real server directly to their destination. Default off.
pub const CACHE_BYPASS: Knob<bool> = Knob::fixed("net/ipv4/vs/cache_bypass", Limit::None);
/// `net.ipv4.vs.snat_reroute`: route NAT replies again after their source
/// is rewritten (policy routing by source). Default on.
pub const SNAT_REROUTE: Knob<bool> = Knob::fixed("net/ipv4/vs/snat_reroute", Limit::None);
/// `net.ipv4.vs.sloppy_tcp`: create entries for TCP packets other than SYN
/// (e.g. after a failover). Default off.
pub const SLOPPY_TCP: Knob<bool> = Knob::fixed("net/ipv4/vs/sloppy_tcp", Limit::None);
/// `net.ipv4.vs.sloppy_sctp`: create entries for SCTP packets other than
/// INIT. Default off.
pub const SLOPPY_SCTP: Knob<bool> = Knob::fixed("net/ipv4/vs/sloppy_sctp", Limit::None);
/// `net.ipv4.vs.nat_icmp_send`: answer packets of NAT entries whose real
/// server is gone with ICMP errors. Default off.
pub const NAT_ICMP_SEND: Knob<bool> = Knob::fixed("net/ipv4/vs/nat_icmp_send", Limit::None);
/// `net.ipv4.vs.pmtu_disc`: honour DF (path MTU discovery) for tunnelled
/// packets. Default on.
pub const PMTU_DISC: Knob<bool> = Knob::fixed("net/ipv4/vs/pmtu_disc", Limit::None);
/// `net.ipv4.vs.backup_only`: a backup sync daemon's host does not act as a
/// director. Default off.
pub const BACKUP_ONLY: Knob<bool> = Knob::fixed("net/ipv4/vs/backup_only", Limit::None);
/// `net.ipv4.vs.schedule_icmp`: schedule ICMP packets of new flows (ping to
/// a virtual address). Default off.
pub const SCHEDULE_ICMP: Knob<bool> = Knob::fixed("net/ipv4/vs/schedule_icmp", Limit::None);
/// `net.ipv4.vs.ignore_tunneled`: leave packets that arrived tunnelled to
/// the stack. Default off.
pub const IGNORE_TUNNELED: Knob<bool> = Knob::fixed("net/ipv4/vs/ignore_tunneled", Limit::None);
/// `net.ipv4.vs.run_estimation`: keep rate estimates (the `--rate`
/// listing). Default on.
pub const RUN_ESTIMATION: Knob<bool> = Knob::fixed("net/ipv4/vs/run_estimation", Limit::None);
/// `net.ipv4.vs.sync_persist_mode`: sync only templates of persistent
/// services, not their connections. Default off.
pub const SYNC_PERSIST_MODE: Knob<bool> = Knob::fixed("net/ipv4/vs/sync_persist_mode", Limit::None);
/// `net.ipv4.vs.amemthresh`: available memory (pages) under which the
/// defense modes in "automatic" switch on. Default 1024.
pub const AMEMTHRESH: Knob<i32> = Knob::fixed("net/ipv4/vs/amemthresh", NON_NEGATIVE);
/// `net.ipv4.vs.am_droprate`: drop 1 packet in this many when
/// [`DROP_PACKET`] is active. Default 10.
pub const AM_DROPRATE: Knob<i32> = Knob::fixed("net/ipv4/vs/am_droprate", NON_NEGATIVE);
/// `net.ipv4.vs.drop_entry`: randomly drop entries under memory pressure:
/// 0 never, 1 automatic, 2 always (back to 1 when memory recovers), 3 always.
pub const DROP_ENTRY: Knob<i32> = Knob::fixed("net/ipv4/vs/drop_entry", DEFENSE_MODE);
/// `net.ipv4.vs.drop_packet`: drop new packets at [`AM_DROPRATE`]; modes
/// as [`DROP_ENTRY`].
pub const DROP_PACKET: Knob<i32> = Knob::fixed("net/ipv4/vs/drop_packet", DEFENSE_MODE);
/// `net.ipv4.vs.secure_tcp`: stricter TCP state timeouts against SYN
/// floods; modes as [`DROP_ENTRY`].
pub const SECURE_TCP: Knob<i32> = Knob::fixed("net/ipv4/vs/secure_tcp", DEFENSE_MODE);
/// `net.ipv4.vs.sync_version`: the sync protocol sent, 0 (before 2.6.39)
/// or 1 (default).
pub const SYNC_VERSION: Knob<i32> =
    Knob::fixed("net/ipv4/vs/sync_version", Limit::Range { min: 0, max: 1 });
/// `net.ipv4.vs.sync_ports`: sync threads and ports per daemon, a power of
/// two. Default 1.
pub const SYNC_PORTS: Knob<i32> =
    Knob::fixed("net/ipv4/vs/sync_ports", Limit::PowerOfTwo { max: 1 << 30 });
/// `net.ipv4.vs.sync_retries`: how often a sync message of a changed
/// entry is resent, 0 to 3. Default 0.
pub const SYNC_RETRIES: Knob<i32> =
    Knob::fixed("net/ipv4/vs/sync_retries", Limit::Range { min: 0, max: 3 });
/// `net.ipv4.vs.sync_sock_size`: send/receive buffer of sync sockets in
/// bytes, 0 for the system default.
pub const SYNC_SOCK_SIZE: Knob<i32> = Knob::fixed("net/ipv4/vs/sync_sock_size", NON_NEGATIVE);
/// `net.ipv4.vs.sync_refresh_period`: seconds after which an unchanged
/// entry is synced again, 0 to sync at every `sync_threshold` packets.
/// Default 0. Bounded so that the kernel's conversion to jiffies cannot
/// overflow at HZ 1000.
pub const SYNC_REFRESH_PERIOD: Knob<i32> = Knob::fixed(
    "net/ipv4/vs/sync_refresh_period",
    Limit::Range {
        min: 0,
        max: (i32::MAX / 1000) as i64,
    },
);
/// `net.ipv4.vs.sync_qlen_max`: most sync messages queued. Default: a
/// fraction of memory.
pub const SYNC_QLEN_MAX: Knob<u64> = Knob::fixed("net/ipv4/vs/sync_qlen_max", Limit::None);
/// `net.ipv4.vs.est_nice`: nice value of the rate estimation threads, -20
/// to 19 (kernel 6.2 and later). Default 0.
pub const EST_NICE: Knob<i32> =
    Knob::fixed("net/ipv4/vs/est_nice", Limit::Range { min: -20, max: 19 });

/// `net.ipv4.conf.<interface>.arp_ignore`; `interface` may also be `all` or
/// `default`. The name is checked here (not empty, at most 15 bytes, no
/// `/`, not `.` or `..`).
///
/// ```
/// use ipvsctl::sysctl::knobs;
/// assert_eq!(knobs::arp_ignore("all")?.name(), "net.ipv4.conf.all.arp_ignore");
/// assert!(knobs::arp_ignore("../vs").is_err());
/// # Ok::<(), ipvsctl::sysctl::SysctlError>(())
/// ```
pub fn arp_ignore(interface: &str) -> Result<Knob<ArpIgnore>, SysctlError> {
    conf_knob(interface, "arp_ignore")
}

/// `net.ipv4.conf.<interface>.arp_announce`; see [`arp_ignore`].
pub fn arp_announce(interface: &str) -> Result<Knob<ArpAnnounce>, SysctlError> {
    conf_knob(interface, "arp_announce")
}

/// Any integer entry of `net/ipv4/vs` by name, without a limit: for knobs
/// this module does not name (e.g. those of newer kernels).
///
/// ```
/// use ipvsctl::sysctl::knobs;
/// assert_eq!(knobs::ipvs_integer("conn_lfactor")?.name(), "net.ipv4.vs.conn_lfactor");
/// assert!(knobs::ipvs_integer("../../ip_forward").is_err());
/// # Ok::<(), ipvsctl::sysctl::SysctlError>(())
/// ```
pub fn ipvs_integer(name: &str) -> Result<Knob<i32>, SysctlError> {
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !valid {
        return Err(SysctlError::InvalidName {
            what: "IPVS sysctl",
            name: name.to_owned(),
            reason: "must be lower-case letters, digits and '_'",
        });
    }
    Ok(Knob::owned(format!("net/ipv4/vs/{name}"), Limit::None))
}

fn conf_knob<V: super::KnobValue>(interface: &str, leaf: &str) -> Result<Knob<V>, SysctlError> {
    let reason = if interface.is_empty() {
        Some("empty")
    } else if interface.len() > 15 {
        Some("longer than 15 bytes")
    } else if interface.contains('/') || interface == "." || interface == ".." {
        Some("not a file name")
    } else if interface.bytes().any(|b| b.is_ascii_whitespace() || b == 0) {
        Some("contains white space")
    } else {
        None
    };
    if let Some(reason) = reason {
        return Err(SysctlError::InvalidName {
            what: "interface",
            name: interface.to_owned(),
            reason,
        });
    }
    Ok(Knob::owned(
        format!("net/ipv4/conf/{interface}/{leaf}"),
        Limit::None,
    ))
}
