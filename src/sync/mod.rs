//! Bulk sync: make the kernel's IPVS table equal to a desired state, fast.
//!
//! A service proxy's core loop is "make IPVS equal to this set of services,
//! each with its real servers". This module splits that into:
//!
//! * [`DesiredState`] — the complete set of services the caller owns, each
//!   with its real servers, validated on insertion;
//! * [`Observed`] — the kernel's state as read, or as remembered from what
//!   was applied and acknowledged;
//! * [`plan()`] — pure code: the ordered [`Write`](crate::batch::Write)s (service adds
//!   and updates before their real servers, service deletes last) that turn
//!   the managed part of the observed state into the desired one, within a
//!   [`Scope`], with optional graceful termination, bounded drains and
//!   weights left to a health checker ([`PlanOptions`]);
//! * [`Syncer`] — reads (or trusts its memory, see [`Verify`]), plans (the
//!   whole desired state with [`Syncer::sync`], or only the services the
//!   desired state recorded as changed with [`Syncer::sync_changes`]),
//!   writes pipelined on a socket of its own, remembers what the kernel
//!   acknowledged, self-heals when the kernel disagrees, and reports every
//!   count and failure ([`SyncReport`]);
//! * [`Ledger`] — what the syncer owns and what it is about to create or
//!   delete, saved ahead of the writes through a [`LedgerStore`]
//!   ([`FileLedger`], or your own) so that a restarted agent owns exactly
//!   what it made, even after a crash mid-sync.
//!
//! # Scope
//!
//! A sync never touches a service outside its [`Scope`]: by default only the
//! services its [`Ledger`] says it created (or was told to
//! [`Syncer::adopt`]), so keepalived, Docker or another proxy can share the
//! namespace. A desired
//! service whose key is already taken by someone else's service is reported
//! as a [`SyncConflict`] and left alone, not taken over. [`Scope::Filter`]
//! adds a predicate (a service address range, a firewall-mark range) and
//! [`Scope::All`] claims the whole namespace.
//!
//! # Cost
//!
//! Reading every real server back costs about as much as writing them, so a
//! syncer remembers what it applied: [`Verify::Services`] checks the service
//! table (one dump, or a lookup per service in large tables) and trusts
//! remembered real servers, [`Verify::Full`]
//! reads everything and repairs any drift (run it on a schedule),
//! [`Verify::Rolling`] checks the service table and reads a slice of the
//! managed services in full on every sync, so that every one is read
//! within a number of syncs you choose (drift detection by the slice), and
//! [`Verify::None`] reads nothing. Measured figures, with how and on which
//! kernels they were taken, are in `docs/performance.md` in the repository.
//!
//! ```no_run
//! use ipvsctl::Handle;
//! use ipvsctl::model::{RealServer, Scheduler, ServiceKey, VirtualServer};
//! use ipvsctl::sync::{DesiredState, Scope, SyncOptions, Syncer, Verify};
//!
//! let handle = Handle::new()?;
//! let options = SyncOptions::default().with_scope(Scope::Owned);
//! let mut syncer = Syncer::with_options(&handle, options);
//! let mut desired = DesiredState::new();
//! for i in 0..100u8 {
//!     let key = ServiceKey::tcp(format!("10.96.0.{i}:80").parse().unwrap());
//!     let vs = VirtualServer::new(key).with_scheduler(Scheduler::RoundRobin);
//!     let rs = (1..=3u8).map(|j| RealServer::new(format!("10.244.{i}.{j}:8080").parse().unwrap()));
//!     desired.insert(vs, rs)?;
//! }
//! let report = syncer.sync(&desired, Verify::Services)?;
//! println!("{} services added, {} writes", report.services.added, report.writes_sent);
//! // Later: nothing changed, one service dump, no writes.
//! let report = syncer.sync(&desired, Verify::Services)?;
//! assert_eq!(report.writes_sent, 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod drain;
#[cfg(test)]
mod drain_tests;
mod flows;
mod kernel;
mod key_hash;
mod ledger;
mod ledger_file;
#[cfg(test)]
mod ownership_tests;
mod packed;
mod parts;
mod plan;
mod read;
mod rolling;
#[cfg(test)]
mod rolling_tests;
mod state;
mod syncer;
pub(crate) mod wire;

pub use drain::{Drain, Drains};
pub use flows::FlowCleanup;
pub use ledger::{ConflictReason, Ledger, LedgerStore, Ownership};
pub use ledger_file::{FileLedger, LedgerFileError};
pub use plan::{Counts, Plan, PlanCounts, PlanOptions, Scope, plan, plan_services};
pub use state::{
    DesiredError, DesiredService, DesiredState, Observed, ObservedDest, ObservedService,
};
pub use syncer::{
    ServiceCheck, SyncConflict, SyncFailure, SyncOptions, SyncReport, Syncer, Verify,
};
