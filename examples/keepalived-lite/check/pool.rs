//! A bounded pool running due checker attempts: N worker threads share one
//! due-time queue (a binary heap under a mutex, with a condvar), so 10,000
//! checkers need N threads, not 10,000. A worker sleeps until the earliest
//! due time (or a wakeup), takes that checker, runs its attempt, feeds the
//! result to its [`Machine`], puts it back with its next due time, and
//! sends what changed to the caller. A checker is in the queue or with one
//! worker, never both, so its attempts never overlap; a hung attempt holds
//! only its own worker, and only until its timeout.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::log::{Event, Label};
use super::machine::{Machine, Report, Transition};
use super::{Attempt, Cancel, run_attempt};
use crate::config::model::CheckerConf;

/// The caller's name for a checker (an index into its own tables).
pub type CheckerId = usize;

/// A checker to run.
#[derive(Debug, Clone)]
pub struct Job {
    /// Sent back with every report.
    pub id: CheckerId,
    /// What to check.
    pub conf: CheckerConf,
    /// How its log lines name it.
    pub label: Label,
}

/// A change of one checker, as sent to the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// The checker's state after the attempt.
    pub up: bool,
    /// Up/down transition, if any.
    pub transition: Option<Transition>,
    /// `misc_dynamic` weight change, if any (see [`Report::weight`]).
    pub weight: Option<Option<u32>>,
    /// The events keepalived logs here, as values...
    pub events: Vec<Event>,
    /// ...and as keepalived's text, in the same order.
    pub lines: Vec<String>,
}

/// What runs one attempt: [`run_attempt`] normally; tests put fakes here.
pub type Probe = Arc<dyn Fn(&CheckerConf, usize, &Cancel) -> Attempt + Send + Sync>;

struct Slot {
    job: Job,
    machine: Machine,
}

#[derive(Default)]
struct Queue {
    /// (due, slot index), earliest first.
    heap: BinaryHeap<Reverse<(Instant, usize)>>,
    stop: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    slots: Vec<Mutex<Slot>>,
    cancel: Cancel,
    probe: Probe,
    tx: Mutex<Sender<(CheckerId, Update)>>,
}

/// How a shutdown ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shutdown {
    /// Workers joined.
    pub joined: usize,
    /// Workers still inside an attempt at the bound, left to end alone
    /// (their results are dropped).
    pub detached: usize,
}

/// The running pool.
pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Each worker sends its index here as it leaves its loop.
    done: mpsc::Receiver<usize>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking attempt must not stop the other checkers.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pool {
    /// Starts `threads` workers (at least 1) running `jobs` with the real
    /// checkers; updates go to `tx`.
    pub fn spawn(
        threads: usize,
        jobs: Vec<Job>,
        tx: Sender<(CheckerId, Update)>,
    ) -> std::io::Result<Pool> {
        Pool::spawn_with(threads, jobs, tx, Arc::new(run_attempt))
    }

    /// As [`Pool::spawn`], with `probe` running the attempts.
    pub fn spawn_with(
        threads: usize,
        jobs: Vec<Job>,
        tx: Sender<(CheckerId, Update)>,
        probe: Probe,
    ) -> std::io::Result<Pool> {
        let now = Instant::now();
        let seed = RandomState::new();
        let mut queue = Queue::default();
        let slots = jobs
            .into_iter()
            .enumerate()
            .map(|(i, job)| {
                let mut h = seed.build_hasher();
                h.write_usize(i);
                let jitter = h.finish() as f64 / u64::MAX as f64;
                let machine = Machine::new(&job.conf, now, jitter);
                queue.heap.push(Reverse((machine.due(), i)));
                Mutex::new(Slot { job, machine })
            })
            .collect();
        let shared = Arc::new(Shared {
            queue: Mutex::new(queue),
            wake: Condvar::new(),
            slots,
            cancel: Cancel::new(),
            probe,
            tx: Mutex::new(tx),
        });
        let (done_tx, done) = mpsc::channel();
        let mut pool = Pool {
            shared,
            workers: Vec::new(),
            done,
        };
        for n in 0..threads.max(1) {
            let shared = Arc::clone(&pool.shared);
            let done_tx = done_tx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("check-{n}"))
                .spawn(move || {
                    work(&shared);
                    let _ = done_tx.send(n);
                });
            match spawned {
                Ok(h) => pool.workers.push(h),
                Err(e) => {
                    pool.shutdown(Duration::from_secs(1));
                    return Err(e);
                }
            }
        }
        Ok(pool)
    }

    /// Stops the pool: no new attempt starts, running scripts are killed,
    /// and workers are joined for at most `bound` (a worker still inside a
    /// socket attempt then is left to finish within that attempt's
    /// timeout; nothing more is sent).
    pub fn shutdown(mut self, bound: Duration) -> Shutdown {
        let deadline = Instant::now() + bound;
        lock(&self.shared.queue).stop = true;
        self.shared.cancel.cancel();
        self.shared.wake.notify_all();
        let total = self.workers.len();
        let mut handles: Vec<Option<JoinHandle<()>>> = self.workers.drain(..).map(Some).collect();
        let mut joined = 0;
        while joined < total {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(n) = self.done.recv_timeout(left) else {
                break;
            };
            // It has left its loop: the join waits only for its exit.
            if let Some(h) = handles.get_mut(n).and_then(Option::take) {
                let _ = h.join();
                joined += 1;
            }
        }
        Shutdown {
            joined,
            detached: total - joined,
        }
    }
}

impl Drop for Pool {
    /// A pool dropped without [`Pool::shutdown`] still stops its workers
    /// (without waiting for them).
    fn drop(&mut self) {
        lock(&self.shared.queue).stop = true;
        self.shared.cancel.cancel();
        self.shared.wake.notify_all();
    }
}

/// A worker: take the earliest due checker when due, run it, requeue it.
fn work(shared: &Shared) {
    loop {
        let Some(i) = next_due(shared) else { return };
        let (conf, url) = {
            let slot = lock(&shared.slots[i]);
            (slot.job.conf.clone(), slot.machine.url())
        };
        let started = Instant::now();
        let attempt = (shared.probe)(&conf, url, &shared.cancel);
        let now = Instant::now();
        let (id, report, up, label, due) = {
            let mut slot = lock(&shared.slots[i]);
            let report = slot.machine.record(started, now, &attempt);
            (
                slot.job.id,
                report,
                slot.machine.is_up(),
                slot.job.label.clone(),
                slot.machine.due(),
            )
        };
        {
            let mut q = lock(&shared.queue);
            if q.stop {
                return;
            }
            q.heap.push(Reverse((due, i)));
        }
        // The new entry may be earlier than what the sleepers wait for.
        shared.wake.notify_one();
        if !report.is_empty() {
            send(shared, id, report, up, &label);
        }
    }
}

fn send(shared: &Shared, id: CheckerId, report: Report, up: bool, label: &Label) {
    let lines = report.events.iter().map(|e| e.line(label)).collect();
    let update = Update {
        up,
        transition: report.transition,
        weight: report.weight,
        events: report.events,
        lines,
    };
    // The caller hanging up is its way of not listening; keep checking.
    let _ = lock(&shared.tx).send((id, update));
}

/// Waits (without spinning) until the earliest checker is due and takes
/// it; None once the pool stops.
fn next_due(shared: &Shared) -> Option<usize> {
    let mut q = lock(&shared.queue);
    loop {
        if q.stop {
            return None;
        }
        let now = Instant::now();
        match q.heap.peek() {
            Some(Reverse((due, _))) if *due <= now => {
                let Reverse((_, i)) = q.heap.pop()?;
                // Someone else may take the next one now.
                if q.heap.peek().is_some_and(|Reverse((d, _))| *d <= now) {
                    shared.wake.notify_one();
                }
                return Some(i);
            }
            Some(Reverse((due, _))) => {
                let wait = *due - now;
                q = shared
                    .wake
                    .wait_timeout(q, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            None => q = shared.wake.wait(q).unwrap_or_else(|e| e.into_inner()),
        }
    }
}
