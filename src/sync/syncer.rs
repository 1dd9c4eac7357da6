//! The executor: observe (read or remember), plan, apply pipelined, remember
//! what the kernel acknowledged, self-heal.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::plan::{self, Counts, Plan, PlanCounts, PlanOptions, Scope};
use super::read;
use super::state::{DesiredState, Observed, ObservedDest, ObservedService};
use super::wire::Writer;
use crate::model::ServiceKey;
use crate::{BatchMode, BatchReport, Error, Handle, Op, Result};

/// How much of the kernel's state a sync reads before planning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Verify {
    /// Read everything managed: one service dump and one real-server dump
    /// per managed service. Finds and repairs any drift. Costs about as much
    /// as reading the whole table.
    Full,
    /// One service dump: services added, deleted or changed behind the
    /// syncer's back are found (and their real servers read); real servers
    /// of services that look unchanged are trusted from memory. The usual
    /// choice for every sync, with a [`Verify::Full`] now and then.
    #[default]
    Services,
    /// No read at all when the syncer's memory is complete: trust what was
    /// applied and acknowledged. Services whose state became unknown (a
    /// failed or lost operation) are still read, and so are services with
    /// real servers to drain (their connection counts are needed).
    None,
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
}

impl Default for SyncOptions {
    fn default() -> Self {
        SyncOptions {
            scope: Scope::Owned,
            plan: PlanOptions::default(),
            mode: BatchMode::Pipelined,
            read_sockets: 1,
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
}

/// An operation of a sync that failed, with its typed error.
#[derive(Debug)]
#[non_exhaustive]
pub struct SyncFailure {
    /// The operation; `None` when the socket itself failed and the rest of
    /// a batch could not be accounted for one by one (the syncer then
    /// forgets what it remembered and reads everything on the next sync).
    pub op: Option<Op>,
    /// Why.
    pub error: Error,
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
}

impl SyncReport {
    /// Whether the kernel now matches the desired state (nothing failed).
    pub fn is_ok(&self) -> bool {
        self.failed.is_empty()
    }

    /// The failures that are not consequences of another one (a real-server
    /// operation refused because its service's creation failed).
    pub fn root_failures(&self) -> impl Iterator<Item = &SyncFailure> {
        let failed_services: HashSet<ServiceKey> = self
            .failed
            .iter()
            .filter_map(|f| match &f.op {
                Some(Op::AddService(vs)) => Some(vs.key),
                _ => None,
            })
            .collect();
        self.failed.iter().filter(move |f| {
            !matches!(
                (&f.op, &f.error),
                (
                    Some(Op::AddDestination(k, _) | Op::UpdateDestination(k, _)),
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
/// assert!(report.is_ok(), "{:?}", report.failed);
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
    /// Services this syncer was given in a desired state.
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

    /// The services the syncer owns (were desired at some sync and not
    /// deleted since).
    pub fn owned(&self) -> &HashSet<ServiceKey> {
        &self.owned
    }

    /// Adds services to the owned set, e.g. keys a previous process
    /// persisted, so that [`Scope::Owned`] deletes them when they are not
    /// desired.
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
    pub fn plan(&mut self, desired: &DesiredState, verify: Verify) -> Result<Plan> {
        let mut report = SyncReport::default();
        self.observe(desired, verify, &mut report)?;
        Ok(plan::plan(
            desired,
            &self.memory,
            &self.options.scope,
            &self.owned,
            self.options.plan,
        ))
    }

    /// Makes the managed services equal to `desired`.
    ///
    /// `Err` only when reading the kernel fails (nothing was written then);
    /// failed write operations are in [`SyncReport::failed`], and everything
    /// else was applied. Running the sync again converges.
    pub fn sync(&mut self, desired: &DesiredState, verify: Verify) -> Result<SyncReport> {
        let mut report = SyncReport::default();
        self.observe(desired, verify, &mut report)?;
        self.owned
            .extend(desired.services().iter().map(|s| s.service().key));
        let plan = plan::plan(
            desired,
            &self.memory,
            &self.options.scope,
            &self.owned,
            self.options.plan,
        );
        report.planned = plan.counts;
        report.services.unchanged = plan.counts.services.unchanged;
        report.destinations.unchanged = plan.counts.destinations.unchanged;
        report.draining = plan.counts.draining;
        let retry = self.apply(&plan, &mut report, true);
        if !retry.is_empty() {
            self.heal(desired, retry, &mut report)?;
        }
        Ok(report)
    }

    /// Whether a service that is not desired is managed.
    fn manages(&self, desired: &DesiredState, key: &ServiceKey) -> bool {
        desired.contains(key) || self.options.scope.includes(key, &self.owned)
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
        let kernel = read::services(self.handle.borrow())?;
        report.reads_sent += 1;
        let mut seen: HashMap<ServiceKey, ()> = HashMap::with_capacity(kernel.len());
        let mut to_read = Vec::new();
        for vs in kernel {
            let key = vs.key;
            if !self.manages(desired, &key) {
                continue;
            }
            seen.insert(key, ());
            let trusted = verify != Verify::Full
                && !self.stale.contains(&key)
                && self
                    .memory
                    .get(&key)
                    .is_some_and(|m| m.service == vs && !self.needs_counts(desired, m));
            if !trusted {
                to_read.push(key);
                match self.memory.get_mut(&key) {
                    Some(m) => m.service = vs,
                    None => self.memory.insert(ObservedService::new(vs, [])),
                }
            }
        }
        // A multi-part service dump is not a snapshot: the kernel resumes it
        // by position in a table shared by every namespace, so changes in
        // another namespace can make it skip services of this one. Services
        // remembered but not listed are looked up before they count as gone.
        let unlisted: Vec<ServiceKey> = self
            .memory
            .keys()
            .filter(|k| !seen.contains_key(k))
            .copied()
            .collect();
        if !unlisted.is_empty() {
            let found = read::lookup(self.handle.borrow(), &unlisted)?;
            report.reads_sent += unlisted.len();
            for (key, vs) in unlisted.iter().zip(found) {
                let Some(vs) = vs else { continue };
                seen.insert(*key, ());
                let trusted = verify != Verify::Full
                    && !self.stale.contains(key)
                    && self
                        .memory
                        .get(key)
                        .is_some_and(|m| m.service == vs && !self.needs_counts(desired, m));
                if !trusted {
                    to_read.push(*key);
                    if let Some(m) = self.memory.get_mut(key) {
                        m.service = vs;
                    }
                }
            }
        }
        self.memory.retain(|k, _| seen.contains_key(k));
        self.read_into_memory(&to_read, report)?;
        self.stale.clear();
        self.known = true;
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
            self.readers.push(Handle::open(h.netns())?);
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

    /// Sends the plan and records every outcome in memory and the report.
    /// Returns the services to re-read and retry (when `may_retry`).
    fn apply(&mut self, plan: &Plan, report: &mut SyncReport, may_retry: bool) -> Vec<ServiceKey> {
        if plan.is_empty() {
            return Vec::new();
        }
        let ops = &plan.ops;
        let writer = match &mut self.writer {
            Some(w) => w,
            None => match Writer::open(self.handle.borrow()) {
                Ok(w) => self.writer.insert(w),
                Err(e) => {
                    report.failed.push(SyncFailure {
                        op: None,
                        error: Error::Io {
                            op: "open the sync's netlink socket".into(),
                            source: e,
                        },
                    });
                    return Vec::new();
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
                    remember(memory, owned, op);
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
            batch.failed.push((
                usize::MAX,
                Error::Io {
                    op: "sync write".into(),
                    source: e,
                },
            ));
        }
        report.writes_sent += batch.sent;
        // Services whose creation or update failed for a reason a retry
        // cannot fix: their real-server failures follow from it.
        let broken: HashSet<ServiceKey> = batch
            .failed
            .iter()
            .filter_map(|(i, e)| match ops.get(*i) {
                Some(Op::AddService(vs) | Op::UpdateService(vs)) if !healable(e) => Some(vs.key),
                _ => None,
            })
            .collect();
        let mut retry = HashSet::new();
        for (index, error) in batch.failed {
            let Some(op) = ops.get(index) else {
                // The socket failed: the rest of the batch is unaccounted for.
                self.known = false;
                report.failed.push(SyncFailure { op: None, error });
                continue;
            };
            let key = op_key(op);
            self.stale.insert(key);
            let failure = SyncFailure {
                op: Some(op.clone()),
                error,
            };
            if may_retry && healable(&failure.error) && !broken.contains(&key) {
                retry.insert(key);
                report.retried.push(failure);
            } else {
                report.failed.push(failure);
            }
        }
        let mut retry: Vec<ServiceKey> = retry.into_iter().collect();
        retry.sort_unstable();
        retry
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
        self.apply(&plan, report, false);
        Ok(())
    }
}

/// Failures that mean "the kernel's state differs from what was planned":
/// re-reading the service and planning again fixes them.
fn healable(e: &Error) -> bool {
    e.is_exists() || e.is_not_found() || matches!(e, Error::Lost { .. })
}

fn op_key(op: &Op) -> ServiceKey {
    match op {
        Op::AddService(vs) | Op::UpdateService(vs) => vs.key,
        Op::DeleteService(k)
        | Op::AddDestination(k, _)
        | Op::UpdateDestination(k, _)
        | Op::DeleteDestination(k, _) => *k,
    }
}

/// Records an acknowledged operation in memory.
fn remember(memory: &mut Observed, owned: &mut HashSet<ServiceKey>, op: &Op) {
    match op {
        Op::AddService(vs) => memory.insert(ObservedService::new(vs.clone(), [])),
        Op::UpdateService(vs) => {
            if let Some(m) = memory.get_mut(&vs.key) {
                m.service = vs.clone();
            }
        }
        Op::DeleteService(k) => {
            memory.remove(k);
            owned.remove(k);
        }
        Op::AddDestination(k, rs) | Op::UpdateDestination(k, rs) => {
            if let Some(m) = memory.get_mut(k) {
                m.upsert(ObservedDest {
                    server: *rs,
                    conns: None,
                });
            }
        }
        Op::DeleteDestination(k, addr) => {
            if let Some(m) = memory.get_mut(k) {
                m.remove(addr);
            }
        }
    }
}
