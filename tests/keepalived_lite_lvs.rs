//! keepalived-lite's pool logic (examples/keepalived-lite/lvs.rs), pure, no
//! kernel: which servers keepalived 2.2.7 puts in a pool, at which weight,
//! and the lines it logs, for checkers going down and up under alpha,
//! inhibit_on_failure, quorum with hysteresis, sorry servers (inhibited or
//! not) and misc_dynamic weights; and for any sequence of checker results,
//! the invariants keepalived's pools keep.
//!
//! The same logic against Debian's keepalived on real kernels:
//! tests/kernel_keepalived.rs.

#[allow(dead_code)]
#[path = "../examples/keepalived-lite/check/mod.rs"]
mod check;
#[allow(dead_code)]
#[path = "../examples/keepalived-lite/config/model.rs"]
pub mod model;
/// lvs.rs reaches the model as `crate::config::model` and the log names as
/// `crate::check::log`, as in the program.
mod config {
    pub use super::model;
}
#[allow(dead_code)]
#[path = "../examples/keepalived-lite/lvs.rs"]
mod lvs;

use std::net::SocketAddr;
use std::time::Duration;

use ipvsctl::model::{ForwardMethod, RealServer, Scheduler, ServiceFlags, ServiceKey};
use lvs::{CheckerResult, Lvs};
use model::*;
use proptest::prelude::*;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn checker(alpha: bool) -> CheckerConf {
    CheckerConf {
        line: 1,
        kind: CheckKind::Tcp,
        connect: sa("10.0.0.2:80"),
        bind: None,
        connect_timeout: Duration::from_secs(1),
        retry: 1,
        delay_before_retry: Duration::from_secs(1),
        delay_loop: Duration::from_secs(1),
        warmup: None,
        alpha,
    }
}

fn rs(addr: &str, weight: u32, inhibit: bool, alpha: bool) -> RealServerConf {
    RealServerConf {
        line: 1,
        addr: sa(addr),
        weight,
        forward: ForwardMethod::Masquerade,
        upper_threshold: 0,
        lower_threshold: 0,
        inhibit,
        checkers: vec![checker(alpha)],
    }
}

fn vs(real_servers: Vec<RealServerConf>) -> VirtualServerConf {
    VirtualServerConf {
        file: "k.conf".into(),
        line: 1,
        id: VsId::Addr(sa("10.0.0.1:80"), Protocol::Tcp),
        keys: vec![ServiceKey::tcp(sa("10.0.0.1:80"))],
        settings: ServiceSettings {
            scheduler: Scheduler::WeightedRoundRobin,
            flags: ServiceFlags::empty(),
            persistence_timeout: None,
            persistence_granularity: None,
        },
        quorum: 1,
        hysteresis: 0,
        sorry: None,
        omega: false,
        real_servers,
    }
}

fn sorry(inhibit: bool) -> SorryServer {
    SorryServer {
        addr: sa("10.0.0.9:80"),
        forward: ForwardMethod::Masquerade,
        weight: 1,
        inhibit,
    }
}

fn config(vss: Vec<VirtualServerConf>) -> Config {
    Config {
        global: Global::default(),
        virtual_servers: vss,
        notices: Vec::new(),
    }
}

/// The pool of the first service: (address, weight), sorted.
fn pool(l: &Lvs) -> Vec<(String, u32)> {
    let table = l.table();
    let mut v: Vec<(String, u32)> = table[0]
        .1
        .iter()
        .map(|d: &RealServer| (d.addr.to_string(), d.weight))
        .collect();
    v.sort();
    v
}

fn p(entries: &[(&str, u32)]) -> Vec<(String, u32)> {
    let mut v: Vec<(String, u32)> = entries.iter().map(|(a, w)| (a.to_string(), *w)).collect();
    v.sort();
    v
}

fn check(l: &mut Lvs, rs: usize, up: bool) -> Vec<String> {
    l.checker(CheckerResult {
        vs: 0,
        rs,
        checker: 0,
        up,
    })
}

const VS: &str = "[10.0.0.1]:tcp:80";

#[test]
fn a_failed_server_leaves_the_pool_and_comes_back() {
    let c = config(vec![vs(vec![
        rs("10.0.0.2:80", 3, false, false),
        rs("10.0.0.3:80", 1, false, false),
    ])]);
    let (mut l, log) = Lvs::start(&c);
    assert_eq!(log, vec![format!("Gained quorum 1+0=1 <= 4 for VS {VS}")]);
    assert_eq!(pool(&l), p(&[("10.0.0.2:80", 3), ("10.0.0.3:80", 1)]));
    assert_eq!(
        check(&mut l, 0, false),
        vec![format!("Removing service [10.0.0.2]:tcp:80 from VS {VS}")]
    );
    assert_eq!(pool(&l), p(&[("10.0.0.3:80", 1)]));
    // The same result again changes nothing and logs nothing.
    assert!(check(&mut l, 0, false).is_empty());
    assert_eq!(
        check(&mut l, 0, true),
        vec![format!("Adding service [10.0.0.2]:tcp:80 to VS {VS}")]
    );
    assert_eq!(pool(&l), p(&[("10.0.0.2:80", 3), ("10.0.0.3:80", 1)]));
}

#[test]
fn alpha_servers_join_only_after_a_success() {
    let c = config(vec![vs(vec![
        rs("10.0.0.2:80", 1, false, true),
        rs("10.0.0.3:80", 1, false, false),
    ])]);
    let (mut l, _) = Lvs::start(&c);
    assert_eq!(pool(&l), p(&[("10.0.0.3:80", 1)]));
    // A failure of a checker that starts failed is no change.
    assert!(check(&mut l, 0, false).is_empty());
    check(&mut l, 0, true);
    assert_eq!(pool(&l), p(&[("10.0.0.2:80", 1), ("10.0.0.3:80", 1)]));
}

#[test]
fn an_inhibited_server_stays_at_weight_zero() {
    let c = config(vec![vs(vec![
        rs("10.0.0.2:80", 5, true, false),
        rs("10.0.0.3:80", 2, true, true),
    ])]);
    let (mut l, _) = Lvs::start(&c);
    // An alpha server with inhibit_on_failure is added at weight 0.
    assert_eq!(pool(&l), p(&[("10.0.0.2:80", 5), ("10.0.0.3:80", 0)]));
    // The only alive server gone: the live weight is 0, the quorum lost.
    assert_eq!(
        check(&mut l, 0, false),
        vec![
            format!("Disabling service [10.0.0.2]:tcp:80 of VS {VS}"),
            format!("Lost quorum 1-0=1 > 0 for VS {VS}"),
        ]
    );
    assert_eq!(pool(&l), p(&[("10.0.0.2:80", 0), ("10.0.0.3:80", 0)]));
    let log = check(&mut l, 1, true);
    assert_eq!(
        log[0],
        format!("Enabling service [10.0.0.3]:tcp:80 of VS {VS}")
    );
    assert_eq!(pool(&l), p(&[("10.0.0.2:80", 0), ("10.0.0.3:80", 2)]));
    assert_eq!(
        l.stop_log(),
        vec![
            format!("Shutting down (inhibited) service [10.0.0.2]:tcp:80 from VS {VS}"),
            format!("Shutting down service [10.0.0.3]:tcp:80 from VS {VS}"),
        ]
    );
}

#[test]
fn the_sorry_server_stands_in_while_the_quorum_is_lost() {
    let mut v = vs(vec![
        rs("10.0.0.2:80", 1, false, false),
        rs("10.0.0.3:80", 1, false, false),
    ]);
    v.quorum = 2;
    v.sorry = Some(sorry(false));
    let (mut l, log) = Lvs::start(&config(vec![v]));
    assert_eq!(log, vec![format!("Gained quorum 2+0=2 <= 2 for VS {VS}")]);
    assert_eq!(pool(&l), p(&[("10.0.0.2:80", 1), ("10.0.0.3:80", 1)]));
    assert_eq!(
        check(&mut l, 0, false),
        vec![
            format!("Removing service [10.0.0.2]:tcp:80 from VS {VS}"),
            format!("Lost quorum 2-0=2 > 1 for VS {VS}"),
            format!("Adding sorry server [10.0.0.9]:tcp:80 to VS {VS}"),
            format!("Removing alive servers from the pool for VS {VS}"),
        ]
    );
    assert_eq!(pool(&l), p(&[("10.0.0.9:80", 1)]));
    // While the sorry server stands in, a server that comes back is not
    // added until the quorum is.
    assert_eq!(
        check(&mut l, 0, true),
        vec![
            format!("Adding service [10.0.0.2]:tcp:80 to VS {VS}"),
            format!("Gained quorum 2+0=2 <= 2 for VS {VS}"),
            format!("Removing sorry server [10.0.0.9]:tcp:80 from VS {VS}"),
            format!("Adding alive servers to the pool for VS {VS}"),
        ]
    );
    assert_eq!(pool(&l), p(&[("10.0.0.2:80", 1), ("10.0.0.3:80", 1)]));
}

#[test]
fn an_inhibited_sorry_server_waits_at_weight_zero() {
    let mut v = vs(vec![rs("10.0.0.2:80", 1, false, false)]);
    v.sorry = Some(sorry(true));
    let (mut l, _) = Lvs::start(&config(vec![v]));
    assert_eq!(pool(&l), p(&[("10.0.0.2:80", 1), ("10.0.0.9:80", 0)]));
    let log = check(&mut l, 0, false);
    assert!(
        log.contains(&format!(
            "Enabling sorry server [10.0.0.9]:tcp:80 to VS {VS}"
        )),
        "{log:?}"
    );
    assert_eq!(pool(&l), p(&[("10.0.0.9:80", 1)]));
    let log = check(&mut l, 0, true);
    assert!(
        log.contains(&format!(
            "Disabling sorry server [10.0.0.9]:tcp:80 from VS {VS}"
        )),
        "{log:?}"
    );
    assert_eq!(pool(&l), p(&[("10.0.0.2:80", 1), ("10.0.0.9:80", 0)]));
}

#[test]
fn starting_without_quorum_puts_the_sorry_server_in() {
    let mut v = vs(vec![rs("10.0.0.2:80", 1, false, true)]);
    v.sorry = Some(sorry(false));
    let (l, log) = Lvs::start(&config(vec![v]));
    assert_eq!(
        log,
        vec![
            format!("Starting with quorum down 1-0=1 > 0 for VS {VS}"),
            format!("Adding sorry server [10.0.0.9]:tcp:80 to VS {VS}"),
            format!("Removing alive servers from the pool for VS {VS}"),
        ]
    );
    assert_eq!(pool(&l), p(&[("10.0.0.9:80", 1)]));
}

#[test]
fn hysteresis_keeps_the_quorum_state_until_the_far_threshold() {
    let mut v = vs(vec![
        rs("10.0.0.2:80", 1, false, false),
        rs("10.0.0.3:80", 1, false, false),
        rs("10.0.0.4:80", 2, false, false),
    ]);
    v.quorum = 3;
    v.hysteresis = 1;
    v.sorry = Some(sorry(false));
    let (mut l, _) = Lvs::start(&config(vec![v]));
    // 4 alive: up (needed 3 + 1 at start).
    assert_eq!(pool(&l).len(), 3);
    // 3, then 2: still up (lost below 3 - 1).
    check(&mut l, 0, false);
    check(&mut l, 1, false);
    assert_eq!(pool(&l), p(&[("10.0.0.4:80", 2)]));
    // 0: lost.
    check(&mut l, 2, false);
    assert_eq!(pool(&l), p(&[("10.0.0.9:80", 1)]));
    // 2, then 3: still down (gained at 3 + 1).
    check(&mut l, 2, true);
    check(&mut l, 0, true);
    assert_eq!(pool(&l), p(&[("10.0.0.9:80", 1)]));
    let log = check(&mut l, 1, true);
    assert!(
        log.contains(&format!("Gained quorum 3+1=4 <= 4 for VS {VS}")),
        "{log:?}"
    );
    assert_eq!(pool(&l).len(), 3);
}

#[test]
fn dynamic_weights_change_the_pool_and_the_quorum() {
    let mut v = vs(vec![rs("10.0.0.2:80", 3, false, false)]);
    v.quorum = 2;
    v.sorry = Some(sorry(false));
    let (mut l, _) = Lvs::start(&config(vec![v]));
    assert_eq!(pool(&l), p(&[("10.0.0.2:80", 3)]));
    let log = l.dynamic_weight(0, 0, Some(7));
    assert_eq!(
        log,
        vec![format!(
            "Changing weight from 3 to 7 for active service [10.0.0.2]:tcp:80 of VS {VS}"
        )]
    );
    assert_eq!(pool(&l), p(&[("10.0.0.2:80", 7)]));
    assert!(l.dynamic_weight(0, 0, Some(7)).is_empty());
    // Weight 1 is below the quorum of 2: the sorry server stands in.
    let log = l.dynamic_weight(0, 0, Some(1));
    assert!(log.iter().any(|s| s.starts_with("Lost quorum")), "{log:?}");
    assert_eq!(pool(&l), p(&[("10.0.0.9:80", 1)]));
    // Back to the configured weight.
    l.dynamic_weight(0, 0, None);
    assert_eq!(pool(&l), p(&[("10.0.0.2:80", 3)]));
}

#[test]
fn several_checkers_must_all_pass() {
    let mut r = rs("10.0.0.2:80", 1, false, false);
    r.checkers.push(checker(false));
    let (mut l, _) = Lvs::start(&config(vec![vs(vec![r])]));
    let down = |l: &mut Lvs, checker, up| {
        l.checker(CheckerResult {
            vs: 0,
            rs: 0,
            checker,
            up,
        })
    };
    down(&mut l, 0, false);
    down(&mut l, 1, false);
    assert!(pool(&l).is_empty());
    // One of two back: still out.
    assert!(down(&mut l, 0, true).is_empty());
    assert!(pool(&l).is_empty());
    down(&mut l, 1, true);
    assert_eq!(pool(&l), p(&[("10.0.0.2:80", 1)]));
}

#[test]
fn a_group_gives_every_entry_the_same_pool_and_fwmarks_log_none() {
    let mut v = vs(vec![rs("10.0.0.2:80", 1, false, false)]);
    v.id = VsId::Group("web".into());
    v.keys = vec![
        ServiceKey::tcp(sa("10.0.0.1:80")),
        ServiceKey::tcp(sa("10.0.0.5:80")),
    ];
    let (mut l, _) = Lvs::start(&config(vec![v]));
    let t = l.table();
    assert_eq!(t.len(), 2);
    assert_eq!(t[0].1, t[1].1);
    assert_eq!(
        check(&mut l, 0, false)[0],
        "Removing service [10.0.0.2]:tcp:80 from VS [web]:0"
    );
    let mut f = vs(vec![rs("10.0.0.2:80", 1, false, false)]);
    f.id = VsId::Fwmark(7);
    f.keys = vec![ServiceKey::fwmark(7, ipvsctl::model::AddressFamily::Inet)];
    let (mut l, _) = Lvs::start(&config(vec![f]));
    assert_eq!(
        check(&mut l, 0, false)[0],
        "Removing service [10.0.0.2]:none:80 from VS FWM 7"
    );
}

/// A pool's shape: servers (weight, inhibit, alpha) and the block's
/// quorum, hysteresis and sorry server.
fn arb_case() -> impl Strategy<Value = (VirtualServerConf, Vec<(usize, bool, Option<u32>)>)> {
    (
        prop::collection::vec((0u32..4, any::<bool>(), any::<bool>()), 1..5),
        0u32..5,
        0u32..3,
        prop::option::of(any::<bool>()),
    )
        .prop_flat_map(|(servers, quorum, hysteresis, sorry_inhibit)| {
            let n = servers.len();
            let mut v = vs(servers
                .iter()
                .enumerate()
                .map(|(i, (w, inhibit, alpha))| {
                    rs(&format!("10.0.0.{}:80", i + 2), *w, *inhibit, *alpha)
                })
                .collect());
            v.quorum = quorum;
            v.hysteresis = hysteresis;
            v.sorry = sorry_inhibit.map(sorry);
            let events =
                prop::collection::vec((0..n, any::<bool>(), prop::option::of(0u32..5)), 0..40);
            (Just(v), events)
        })
}

proptest! {
    /// Whatever the results: an inhibited server is always in the pool; a
    /// server out of service is never in it at a weight above 0; while the
    /// sorry server stands in (in the pool with a weight), no real server
    /// serves; with the quorum up every alive server is in the pool at its
    /// weight and the sorry server is out (or at 0).
    #[test]
    fn pools_keep_keepalived_invariants((v, events) in arb_case()) {
        let (mut l, _) = Lvs::start(&config(vec![v.clone()]));
        let mut up: Vec<bool> = v.real_servers.iter().map(|r| !r.checkers[0].alpha).collect();
        let mut weight: Vec<u32> = v.real_servers.iter().map(|r| r.weight).collect();
        for (rs, ok, dynamic) in events {
            match dynamic {
                Some(w) => { l.dynamic_weight(0, rs, Some(w)); weight[rs] = w; }
                None => { check(&mut l, rs, ok); up[rs] = ok; }
            }
            let table = l.table();
            let dests = &table[0].1;
            let find = |a: SocketAddr| dests.iter().find(|d| d.addr == a).map(|d| d.weight);
            let sorry_serving = v.sorry.as_ref().and_then(|s| find(s.addr)).is_some_and(|w| w > 0);
            let live: u32 = (0..up.len()).filter(|&i| up[i]).map(|i| weight[i]).sum();
            for (i, r) in v.real_servers.iter().enumerate() {
                let w = find(r.addr);
                if r.inhibit {
                    prop_assert!(w.is_some(), "inhibited server {} left the pool", r.addr);
                }
                if !up[i] {
                    prop_assert!(w.unwrap_or(0) == 0, "server {} down but serving", r.addr);
                }
                if sorry_serving {
                    prop_assert!(w.unwrap_or(0) == 0, "server {} serving beside the sorry server", r.addr);
                }
            }
            // Well above the threshold the quorum is up whatever came before.
            if live >= v.quorum + v.hysteresis && live > 0 {
                prop_assert!(!sorry_serving);
                for (i, r) in v.real_servers.iter().enumerate() {
                    if up[i] {
                        prop_assert_eq!(find(r.addr), Some(weight[i]));
                    }
                }
            }
        }
    }
}
