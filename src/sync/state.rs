//! The two sides of a sync: the state the caller wants ([`DesiredState`])
//! and the state the kernel has, as read or remembered ([`Observed`]).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

use super::key_hash::KeyHashing;
use super::packed::{PackedDest, addr_order};
use crate::batch::Write;
use crate::model::{
    ConnCounts, DestinationSnapshot, RealServer, ServiceKey, ValidationError, VirtualServer,
    validate_destination,
};

/// Why a service cannot be part of a [`DesiredState`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DesiredError {
    /// The service was already given.
    #[error("service {key}: given twice in the desired state")]
    DuplicateService {
        /// The service.
        key: ServiceKey,
    },
    /// Two real servers of one service have the same address.
    #[error("service {key}: real server {server} given twice")]
    DuplicateDestination {
        /// The service.
        key: ServiceKey,
        /// The real server's address.
        server: SocketAddr,
    },
    /// The service's configuration is invalid.
    #[error("service {key}: {source}")]
    InvalidService {
        /// The service.
        key: ServiceKey,
        /// What is wrong (names the field).
        source: ValidationError,
    },
    /// A real server's configuration is invalid for its service.
    #[error("service {key}: real server {server}: {source}")]
    InvalidDestination {
        /// The service.
        key: ServiceKey,
        /// The real server's address.
        server: SocketAddr,
        /// What is wrong (names the field).
        source: ValidationError,
    },
    /// Real servers were given for a service that is not desired.
    #[error("service {key}: not in the desired state")]
    UnknownService {
        /// The service.
        key: ServiceKey,
    },
}

/// The most changes whose room a [`DesiredState`]'s record keeps once it is
/// taken or cleared.
const KEPT_RECORD_ROOM: usize = 1024;

/// One service of the desired state, with its real servers sorted by address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredService {
    service: VirtualServer,
    dests: Vec<RealServer>,
}

impl DesiredService {
    /// The virtual server.
    pub fn service(&self) -> &VirtualServer {
        &self.service
    }

    /// Its real servers, sorted by address, addresses unique.
    pub fn destinations(&self) -> &[RealServer] {
        &self.dests
    }
}

/// The complete set of services a caller wants, each with its real servers.
///
/// Every entry is validated when it is inserted or changed, so a plan built
/// from a `DesiredState` never contains a request the codec would refuse; a
/// refused change changes nothing. Services keep the order they were
/// inserted in (the plan adds them in that order), except that removing one
/// moves the last service into its place.
///
/// Every change ([`insert`](Self::insert), [`upsert`](Self::upsert),
/// [`remove`](Self::remove), [`upsert_destinations`](Self::upsert_destinations),
/// [`remove_destinations`](Self::remove_destinations)) records the service's
/// key, so that [`Syncer::sync_changes`](super::Syncer::sync_changes) can
/// sync just those services ([`changes`](Self::changes)).
///
/// ```
/// use ipvsctl::model::{RealServer, ServiceKey, VirtualServer};
/// use ipvsctl::sync::{DesiredError, DesiredState};
///
/// let key = ServiceKey::tcp("10.96.0.1:443".parse().unwrap());
/// let rs = RealServer::new("10.244.0.2:6443".parse().unwrap());
/// let mut desired = DesiredState::new();
/// desired.insert(VirtualServer::new(key), [rs])?;
/// assert!(matches!(
///     desired.insert(VirtualServer::new(key), []),
///     Err(DesiredError::DuplicateService { .. })
/// ));
/// assert_eq!(desired.len(), 1);
/// assert_eq!(desired.changes(), &[key]);
/// # Ok::<(), DesiredError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct DesiredState {
    services: Vec<DesiredService>,
    index: HashMap<ServiceKey, usize, KeyHashing>,
    /// Keys of the services changed since the record was last taken, in the
    /// order of their first change (`changed` holds the same keys).
    changes: Vec<ServiceKey>,
    changed: HashSet<ServiceKey, KeyHashing>,
}

/// Two desired states are equal when they hold the same services in the same
/// order, whatever changes they have recorded.
impl PartialEq for DesiredState {
    fn eq(&self, other: &Self) -> bool {
        self.services == other.services
    }
}

impl Eq for DesiredState {}

impl DesiredState {
    /// An empty desired state (syncing it removes every service in scope).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty desired state with room for `services` services.
    pub fn with_capacity(services: usize) -> Self {
        DesiredState {
            services: Vec::with_capacity(services),
            index: HashMap::with_capacity_and_hasher(services, KeyHashing::default()),
            changes: Vec::new(),
            changed: HashSet::default(),
        }
    }

    /// Adds a service with its real servers. Refuses, changing nothing, a
    /// service given twice, two real servers with one address, and anything
    /// the kernel would refuse on validation.
    pub fn insert(
        &mut self,
        service: VirtualServer,
        destinations: impl IntoIterator<Item = RealServer>,
    ) -> Result<(), DesiredError> {
        let key = service.key;
        // One hash of the key for the check and the insertion.
        let Entry::Vacant(slot) = self.index.entry(key) else {
            return Err(DesiredError::DuplicateService { key });
        };
        let entry = DesiredService::validated(service, destinations)?;
        slot.insert(self.services.len());
        self.services.push(entry);
        self.record(key);
        Ok(())
    }

    /// Adds a service with its real servers, or replaces the service and
    /// all its real servers if it is desired already. Refuses, changing
    /// nothing, what [`insert`](Self::insert) refuses (except a service
    /// given twice).
    pub fn upsert(
        &mut self,
        service: VirtualServer,
        destinations: impl IntoIterator<Item = RealServer>,
    ) -> Result<(), DesiredError> {
        let key = service.key;
        let entry = DesiredService::validated(service, destinations)?;
        match self.index.get(&key) {
            Some(&i) => self.services[i] = entry,
            None => {
                self.index.insert(key, self.services.len());
                self.services.push(entry);
            }
        }
        self.record(key);
        Ok(())
    }

    /// Removes a service (syncing then deletes it, with its real servers);
    /// the entry it had, if it was desired. The last service takes its place
    /// in the order.
    pub fn remove(&mut self, key: &ServiceKey) -> Option<DesiredService> {
        let i = self.index.remove(key)?;
        let entry = self.services.swap_remove(i);
        if let Some(moved) = self.services.get(i) {
            self.index.insert(moved.service.key, i);
        }
        self.record(*key);
        Some(entry)
    }

    /// Adds real servers to a desired service, or replaces those it has
    /// with the same addresses. Refuses, changing nothing, a service that is
    /// not desired, two given real servers with one address, and a real
    /// server the kernel would refuse for this service.
    pub fn upsert_destinations(
        &mut self,
        key: &ServiceKey,
        destinations: impl IntoIterator<Item = RealServer>,
    ) -> Result<(), DesiredError> {
        let key = *key;
        let &i = self
            .index
            .get(&key)
            .ok_or(DesiredError::UnknownService { key })?;
        let mut given = destinations.into_iter();
        let (first, second) = (given.next(), given.next());
        let dests = &mut self.services[i].dests;
        if let (Some(rs), None) = (first, second) {
            // One real server, the usual change of an endpoint: put in
            // place without a list of them to build.
            checked_destination(&key, &rs)?;
            upsert_sorted(dests, rs);
        } else {
            let given = first.into_iter().chain(second).chain(given);
            let new = validated_destinations(&key, given)?;
            if new.len() > 8 {
                // Many at once: one merge of two sorted lists.
                let old = std::mem::take(dests);
                *dests = merge_sorted(old, new);
            } else {
                for rs in new {
                    upsert_sorted(dests, rs);
                }
            }
        }
        self.record(key);
        Ok(())
    }

    /// Removes real servers from a desired service (addresses it does not
    /// have are ignored); how many were removed. Refuses a service that is
    /// not desired.
    pub fn remove_destinations(
        &mut self,
        key: &ServiceKey,
        addrs: impl IntoIterator<Item = SocketAddr>,
    ) -> Result<usize, DesiredError> {
        let key = *key;
        let &i = self
            .index
            .get(&key)
            .ok_or(DesiredError::UnknownService { key })?;
        let dests = &mut self.services[i].dests;
        let before = dests.len();
        for addr in addrs {
            if let Ok(j) = dests.binary_search_by_key(&addr, |d| d.addr) {
                dests.remove(j);
            }
        }
        let removed = before - dests.len();
        self.record(key);
        Ok(removed)
    }

    /// The keys of the services changed (inserted, replaced, removed, their
    /// real servers changed) since the record was last taken or cleared, in
    /// the order of their first change.
    pub fn changes(&self) -> &[ServiceKey] {
        &self.changes
    }

    /// Takes the record of changes (see [`changes`](Self::changes)),
    /// leaving it empty.
    pub fn take_changes(&mut self) -> Vec<ServiceKey> {
        self.forget_changed();
        std::mem::take(&mut self.changes)
    }

    /// Forgets the record of changes, for instance after a full
    /// [`Syncer::sync`](super::Syncer::sync) of this state.
    pub fn clear_changes(&mut self) {
        self.forget_changed();
        if self.changes.capacity() > KEPT_RECORD_ROOM {
            self.changes = Vec::new();
        } else {
            self.changes.clear();
        }
    }

    /// Empties `changed` (which holds the keys of `changes`) in time that
    /// follows the number of changes. Clearing a hash set costs its
    /// capacity: at 10,000 services the memset of a set with room for all
    /// was a tenth of a one-change `sync_changes` (perf in a 6.1 guest). A
    /// record with room for many changes (a state built service by service
    /// records every service) gives its room back instead: at 50,000
    /// services the record takes 4.8 MB.
    fn forget_changed(&mut self) {
        if self.changed.capacity() > KEPT_RECORD_ROOM {
            self.changed = HashSet::default();
        } else if self.changes.len() * 8 < self.changed.capacity() {
            for key in &self.changes {
                self.changed.remove(key);
            }
        } else {
            self.changed.clear();
        }
    }

    /// Records a change of the service `key`.
    pub(super) fn record(&mut self, key: ServiceKey) {
        if self.changed.insert(key) {
            self.changes.push(key);
        }
    }

    /// The desired entry of a service.
    pub fn get(&self, key: &ServiceKey) -> Option<&DesiredService> {
        self.index.get(key).and_then(|&i| self.services.get(i))
    }

    /// Whether a service is desired.
    pub fn contains(&self, key: &ServiceKey) -> bool {
        self.index.contains_key(key)
    }

    /// Where a desired service is in [`DesiredState::services`].
    pub(crate) fn position(&self, key: &ServiceKey) -> Option<usize> {
        self.index.get(key).copied()
    }

    /// The services in order (see [`DesiredState`]).
    pub fn services(&self) -> &[DesiredService] {
        &self.services
    }

    /// The number of services.
    pub fn len(&self) -> usize {
        self.services.len()
    }

    /// Whether there are no services.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    /// The total number of real servers.
    pub fn destination_count(&self) -> usize {
        self.services.iter().map(|s| s.dests.len()).sum()
    }
}

impl DesiredService {
    /// A validated entry: the service valid, each real server valid for it,
    /// addresses unique (sorted).
    fn validated(
        service: VirtualServer,
        destinations: impl IntoIterator<Item = RealServer>,
    ) -> Result<Self, DesiredError> {
        let key = service.key;
        key.validate()
            .and_then(|()| service.validate())
            .map_err(|source| DesiredError::InvalidService { key, source })?;
        let dests = validated_destinations(&key, destinations)?;
        Ok(DesiredService { service, dests })
    }
}

/// Real servers valid for the service `key`, sorted, addresses unique.
fn validated_destinations(
    key: &ServiceKey,
    destinations: impl IntoIterator<Item = RealServer>,
) -> Result<Vec<RealServer>, DesiredError> {
    let key = *key;
    let mut dests: Vec<RealServer> = destinations.into_iter().collect();
    for rs in &dests {
        checked_destination(&key, rs)?;
    }
    dests.sort_unstable_by_key(|rs| rs.addr);
    if let Some(w) = dests.windows(2).find(|w| w[0].addr == w[1].addr) {
        return Err(DesiredError::DuplicateDestination {
            key,
            server: w[0].addr,
        });
    }
    Ok(dests)
}

/// Whether the kernel would take `rs` as a real server of the service
/// `key`.
fn checked_destination(key: &ServiceKey, rs: &RealServer) -> Result<(), DesiredError> {
    validate_destination(key, rs).map_err(|source| DesiredError::InvalidDestination {
        key: *key,
        server: rs.addr,
        source,
    })
}

/// Puts `rs` into `dests` (sorted by address), replacing the real server
/// with its address.
fn upsert_sorted(dests: &mut Vec<RealServer>, rs: RealServer) {
    match dests.binary_search_by_key(&rs.addr, |d| d.addr) {
        Ok(j) => dests[j] = rs,
        Err(j) => dests.insert(j, rs),
    }
}

/// Merges two lists sorted by address, unique each; of equal addresses the
/// one from `new` is kept.
fn merge_sorted(old: Vec<RealServer>, new: Vec<RealServer>) -> Vec<RealServer> {
    let mut out = Vec::with_capacity(old.len() + new.len());
    let mut old = old.into_iter().peekable();
    for rs in new {
        while let Some(o) = old.next_if(|o| o.addr < rs.addr) {
            out.push(o);
        }
        old.next_if(|o| o.addr == rs.addr);
        out.push(rs);
    }
    out.extend(old);
    out
}

/// A real server as observed: its configuration and, when it was read from
/// the kernel (not remembered), its connection counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObservedDest {
    /// The configuration.
    pub server: RealServer,
    /// Connection counts at the time of the read; `None` when the value is
    /// remembered from what was applied (counts unknown).
    pub conns: Option<ConnCounts>,
}

impl ObservedDest {
    /// A real server with its configuration and, when read from the kernel,
    /// its connection counts (`None`: remembered, counts unknown).
    pub fn new(server: RealServer, conns: Option<ConnCounts>) -> Self {
        ObservedDest { server, conns }
    }
}

impl From<DestinationSnapshot> for ObservedDest {
    fn from(d: DestinationSnapshot) -> Self {
        ObservedDest {
            server: d.server,
            conns: Some(d.conns),
        }
    }
}

/// A service as observed, with its real servers sorted by address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedService {
    /// The configuration.
    pub service: VirtualServer,
    dests: Vec<PackedDest>,
}

impl ObservedService {
    /// A service with the given real servers (sorted here; of two with the
    /// same address the last wins).
    pub fn new(service: VirtualServer, dests: impl IntoIterator<Item = ObservedDest>) -> Self {
        let mut s = ObservedService {
            service,
            dests: Vec::new(),
        };
        s.set_destinations(dests);
        s
    }

    /// The real servers, sorted by address. Memory keeps each in a packed
    /// form (52 bytes), so they are given by value.
    pub fn destinations(&self) -> impl ExactSizeIterator<Item = ObservedDest> + '_ {
        self.dests.iter().map(PackedDest::unpack)
    }

    /// The real servers as memory keeps them, in address order (for the
    /// plan, which compares them without unpacking each).
    pub(super) fn packed(&self) -> &[PackedDest] {
        &self.dests
    }

    /// The real server with this address.
    pub fn destination(&self, addr: &SocketAddr) -> Option<ObservedDest> {
        self.find(addr).ok().map(|i| self.dests[i].unpack())
    }

    /// Where the real server with this address is, or would be.
    fn find(&self, addr: &SocketAddr) -> Result<usize, usize> {
        let at = addr_order(addr);
        self.dests.binary_search_by(|d| d.order().cmp(&at))
    }

    /// Replaces every real server. An IPv6 address keeps no flow label or
    /// scope id (the kernel has neither).
    pub fn set_destinations(&mut self, dests: impl IntoIterator<Item = ObservedDest>) {
        // Written into the list's own room: a list read back usually has
        // the length it had, while a decoded one was grown by doubling (ten
        // real servers in room for sixteen). Kept instead, that spare room
        // and the holes the old lists left raised the peak memory of a
        // `Verify::Full` resync of 50,000 x 10 by about 35 MB.
        let v = &mut self.dests;
        v.clear();
        v.extend(dests.into_iter().map(|d| PackedDest::pack(&d)));
        // Stable, so that of equal addresses the last given is kept last.
        v.sort_by_key(PackedDest::order);
        v.reverse();
        v.dedup_by_key(|d| d.order());
        v.reverse();
    }

    /// Makes room for `count()` real servers, and no more, unless it has
    /// room for some already (then `count` is not called).
    pub(crate) fn reserve_if_empty(&mut self, count: impl FnOnce() -> usize) {
        if self.dests.capacity() == 0 {
            self.dests.reserve_exact(count());
        }
    }

    /// Inserts or replaces one real server.
    pub fn upsert(&mut self, d: ObservedDest) {
        let packed = PackedDest::pack(&d);
        // A sync adds a service's real servers in address order: each new
        // one goes last, found with one comparison instead of a search.
        if self.dests.last().is_none_or(|l| l.order() < packed.order()) {
            self.dests.push(packed);
            return;
        }
        match self.find(&d.server.addr) {
            Ok(i) => self.dests[i] = packed,
            Err(i) => self.dests.insert(i, packed),
        }
    }

    /// Removes one real server; whether it was there.
    pub fn remove(&mut self, addr: &SocketAddr) -> bool {
        match self.find(addr) {
            Ok(i) => {
                self.dests.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    /// How many real servers it has.
    pub fn destination_count(&self) -> usize {
        self.dests.len()
    }

    /// Whether its real servers are exactly `servers` (sorted by address),
    /// connection counts aside.
    pub(crate) fn has_exactly(&self, servers: &[RealServer]) -> bool {
        self.dests.len() == servers.len() && self.dests.iter().zip(servers).all(|(d, rs)| d.is(rs))
    }
}

/// The kernel's IPVS state as read or remembered: services by key.
///
/// ```
/// use ipvsctl::model::{RealServer, ServiceKey, VirtualServer};
/// use ipvsctl::sync::{Observed, ObservedDest, ObservedService};
///
/// let key = ServiceKey::tcp("10.96.0.1:443".parse().unwrap());
/// let rs = RealServer::new("10.244.0.2:6443".parse().unwrap());
/// let mut observed = Observed::new();
/// observed.insert(ObservedService::new(
///     VirtualServer::new(key),
///     [ObservedDest::new(rs, None)],
/// ));
/// assert_eq!(observed.get(&key).unwrap().destinations().len(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    services: HashMap<ServiceKey, ObservedService, KeyHashing>,
}

impl Observed {
    /// No services.
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts or replaces a service.
    pub fn insert(&mut self, s: ObservedService) {
        self.services.insert(s.service.key, s);
    }

    /// Makes room for `additional` more services at once: a cold sync's
    /// memory would otherwise be rehashed every time it doubles while the
    /// kernel's answers are booked.
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.services.reserve(additional);
    }

    /// Removes a service.
    pub fn remove(&mut self, key: &ServiceKey) -> Option<ObservedService> {
        self.services.remove(key)
    }

    /// A service.
    pub fn get(&self, key: &ServiceKey) -> Option<&ObservedService> {
        self.services.get(key)
    }

    /// A service, mutably.
    pub fn get_mut(&mut self, key: &ServiceKey) -> Option<&mut ObservedService> {
        self.services.get_mut(key)
    }

    /// Whether a service is present.
    pub fn contains(&self, key: &ServiceKey) -> bool {
        self.services.contains_key(key)
    }

    /// Every service, in no particular order.
    pub fn services(&self) -> impl Iterator<Item = &ObservedService> {
        self.services.values()
    }

    /// Every service key, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = &ServiceKey> {
        self.services.keys()
    }

    /// Keeps only the services for which `f` is true.
    pub fn retain(&mut self, mut f: impl FnMut(&ServiceKey, &mut ObservedService) -> bool) {
        self.services.retain(|k, s| f(k, s));
    }

    /// The number of services.
    pub fn len(&self) -> usize {
        self.services.len()
    }

    /// Whether there are no services.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    /// The total number of real servers.
    pub fn destination_count(&self) -> usize {
        self.services.values().map(|s| s.dests.len()).sum()
    }

    /// Records what an operation the kernel acknowledged did: how a
    /// [`Syncer`](super::Syncer) keeps its memory. Real servers added or
    /// changed have unknown connection counts; operations on the real
    /// servers of a service that is not here change nothing.
    ///
    /// ```
    /// use ipvsctl::batch::Write;
    /// use ipvsctl::model::{RealServer, ServiceKey, VirtualServer};
    /// use ipvsctl::sync::Observed;
    ///
    /// let key = ServiceKey::tcp("10.96.0.1:443".parse().unwrap());
    /// let rs = RealServer::new("10.244.0.2:6443".parse().unwrap());
    /// let mut observed = Observed::new();
    /// observed.apply(&Write::AddService(VirtualServer::new(key)));
    /// observed.apply(&Write::AddDestination(key, rs));
    /// assert_eq!(observed.get(&key).unwrap().destination(&rs.addr).unwrap().server, rs);
    /// ```
    pub fn apply(&mut self, op: &Write) {
        self.apply_with_room(op, || 0);
    }

    /// What [`Observed::apply_with_room`] does for the acknowledged adds of
    /// `servers` to the service `key`, one after the other, with one lookup
    /// of the service: a cold sync's answers are mostly such runs.
    pub(crate) fn add_destinations<'a>(
        &mut self,
        key: &ServiceKey,
        servers: impl IntoIterator<Item = &'a RealServer>,
        room: impl FnOnce() -> usize,
    ) {
        if let Some(m) = self.get_mut(key) {
            m.reserve_if_empty(room);
            for rs in servers {
                m.upsert(ObservedDest {
                    server: *rs,
                    conns: None,
                });
            }
        }
    }

    /// [`Observed::apply`], making room for `room()` real servers in a
    /// service's list when a real server is added to a list with no room
    /// yet (`room` is called then only).
    pub(crate) fn apply_with_room(&mut self, op: &Write, room: impl FnOnce() -> usize) {
        match op {
            Write::AddService(vs) => self.insert(ObservedService::new(vs.clone(), [])),
            Write::UpdateService(vs) => {
                if let Some(m) = self.get_mut(&vs.key) {
                    m.service = vs.clone();
                }
            }
            Write::DeleteService(k) => {
                self.remove(k);
            }
            Write::AddDestination(k, rs) | Write::UpdateDestination(k, rs) => {
                self.add_destinations(k, [rs], room);
            }
            Write::DeleteDestination(k, addr) => {
                if let Some(m) = self.get_mut(k) {
                    m.remove(addr);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RealServer, ServiceKey, VirtualServer};

    fn dest(addr: &str, weight: u32) -> ObservedDest {
        ObservedDest {
            server: RealServer::new(addr.parse().unwrap()).with_weight(weight),
            conns: None,
        }
    }

    #[test]
    fn set_destinations_sorts_keeps_the_last_repeat_and_reuses_the_room() {
        let key = ServiceKey::tcp("10.96.0.1:80".parse().unwrap());
        let mut s = ObservedService::new(VirtualServer::new(key), []);
        s.reserve_if_empty(|| 3);
        let room = s.dests.capacity();
        s.set_destinations([
            dest("10.0.0.3:80", 1),
            dest("10.0.0.1:80", 1),
            dest("10.0.0.2:80", 1),
        ]);
        assert_eq!(s.dests.capacity(), room, "a list of the same length grew");
        // A decoded list with spare room: only its real servers are kept.
        let mut decoded = Vec::with_capacity(16);
        decoded.extend([
            dest("10.0.0.2:80", 1),
            dest("10.0.0.1:80", 1),
            dest("10.0.0.2:80", 7),
        ]);
        s.set_destinations(decoded);
        assert_eq!(s.dests.capacity(), room);
        let got: Vec<(String, u32)> = s
            .destinations()
            .map(|d| (d.server.addr.to_string(), d.server.weight))
            .collect();
        assert_eq!(
            got,
            [
                ("10.0.0.1:80".to_string(), 1),
                ("10.0.0.2:80".to_string(), 7)
            ]
        );
        // Room is made only for a list that has none.
        s.reserve_if_empty(|| unreachable!("the list has room"));
        assert_eq!(s.dests.capacity(), room);
    }

    proptest::proptest! {
        /// Real servers upserted one by one, in any order (in address
        /// order, as a sync adds them, included), make the list that
        /// replacing them all at once makes: sorted, the last of an address
        /// kept.
        #[test]
        fn upserts_one_by_one_make_the_list_set_at_once(
            given in proptest::collection::vec((0u8..6, proptest::bool::ANY, 0u16..3, 0u32..4), 0..24),
            sorted in proptest::bool::ANY,
        ) {
            let mut given: Vec<ObservedDest> = given
                .into_iter()
                .map(|(host, v6, port, weight)| {
                    let addr = if v6 {
                        format!("[2001:db8::{host}]:{port}")
                    } else {
                        format!("10.0.0.{host}:{port}")
                    };
                    dest(&addr, weight)
                })
                .collect();
            if sorted {
                given.sort_by_key(|d| d.server.addr);
            }
            let key = ServiceKey::tcp("10.96.0.1:80".parse().unwrap());
            let mut one_by_one = ObservedService::new(VirtualServer::new(key), []);
            for d in &given {
                one_by_one.upsert(*d);
            }
            let at_once = ObservedService::new(VirtualServer::new(key), given);
            let listed = |s: &ObservedService| s.destinations().collect::<Vec<_>>();
            proptest::prop_assert_eq!(listed(&one_by_one), listed(&at_once));
        }
    }
}
