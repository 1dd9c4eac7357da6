//! The drains a syncer keeps between syncs: when each real server it drains
//! started draining, the drain time the caller gave for it, and whether the
//! syncer set its weight to 0 itself. In memory only; the plan reads it with
//! the time of the sync passed in ([`DrainsAt`]), never the clock.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::state::{DesiredService, ObservedService};
use crate::model::ServiceKey;

/// One real server in a syncer's [`Drains`]: a drain under way, or the
/// drain time the caller gave for it ahead of its drain
/// ([`Syncer::set_drain_time`](super::Syncer::set_drain_time)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Drain {
    /// When the drain started: the sync that set the real server to weight
    /// 0, or the first sync that found it at weight 0 and not desired (for
    /// example the first sync after a restart). `None`: not draining.
    pub started: Option<Instant>,
    /// The caller's drain time for this real server, which takes the place
    /// of [`PlanOptions::max_drain`](super::PlanOptions::max_drain).
    pub drain_time: Option<Duration>,
    /// Whether this syncer set the weight to 0 (rather than finding it at 0,
    /// set by a health checker, an operator or the syncer's previous run).
    pub set_by_syncer: bool,
}

impl Drain {
    /// When the drain ends whatever the connections: its start plus its
    /// drain time, or `max_drain` when it has none. `None`: not draining, no
    /// drain time, or a deadline too far to represent.
    pub fn deadline(&self, max_drain: Option<Duration>) -> Option<Instant> {
        self.started?.checked_add(self.drain_time.or(max_drain)?)
    }
}

/// A syncer's record of drains, by service and real server
/// ([`Syncer::drains`](super::Syncer::drains)).
///
/// An entry is made when a drain starts or the caller sets a drain time,
/// and forgotten when the real server is deleted, when its service goes,
/// and when it is neither desired nor in the kernel; a drain whose real
/// server is desired again stops (its drain time, if given, is kept for
/// the next one).
#[derive(Debug, Clone, Default)]
pub struct Drains {
    services: HashMap<ServiceKey, BTreeMap<SocketAddr, Drain>>,
    /// The services with a drain under way: drain times may be set for
    /// every real server of a large table, and an incremental sync looks
    /// only at these for deadlines.
    timed: HashSet<ServiceKey>,
}

impl Drains {
    /// No drains.
    pub fn new() -> Self {
        Self::default()
    }

    /// The entry of one real server.
    pub fn get(&self, key: &ServiceKey, addr: &SocketAddr) -> Option<&Drain> {
        self.services.get(key)?.get(addr)
    }

    /// Every entry, in no particular order of services.
    pub fn iter(&self) -> impl Iterator<Item = (ServiceKey, SocketAddr, &Drain)> {
        self.services
            .iter()
            .flat_map(|(k, m)| m.iter().map(move |(a, d)| (*k, *a, d)))
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.services.values().map(BTreeMap::len).sum()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    /// Sets the drain time of one real server.
    pub(crate) fn set_drain_time(&mut self, key: ServiceKey, addr: SocketAddr, time: Duration) {
        self.entry(key, addr).drain_time = Some(time);
    }

    /// Starts a drain at `now`, unless one is under way.
    pub(crate) fn start(&mut self, key: ServiceKey, addr: SocketAddr, now: Instant, by_us: bool) {
        let d = self.entry(key, addr);
        if d.started.is_none() {
            d.started = Some(now);
            d.set_by_syncer = by_us;
        }
        self.timed.insert(key);
    }

    /// Forgets a real server (deleted).
    pub(crate) fn forget(&mut self, key: &ServiceKey, addr: &SocketAddr) {
        if let Some(m) = self.services.get_mut(key) {
            m.remove(addr);
            if m.is_empty() {
                self.services.remove(key);
            }
        }
        self.refresh(key);
    }

    /// Forgets every real server of a service (deleted).
    pub(crate) fn forget_service(&mut self, key: &ServiceKey) {
        self.services.remove(key);
        self.timed.remove(key);
    }

    /// The services with entries.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &ServiceKey> {
        self.services.keys()
    }

    /// The services with a drain under way.
    pub(crate) fn timed_keys(&self) -> impl Iterator<Item = &ServiceKey> {
        self.timed.iter()
    }

    /// Keeps `timed` true to the entries of one service.
    fn refresh(&mut self, key: &ServiceKey) {
        let timed = self
            .services
            .get(key)
            .is_some_and(|m| m.values().any(|d| d.started.is_some()));
        if timed {
            self.timed.insert(*key);
        } else {
            self.timed.remove(key);
        }
    }

    /// Whether a service has a drain whose deadline passed at `now`.
    pub(crate) fn has_expired(
        &self,
        key: &ServiceKey,
        now: Instant,
        max: Option<Duration>,
    ) -> bool {
        self.services
            .get(key)
            .is_some_and(|m| m.values().any(|d| expired(d, now, max)))
    }

    /// Brings the entries of one service in line with what is desired
    /// (`want`) and what the kernel has after a sync (`have`): see
    /// [`Drains`].
    pub(crate) fn settle(
        &mut self,
        key: &ServiceKey,
        want: Option<&DesiredService>,
        have: Option<&ObservedService>,
    ) {
        let Some(m) = self.services.get_mut(key) else {
            return;
        };
        m.retain(|addr, d| {
            let w = want.and_then(|ds| {
                let dests = ds.destinations();
                dests
                    .binary_search_by_key(addr, |rs| rs.addr)
                    .ok()
                    .map(|i| dests[i])
            });
            let h = have.and_then(|s| s.destination(addr));
            match (w, h) {
                (None, None) => false,
                // Not draining (any more): desired, or not in the kernel.
                // A drain the syncer started stays only while its weight is
                // still to be given back.
                (Some(w), Some(h)) if d.set_by_syncer && h.server.weight != w.weight => true,
                (Some(_), _) => {
                    d.started = None;
                    d.set_by_syncer = false;
                    d.drain_time.is_some()
                }
                (None, Some(_)) => true,
            }
        });
        if m.is_empty() {
            self.services.remove(key);
        }
        self.refresh(key);
    }

    fn entry(&mut self, key: ServiceKey, addr: SocketAddr) -> &mut Drain {
        self.services
            .entry(key)
            .or_default()
            .entry(addr)
            .or_default()
    }
}

/// Whether a drain's deadline has passed at `now`.
fn expired(d: &Drain, now: Instant, max: Option<Duration>) -> bool {
    d.deadline(max).is_some_and(|t| now >= t)
}

/// What a plan reads of a syncer's drains: the record and the time of the
/// sync. The pure [`plan()`](super::plan()) has none.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DrainsAt<'a>(Option<(&'a Drains, Instant)>);

impl<'a> DrainsAt<'a> {
    /// No record: no drain has started, none has expired, none was started
    /// by the syncer.
    pub(crate) const NONE: DrainsAt<'static> = DrainsAt(None);

    pub(crate) fn new(drains: &'a Drains, now: Instant) -> Self {
        DrainsAt(Some((drains, now)))
    }

    /// Whether the drain of this real server passed its deadline.
    pub(crate) fn expired(
        &self,
        key: &ServiceKey,
        addr: &SocketAddr,
        max: Option<Duration>,
    ) -> bool {
        self.0
            .is_some_and(|(d, now)| d.get(key, addr).is_some_and(|d| expired(d, now, max)))
    }

    /// Whether this syncer set this real server to weight 0 to drain it (so
    /// that it gives the desired weight back when it is desired again, even
    /// when weights are kept).
    pub(crate) fn drained_by_syncer(&self, key: &ServiceKey, addr: &SocketAddr) -> bool {
        self.0.is_some_and(|(d, _)| {
            d.get(key, addr)
                .is_some_and(|d| d.started.is_some() && d.set_by_syncer)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RealServer, VirtualServer};
    use crate::sync::{DesiredState, ObservedDest};

    fn key() -> ServiceKey {
        ServiceKey::tcp("10.96.0.1:80".parse().unwrap())
    }

    fn addr(i: u8) -> SocketAddr {
        SocketAddr::from(([10, 244, 0, i], 8080))
    }

    #[test]
    fn deadlines_take_the_real_servers_drain_time_first() {
        let t0 = Instant::now();
        let mut d = Drains::new();
        d.start(key(), addr(1), t0, true);
        d.set_drain_time(key(), addr(2), Duration::from_secs(2));
        d.start(key(), addr(2), t0, true);
        let max = Some(Duration::from_secs(10));
        assert_eq!(d.get(&key(), &addr(1)).unwrap().deadline(None), None);
        assert_eq!(
            d.get(&key(), &addr(1)).unwrap().deadline(max),
            Some(t0 + Duration::from_secs(10))
        );
        assert_eq!(
            d.get(&key(), &addr(2)).unwrap().deadline(max),
            Some(t0 + Duration::from_secs(2))
        );
        let at = |s| DrainsAt::new(&d, t0 + Duration::from_secs(s));
        assert!(!at(1).expired(&key(), &addr(2), max));
        assert!(at(2).expired(&key(), &addr(2), max));
        assert!(!at(9).expired(&key(), &addr(1), max));
        assert!(!at(9_999).expired(&key(), &addr(1), None));
        assert!(at(10).expired(&key(), &addr(1), max));
        assert!(d.has_expired(&key(), t0 + Duration::from_secs(2), None));
        assert!(!DrainsAt::NONE.expired(&key(), &addr(2), max));
        assert!(at(0).drained_by_syncer(&key(), &addr(1)));
        // A second start keeps the first.
        d.start(key(), addr(1), t0 + Duration::from_secs(5), false);
        assert_eq!(d.get(&key(), &addr(1)).unwrap().started, Some(t0));
        assert!(d.get(&key(), &addr(1)).unwrap().set_by_syncer);
    }

    #[test]
    fn settling_forgets_what_is_neither_desired_nor_draining() {
        let t0 = Instant::now();
        let mut d = Drains::new();
        for i in 1..=5 {
            d.start(key(), addr(i), t0, true);
        }
        d.set_drain_time(key(), addr(2), Duration::from_secs(1));
        d.set_drain_time(key(), addr(6), Duration::from_secs(1));
        let mut desired = DesiredState::new();
        // 2 and 3 are desired again (at weight 1); 6 is desired and not
        // draining; 1 and 4 are not desired; 5 is nowhere.
        let rs = |i| RealServer::new(addr(i));
        desired
            .insert(VirtualServer::new(key()), [rs(2), rs(3), rs(6)])
            .unwrap();
        let have = ObservedService::new(
            VirtualServer::new(key()),
            [
                ObservedDest::new(rs(1).with_weight(0), None),
                // 2 was given its weight back; 3 not yet.
                ObservedDest::new(rs(2), None),
                ObservedDest::new(rs(3).with_weight(0), None),
                ObservedDest::new(rs(4).with_weight(0), None),
                ObservedDest::new(rs(6), None),
            ],
        );
        d.settle(&key(), desired.get(&key()), Some(&have));
        let left: Vec<(SocketAddr, bool)> =
            d.iter().map(|(_, a, e)| (a, e.started.is_some())).collect();
        assert_eq!(
            left,
            [
                (addr(1), true),
                (addr(2), false),
                (addr(3), true),
                (addr(4), true),
                (addr(6), false)
            ]
        );
        assert_eq!(d.timed_keys().collect::<Vec<_>>(), [&key()]);
        // The service gone, not desired: nothing left.
        d.settle(&key(), None, None);
        assert!(d.is_empty());
        assert_eq!(d.timed_keys().count(), 0);
        // Drain times alone time nothing.
        d.set_drain_time(key(), addr(1), Duration::from_secs(1));
        assert_eq!(d.timed_keys().count(), 0);
        d.start(key(), addr(1), t0, false);
        d.forget(&key(), &addr(1));
        assert_eq!(d.timed_keys().count(), 0);
    }
}
