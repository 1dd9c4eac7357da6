//! The executor: observe (read or remember), plan, apply pipelined, remember
//! what the kernel acknowledged, self-heal.

use std::borrow::{Borrow, Cow};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::drain::{Drains, DrainsAt};
use super::flows::{self, FlowCleanup};
use super::kernel::{HandleKernel, Kernel};
use super::key_hash::KeyHashing;
use super::ledger::{ClaimOutcome, ConflictReason, Ledger, LedgerStore, Ownership, Resolved};
use super::parts::{Fill, Parts};
use super::plan::{self, Counts, DrainEnd, Order, Plan, PlanCounts, PlanOptions, Scope};
use super::rolling::Rolling;
use super::state::{DesiredState, Observed, ObservedService};
use super::wire::Writer;
use crate::batch::{BatchMode, Write};
use crate::capabilities::KernelVersion;
use crate::model::{RealServer, ServiceKey, VirtualServer};
use crate::{Error, Handle, Operation, Result};

/// How much of the kernel's state a sync reads before planning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
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
    /// real servers to drain (their connection counts are needed) and, with
    /// [`PlanOptions::keep_weights`], services with a real server to update
    /// (the kernel's weight is needed).
    None,
    /// Drift detection by the slice: each sync checks the service table as
    /// [`Verify::Services`] does and reads a slice of the managed services
    /// in full as [`Verify::Full`] does, so that every managed service is
    /// read in full at least once in any `syncs` consecutive rolling syncs.
    /// Made with [`Verify::rolling`].
    ///
    /// Drift in the slice (a real server removed, added or changed behind
    /// the syncer's back) is repaired in the same sync, under the same
    /// rules of [ownership](Syncer#ownership) as with [`Verify::Full`];
    /// drift anywhere is therefore repaired within `syncs` rolling syncs,
    /// and with [`Syncer::sync`] services changed or deleted behind the
    /// syncer's back at once (the service table check finds them). A
    /// rolling sync that finds no drift writes nothing.
    ///
    /// The slice: every managed service has the number of the rolling sync
    /// that last verified it in full. A rolling sync reads the
    /// `ceil(n / syncs)` of the `n` managed services that have gone longest
    /// without a full verification (ties in key order), and every one that
    /// has gone `syncs` rolling syncs or more without one, whatever their
    /// number (after services left, or after a rolling sync that returned
    /// `Err`). A service counts as verified in full in any sync, rolling or
    /// not, that read it whole for whatever reason (the slice,
    /// [`Verify::Full`], a service changed behind the syncer's back, a
    /// service stale after a failure, a drain, a kept weight to update,
    /// self-healing), or that created it. Only rolling syncs count: syncs
    /// asked for other verifications in between (say, [`Syncer::sync_changes`]
    /// with [`Verify::None`] on every event) neither age services nor
    /// bring a rolling sync's reads forward. [`Syncer::plan`] reads the
    /// slice the next sync would read and does not count as a sync.
    ///
    /// With [`Syncer::sync`], the slice is taken from every managed service;
    /// with [`Syncer::sync_changes`], the changed services are checked as
    /// [`Verify::Services`] checks them (each looked up, real servers read
    /// where the service differs), and the slice, taken from every managed
    /// service as well, is looked up, read in full and synced with them, so
    /// that an agent that syncs only incrementally still finds drift within
    /// `syncs` of its syncs. A slice service that is no longer desired is
    /// deleted then, as [`Syncer::sync`] would delete it. Only a service
    /// dump finds services someone else made within a [`Scope::Filter`] or
    /// [`Scope::All`]: [`Syncer::sync`] does that, `sync_changes` does not.
    ///
    /// [`SyncReport::verified_in_full`] counts the services a sync verified
    /// in full, and [`SyncReport::max_unverified_syncs`] says how long the
    /// stalest managed service has now gone without it (at most
    /// `syncs - 1` after a rolling sync that returned `Ok`).
    ///
    /// `syncs = 1` reads everything on every sync, as [`Verify::Full`].
    /// A rolling sync costs what a [`Verify::Services`] sync costs, plus
    /// the real-server reads of its slice (about `1/syncs` of those of
    /// [`Verify::Full`]) and two passes over the managed services in
    /// memory (choosing the slice, and finding the stalest for the
    /// report), with [`Syncer::sync_changes`] too. The record takes a key
    /// and a number per managed service, from the first rolling sync on.
    ///
    /// ```no_run
    /// use std::num::NonZeroU32;
    /// use ipvsctl::Handle;
    /// use ipvsctl::sync::{DesiredState, Syncer, Verify};
    ///
    /// let handle = Handle::new()?;
    /// let mut syncer = Syncer::new(&handle);
    /// let desired = DesiredState::new();
    /// // Every managed service read in full at least once every 10 syncs.
    /// let rolling = Verify::rolling(NonZeroU32::new(10).unwrap());
    /// let report = syncer.sync(&desired, rolling)?;
    /// println!(
    ///     "{} services verified in full, the stalest {:?} syncs ago",
    ///     report.verified_in_full, report.max_unverified_syncs,
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[non_exhaustive]
    Rolling {
        /// Within how many consecutive rolling syncs every managed service
        /// is read in full.
        syncs: NonZeroU32,
    },
}

impl Verify {
    /// [`Verify::Rolling`]: every managed service read in full at least
    /// once in any `syncs` consecutive rolling syncs, a slice of them in
    /// each.
    pub const fn rolling(syncs: NonZeroU32) -> Self {
        Verify::Rolling { syncs }
    }

    /// The number of syncs of a [`Verify::Rolling`], `None` for the others.
    const fn rolling_syncs(self) -> Option<NonZeroU32> {
        match self {
            Verify::Rolling { syncs } => Some(syncs),
            _ => None,
        }
    }

    /// How the service table is checked: as [`Verify::Services`] for
    /// [`Verify::Rolling`] (its slice is read in full on top), as asked for
    /// the others.
    const fn check(self) -> Self {
        match self {
            Verify::Rolling { .. } => Verify::Services,
            v => v,
        }
    }
}

/// How a [`Verify::Services`] (or [`Verify::Rolling`]) sync checks the
/// service table.
///
/// One service dump, or one `GET_SERVICE` per remembered service. A dump
/// costs the kernel time that grows with the square of the table (it
/// restarts its walk of the service table for every datagram of the dump);
/// a lookup walks one hash chain, which stays short from Linux 7.1 on (each
/// namespace's service table grows with it) and grows with the table before
/// (one table of 256 buckets). Which is cheaper at a given size was measured
/// side by side on both kinds of kernel ([`ServiceCheck::lookups_from`]).
/// Both find services changed or deleted behind the syncer's back; a
/// same-key service someone else created is found by the dump before
/// anything is written, and by the kernel refusing the add otherwise (it is
/// then a [`SyncConflict`] all the same).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServiceCheck {
    /// [`ServiceCheck::Lookups`] from [`ServiceCheck::lookups_from`]
    /// remembered services on (for the running kernel),
    /// [`ServiceCheck::Dump`] below.
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
    /// up rather than dumping the table, on `kernel` (`None`: a release
    /// that could not be read, taken as older than 7.1).
    ///
    /// Both numbers are where the two checks of one syncer, timed in turns
    /// by the bench `bulk_sync` (part `check`, 5,000 to 140,000 services
    /// x 10; `docs/performance.md`), came to cost about the same: from
    /// [`KernelVersion::PER_NAMESPACE_TABLES`] on, 50,000 services (on 7.3
    /// the lookups took 2.1 times the dump's time at 10,000, 1.05 at 50,000
    /// and 0.85 at 60,000); before it, 120,000 (the lookups 1.6-1.7 times
    /// the dump's time at 80,000 on 6.1 and 6.12; at 100,000 and 120,000
    /// 0.95 and 0.96 on 6.1, 1.22 and 1.11 on 6.12; 0.88 at 140,000 on
    /// 6.12). Below them the dump is the cheaper check.
    ///
    /// ```
    /// use ipvsctl::capabilities::KernelVersion;
    /// use ipvsctl::sync::ServiceCheck;
    /// let new = ServiceCheck::lookups_from(Some(KernelVersion::new(7, 3, 4)));
    /// let old = ServiceCheck::lookups_from(Some(KernelVersion::new(6, 1, 0)));
    /// assert!(new < old);
    /// assert_eq!(ServiceCheck::lookups_from(None), old);
    /// ```
    pub fn lookups_from(kernel: Option<KernelVersion>) -> usize {
        match kernel {
            Some(v) if v >= KernelVersion::PER_NAMESPACE_TABLES => LOOKUPS_FROM_PER_NAMESPACE,
            _ => LOOKUPS_FROM_SHARED,
        }
    }
}

/// [`ServiceCheck::lookups_from`] on kernels with a service table per
/// namespace (measured on 7.3.4).
const LOOKUPS_FROM_PER_NAMESPACE: usize = 50_000;
/// [`ServiceCheck::lookups_from`] on kernels with one service table of 256
/// buckets for all namespaces (measured on 6.1 and 6.12).
const LOOKUPS_FROM_SHARED: usize = 120_000;

/// Settings of a [`Syncer`]: [`SyncOptions::default`] and the `with_*`
/// methods (`#[non_exhaustive]`, so settings can be added).
///
/// ```
/// use ipvsctl::batch::BatchMode;
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
    /// How a [`Verify::Services`] or [`Verify::Rolling`] sync checks the
    /// service table (default [`ServiceCheck::Auto`]).
    pub service_check: ServiceCheck,
    /// The most operations a sync holds and sends as one part of its plan
    /// (default 16,384, about 1.8 MiB of them): a cold sync adds every
    /// real server of the table, and makes the adds of each part out of the
    /// desired state just before it is sent, so memory holds one part while
    /// it fills with what the sync did. Smaller parts hold less; each part
    /// ends with every answer received before the next is sent (at 50,000
    /// x 10, parts of 16,384 measured no slower than parts of 131,072). The
    /// adds of services not yet the syncer's go out in rounds (at most
    /// 2,048 adds, and with their real servers at most one part), each
    /// answered before the real servers of its services go out, whatever
    /// the size.
    pub part_size: NonZeroUsize,
    /// Deletes the connection-tracking entries of UDP and SCTP real
    /// servers and services this syncer deleted (default off): once the
    /// sync's IPVS writes are done, one conntrack dump and a pipelined
    /// delete per entry, in the handle's namespace
    /// ([`SyncReport::conntrack`]). Without it, a client that keeps its
    /// source port keeps following the conntrack entry of a removed real
    /// server (see [`crate::conntrack`]). TCP entries are left alone.
    pub conntrack_cleanup: bool,
}

impl Default for SyncOptions {
    fn default() -> Self {
        SyncOptions {
            scope: Scope::Owned,
            plan: PlanOptions::default(),
            mode: BatchMode::Pipelined,
            read_sockets: 1,
            service_check: ServiceCheck::Auto,
            part_size: DEFAULT_PART_SIZE,
            conntrack_cleanup: false,
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

    /// Sets how a [`Verify::Services`] or [`Verify::Rolling`] sync checks
    /// the service table (default [`ServiceCheck::Auto`]).
    pub fn with_service_check(mut self, service_check: ServiceCheck) -> Self {
        self.service_check = service_check;
        self
    }

    /// Sets the most operations of a plan held and sent as one part
    /// (default 16,384; see [`SyncOptions::part_size`]).
    pub fn with_part_size(mut self, part_size: NonZeroUsize) -> Self {
        self.part_size = part_size;
        self
    }

    /// Turns the conntrack cleanup after deletes on or off (default off;
    /// see [`SyncOptions::conntrack_cleanup`]).
    pub fn with_conntrack_cleanup(mut self, on: bool) -> Self {
        self.conntrack_cleanup = on;
        self
    }
}

/// A write of a sync that failed, with its typed error (whose
/// [`Error::operation`] is the write's [`Write::operation`]).
#[derive(Debug)]
#[non_exhaustive]
pub struct SyncFailure {
    /// The write.
    pub write: Write,
    /// Why.
    pub error: Error,
}

/// A desired service that was left alone because a service with the same
/// key exists in the kernel and is not this syncer's: its [`Ledger`] has no
/// record of making it (or its record shows another tool made it), it was
/// not [adopted](Syncer::adopt), and the scope does not claim it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncConflict {
    /// The key.
    pub key: ServiceKey,
    /// The service found in the kernel, as read (`None` when it could not be
    /// read back after the kernel refused to create it, e.g. because it was
    /// deleted again meanwhile).
    pub found: Option<VirtualServer>,
    /// How the syncer knows it is not its own.
    pub reason: ConflictReason,
}

/// What a sync did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct SyncReport {
    /// How the kernel was read (a syncer without memory reads fully whatever
    /// was asked).
    pub verified: Option<Verify>,
    /// Managed services this sync verified in full: read whole (the
    /// service and every real server) before planning, whatever the reason
    /// ([`Verify::Full`], a [`Verify::Rolling`] slice, a service changed
    /// behind the syncer's back, a stale service, a drain, a kept weight to
    /// update), or created by it (its add acknowledged: the service is then
    /// what the sync wrote). A service read again to heal after the writes
    /// is not counted again.
    pub verified_in_full: usize,
    /// After a [`Verify::Rolling`] sync (`None` after any other): the most
    /// rolling syncs any managed service has now gone without a full
    /// verification. 0 when every managed service was verified in full in
    /// this sync; at most `syncs - 1` after a rolling sync that returned
    /// `Ok`. Services this syncer remembers from before its first rolling
    /// sync count from then on.
    pub max_unverified_syncs: Option<u64>,
    /// What the plan asked for (first pass).
    pub planned: PlanCounts,
    /// Virtual servers: `added`, `updated`, `deleted` count acknowledged
    /// operations (of both passes); `unchanged` those already as desired.
    pub services: Counts,
    /// Real servers, counted as [`SyncReport::services`].
    pub destinations: Counts,
    /// Real servers draining at weight 0 (graceful termination).
    pub draining: usize,
    /// Draining real servers deleted (acknowledged) because their drain
    /// time passed while they still had connections, or their counts were
    /// not known ([`PlanOptions::max_drain`],
    /// [`Syncer::set_drain_time`]): each service and real server.
    pub drains_ended_at_deadline: Vec<(ServiceKey, SocketAddr)>,
    /// Draining real servers deleted (acknowledged) because they were idle.
    pub drains_ended_idle: usize,
    /// Write requests sent to the kernel.
    pub writes_sent: usize,
    /// Read requests sent (dumps and lookups).
    pub reads_sent: usize,
    /// Operations that failed, with their typed errors (after self-healing).
    /// A service add that failed, or whose outcome is unknown, is here; its
    /// real servers were not sent (see [`SyncReport::withheld`]).
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
    /// Real-server operations not sent because their service's add was not
    /// acknowledged (refused, or its outcome unknown): they could otherwise
    /// land on a service someone else made. The next sync plans them again
    /// once the service is known to be this syncer's.
    pub withheld: usize,
    /// The first socket failure, if a write socket could not be opened
    /// ([`Operation::OpenSyncSocket`]) or failed during a batch
    /// ([`Operation::SyncWrite`]): the operations not answered before it have
    /// unknown outcomes and are in neither `failed` nor the counts, and the
    /// sync stopped writing. The syncer then forgets what it remembered and
    /// reads everything on the next sync.
    pub aborted: Option<Error>,
    /// Errors after the sync had started writing, which therefore did not
    /// make it return `Err`: a re-read for self-healing that failed (those
    /// services are read again on the next sync), or a save of the ledger
    /// after the writes ([`Operation::SaveLedger`]; the unsaved changes are
    /// handed to the store again with its next save).
    pub after_writes: Vec<Error>,
    /// The connection-tracking cleanup after this sync's deletes of UDP
    /// and SCTP real servers and services, when
    /// [`SyncOptions::conntrack_cleanup`] is on and there was something to
    /// clean (including an earlier sync's cleanup tried again).
    pub conntrack: Option<FlowCleanup>,
}

impl SyncReport {
    /// Whether the kernel now matches the desired state: nothing failed, no
    /// socket failure cut the sync short, no desired service was left
    /// alone as a [`SyncConflict`], and nothing failed after the writes.
    pub fn is_ok(&self) -> bool {
        self.failed.is_empty()
            && self.aborted.is_none()
            && self.conflicts.is_empty()
            && self.after_writes.is_empty()
            && self.conntrack.as_ref().is_none_or(FlowCleanup::is_ok)
    }

    /// The failures that are not consequences of another one (a real-server
    /// operation refused because its service's creation failed).
    pub fn root_failures(&self) -> impl Iterator<Item = &SyncFailure> {
        let failed_services: HashSet<ServiceKey> = self
            .failed
            .iter()
            .filter_map(|f| match &f.write {
                Write::AddService(vs) => Some(vs.key),
                _ => None,
            })
            .collect();
        self.failed.iter().filter(move |f| {
            !matches!(
                (&f.write, &f.error),
                (
                    Write::AddDestination(k, _) | Write::UpdateDestination(k, _),
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
/// repairs any drift, and [`Verify::Rolling`] reads a slice in full on each
/// sync, so that drift anywhere is repaired within a given number of syncs.
/// A new syncer (a new process) has no memory and reads the kernel on its
/// first sync whatever is asked.
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
/// IPVS records no owner with a service, so a syncer keeps its own record:
/// its [`Ledger`]. It owns the services it created (the kernel acknowledged
/// its add) and those it was told to [`Syncer::adopt`]. With the default
/// [`Scope::Owned`] it changes and deletes only those: a desired service
/// whose key already exists in the kernel, made by keepalived, Docker,
/// ipvsadm or another syncer, is a [`SyncConflict`] in
/// [`SyncReport::conflicts`] and is left exactly as it is (its real servers
/// too), now and when it leaves the desired state. The syncer finds such a
/// service in its read of the kernel, or, when it trusts its memory
/// ([`Verify::None`]), by the kernel refusing its add: new services are
/// therefore added in a first round of requests, and their real servers are
/// sent only once the adds are acknowledged. An add refused for another
/// reason, or whose answer never came (a timeout, a lost or undecodable
/// answer, a failed socket), gets no real servers in that sync
/// ([`SyncReport::withheld`]); the next sync reads the service and settles it.
///
/// When the kernel shows an owned service gone (deleted by `ipvsadm -C`, an
/// operator, another tool), the key leaves the ledger: if another tool
/// creates that key later, it is theirs. A desired service that went is
/// created again through the same first round, as any new service.
/// [`Scope::Filter`] and [`Scope::All`] claim the services they include,
/// existing or not.
///
/// # Drains and weights
///
/// With graceful termination ([`PlanOptions::graceful_termination`]) a real
/// server that leaves the desired state is set to weight 0 and deleted by
/// the first sync that finds it idle, with counts read in that sync (every
/// sync reads the services with real servers to drain, whatever [`Verify`]
/// says), or that runs once its drain time ([`PlanOptions::max_drain`], or
/// its own, [`Syncer::set_drain_time`]) has passed since its drain started,
/// connections or not. The syncer times drains in memory ([`Syncer::drains`]):
/// from the sync that set the weight to 0, or, for a real server already at
/// weight 0 and not desired when it first sees it (after a restart, or
/// quiesced by a health checker before it left the desired state), from
/// that sync. [`Syncer::sync_changes`] also syncs the services with a drain
/// past its deadline. [`SyncReport::drains_ended_at_deadline`] and
/// [`SyncReport::drains_ended_idle`] say how the drains of a sync ended.
///
/// With [`PlanOptions::keep_weights`] the weights of existing real servers
/// belong to someone else (a health checker), except that a real server this
/// syncer drained, and which is desired again, gets its desired weight
/// back; after a restart the syncer no longer knows which drains it
/// started, and keeps those weights too.
///
/// # Surviving a restart
///
/// Give the syncer a [`LedgerStore`] ([`Syncer::with_ledger`]; a
/// [`FileLedger`](super::FileLedger), or your own) and it writes its ledger
/// ahead of the kernel: before it sends any add, it saves the services it is
/// about to create as *claiming*, with the settings it creates them with;
/// before it deletes an owned service, it saves it as *releasing*, with the
/// settings it has; once the answers are in, it saves what they settled. A
/// sync that creates many services claims them in rounds of up to 2,048,
/// each saved ahead together with what the round before settled (about 35
/// saves for a cold sync of 50,000 x 10). A
/// write that creates or deletes a service is never sent before the save
/// ahead of it returned `Ok` (if the first fails, the sync returns `Err` and
/// writes nothing; if a later one fails, the rounds from there wait for the
/// next sync and the error is in [`SyncReport::after_writes`]).
///
/// A restarted agent passes the saved ledger back to
/// [`Syncer::with_ledger`]. Its first sync reads the kernel and settles
/// every claiming or releasing key: a service there with exactly the
/// recorded settings is its own; no service, nothing to own; a service with
/// other settings was made by another tool and is a conflict with
/// [`ConflictReason::ClaimedWithOtherSettings`] (or
/// [`ConflictReason::ReleasedWithOtherSettings`]), never touched. So an
/// agent killed anywhere in a sync owns, after its restart, every service it
/// made, and nothing else.
///
/// Two cases cannot be told apart, since the kernel keeps no owner:
///
/// * another tool creating a service with the same key *and the very same
///   settings* while the ledger records it as claiming (between the save
///   ahead of the add and the save after its answer), and the syncer
///   stopping before that second save: the restarted syncer takes that
///   service for its own;
/// * an owned service deleted and created again by another tool before the
///   syncer read the table (a [`Verify::Services`] or [`Verify::Full`] sync
///   reads it; [`Verify::None`] does not): the syncer takes the new service
///   for its own, changed behind its back, and repairs it.
///
/// Without a store the ledger lives in memory only: a restarted syncer owns
/// nothing, and the services its previous run created are conflicts until
/// it adopts them.
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
pub struct Syncer<H: Borrow<Handle> = Arc<Handle>> {
    handle: H,
    /// Extra sockets for parallel reads.
    readers: Vec<Handle>,
    /// The write socket (opened on first use). Boxed: every write takes it
    /// out and puts it back, and it is about 400 bytes to copy each way.
    writer: Option<Box<Writer>>,
    core: Core,
}

impl<H: Borrow<Handle> + fmt::Debug> fmt::Debug for Syncer<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Syncer")
            .field("handle", &self.handle)
            .field("options", &self.core.options)
            .field("memory", &self.core.memory)
            .field("known", &self.core.known)
            .field("stale", &self.core.stale)
            .field("ledger", &self.core.ledger)
            .field("drains", &self.core.drains)
            .field("store", &self.core.store.is_some())
            .finish_non_exhaustive()
    }
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
            readers: Vec::new(),
            writer: None,
            core: Core::new(options),
        }
    }

    /// Resumes from `ledger` (what a previous run saved; [`Ledger::new`] for
    /// a first start) and saves every change of it through `store`, ahead
    /// of the writes it concerns (see [Surviving a
    /// restart](Syncer#surviving-a-restart)). The next sync reads the kernel
    /// fully and settles every claim and release the ledger holds.
    ///
    /// ```no_run
    /// use ipvsctl::Handle;
    /// use ipvsctl::model::ServiceKey;
    /// use ipvsctl::sync::{Ledger, Syncer};
    /// # fn load() -> Ledger { Ledger::new() }
    /// # fn write_durably(_: &Ledger) -> std::io::Result<()> { Ok(()) }
    /// // The ledger a previous run saved (or a new one on a first start).
    /// let ledger: Ledger = load();
    /// let store = |ledger: &Ledger, _changed: &[ServiceKey]| write_durably(ledger);
    /// let syncer = Syncer::new(Handle::new()?).with_ledger(ledger, store);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_ledger(mut self, ledger: Ledger, store: impl LedgerStore + 'static) -> Self {
        self.core.ledger = ledger;
        self.core.store = Some(Box::new(store));
        self.core.forget();
        self
    }

    /// The handle.
    pub fn handle(&self) -> &Handle {
        self.handle.borrow()
    }

    /// The options.
    pub fn options(&self) -> &SyncOptions {
        &self.core.options
    }

    /// The options, to change between syncs.
    pub fn options_mut(&mut self) -> &mut SyncOptions {
        &mut self.core.options
    }

    /// What the syncer remembers of the managed services.
    pub fn memory(&self) -> &Observed {
        &self.core.memory
    }

    /// The ownership ledger: what the syncer owns, and what it is about to
    /// create or delete.
    pub fn ledger(&self) -> &Ledger {
        &self.core.ledger
    }

    /// Takes services over: they are owned from now on, so a sync changes
    /// them to the desired state (replacing their real servers) and, with
    /// [`Scope::Owned`], deletes them once they are not desired, even though
    /// this syncer did not create them. For a [`SyncConflict`] the caller
    /// decides is its own. The next sync reads the kernel (and saves the
    /// ledger, with a store).
    pub fn adopt(&mut self, keys: impl IntoIterator<Item = ServiceKey>) {
        let before = self.core.ledger.owned().len();
        for key in keys {
            self.core.ledger.insert_owned(key);
        }
        if self.core.ledger.owned().len() != before {
            // Adopted services are not in memory yet.
            self.core.known = false;
        }
    }

    /// Forgets everything remembered: the next sync reads the kernel fully.
    /// The ledger and the drains are kept.
    pub fn forget(&mut self) {
        self.core.forget();
    }

    /// Sets how long one real server may drain, in place of
    /// [`PlanOptions::max_drain`] (graceful termination): for example the
    /// grace period of the endpoint behind it, which the caller knows and
    /// the kernel does not.
    ///
    /// Set it before the real server leaves the desired state (when it is
    /// added, say), or when it leaves, or while it drains (its deadline is
    /// then its drain's start plus this time). The syncer keeps it while the
    /// real server is desired or draining, and forgets it when the real
    /// server is deleted, when its service goes, and when it is neither
    /// desired nor in the kernel after a sync of its service.
    ///
    /// It lives with the syncer, not in the [`DesiredState`], because only
    /// the syncer knows when a drain ends: a desired state is often built
    /// afresh for every sync from a source that no longer lists the
    /// endpoint once it is gone, and could not tell when to drop it.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use ipvsctl::Handle;
    /// use ipvsctl::model::{RealServer, ServiceKey, VirtualServer};
    /// use ipvsctl::sync::{DesiredState, PlanOptions, SyncOptions, Syncer, Verify};
    ///
    /// let plan = PlanOptions::default()
    ///     .with_graceful_termination(true)
    ///     .with_max_drain(Duration::from_secs(300));
    /// let mut syncer = Syncer::with_options(Handle::new()?, SyncOptions::default().with_plan(plan));
    /// let key = ServiceKey::tcp("10.96.0.1:443".parse()?);
    /// let pod = RealServer::new("10.244.0.2:6443".parse()?);
    /// let mut desired = DesiredState::new();
    /// desired.insert(VirtualServer::new(key), [pod])?;
    /// syncer.sync(&desired, Verify::Services)?;
    /// // The pod is terminating with a grace period of 30 s.
    /// desired.remove_destinations(&key, [pod.addr])?;
    /// syncer.set_drain_time(key, pod.addr, Duration::from_secs(30));
    /// let report = syncer.sync(&desired, Verify::Services)?;
    /// // Weight 0 now; deleted by the first sync once it is idle or 30 s on.
    /// assert_eq!(report.planned.drain_started, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_drain_time(&mut self, key: ServiceKey, addr: SocketAddr, time: Duration) {
        self.core.drains.set_drain_time(key, addr, time);
    }

    /// The drains under way and the drain times set, with when each drain
    /// started and whether this syncer started it (see [`Drains`]).
    pub fn drains(&self) -> &Drains {
        &self.core.drains
    }

    /// Computes the plan a sync would apply, reading the kernel as `verify`
    /// asks, without writing anything.
    /// Desired services found to belong to someone else (see
    /// [`SyncConflict`]) are left out of the plan.
    pub fn plan(&mut self, desired: &DesiredState, verify: Verify) -> Result<Plan> {
        let (core, mut kernel) = self.parts();
        core.plan(&mut kernel, desired, verify)
    }

    /// Makes the managed services equal to `desired`.
    ///
    /// `Err` only before anything was written: reading the kernel failed, or
    /// the save of the ledger ahead of the writes failed
    /// ([`Operation::SaveLedger`]). Once a write went out the sync returns
    /// its report: failed write operations are in [`SyncReport::failed`], a
    /// failed write socket in [`SyncReport::aborted`], a failed re-read or
    /// save after the writes in [`SyncReport::after_writes`], and everything
    /// else was applied. Running the sync again converges.
    ///
    /// Desired services that exist but are not this syncer's are left alone
    /// and listed in [`SyncReport::conflicts`] (see [Ownership](Syncer#ownership)).
    pub fn sync(&mut self, desired: &DesiredState, verify: Verify) -> Result<SyncReport> {
        let (core, mut kernel) = self.parts();
        core.sync(&mut kernel, desired, verify)
    }

    /// Makes the services `desired` records as changed
    /// ([`DesiredState::changes`]) equal to their desired entries (a removed
    /// one is deleted), in time proportional to them, not to the table, and
    /// takes the record. The record is left in place when the sync fails
    /// with `Err` (then nothing was written), so the next call syncs those
    /// services again.
    ///
    /// Everything [`Syncer::sync`] guarantees holds for the changed
    /// services: the scope and [ownership](Syncer#ownership) (a same-key
    /// service that is not this syncer's is a [`SyncConflict`]), the ledger
    /// written ahead, graceful termination, pipelined writes, self-healing,
    /// `Err` only before the first write, and the [`SyncReport`].
    /// `verify` applies to the changed services only: [`Verify::None`]
    /// trusts memory (services whose state became unknown are still looked
    /// up), [`Verify::Services`] looks each changed service up
    /// (`GET_SERVICE`, pipelined) and reads the real servers of those that
    /// differ, and [`Verify::Full`] reads them all back. A syncer with no
    /// memory yet reads the changed services fully whatever is asked. Drift
    /// elsewhere is found by the periodic full [`Syncer::sync`], which after
    /// any mix of changes plans nothing when nothing drifted, or by
    /// [`Verify::Rolling`]: the changed services are checked as with
    /// [`Verify::Services`], and a slice of every managed service is looked
    /// up, read in full and synced with them, so that drift anywhere is
    /// repaired within the rolling syncs the slice asks for.
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
        let (core, mut kernel) = self.parts();
        // The record is read in place and emptied only once the sync has
        // not failed: it keeps its room for the next changes.
        let result = core.sync_services(&mut kernel, desired, desired.changes(), verify);
        if result.is_ok() {
            desired.clear_changes();
        }
        result
    }

    /// The syncer's state and the kernel behind its handle, apart.
    fn parts(&mut self) -> (&mut Core, HandleKernel<'_, H>) {
        (
            &mut self.core,
            HandleKernel {
                handle: &self.handle,
                readers: &mut self.readers,
                writer: &mut self.writer,
            },
        )
    }
}

/// A syncer's state and logic, apart from the kernel it reads and writes
/// (any [`Kernel`]).
pub(crate) struct Core {
    pub(crate) options: SyncOptions,
    /// The managed services as last read or acknowledged.
    pub(crate) memory: Observed,
    /// Whether `memory` covers every managed service (set by a read).
    known: bool,
    /// Services whose kernel state is unknown: read before the next plan.
    stale: HashSet<ServiceKey, KeyHashing>,
    /// What the syncer owns, claims and releases.
    pub(crate) ledger: Ledger,
    /// Where the ledger is saved ahead of the writes.
    store: Option<Box<dyn LedgerStore>>,
    /// When each drain started, and the drain times set.
    pub(crate) drains: Drains,
    /// The clock drains are timed by (a test's own in the property tests).
    pub(crate) clock: Arc<dyn Fn() -> Instant + Send + Sync>,
    /// The time of the sync under way, read from `clock` once at its start.
    now: Instant,
    /// Conntrack selections of acknowledged deletes not cleaned up yet.
    flows: flows::Pending,
    /// When each managed service was last verified in full, and the slice
    /// of a rolling sync under way.
    rolling: Rolling,
    /// The running kernel's version (`uname -r`), which decides
    /// [`ServiceCheck::Auto`].
    pub(crate) kernel_version: Option<KernelVersion>,
    /// In a full-state sync, by index in the desired state: the services
    /// its check found in sync (the kernel shows them as remembered, and
    /// memory has them as desired). Found while the kernel still builds the
    /// dump, so that the plan after it counts them without comparing them
    /// again. Empty between syncs and in other syncs.
    settled: Vec<bool>,
    /// [`CLAIMS_PER_ROUND`], fewer in tests (so that a few services make
    /// several rounds).
    pub(crate) claims_per_round: usize,
}

/// Whether a batch is the first pass of a sync or the retry of what the
/// kernel contradicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    First,
    Retry,
}

impl Core {
    pub(crate) fn new(options: SyncOptions) -> Self {
        Core {
            options,
            memory: Observed::new(),
            known: false,
            stale: HashSet::default(),
            ledger: Ledger::new(),
            store: None,
            drains: Drains::new(),
            clock: Arc::new(Instant::now),
            now: Instant::now(),
            flows: flows::Pending::default(),
            rolling: Rolling::default(),
            kernel_version: KernelVersion::parse(&crate::capabilities::running_release()),
            settled: Vec::new(),
            claims_per_round: CLAIMS_PER_ROUND,
        }
    }

    /// Sets the store the ledger is saved to.
    #[cfg(test)]
    pub(crate) fn set_store(&mut self, ledger: Ledger, store: impl LedgerStore + 'static) {
        self.ledger = ledger;
        self.store = Some(Box::new(store));
        self.forget();
    }

    fn forget(&mut self) {
        self.memory = Observed::new();
        self.known = false;
        self.stale.clear();
        self.rolling.forget();
    }

    /// Starts the verification of a sync: the slice of a rolling one
    /// (`advance`: a sync, not a plan shown without writing).
    fn start_verify(&mut self, verify: Verify, advance: bool) {
        self.rolling
            .start(verify.rolling_syncs(), self.memory.keys(), advance);
    }

    /// Ends the verification of a sync (see [`Rolling::finish`]).
    fn finish_verify(&mut self, verify: Verify, report: &mut SyncReport) {
        let memory = &self.memory;
        report.max_unverified_syncs = self.rolling.finish(
            verify.rolling_syncs().is_some(),
            memory.keys(),
            |k| memory.contains(k),
            memory.len(),
        );
    }

    /// See [`Syncer::plan`].
    pub(crate) fn plan(
        &mut self,
        kernel: &mut impl Kernel,
        desired: &DesiredState,
        verify: Verify,
    ) -> Result<Plan> {
        self.now = (self.clock)();
        let mut report = SyncReport::default();
        // A rolling plan reads the slice the next sync would read, and is
        // not a sync: the count of rolling syncs stays.
        self.start_verify(verify, false);
        let observed = self.observe(kernel, desired, verify, &mut report);
        self.rolling.end_plan();
        observed?;
        Ok(self.plan_without(desired, &report.conflicts, Order::Documented, &[]))
    }

    /// See [`Syncer::sync`].
    pub(crate) fn sync(
        &mut self,
        kernel: &mut impl Kernel,
        desired: &DesiredState,
        verify: Verify,
    ) -> Result<SyncReport> {
        self.now = (self.clock)();
        let mut report = SyncReport::default();
        self.start_verify(verify, true);
        self.settled = vec![false; desired.len()];
        let observed = self.observe(kernel, desired, verify, &mut report);
        let settled = std::mem::take(&mut self.settled);
        observed?;
        // Settled services are owned already.
        self.own_managed(
            desired,
            (desired.services().iter().zip(&settled))
                .filter(|(_, settled)| !**settled)
                .map(|(ds, _)| ds.service().key),
        );
        let mut plan = self.plan_without(desired, &report.conflicts, Order::ClaimsApart, &settled);
        drop(settled);
        self.execute(kernel, desired, &mut plan, &mut report)?;
        let keys: Vec<ServiceKey> = self.drains.keys().copied().collect();
        self.settle_drains(desired, &keys);
        self.finish_verify(verify, &mut report);
        Ok(report)
    }

    /// See [`Syncer::sync_changes`].
    pub(crate) fn sync_services(
        &mut self,
        kernel: &mut impl Kernel,
        desired: &DesiredState,
        keys: &[ServiceKey],
        verify: Verify,
    ) -> Result<SyncReport> {
        self.now = (self.clock)();
        // Services with a drain past its deadline are synced too, so that
        // no drain outlives its deadline by more than one sync.
        let max = self.options.plan.max_drain;
        let mut expired: Vec<ServiceKey> = self
            .drains
            .timed_keys()
            .filter(|k| self.drains.has_expired(k, self.now, max) && !keys.contains(k))
            .copied()
            .collect();
        // Borrowed unless more keys join (a change is synced with no copy).
        let mut keys: Cow<'_, [ServiceKey]> = if expired.is_empty() {
            Cow::Borrowed(keys)
        } else {
            expired.sort_unstable();
            Cow::Owned(keys.iter().copied().chain(expired).collect())
        };
        // The rolling slice, taken from every managed service, is synced
        // with the changed services.
        self.start_verify(verify, true);
        if !self.rolling.slice().is_empty() {
            let listed: HashSet<ServiceKey> = keys.iter().copied().collect();
            let mut slice: Vec<ServiceKey> = self
                .rolling
                .slice()
                .iter()
                .filter(|k| !listed.contains(k))
                .copied()
                .collect();
            slice.sort_unstable();
            keys.to_mut().extend(slice);
        }
        let mut report = SyncReport::default();
        self.observe_keys(kernel, desired, &keys, verify, &mut report)?;
        self.own_managed(desired, keys.iter().copied());
        let mine = without_conflicts(&keys, &report.conflicts);
        let mut plan = plan::plan_services_ordered(
            desired,
            &self.memory,
            &mine,
            &self.options.scope,
            self.ledger.owned(),
            self.options.plan,
            Order::ClaimsApart,
            DrainsAt::new(&self.drains, self.now),
        );
        self.execute(kernel, desired, &mut plan, &mut report)?;
        self.settle_drains(desired, &keys);
        self.finish_verify(verify, &mut report);
        Ok(report)
    }

    /// Brings the drains of the services `keys` in line with what is desired
    /// and what the kernel now has (see [`Drains`]).
    fn settle_drains(&mut self, desired: &DesiredState, keys: &[ServiceKey]) {
        if self.drains.is_empty() {
            return;
        }
        for key in keys {
            self.drains
                .settle(key, desired.get(key), self.memory.get(key));
        }
    }

    /// Desired services in memory are managed: owned already, or claimed by
    /// the scope, and owned from now on.
    fn own_managed(&mut self, desired: &DesiredState, keys: impl Iterator<Item = ServiceKey>) {
        for key in keys {
            if !self.ledger.owned().contains(&key)
                && desired.contains(&key)
                && self.memory.contains(&key)
            {
                self.ledger.insert_owned(key);
            }
        }
    }

    /// The plan for `desired` minus the conflicting services (left out
    /// where they stand, not copied without them: at 50,000 x 10 a copy of
    /// the desired state is 36 MB).
    fn plan_without(
        &self,
        desired: &DesiredState,
        conflicts: &[SyncConflict],
        order: Order,
        settled: &[bool],
    ) -> Plan {
        let foreign: HashSet<ServiceKey> = conflicts.iter().map(|c| c.key).collect();
        plan::plan_ordered(
            desired,
            &self.memory,
            &self.options.scope,
            self.ledger.owned(),
            self.options.plan,
            order,
            DrainsAt::new(&self.drains, self.now),
            &foreign,
            settled,
        )
    }

    /// Whether a [`Verify::Services`] sync looks the remembered services up
    /// rather than dumping the table (see [`ServiceCheck`]).
    fn looks_up(&self) -> bool {
        matches!(self.options.scope, Scope::Owned)
            && match self.options.service_check {
                ServiceCheck::Dump => false,
                ServiceCheck::Lookups => true,
                ServiceCheck::Auto => {
                    self.memory.len() >= ServiceCheck::lookups_from(self.kernel_version)
                }
            }
    }

    /// Settles a service the kernel showed against the ledger and the
    /// scope: managed, or someone else's, which leaves memory and is a
    /// conflict if desired. The ledger is asked once for the key (this runs
    /// for every service of a dump).
    fn admit(
        &mut self,
        vs: VirtualServer,
        desired: &DesiredState,
        report: &mut SyncReport,
    ) -> Admission {
        let key = vs.key;
        let resolved = self.ledger.resolve(&key, Some(&vs));
        // Resolved with a service, the key is owned now exactly when it is
        // the syncer's.
        let mine = resolved == Resolved::Mine;
        let recorded = resolved != Resolved::Unknown;
        if self.options.scope.includes_known(&key, mine) {
            return Admission {
                managed: Some((vs, mine)),
                recorded,
                forgotten: false,
            };
        }
        let reason = match resolved {
            Resolved::NotMine(reason) => reason,
            Resolved::Mine | Resolved::Unknown | Resolved::Gone => ConflictReason::Found,
        };
        let forgotten = self.memory.remove(&key).is_some();
        if desired.contains(&key) {
            report.conflicts.push(SyncConflict {
                key,
                found: Some(vs),
                reason,
            });
        }
        Admission {
            managed: None,
            recorded,
            forgotten,
        }
    }

    /// Settles what lookups of `keys` found (`found`, in the same order):
    /// a service that is gone leaves memory and the ledger, someone else's
    /// is a conflict, and a managed one whose remembered real servers
    /// cannot stand for the kernel's (see `trusts`) goes to `reads`.
    fn settle_found(
        &mut self,
        keys: &[ServiceKey],
        found: Vec<Option<VirtualServer>>,
        desired: &DesiredState,
        verify: Verify,
        report: &mut SyncReport,
        reads: &mut Vec<Read>,
    ) {
        for (key, vs) in keys.iter().zip(found) {
            let Some(vs) = vs else {
                self.gone(key);
                continue;
            };
            let Some((vs, mine)) = self.admit(vs, desired, report).managed else {
                continue;
            };
            match self.memory.get(key) {
                Some(m) if self.trusts(key, m, &vs, desired, verify) => {
                    settle(&mut self.settled, mine, desired, m);
                }
                m => reads.push(read_whole(*key, vs, m)),
            }
        }
    }

    /// Settles a service the kernel does not have: it leaves memory and the
    /// ledger.
    fn gone(&mut self, key: &ServiceKey) {
        self.memory.remove(key);
        self.ledger.resolve(key, None);
    }

    /// Brings the memory of the services `keys` up to date as `verify` asks
    /// (see [`Syncer::sync_changes`]); same-key services that are not this
    /// syncer's and are desired go to `report.conflicts`.
    fn observe_keys(
        &mut self,
        kernel: &mut impl Kernel,
        desired: &DesiredState,
        keys: &[ServiceKey],
        verify: Verify,
        report: &mut SyncReport,
    ) -> Result<()> {
        let verify = if self.known { verify } else { Verify::Full };
        report.verified = Some(verify);
        // A rolling sync checks as `Services` does; `trusts` reads its slice.
        let verify = verify.check();
        let (look, mut to_read): (Vec<ServiceKey>, Vec<Read>) = if verify == Verify::None {
            let look = keys
                .iter()
                .filter(|k| self.stale.contains(k))
                .copied()
                .collect();
            // Real servers are read only to drain (graceful termination) or
            // to keep weights.
            let counts = if self.options.plan.graceful_termination || self.options.plan.keep_weights
            {
                keys.iter()
                    .filter(|k| !self.stale.contains(k))
                    .filter(|k| {
                        self.memory
                            .get(k)
                            .is_some_and(|m| self.needs_read(desired, m))
                    })
                    .map(|k| (*k, Shown::Nothing))
                    .collect()
            } else {
                Vec::new()
            };
            (look, counts)
        } else {
            (keys.to_vec(), Vec::new())
        };
        if !look.is_empty() {
            let found = kernel.lookup(&look)?;
            report.reads_sent += look.len();
            self.settle_found(&look, found, desired, verify, report, &mut to_read);
        }
        to_read.sort_unstable_by_key(|r| r.0);
        to_read.dedup_by_key(|r| r.0);
        // Services whose read fails are marked stale again.
        for key in &look {
            self.stale.remove(key);
        }
        report.verified_in_full += self.read_into_memory(kernel, to_read, report)?;
        Ok(())
    }

    /// Reads the real servers of each service of `reads` and puts it in
    /// memory: with the service shown, or the remembered one ([`Shown`]). A
    /// service is replaced in memory only by a complete read of it; one
    /// whose read failed is left as it was and marked stale, so the next
    /// sync reads it (`Err`: the first failure). Returns how many services
    /// were read whole, service given and real servers read: verified in
    /// full (and recorded so for rolling verification).
    fn read_into_memory(
        &mut self,
        kernel: &mut impl Kernel,
        reads: Vec<Read>,
        report: &mut SyncReport,
    ) -> Result<usize> {
        if reads.is_empty() {
            return Ok(0);
        }
        let (keys, mut shown): (Vec<ServiceKey>, Vec<Shown>) = reads.into_iter().unzip();
        let memory = &mut self.memory;
        let stale = &mut self.stale;
        let rolling = &mut self.rolling;
        let mut whole = 0;
        let mut failed = None;
        let read = kernel.destinations(&keys, self.options.read_sockets.max(1), |index, r| {
            let Some(key) = keys.get(index) else {
                return;
            };
            match r {
                Ok(d) => match (
                    shown
                        .get_mut(index)
                        .map(|s| std::mem::replace(s, Shown::Nothing)),
                    memory.get_mut(key),
                ) {
                    (Some(Shown::Service(vs)), Some(m)) => {
                        if let Some(vs) = vs {
                            m.service = *vs;
                        }
                        m.set_destinations(d);
                        whole += 1;
                        rolling.verified(*key);
                    }
                    (Some(Shown::Service(Some(vs))), None) => {
                        memory.insert(ObservedService::new(*vs, d));
                        whole += 1;
                        rolling.verified(*key);
                    }
                    // The remembered service stands: its real servers
                    // alone were read (for their counts or weights).
                    (Some(Shown::Nothing), Some(m)) => m.set_destinations(d),
                    _ => {}
                },
                Err(e) => {
                    stale.insert(*key);
                    failed.get_or_insert(e);
                }
            }
        });
        report.reads_sent += keys.len();
        if let Err(e) = read {
            // Which services were read before it failed is not known.
            self.stale.extend(keys.iter().copied());
            return Err(e);
        }
        failed.map_or(Ok(whole), Err)
    }

    /// Saves the ledger's changes to the store, if there is one.
    fn save(&mut self) -> std::result::Result<(), Error> {
        match &mut self.store {
            Some(store) => self
                .ledger
                .save_to(store.as_mut())
                .map_err(|e| Error::io(Operation::SaveLedger, e)),
            None => {
                self.ledger.forget_unsaved();
                Ok(())
            }
        }
    }

    /// Applies a plan: new services that may belong to someone else first
    /// (claimed in the ledger, saved ahead), in rounds each followed by the
    /// real servers of its services, then everything else pipelined
    /// (deleted services released in the ledger ahead of it), then the
    /// retries of what the kernel contradicted.
    fn execute(
        &mut self,
        kernel: &mut impl Kernel,
        desired: &DesiredState,
        plan: &mut Plan,
        report: &mut SyncReport,
    ) -> Result<()> {
        report.planned = plan.counts;
        report.services.unchanged = plan.counts.services.unchanged;
        report.destinations.unchanged = plan.counts.destinations.unchanged;
        report.draining = plan.counts.draining;
        let retry = self.write_plan(kernel, desired, plan, report, Pass::First)?;
        if !retry.is_empty() {
            self.heal(kernel, desired, retry, report);
        }
        if !self.flows.is_empty() {
            report.conntrack = Some(self.flows.run(|filters| kernel.forget_flows(filters)));
        }
        let saved = self.save();
        self.ledger.shrink();
        if let Err(e) = saved {
            err_or_report(report, e)?;
        }
        Ok(())
    }

    /// Writes a plan's claims in rounds, each followed by the real servers
    /// of its services, then the rest; returns the services to
    /// re-read and retry. `Err` only when the save ahead of the writes
    /// failed before anything of the sync was written.
    fn write_plan(
        &mut self,
        kernel: &mut impl Kernel,
        desired: &DesiredState,
        plan: &mut Plan,
        report: &mut SyncReport,
        pass: Pass,
    ) -> Result<Vec<ServiceKey>> {
        // Planned apart from the rest (`Order::ClaimsApart`).
        let claims = std::mem::take(&mut plan.claims);
        let rest = std::mem::take(&mut plan.writes);
        let fills = std::mem::take(&mut plan.fills);
        // Found at weight 0 and not desired: draining from this sync on, if
        // not already (after a restart, or quiesced by a health checker
        // before it left the desired state).
        for (key, addr) in plan.waiting.drain(..) {
            self.drains.start(key, addr, self.now, false);
        }
        let services = plan.counts.services;
        let size = self.options.part_size.get();
        // The claims go in rounds (see `CLAIMS_PER_ROUND`), each recorded
        // ahead of its own send; the first with the plan's releases.
        let rounds = if claims.is_empty() {
            Vec::new()
        } else {
            // Every add that succeeds is remembered: room for them all at
            // once, before the answers come in.
            self.memory.reserve(claims.len());
            in_rounds(claims, desired, size, self.claims_per_round)
        };
        // A plan that touches real servers only needs no save ahead of it:
        // the ledger's changes (services seen gone) are saved after it.
        if services.added + services.updated + services.deleted > 0
            && !self.record_ahead(rounds.first().map_or(&[], |r| &r[..]), &rest, report)?
        {
            return Ok(Vec::new());
        }
        let mut w = Writing {
            ends: std::mem::take(&mut plan.drain_ends),
            pass,
            broken: HashSet::default(),
            withheld: HashSet::default(),
            retry: Vec::new(),
        };
        if !rounds.is_empty() && !self.write_claims(kernel, desired, rounds, &rest, report, &mut w)
        {
            return Ok(sorted(w.retry));
        }
        if fills.is_empty() && w.withheld.is_empty() && rest.len() <= size {
            // Nothing to write out of the desired state or to leave out,
            // and one part (every sync of a few changes): sent as planned.
            let applied = self.apply(kernel, desired, &rest, &w.ends, report, pass, &mut w.broken);
            w.retry.extend(applied.retry);
        } else {
            let sent = self.write_parts(kernel, desired, rest, fills, report, &mut w);
            w.retry.extend(sent.retry);
        }
        Ok(sorted(w.retry))
    }

    /// Sends the claims in `rounds` (the first recorded in the ledger
    /// already), each in a part with the real servers of the round answered
    /// before it, and the last round's real servers after them; each later
    /// round is recorded ahead of its send, in the save that records what
    /// the round before settled. `false` when the socket failed: nothing
    /// more is to be sent.
    fn write_claims(
        &mut self,
        kernel: &mut impl Kernel,
        desired: &DesiredState,
        rounds: Vec<Vec<Write>>,
        rest: &[Write],
        report: &mut SyncReport,
        w: &mut Writing,
    ) -> bool {
        let mut rounds = rounds.into_iter();
        let mut next = rounds.next().unwrap_or_default();
        // The real servers of the round answered last.
        let mut answered: Vec<Fill> = Vec::new();
        while !next.is_empty() || !answered.is_empty() {
            let round = std::mem::take(&mut next);
            let keys: Vec<ServiceKey> = round.iter().map(Write::key).collect();
            let filled = std::mem::take(&mut answered);
            let sent = self.write_parts(kernel, desired, round, filled, report, w);
            w.retry.extend(sent.retry);
            if !sent.socket_failed {
                next = rounds.next().unwrap_or_default();
            }
            if !keys.is_empty() || !next.is_empty() {
                // What this round's answers settled, and the next round's
                // claims ahead of it, in one save; the ledger's room for
                // the claims settled given back first, so that a store
                // copying the ledger copies no empty room.
                self.ledger.reserve_claims(next.len());
                for op in &next {
                    if let Write::AddService(vs) = op {
                        self.ledger.claim(vs);
                    }
                }
                self.ledger.shrink();
                if let Err(e) = self.save() {
                    // Not sent without its save ahead: the next round and
                    // those after it wait for the next sync.
                    for op in std::mem::take(&mut next) {
                        self.ledger.withdraw(&op.key());
                    }
                    rounds = Vec::new().into_iter();
                    report.after_writes.push(e);
                }
            }
            if !sent.withheld.is_empty() {
                let held: HashSet<ServiceKey, KeyHashing> = sent.withheld.iter().copied().collect();
                report.withheld += rest.iter().filter(|op| held.contains(&op.key())).count();
                report.withheld += (held.iter())
                    .filter_map(|k| desired.get(k))
                    .map(|ds| ds.destinations().len())
                    .sum::<usize>();
                w.withheld.extend(held);
            }
            self.report_refused(kernel, sent.refused, report);
            if sent.socket_failed {
                // Whether the unanswered adds happened is unknown: they stay
                // claimed, and the next sync reads them. The later rounds
                // were never claimed nor sent.
                return false;
            }
            answered = keys.into_iter().map(|key| Fill { at: 0, key }).collect();
        }
        true
    }

    /// Sends `writes` with `fills` written out where they stand, in parts
    /// each made just before it is sent and dropped once sent (while memory
    /// grows by what it did), leaving out the services `w.withheld`; what
    /// the parts' answers ask of the caller, together. Stops when the socket
    /// failed.
    fn write_parts(
        &mut self,
        kernel: &mut impl Kernel,
        desired: &DesiredState,
        writes: Vec<Write>,
        fills: Vec<Fill>,
        report: &mut SyncReport,
        w: &mut Writing,
    ) -> Applied {
        let size = self.options.part_size.get();
        let mut sent = Applied::default();
        for part in Parts::new(writes, fills, desired, &w.withheld, size) {
            let applied = self.apply(
                kernel,
                desired,
                &part,
                &w.ends,
                report,
                w.pass,
                &mut w.broken,
            );
            sent.retry.extend(applied.retry);
            sent.refused.extend(applied.refused);
            sent.withheld.extend(applied.withheld);
            if applied.socket_failed {
                sent.socket_failed = true;
                break;
            }
        }
        sent
    }

    /// Records the plan's claims and the releases of its service deletes in
    /// the ledger and saves it, with every change not saved yet (adds
    /// settled by an earlier sync whose save failed, before their services
    /// are updated), ahead of the writes. `Ok(false)`: the save failed after
    /// the sync had written (the error is in the report), so this plan is
    /// not sent; `Err`: it failed before anything was written.
    fn record_ahead(
        &mut self,
        claims: &[Write],
        rest: &[Write],
        report: &mut SyncReport,
    ) -> Result<bool> {
        self.ledger.reserve_claims(claims.len());
        for op in claims {
            if let Write::AddService(vs) = op {
                self.ledger.claim(vs);
            }
        }
        // Service deletes come last in a plan.
        let deletes = rest.iter().rev().map_while(|op| match op {
            Write::DeleteService(key) => Some(key),
            _ => None,
        });
        for key in deletes {
            if let Some(m) = self.memory.get(key) {
                self.ledger.release(&m.service);
            }
        }
        let Err(e) = self.save() else {
            return Ok(true);
        };
        // Nothing of this plan is sent: what was recorded ahead of it is
        // taken back, so the ledger says what the kernel has.
        for op in claims.iter().chain(rest) {
            match op {
                Write::AddService(vs) => self.ledger.withdraw(&vs.key),
                Write::DeleteService(key) => self.ledger.withdraw(key),
                _ => {}
            }
        }
        err_or_report(report, e)?;
        Ok(false)
    }

    /// Sends `ops` and records every outcome in memory, the ledger, the
    /// drains and the report (`ends`: the drains the plan ends, and why).
    /// `broken` collects the services whose creation or update failed for
    /// good, across the batches of one sync.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        kernel: &mut impl Kernel,
        desired: &DesiredState,
        ops: &[Write],
        ends: &HashMap<(ServiceKey, SocketAddr), DrainEnd>,
        report: &mut SyncReport,
        pass: Pass,
        broken: &mut HashSet<ServiceKey, KeyHashing>,
    ) -> Applied {
        let mut applied = Applied::default();
        if ops.is_empty() {
            return applied;
        }
        let memory = &mut self.memory;
        let ledger = &mut self.ledger;
        let drains = &mut self.drains;
        let now = self.now;
        let services = &mut report.services;
        let dests = &mut report.destinations;
        let ended_at_deadline = &mut report.drains_ended_at_deadline;
        let ended_idle = &mut report.drains_ended_idle;
        let flows = &mut self.flows;
        let rolling = &mut self.rolling;
        let verified_in_full = &mut report.verified_in_full;
        let cleanup = self.options.conntrack_cleanup;
        let mut answered = 0;
        let mut failed = Vec::new();
        let mut recorder = Recorder::default();
        let outcome = kernel.write(
            ops,
            self.options.mode == BatchMode::OneByOne,
            |index, result| {
                answered += 1;
                match (ops.get(index), result) {
                    (Some(Write::AddDestination(..)), Ok(())) => {
                        // Memory is all an add of a real server changes.
                        recorder.acknowledged(memory, ledger, ops, index, desired);
                        dests.added += 1;
                    }
                    (Some(op), Ok(())) => {
                        recorder.acknowledged(memory, ledger, ops, index, desired);
                        // Acknowledged deletes of real servers and services
                        // are known here, and only here.
                        time_drain(drains, op, desired, now);
                        if let Write::DeleteDestination(k, a) = op {
                            match ends.get(&(*k, *a)) {
                                Some(DrainEnd::Deadline) => ended_at_deadline.push((*k, *a)),
                                Some(DrainEnd::Idle) => *ended_idle += 1,
                                None => {}
                            }
                        }
                        if cleanup && let Some(filter) = flows::selection(op) {
                            flows.push(filter);
                        }
                        match op {
                            Write::AddService(vs) => {
                                services.added += 1;
                                // Made by this sync: what it wrote is all
                                // it has. Counted in the report once, by
                                // the first pass.
                                rolling.verified(vs.key);
                                if pass == Pass::First {
                                    *verified_in_full += 1;
                                }
                            }
                            Write::UpdateService(_) => services.updated += 1,
                            Write::DeleteService(_) => services.deleted += 1,
                            Write::AddDestination(..) => dests.added += 1,
                            Write::UpdateDestination(..) => dests.updated += 1,
                            Write::DeleteDestination(..) => dests.deleted += 1,
                        }
                    }
                    (_, Err(e)) => failed.push((index, e)),
                    (None, Ok(())) => {}
                }
            },
        );
        recorder.finish(&mut self.memory, ops, desired);
        report.writes_sent += answered;
        if let Err(error) = outcome {
            if error.operation() != Some(&Operation::OpenSyncSocket) {
                // The rest of the batch is unaccounted for.
                self.known = false;
            }
            applied.socket_failed = true;
            // Adds not answered stay claimed: their real servers are not
            // sent, and the next sync reads them.
            for op in ops.iter().skip(answered) {
                if let Write::AddService(vs) = op
                    && matches!(self.ledger.get(&vs.key), Some(Ownership::Claiming(_)))
                {
                    applied.withheld.push(vs.key);
                    self.stale.insert(vs.key);
                }
            }
            report.aborted.get_or_insert(error);
        }
        // Services whose creation or update failed for a reason a retry
        // cannot fix: their real-server failures follow from it.
        broken.extend(failed.iter().filter_map(|(i, e)| match ops.get(*i) {
            Some(Write::AddService(vs) | Write::UpdateService(vs)) if !healable(e) => Some(vs.key),
            _ => None,
        }));
        let mut retry: HashSet<ServiceKey, KeyHashing> = HashSet::default();
        for (index, error) in failed {
            let Some(op) = ops.get(index) else {
                // Every answer names one of `ops`.
                continue;
            };
            let key = op.key();
            match op {
                Write::AddService(_)
                    if matches!(self.ledger.get(&key), Some(Ownership::Claiming(_))) =>
                {
                    applied.withheld.push(key);
                    match self.ledger.settle_claim(&key, Err(&error)) {
                        // Someone else's service: not ours to change.
                        ClaimOutcome::Exists => applied.refused.push(key),
                        // Not created: nothing to own.
                        ClaimOutcome::Refused | ClaimOutcome::Created => {
                            report.failed.push(SyncFailure {
                                write: op.clone(),
                                error,
                            });
                        }
                        // Whether this syncer created it is unknown: it
                        // stays claimed, its real servers are not sent, and
                        // the next sync reads it and settles the claim.
                        ClaimOutcome::Unknown => {
                            self.stale.insert(key);
                            report.failed.push(SyncFailure {
                                write: op.clone(),
                                error,
                            });
                        }
                    }
                    continue;
                }
                Write::DeleteService(_) => self.ledger.settle_release(&key, Err(&error)),
                _ => {}
            }
            self.stale.insert(key);
            let failure = SyncFailure {
                write: op.clone(),
                error,
            };
            if pass == Pass::First && healable(&failure.error) && !broken.contains(&key) {
                retry.insert(key);
                report.retried.push(failure);
            } else {
                report.failed.push(failure);
            }
        }
        applied.retry = retry.into_iter().collect();
        applied
    }

    /// Re-reads the services whose operations the kernel contradicted and
    /// writes a second plan for them alone. Runs after writes went out, so
    /// a failed read goes to the report (those services are stale and read
    /// by the next sync) instead of failing the sync.
    fn heal(
        &mut self,
        kernel: &mut impl Kernel,
        desired: &DesiredState,
        keys: Vec<ServiceKey>,
        report: &mut SyncReport,
    ) {
        let found = match kernel.lookup(&keys) {
            Ok(found) => found,
            Err(e) => {
                report.after_writes.push(e);
                return;
            }
        };
        report.reads_sent += keys.len();
        let conflicts_before = report.conflicts.len();
        for key in &keys {
            self.stale.remove(key);
        }
        let mut reads = Vec::new();
        // Read whole again, whatever memory says (recorded as verified,
        // not counted again in the report: read after the plan).
        self.settle_found(&keys, found, desired, Verify::Full, report, &mut reads);
        if let Err(e) = self.read_into_memory(kernel, reads, report) {
            report.after_writes.push(e);
        }
        // Services read again whole, and not someone else's after all.
        let keys: Vec<ServiceKey> = without_conflicts(&keys, &report.conflicts[conflicts_before..])
            .iter()
            .filter(|k| !self.stale.contains(k))
            .copied()
            .collect();
        let mut plan = plan::plan_services_ordered(
            desired,
            &self.memory,
            &keys,
            &self.options.scope,
            self.ledger.owned(),
            self.options.plan,
            Order::ClaimsApart,
            DrainsAt::new(&self.drains, self.now),
        );
        // What the first pass counted as unchanged stays so; drains follow
        // the second plan.
        report.draining += plan.counts.draining;
        // Writes went out already: a failed save ahead is in the report.
        let _ = self.write_plan(kernel, desired, &mut plan, report, Pass::Retry);
    }

    /// Records desired services the kernel refused to add because they
    /// exist, with what is there now (looked up; `None` if that fails or
    /// the service is gone again).
    fn report_refused(
        &self,
        kernel: &mut impl Kernel,
        refused: Vec<ServiceKey>,
        report: &mut SyncReport,
    ) {
        if refused.is_empty() {
            return;
        }
        let found = kernel
            .lookup(&refused)
            .unwrap_or_else(|_| refused.iter().map(|_| None).collect());
        report.reads_sent += refused.len();
        report.conflicts.extend(
            refused
                .into_iter()
                .zip(found)
                .map(|(key, found)| SyncConflict {
                    key,
                    found,
                    reason: ConflictReason::AddRefused,
                }),
        );
    }

    /// Whether the remembered real servers of `key` (`m`, its entry in
    /// memory) can stand for the kernel's, given the service the kernel
    /// reported (`vs`): not under `Verify::Full`, not in a rolling slice,
    /// not stale, the service unchanged, and no counts needed.
    fn trusts(
        &self,
        key: &ServiceKey,
        m: &ObservedService,
        vs: &VirtualServer,
        desired: &DesiredState,
        verify: Verify,
    ) -> bool {
        verify != Verify::Full
            && !self.rolling.in_slice(key)
            && !self.stale.contains(key)
            && m.service == *vs
            && !self.needs_read(desired, m)
    }

    /// Whether the plan needs this remembered service's real servers read
    /// afresh: graceful termination with real servers that are not desired
    /// (their connection counts are needed: remembered ones are as old as
    /// the read that got them, and a real server seen idle then may be busy
    /// now), or kept weights with a real server to update (the kernel's
    /// weight is needed, a health checker may have changed it since).
    fn needs_read(&self, desired: &DesiredState, s: &ObservedService) -> bool {
        let options = self.options.plan;
        if !options.graceful_termination && !options.keep_weights {
            return false;
        }
        let Some(ds) = desired.get(&s.service.key) else {
            return false; // the whole service goes
        };
        let want = ds.destinations();
        s.destinations().any(
            |d| match want.binary_search_by_key(&d.server.addr, |rs| rs.addr) {
                Err(_) => options.graceful_termination,
                Ok(i) => {
                    options.keep_weights
                        && RealServer {
                            weight: d.server.weight,
                            ..want[i]
                        } != d.server
                }
            },
        )
    }

    /// Brings `memory` up to date as `verify` asks, settling the ledger's
    /// claims and releases against what the kernel shows.
    fn observe(
        &mut self,
        kernel: &mut impl Kernel,
        desired: &DesiredState,
        verify: Verify,
        report: &mut SyncReport,
    ) -> Result<()> {
        let verify = if self.known { verify } else { Verify::Full };
        report.verified = Some(verify);
        if verify == Verify::None && self.stale.is_empty() {
            let reads: Vec<Read> = self
                .memory
                .services()
                .filter(|s| self.needs_read(desired, s))
                .map(|s| (s.service.key, Shown::Nothing))
                .collect();
            return self.read_into_memory(kernel, reads, report).map(drop);
        }
        if verify.check() == Verify::Services && self.looks_up() {
            // Every managed service is remembered (or stale): look each up.
            let mut keys: Vec<ServiceKey> = self.memory.keys().copied().collect();
            keys.extend(self.stale.iter().filter(|k| !self.memory.contains(k)));
            // Every stale service is among them: what stays stale after
            // this failed to be read.
            return self.observe_keys(kernel, desired, &keys, verify, report);
        }
        // A rolling sync checks as `Services` does; `trusts` reads its slice.
        let verify = verify.check();
        let (remembered, recorded) = (self.memory.len(), self.ledger.len());
        let (mut remembered_listed, mut recorded_listed) = (0, 0);
        let mut listed =
            HashSet::with_capacity_and_hasher(remembered.max(recorded), KeyHashing::default());
        // A full check reads every service: room for them at once, not by
        // doubling (a third of it spare at 50,000 services).
        let mut reads = Vec::with_capacity(if verify == Verify::Full {
            remembered
        } else {
            0
        });
        // Each service is settled as it is read, while the kernel builds the
        // next part of the dump; a dump that fails part way leaves only what
        // the services read before it showed (ownership settled, conflicts
        // seen), and the sync ends there.
        kernel.services(remembered.max(recorded), |vs| {
            let key = vs.key;
            // Listed once each (the dump's repeats are dropped).
            if !listed.insert(key) {
                return;
            }
            let admission = self.admit(vs, desired, report);
            recorded_listed += usize::from(admission.recorded);
            let Some((vs, mine)) = admission.managed else {
                remembered_listed += usize::from(admission.forgotten);
                return;
            };
            let m = self.memory.get(&key);
            remembered_listed += usize::from(m.is_some());
            match m {
                Some(m) if self.trusts(&key, m, &vs, desired, verify) => {
                    settle(&mut self.settled, mine, desired, m);
                }
                m => reads.push(read_whole(key, vs, m)),
            }
        })?;
        report.reads_sent += 1;
        // A multi-part service dump is not a snapshot: the kernel resumes it
        // by position in a table shared by every namespace, so changes in
        // another namespace can make it skip services of this one. Services
        // remembered or recorded in the ledger but not listed are looked up
        // before they count as gone. When the dump listed every one of them
        // (the usual case), there are none.
        if remembered_listed < remembered || recorded_listed < recorded {
            let mut unlisted: Vec<ServiceKey> = self
                .memory
                .keys()
                .chain(self.ledger.iter().map(|(k, _)| k))
                .filter(|k| !listed.contains(k))
                .copied()
                .collect();
            unlisted.sort_unstable();
            unlisted.dedup();
            let found = kernel.lookup(&unlisted)?;
            report.reads_sent += unlisted.len();
            self.settle_found(&unlisted, found, desired, verify, report, &mut reads);
        }
        // Services whose read fails here are marked stale again.
        self.stale.clear();
        report.verified_in_full += self.read_into_memory(kernel, reads, report)?;
        self.known = true;
        Ok(())
    }
}

/// An error of the sync's own steps: `Err` while nothing of the sync was
/// written, otherwise kept in [`SyncReport::after_writes`] (a sync that
/// wrote always returns its report).
fn err_or_report(report: &mut SyncReport, e: Error) -> Result<()> {
    if report.writes_sent == 0 {
        return Err(e);
    }
    report.after_writes.push(e);
    Ok(())
}

/// A service whose real servers are to be read: its key, and what the
/// kernel showed of the service itself.
type Read = (ServiceKey, Shown);

/// What a read of real servers knows of their service.
#[derive(Debug)]
enum Shown {
    /// Not read: the remembered service stands, its real servers alone are
    /// read (for their counts or weights).
    Nothing,
    /// Read whole with these settings; `None`: the settings memory has.
    /// Boxed, and only when they differ: a `Verify::Full` resync of 50,000
    /// services would otherwise hold 50,000 copies of what memory has.
    Service(Option<Box<VirtualServer>>),
}

/// The read of a service the kernel showed as `vs`, remembered as `m`.
fn read_whole(key: ServiceKey, vs: VirtualServer, m: Option<&ObservedService>) -> Read {
    let differs = m.is_none_or(|m| m.service != vs);
    (key, Shown::Service(differs.then(|| Box::new(vs))))
}

/// What [`Core::admit`] made of a service the kernel showed.
struct Admission {
    /// Managed: its settings, and whether the syncer owns it.
    managed: Option<(VirtualServer, bool)>,
    /// Whether the ledger had the key (owned, claimed or being released).
    recorded: bool,
    /// Not managed, and memory had it: it has left memory.
    forgotten: bool,
}

/// Records a service whose remembered state stands for the kernel's (`m`,
/// trusted by the check of a full-state sync) as settled when it is owned
/// (`mine`) and memory has it exactly as desired: nothing to plan for it,
/// and nothing for [`Core::own_managed`] to do. Nothing when the sync
/// keeps no record (`settled` empty).
fn settle(settled: &mut [bool], mine: bool, desired: &DesiredState, m: &ObservedService) {
    if settled.is_empty() || !mine {
        return;
    }
    let Some(i) = desired.position(&m.service.key) else {
        return;
    };
    let Some(ds) = desired.services().get(i) else {
        return;
    };
    if *ds.service() == m.service
        && m.has_exactly(ds.destinations())
        && let Some(s) = settled.get_mut(i)
    {
        *s = true;
    }
}

/// `keys` without the conflicting ones (`keys` itself when there are none).
fn without_conflicts<'a>(
    keys: &'a [ServiceKey],
    conflicts: &[SyncConflict],
) -> Cow<'a, [ServiceKey]> {
    if conflicts.is_empty() {
        return Cow::Borrowed(keys);
    }
    let foreign: HashSet<ServiceKey> = conflicts.iter().map(|c| c.key).collect();
    Cow::Owned(
        keys.iter()
            .filter(|k| !foreign.contains(k))
            .copied()
            .collect(),
    )
}

/// What became of a batch besides what is recorded in memory, the ledger
/// and the report.
#[derive(Debug, Default)]
struct Applied {
    /// Services to re-read and retry (when retrying was allowed).
    retry: Vec<ServiceKey>,
    /// Services the kernel refused to add because they exist: conflicts.
    refused: Vec<ServiceKey>,
    /// Claimed services whose add was not acknowledged: their real servers
    /// must not be sent.
    withheld: Vec<ServiceKey>,
    /// The socket failed: outcomes of operations not answered are unknown.
    socket_failed: bool,
}

/// What the writes of one plan share.
#[derive(Debug)]
struct Writing {
    /// The drains the plan ends, and why.
    ends: HashMap<(ServiceKey, SocketAddr), DrainEnd>,
    /// Which pass of the sync the plan is.
    pass: Pass,
    /// Services whose creation or update failed for good.
    broken: HashSet<ServiceKey, KeyHashing>,
    /// Claimed services whose add was not acknowledged: none of their real
    /// servers is sent.
    withheld: HashSet<ServiceKey, KeyHashing>,
    /// Services to re-read and retry.
    retry: Vec<ServiceKey>,
}

/// The most operations [`Core::write_plan`] sends in one part unless told
/// otherwise (about 14 MiB of them). A cold sync's real-server adds are
/// made a part at a time out of the desired state ([`Parts`]), so that the
/// plan is never held whole while memory fills with what it did (at
/// 50,000 x 10 it would be 550,000 operations, 60 MB).
const DEFAULT_PART_SIZE: NonZeroUsize = NonZeroUsize::new(1 << 14).unwrap();

/// How many claims a sync sends before their real servers, at most. Before
/// 7.1 the kernel keeps every service in one hash of 256 buckets, and finds
/// the service of each real-server add by walking its bucket from the
/// newest service on: after all 50,000 adds of a cold sync that walk passes
/// about 100 services on average, after a round of 2,048 about 4. A round
/// also fits one part with the real servers of the round before it (see
/// `in_rounds`), so that the rounds take no more parts, and the ledger holds
/// the claims of one round at a time: each round is recorded ahead in the
/// save that records what the round before settled.
const CLAIMS_PER_ROUND: usize = 2048;

/// `claims` in rounds, in order, each its own list (given back once sent):
/// at most `max` claims a round, and with the real servers of their
/// services at most `size` operations (a claim alone may have more).
fn in_rounds(
    claims: Vec<Write>,
    desired: &DesiredState,
    size: usize,
    max: usize,
) -> Vec<Vec<Write>> {
    let mut rounds = Vec::new();
    let mut round: Vec<Write> = Vec::new();
    let mut ops: usize = 0;
    for claim in claims {
        let dests = desired
            .get(&claim.key())
            .map_or(0, |ds| ds.destinations().len());
        let n = dests.saturating_add(1);
        if !round.is_empty() && (round.len() >= max || ops.saturating_add(n) > size) {
            round.shrink_to_fit();
            rounds.push(std::mem::take(&mut round));
            ops = 0;
        }
        ops += n;
        round.push(claim);
    }
    if !round.is_empty() {
        round.shrink_to_fit();
        rounds.push(round);
    }
    rounds
}

/// `keys` sorted, each once.
fn sorted(mut keys: Vec<ServiceKey>) -> Vec<ServiceKey> {
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Failures that mean "the kernel's state differs from what was planned":
/// re-reading the service and planning again fixes them.
fn healable(e: &Error) -> bool {
    e.is_exists() || e.is_not_found() || matches!(e, Error::Lost { .. })
}

/// Records what an acknowledged operation does to the drains: a real server
/// set to weight 0 that is not desired starts draining (the syncer set the
/// weight), and a deleted real server or service ends its drains.
fn time_drain(drains: &mut Drains, op: &Write, desired: &DesiredState, now: Instant) {
    match op {
        Write::UpdateDestination(k, rs) if rs.weight == 0 => {
            let desired_here = desired.get(k).is_some_and(|ds| {
                ds.destinations()
                    .binary_search_by_key(&rs.addr, |d| d.addr)
                    .is_ok()
            });
            if !desired_here {
                drains.start(*k, rs.addr, now, true);
            }
        }
        Write::DeleteDestination(k, addr) => drains.forget(k, addr),
        Write::DeleteService(k) => drains.forget_service(k),
        _ => {}
    }
}

/// The room a service's list of real servers gets in memory: its desired
/// real servers. Made with the first one added: grown one add at a time, a
/// list of ten would take room for sixteen. Made no sooner: a cold sync
/// holds the real servers still to send meanwhile.
fn room_for(desired: &DesiredState, key: &ServiceKey) -> usize {
    desired.get(key).map_or(0, |ds| ds.destinations().len())
}

/// Records acknowledged operations in memory and the ledger in the order
/// they are answered. Adds of real servers to one service answered one
/// after the other (most of a cold sync's answers) are recorded together,
/// with one lookup of the service instead of one each; any other answer
/// records them first.
#[derive(Debug, Default)]
struct Recorder {
    /// The adds answered last, not recorded yet.
    run: Option<AddRun>,
}

/// Adds of real servers to `key`, answered as `ops[start..end]` and not
/// recorded yet.
#[derive(Debug)]
struct AddRun {
    key: ServiceKey,
    start: usize,
    end: usize,
}

impl Recorder {
    /// Records that the kernel acknowledged `ops[index]`.
    fn acknowledged(
        &mut self,
        memory: &mut Observed,
        ledger: &mut Ledger,
        ops: &[Write],
        index: usize,
        desired: &DesiredState,
    ) {
        match ops.get(index) {
            Some(Write::AddDestination(key, _)) => {
                if let Some(r) = &mut self.run
                    && r.key == *key
                    && r.end == index
                {
                    r.end += 1;
                    return;
                }
                self.finish(memory, ops, desired);
                self.run = Some(AddRun {
                    key: *key,
                    start: index,
                    end: index + 1,
                });
            }
            Some(op) => {
                self.finish(memory, ops, desired);
                remember(memory, ledger, op, desired);
            }
            None => {}
        }
    }

    /// Records the adds held back: before memory is read.
    fn finish(&mut self, memory: &mut Observed, ops: &[Write], desired: &DesiredState) {
        let Some(run) = self.run.take() else { return };
        let held = ops.get(run.start..run.end).unwrap_or_default();
        let servers = held.iter().filter_map(|op| match op {
            Write::AddDestination(_, rs) => Some(rs),
            _ => None,
        });
        memory.add_destinations(&run.key, servers, || room_for(desired, &run.key));
    }
}

/// Records an acknowledged operation in memory and the ledger.
fn remember(memory: &mut Observed, ledger: &mut Ledger, op: &Write, desired: &DesiredState) {
    memory.apply_with_room(op, || room_for(desired, &op.key()));
    match op {
        // Created by this syncer: its own (a claim settled).
        Write::AddService(vs) => ledger.insert_owned(vs.key),
        Write::DeleteService(k) => ledger.settle_release(k, Ok(())),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RealServer, VirtualServer};
    use proptest::prelude::*;

    proptest! {
        /// Rounds hold every claim once, in order; none is empty, none has
        /// more than `max` claims, and none more than `size` operations with
        /// the real servers of its services unless it is one claim.
        #[test]
        fn rounds_hold_every_claim_once_in_order_within_their_bounds(
            dests in prop::collection::vec(0usize..12, 0..40),
            size in 1usize..40,
            max in 1usize..8,
        ) {
            let mut desired = DesiredState::new();
            let mut claims = Vec::new();
            for (i, &n) in dests.iter().enumerate() {
                let addr = std::net::SocketAddr::from(([10, 96, 0, i as u8 + 1], 80));
                let vs = VirtualServer::new(ServiceKey::tcp(addr));
                let servers = (0..n).map(|j| {
                    RealServer::new(std::net::SocketAddr::from(([10, 244, 0, j as u8 + 1], 80)))
                });
                desired.insert(vs.clone(), servers).unwrap();
                claims.push(Write::AddService(vs));
            }
            let rounds = in_rounds(claims.clone(), &desired, size, max);
            prop_assert_eq!(rounds.concat(), claims);
            let ops = |c: &Write| 1 + desired.get(&c.key()).unwrap().destinations().len();
            for (i, round) in rounds.iter().enumerate() {
                prop_assert!(!round.is_empty() && round.len() <= max);
                let total: usize = round.iter().map(ops).sum();
                prop_assert!(total <= size || round.len() == 1, "{} ops in {:?}", total, round);
                // As full as allowed: the next round's first claim did not fit.
                if let Some(next) = rounds.get(i + 1) {
                    prop_assert!(round.len() == max || total + ops(&next[0]) > size);
                }
            }
        }

        /// Answers recorded by a `Recorder`, adds of real servers in runs,
        /// leave memory and the ledger as recording each answer in turn
        /// does, whatever the operations, which of them the kernel
        /// acknowledged and the order of the answers.
        #[test]
        fn recorded_runs_of_adds_leave_what_one_by_one_leaves(
            ops in prop::collection::vec((0u8..6, 0u8..3, 0u8..4, 0u32..3), 0..40),
            acked in prop::collection::vec(prop::bool::weighted(0.8), 40),
            in_order in prop::bool::ANY,
            order in Just((0..40usize).collect::<Vec<_>>()).prop_shuffle(),
        ) {
            let key = |s: u8| ServiceKey::tcp(std::net::SocketAddr::from(([10, 96, 0, s + 1], 80)));
            let rs = |d: u8, w: u32| {
                RealServer::new(std::net::SocketAddr::from(([10, 244, 0, d + 1], 80))).with_weight(w)
            };
            let ops: Vec<Write> = ops
                .iter()
                .map(|&(what, s, d, w)| match what {
                    0 => Write::AddService(VirtualServer::new(key(s))),
                    1 => Write::DeleteService(key(s)),
                    2 => Write::UpdateDestination(key(s), rs(d, w)),
                    3 => Write::DeleteDestination(key(s), rs(d, w).addr),
                    // Adds, the most frequent, as in a cold sync.
                    _ => Write::AddDestination(key(s), rs(d, w)),
                })
                .collect();
            let mut desired = DesiredState::new();
            desired.insert(VirtualServer::new(key(0)), (0..3).map(|d| rs(d, 1))).unwrap();
            let mut start = Observed::new();
            start.apply(&Write::AddService(VirtualServer::new(key(1))));
            let answers: Vec<usize> = if in_order {
                (0..ops.len()).collect()
            } else {
                order.into_iter().filter(|&i| i < ops.len()).collect()
            };
            let answers = answers.into_iter().filter(|&i| acked[i]);

            let (mut want, mut want_ledger) = (start.clone(), Ledger::new());
            let (mut got, mut got_ledger) = (start, Ledger::new());
            let mut recorder = Recorder::default();
            for i in answers {
                remember(&mut want, &mut want_ledger, &ops[i], &desired);
                recorder.acknowledged(&mut got, &mut got_ledger, &ops, i, &desired);
            }
            recorder.finish(&mut got, &ops, &desired);
            prop_assert_eq!(got, want);
            prop_assert_eq!(got_ledger.owned(), want_ledger.owned());
        }
    }
}
