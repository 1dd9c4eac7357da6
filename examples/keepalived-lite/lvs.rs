//! keepalived's LVS logic as a pure state machine: which real servers and
//! sorry servers are in each virtual server's pool, at which weight, as
//! checker results come in, with quorum, hysteresis, sorry servers, alpha
//! and inhibit-on-failure. No sockets, threads or clock: the runner feeds
//! it checker results and syncs the table it describes.
//!
//! It follows keepalived 2.2.7's `check/ipwrapper.c` step by step (init,
//! a checker going up or down, a weight change, quorum gained or lost) and
//! keeps, per real server, what keepalived's own commands would have put in
//! the kernel (`set` and the weight last written), so that the table it
//! describes is the one keepalived makes, including its quirks (an
//! inhibited server that stays at weight 0, alive servers taken out of the
//! pool while the sorry server stands in). Each step returns the log lines
//! keepalived writes for it.

use std::net::SocketAddr;

use ipvsctl::model::{
    ForwardMethod, Protocol as KeyProtocol, RealServer, ServiceKey, VirtualServer,
};

use crate::check::log::{Label, format_vs, trio};
use crate::config::model::{
    Config, Protocol, RealServerConf, ServiceSettings, SorryServer, VirtualServerConf,
};

/// The largest weight keepalived writes (`IPVS_WEIGHT_LIMIT`, `INT_MAX`).
const WEIGHT_LIMIT: i64 = i32::MAX as i64;

/// keepalived's `real_weight`: an effective weight clamped to what IPVS
/// takes.
fn real_weight(effective: i64) -> u32 {
    effective.clamp(0, WEIGHT_LIMIT) as u32
}

/// A checker's result, as the runner hands it over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckerResult {
    /// Index of the virtual server in the configuration.
    pub vs: usize,
    /// Index of the real server in its virtual server.
    pub rs: usize,
    /// Index of the checker in its real server.
    pub checker: usize,
    /// Whether the checker is now up.
    pub up: bool,
}

/// Where a server is in the kernel, as keepalived's commands left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Placed {
    /// In the pool (keepalived's `set`).
    set: bool,
    /// The weight last written.
    weight: u32,
}

/// One server of a pool: a real server or the sorry server.
#[derive(Debug, Clone)]
struct Server {
    addr: SocketAddr,
    forward: ForwardMethod,
    upper_threshold: u32,
    lower_threshold: u32,
    inhibit: bool,
    /// The configured weight (`iweight`).
    weight: i64,
    /// The weight now in force (`effective_weight`).
    effective: i64,
    alive: bool,
    /// Checkers now failed (`num_failed_checkers`).
    failed: usize,
    /// Per checker: up.
    checker_up: Vec<bool>,
    placed: Placed,
}

impl Server {
    fn real(c: &RealServerConf) -> Server {
        let checker_up: Vec<bool> = c.checkers.iter().map(|k| !k.alpha).collect();
        Server {
            addr: c.addr,
            forward: c.forward,
            upper_threshold: c.upper_threshold,
            lower_threshold: c.lower_threshold,
            inhibit: c.inhibit,
            weight: i64::from(c.weight),
            effective: i64::from(c.weight),
            alive: false,
            failed: checker_up.iter().filter(|up| !**up).count(),
            checker_up,
            placed: Placed::default(),
        }
    }

    fn sorry(s: &SorryServer) -> Server {
        Server {
            addr: s.addr,
            forward: s.forward,
            upper_threshold: 0,
            lower_threshold: 0,
            inhibit: s.inhibit,
            weight: i64::from(s.weight),
            effective: i64::from(s.weight),
            alive: false,
            failed: 0,
            checker_up: Vec::new(),
            placed: Placed::default(),
        }
    }

    /// keepalived's `ipvs_cmd(LVS_CMD_ADD_DEST)`: an inhibited server that
    /// is in the pool gets its weight back; one not in the pool is added,
    /// at weight 0 if inhibited with failed checkers.
    fn add(&mut self) {
        let weight = if !self.placed.set && self.inhibit && self.failed > 0 {
            0
        } else {
            real_weight(self.effective)
        };
        self.placed = Placed { set: true, weight };
    }

    /// `ipvs_cmd(LVS_CMD_DEL_DEST)`: an inhibited server stays at weight
    /// 0; any other leaves the pool.
    fn del(&mut self) {
        if self.inhibit {
            self.placed.weight = 0;
        } else {
            self.placed = Placed::default();
        }
    }

    /// `ipvs_cmd(LVS_CMD_EDIT_DEST)`.
    fn edit(&mut self) {
        self.placed.weight = real_weight(self.effective);
    }

    fn destination(&self) -> Option<RealServer> {
        self.placed.set.then(|| {
            RealServer::new(self.addr)
                .with_weight(self.placed.weight)
                .with_forward(self.forward)
                .with_thresholds(self.upper_threshold, self.lower_threshold)
        })
    }
}

/// One virtual server block's state.
#[derive(Debug, Clone)]
struct Vs {
    keys: Vec<ServiceKey>,
    settings: ServiceSettings,
    name: String,
    proto: Option<Protocol>,
    quorum: i64,
    hysteresis: i64,
    quorum_up: bool,
    servers: Vec<Server>,
    sorry: Option<Server>,
}

/// keepalived's pools, all virtual servers of one configuration.
#[derive(Debug, Clone)]
pub struct Lvs {
    vss: Vec<Vs>,
}

impl Lvs {
    /// The pools as keepalived sets them up at start (`init_services`),
    /// with its log lines.
    pub fn start(config: &Config) -> (Lvs, Vec<String>) {
        let mut log = Vec::new();
        let mut vss: Vec<Vs> = config.virtual_servers.iter().map(Vs::new).collect();
        for vs in &mut vss {
            vs.start(&mut log);
        }
        (Lvs { vss }, log)
    }

    /// A checker's result (`update_svr_checker_state`); the log lines.
    pub fn checker(&mut self, r: CheckerResult) -> Vec<String> {
        let mut log = Vec::new();
        if let Some(vs) = self.vss.get_mut(r.vs) {
            vs.checker(r.rs, r.checker, r.up, &mut log);
        }
        log
    }

    /// A `misc_dynamic` weight (`update_svr_wgt`): `Some(w)` sets the
    /// real server's weight to `w`, `None` gives it back its configured
    /// weight. The log lines.
    pub fn dynamic_weight(&mut self, vs: usize, rs: usize, weight: Option<u32>) -> Vec<String> {
        let mut log = Vec::new();
        if let Some(v) = self.vss.get_mut(vs)
            && let Some(server) = v.servers.get(rs)
        {
            let w = weight.map_or(server.weight, i64::from);
            v.set_weight(rs, w, &mut log);
        }
        log
    }

    /// The log lines keepalived writes when it stops and takes its pools
    /// out (`clear_services`).
    pub fn stop_log(&self) -> Vec<String> {
        let mut log = Vec::new();
        for vs in &self.vss {
            for s in vs.servers.iter().filter(|s| s.placed.set) {
                log.push(format!(
                    "Shutting down {}service {} from VS {}",
                    if s.inhibit && !s.alive {
                        "(inhibited) "
                    } else {
                        ""
                    },
                    trio(s.addr, vs.proto),
                    vs.name
                ));
            }
        }
        log
    }

    /// The IPVS services and real servers these pools stand for, one entry
    /// per service key (a group's block gives each entry the same pool).
    pub fn table(&self) -> Vec<(VirtualServer, Vec<RealServer>)> {
        let mut out = Vec::new();
        for vs in &self.vss {
            let mut dests: Vec<RealServer> = Vec::new();
            // keepalived lets a sorry server with the address of a real
            // server share its entry; the first one written stands.
            let all = vs.sorry.iter().chain(vs.servers.iter());
            for d in all.filter_map(Server::destination) {
                if !dests.iter().any(|x| x.addr == d.addr) {
                    dests.push(d);
                }
            }
            for key in &vs.keys {
                out.push((service(*key, &vs.settings), dests.clone()));
            }
        }
        out
    }

    /// The service keys of the virtual server block `vs`.
    pub fn keys(&self, vs: usize) -> &[ServiceKey] {
        self.vss.get(vs).map_or(&[], |v| &v.keys)
    }
}

/// An IPVS service with a block's settings.
fn service(key: ServiceKey, s: &ServiceSettings) -> VirtualServer {
    let mut v = VirtualServer::new(key)
        .with_scheduler(s.scheduler.clone())
        .with_flags(s.flags);
    if let Some(t) = s.persistence_timeout {
        v = v.with_persistence(t);
    }
    if let Some(m) = s.persistence_granularity {
        v = v.with_netmask(m);
    }
    v
}

/// keepalived's service type for a block (`service_type`): its
/// protocol, None ("none" in log lines) for a firewall mark, as keepalived
/// ignores a protocol given there.
pub fn service_type(c: &VirtualServerConf) -> Option<Protocol> {
    c.keys.iter().find_map(|k| match k {
        ServiceKey::Addr { protocol, .. } => match protocol {
            KeyProtocol::Tcp => Some(Protocol::Tcp),
            KeyProtocol::Udp => Some(Protocol::Udp),
            KeyProtocol::Sctp => Some(Protocol::Sctp),
            _ => None,
        },
        ServiceKey::FwMark { .. } => None,
    })
}

/// How the checkers of a real server name it in log lines.
pub fn label(c: &VirtualServerConf, rs: &RealServerConf) -> Label {
    Label::new(rs.addr, service_type(c), &c.id)
}

impl Vs {
    fn new(c: &VirtualServerConf) -> Vs {
        Vs {
            keys: c.keys.clone(),
            settings: c.settings.clone(),
            name: format_vs(&c.id),
            proto: service_type(c),
            quorum: i64::from(c.quorum),
            hysteresis: i64::from(c.hysteresis),
            quorum_up: false,
            servers: c.real_servers.iter().map(Server::real).collect(),
            sorry: c.sorry.as_ref().map(Server::sorry),
        }
    }

    fn rs_name(&self, s: &Server) -> String {
        trio(s.addr, self.proto)
    }

    /// Sum of the alive servers' weights (`weigh_live_realservers`).
    fn live_weight(&self) -> i64 {
        self.servers
            .iter()
            .filter(|s| s.alive)
            .map(|s| i64::from(real_weight(s.effective)))
            .sum()
    }

    fn sorry_alive(&self) -> bool {
        self.sorry.as_ref().is_some_and(|s| s.alive)
    }

    /// Whether pool changes go to the kernel: with quorum, or with no sorry
    /// server standing in.
    fn pool_open(&self) -> bool {
        self.quorum_up || !self.sorry_alive()
    }

    /// `set_quorum_states` (at load, before any server is alive) and
    /// `init_service_vs`.
    fn start(&mut self, log: &mut Vec<String>) {
        self.quorum_up = self.live_weight() >= self.quorum + self.hysteresis;
        for s in &mut self.servers {
            // Alpha mode: a server with a failed checker is not added, unless
            // inhibited (then it is added at weight 0).
            if (s.failed == 0 && !s.alive) || (s.inhibit && !s.placed.set) {
                s.add();
                if s.failed == 0 {
                    s.alive = true;
                }
            }
        }
        self.update_quorum(true, log);
        if let Some(s) = self.sorry.as_mut()
            && s.inhibit
            && !s.placed.set
        {
            // Added at weight 0, as a failed inhibited server.
            s.placed = Placed {
                set: true,
                weight: 0,
            };
        }
    }

    /// `update_quorum_state`.
    fn update_quorum(&mut self, init: bool, log: &mut Vec<String>) {
        let sum = self.live_weight();
        let threshold = self.quorum
            + if self.quorum_up {
                -self.hysteresis
            } else {
                self.hysteresis
            };
        if !self.quorum_up && sum >= threshold {
            self.quorum_up = true;
            log.push(format!(
                "Gained quorum {}+{}={} <= {} for VS {}",
                self.quorum, self.hysteresis, threshold, sum, self.name
            ));
            if let Some(sorry) = self.sorry.as_mut().filter(|s| s.alive) {
                log.push(format!(
                    "{} sorry server {} from VS {}",
                    if sorry.inhibit {
                        "Disabling"
                    } else {
                        "Removing"
                    },
                    trio(sorry.addr, self.proto),
                    self.name
                ));
                sorry.del();
                sorry.alive = false;
                pool(&mut self.servers, &self.name, true, log);
            }
        } else if (self.quorum_up && (sum == 0 || sum < threshold))
            || (init && !self.quorum_up && self.sorry.as_ref().is_some_and(|s| !s.alive))
        {
            self.quorum_up = false;
            log.push(format!(
                "{} {}-{}={} > {} for VS {}",
                if init {
                    "Starting with quorum down"
                } else {
                    "Lost quorum"
                },
                self.quorum,
                self.hysteresis,
                threshold,
                sum,
                self.name
            ));
            if let Some(sorry) = self.sorry.as_mut().filter(|s| !s.alive) {
                log.push(format!(
                    "{} sorry server {} to VS {}",
                    if sorry.inhibit { "Enabling" } else { "Adding" },
                    trio(sorry.addr, self.proto),
                    self.name
                ));
                pool(&mut self.servers, &self.name, false, log);
                sorry.add();
                sorry.alive = true;
            }
        }
    }

    /// `update_svr_checker_state` with `set_checker_state`.
    fn checker(&mut self, rs: usize, checker: usize, up: bool, log: &mut Vec<String>) {
        let Some(was) = self
            .servers
            .get(rs)
            .and_then(|s| s.checker_up.get(checker))
            .copied()
        else {
            return;
        };
        if was == up {
            return;
        }
        let failed = self.servers[rs].failed;
        if (up && failed <= 1) || (!up && failed == 0) {
            self.server_state(rs, up, log);
        }
        let s = &mut self.servers[rs];
        s.checker_up[checker] = up;
        if up {
            s.failed = s.failed.saturating_sub(1);
        } else {
            s.failed += 1;
        }
    }

    /// `perform_svr_state`: a real server goes up or down.
    fn server_state(&mut self, rs: usize, alive: bool, log: &mut Vec<String>) {
        let s = &self.servers[rs];
        if s.alive == alive {
            return;
        }
        let verb = match (alive, s.inhibit) {
            (true, true) => "Enabling",
            (true, false) => "Adding",
            (false, true) => "Disabling",
            (false, false) => "Removing",
        };
        let prep = if s.inhibit {
            "of"
        } else if alive {
            "to"
        } else {
            "from"
        };
        log.push(format!(
            "{verb} service {} {prep} VS {}",
            self.rs_name(s),
            self.name
        ));
        let open = self.pool_open();
        let s = &mut self.servers[rs];
        if open {
            if alive { s.add() } else { s.del() }
        }
        s.alive = alive;
        self.update_quorum(false, log);
    }

    /// `update_svr_wgt` with a quorum update.
    fn set_weight(&mut self, rs: usize, weight: i64, log: &mut Vec<String>) {
        let open = self.pool_open();
        let s = &self.servers[rs];
        let (old, new) = (real_weight(s.effective), real_weight(weight));
        let line = format!(
            "Changing weight from {old} to {new} for {}active service {} of VS {}",
            if s.alive { "" } else { "in" },
            self.rs_name(s),
            self.name
        );
        let s = &mut self.servers[rs];
        s.effective = weight;
        if old != new {
            log.push(line);
            if s.placed.set && s.alive && open {
                s.edit();
            }
            self.update_quorum(false, log);
        }
    }
}

/// `perform_quorum_state`: the alive servers into or out of the pool of
/// the virtual server `name`.
fn pool(servers: &mut [Server], name: &str, add: bool, log: &mut Vec<String>) {
    log.push(format!(
        "{} the pool for VS {name}",
        if add {
            "Adding alive servers to"
        } else {
            "Removing alive servers from"
        },
    ));
    for s in servers.iter_mut().filter(|s| s.alive) {
        if add { s.add() } else { s.del() }
    }
}
