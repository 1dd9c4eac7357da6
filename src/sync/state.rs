//! The two sides of a sync: the state the caller wants ([`DesiredState`])
//! and the state the kernel has, as read or remembered ([`Observed`]).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::net::SocketAddr;

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
}

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
/// Every entry is validated when it is inserted, so a plan built from a
/// `DesiredState` never contains a request the codec would refuse. Services
/// keep the order they were inserted in (the plan adds them in that order).
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
/// # Ok::<(), DesiredError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DesiredState {
    services: Vec<DesiredService>,
    index: HashMap<ServiceKey, usize>,
}

impl DesiredState {
    /// An empty desired state (syncing it removes every service in scope).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty desired state with room for `services` services.
    pub fn with_capacity(services: usize) -> Self {
        DesiredState {
            services: Vec::with_capacity(services),
            index: HashMap::with_capacity(services),
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
        key.validate()
            .and_then(|()| service.validate())
            .map_err(|source| DesiredError::InvalidService { key, source })?;
        let mut dests: Vec<RealServer> = destinations.into_iter().collect();
        for rs in &dests {
            validate_destination(&key, rs).map_err(|source| DesiredError::InvalidDestination {
                key,
                server: rs.addr,
                source,
            })?;
        }
        dests.sort_unstable_by_key(|rs| rs.addr);
        if let Some(w) = dests.windows(2).find(|w| w[0].addr == w[1].addr) {
            return Err(DesiredError::DuplicateDestination {
                key,
                server: w[0].addr,
            });
        }
        slot.insert(self.services.len());
        self.services.push(DesiredService { service, dests });
        Ok(())
    }

    /// The desired entry of a service.
    pub fn get(&self, key: &ServiceKey) -> Option<&DesiredService> {
        self.index.get(key).and_then(|&i| self.services.get(i))
    }

    /// Whether a service is desired.
    pub fn contains(&self, key: &ServiceKey) -> bool {
        self.index.contains_key(key)
    }

    /// The services in insertion order.
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

/// A real server as observed: its configuration and, when it was read from
/// the kernel (not remembered), its connection counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObservedDest {
    /// The configuration.
    pub server: RealServer,
    /// Connection counts at the time of the read; `None` when the value is
    /// remembered from what was applied (counts unknown).
    pub conns: Option<ConnCounts>,
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
    dests: Vec<ObservedDest>,
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

    /// The real servers, sorted by address.
    pub fn destinations(&self) -> &[ObservedDest] {
        &self.dests
    }

    /// The real server with this address.
    pub fn destination(&self, addr: &SocketAddr) -> Option<&ObservedDest> {
        self.dests
            .binary_search_by_key(addr, |d| d.server.addr)
            .ok()
            .map(|i| &self.dests[i])
    }

    /// Replaces every real server.
    pub fn set_destinations(&mut self, dests: impl IntoIterator<Item = ObservedDest>) {
        let mut v: Vec<ObservedDest> = dests.into_iter().collect();
        // Stable, so that of equal addresses the last given is kept last.
        v.sort_by_key(|d| d.server.addr);
        v.reverse();
        v.dedup_by_key(|d| d.server.addr);
        v.reverse();
        self.dests = v;
    }

    /// Inserts or replaces one real server.
    pub fn upsert(&mut self, d: ObservedDest) {
        match self
            .dests
            .binary_search_by_key(&d.server.addr, |x| x.server.addr)
        {
            Ok(i) => self.dests[i] = d,
            Err(i) => self.dests.insert(i, d),
        }
    }

    /// Removes one real server; whether it was there.
    pub fn remove(&mut self, addr: &SocketAddr) -> bool {
        match self.dests.binary_search_by_key(addr, |x| x.server.addr) {
            Ok(i) => {
                self.dests.remove(i);
                true
            }
            Err(_) => false,
        }
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
///     [ObservedDest { server: rs, conns: None }],
/// ));
/// assert_eq!(observed.get(&key).unwrap().destinations().len(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    services: HashMap<ServiceKey, ObservedService>,
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
}
