//! Pure tests of the sync plan: applying the plan to the observed state, in
//! order, yields the desired state within scope and leaves everything out of
//! scope untouched. No kernel.

mod strategies;

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;

use ipvsctl::batch::Write;
use ipvsctl::model::{ConnCounts, RealServer, ServiceKey, VirtualServer};
use ipvsctl::sync::{
    self, DesiredError, DesiredState, Observed, ObservedDest, ObservedService, PlanOptions, Scope,
};
use proptest::prelude::*;

/// A plain model of the kernel's table: what the plan's ops do to it. Every
/// op must make sense where it stands (the service exists before its real
/// servers are added, nothing is added twice or deleted when absent).
type Table = BTreeMap<ServiceKey, (VirtualServer, BTreeMap<SocketAddr, RealServer>)>;

fn table_of(o: &Observed) -> Table {
    o.services()
        .map(|s| {
            (
                s.service.key,
                (
                    s.service.clone(),
                    s.destinations()
                        .map(|d| (d.server.addr, d.server))
                        .collect(),
                ),
            )
        })
        .collect()
}

fn table_of_desired(d: &DesiredState) -> Table {
    d.services()
        .iter()
        .map(|s| {
            (
                s.service().key,
                (
                    s.service().clone(),
                    s.destinations().iter().map(|r| (r.addr, *r)).collect(),
                ),
            )
        })
        .collect()
}

fn simulate(mut t: Table, ops: &[Write]) -> Result<Table, String> {
    for op in ops {
        match op {
            Write::AddService(vs) => {
                if t.insert(vs.key, (vs.clone(), BTreeMap::new())).is_some() {
                    return Err(format!("{op:?}: service exists"));
                }
            }
            Write::UpdateService(vs) => {
                let s = t.get_mut(&vs.key).ok_or(format!("{op:?}: no service"))?;
                if s.0 == *vs {
                    return Err(format!("{op:?}: update that changes nothing"));
                }
                s.0 = vs.clone();
            }
            Write::DeleteService(k) => {
                t.remove(k).ok_or(format!("{op:?}: no service"))?;
            }
            Write::AddDestination(k, rs) => {
                let s = t.get_mut(k).ok_or(format!("{op:?}: no service"))?;
                if s.1.insert(rs.addr, *rs).is_some() {
                    return Err(format!("{op:?}: real server exists"));
                }
            }
            Write::UpdateDestination(k, rs) => {
                let s = t.get_mut(k).ok_or(format!("{op:?}: no service"))?;
                let d = s.1.get_mut(&rs.addr).ok_or(format!("{op:?}: no server"))?;
                if *d == *rs {
                    return Err(format!("{op:?}: update that changes nothing"));
                }
                *d = *rs;
            }
            Write::DeleteDestination(k, a) => {
                let s = t.get_mut(k).ok_or(format!("{op:?}: no service"))?;
                s.1.remove(a).ok_or(format!("{op:?}: no server"))?;
            }
            other => return Err(format!("{other:?}: a write this simulation does not know")),
        }
    }
    Ok(t)
}

/// One service key with a desired and an observed version (either may be
/// absent), real servers drawn from one pool so that they overlap.
#[derive(Debug, Clone)]
struct Case {
    desired: Option<(VirtualServer, Vec<RealServer>)>,
    observed: Option<(VirtualServer, Vec<ObservedDest>)>,
}

fn case() -> impl Strategy<Value = Case> {
    strategies::virtual_server(true).prop_flat_map(|vs| {
        let fam = vs.family();
        (
            Just(vs),
            proptest::collection::vec(strategies::real_server(fam), 0..6),
            proptest::collection::vec((any::<bool>(), any::<bool>(), 0u8..4, 0u8..3), 6),
            0u8..3,
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(vs, pool, picks, presence, cfg_differs, _)| {
                let mut seen = HashSet::new();
                let pool: Vec<RealServer> =
                    pool.into_iter().filter(|r| seen.insert(r.addr)).collect();
                let mut want = Vec::new();
                let mut have = Vec::new();
                for (rs, (in_want, in_have, change, conns)) in pool.iter().zip(picks) {
                    if in_want {
                        want.push(*rs);
                    }
                    if in_have {
                        let mut h = *rs;
                        match change {
                            1 => h.weight = h.weight.wrapping_add(1) % (i32::MAX as u32),
                            2 => h.weight = 0,
                            _ => {}
                        }
                        have.push(ObservedDest::new(
                            h,
                            match conns {
                                0 => None,
                                1 => Some(ConnCounts::default()),
                                _ => Some(ConnCounts::new(3, 1, 0)),
                            },
                        ));
                    }
                }
                let mut observed_vs = vs.clone();
                if cfg_differs {
                    observed_vs.timeout = if vs.timeout == 0 { 7 } else { 0 };
                }
                Case {
                    desired: (presence != 1).then(|| (vs.clone(), want)),
                    observed: (presence != 0).then_some((observed_vs, have)),
                }
            })
    })
}

fn cases() -> impl Strategy<Value = Vec<Case>> {
    proptest::collection::vec(case(), 0..10).prop_map(|v| {
        let mut seen = HashSet::new();
        v.into_iter()
            .filter(|c| {
                let key = c
                    .desired
                    .as_ref()
                    .map(|d| d.0.key)
                    .or(c.observed.as_ref().map(|o| o.0.key));
                key.is_some_and(|k| seen.insert(k))
            })
            .collect()
    })
}

fn build(cases: &[Case]) -> (DesiredState, Observed) {
    let mut d = DesiredState::new();
    let mut o = Observed::new();
    for c in cases {
        if let Some((vs, rs)) = &c.desired {
            d.insert(vs.clone(), rs.iter().copied())
                .expect("valid by construction");
        }
        if let Some((vs, ds)) = &c.observed {
            o.insert(ObservedService::new(vs.clone(), ds.iter().copied()));
        }
    }
    (d, o)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Scope::All: the plan turns the observed table into the desired one
    /// exactly, and planning again from the result does nothing.
    #[test]
    fn plan_reaches_desired_state(cases in cases()) {
        let (desired, observed) = build(&cases);
        let p = sync::plan(&desired, &observed, &Scope::All, &HashSet::new(), PlanOptions::default());
        let after = simulate(table_of(&observed), &p.writes).map_err(TestCaseError::fail)?;
        prop_assert_eq!(&after, &table_of_desired(&desired));
        prop_assert_eq!(p.writes.len(), p.counts.services.changes() + p.counts.destinations.changes());
        // Idempotent: the desired state observed needs nothing.
        let mut again = Observed::new();
        for s in desired.services() {
            again.insert(ObservedService::new(
                s.service().clone(),
                s.destinations().iter().map(|r| ObservedDest::new(*r, None)),
            ));
        }
        let p2 = sync::plan(&desired, &again, &Scope::All, &HashSet::new(), PlanOptions::default());
        prop_assert!(p2.is_empty(), "{:?}", p2.writes);
        prop_assert_eq!(p2.counts.services.unchanged, desired.len());
        prop_assert_eq!(p2.counts.destinations.unchanged, desired.destination_count());
    }

    /// Scope::Owned with nothing owned: desired services reach their state;
    /// every other observed service is untouched (no op names it).
    #[test]
    fn out_of_scope_is_untouched(cases in cases(), owned_mask in any::<u16>()) {
        let (desired, observed) = build(&cases);
        // Own some of the observed-only services.
        let mut owned = HashSet::new();
        for (i, k) in observed.keys().filter(|k| !desired.contains(k)).enumerate() {
            if owned_mask & (1 << (i % 16)) != 0 {
                owned.insert(*k);
            }
        }
        let p = sync::plan(&desired, &observed, &Scope::Owned, &owned, PlanOptions::default());
        let after = simulate(table_of(&observed), &p.writes).map_err(TestCaseError::fail)?;
        let mut expected = table_of_desired(&desired);
        for (k, v) in table_of(&observed) {
            if !desired.contains(&k) && !owned.contains(&k) {
                expected.insert(k, v);
            }
        }
        prop_assert_eq!(after, expected);
        for op in &p.writes {
            let k = *op.operation().service().expect("every write of a plan names its service");
            prop_assert!(desired.contains(&k) || owned.contains(&k), "{:?} touches a foreign service", op);
        }
    }

    /// A filter scope deletes exactly the undesired services it accepts.
    #[test]
    fn filter_scope(cases in cases()) {
        let (desired, observed) = build(&cases);
        let scope = Scope::filter(|k: &ServiceKey| matches!(k, ServiceKey::FwMark { .. }));
        let p = sync::plan(&desired, &observed, &scope, &HashSet::new(), PlanOptions::default());
        let deleted: HashSet<ServiceKey> = p.writes.iter().filter_map(|op| match op {
            Write::DeleteService(k) => Some(*k),
            _ => None,
        }).collect();
        let expected: HashSet<ServiceKey> = observed.keys()
            .filter(|k| !desired.contains(k) && matches!(k, ServiceKey::FwMark { .. }))
            .copied().collect();
        prop_assert_eq!(deleted, expected);
    }

    /// Graceful termination: an undesired real server of a non-UDP service
    /// is deleted only when known idle; otherwise set to weight 0 (once) and
    /// kept. Everything else reaches the desired state.
    #[test]
    fn graceful_termination(cases in cases()) {
        let (desired, observed) = build(&cases);
        let opts = PlanOptions::default().with_graceful_termination(true);
        let p = sync::plan(&desired, &observed, &Scope::All, &HashSet::new(), opts);
        let after = simulate(table_of(&observed), &p.writes).map_err(TestCaseError::fail)?;
        let mut draining = 0;
        for (k, (vs, dests)) in &after {
            let Some(ds) = desired.get(k) else {
                return Err(TestCaseError::fail(format!("{k} not desired but kept")));
            };
            prop_assert_eq!(vs, ds.service());
            let udp = matches!(k, ServiceKey::Addr { protocol: ipvsctl::model::Protocol::Udp, .. });
            for (addr, rs) in dests {
                match ds.destinations().iter().find(|r| r.addr == *addr) {
                    Some(want) => prop_assert_eq!(rs, want),
                    None => {
                        prop_assert!(!udp, "UDP real server {} kept", addr);
                        prop_assert_eq!(rs.weight, 0);
                        let conns = observed.get(k).and_then(|s| s.destination(addr)).and_then(|d| d.conns);
                        prop_assert!(conns != Some(ConnCounts::default()), "idle {} kept", addr);
                        draining += 1;
                    }
                }
            }
            for want in ds.destinations() {
                prop_assert_eq!(dests.get(&want.addr), Some(want));
            }
        }
        prop_assert_eq!(draining, p.counts.draining + p.counts.drain_started);
    }
}

#[test]
fn order_is_service_then_destinations_then_deletes() {
    let k1 = ServiceKey::tcp("10.96.0.1:80".parse().unwrap());
    let k2 = ServiceKey::tcp("10.96.0.2:80".parse().unwrap());
    let gone = ServiceKey::udp("10.96.0.3:53".parse().unwrap());
    let a: SocketAddr = "10.244.0.1:80".parse().unwrap();
    let b: SocketAddr = "10.244.0.2:80".parse().unwrap();
    let mut desired = DesiredState::new();
    desired
        .insert(
            VirtualServer::new(k1),
            [RealServer::new(a), RealServer::new(b)],
        )
        .unwrap();
    desired
        .insert(VirtualServer::new(k2), [RealServer::new(b).with_weight(5)])
        .unwrap();
    let mut observed = Observed::new();
    observed.insert(ObservedService::new(
        VirtualServer::new(k2),
        [
            ObservedDest::new(RealServer::new(a), None),
            ObservedDest::new(RealServer::new(b), None),
        ],
    ));
    observed.insert(ObservedService::new(VirtualServer::new(gone), []));
    let p = sync::plan(
        &desired,
        &observed,
        &Scope::All,
        &HashSet::new(),
        PlanOptions::default(),
    );
    assert_eq!(
        p.writes,
        vec![
            Write::AddService(VirtualServer::new(k1)),
            Write::AddDestination(k1, RealServer::new(a)),
            Write::AddDestination(k1, RealServer::new(b)),
            Write::DeleteDestination(k2, a),
            Write::UpdateDestination(k2, RealServer::new(b).with_weight(5)),
            Write::DeleteService(gone),
        ]
    );
    assert_eq!(p.counts.services.added, 1);
    assert_eq!(p.counts.services.unchanged, 1);
    assert_eq!(p.counts.services.deleted, 1);
    assert_eq!(p.counts.destinations.added, 2);
    assert_eq!(p.counts.destinations.updated, 1);
    assert_eq!(p.counts.destinations.deleted, 1);
    // The default scope owns nothing: the foreign UDP service stays.
    let p = sync::plan(
        &desired,
        &observed,
        &Scope::Owned,
        &HashSet::new(),
        PlanOptions::default(),
    );
    assert!(!p.writes.contains(&Write::DeleteService(gone)));
}

#[test]
fn graceful_drain_then_delete() {
    let k = ServiceKey::tcp("10.96.0.1:80".parse().unwrap());
    let a: SocketAddr = "10.244.0.1:80".parse().unwrap();
    let mut desired = DesiredState::new();
    desired.insert(VirtualServer::new(k), []).unwrap();
    let opts = PlanOptions::default().with_graceful_termination(true);
    let obs = |weight, conns| {
        let mut o = Observed::new();
        o.insert(ObservedService::new(
            VirtualServer::new(k),
            [ObservedDest::new(
                RealServer::new(a).with_weight(weight),
                conns,
            )],
        ));
        o
    };
    let busy = Some(ConnCounts::new(1, 0, 0));
    // Busy at weight 1: drain.
    let p = sync::plan(
        &desired,
        &obs(1, busy),
        &Scope::Owned,
        &HashSet::new(),
        opts,
    );
    assert_eq!(
        p.writes,
        vec![Write::UpdateDestination(
            k,
            RealServer::new(a).with_weight(0)
        )]
    );
    assert_eq!(p.counts.drain_started, 1);
    // Counts unknown: drain too (never delete blind).
    let p = sync::plan(
        &desired,
        &obs(1, None),
        &Scope::Owned,
        &HashSet::new(),
        opts,
    );
    assert_eq!(
        p.writes,
        vec![Write::UpdateDestination(
            k,
            RealServer::new(a).with_weight(0)
        )]
    );
    // Busy at weight 0: wait.
    let p = sync::plan(
        &desired,
        &obs(0, busy),
        &Scope::Owned,
        &HashSet::new(),
        opts,
    );
    assert!(p.is_empty());
    assert_eq!(p.counts.draining, 1);
    // Only persistence templates left: active and inactive are 0, delete.
    let templates = Some(ConnCounts::new(0, 0, 4));
    let p = sync::plan(
        &desired,
        &obs(0, templates),
        &Scope::Owned,
        &HashSet::new(),
        opts,
    );
    assert_eq!(p.writes, vec![Write::DeleteDestination(k, a)]);
    // Back in the desired state while draining: weight restored.
    let mut back = DesiredState::new();
    back.insert(VirtualServer::new(k), [RealServer::new(a)])
        .unwrap();
    let p = sync::plan(&back, &obs(0, busy), &Scope::Owned, &HashSet::new(), opts);
    assert_eq!(
        p.writes,
        vec![Write::UpdateDestination(k, RealServer::new(a))]
    );
    // UDP: deleted at once.
    let u = ServiceKey::udp("10.96.0.1:53".parse().unwrap());
    let mut d = DesiredState::new();
    d.insert(VirtualServer::new(u), []).unwrap();
    let mut o = Observed::new();
    o.insert(ObservedService::new(
        VirtualServer::new(u),
        [ObservedDest::new(RealServer::new(a), busy)],
    ));
    let p = sync::plan(&d, &o, &Scope::Owned, &HashSet::new(), opts);
    assert_eq!(p.writes, vec![Write::DeleteDestination(u, a)]);
}

#[test]
fn desired_state_refuses_bad_input() {
    let k = ServiceKey::tcp("10.96.0.1:80".parse().unwrap());
    let a: SocketAddr = "10.244.0.1:80".parse().unwrap();
    let mut d = DesiredState::new();
    assert_eq!(
        d.insert(
            VirtualServer::new(k),
            [RealServer::new(a), RealServer::new(a).with_weight(2)]
        ),
        Err(DesiredError::DuplicateDestination { key: k, server: a })
    );
    assert!(d.is_empty(), "a refused service is not kept");
    let bad = RealServer::new(a).with_weight(u32::MAX);
    assert!(matches!(
        d.insert(VirtualServer::new(k), [bad]),
        Err(DesiredError::InvalidDestination { server, .. }) if server == a
    ));
    let v6: SocketAddr = "[2001:db8::1]:80".parse().unwrap();
    let err = d
        .insert(VirtualServer::new(k), [RealServer::new(v6)])
        .unwrap_err();
    assert!(err.to_string().contains("address family"), "{err}");
    let zero = ServiceKey::fwmark(0, ipvsctl::model::AddressFamily::Inet);
    assert!(matches!(
        d.insert(VirtualServer::new(zero), []),
        Err(DesiredError::InvalidService { .. })
    ));
    let long = VirtualServer::new(k).with_scheduler(ipvsctl::model::Scheduler::from_name(
        "a-very-long-scheduler-name",
    ));
    let err = d.insert(long, []).unwrap_err();
    assert!(err.to_string().contains("scheduler"), "{err}");
    d.insert(VirtualServer::new(k), [RealServer::new(a)])
        .unwrap();
    assert_eq!(
        d.insert(VirtualServer::new(k), []),
        Err(DesiredError::DuplicateService { key: k })
    );
    assert_eq!(d.destination_count(), 1);
}

/// A change to the desired state, drawn against the services of the cases:
/// which case, what kind, which of the case's real servers (a mask over its
/// pool), a weight bump, and whether to sync after it.
#[derive(Debug, Clone)]
struct Change {
    case: usize,
    kind: u8,
    mask: u8,
    bump: u32,
    sync_after: bool,
}

fn changes() -> impl Strategy<Value = Vec<Change>> {
    proptest::collection::vec(
        (0usize..10, 0u8..5, any::<u8>(), 0u32..3, any::<bool>()).prop_map(
            |(case, kind, mask, bump, sync_after)| Change {
                case,
                kind,
                mask,
                bump,
                sync_after,
            },
        ),
        0..24,
    )
}

/// The service of a case and every real server it mentions (valid for it).
fn pool(c: &Case) -> (VirtualServer, Vec<RealServer>) {
    let vs = c
        .desired
        .as_ref()
        .map(|d| d.0.clone())
        .or(c.observed.as_ref().map(|o| o.0.clone()))
        .expect("a case has a service");
    let mut seen = HashSet::new();
    let mut rs: Vec<RealServer> = c
        .desired
        .iter()
        .flat_map(|d| d.1.iter().copied())
        .chain(c.observed.iter().flat_map(|o| o.1.iter().map(|d| d.server)))
        .filter(|r| seen.insert(r.addr))
        .collect();
    rs.sort_by_key(|r| r.addr);
    (vs, rs)
}

/// Applies one change to `d`: refused changes (real servers of a service
/// that is not desired) must leave it as it was.
fn change_desired(d: &mut DesiredState, cases: &[Case], ch: &Change) -> Result<(), TestCaseError> {
    let Some(c) = cases.get(ch.case % cases.len().max(1)) else {
        return Ok(());
    };
    let (vs, pool) = pool(c);
    let key = vs.key;
    let picked = pool
        .iter()
        .enumerate()
        .filter(|(i, _)| ch.mask & (1 << (i % 8)) != 0)
        .map(|(_, r)| r.with_weight((r.weight + ch.bump) % (i32::MAX as u32)));
    let before = d.clone();
    let result = match ch.kind {
        0 => d.upsert(vs, picked).map(drop),
        1 => {
            let was = d.remove(&key).is_some();
            prop_assert_eq!(was, before.contains(&key));
            if !was {
                // Nothing desired changed: nothing recorded.
                prop_assert_eq!(d.changes(), before.changes());
                return Ok(());
            }
            Ok(())
        }
        2 => d.upsert_destinations(&key, picked),
        3 => d
            .remove_destinations(&key, picked.map(|r| r.addr))
            .map(drop),
        _ => {
            let timeout = if vs.timeout == 0 { 1 } else { vs.timeout - 1 };
            d.upsert(vs.with_timeout(timeout), picked)
        }
    };
    match result {
        Ok(()) => prop_assert!(d.changes().contains(&key)),
        Err(DesiredError::UnknownService { key: k }) => {
            prop_assert_eq!(k, key);
            prop_assert!(!before.contains(&key));
            prop_assert_eq!(&*d, &before, "a refused change changed the state");
        }
        Err(e) => return Err(TestCaseError::fail(format!("unexpected refusal: {e}"))),
    }
    Ok(())
}

/// What a syncer does with an acknowledged plan: memory and ownership.
fn acknowledge(memory: &mut Observed, owned: &mut HashSet<ServiceKey>, ops: &[Write]) {
    for op in ops {
        match op {
            Write::AddService(vs) => {
                owned.insert(vs.key);
            }
            Write::DeleteService(k) => {
                owned.remove(k);
            }
            _ => {}
        }
        memory.apply(op);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any sequence of incremental updates, each synced with
    /// `plan_services` of the changed keys and acknowledged into memory,
    /// leaves the memory what a full plan of the final state gives; a full
    /// plan then does nothing. Every op is legal where it stands.
    #[test]
    fn incremental_updates_equal_a_full_plan(cases in cases(), changes in changes()) {
        let (mut desired, observed) = build(&cases);
        // A syncer that adopted everything observed and synced fully.
        let mut owned: HashSet<ServiceKey> = observed.keys().copied().collect();
        let mut memory = observed.clone();
        let first = sync::plan(&desired, &memory, &Scope::Owned, &owned, PlanOptions::default());
        acknowledge(&mut memory, &mut owned, &first.writes);
        desired.clear_changes();
        let start = memory.clone();
        let start_owned = owned.clone();
        let mut table = table_of(&memory);
        for (i, ch) in changes.iter().enumerate() {
            change_desired(&mut desired, &cases, ch)?;
            if ch.sync_after || i + 1 == changes.len() {
                let keys = desired.take_changes();
                let p = sync::plan_services(
                    &desired, &memory, &keys, &Scope::Owned, &owned, PlanOptions::default(),
                );
                prop_assert_eq!(
                    p.writes.len(),
                    p.counts.services.changes() + p.counts.destinations.changes()
                );
                table = simulate(table, &p.writes).map_err(TestCaseError::fail)?;
                acknowledge(&mut memory, &mut owned, &p.writes);
                prop_assert_eq!(&table_of(&memory), &table);
            }
        }
        prop_assert!(desired.changes().is_empty());
        // The full plan of the final state, from where the updates started.
        let mut full = start;
        let mut full_owned = start_owned;
        let p = sync::plan(&desired, &full, &Scope::Owned, &full_owned, PlanOptions::default());
        acknowledge(&mut full, &mut full_owned, &p.writes);
        prop_assert_eq!(table_of(&memory), table_of(&full));
        prop_assert_eq!(&owned, &full_owned);
        prop_assert_eq!(table_of(&memory), table_of_desired(&desired));
        let again = sync::plan(&desired, &memory, &Scope::Owned, &owned, PlanOptions::default());
        prop_assert!(again.is_empty(), "{:?}", again.writes);
    }
}

#[test]
fn desired_state_changes_are_recorded_and_validated() {
    let k = ServiceKey::tcp("10.96.0.1:80".parse().unwrap());
    let other = ServiceKey::tcp("10.96.0.2:80".parse().unwrap());
    let a: SocketAddr = "10.244.0.1:80".parse().unwrap();
    let b: SocketAddr = "10.244.0.2:80".parse().unwrap();
    let mut d = DesiredState::new();
    d.insert(VirtualServer::new(k), [RealServer::new(a)])
        .unwrap();
    d.insert(VirtualServer::new(other), []).unwrap();
    assert_eq!(d.take_changes(), vec![k, other]);
    assert_eq!(
        d.upsert_destinations(&ServiceKey::tcp("10.96.0.3:80".parse().unwrap()), []),
        Err(DesiredError::UnknownService {
            key: ServiceKey::tcp("10.96.0.3:80".parse().unwrap())
        })
    );
    assert_eq!(
        d.upsert_destinations(&k, [RealServer::new(b), RealServer::new(b).with_weight(3)]),
        Err(DesiredError::DuplicateDestination { key: k, server: b })
    );
    let v6: SocketAddr = "[2001:db8::1]:80".parse().unwrap();
    assert!(matches!(
        d.upsert_destinations(&k, [RealServer::new(v6)]),
        Err(DesiredError::InvalidDestination { server, .. }) if server == v6
    ));
    assert!(d.changes().is_empty(), "refused changes are not recorded");
    assert_eq!(d.get(&k).unwrap().destinations(), &[RealServer::new(a)]);
    d.upsert_destinations(&k, [RealServer::new(b), RealServer::new(a).with_weight(5)])
        .unwrap();
    assert_eq!(
        d.get(&k).unwrap().destinations(),
        &[RealServer::new(a).with_weight(5), RealServer::new(b)]
    );
    assert_eq!(d.remove_destinations(&k, [a, v6]), Ok(1));
    assert_eq!(d.changes(), &[k]);
    // Removing moves the last service into the hole; lookups still work.
    d.remove(&k).unwrap();
    assert_eq!(d.services()[0].service().key, other);
    assert!(d.get(&k).is_none() && d.get(&other).is_some());
    d.upsert(VirtualServer::new(k), [RealServer::new(b)])
        .unwrap();
    d.upsert(VirtualServer::new(k).with_timeout(9), []).unwrap();
    assert_eq!(d.get(&k).unwrap().service().timeout, 9);
    assert!(d.get(&k).unwrap().destinations().is_empty());
    assert_eq!(d.len(), 2);
    assert_eq!(d.changes(), &[k]);
}

#[test]
fn a_few_changes_after_a_whole_table_are_recorded_once_each() {
    // The record of a state built service by service is as large as the
    // table; later takes of a few changes forget them one by one.
    let key = |i: u32| ServiceKey::fwmark(i + 1, ipvsctl::model::AddressFamily::Inet);
    let mut d = DesiredState::new();
    for i in 0..1000 {
        d.insert(VirtualServer::new(key(i)), []).unwrap();
    }
    assert_eq!(d.take_changes().len(), 1000);
    for round in 0..50u32 {
        let (a, b) = (key(round), key(999 - round));
        d.upsert(VirtualServer::new(a).with_timeout(round), [])
            .unwrap();
        d.upsert(VirtualServer::new(b).with_timeout(round), [])
            .unwrap();
        d.upsert(VirtualServer::new(a), []).unwrap();
        assert_eq!(d.take_changes(), vec![a, b], "round {round}");
        assert!(d.changes().is_empty());
    }
    d.upsert(VirtualServer::new(key(7)), []).unwrap();
    d.clear_changes();
    d.upsert(VirtualServer::new(key(7)), []).unwrap();
    assert_eq!(d.changes(), &[key(7)], "a cleared change is recorded again");
}

#[test]
fn plan_services_counts_a_repeated_key_once_in_short_and_long_lists() {
    let key = |i: u16| ServiceKey::tcp(SocketAddr::from(([10, 96, (i >> 8) as u8, i as u8], 80)));
    let mut desired = DesiredState::new();
    for i in 0..40 {
        desired
            .insert(
                VirtualServer::new(key(i)),
                [RealServer::new(SocketAddr::from((
                    [10, 244, 0, i as u8],
                    8080,
                )))],
            )
            .unwrap();
    }
    let observed = Observed::new();
    let owned = HashSet::new();
    let plan = |keys: &[ServiceKey]| {
        sync::plan_services(
            &desired,
            &observed,
            keys,
            &Scope::Owned,
            &owned,
            PlanOptions::default(),
        )
    };
    // Below and above the length from which a set finds the repeats.
    for n in [3u16, 40] {
        let once: Vec<ServiceKey> = (0..n).map(key).collect();
        let mut twice = once.clone();
        twice.extend(once.iter().rev());
        twice.insert(1, once[0]);
        assert_eq!(plan(&twice), plan(&once), "{n} keys");
        assert_eq!(plan(&once).writes.len(), 2 * usize::from(n));
    }
}
