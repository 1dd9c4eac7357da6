//! The ownership ledger: which services a syncer made or was given, which
//! it is about to create or delete, and the write-ahead hook that keeps that
//! record across crashes.
//!
//! IPVS keeps no owner with a service, so what a syncer may change is
//! exactly what its ledger says. Every decision about ownership (planning,
//! reading the kernel, settling a write's answer, healing, the report's
//! conflicts) is one of the transitions below; nothing else in the syncer
//! keeps a list of owned keys.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::io;

use super::key_hash::KeyHashing;
use crate::Error;
use crate::model::{ServiceKey, VirtualServer};

/// What a [`Ledger`] records for one service key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ownership<'a> {
    /// An add of this service, with these settings, is about to be sent, or
    /// was sent and its outcome is not known. Resolved from what the kernel
    /// shows: a service there with exactly these settings is the syncer's;
    /// no service, nothing to own; a service with other settings is someone
    /// else's.
    Claiming(&'a VirtualServer),
    /// Created by the syncer (the kernel acknowledged its add) or adopted.
    Owned,
    /// Owned, and a delete is about to be sent (or was sent with an unknown
    /// outcome); the service had these settings. Resolved like a claim: a
    /// service there with these settings is still the syncer's.
    Releasing(&'a VirtualServer),
}

/// The services a [`Syncer`](super::Syncer) owns and those it is about to
/// create or delete, by key.
///
/// A key is [`Ownership::Claiming`] from just before its add is sent until
/// the answer settles it (owned when the kernel acknowledged it, dropped
/// when the kernel refused it), [`Ownership::Owned`] while the service is
/// the syncer's, and [`Ownership::Releasing`] while its delete is under way.
/// A key leaves the ledger when its delete is acknowledged or when the
/// kernel shows the service gone, so the ledger holds at most the services
/// of the table the syncer made, plus those of one sync's adds.
///
/// A [`LedgerStore`] given to the syncer receives the ledger before every
/// write that creates or deletes a service and after their answers, so a
/// restarted agent resumes with [`Syncer::with_ledger`](super::Syncer::with_ledger)
/// and owns what its previous run made, even one killed mid-sync.
///
/// ```
/// use ipvsctl::model::{ServiceKey, VirtualServer};
/// use ipvsctl::sync::{Ledger, Ownership};
/// let a = ServiceKey::tcp("10.96.0.1:80".parse().unwrap());
/// let b = VirtualServer::new(ServiceKey::tcp("10.96.0.2:80".parse().unwrap()));
/// let mut ledger = Ledger::new();
/// ledger.insert_owned(a);
/// ledger.insert_claiming(b.clone());
/// assert_eq!(ledger.get(&a), Some(Ownership::Owned));
/// assert_eq!(ledger.get(&b.key), Some(Ownership::Claiming(&b)));
/// assert!(ledger.owned().contains(&a) && !ledger.owned().contains(&b.key));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    /// Keys owned ([`Ownership::Owned`] and [`Ownership::Releasing`]): what
    /// a scope counts as the syncer's.
    owned: HashSet<ServiceKey, KeyHashing>,
    /// The settings of keys claimed or being released.
    pending: HashMap<ServiceKey, Pending, KeyHashing>,
    /// Keys whose entry changed since the store last saved the ledger.
    unsaved: Vec<ServiceKey>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pending {
    Claiming(VirtualServer),
    Releasing(VirtualServer),
}

impl PartialEq for Ledger {
    /// Two ledgers are equal when they record the same entries (whether
    /// they were saved is not compared).
    fn eq(&self, other: &Self) -> bool {
        self.owned == other.owned && self.pending == other.pending
    }
}

impl Eq for Ledger {}

/// How the kernel's state settled a key the ledger had claimed or was
/// releasing, or an owned key; see [`Ledger::resolve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// The service is the syncer's (owned, or a claim found with its
    /// settings).
    Mine,
    /// The ledger had a claim or a release for the key, and the kernel's
    /// service has other settings: someone else's.
    NotMine(ConflictReason),
    /// Neither in the ledger nor the syncer's.
    Unknown,
    /// No such service in the kernel; the key left the ledger.
    Gone,
}

/// Why a desired service was left alone as a
/// [`SyncConflict`](super::SyncConflict).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConflictReason {
    /// The service existed in the kernel, and the ledger has no record of
    /// the syncer making it.
    Found,
    /// The kernel refused the syncer's add: a service with that key
    /// existed.
    AddRefused,
    /// The ledger recorded an add of the service that may not have reached
    /// the kernel (the syncer stopped, or the answer was lost), and the
    /// kernel's service has other settings than the ones claimed: another
    /// tool made it.
    ClaimedWithOtherSettings {
        /// The settings the syncer claimed it with.
        claimed: VirtualServer,
    },
    /// The ledger recorded a delete of the service that may not have
    /// reached the kernel, and the kernel's service has other settings than
    /// the deleted one had: another tool made it since.
    ReleasedWithOtherSettings {
        /// The settings the syncer's service had.
        released: VirtualServer,
    },
}

/// How a claimed add settled; see [`Ledger::settle_claim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimOutcome {
    /// Acknowledged: owned.
    Created,
    /// Refused because the key exists: someone else's.
    Exists,
    /// Refused for another reason the kernel gave: nothing was created.
    Refused,
    /// Timed out, lost, unanswered, undecodable or cut off by a socket
    /// failure: still claiming; the next read resolves it.
    Unknown,
}

/// Whether the kernel's answer `e` says for certain what became of the
/// request: an errno from the kernel. A lost, missing or undecodable answer,
/// a timeout or a socket failure leaves the outcome unknown.
pub(crate) fn outcome_known(e: &Error) -> bool {
    e.errno().is_some() && !matches!(e, Error::Io { .. })
}

impl Ledger {
    /// An empty ledger: a syncer that owns nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// What the ledger records for `key`.
    pub fn get(&self, key: &ServiceKey) -> Option<Ownership<'_>> {
        match self.pending.get(key) {
            Some(Pending::Claiming(vs)) => Some(Ownership::Claiming(vs)),
            Some(Pending::Releasing(vs)) => Some(Ownership::Releasing(vs)),
            None => self.owned.contains(key).then_some(Ownership::Owned),
        }
    }

    /// Whether the ledger has an entry for `key`.
    pub fn contains(&self, key: &ServiceKey) -> bool {
        self.owned.contains(key) || self.pending.contains_key(key)
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&ServiceKey, Ownership<'_>)> {
        let claims = self.pending.iter().filter_map(|(k, p)| match p {
            Pending::Claiming(vs) => Some((k, Ownership::Claiming(vs))),
            Pending::Releasing(_) => None,
        });
        let owned = self.owned.iter().map(|k| {
            let state = match self.pending.get(k) {
                Some(Pending::Releasing(vs)) => Ownership::Releasing(vs),
                _ => Ownership::Owned,
            };
            (k, state)
        });
        claims.chain(owned)
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.owned.len() + self.claims()
    }

    /// Whether the ledger has no entry.
    pub fn is_empty(&self) -> bool {
        self.owned.is_empty() && self.pending.is_empty()
    }

    /// The keys the syncer owns ([`Ownership::Owned`] and
    /// [`Ownership::Releasing`]), as [`Scope::includes`](super::Scope::includes)
    /// and the planners take them. The set hashes its keys with the
    /// syncer's own hasher (a sync asks it about every service the kernel
    /// shows).
    pub fn owned(&self) -> &HashSet<ServiceKey, impl BuildHasher + Clone + std::fmt::Debug> {
        &self.owned
    }

    /// Records `key` as owned (for a store loading a saved ledger, or
    /// [`Syncer::adopt`](super::Syncer::adopt)).
    pub fn insert_owned(&mut self, key: ServiceKey) {
        if self.pending.remove(&key).is_some() | self.owned.insert(key) {
            self.unsaved.push(key);
        }
    }

    /// Records a claim of `vs` (for a store loading a saved ledger).
    pub fn insert_claiming(&mut self, vs: VirtualServer) {
        let key = vs.key;
        self.owned.remove(&key);
        self.pending.insert(key, Pending::Claiming(vs));
        self.unsaved.push(key);
    }

    /// Records a release of `vs`, an owned service (for a store loading a
    /// saved ledger).
    pub fn insert_releasing(&mut self, vs: VirtualServer) {
        let key = vs.key;
        self.owned.insert(key);
        self.pending.insert(key, Pending::Releasing(vs));
        self.unsaved.push(key);
    }

    /// Removes the entry of `key`, if any.
    pub fn remove(&mut self, key: &ServiceKey) -> bool {
        let had = self.owned.remove(key) | self.pending.remove(key).is_some();
        if had {
            self.unsaved.push(*key);
        }
        had
    }

    /// How many claims the ledger holds.
    fn claims(&self) -> usize {
        self.pending
            .values()
            .filter(|p| matches!(p, Pending::Claiming(_)))
            .count()
    }

    /// Makes room for `n` more claims.
    pub(crate) fn reserve_claims(&mut self, n: usize) {
        self.pending.reserve(n);
        self.owned.reserve(n);
        self.unsaved.reserve(2 * n);
    }

    /// Records that an add of `vs` is about to be sent.
    pub(crate) fn claim(&mut self, vs: &VirtualServer) {
        self.insert_claiming(vs.clone());
    }

    /// Records that a delete of the owned service `vs` is about to be sent.
    pub(crate) fn release(&mut self, vs: &VirtualServer) {
        self.insert_releasing(vs.clone());
    }

    /// Takes back a claim or release recorded ahead of writes that were not
    /// sent: a claimed key leaves the ledger, a released one stays owned.
    pub(crate) fn withdraw(&mut self, key: &ServiceKey) {
        match self.pending.get(key) {
            Some(Pending::Claiming(_)) => {
                self.remove(key);
            }
            Some(Pending::Releasing(_)) => {
                self.pending.remove(key);
                self.unsaved.push(*key);
            }
            None => {}
        }
    }

    /// Settles a claimed add by its answer.
    pub(crate) fn settle_claim(
        &mut self,
        key: &ServiceKey,
        answer: Result<(), &Error>,
    ) -> ClaimOutcome {
        let outcome = match answer {
            Ok(()) => ClaimOutcome::Created,
            Err(e) if e.is_exists() => ClaimOutcome::Exists,
            Err(e) if outcome_known(e) => ClaimOutcome::Refused,
            Err(_) => ClaimOutcome::Unknown,
        };
        match outcome {
            ClaimOutcome::Created => self.insert_owned(*key),
            ClaimOutcome::Exists | ClaimOutcome::Refused => {
                self.remove(key);
            }
            ClaimOutcome::Unknown => {}
        }
        outcome
    }

    /// Settles a delete of an owned service by its answer: acknowledged or
    /// "no such service", the key leaves the ledger; refused for another
    /// reason, the service stays owned; unknown, it stays releasing until a
    /// read resolves it.
    pub(crate) fn settle_release(&mut self, key: &ServiceKey, answer: Result<(), &Error>) {
        match answer {
            Ok(()) => {
                self.remove(key);
            }
            Err(e) if e.is_not_found() => {
                self.remove(key);
            }
            Err(e) if outcome_known(e) => {
                if self.pending.remove(key).is_some() {
                    self.unsaved.push(*key);
                }
            }
            Err(_) => {}
        }
    }

    /// Settles `key` by what the kernel shows for it (`None`: no such
    /// service): a claim or release found with its recorded settings is
    /// owned; found with other settings, the key leaves the ledger
    /// ([`Resolved::NotMine`]); a key with no service leaves it
    /// ([`Resolved::Gone`]).
    pub(crate) fn resolve(&mut self, key: &ServiceKey, kernel: Option<&VirtualServer>) -> Resolved {
        let Some(vs) = kernel else {
            return if self.remove(key) {
                Resolved::Gone
            } else {
                Resolved::Unknown
            };
        };
        match self.pending.get(key) {
            None if self.owned.contains(key) => Resolved::Mine,
            None => Resolved::Unknown,
            Some(Pending::Claiming(claimed) | Pending::Releasing(claimed)) if claimed == vs => {
                self.insert_owned(*key);
                Resolved::Mine
            }
            Some(p) => {
                let reason = match p {
                    Pending::Claiming(claimed) => ConflictReason::ClaimedWithOtherSettings {
                        claimed: claimed.clone(),
                    },
                    Pending::Releasing(released) => ConflictReason::ReleasedWithOtherSettings {
                        released: released.clone(),
                    },
                };
                self.remove(key);
                Resolved::NotMine(reason)
            }
        }
    }

    /// Hands the ledger to `store` with the keys changed since its last
    /// save (each once); they count as saved only when the store says so.
    pub(crate) fn save_to(&mut self, store: &mut dyn LedgerStore) -> io::Result<()> {
        if self.unsaved.is_empty() {
            return Ok(());
        }
        self.unsaved.sort_unstable();
        self.unsaved.dedup();
        store.save(self, &self.unsaved)?;
        self.unsaved.clear();
        Ok(())
    }

    /// Gives back the room a large batch of claims took, once they settled:
    /// a cold sync of 50,000 services would otherwise keep megabytes of it
    /// for good.
    pub(crate) fn shrink(&mut self) {
        if self.pending.capacity() > 64 && self.pending.len() < self.pending.capacity() / 4 {
            self.pending.shrink_to_fit();
        }
        if self.unsaved.capacity() > 64 && self.unsaved.len() < self.unsaved.capacity() / 4 {
            self.unsaved.shrink_to_fit();
        }
    }

    /// Marks every change as saved (a syncer without a store).
    pub(crate) fn forget_unsaved(&mut self) {
        self.unsaved.clear();
    }
}

/// Where a [`Syncer`](super::Syncer) writes its [`Ledger`] ahead of the
/// kernel: a file ([`FileLedger`](super::FileLedger)), a database, an object
/// in the cluster's API; any type with this method, or a closure with its
/// signature.
///
/// The syncer calls [`LedgerStore::save`] before it sends a batch that
/// creates, changes or deletes a service (with the services it creates
/// claimed and those it deletes releasing, and every change not saved yet),
/// once the adds' answers are in, and at the end of a sync that changed the
/// ledger (owned services seen gone, deletes acknowledged). It sends no such
/// batch until the save before it returned `Ok`; a batch that only touches
/// real servers does not wait for a save.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use ipvsctl::sync::Ledger;
/// // An in-memory store (for tests): the last ledger saved.
/// let saved: Arc<Mutex<Ledger>> = Arc::default();
/// let store = {
///     let saved = Arc::clone(&saved);
///     move |ledger: &Ledger, _changed: &[ipvsctl::model::ServiceKey]| {
///         *saved.lock().unwrap() = ledger.clone();
///         Ok(())
///     }
/// };
/// # fn takes(_: impl ipvsctl::sync::LedgerStore) {}
/// takes(store);
/// ```
pub trait LedgerStore: Send {
    /// Makes `ledger` durable before returning `Ok`. `changed` lists, once
    /// each and sorted, the keys whose entries changed since the last
    /// successful save (a key no longer in `ledger` was removed), for a
    /// store that writes changes rather than the whole ledger. After an
    /// `Err` the same changes are handed over again with the next save.
    fn save(&mut self, ledger: &Ledger, changed: &[ServiceKey]) -> io::Result<()>;
}

impl<F> LedgerStore for F
where
    F: FnMut(&Ledger, &[ServiceKey]) -> io::Result<()> + Send,
{
    fn save(&mut self, ledger: &Ledger, changed: &[ServiceKey]) -> io::Result<()> {
        self(ledger, changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Operation;
    use crate::model::Scheduler;

    fn vs(i: u8) -> VirtualServer {
        VirtualServer::new(ServiceKey::tcp(format!("10.0.0.{i}:80").parse().unwrap()))
    }

    #[test]
    fn a_claim_found_with_its_settings_is_owned_and_with_others_is_not() {
        let mut l = Ledger::new();
        l.claim(&vs(1));
        l.claim(&vs(2));
        l.claim(&vs(3));
        assert_eq!(l.resolve(&vs(1).key, Some(&vs(1))), Resolved::Mine);
        let other = vs(2).with_scheduler(Scheduler::from_name("sh"));
        assert_eq!(
            l.resolve(&vs(2).key, Some(&other)),
            Resolved::NotMine(ConflictReason::ClaimedWithOtherSettings { claimed: vs(2) })
        );
        assert_eq!(l.resolve(&vs(3).key, None), Resolved::Gone);
        assert_eq!(l.get(&vs(1).key), Some(Ownership::Owned));
        assert_eq!(l.len(), 1);
    }

    #[test]
    fn answers_settle_claims_and_releases() {
        let op = Operation::AddService(vs(1).key);
        let lost = Error::Lost { op: op.clone() };
        let exists = Error::ServiceExists {
            op: op.clone(),
            key: vs(1).key,
        };
        let refused = Error::InvalidArgument { op, message: None };
        let mut l = Ledger::new();
        for (i, answer, want) in [
            (1, Ok(()), ClaimOutcome::Created),
            (2, Err(&exists), ClaimOutcome::Exists),
            (3, Err(&refused), ClaimOutcome::Refused),
            (4, Err(&lost), ClaimOutcome::Unknown),
        ] {
            l.claim(&vs(i));
            assert_eq!(l.settle_claim(&vs(i).key, answer), want, "{i}");
        }
        assert_eq!(l.get(&vs(1).key), Some(Ownership::Owned));
        assert_eq!(l.get(&vs(2).key), None);
        assert_eq!(l.get(&vs(3).key), None);
        assert_eq!(l.get(&vs(4).key), Some(Ownership::Claiming(&vs(4))));
        l.release(&vs(1));
        assert!(l.owned().contains(&vs(1).key));
        l.settle_release(&vs(1).key, Err(&lost));
        assert_eq!(l.get(&vs(1).key), Some(Ownership::Releasing(&vs(1))));
        l.settle_release(&vs(1).key, Err(&refused));
        assert_eq!(l.get(&vs(1).key), Some(Ownership::Owned));
        l.release(&vs(1));
        l.settle_release(&vs(1).key, Ok(()));
        assert_eq!(l.get(&vs(1).key), None);
    }

    #[test]
    fn the_store_gets_each_changed_key_once_and_again_after_a_failure() {
        let mut l = Ledger::new();
        l.claim(&vs(1));
        l.settle_claim(&vs(1).key, Ok(()));
        l.insert_owned(vs(2).key);
        let mut calls: Vec<Vec<ServiceKey>> = Vec::new();
        let mut fail = true;
        let mut store = |_: &Ledger, changed: &[ServiceKey]| {
            calls.push(changed.to_vec());
            if std::mem::take(&mut fail) {
                Err(io::Error::other("disk full"))
            } else {
                Ok(())
            }
        };
        assert!(l.save_to(&mut store).is_err());
        l.remove(&vs(2).key);
        l.save_to(&mut store).unwrap();
        l.save_to(&mut store).unwrap(); // nothing changed: not called
        let keys = vec![vs(1).key, vs(2).key];
        assert_eq!(calls, vec![keys.clone(), keys]);
    }
}
