//! The worker thread behind the async front: a queue of jobs run in order
//! on one thread that owns the state (a handle, a syncer), and the future
//! each caller awaits.

use std::any::Any;
use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::mpsc;
use std::task::{Context, Poll};
use std::thread;

use tokio::sync::oneshot;

use crate::{Error, Operation, Result};

/// A job for the worker: runs with its state unless the caller gave up.
type Job<S> = Box<dyn FnOnce(&mut S) + Send>;

/// What a job sends back: its value, or the payload of its panic.
type Outcome<T> = thread::Result<T>;

/// One thread that runs jobs on `S`, in the order they were submitted.
pub(super) struct Worker<S> {
    jobs: mpsc::Sender<Job<S>>,
    name: &'static str,
}

impl<S> std::fmt::Debug for Worker<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").field("name", &self.name).finish()
    }
}

impl<S: Send + 'static> Worker<S> {
    /// Starts the thread. It ends once every `Worker` handle is dropped and
    /// the queue is empty; nothing joins it, so dropping never blocks.
    pub(super) fn spawn(name: &'static str, mut state: S) -> Result<Worker<S>> {
        let (jobs, queue) = mpsc::channel::<Job<S>>();
        thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                for job in queue {
                    job(&mut state);
                }
            })
            .map_err(|e| Error::io(Operation::StartWorker, e))?;
        Ok(Worker { jobs, name })
    }

    /// Queues `f`; the returned future resolves to its value.
    pub(super) fn submit<T, F>(&self, f: F) -> Reply<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut S) -> T + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job<S> = Box::new(move |state| {
            // Dropped before it started: withdrawn, never run.
            if tx.is_closed() {
                return;
            }
            let outcome = panic::catch_unwind(AssertUnwindSafe(|| f(state)));
            let _ = tx.send(outcome);
        });
        // The thread only stops when every sender is gone, so a failed send
        // means it died: the reply reports that instead of waiting.
        let _ = self.jobs.send(job);
        Reply { rx }
    }
}

impl Worker<()> {
    /// Runs `f` once on a thread of its own (opening a handle, which must
    /// not block the runtime either).
    pub(super) fn once<T, F>(f: F) -> Result<Reply<T>>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let worker = Worker::spawn("ipvsctl-open", ())?;
        Ok(worker.submit(move |_| f()))
    }
}

/// The future of one queued operation: resolves to its result.
///
/// Dropping it before the operation has started withdraws the operation;
/// after that the operation completes and its result is discarded (see the
/// module docs). If the operation panicked, awaiting resumes the panic.
#[derive(Debug)]
#[must_use = "an operation is withdrawn if its Reply is dropped before it starts"]
pub struct Reply<T> {
    rx: oneshot::Receiver<Outcome<T>>,
}

impl<T> Future for Reply<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match Pin::new(&mut self.rx).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(Ok(value))) => Poll::Ready(value),
            Poll::Ready(Ok(Err(payload))) => resume(payload),
            // The job was dropped unrun: only when its thread is gone, which
            // happens only if the thread could not run jobs at all.
            Poll::Ready(Err(_)) => panic!("ipvsctl's async worker thread stopped"),
        }
    }
}

fn resume<T>(payload: Box<dyn Any + Send>) -> T {
    panic::resume_unwind(payload)
}
