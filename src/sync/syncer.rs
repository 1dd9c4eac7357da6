//! The executor: observe (read or remember), plan, apply pipelined, remember
//! what the kernel acknowledged, self-heal.

use std::borrow::{Borrow, Cow};
use std::collections::HashSet;
use std::sync::Arc;

use super::plan::{self, Counts, Order, Plan, PlanCounts, PlanOptions, Scope};
use super::read;
use super::state::{DesiredState, Observed, ObservedService};
use super::wire::Writer;
use crate::model::{ServiceKey, VirtualServer};
use crate::{BatchMode, BatchReport, Error, Handle, Op, Operation, Result};

/// How much of the kernel's state a sync reads before planning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Verify {
    /// Read everything managed: one service dump and one real-server dump
    /// per managed service. Finds and repairs any drift. Costs about as much
    /// as reading the whole table.
    Full,
    /// Check the service table (one service dump, or one pipelined lookup
    /// per remembered service in large tables, see [`ServiceCheck`]):
    /// services deleted or changed behind the syncer's back are found (and
    /// their real servers read); real servers of services that look
    /// unchanged are trusted from memory. The usual choice for every sync,
    /// with a [`Verify::Full`] now and then.
    #[default]
    Services,
    /// No read at all when the syncer's memory is complete: trust what was
    /// applied and acknowledged. Services whose state became unknown (a
    /// failed or lost operation) are still read, and so are services with
    /// real servers to drain (their connection counts are needed).
    None,
}

/// How a [`Verify::Services`] sync checks the service table.
///
/// A service dump costs the kernel time that grows with the square of the
/// table (it restarts its walk of the service table for every datagram of
/// the dump), while a lookup of one service is a hash lookup: above a few
/// thousand services, looking up each remembered service is cheaper than
/// one dump. Both find services changed or deleted behind the syncer's back;
/// a same-key service someone else created is found by the dump before
/// anything is written, and by the kernel refusing the add otherwise (it is
/// then a [`SyncConflict`] all the same).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServiceCheck {
    /// [`ServiceCheck::Lookups`] from [`ServiceCheck::LOOKUPS_FROM`]
    /// remembered services on, [`ServiceCheck::Dump`] below.
    #[default]
    Auto,
    /// One service dump.
    Dump,
    /// One `GET_SERVICE` per remembered service, pipelined. Only with
    /// [`Scope::Owned`]: the other scopes claim services the syncer did not
    /// make, which only a dump finds, so they always dump.
    Lookups,
}

impl ServiceCheck {
    /// From how many remembered services [`ServiceCheck::Auto`] looks them
    /// up rather than dumping the table. The dump's cost grows with the
    /// square of the table and a lookup's stays flat; by the kernels' own
    /// floors (`docs/performance.md`), lookups win from about 14,000
    /// services on Linux 7.3 and from about 45,000 on 6.1, whose dump is
    /// cheaper. Between the two, either check costs at most about twice the
    /// other.
    pub const LOOKUPS_FROM: usize = 25_000;
}

/// Settings of a [`Syncer`]: [`SyncOptions::default`] and the `with_*`
/// methods (`#[non_exhaustive]`, so settings can be added).
///
/// ```
/// use ipvsctl::BatchMode;
/// use ipvsctl::sync::{PlanOptions, Scope, SyncOptions};
/// let options = SyncOptions::default()
///     .with_scope(Scope::All)
///     .with_plan(PlanOptions::default().with_graceful_termination(true))
///     .with_mode(BatchMode::Pipelined)
///     .with_read_sockets(4);
/// assert_eq!(options.read_sockets, 4);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SyncOptions {
    /// Which services the syncer manages besides the desired ones.
    pub scope: Scope,
    /// Plan options (graceful termination).
    pub plan: PlanOptions,
    /// How write batches are sent: [`BatchMode::Pipelined`] (default) or
    /// [`BatchMode::OneByOne`], the one-request-per-round-trip way of other
    /// IPVS libraries (for comparison).
    pub mode: BatchMode,
    /// Sockets used to read real servers in parallel threads during a full
    /// read (default 1; extra sockets are opened on first use, in the
    /// handle's namespace).
    pub read_sockets: usize,
    /// How a [`Verify::Services`] sync checks the service table (default
    /// [`ServiceCheck::Auto`]).
    pub service_check: ServiceCheck,
}

impl Default for SyncOptions {
    fn default() -> Self {
        SyncOptions {
            scope: Scope::Owned,
            plan: PlanOptions::default(),
            mode: BatchMode::Pipelined,
            read_sockets: 1,
            service_check: ServiceCheck::Auto,
        }
    }
}

impl SyncOptions {
    /// Sets the scope (default [`Scope::Owned`]).
    pub fn with_scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// Sets the plan options (default: no graceful termination).
    pub fn with_plan(mut self, plan: PlanOptions) -> Self {
        self.plan = plan;
        self
    }

    /// Sets how write batches are sent (default [`BatchMode::Pipelined`]).
    pub fn with_mode(mut self, mode: BatchMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets the number of sockets for parallel full reads (default 1).
    pub fn with_read_sockets(mut self, read_sockets: usize) -> Self {
        self.read_sockets = read_sockets;
        self
    }

    /// Sets how a [`Verify::Services`] sync checks the service table
    /// (default [`ServiceCheck::Auto`]).
    pub fn with_service_check(mut self, service_check: ServiceCheck) -> Self {
        self.service_check = service_check;
        self
    }
}

/// An operation of a sync that failed, with its typed error.
#[derive(Debug)]
#[non_exhaustive]
pub struct SyncFailure {
    /// The operation.
    pub op: Op,
    /// Why.
    pub error: Error,
}

/// A desired service that was left alone because a service with the same
/// key already existed in the kernel and this syncer does not own it (it did
/// not create it, was not told to [`Syncer::adopt`] it, and the scope does
/// not claim it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncConflict {
    /// The key.
    pub key: ServiceKey,
    /// The service found in the kernel, as read (`None` when it could not be
    /// read back after the kernel refused to create it, e.g. because it was
    /// deleted again meanwhile).
    pub found: Option<VirtualServer>,
}

/// What a sync did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct SyncReport {
    /// How the kernel was read (a syncer without memory reads fully whatever
    /// was asked).
    pub verified: Option<Verify>,
    /// What the plan asked for (first pass).
    pub planned: PlanCounts,
    /// Virtual servers: `added`, `updated`, `deleted` count acknowledged
    /// operations (of both passes); `unchanged` those already as desired.
    pub services: Counts,
    /// Real servers, counted as [`SyncReport::services`].
    pub destinations: Counts,
    /// Real servers draining at weight 0 (graceful termination).
    pub draining: usize,
    /// Write requests sent to the kernel.
    pub writes_sent: usize,
    /// Read requests sent (dumps and lookups).
    pub reads_sent: usize,
    /// Operations that failed, with their typed errors (after self-healing).
    /// Real-server operations of a service whose creation failed fail too
    /// (the kernel answers "no such service") and are listed here.
    pub failed: Vec<SyncFailure>,
    /// First-pass failures the kernel's disagreement explains (the object
    /// existed, was missing, or its answer was lost): the syncer re-read those
    /// services and planned them again in the same sync; the outcome of the
    /// retry is counted above and any new failure is in `failed`.
    pub retried: Vec<SyncFailure>,
    /// Desired services that exist in the kernel but belong to someone else
    /// (see [`SyncConflict`]): not changed, their real servers untouched, and
    /// never deleted by this syncer. [`Syncer::adopt`] takes them over.
    pub conflicts: Vec<SyncConflict>,
    /// The first socket failure, if a write socket could not be opened
    /// ([`Operation::OpenSyncSocket`]) or failed during a batch
    /// ([`Operation::SyncWrite`]): the operations not answered before it have
    /// unknown outcomes and are in neither `failed` nor the counts, and the
    /// sync stopped writing. The syncer then forgets what it remembered and
    /// reads everything on the next sync.
    pub aborted: Option<Error>,
}

impl SyncReport {
    /// Whether the kernel now matches the desired state: nothing failed, no
    /// socket failure cut the sync short and no desired service was left
    /// alone as a [`SyncConflict`].
    pub fn is_ok(&self) -> bool {
        self.failed.is_empty() && self.aborted.is_none() && self.conflicts.is_empty()
    }

    /// The failures that are not consequences of another one (a real-server
    /// operation refused because its service's creation failed).
    pub fn root_failures(&self) -> impl Iterator<Item = &SyncFailure> {
        let failed_services: HashSet<ServiceKey> = self
            .failed
            .iter()
            .filter_map(|f| match &f.op {
                Op::AddService(vs) => Some(vs.key),
                _ => None,
            })
            .collect();
        self.failed.iter().filter(move |f| {
            !matches!(
                (&f.op, &f.error),
                (
                    Op::AddDestination(k, _) | Op::UpdateDestination(k, _),
                    Error::ServiceNotFound { .. }
                ) if failed_services.contains(k)
            )
        })
    }
}

/// Makes the kernel's IPVS table equal to a desired state, repeatedly.
///
/// A syncer remembers what it applied and saw acknowledged, so a resync can
/// trust its memory ([`Verify::Services`], [`Verify::None`]) instead of
/// reading every real server back; [`Verify::Full`] reads everything and
/// repairs any drift. A new syncer (a new process) has no memory and reads
/// the kernel on its first sync whatever is asked.
///
/// Writes go out pipelined on the syncer's own socket: many requests per
/// datagram, every ACK matched to its request, batches sized to the socket
/// buffers. A failed operation never stops the others; when the kernel
/// disagrees with the syncer's view (an object that exists, or is missing,
/// or an answer lost), the syncer re-reads those services and retries them
/// once within the same sync; anything else is reported and the service is
/// read again on the next sync.
///
/// # Ownership
///
/// A syncer owns the services it created (the kernel acknowledged its add)
/// and those it was told to [`Syncer::adopt`]. With the default
/// [`Scope::Owned`] it changes and deletes only those: a desired service
/// whose key already exists in the kernel, made by keepalived, Docker,
/// ipvsadm or another syncer, is a [`SyncConflict`] in
/// [`SyncReport::conflicts`] and is left exactly as it is (its real servers
/// too), now and when it leaves the desired state. The syncer finds such a
/// service in its read of the kernel, or, when it trusts its memory
/// ([`Verify::None`]), by the kernel refusing its add: new services are
/// therefore added in a first round of requests and their real servers sent
/// only once the adds are acknowledged. [`Scope::Filter`] and [`Scope::All`]
/// claim the services they include, existing or not.
///
/// A restarted agent is a new syncer and owns nothing: the services its
/// previous run created are conflicts until it adopts them, from a list it
/// kept (the library does not guess which services were its own).
///
/// ```no_run
/// use std::sync::Arc;
/// use ipvsctl::Handle;
/// use ipvsctl::model::{RealServer, ServiceKey, VirtualServer};
/// use ipvsctl::sync::{DesiredState, Syncer, Verify};
///
/// let handle = Arc::new(Handle::new()?);
/// let mut syncer = Syncer::new(handle);
/// let key = ServiceKey::tcp("10.96.0.1:443".parse().unwrap());
/// let mut desired = DesiredState::new();
/// desired.insert(VirtualServer::new(key), [RealServer::new("10.244.0.2:6443".parse().unwrap())])?;
/// let report = syncer.sync(&desired, Verify::Services)?;
/// assert!(report.is_ok(), "{report:?}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Syncer<H: Borrow<Handle> = Arc<Handle>> {
    handle: H,
    options: SyncOptions,
    /// The managed services as last read or acknowledged.
    memory: Observed,
    /// Whether `memory` covers every managed service (set by a read).
    known: bool,
    /// Services whose kernel state is unknown: read before the next plan.
    stale: HashSet<ServiceKey>,
    /// Services this syncer created or adopted (and did not delete since).
    owned: HashSet<ServiceKey>,
    /// Extra sockets for parallel reads.
    readers: Vec<Handle>,
    /// The write socket (opened on first use).
    writer: Option<Writer>,
}

impl<H: Borrow<Handle>> Syncer<H> {
    /// A syncer with the default options (scope [`Scope::Owned`], no
    /// graceful termination, pipelined).
    pub fn new(handle: H) -> Self {
        Self::with_options(handle, SyncOptions::default())
    }

    /// A syncer with options.
    pub fn with_options(handle: H, options: SyncOptions) -> Self {
        Syncer {
            handle,
            options,
            memory: Observed::new(),
            known: false,
            stale: HashSet::new(),
            owned: HashSet::new(),
            readers: Vec::new(),
            writer: None,
        }
    }

    /// The handle.
    pub fn handle(&self) -> &Handle {
        self.handle.borrow()
    }

    /// The options.
    pub fn options(&self) -> &SyncOptions {
        &self.options
    }

    /// The options, to change between syncs.
    pub fn options_mut(&mut self) -> &mut SyncOptions {
        &mut self.options
    }

    /// What the syncer remembers of the managed services.
    pub fn memory(&self) -> &Observed {
        &self.memory
    }

    /// The services the syncer owns: created by it (or adopted, or claimed
    /// by its scope while desired) and not deleted since.
    pub fn owned(&self) -> &HashSet<ServiceKey> {
        &self.owned
    }

    /// Takes services over: they are owned from now on, so a sync changes
    /// them to the desired state (replacing their real servers) and, with
    /// [`Scope::Owned`], deletes them once they are not desired, even though
    /// this syncer did not create them. For the keys a previous run of the
    /// same agent created (kept by the agent across restarts), or a
    /// [`SyncConflict`] the caller decides is its own. The next sync reads
    /// the kernel.
    pub fn adopt(&mut self, keys: impl IntoIterator<Item = ServiceKey>) {
        let before = self.owned.len();
        self.owned.extend(keys);
        if self.owned.len() != before {
            // Adopted services are not in memory yet.
            self.known = false;
        }
    }

    /// Forgets everything remembered: the next sync reads the kernel fully.
    pub fn forget(&mut self) {
        self.memory = Observed::new();
        self.known = false;
        self.stale.clear();
    }

    /// Computes the plan a sync would apply, reading the kernel as `verify`
    /// asks, without writing anything.
    /// Desired services found to belong to someone else (see
    /// [`SyncConflict`]) are left out of the plan.
    pub fn plan(&mut self, desired: &DesiredState, verify: Verify) -> Result<Plan> {
        let mut report = SyncReport::default();
        self.observe(desired, verify, &mut report)?;
        Ok(self.plan_without(desired, &report.conflicts, Order::Documented))
    }

    /// The plan for `desired` minus the conflicting services.
    fn plan_without(
        &self,
        desired: &DesiredState,
        conflicts: &[SyncConflict],
        order: Order,
    ) -> Plan {
        let plan_of = |d: &DesiredState| {
            plan::plan_ordered(
                d,
                &self.memory,
                &self.options.scope,
                &self.owned,
                self.options.plan,
                order,
            )
        };
        if conflicts.is_empty() {
            return plan_of(desired);
        }
        let foreign: HashSet<ServiceKey> = conflicts.iter().map(|c| c.key).collect();
        let mut mine = DesiredState::with_capacity(desired.services().len());
        for ds in desired.services() {
            if !foreign.contains(&ds.service().key) {
                // Already validated once: inserting again cannot fail.
                let _ = mine.insert(ds.service().clone(), ds.destinations().iter().copied());
            }
        }
        plan_of(&mine)
    }

    /// Whether `op` creates a service this syncer would not own if it
    /// existed already: such adds go first, alone, so that a refusal
    /// (someone else's service) stops its real servers from being sent.
    fn claims(&self, op: &Op) -> bool {
        matches!(op, Op::AddService(vs) if !self.options.scope.includes(&vs.key, &self.owned))
    }

    /// Makes the managed services equal to `desired`.
    ///
    /// `Err` only when reading the kernel fails (nothing was written then);
    /// failed write operations are in [`SyncReport::failed`], a failed write
    /// socket in [`SyncReport::aborted`], and everything else was applied.
    /// Running the sync again converges.
    ///
    /// Desired services that exist but are not this syncer's are left alone
    /// and listed in [`SyncReport::conflicts`] (see [Ownership](Syncer#ownership)).
    pub fn sync(&mut self, desired: &DesiredState, verify: Verify) -> Result<SyncReport> {
        let mut report = SyncReport::default();
        self.observe(desired, verify, &mut report)?;
        // Desired services in memory are managed: owned already, or claimed
        // by the scope.
        for ds in desired.services() {
            let key = ds.service().key;
            if !self.owned.contains(&key) && self.memory.contains(&key) {
                self.owned.insert(key);
            }
        }
        let plan = self.plan_without(desired, &report.conflicts, Order::ClaimsApart);
        self.execute(desired, plan, report)
    }

    /// Makes the services `desired` records as changed
    /// ([`DesiredState::changes`]) equal to their desired entries (a removed
    /// one is deleted), in time proportional to them, not to the table, and
    /// takes the record. The record is left in place when the sync fails
    /// with `Err` (then nothing was written, or its outcome is unknown), so
    /// the next call syncs those services again.
    ///
    /// Everything [`Syncer::sync`] guarantees holds for the changed
    /// services: the scope and [ownership](Syncer#ownership) (a same-key
    /// service that is not this syncer's is a [`SyncConflict`]), graceful
    /// termination, pipelined writes, self-healing and the [`SyncReport`].
    /// `verify` applies to the changed services only: [`Verify::None`]
    /// trusts memory (services whose state became unknown are still looked
    /// up), [`Verify::Services`] looks each changed service up
    /// (`GET_SERVICE`, pipelined) and reads the real servers of those that
    /// differ, and [`Verify::Full`] reads them all back. A syncer with no
    /// memory yet reads the changed services fully whatever is asked. Drift
    /// elsewhere is found by the periodic full [`Syncer::sync`], which after
    /// any mix of changes plans nothing when nothing drifted.
    ///
    /// ```no_run
    /// use ipvsctl::Handle;
    /// use ipvsctl::model::{RealServer, ServiceKey, VirtualServer};
    /// use ipvsctl::sync::{DesiredState, Syncer, Verify};
    ///
    /// let handle = Handle::new()?;
    /// let mut syncer = Syncer::new(&handle);
    /// let key = ServiceKey::tcp("10.96.0.1:443".parse().unwrap());
    /// let rs = |i: u8| RealServer::new(format!("10.244.0.{i}:6443").parse().unwrap());
    /// let mut desired = DesiredState::new();
    /// desired.insert(VirtualServer::new(key), [rs(1), rs(2)])?;
    /// syncer.sync(&desired, Verify::Services)?;
    /// desired.clear_changes();
    /// // One endpoint moved: one real server removed, one added.
    /// desired.remove_destinations(&key, [rs(1).addr])?;
    /// desired.upsert_destinations(&key, [rs(3)])?;
    /// let report = syncer.sync_changes(&mut desired, Verify::None)?;
    /// assert_eq!(report.writes_sent, 2);
    /// assert!(desired.changes().is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sync_changes(
        &mut self,
        desired: &mut DesiredState,
        verify: Verify,
    ) -> Result<SyncReport> {
        let keys = desired.take_changes();
        let result = self.sync_services(desired, &keys, verify);
        if result.is_err() {
            for key in keys {
                desired.record(key);
            }
        }
        result
    }

    /// [`Syncer::sync`] restricted to the services `keys`.
    fn sync_services(
        &mut self,
        desired: &DesiredState,
        keys: &[ServiceKey],
        verify: Verify,
    ) -> Result<SyncReport> {
        let mut report = SyncReport::default();
        self.observe_keys(desired, keys, verify, &mut report)?;
        for key in keys {
            if !self.owned.contains(key) && desired.contains(key) && self.memory.contains(key) {
                self.owned.insert(*key);
            }
        }
        let mine: Cow<'_, [ServiceKey]> = if report.conflicts.is_empty() {
            Cow::Borrowed(keys)
        } else {
            let foreign: HashSet<ServiceKey> = report.conflicts.iter().map(|c| c.key).collect();
            keys.iter()
                .filter(|k| !foreign.contains(k))
                .copied()
                .collect()
        };
        let plan = plan::plan_services_ordered(
            desired,
            &self.memory,
            &mine,
            &self.options.scope,
            &self.owned,
            self.options.plan,
            Order::ClaimsApart,
        );
        self.execute(desired, plan, report)
    }

    /// Applies a plan: new services that may belong to someone else first,
    /// then everything else pipelined, then the retries of what the kernel
    /// contradicted.
    fn execute(
        &mut self,
        desired: &DesiredState,
        mut plan: Plan,
        mut report: SyncReport,
    ) -> Result<SyncReport> {
        report.planned = plan.counts;
        report.services.unchanged = plan.counts.services.unchanged;
        report.destinations.unchanged = plan.counts.destinations.unchanged;
        report.draining = plan.counts.draining;
        // Planned apart from the rest (`Order::ClaimsApart`).
        let claims = std::mem::take(&mut plan.claims);
        let mut rest = std::mem::take(&mut plan.ops);
        let mut retry = Vec::new();
        let mut broken = HashSet::new();
        if !claims.is_empty() {
            // Every add that succeeds is remembered and owned: room for them
            // all at once, before the answers come in.
            self.memory.reserve(claims.len());
            self.owned.reserve(claims.len());
            let first = self.apply(desired, &claims, &mut report, true, &mut broken);
            // Not kept while the real servers go out: at 50,000 services
            // the adds alone take megabytes.
            drop(claims);
            if first.socket_failed {
                // Whether the adds happened is unknown: their real servers
                // could land on someone else's service. The next sync reads.
                return Ok(report);
            }
            retry = first.retry;
            if !first.withheld.is_empty() {
                let withheld: HashSet<ServiceKey> = first.withheld.iter().copied().collect();
                rest.retain(|op| !withheld.contains(&op.key()));
            }
            self.report_refused(first.refused, &mut report);
        }
        // Each part is dropped once sent, while memory grows by what it did.
        for part in into_parts(rest) {
            let applied = self.apply(desired, &part, &mut report, true, &mut broken);
            retry.extend(applied.retry);
            if applied.socket_failed {
                break;
            }
        }
        if !retry.is_empty() {
            retry.sort_unstable();
            retry.dedup();
            self.heal(desired, retry, &mut report)?;
        }
        Ok(report)
    }

    /// Records desired services the kernel refused to add because they
    /// exist, with what is there now (looked up; `None` if that fails or
    /// the service is gone again).
    fn report_refused(&self, refused: Vec<ServiceKey>, report: &mut SyncReport) {
        if refused.is_empty() {
            return;
        }
        let found = read::lookup(self.handle.borrow(), &refused)
            .unwrap_or_else(|_| refused.iter().map(|_| None).collect());
        report.reads_sent += refused.len();
        report.conflicts.extend(
            refused
                .into_iter()
                .zip(found)
                .map(|(key, found)| SyncConflict { key, found }),
        );
    }

    /// Whether the remembered real servers of `key` (`m`, its entry in
    /// memory) can stand for the kernel's, given the service the kernel
    /// reported (`vs`): not under `Verify::Full`, not stale, the service
    /// unchanged, and no counts needed.
    fn trusts(
        &self,
        key: &ServiceKey,
        m: &ObservedService,
        vs: &VirtualServer,
        desired: &DesiredState,
        verify: Verify,
    ) -> bool {
        verify != Verify::Full
            && !self.stale.contains(key)
            && m.service == *vs
            && !self.needs_counts(desired, m)
    }

    /// Whether the plan needs fresh connection counts for this remembered
    /// service: graceful termination with real servers that are not desired.
    fn needs_counts(&self, desired: &DesiredState, s: &ObservedService) -> bool {
        if !self.options.plan.graceful_termination {
            return false;
        }
        let Some(ds) = desired.get(&s.service.key) else {
            return false; // the whole service goes
        };
        let want = ds.destinations();
        s.destinations().iter().any(|d| {
            want.binary_search_by_key(&d.server.addr, |rs| rs.addr)
                .is_err()
                && d.conns.is_none_or(|c| c.active != 0 || c.inactive != 0)
        })
    }

    /// Brings `memory` up to date as `verify` asks.
    fn observe(
        &mut self,
        desired: &DesiredState,
        verify: Verify,
        report: &mut SyncReport,
    ) -> Result<()> {
        let verify = if self.known { verify } else { Verify::Full };
        report.verified = Some(verify);
        if verify == Verify::None && self.stale.is_empty() {
            let keys: Vec<ServiceKey> = self
                .memory
                .services()
                .filter(|s| self.needs_counts(desired, s))
                .map(|s| s.service.key)
                .collect();
            return self.read_into_memory(&keys, report);
        }
        if verify == Verify::Services && self.looks_up() {
            // Every managed service is remembered (or stale): look each up.
            let mut keys: Vec<ServiceKey> = self.memory.keys().copied().collect();
            keys.extend(self.stale.iter().filter(|k| !self.memory.contains(k)));
            self.observe_keys(desired, &keys, Verify::Services, report)?;
            self.stale.clear();
            return Ok(());
        }
        // Listed once each (the dump's repeats are dropped).
        let kernel = read::services(self.handle.borrow())?;
        report.reads_sent += 1;
        let remembered = self.memory.len();
        let mut remembered_listed = 0;
        let mut listed = Vec::with_capacity(kernel.len());
        let mut to_read = Vec::new();
        for vs in kernel {
            let key = vs.key;
            if !self.options.scope.includes(&key, &self.owned) {
                if desired.contains(&key) {
                    // Someone else's service with a desired key.
                    report.conflicts.push(SyncConflict {
                        key,
                        found: Some(vs),
                    });
                }
                continue;
            }
            listed.push(key);
            let m = self.memory.get(&key);
            remembered_listed += usize::from(m.is_some());
            if m.is_some_and(|m| self.trusts(&key, m, &vs, desired, verify)) {
                continue;
            }
            to_read.push(key);
            match self.memory.get_mut(&key) {
                Some(m) => m.service = vs,
                None => self.memory.insert(ObservedService::new(vs, [])),
            }
        }
        // A multi-part service dump is not a snapshot: the kernel resumes it
        // by position in a table shared by every namespace, so changes in
        // another namespace can make it skip services of this one. Services
        // remembered but not listed are looked up before they count as gone.
        // When the dump listed every remembered service (the usual case),
        // there are none, and no set of the listed keys is built.
        if remembered_listed < remembered {
            let mut seen: HashSet<ServiceKey> = listed.into_iter().collect();
            let unlisted: Vec<ServiceKey> = self
                .memory
                .keys()
                .filter(|k| !seen.contains(k))
                .copied()
                .collect();
            let found = read::lookup(self.handle.borrow(), &unlisted)?;
            report.reads_sent += unlisted.len();
            for (key, vs) in unlisted.iter().zip(found) {
                let Some(vs) = vs else { continue };
                seen.insert(*key);
                let m = self.memory.get(key);
                if m.is_some_and(|m| self.trusts(key, m, &vs, desired, verify)) {
                    continue;
                }
                to_read.push(*key);
                if let Some(m) = self.memory.get_mut(key) {
                    m.service = vs;
                }
            }
            self.memory.retain(|k, _| seen.contains(k));
        }
        self.read_into_memory(&to_read, report)?;
        self.stale.clear();
        self.known = true;
        Ok(())
    }

    /// Whether a [`Verify::Services`] sync looks the remembered services up
    /// rather than dumping the table (see [`ServiceCheck`]).
    fn looks_up(&self) -> bool {
        matches!(self.options.scope, Scope::Owned)
            && match self.options.service_check {
                ServiceCheck::Dump => false,
                ServiceCheck::Lookups => true,
                ServiceCheck::Auto => self.memory.len() >= ServiceCheck::LOOKUPS_FROM,
            }
    }

    /// Brings the memory of the services `keys` up to date as `verify` asks
    /// (see [`Syncer::sync_changes`]); same-key services that are not this
    /// syncer's and are desired go to `report.conflicts`.
    fn observe_keys(
        &mut self,
        desired: &DesiredState,
        keys: &[ServiceKey],
        verify: Verify,
        report: &mut SyncReport,
    ) -> Result<()> {
        let verify = if self.known { verify } else { Verify::Full };
        report.verified = Some(verify);
        let (look, mut to_read): (Vec<ServiceKey>, Vec<ServiceKey>) = if verify == Verify::None {
            let look = keys
                .iter()
                .filter(|k| self.stale.contains(k))
                .copied()
                .collect();
            // Counts are needed only to drain (graceful termination).
            let counts = if self.options.plan.graceful_termination {
                keys.iter()
                    .filter(|k| !self.stale.contains(k))
                    .filter(|k| {
                        self.memory
                            .get(k)
                            .is_some_and(|m| self.needs_counts(desired, m))
                    })
                    .copied()
                    .collect()
            } else {
                Vec::new()
            };
            (look, counts)
        } else {
            (keys.to_vec(), Vec::new())
        };
        if !look.is_empty() {
            let found = read::lookup(self.handle.borrow(), &look)?;
            report.reads_sent += look.len();
            for (key, vs) in look.iter().zip(found) {
                let Some(vs) = vs else {
                    self.memory.remove(key);
                    continue;
                };
                if !self.options.scope.includes(key, &self.owned) {
                    // Someone else's service: never in memory.
                    self.memory.remove(key);
                    if desired.contains(key) {
                        report.conflicts.push(SyncConflict {
                            key: *key,
                            found: Some(vs),
                        });
                    }
                    continue;
                }
                let m = self.memory.get(key);
                if !m.is_some_and(|m| self.trusts(key, m, &vs, desired, verify)) {
                    to_read.push(*key);
                    match self.memory.get_mut(key) {
                        Some(m) => m.service = vs,
                        None => self.memory.insert(ObservedService::new(vs, [])),
                    }
                }
            }
        }
        to_read.sort_unstable();
        to_read.dedup();
        self.read_into_memory(&to_read, report)?;
        for key in &look {
            self.stale.remove(key);
        }
        Ok(())
    }

    /// Reads the real servers of `keys` into memory (the services are
    /// there already).
    fn read_into_memory(&mut self, keys: &[ServiceKey], report: &mut SyncReport) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let want = self.options.read_sockets.max(1);
        if want == 1 {
            // Each service's real servers go into memory as they arrive,
            // while the kernel works on the next dumps.
            let memory = &mut self.memory;
            let mut failed = None;
            read::destinations_each(self.handle.borrow(), keys, |index, r| match r {
                Ok(d) => {
                    if let Some(m) = keys.get(index).and_then(|k| memory.get_mut(k)) {
                        m.set_destinations(d);
                    }
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            })?;
            report.reads_sent += keys.len();
            return failed.map_or(Ok(()), Err);
        }
        while self.readers.len() + 1 < want {
            let h = self.handle.borrow();
            self.readers.push(h.open_sibling()?);
        }
        let mut handles: Vec<&Handle> = vec![self.handle.borrow()];
        handles.extend(self.readers.iter().take(want - 1));
        let dests = read::destinations(&handles, keys)?;
        report.reads_sent += keys.len();
        for (key, d) in keys.iter().zip(dests) {
            if let Some(m) = self.memory.get_mut(key) {
                m.set_destinations(d);
            }
        }
        Ok(())
    }

    /// Sends `ops` and records every outcome in memory and the report.
    /// `broken` collects the services whose creation or update failed for
    /// good, across the rounds of one sync.
    fn apply(
        &mut self,
        desired: &DesiredState,
        ops: &[Op],
        report: &mut SyncReport,
        may_retry: bool,
        broken: &mut HashSet<ServiceKey>,
    ) -> Applied {
        let mut applied = Applied::default();
        if ops.is_empty() {
            return applied;
        }
        let writer = match &mut self.writer {
            Some(w) => w,
            None => match Writer::open(self.handle.borrow()) {
                Ok(w) => self.writer.insert(w),
                Err(e) => {
                    report
                        .aborted
                        .get_or_insert(Error::io(Operation::OpenSyncSocket, e));
                    applied.socket_failed = true;
                    return applied;
                }
            },
        };
        let memory = &mut self.memory;
        let owned = &mut self.owned;
        let services = &mut report.services;
        let dests = &mut report.destinations;
        let mut batch = BatchReport::default();
        let outcome = writer.send(
            ops,
            self.options.mode == BatchMode::OneByOne,
            |index, result| match (ops.get(index), result) {
                (Some(op), Ok(())) => {
                    batch.sent += 1;
                    remember(memory, owned, op, desired);
                    match op {
                        Op::AddService(_) => services.added += 1,
                        Op::UpdateService(_) => services.updated += 1,
                        Op::DeleteService(_) => services.deleted += 1,
                        Op::AddDestination(..) => dests.added += 1,
                        Op::UpdateDestination(..) => dests.updated += 1,
                        Op::DeleteDestination(..) => dests.deleted += 1,
                    }
                }
                (_, r) => {
                    batch.sent += 1;
                    if let Err(e) = r {
                        batch.failed.push((index, e));
                    }
                }
            },
        );
        if let Err(e) = outcome {
            // The socket failed: operations not answered have unknown outcomes.
            self.writer = None;
            batch.aborted = Some(Error::io(Operation::SyncWrite, e));
        }
        report.writes_sent += batch.sent;
        // Services whose creation or update failed for a reason a retry
        // cannot fix: their real-server failures follow from it.
        broken.extend(batch.failed.iter().filter_map(|(i, e)| match ops.get(*i) {
            Some(Op::AddService(vs) | Op::UpdateService(vs)) if !healable(e) => Some(vs.key),
            _ => None,
        }));
        if let Some(error) = batch.aborted {
            // The rest of the batch is unaccounted for.
            self.known = false;
            applied.socket_failed = true;
            report.aborted.get_or_insert(error);
        }
        let mut retry = HashSet::new();
        for (index, error) in batch.failed {
            let Some(op) = ops.get(index) else {
                // Every answer names one of `ops`.
                continue;
            };
            let key = op.key();
            if self.claims(op) {
                if error.is_exists() {
                    // Someone else's service: not ours to change.
                    applied.refused.push(key);
                    applied.withheld.push(key);
                    continue;
                }
                if matches!(error, Error::Lost { .. }) {
                    // Whether this syncer created it is unknown: not retried,
                    // and its real servers are not sent. The next sync reads
                    // it, and finds it a conflict if it exists.
                    applied.withheld.push(key);
                    self.stale.insert(key);
                    report.failed.push(SyncFailure {
                        op: op.clone(),
                        error,
                    });
                    continue;
                }
            }
            self.stale.insert(key);
            let failure = SyncFailure {
                op: op.clone(),
                error,
            };
            if may_retry && healable(&failure.error) && !broken.contains(&key) {
                retry.insert(key);
                report.retried.push(failure);
            } else {
                report.failed.push(failure);
            }
        }
        applied.retry = retry.into_iter().collect();
        applied.retry.sort_unstable();
        applied
    }

    /// Re-reads the services whose operations the kernel contradicted and
    /// applies a second plan for them alone.
    fn heal(
        &mut self,
        desired: &DesiredState,
        keys: Vec<ServiceKey>,
        report: &mut SyncReport,
    ) -> Result<()> {
        let found = read::lookup(self.handle.borrow(), &keys)?;
        report.reads_sent += keys.len();
        let mut present = Vec::new();
        for (key, vs) in keys.iter().zip(found) {
            match vs {
                Some(vs) => {
                    self.memory.insert(ObservedService::new(vs, []));
                    present.push(*key);
                }
                None => {
                    self.memory.remove(key);
                }
            }
        }
        self.read_into_memory(&present, report)?;
        let mut sub_desired = DesiredState::with_capacity(keys.len());
        let mut sub_observed = Observed::new();
        for key in &keys {
            self.stale.remove(key);
            if let Some(ds) = desired.get(key) {
                // Already validated once: inserting again cannot fail.
                let _ = sub_desired.insert(ds.service().clone(), ds.destinations().iter().copied());
            }
            if let Some(m) = self.memory.get(key) {
                sub_observed.insert(m.clone());
            }
        }
        // Every key here was managed by the first plan.
        let plan = plan::plan(
            &sub_desired,
            &sub_observed,
            &Scope::All,
            &self.owned,
            self.options.plan,
        );
        // What the first pass counted as unchanged stays so; drains follow
        // the second plan.
        report.draining += plan.counts.draining;
        self.apply(desired, &plan.ops, report, false, &mut HashSet::new());
        Ok(())
    }
}

/// What became of a batch besides what is recorded in memory and the report.
#[derive(Debug, Default)]
struct Applied {
    /// Services to re-read and retry (when retrying was allowed).
    retry: Vec<ServiceKey>,
    /// Services the kernel refused to add because they exist: conflicts.
    refused: Vec<ServiceKey>,
    /// Services whose add was refused or its outcome lost: their real
    /// servers must not be sent.
    withheld: Vec<ServiceKey>,
    /// The socket failed: outcomes of operations not answered are unknown.
    socket_failed: bool,
}

/// The most operations [`Syncer::execute`] sends in one part (about
/// 14 MiB of them). A cold sync's plan holds every real server of the
/// table; sent in parts, each given back once sent, it is not all held
/// while memory fills with what it did (at 50,000 x 10 the plan alone is
/// 550,000 operations, 60 MB).
const PART_OPS: usize = 1 << 17;

/// Splits `ops` into parts of at most [`PART_OPS`], in order. The last part
/// is split off first, so that each operation is moved once and the room it
/// leaves is given back at once. A plan of one part (every sync of a few
/// changes) is handed back as it is, without allocating.
fn into_parts(mut ops: Vec<Op>) -> impl Iterator<Item = Vec<Op>> {
    let mut later = Vec::new();
    while ops.len() > PART_OPS {
        let last = (ops.len() - 1) / PART_OPS * PART_OPS;
        later.push(ops.split_off(last));
        ops.shrink_to_fit();
    }
    std::iter::once(ops).chain(later.into_iter().rev())
}

/// Failures that mean "the kernel's state differs from what was planned":
/// re-reading the service and planning again fixes them.
fn healable(e: &Error) -> bool {
    e.is_exists() || e.is_not_found() || matches!(e, Error::Lost { .. })
}

/// Records an acknowledged operation in memory and in the owned keys.
fn remember(
    memory: &mut Observed,
    owned: &mut HashSet<ServiceKey>,
    op: &Op,
    desired: &DesiredState,
) {
    // Room for a service's desired real servers is made with the first one:
    // grown one add at a time, a list of ten would take room for sixteen.
    // Made no sooner: a cold sync holds the real servers still to send
    // meanwhile.
    memory.apply_with_room(op, || {
        desired
            .get(&op.key())
            .map_or(0, |ds| ds.destinations().len())
    });
    match op {
        // Created by this syncer: its own.
        Op::AddService(vs) => {
            owned.insert(vs.key);
        }
        Op::DeleteService(k) => {
            owned.remove(k);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(n: usize) -> Vec<Op> {
        (0..n)
            .map(|i| {
                Op::DeleteService(ServiceKey::fwmark(
                    i as u32 + 1,
                    crate::model::AddressFamily::Inet,
                ))
            })
            .collect()
    }

    #[test]
    fn parts_keep_every_operation_once_in_order() {
        for n in [0, 1, PART_OPS, PART_OPS + 1, 2 * PART_OPS + 5] {
            let parts: Vec<Vec<Op>> = into_parts(ops(n)).collect();
            let sizes: Vec<usize> = parts.iter().map(Vec::len).collect();
            assert!(sizes.iter().all(|&s| s <= PART_OPS), "{n}: {sizes:?}");
            assert_eq!(sizes.iter().sum::<usize>(), n);
            assert_eq!(parts.len(), n.div_ceil(PART_OPS).max(1), "{n}");
            let joined: Vec<Op> = parts.into_iter().flatten().collect();
            assert!(joined == ops(n), "{n}: reordered");
        }
    }
}
