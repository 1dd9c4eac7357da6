//! An async front for [`Handle`] and [`Syncer`] (feature `tokio`).
//!
//! Every netlink exchange blocks the calling thread: the kernel runs the
//! IPVS handler inside `send`, and the answer is read with a blocking
//! `recv`. An [`AsyncHandle`] (or [`AsyncSyncer`]) therefore owns one
//! dedicated worker thread that runs its operations one after the other; an
//! async caller gets a [`Reply`] future that resolves when the worker is
//! done, so the runtime's threads never block on the kernel.
//!
//! # Why a thread of its own, not `spawn_blocking`
//!
//! * **Order.** Operations run in the order they were called, because each
//!   call queues its operation at once (before the returned future is first
//!   polled). Two `spawn_blocking` calls race for the handle's lock, so an
//!   `add_service` and the `add_destination` issued right after it could
//!   reach the kernel the other way round.
//! * **No runtime needed.** Only `tokio::sync::oneshot` is used: the futures
//!   work on any executor, and a long sync (seconds at 10,000 services)
//!   never holds one of the runtime's blocking-pool threads.
//! * **One thread per handle** is what the kernel allows anyway: a handle
//!   serialises its exchanges on one socket.
//!
//! # Cancellation
//!
//! Dropping a [`Reply`] before its operation has started withdraws it: the
//! worker skips it and the kernel never sees it. Once started, an operation
//! runs to completion (a netlink request cannot be taken back) and its result
//! is dropped; for a [`AsyncSyncer::sync`] this means the syncer's memory
//! stays exactly what the kernel acknowledged, so the next sync is correct.
//! An [`AsyncSyncer::sync_changes`] dropped that way also drops the
//! [`DesiredState`] it was given.
//! Whether a dropped operation ran is therefore unknown to the caller, as
//! with any cancelled request; read the table back (or sync) to find out.
//!
//! # Panics
//!
//! A panic inside an operation (a caller's closure given to
//! [`AsyncHandle::run`], say) is caught on the worker, which stays usable,
//! and resumed in the task that awaits the [`Reply`], as if the call had
//! been made there.
//!
//! # Without the feature
//!
//! The blocking API works from async code as it is: put the handle in an
//! `Arc` and call it inside `tokio::task::spawn_blocking`, or give it a
//! thread of its own that receives work over a channel (what this module
//! does).
//!
//! ```no_run
//! # async fn example() -> ipvsctl::Result<()> {
//! use ipvsctl::asynchronous::AsyncHandle;
//! use ipvsctl::model::{RealServer, ServiceKey, VirtualServer};
//! use ipvsctl::{HandleOptions, NetNs};
//!
//! let ipvs = AsyncHandle::open(NetNs::Current, HandleOptions::new()).await?;
//! let web = ServiceKey::tcp("192.0.2.10:80".parse().unwrap());
//! // Both are queued now, in this order; awaited together.
//! let added = ipvs.add_service(VirtualServer::new(web));
//! let backend = ipvs.add_destination(web, RealServer::new("198.51.100.1:8080".parse().unwrap()));
//! added.await?;
//! backend.await?;
//! println!("{} services", ipvs.list_services().await?.len());
//! # Ok(())
//! # }
//! ```

mod worker;

use std::sync::Arc;

pub use worker::Reply;
use worker::Worker;

use crate::batch::{BatchMode, BatchReport, Write};
use crate::capabilities::Capabilities;
use crate::model::{
    DaemonRole, DestinationSnapshot, Info, RealServer, ServiceKey, ServiceSnapshot, SyncDaemon,
    Timeouts, VirtualServer,
};
use crate::sync::{DesiredState, Plan, SyncOptions, SyncReport, Syncer, Verify};
use crate::{Handle, HandleOptions, NetNs, Result};

/// A [`Handle`] whose operations run on a worker thread of its own and are
/// awaited (module docs: ordering, cancellation, panics).
///
/// Cloning is cheap and shares the worker, so clones' operations are
/// ordered with each other too. The worker ends when the last clone is
/// dropped, after finishing what was queued.
#[derive(Debug, Clone)]
pub struct AsyncHandle {
    handle: Arc<Handle>,
    worker: Arc<Worker<Arc<Handle>>>,
}

impl AsyncHandle {
    /// Opens a handle in `netns` with `options` (as [`Handle::open`]) on a
    /// new worker thread.
    ///
    /// The namespace is pinned on the worker thread: for [`NetNs::Current`]
    /// that is the namespace of the thread that called `open` (a new thread
    /// starts in its creator's namespace).
    pub async fn open(netns: NetNs, options: HandleOptions) -> Result<AsyncHandle> {
        let handle = Worker::once(move || Handle::open(&netns, &options).map(Arc::new))?.await?;
        AsyncHandle::from_handle(handle)
    }

    /// Wraps a handle that is already open; `handle` can still be used
    /// directly (blocking) from other threads.
    pub fn from_handle(handle: Arc<Handle>) -> Result<AsyncHandle> {
        let worker = Worker::spawn("ipvsctl-handle", Arc::clone(&handle))?;
        Ok(AsyncHandle {
            handle,
            worker: Arc::new(worker),
        })
    }

    /// The blocking handle underneath.
    pub fn handle(&self) -> &Arc<Handle> {
        &self.handle
    }

    /// Runs `f` with the handle on the worker, in order with the other
    /// operations: for anything this type has no method for.
    ///
    /// ```no_run
    /// # async fn example(ipvs: ipvsctl::asynchronous::AsyncHandle) -> ipvsctl::Result<()> {
    /// let family = ipvs.run(|h| Ok(h.family_id())).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn run<T, F>(&self, f: F) -> Reply<Result<T>>
    where
        T: Send + 'static,
        F: FnOnce(&Handle) -> Result<T> + Send + 'static,
    {
        self.worker.submit(move |h: &mut Arc<Handle>| f(h))
    }

    /// [`Handle::list_services`].
    pub fn list_services(&self) -> Reply<Result<Vec<ServiceSnapshot>>> {
        self.run(|h| h.list_services())
    }

    /// [`Handle::get_service`].
    pub fn get_service(&self, key: ServiceKey) -> Reply<Result<ServiceSnapshot>> {
        self.run(move |h| h.get_service(&key))
    }

    /// [`Handle::add_service`].
    pub fn add_service(&self, vs: VirtualServer) -> Reply<Result<()>> {
        self.run(move |h| h.add_service(&vs))
    }

    /// [`Handle::update_service`].
    pub fn update_service(&self, vs: VirtualServer) -> Reply<Result<()>> {
        self.run(move |h| h.update_service(&vs))
    }

    /// [`Handle::delete_service`].
    pub fn delete_service(&self, key: ServiceKey) -> Reply<Result<()>> {
        self.run(move |h| h.delete_service(&key))
    }

    /// [`Handle::list_destinations`].
    pub fn list_destinations(&self, key: ServiceKey) -> Reply<Result<Vec<DestinationSnapshot>>> {
        self.run(move |h| h.list_destinations(&key))
    }

    /// [`Handle::add_destination`].
    pub fn add_destination(&self, key: ServiceKey, rs: RealServer) -> Reply<Result<()>> {
        self.run(move |h| h.add_destination(&key, &rs))
    }

    /// [`Handle::update_destination`].
    pub fn update_destination(&self, key: ServiceKey, rs: RealServer) -> Reply<Result<()>> {
        self.run(move |h| h.update_destination(&key, &rs))
    }

    /// [`Handle::delete_destination`].
    pub fn delete_destination(
        &self,
        key: ServiceKey,
        addr: std::net::SocketAddr,
    ) -> Reply<Result<()>> {
        self.run(move |h| h.delete_destination(&key, addr))
    }

    /// [`Handle::apply_with`] in `mode`: the whole batch, pipelined, one
    /// report.
    pub fn apply(&self, ops: Vec<Write>, mode: BatchMode) -> Reply<BatchReport> {
        self.worker
            .submit(move |h: &mut Arc<Handle>| h.apply_with(ops, mode, |_, _| {}))
    }

    /// [`Handle::flush`].
    pub fn flush(&self) -> Reply<Result<()>> {
        self.run(|h| h.flush())
    }

    /// [`Handle::zero`].
    pub fn zero(&self, service: Option<ServiceKey>) -> Reply<Result<()>> {
        self.run(move |h| h.zero(service.as_ref()))
    }

    /// [`Handle::timeouts`].
    pub fn timeouts(&self) -> Reply<Result<Timeouts>> {
        self.run(|h| h.timeouts())
    }

    /// [`Handle::set_timeouts`].
    pub fn set_timeouts(&self, timeouts: Timeouts) -> Reply<Result<()>> {
        self.run(move |h| h.set_timeouts(&timeouts))
    }

    /// [`Handle::info`].
    pub fn info(&self) -> Reply<Result<Info>> {
        self.run(|h| h.info())
    }

    /// [`Handle::start_daemon`].
    pub fn start_daemon(&self, daemon: SyncDaemon) -> Reply<Result<()>> {
        self.run(move |h| h.start_daemon(&daemon))
    }

    /// [`Handle::stop_daemon`].
    pub fn stop_daemon(&self, role: DaemonRole) -> Reply<Result<()>> {
        self.run(move |h| h.stop_daemon(role))
    }

    /// [`Handle::list_daemons`].
    pub fn list_daemons(&self) -> Reply<Result<Vec<SyncDaemon>>> {
        self.run(|h| h.list_daemons())
    }

    /// [`Handle::capabilities`].
    pub fn capabilities(&self) -> Reply<Result<Capabilities>> {
        self.run(|h| h.capabilities())
    }
}

/// A [`Syncer`] on a worker thread of its own (module docs: ordering,
/// cancellation, panics): a sync of a large table takes seconds, and runs
/// there without holding a runtime thread or the [`AsyncHandle`]'s worker.
#[derive(Debug)]
pub struct AsyncSyncer {
    worker: Worker<Syncer<Arc<Handle>>>,
}

impl AsyncSyncer {
    /// A syncer on `handle`'s namespace and sockets ([`Syncer::with_options`]).
    pub fn new(handle: &AsyncHandle, options: SyncOptions) -> Result<AsyncSyncer> {
        AsyncSyncer::from_syncer(Syncer::with_options(Arc::clone(&handle.handle), options))
    }

    /// Moves an existing syncer, with its memory and ownership, onto a
    /// worker.
    pub fn from_syncer(syncer: Syncer<Arc<Handle>>) -> Result<AsyncSyncer> {
        Ok(AsyncSyncer {
            worker: Worker::spawn("ipvsctl-syncer", syncer)?,
        })
    }

    /// [`Syncer::sync`]. The state is shared, not copied: keep a clone of
    /// the `Arc` to build the next state from.
    pub fn sync(&self, desired: Arc<DesiredState>, verify: Verify) -> Reply<Result<SyncReport>> {
        self.with(move |s| s.sync(&desired, verify))
    }

    /// [`Syncer::sync_changes`]: syncs only the services `desired` recorded
    /// as changed since its last sync, on the worker, and hands the state
    /// back with the report, its record of changes emptied (or kept, when
    /// the sync returned `Err` before writing), ready for the next edits.
    ///
    /// The state is moved, not shared, because the sync empties its record
    /// of changes; nothing is copied either way. Await the reply to get the
    /// state back: a reply dropped unfinished drops the state with it (the
    /// syncer itself stays true to the kernel, see the module docs), so
    /// where a select or a timeout may drop it, run it in a task of its own
    /// (`tokio::spawn`) and await that.
    ///
    /// ```no_run
    /// # async fn example(syncer: ipvsctl::asynchronous::AsyncSyncer) -> Result<(), Box<dyn std::error::Error>> {
    /// use ipvsctl::model::{RealServer, ServiceKey, VirtualServer};
    /// use ipvsctl::sync::{DesiredState, Verify};
    /// let key = ServiceKey::tcp("10.96.0.1:80".parse()?);
    /// let mut desired = DesiredState::new();
    /// desired.insert(VirtualServer::new(key), [RealServer::new("10.244.0.1:8080".parse()?)])?;
    /// let (report, mut desired) = syncer.sync_changes(desired, Verify::Services).await;
    /// assert!(report?.is_ok());
    /// // An endpoint appeared: only its service is planned and written.
    /// desired.upsert_destinations(&key, [RealServer::new("10.244.0.2:8080".parse()?)])?;
    /// let (report, desired) = syncer.sync_changes(desired, Verify::None).await;
    /// assert_eq!(report?.writes_sent, 1);
    /// assert!(desired.changes().is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn sync_changes(
        &self,
        mut desired: DesiredState,
        verify: Verify,
    ) -> Reply<(Result<SyncReport>, DesiredState)> {
        self.with(move |s| {
            let report = s.sync_changes(&mut desired, verify);
            (report, desired)
        })
    }

    /// [`Syncer::plan`]: what a sync would do, without doing it.
    pub fn plan(&self, desired: Arc<DesiredState>, verify: Verify) -> Reply<Result<Plan>> {
        self.with(move |s| s.plan(&desired, verify))
    }

    /// [`Syncer::adopt`].
    pub fn adopt(&self, keys: Vec<ServiceKey>) -> Reply<()> {
        self.with(move |s| s.adopt(keys))
    }

    /// Runs `f` with the syncer on its worker, in order with the other
    /// operations: for its other methods ([`Syncer::forget`],
    /// [`Syncer::ledger`], [`Syncer::options_mut`],
    /// [`Syncer::set_drain_time`], [`Syncer::drains`], …).
    pub fn with<T, F>(&self, f: F) -> Reply<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Syncer<Arc<Handle>>) -> T + Send + 'static,
    {
        self.worker.submit(f)
    }
}

#[cfg(test)]
mod tests;
