//! The IPVS sysctls a proxy depends on, set at start the way kube-proxy's
//! IPVS mode sets them, through `ipvsctl::sysctl` (in the handle's namespace).

use ipvsctl::capabilities::KernelVersion;
use ipvsctl::sysctl::{self, ArpAnnounce, ArpIgnore, ConnReuseMode, Sysctls, knobs};

/// From this kernel on, `conn_reuse_mode=1` no longer stalls new
/// connections on reused ports for a second (kube-proxy leaves it alone
/// there; kubernetes/kubernetes issue 93297).
const CONN_REUSE_FIXED: KernelVersion = KernelVersion::new(5, 9, 0);

/// Sets, through `sysctls`:
///
/// * `net.ipv4.vs.conntrack=1`: IPVS keeps conntrack entries, which the
///   masquerading of NodePort and cluster traffic needs;
/// * `net.ipv4.vs.expire_nodest_conn=1`: connections to a deleted real
///   server are dropped at their next packet instead of hanging;
/// * `net.ipv4.vs.expire_quiescent_template=1`: persistence templates of a
///   weight-0 (draining) server expire, so new clients go elsewhere;
/// * `net.ipv4.vs.conn_reuse_mode=0` on kernels before 5.9 only, as
///   kube-proxy does (left as it is from 5.9 on);
/// * with `strict_arp`: `net.ipv4.conf.all.arp_ignore=1` and
///   `arp_announce=2`.
///
/// Returns one log line per knob.
pub fn prepare(sysctls: &Sysctls, strict_arp: bool) -> Result<Vec<String>, String> {
    let mut log = Vec::new();
    let mut set_bool = |knob: &sysctl::Knob<bool>| -> Result<(), String> {
        sysctls.write(knob, &true).map_err(|e| e.to_string())?;
        log.push(format!("sysctl {}=1", knob.name()));
        Ok(())
    };
    set_bool(&knobs::CONNTRACK)?;
    set_bool(&knobs::EXPIRE_NODEST_CONN)?;
    set_bool(&knobs::EXPIRE_QUIESCENT_TEMPLATE)?;

    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    match KernelVersion::parse(release.trim()) {
        Some(v) if v >= CONN_REUSE_FIXED => log.push(format!(
            "sysctl {} left as it is (kernel {v} is 5.9 or later)",
            knobs::CONN_REUSE_MODE.name()
        )),
        _ => {
            sysctls
                .write(&knobs::CONN_REUSE_MODE, &ConnReuseMode::empty())
                .map_err(|e| e.to_string())?;
            log.push(format!("sysctl {}=0", knobs::CONN_REUSE_MODE.name()));
        }
    }

    if strict_arp {
        let ignore = knobs::arp_ignore("all").map_err(|e| e.to_string())?;
        sysctls
            .write(&ignore, &ArpIgnore::IncomingInterface)
            .map_err(|e| e.to_string())?;
        log.push(format!("sysctl {}=1", ignore.name()));
        let announce = knobs::arp_announce("all").map_err(|e| e.to_string())?;
        sysctls
            .write(&announce, &ArpAnnounce::BestLocalAddress)
            .map_err(|e| e.to_string())?;
        log.push(format!("sysctl {}=2", announce.name()));
    }
    Ok(log)
}
