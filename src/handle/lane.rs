//! A socket lent to one caller at a time, in order of asking, with a wait
//! for it that ends at a deadline.
//!
//! A `Mutex` around the socket would do neither: a caller would wait for
//! ever behind a request stuck in the kernel (a netlink `send` runs the
//! kernel's handler in the sending thread and cannot be interrupted), and a
//! caller that lets go and asks again at once could take the socket back
//! before a waiting one woke up.
//!
//! A socket goes back to the lane only when its user gives it back
//! ([`Lease::give_back`]): a lease dropped without it (an exchange that
//! failed, timed out or unwound from a panic) leaves the lane empty, so the
//! next caller opens a fresh socket and no answer of the unfinished
//! exchange can ever be matched to a later request.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What is lent: `T` is the socket with its sequence counter.
#[derive(Debug)]
pub(super) struct Lane<T> {
    state: Mutex<State<T>>,
    returned: Condvar,
}

#[derive(Debug)]
struct State<T> {
    /// `None`: not opened yet, or dropped after an unfinished exchange.
    item: Option<T>,
    lent: bool,
    /// The tickets of the callers waiting, in order of asking; the first
    /// one is served next.
    waiting: VecDeque<u64>,
    next_ticket: u64,
}

/// The right to use a lane's socket until dropped.
#[derive(Debug)]
pub(super) struct Lease<'a, T> {
    lane: &'a Lane<T>,
    returned: Option<T>,
}

/// Beyond this a deadline is taken as none; each wait is still cut into
/// waits of this length.
const LONGEST_WAIT: Duration = Duration::from_secs(3600);

impl<T> Lane<T> {
    pub(super) fn new(item: Option<T>) -> Self {
        Lane {
            state: Mutex::new(State {
                item,
                lent: false,
                waiting: VecDeque::new(),
                next_ticket: 0,
            }),
            returned: Condvar::new(),
        }
    }

    /// Lends the socket (`None` when there is none yet: the caller opens
    /// one), after the callers that asked before, waiting at most
    /// `timeout`; `Err` is how long the wait lasted.
    pub(super) fn lend(
        &self,
        timeout: Duration,
    ) -> std::result::Result<(Lease<'_, T>, Option<T>), Duration> {
        let start = Instant::now();
        let deadline = start.checked_add(timeout);
        let mut state = self.lock();
        if !state.lent && state.waiting.is_empty() {
            return Ok(self.take(state));
        }
        let ticket = state.next_ticket;
        state.next_ticket = state.next_ticket.wrapping_add(1);
        state.waiting.push_back(ticket);
        loop {
            if !state.lent && state.waiting.front() == Some(&ticket) {
                state.waiting.pop_front();
                return Ok(self.take(state));
            }
            let now = Instant::now();
            let left = deadline.map_or(LONGEST_WAIT, |d| d.saturating_duration_since(now));
            if left.is_zero() {
                state.waiting.retain(|t| *t != ticket);
                // The caller behind this one may be first now, with the
                // socket free.
                let wake = !state.lent;
                drop(state);
                if wake {
                    self.returned.notify_all();
                }
                return Err(now.saturating_duration_since(start));
            }
            state = match self.returned.wait_timeout(state, left.min(LONGEST_WAIT)) {
                Ok((s, _)) => s,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// Whether another caller is waiting for the socket: a long reader lets
    /// go between two requests when one is.
    pub(super) fn has_waiters(&self) -> bool {
        !self.lock().waiting.is_empty()
    }

    fn take(&self, mut state: MutexGuard<'_, State<T>>) -> (Lease<'_, T>, Option<T>) {
        state.lent = true;
        let item = state.item.take();
        (
            Lease {
                lane: self,
                returned: None,
            },
            item,
        )
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // The mutex is held only to hand the socket over, never during a
        // request or a caller's code, so a panic cannot happen while it is
        // held; should one have, the state is still whole.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<T> Lease<'_, T> {
    /// Ends the lease with the socket handed back for the next caller: only
    /// for a socket whose every request was answered.
    pub(super) fn give_back(mut self, item: T) {
        self.returned = Some(item);
    }
}

impl<T> Drop for Lease<'_, T> {
    fn drop(&mut self) {
        let mut state = self.lane.lock();
        state.item = self.returned.take();
        state.lent = false;
        let wake = !state.waiting.is_empty();
        drop(state);
        if wake {
            // Every waiter checks whether it is first; the others wait on.
            self.lane.returned.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const LONG: Duration = Duration::from_secs(30);

    #[test]
    fn only_a_socket_given_back_is_lent_again() {
        let lane = Lane::new(Some(7));
        let (lease, item) = lane.lend(LONG).unwrap();
        assert_eq!(item, Some(7));
        lease.give_back(8);
        let (lease, item) = lane.lend(LONG).unwrap();
        assert_eq!(item, Some(8));
        // Dropped without giving it back (a failed exchange): gone.
        drop(lease);
        let (_lease, item) = lane.lend(LONG).unwrap();
        assert_eq!(item, None);
    }

    #[test]
    fn a_panic_with_the_socket_lent_leaves_no_socket_behind() {
        let lane = Lane::new(Some(1u32));
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let (_lease, item) = lane.lend(LONG).unwrap();
            let _seq = item.unwrap() + 1;
            panic!("the exchange unwinds before its answers are read");
        }));
        assert!(unwound.is_err());
        let (_lease, item) = lane.lend(Duration::from_millis(10)).unwrap();
        assert_eq!(item, None, "a socket with unread answers was lent again");
    }

    #[test]
    fn a_wait_ends_at_the_timeout() {
        let lane = Lane::new(Some(()));
        let (_held, _) = lane.lend(LONG).unwrap();
        let t0 = Instant::now();
        let waited = lane.lend(Duration::from_millis(50)).unwrap_err();
        assert!(waited >= Duration::from_millis(50), "{waited:?}");
        assert!(t0.elapsed() < Duration::from_secs(5));
        // A caller that gave up no longer counts as waiting.
        assert!(!lane.has_waiters());
    }

    #[test]
    fn callers_are_served_in_order_of_asking() {
        let lane = Arc::new(Lane::new(Some(0u32)));
        let (held, _) = lane.lend(LONG).unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let queued = Arc::new(AtomicUsize::new(0));
        let mut threads = Vec::new();
        for n in 0..4 {
            // Each asks only once the one before it waits.
            while queued.load(Ordering::SeqCst) < n || lane.lock().waiting.len() < n {
                std::thread::yield_now();
            }
            let (lane, order, queued) =
                (Arc::clone(&lane), Arc::clone(&order), Arc::clone(&queued));
            threads.push(std::thread::spawn(move || {
                queued.fetch_add(1, Ordering::SeqCst);
                let (lease, item) = lane.lend(LONG).unwrap();
                order.lock().unwrap().push(n);
                lease.give_back(item.unwrap() + 1);
            }));
        }
        while lane.lock().waiting.len() < 4 {
            std::thread::yield_now();
        }
        assert!(lane.has_waiters());
        // The holder lets go and asks again at once: it is served last.
        held.give_back(0);
        let (again, item) = lane.lend(LONG).unwrap();
        order.lock().unwrap().push(4);
        again.give_back(item.unwrap() + 1);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
        // One socket went through every hand.
        assert_eq!(lane.lend(LONG).unwrap().1, Some(5));
    }

    #[test]
    fn a_waiter_that_gives_up_lets_the_next_one_in() {
        let lane = Arc::new(Lane::new(Some(())));
        let (held, _) = lane.lend(LONG).unwrap();
        let impatient = {
            let lane = Arc::clone(&lane);
            std::thread::spawn(move || lane.lend(Duration::from_secs(2)).map(drop).is_err())
        };
        while !lane.has_waiters() {
            std::thread::yield_now();
        }
        let patient = {
            let lane = Arc::clone(&lane);
            std::thread::spawn(move || lane.lend(LONG).map(drop).is_ok())
        };
        while lane.lock().waiting.len() < 2 {
            std::thread::yield_now();
        }
        assert!(impatient.join().unwrap());
        // Still held: the patient one waits on, and gets it once it is free.
        drop(held);
        assert!(patient.join().unwrap());
    }
}
