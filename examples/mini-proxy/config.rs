//! The desired-state file: services with a virtual IP, port, protocol,
//! scheduler, optional NodePort, and their endpoints. JSON, read with the
//! crate's `serde` feature (`Scheduler` and `Protocol` are the model's own
//! types, spelled as in ipvsadm: `"rr"`, `"tcp"`).

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use ipvsctl::model::{ForwardMethod, Protocol, RealServer, Scheduler, ServiceKey, VirtualServer};
use ipvsctl::sync::DesiredState;
use serde::Deserialize;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The services.
    pub services: Vec<Service>,
    /// Strict ARP, as kube-proxy's `--ipvs-strict-arp`: answer ARP only for
    /// addresses of the receiving interface (`arp_ignore=1`) and announce
    /// only the best local source (`arp_announce=2`), so that the VIPs on the
    /// dummy device are not answered for on other links. Read at start.
    #[serde(default)]
    pub strict_arp: bool,
}

/// One service.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    /// A name for logs.
    pub name: String,
    /// The virtual (cluster) IP.
    pub vip: IpAddr,
    /// The virtual port.
    pub port: u16,
    /// `tcp`, `udp` or `sctp`.
    pub protocol: Protocol,
    /// The IPVS scheduler (default `rr`).
    #[serde(default)]
    pub scheduler: Option<Scheduler>,
    /// Also expose the service on every node IP at this port.
    #[serde(default)]
    pub node_port: Option<u16>,
    /// The backends.
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
}

/// One backend.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    /// Backend address.
    pub ip: IpAddr,
    /// Backend port.
    pub port: u16,
    /// Weight (default 1).
    #[serde(default = "one")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

impl Config {
    /// Reads and parses `path`; the error names the file and the place.
    pub fn load(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The virtual IPs to bind on the proxy's device.
    pub fn vips(&self) -> BTreeSet<IpAddr> {
        self.services.iter().map(|s| s.vip).collect()
    }

    /// The desired IPVS state: one virtual server per service at its VIP,
    /// and one more per node IP for services with a NodePort, all with the
    /// service's endpoints, masqueraded.
    pub fn desired(&self, node_ips: &[IpAddr]) -> Result<DesiredState, String> {
        let mut state = DesiredState::new();
        for s in &self.services {
            let scheduler = s.scheduler.clone().unwrap_or(Scheduler::RoundRobin);
            let dests: Vec<RealServer> = s
                .endpoints
                .iter()
                .map(|e| {
                    RealServer::new(SocketAddr::new(e.ip, e.port))
                        .with_weight(e.weight)
                        .with_forward(ForwardMethod::Masquerade)
                })
                .collect();
            let mut addrs = vec![SocketAddr::new(s.vip, s.port)];
            if let Some(np) = s.node_port {
                addrs.extend(
                    node_ips
                        .iter()
                        .filter(|ip| ip.is_ipv4() == s.vip.is_ipv4())
                        .map(|ip| SocketAddr::new(*ip, np)),
                );
            }
            for addr in addrs {
                let key = match s.protocol {
                    Protocol::Tcp => ServiceKey::tcp(addr),
                    Protocol::Udp => ServiceKey::udp(addr),
                    Protocol::Sctp => ServiceKey::sctp(addr),
                    other => {
                        let p = other.to_raw();
                        return Err(format!("service {}: protocol {p} is not supported", s.name));
                    }
                };
                let vs = VirtualServer::new(key).with_scheduler(scheduler.clone());
                state
                    .insert(vs, dests.iter().copied())
                    .map_err(|e| format!("service {} ({addr}): {e}", s.name))?;
            }
        }
        Ok(state)
    }
}
