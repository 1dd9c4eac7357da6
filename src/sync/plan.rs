//! The plan: pure code that turns (desired, observed, scope, options) into
//! the ordered write operations that make the kernel equal the desired state.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::drain::DrainsAt;
use super::key_hash::KeyHashing;
use super::packed::{PackedDest, addr_order};
use super::parts::Fill;
use super::state::{DesiredService, DesiredState, Observed, ObservedDest, ObservedService};
use crate::batch::Write;
use crate::model::{Protocol, RealServer, ServiceKey};

/// Which services of the namespace a sync manages.
///
/// A sync manages the services its scope includes and the desired services
/// it creates; everything else is never read in full, changed or deleted, so
/// keepalived, Docker or a second proxy can share the namespace. A desired
/// service whose key already exists outside the scope is not taken over: the
/// [`Syncer`](super::Syncer) reports it as a
/// [`SyncConflict`](super::SyncConflict) and leaves it alone until it is
/// adopted ([`Syncer::adopt`](super::Syncer::adopt)).
///
/// The pure [`plan()`] has no such check: it plans every desired service it
/// is given, against `observed`.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum Scope {
    /// The safe default: only services this syncer owns, because it created
    /// them (the kernel acknowledged its add) or adopted them. A service
    /// that existed before, with a desired key, is a conflict and stays as
    /// it is. A new syncer (a restarted process) owns nothing until it
    /// adopts keys, so services that left the desired state while it was not
    /// running are left alone; use [`Scope::Filter`] to clean those up.
    #[default]
    Owned,
    /// Services this syncer owns (as [`Scope::Owned`]) and every service
    /// the predicate accepts (for example an address range, a port range or
    /// a firewall-mark range reserved for the caller): those are the
    /// caller's, and an existing one with a desired key is taken over.
    Filter(Arc<dyn Fn(&ServiceKey) -> bool + Send + Sync>),
    /// Every service in the namespace: for a namespace the caller owns
    /// entirely. Anything not desired is deleted, and existing services
    /// with desired keys are taken over.
    All,
}

impl Scope {
    /// A [`Scope::Filter`] from a closure.
    ///
    /// ```
    /// use ipvsctl::model::ServiceKey;
    /// use ipvsctl::sync::Scope;
    /// use std::collections::HashSet;
    /// // Everything in the 10.96.0.0/12 service range.
    /// let scope = Scope::filter(|key: &ServiceKey| match key {
    ///     ServiceKey::Addr { addr, .. } => matches!(addr.ip(),
    ///         std::net::IpAddr::V4(ip) if ip.octets()[0] == 10 && ip.octets()[1] & 0xf0 == 96),
    ///     ServiceKey::FwMark { .. } => false,
    /// });
    /// let key = ServiceKey::tcp("10.96.3.4:80".parse().unwrap());
    /// assert!(scope.includes(&key, &HashSet::new()));
    /// ```
    pub fn filter(f: impl Fn(&ServiceKey) -> bool + Send + Sync + 'static) -> Self {
        Scope::Filter(Arc::new(f))
    }

    /// Whether a service that is not desired is managed (may be deleted),
    /// given the keys the syncer owns (a set with any hasher, such as
    /// [`Ledger::owned`](super::Ledger::owned)).
    pub fn includes<S: BuildHasher>(
        &self,
        key: &ServiceKey,
        owned: &HashSet<ServiceKey, S>,
    ) -> bool {
        self.includes_known(key, owned.contains(key))
    }

    /// [`Scope::includes`] for a key known to be owned (`owned`) or not.
    pub(crate) fn includes_known(&self, key: &ServiceKey, owned: bool) -> bool {
        match self {
            Scope::Owned => owned,
            Scope::Filter(f) => owned || f(key),
            Scope::All => true,
        }
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Owned => f.write_str("Owned"),
            Scope::Filter(_) => f.write_str("Filter(..)"),
            Scope::All => f.write_str("All"),
        }
    }
}

/// Options of a plan: [`PlanOptions::default`] and the `with_*` methods
/// (`#[non_exhaustive]`, so options can be added).
///
/// ```
/// use std::time::Duration;
/// use ipvsctl::sync::PlanOptions;
/// let options = PlanOptions::default()
///     .with_graceful_termination(true)
///     .with_max_drain(Duration::from_secs(30))
///     .with_keep_weights(true);
/// assert!(options.graceful_termination);
/// assert_eq!(options.max_drain, Some(Duration::from_secs(30)));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlanOptions {
    /// Graceful termination, as kube-proxy does it: a real server that left
    /// the desired state is first set to weight 0 and deleted only once its
    /// active and inactive connection counts are both 0, on a later sync,
    /// or once its drain time ([`PlanOptions::max_drain`]) has passed.
    /// Applies to every service except UDP ones (UDP has no connection state
    /// worth draining; its real servers are deleted at once). Real servers
    /// of a service that left the desired state go with the service.
    pub graceful_termination: bool,
    /// The longest a real server drains (graceful termination): once this
    /// long has passed since its drain started, the next sync deletes it
    /// whatever its connections, and whatever weight someone else may have
    /// given it meanwhile (a drain is not restarted by a health checker).
    /// `None` (the default): it drains until it
    /// is idle, however long that takes. A drain time given for one real
    /// server ([`Syncer::set_drain_time`](super::Syncer::set_drain_time))
    /// takes its place for that one.
    ///
    /// Drains are timed by a [`Syncer`](super::Syncer), which records when
    /// each started (see [`Drains`](super::Drains)); the pure [`plan()`]
    /// has no such record, so no drain it plans has a deadline.
    pub max_drain: Option<Duration>,
    /// Weights belong to someone else (a health checker: keepalived's,
    /// kube-vip's, an operator's), as `--keep-weights` in other IPVS tools:
    /// the weight of a real server that exists in the kernel is never
    /// changed. Real servers the sync adds get their desired weight; other
    /// settings of an existing one (forwarding method, thresholds, tunnel)
    /// are still made as desired, with the kernel's weight kept in that
    /// update.
    ///
    /// One exception: a real server the syncer itself set to weight 0 to
    /// drain it, and which is desired again, gets its desired weight back
    /// (the 0 was the syncer's, not the health checker's). A real server at
    /// weight 0 that is still desired (quiesced by the health checker) is
    /// not draining; once it leaves the desired state, it drains, and its
    /// drain time starts then. Off by default: every weight is made as
    /// desired, so a verifying sync undoes a health checker's weight.
    pub keep_weights: bool,
}

impl PlanOptions {
    /// Turns graceful termination on or off (off by default).
    pub fn with_graceful_termination(mut self, on: bool) -> Self {
        self.graceful_termination = on;
        self
    }

    /// Sets the longest a real server drains (default: until idle; see
    /// [`PlanOptions::max_drain`]).
    pub fn with_max_drain(mut self, max: Duration) -> Self {
        self.max_drain = Some(max);
        self
    }

    /// Leaves the weights of existing real servers to someone else (off by
    /// default; see [`PlanOptions::keep_weights`]).
    pub fn with_keep_weights(mut self, on: bool) -> Self {
        self.keep_weights = on;
        self
    }
}

/// Counts for one kind of object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counts {
    /// Added.
    pub added: usize,
    /// Changed.
    pub updated: usize,
    /// Deleted.
    pub deleted: usize,
    /// Already as desired.
    pub unchanged: usize,
}

impl Counts {
    /// Operations counted (added + updated + deleted).
    pub fn changes(&self) -> usize {
        self.added + self.updated + self.deleted
    }
}

/// What a plan does, by kind of object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlanCounts {
    /// Virtual servers. `deleted` counts managed services that are not
    /// desired (their real servers go with them and are not counted).
    pub services: Counts,
    /// Real servers. `updated` includes those set to weight 0 to drain.
    pub destinations: Counts,
    /// Real servers set to weight 0 by this plan (graceful termination;
    /// also counted in `destinations.updated`).
    pub drain_started: usize,
    /// Real servers left in place at weight 0 until their connections end
    /// or their drain time passes (graceful termination; not counted
    /// elsewhere).
    pub draining: usize,
    /// Draining real servers deleted because their drain time passed,
    /// connections or not (also counted in `destinations.deleted`).
    pub drains_ended_at_deadline: usize,
    /// Draining real servers (at weight 0) deleted because they are idle
    /// (also counted in `destinations.deleted`).
    pub drains_ended_idle: usize,
}

/// Why a plan deletes a draining real server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DrainEnd {
    Idle,
    Deadline,
}

/// The ordered write operations of a sync, and their counts.
///
/// Order: for each desired service in insertion order, its add or update,
/// then its real servers' deletes (and drains), updates and adds; then the
/// deletes of managed services that are not desired, sorted by key. A
/// service is thus always created before its real servers, and pipelining
/// the plan in order is safe.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Plan {
    /// The writes, in the order they must be sent.
    pub writes: Vec<Write>,
    /// What they do.
    pub counts: PlanCounts,
    /// The adds of services the scope does not already include (claims),
    /// when planned apart from `writes` for a syncer, which sends them
    /// first, each followed by every desired real server of its service
    /// once the kernel has answered it.
    pub(crate) claims: Vec<Write>,
    /// The real servers of the other added services, when planned for a
    /// syncer: named by their service, written out part by part as they are
    /// sent.
    pub(crate) fills: Vec<Fill>,
    /// The draining real servers this plan deletes, and why.
    pub(crate) drain_ends: HashMap<(ServiceKey, SocketAddr), DrainEnd>,
    /// The real servers this plan leaves draining at weight 0.
    pub(crate) waiting: Vec<(ServiceKey, SocketAddr)>,
}

impl Plan {
    /// Whether the plan does nothing.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.claims.is_empty() && self.fills.is_empty()
    }
}

/// Computes the plan that makes the managed part of `observed` equal to
/// `desired`.
///
/// Managed services are those in `desired` and those of `observed` that
/// `scope` includes given `owned`; every other service of `observed` is
/// left untouched. Pure: no I/O, no clock. It has no record of drains (a
/// [`Syncer`](super::Syncer) keeps one), so no drain it plans has reached a
/// deadline ([`PlanOptions::max_drain`]) and none is known to have been
/// started by the syncer ([`PlanOptions::keep_weights`]).
///
/// ```
/// use std::collections::HashSet;
/// use ipvsctl::batch::Write;
/// use ipvsctl::model::{RealServer, ServiceKey, VirtualServer};
/// use ipvsctl::sync::{self, DesiredState, Observed, PlanOptions, Scope};
///
/// let key = ServiceKey::tcp("10.96.0.1:443".parse().unwrap());
/// let rs = RealServer::new("10.244.0.2:6443".parse().unwrap());
/// let mut desired = DesiredState::new();
/// desired.insert(VirtualServer::new(key), [rs]).unwrap();
/// let plan = sync::plan(&desired, &Observed::new(), &Scope::Owned, &HashSet::new(),
///                       PlanOptions::default());
/// assert_eq!(plan.writes, vec![Write::AddService(VirtualServer::new(key)), Write::AddDestination(key, rs)]);
/// ```
pub fn plan<S: BuildHasher>(
    desired: &DesiredState,
    observed: &Observed,
    scope: &Scope,
    owned: &HashSet<ServiceKey, S>,
    options: PlanOptions,
) -> Plan {
    plan_ordered(
        desired,
        observed,
        scope,
        owned,
        options,
        Order::Documented,
        DrainsAt::NONE,
        &HashSet::new(),
        &[],
    )
}

/// Where a plan puts the adds of services the scope does not include yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// In `ops`, each before its real servers ([`Plan`]'s documented order).
    Documented,
    /// In [`Plan::claims`], the rest of `ops` in the documented order: a
    /// syncer sends the claims first, and would otherwise take them out of
    /// `ops` (moving every operation after the first claim). The real
    /// servers of a claimed service are left to the syncer, those of the
    /// other added services to [`Plan::fills`].
    ClaimsApart,
}

/// [`plan()`] with the claims where `order` says, the syncer's drains, and
/// the desired services in `skip` left out (a syncer's conflicts: not its
/// own, so neither changed nor deleted). `settled[i]` true: the desired
/// service at index `i` is known to be as `observed` has it (the same
/// settings and exactly its real servers), so it is counted unchanged
/// without a second look (a syncer finds this while the kernel is still
/// dumping the table); shorter than `desired`: the rest are not known.
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan_ordered<S: BuildHasher>(
    desired: &DesiredState,
    observed: &Observed,
    scope: &Scope,
    owned: &HashSet<ServiceKey, S>,
    options: PlanOptions,
    order: Order,
    drains: DrainsAt<'_>,
    skip: &HashSet<ServiceKey>,
    settled: &[bool],
) -> Plan {
    let mut p = Plan::default();
    if observed.is_empty() {
        // Everything desired is added: room for it at once, instead of the
        // list growing by doubling (each step copying it into fresh pages).
        let services = desired.len();
        let dests = desired.destination_count();
        match order {
            Order::Documented => p.writes.reserve(services + dests),
            // Most adds are claims, which need no fill.
            Order::ClaimsApart => p.claims.reserve(services),
        }
    }
    let claims = Claims::new(order, scope, owned);
    let mut observed_desired = 0;
    for (i, ds) in desired.services().iter().enumerate() {
        if !skip.is_empty() && skip.contains(&ds.service().key) {
            continue;
        }
        if settled.get(i) == Some(&true) {
            p.counts.services.unchanged += 1;
            p.counts.destinations.unchanged += ds.destinations().len();
            observed_desired += 1;
            continue;
        }
        observed_desired +=
            usize::from(plan_service(&mut p, ds, observed, options, claims, drains));
    }
    // When every observed service is desired (the usual resync), there is
    // nothing to delete and no need to look each one up again.
    let mut gone: Vec<ServiceKey> = if observed_desired == observed.len() {
        Vec::new()
    } else {
        observed
            .keys()
            .filter(|k| !desired.contains(k) && scope.includes(k, owned))
            .copied()
            .collect()
    };
    gone.sort_unstable();
    p.counts.services.deleted = gone.len();
    p.writes.extend(gone.into_iter().map(Write::DeleteService));
    p
}

/// The part of [`plan()`] that concerns the services `keys`: what the full
/// plan would do to them, in the same order (the desired ones in the order
/// of `keys`, then the deletes sorted by key), in time proportional to their
/// size, not the table's. Keys given twice count once; a key neither
/// desired nor managed in `observed` plans nothing.
///
/// ```
/// use std::collections::HashSet;
/// use ipvsctl::batch::Write;
/// use ipvsctl::model::{RealServer, ServiceKey, VirtualServer};
/// use ipvsctl::sync::{self, DesiredState, Observed, PlanOptions, Scope};
///
/// let a = ServiceKey::tcp("10.96.0.1:443".parse().unwrap());
/// let b = ServiceKey::tcp("10.96.0.2:443".parse().unwrap());
/// let mut desired = DesiredState::new();
/// desired.insert(VirtualServer::new(a), []).unwrap();
/// desired.insert(VirtualServer::new(b), []).unwrap();
/// let plan = sync::plan_services(&desired, &Observed::new(), &[b], &Scope::Owned,
///                                &HashSet::new(), PlanOptions::default());
/// assert_eq!(plan.writes, vec![Write::AddService(VirtualServer::new(b))]);
/// ```
pub fn plan_services<S: BuildHasher>(
    desired: &DesiredState,
    observed: &Observed,
    keys: &[ServiceKey],
    scope: &Scope,
    owned: &HashSet<ServiceKey, S>,
    options: PlanOptions,
) -> Plan {
    plan_services_ordered(
        desired,
        observed,
        keys,
        scope,
        owned,
        options,
        Order::Documented,
        DrainsAt::NONE,
    )
}

/// [`plan_services`] with the claims where `order` says and the syncer's
/// drains (the public functions' arguments plus those two).
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan_services_ordered<S: BuildHasher>(
    desired: &DesiredState,
    observed: &Observed,
    keys: &[ServiceKey],
    scope: &Scope,
    owned: &HashSet<ServiceKey, S>,
    options: PlanOptions,
    order: Order,
    drains: DrainsAt<'_>,
) -> Plan {
    let claims = Claims::new(order, scope, owned);
    let mut p = Plan::default();
    // A few keys (one change, the usual case) are checked for repeats
    // against those before them, without a set to build and hash into.
    let room = if keys.len() > FEW_KEYS { keys.len() } else { 0 };
    let mut seen = HashSet::with_capacity_and_hasher(room, KeyHashing::default());
    let mut gone = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let repeated = if keys.len() > FEW_KEYS {
            !seen.insert(*key)
        } else {
            keys[..i].contains(key)
        };
        if repeated {
            continue;
        }
        match desired.get(key) {
            Some(ds) => {
                plan_service(&mut p, ds, observed, options, claims, drains);
            }
            None if observed.contains(key) && scope.includes(key, owned) => gone.push(*key),
            None => {}
        }
    }
    gone.sort_unstable();
    p.counts.services.deleted = gone.len();
    p.writes.extend(gone.into_iter().map(Write::DeleteService));
    p
}

/// Up to this many keys, [`plan_services`] finds repeats by comparing.
const FEW_KEYS: usize = 16;

/// Plans one desired service: its add or update, then its real servers.
/// Returns whether `observed` has the service.
fn plan_service<S: BuildHasher>(
    p: &mut Plan,
    ds: &DesiredService,
    observed: &Observed,
    options: PlanOptions,
    claims: Claims<'_, S>,
    drains: DrainsAt<'_>,
) -> bool {
    let vs = ds.service();
    let key = vs.key;
    match observed.get(&key) {
        None => {
            let add = Write::AddService(vs.clone());
            if claims.includes(&key) {
                // Its real servers go out after it, from the desired state.
                p.claims.push(add);
            } else {
                p.writes.push(add);
                if claims.apart() {
                    p.fills.push(Fill {
                        at: p.writes.len(),
                        key,
                    });
                } else {
                    for rs in ds.destinations() {
                        p.writes.push(Write::AddDestination(key, *rs));
                    }
                }
            }
            p.counts.services.added += 1;
            p.counts.destinations.added += ds.destinations().len();
            false
        }
        Some(os) => {
            if os.service == *vs {
                p.counts.services.unchanged += 1;
            } else {
                p.writes.push(Write::UpdateService(vs.clone()));
                p.counts.services.updated += 1;
            }
            diff_dests(p, key, ds.destinations(), os, options, drains);
            true
        }
    }
}

/// Which service adds go to [`Plan::claims`]: none in the documented order,
/// else those of services `scope` does not include given `owned`.
struct Claims<'a, S>(Option<(&'a Scope, &'a HashSet<ServiceKey, S>)>);

// Copied whatever the hasher: it holds references only.
impl<S> Clone for Claims<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for Claims<'_, S> {}

impl<'a, S: BuildHasher> Claims<'a, S> {
    fn new(order: Order, scope: &'a Scope, owned: &'a HashSet<ServiceKey, S>) -> Self {
        Claims((order == Order::ClaimsApart).then_some((scope, owned)))
    }

    fn includes(self, key: &ServiceKey) -> bool {
        self.0
            .is_some_and(|(scope, owned)| !scope.includes(key, owned))
    }

    /// Whether the plan is for a syncer ([`Order::ClaimsApart`]).
    fn apart(self) -> bool {
        self.0.is_some()
    }
}

/// Whether real servers of this service drain before deletion.
fn drains_before_delete(key: &ServiceKey, options: PlanOptions) -> bool {
    options.graceful_termination
        && !matches!(
            key,
            ServiceKey::Addr {
                protocol: Protocol::Udp,
                ..
            }
        )
}

/// Merge-joins the sorted desired and observed real servers of one service.
fn diff_dests(
    p: &mut Plan,
    key: ServiceKey,
    want: &[RealServer],
    have: &ObservedService,
    options: PlanOptions,
    drains: DrainsAt<'_>,
) {
    // Compared packed, as memory keeps them: only a real server that
    // differs is unpacked. Desired addresses are plain (validated), so
    // their packed order is their order. A real server the kernel has as
    // desired (the usual case) needs no update whatever the options (kept
    // weights equal the desired ones), and no address comparison.
    let have = have.packed();
    // Updates go after the removals, adds after the updates. The updates
    // are written straight into the plan (from `updates_at` on) until a
    // removal comes after one: then they are moved aside (`updates`) and
    // appended at the end. Most changes remove nothing and need no list.
    let mut updates_at = p.writes.len();
    let (mut updates, mut adds) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    loop {
        let step = match (want.get(i), have.get(j)) {
            (None, None) => break,
            (Some(w), Some(h)) if h.is(w) => Step::Same,
            (Some(w), Some(h)) => match addr_order(&w.addr).cmp(&h.order()) {
                Ordering::Equal => Step::Differs(w, h),
                Ordering::Less => Step::Add(w),
                Ordering::Greater => Step::Remove(h),
            },
            (Some(w), None) => Step::Add(w),
            (None, Some(h)) => Step::Remove(h),
        };
        match step {
            Step::Same => {
                p.counts.destinations.unchanged += 1;
                i += 1;
                j += 1;
            }
            Step::Differs(w, h) => {
                let h = h.unpack().server;
                let target = kept_weight(key, w, &h, options, drains);
                if target == h {
                    p.counts.destinations.unchanged += 1;
                } else {
                    let update = Write::UpdateDestination(key, target);
                    if updates.is_empty() {
                        p.writes.push(update);
                    } else {
                        updates.push(update);
                    }
                    p.counts.destinations.updated += 1;
                }
                i += 1;
                j += 1;
            }
            Step::Add(w) => {
                adds.push(Write::AddDestination(key, *w));
                p.counts.destinations.added += 1;
                i += 1;
            }
            Step::Remove(h) => {
                if updates.is_empty() && p.writes.len() > updates_at {
                    updates = p.writes.split_off(updates_at);
                }
                remove_dest(p, key, &h.unpack(), options, drains);
                updates_at = p.writes.len();
                j += 1;
            }
        }
    }
    p.writes.append(&mut updates);
    p.writes.append(&mut adds);
}

/// One step of the walk through desired and remembered real servers, both
/// in address order.
enum Step<'a> {
    /// Desired and remembered as desired.
    Same,
    /// Desired, and remembered with other settings.
    Differs(&'a RealServer, &'a PackedDest),
    /// Desired only.
    Add(&'a RealServer),
    /// Remembered only.
    Remove(&'a PackedDest),
}

/// What an existing, desired real server is to be made: as desired, or,
/// when weights are kept, as desired with the kernel's weight, unless the
/// syncer set that weight to 0 to drain it (it is given back).
fn kept_weight(
    key: ServiceKey,
    want: &RealServer,
    have: &RealServer,
    options: PlanOptions,
    drains: DrainsAt<'_>,
) -> RealServer {
    if !options.keep_weights
        || want.weight == have.weight
        || drains.drained_by_syncer(&key, &want.addr)
    {
        return *want;
    }
    RealServer {
        weight: have.weight,
        ..*want
    }
}

/// A real server that is not desired: delete it, or drain it first.
fn remove_dest(
    p: &mut Plan,
    key: ServiceKey,
    h: &ObservedDest,
    options: PlanOptions,
    drains: DrainsAt<'_>,
) {
    if !drains_before_delete(&key, options) {
        p.writes.push(Write::DeleteDestination(key, h.server.addr));
        p.counts.destinations.deleted += 1;
        return;
    }
    let addr = h.server.addr;
    let idle = h.conns.is_some_and(|c| c.active == 0 && c.inactive == 0);
    let end = if idle && h.server.weight != 0 {
        // Not draining yet: deleted at once.
        Some(None)
    } else if idle {
        Some(Some(DrainEnd::Idle))
    } else if drains.expired(&key, &addr, options.max_drain) {
        // Whether its connections are known or not, and whatever its
        // weight: a health checker or an operator giving a draining real
        // server a weight back does not restart its drain.
        Some(Some(DrainEnd::Deadline))
    } else {
        None
    };
    match end {
        Some(end) => {
            p.writes.push(Write::DeleteDestination(key, addr));
            p.counts.destinations.deleted += 1;
            if let Some(end) = end {
                match end {
                    DrainEnd::Idle => p.counts.drains_ended_idle += 1,
                    DrainEnd::Deadline => p.counts.drains_ended_at_deadline += 1,
                }
                p.drain_ends.insert((key, addr), end);
            }
        }
        None if h.server.weight != 0 => {
            p.writes.push(Write::UpdateDestination(
                key,
                RealServer {
                    weight: 0,
                    ..h.server
                },
            ));
            p.counts.destinations.updated += 1;
            p.counts.drain_started += 1;
        }
        None => {
            // Weight 0 already, connections still open (or counts unknown
            // until the next read), deadline not reached: leave it until a
            // later sync finds it idle or past its deadline.
            p.counts.draining += 1;
            p.waiting.push((key, addr));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ConnCounts, RealServer, VirtualServer};
    use crate::sync::ObservedService;
    use crate::sync::drain::Drains;
    use crate::sync::parts::Parts;
    use std::time::Instant;

    fn key(i: u8) -> ServiceKey {
        ServiceKey::tcp(format!("10.96.0.{i}:80").parse().unwrap())
    }

    fn rs(i: u8) -> RealServer {
        RealServer::new(format!("10.244.0.{i}:8080").parse().unwrap())
    }

    /// Claims planned apart are the documented plan's claims; their real
    /// servers are left out of the rest, which (the real servers of the
    /// other added services written out) is the documented plan without
    /// either, in its order.
    #[test]
    fn claims_apart_take_nothing_else_and_keep_the_order() {
        let mut desired = DesiredState::new();
        for i in 1..=5 {
            desired
                .insert(VirtualServer::new(key(i)), [rs(i), rs(i + 10)])
                .unwrap();
        }
        let mut observed = Observed::new();
        // Service 2 exists with one real server to delete; 6 is not desired.
        let gone = ObservedDest {
            server: rs(99),
            conns: None,
        };
        observed.insert(ObservedService::new(VirtualServer::new(key(2)), [gone]));
        observed.insert(ObservedService::new(VirtualServer::new(key(6)), []));
        let owned: HashSet<ServiceKey> = [key(3), key(6)].into();
        let scopes = [Scope::Owned, Scope::All, Scope::filter(|k| *k == key(4))];
        for scope in scopes {
            for observed in [&observed, &Observed::new()] {
                let plan = |order| {
                    plan_ordered(
                        &desired,
                        observed,
                        &scope,
                        &owned,
                        PlanOptions::default(),
                        order,
                        DrainsAt::NONE,
                        &HashSet::new(),
                        &[],
                    )
                };
                let documented = plan(Order::Documented);
                let apart = plan(Order::ClaimsApart);
                assert!(documented.claims.is_empty());
                assert_eq!(apart.counts, documented.counts);
                let is_claim = |op: &Write| matches!(op, Write::AddService(vs) if !scope.includes(&vs.key, &owned));
                let claims: Vec<Write> = documented
                    .writes
                    .iter()
                    .filter(|o| is_claim(o))
                    .cloned()
                    .collect();
                let claimed = |k: &ServiceKey| claims.iter().any(|c| c.key() == *k);
                let rest: Vec<Write> = documented
                    .writes
                    .iter()
                    .filter(|o| !is_claim(o))
                    .filter(|o| !matches!(o, Write::AddDestination(k, _) if claimed(k)))
                    .cloned()
                    .collect();
                if matches!(scope, Scope::Owned) {
                    // Every add but the owned service's (and the observed
                    // one's, which is not added).
                    let want = if observed.is_empty() { 4 } else { 3 };
                    assert_eq!(claims.len(), want);
                }
                assert_eq!(apart.claims, claims);
                // The real servers of added services written out where they
                // stand.
                let none = HashSet::default();
                let sent: Vec<Write> =
                    Parts::new(apart.writes, apart.fills, &desired, &none, usize::MAX)
                        .flatten()
                        .collect();
                assert_eq!(sent, rest);
            }
        }
    }

    /// One desired service `key(1)` with `want`, observed with `have`,
    /// planned with `options` and the drains `drains` at `now`.
    fn plan_one(
        want: &[RealServer],
        have: &[ObservedDest],
        options: PlanOptions,
        drains: DrainsAt<'_>,
    ) -> Plan {
        let mut desired = DesiredState::new();
        desired
            .insert(VirtualServer::new(key(1)), want.iter().copied())
            .unwrap();
        let mut observed = Observed::new();
        observed.insert(ObservedService::new(
            VirtualServer::new(key(1)),
            have.iter().copied(),
        ));
        plan_ordered(
            &desired,
            &observed,
            &Scope::Owned,
            &HashSet::new(),
            options,
            Order::Documented,
            drains,
            &HashSet::new(),
            &[],
        )
    }

    /// Desired services skipped (a syncer's conflicts) plan as if they were
    /// not desired, except that they are never deleted.
    #[test]
    fn skipped_services_plan_as_if_not_desired_and_are_never_deleted() {
        let mut desired = DesiredState::new();
        for i in 1..=4 {
            desired
                .insert(VirtualServer::new(key(i)), [rs(i), rs(i + 10)])
                .unwrap();
        }
        let mut observed = Observed::new();
        observed.insert(ObservedService::new(VirtualServer::new(key(2)), []));
        observed.insert(ObservedService::new(VirtualServer::new(key(3)), []));
        let owned: HashSet<ServiceKey> = [key(2), key(3)].into();
        let skip: HashSet<ServiceKey> = [key(1), key(3)].into();
        let mut without = DesiredState::new();
        for ds in desired.services() {
            if !skip.contains(&ds.service().key) {
                let dests = ds.destinations().iter().copied();
                without.insert(ds.service().clone(), dests).unwrap();
            }
        }
        let plan = |d: &DesiredState, skip: &HashSet<ServiceKey>| {
            plan_ordered(
                d,
                &observed,
                &Scope::Owned,
                &owned,
                PlanOptions::default(),
                Order::Documented,
                DrainsAt::NONE,
                skip,
                &[],
            )
        };
        let skipped = plan(&desired, &skip);
        let mut copied = plan(&without, &HashSet::new());
        // The copy deletes the owned service 3, which the skip keeps.
        assert_eq!(copied.writes.pop(), Some(Write::DeleteService(key(3))));
        copied.counts.services.deleted -= 1;
        assert_eq!(skipped, copied);
    }

    fn seen(rs: RealServer, conns: Option<ConnCounts>) -> ObservedDest {
        ObservedDest::new(rs, conns)
    }

    #[test]
    fn kept_weights_are_never_written_but_the_rest_is() {
        let keep = PlanOptions::default().with_keep_weights(true);
        // Quiesced by a health checker: not written back.
        let want = [rs(1).with_weight(5), rs(2).with_weight(5)];
        let have = [
            seen(rs(1).with_weight(0), None),
            seen(rs(2).with_weight(3), None),
        ];
        let p = plan_one(&want, &have, keep, DrainsAt::NONE);
        assert!(p.is_empty(), "{:?}", p.writes);
        assert_eq!(p.counts.destinations.unchanged, 2);
        // Without the option, both are made as desired.
        let p = plan_one(&want, &have, PlanOptions::default(), DrainsAt::NONE);
        assert_eq!(
            p.writes,
            [
                Write::UpdateDestination(key(1), want[0]),
                Write::UpdateDestination(key(1), want[1])
            ]
        );
        // Thresholds change, the kernel's weight stays; a new real server
        // gets its desired weight.
        let want = [
            rs(1).with_weight(5).with_thresholds(100, 50),
            rs(3).with_weight(7),
        ];
        let p = plan_one(&want, &have[..1], keep, DrainsAt::NONE);
        assert_eq!(
            p.writes,
            [
                Write::UpdateDestination(key(1), rs(1).with_weight(0).with_thresholds(100, 50)),
                Write::AddDestination(key(1), rs(3).with_weight(7)),
            ]
        );
    }

    #[test]
    fn a_real_server_the_syncer_drained_gets_its_weight_back_when_weights_are_kept() {
        let keep = PlanOptions::default()
            .with_keep_weights(true)
            .with_graceful_termination(true);
        let t0 = Instant::now();
        let want = [rs(1).with_weight(5)];
        let have = [seen(rs(1).with_weight(0), None)];
        // Set to 0 by this syncer to drain it: given back.
        let mut drains = Drains::new();
        drains.start(key(1), rs(1).addr, t0, true);
        let p = plan_one(&want, &have, keep, DrainsAt::new(&drains, t0));
        assert_eq!(p.writes, [Write::UpdateDestination(key(1), want[0])]);
        // Found at 0 (a health checker's, or a previous run's): kept.
        let mut found = Drains::new();
        found.start(key(1), rs(1).addr, t0, false);
        let p = plan_one(&want, &have, keep, DrainsAt::new(&found, t0));
        assert!(p.is_empty(), "{:?}", p.writes);
    }

    #[test]
    fn a_drain_ends_at_its_deadline_and_not_before() {
        let max = Duration::from_secs(10);
        let opts = PlanOptions::default()
            .with_graceful_termination(true)
            .with_max_drain(max);
        let t0 = Instant::now();
        let busy = Some(ConnCounts::new(1, 0, 0));
        let mut drains = Drains::new();
        drains.start(key(1), rs(1).addr, t0, true);
        drains.start(key(1), rs(2).addr, t0, false);
        // rs(2) has a drain time of its own, shorter.
        drains.set_drain_time(key(1), rs(2).addr, Duration::from_secs(2));
        let have = [
            seen(rs(1).with_weight(0), busy),
            seen(rs(2).with_weight(0), None),
        ];
        let at = |s: u64| DrainsAt::new(&drains, t0 + Duration::from_secs(s));
        // Before either deadline: both wait, connections open or unknown.
        let p = plan_one(&[], &have, opts, at(1));
        assert!(p.is_empty());
        assert_eq!(p.counts.draining, 2);
        assert_eq!(p.waiting, [(key(1), rs(1).addr), (key(1), rs(2).addr)]);
        // rs(2)'s deadline passed: deleted, its counts unknown.
        let p = plan_one(&[], &have, opts, at(2));
        assert_eq!(p.writes, [Write::DeleteDestination(key(1), rs(2).addr)]);
        assert_eq!(p.counts.drains_ended_at_deadline, 1);
        assert_eq!(p.drain_ends[&(key(1), rs(2).addr)], DrainEnd::Deadline);
        assert_eq!(p.counts.draining, 1);
        // Both passed.
        let p = plan_one(&[], &have, opts, at(10));
        assert_eq!(p.counts.drains_ended_at_deadline, 2);
        assert_eq!(p.counts.destinations.deleted, 2);
        // Without a maximum, rs(1) drains on; rs(2)'s own time still holds.
        let p = plan_one(&[], &have, opts.with_max_drain(Duration::MAX), at(10));
        assert_eq!(p.writes, [Write::DeleteDestination(key(1), rs(2).addr)]);
        // Idle before the deadline: ended idle.
        let idle = [seen(rs(1).with_weight(0), Some(ConnCounts::default()))];
        let p = plan_one(&[], &idle, opts, at(1));
        assert_eq!(p.writes, [Write::DeleteDestination(key(1), rs(1).addr)]);
        assert_eq!(p.counts.drains_ended_idle, 1);
        assert_eq!(p.drain_ends[&(key(1), rs(1).addr)], DrainEnd::Idle);
        // A drain the record does not know has not started: no deadline.
        let p = plan_one(&[], &have, opts, DrainsAt::NONE);
        assert!(p.is_empty());
        // Busy at weight 1 with no drain under way: set to 0 (the drain
        // starts), whatever the time.
        let p = plan_one(&[], &[seen(rs(3), busy)], opts, at(100));
        assert_eq!(
            p.writes,
            [Write::UpdateDestination(key(1), rs(3).with_weight(0))]
        );
        // A draining real server someone gave a weight back: set to 0 again
        // before its deadline, deleted once it has passed.
        let p = plan_one(&[], &[seen(rs(1), busy)], opts, at(1));
        assert_eq!(
            p.writes,
            [Write::UpdateDestination(key(1), rs(1).with_weight(0))]
        );
        let p = plan_one(&[], &[seen(rs(1), busy)], opts, at(10));
        assert_eq!(p.writes, [Write::DeleteDestination(key(1), rs(1).addr)]);
        assert_eq!(p.drain_ends[&(key(1), rs(1).addr)], DrainEnd::Deadline);
        // Without graceful termination, no drain.
        let p = plan_one(
            &[],
            &have,
            PlanOptions::default().with_max_drain(max),
            at(1),
        );
        assert_eq!(p.counts.destinations.deleted, 2);
        assert_eq!(p.counts.drains_ended_at_deadline, 0);
    }

    /// A desired service is settled when the observed one has its settings
    /// and exactly its real servers.
    fn settled_marks(desired: &DesiredState, observed: &Observed, pick: &[bool]) -> Vec<bool> {
        desired
            .services()
            .iter()
            .zip(pick)
            .map(|(ds, pick)| {
                *pick
                    && observed.get(&ds.service().key).is_some_and(|os| {
                        os.service == *ds.service() && os.has_exactly(ds.destinations())
                    })
            })
            .collect()
    }

    /// A service of the property test: its scheduler (round robin or not),
    /// and its real servers by number with a weight each.
    fn service_of(i: u8, rr: bool, dests: &[(u8, u32)]) -> (VirtualServer, Vec<RealServer>) {
        let mut vs = VirtualServer::new(key(i));
        if rr {
            vs = vs.with_scheduler(crate::model::Scheduler::RoundRobin);
        }
        let mut list: Vec<RealServer> = dests.iter().map(|&(d, w)| rs(d).with_weight(w)).collect();
        list.sort_by_key(|r| r.addr);
        list.dedup_by_key(|r| r.addr);
        (vs, list)
    }

    proptest::proptest! {
        /// Settled services (any of those the syncer could mark: observed
        /// with their settings and exactly their real servers) plan as they
        /// do when looked at: the same operations in the same order, the
        /// same counts, whatever the options and the order.
        #[test]
        fn settled_services_plan_as_when_compared(
            want in proptest::collection::vec(
                (1u8..8, proptest::bool::ANY, proptest::collection::vec((1u8..5, 0u32..3), 0..4)),
                0..8,
            ),
            have in proptest::collection::vec(
                (1u8..8, proptest::bool::ANY, proptest::collection::vec((1u8..5, 0u32..3), 0..4)),
                0..8,
            ),
            pick in proptest::collection::vec(proptest::bool::ANY, 8),
            graceful in proptest::bool::ANY,
            keep_weights in proptest::bool::ANY,
            apart in proptest::bool::ANY,
        ) {
            let mut desired = DesiredState::new();
            for (i, rr, dests) in &want {
                let (vs, list) = service_of(*i, *rr, dests);
                if !desired.contains(&vs.key) {
                    desired.insert(vs, list).unwrap();
                }
            }
            let mut observed = Observed::new();
            for (i, rr, dests) in &have {
                let (vs, list) = service_of(*i, *rr, dests);
                if !observed.contains(&vs.key) {
                    let seen = list.into_iter().map(|server| ObservedDest {
                        server,
                        conns: Some(ConnCounts::default()),
                    });
                    observed.insert(ObservedService::new(vs, seen));
                }
            }
            let owned: HashSet<ServiceKey> = observed.keys().copied().collect();
            let options = PlanOptions {
                graceful_termination: graceful,
                keep_weights,
                ..PlanOptions::default()
            };
            let order = if apart { Order::ClaimsApart } else { Order::Documented };
            let settled = settled_marks(&desired, &observed, &pick);
            let plan = |settled: &[bool]| {
                plan_ordered(
                    &desired,
                    &observed,
                    &Scope::Owned,
                    &owned,
                    options,
                    order,
                    DrainsAt::NONE,
                    &HashSet::new(),
                    settled,
                )
            };
            let (compared, marked) = (plan(&[]), plan(&settled));
            proptest::prop_assert_eq!(&marked.writes, &compared.writes);
            proptest::prop_assert_eq!(&marked.claims, &compared.claims);
            proptest::prop_assert_eq!(&marked.fills, &compared.fills);
            proptest::prop_assert_eq!(marked.counts, compared.counts);
        }

        /// The real servers of a service plan as the set of their addresses
        /// says, whatever the families, weights, connection counts and
        /// options: each address only remembered goes (or drains), then each
        /// one desired and remembered otherwise is updated, then each one
        /// only desired is added, each kind in address order.
        #[test]
        fn real_servers_plan_as_their_addresses_say(
            want in proptest::collection::btree_map(0u8..12, (0u32..3, proptest::bool::ANY), 0..8),
            have in proptest::collection::btree_map(
                0u8..12,
                (0u32..3, proptest::bool::ANY, proptest::option::of((0u32..2, 0u32..2))),
                0..8,
            ),
            graceful in proptest::bool::ANY,
            keep_weights in proptest::bool::ANY,
        ) {
            // IPv4 and IPv6 addresses mixed, so that their order is tried.
            let addr = |i: u8| -> SocketAddr {
                if i.is_multiple_of(3) {
                    format!("[2001:db8::{i}]:80").parse().unwrap()
                } else {
                    format!("10.244.0.{i}:{}", 8080 + u16::from(i % 2)).parse().unwrap()
                }
            };
            // An IPv6 real server of this IPv4 service is reached through
            // a tunnel (the kernel refuses other forwarding across families).
            let server = |i: u8, weight: u32, masq: bool| {
                use crate::model::{ForwardMethod, Tunnel};
                let rs = RealServer::new(addr(i)).with_weight(weight);
                match (i.is_multiple_of(3), masq) {
                    (true, _) => rs.with_forward(ForwardMethod::Tunnel(Tunnel::IPIP)),
                    (false, true) => rs.with_forward(ForwardMethod::Masquerade),
                    (false, false) => rs,
                }
            };
            let want: Vec<RealServer> =
                want.iter().map(|(&i, &(w, masq))| server(i, w, masq)).collect();
            let have: Vec<ObservedDest> = have
                .iter()
                .map(|(&i, &(w, masq, conns))| ObservedDest {
                    server: server(i, w, masq),
                    conns: conns.map(|(a, n)| ConnCounts::new(a, n, 0)),
                })
                .collect();
            let options = PlanOptions {
                graceful_termination: graceful,
                keep_weights,
                ..PlanOptions::default()
            };
            let planned = plan_one(&want, &have, options, DrainsAt::NONE);

            let mut expected = Plan::default();
            let mut addrs: Vec<SocketAddr> =
                want.iter().map(|r| r.addr).chain(have.iter().map(|d| d.server.addr)).collect();
            addrs.sort();
            addrs.dedup();
            let (mut updates, mut adds) = (Vec::new(), Vec::new());
            for a in addrs {
                let w = want.iter().find(|r| r.addr == a);
                let h = have.iter().find(|d| d.server.addr == a);
                match (w, h) {
                    (Some(w), Some(h)) => {
                        let target = kept_weight(key(1), w, &h.server, options, DrainsAt::NONE);
                        if target == h.server {
                            expected.counts.destinations.unchanged += 1;
                        } else {
                            updates.push(Write::UpdateDestination(key(1), target));
                            expected.counts.destinations.updated += 1;
                        }
                    }
                    (Some(w), None) => {
                        adds.push(Write::AddDestination(key(1), *w));
                        expected.counts.destinations.added += 1;
                    }
                    (None, Some(h)) => remove_dest(&mut expected, key(1), h, options, DrainsAt::NONE),
                    (None, None) => {}
                }
            }
            expected.writes.extend(updates);
            expected.writes.extend(adds);
            expected.counts.services.unchanged = 1;
            proptest::prop_assert_eq!(&planned.writes, &expected.writes);
            proptest::prop_assert_eq!(planned.counts, expected.counts);
            proptest::prop_assert_eq!(&planned.drain_ends, &expected.drain_ends);
            proptest::prop_assert_eq!(&planned.waiting, &expected.waiting);
        }
    }
}
