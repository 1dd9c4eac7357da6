//! The worker's promises without a kernel: order, withdrawal, panics, and a
//! runtime that keeps running while an operation blocks.

use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use super::worker::Worker;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime")
}

#[test]
fn operations_run_in_the_order_they_were_called() {
    let worker = Worker::spawn("test", Vec::new()).unwrap();
    // Queued at call time, awaited in the opposite order.
    let replies: Vec<_> = (0..100)
        .map(|i| {
            worker.submit(move |seen: &mut Vec<i32>| {
                seen.push(i);
                seen.len()
            })
        })
        .collect();
    let rt = runtime();
    let positions: Vec<usize> = rt.block_on(async {
        let mut out = Vec::new();
        for reply in replies.into_iter().rev() {
            out.push(reply.await);
        }
        out
    });
    assert_eq!(positions, (1..=100).rev().collect::<Vec<_>>());
    let seen = rt.block_on(worker.submit(|seen: &mut Vec<i32>| seen.clone()));
    assert_eq!(seen, (0..100).collect::<Vec<_>>());
}

#[test]
fn a_reply_dropped_before_its_operation_starts_withdraws_it() {
    let worker = Worker::spawn("test", Vec::new()).unwrap();
    let gate = Arc::new(Barrier::new(2));
    let held = Arc::clone(&gate);
    // Keeps the worker busy until the test has dropped the second reply.
    let first = worker.submit(move |seen: &mut Vec<&str>| {
        held.wait();
        seen.push("first");
    });
    let withdrawn = worker.submit(|seen: &mut Vec<&str>| seen.push("withdrawn"));
    drop(withdrawn);
    gate.wait();
    let rt = runtime();
    rt.block_on(first);
    let seen = rt.block_on(worker.submit(|seen: &mut Vec<&str>| seen.clone()));
    assert_eq!(seen, ["first"]);
}

#[test]
fn a_reply_dropped_while_its_operation_runs_lets_it_finish() {
    let worker = Worker::spawn("test", Vec::new()).unwrap();
    let started = Arc::new(Barrier::new(2));
    let finish = Arc::new(Barrier::new(2));
    let (s, f) = (Arc::clone(&started), Arc::clone(&finish));
    let running = worker.submit(move |seen: &mut Vec<&str>| {
        s.wait();
        f.wait();
        seen.push("completed");
    });
    started.wait();
    drop(running);
    finish.wait();
    let seen = runtime().block_on(worker.submit(|seen: &mut Vec<&str>| seen.clone()));
    assert_eq!(seen, ["completed"]);
}

#[test]
fn a_panic_reaches_the_awaiting_task_and_the_worker_goes_on() {
    let worker = Worker::spawn("test", 0u32).unwrap();
    let rt = runtime();
    let panicked = rt.block_on(async {
        let reply = worker.submit(|_: &mut u32| -> u32 { panic!("boom in the operation") });
        tokio::spawn(reply).await
    });
    let err = panicked.expect_err("the panic is resumed where the reply is awaited");
    let payload = err.into_panic();
    assert_eq!(
        payload.downcast_ref::<&str>(),
        Some(&"boom in the operation")
    );
    let after = rt.block_on(worker.submit(|n: &mut u32| {
        *n += 1;
        *n
    }));
    assert_eq!(after, 1, "the worker and its state survive the panic");
}

#[test]
fn a_blocking_operation_does_not_block_the_runtime() {
    let worker = Worker::spawn("test", ()).unwrap();
    let ticks = Arc::new(Mutex::new(0u32));
    let rt = runtime();
    let elapsed = rt.block_on(async {
        let start = Instant::now();
        // 500 ms of blocking on the worker, while a timer task on this
        // single-threaded runtime ticks every 10 ms.
        let slow = worker.submit(|_: &mut ()| std::thread::sleep(Duration::from_millis(500)));
        let counter = Arc::clone(&ticks);
        let ticker = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                *counter.lock().unwrap() += 1;
            }
        });
        slow.await;
        ticker.abort();
        start.elapsed()
    });
    let ticks = *ticks.lock().unwrap();
    assert!(elapsed >= Duration::from_millis(300));
    // A blocked runtime thread would tick at most once (after the sleep).
    assert!(
        ticks >= 5,
        "the runtime ticked only {ticks} times in {elapsed:?}"
    );
}

#[test]
fn queued_operations_finish_after_the_worker_is_dropped() {
    let worker = Worker::spawn("test", 0u32).unwrap();
    let replies: Vec<_> = (0..10)
        .map(|_| {
            worker.submit(|n: &mut u32| {
                *n += 1;
                *n
            })
        })
        .collect();
    drop(worker);
    let rt = runtime();
    let last = rt.block_on(async {
        let mut last = 0;
        for r in replies {
            last = r.await;
        }
        last
    });
    assert_eq!(last, 10);
}
