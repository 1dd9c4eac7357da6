//! Dumps with the kernel's work and the decoding overlapped: the real
//! servers of many services, and a large service table.
//!
//! The kernel builds each dump datagram inside the `recv` that takes it (and
//! answers each `GET_DEST` dump request inside its `send`), so on one thread
//! the kernel and the decoder take turns. Here a helper thread only talks to
//! the kernel, copying each reply's message bodies into a batch, while the
//! calling thread decodes the batches before it. In the QEMU guest (10,000 x
//! 10, `perf`) the library's own work was about a quarter of a one-thread
//! real-server read, and decoding a service dump took a little over half the
//! kernel's time building it (5,000 services, 6.1); both now run while the
//! helper waits for the kernel.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::mpsc;

use super::dests::settle;
use super::{Answer, Error, Handle, Request, Result, Target, Via, describe};
use crate::codec::{DecodeError, IpvsCmd, request};
use crate::model::ServiceKey;
use crate::netlink::Kind;

/// Below this many services the dumps run on the calling thread: a thread
/// costs more than it saves.
const OVERLAP_FROM: usize = 64;
/// A batch goes to the decoder after this many services...
const BATCH_SERVICES: usize = 16;
/// ...or once its message bodies take this many bytes.
const BATCH_BYTES: usize = 32 << 10;
/// From this many expected services a service dump is read on a helper
/// thread: below, starting the thread costs more than the overlap saves
/// (1.1-1.4 ms a thread in the QEMU guest, about the raw dump of 200
/// services; one thread was the faster up to 800 services on 6.1 and 500
/// on 7.3.4, the helper from 900 and 700: docs/performance.md).
pub(crate) const OVERLAP_SERVICES_FROM: usize = 700;
/// Batches read but not yet decoded, at most (half a megabyte): when the
/// decoder and the caller's bookkeeping are slower than the kernel, the
/// helper stops reading, lets go of the socket and waits for room, instead
/// of queueing the replies of the whole table.
const QUEUED_BATCHES: usize = 16;

/// Replies to a few dumps, their data messages' bodies back to back.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    /// The request's index, where each of its data messages is in `bytes`
    /// and how many datagrams they came in; or its error.
    replies: Vec<(usize, Result<Answer<Range<usize>>>)>,
}

/// Message bodies of one dump, back to back.
#[derive(Default)]
struct Bodies {
    bytes: Vec<u8>,
    ranges: Vec<Range<usize>>,
}

impl Bodies {
    /// Room for a batch of [`BATCH_BYTES`] and the message that crosses it,
    /// so that filling it never moves it.
    fn with_room() -> Self {
        Bodies {
            bytes: Vec::with_capacity(BATCH_BYTES + (8 << 10)),
            ranges: Vec::with_capacity(256),
        }
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.ranges.clear();
    }

    fn push(&mut self, body: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(body);
        self.ranges.push(start..self.bytes.len());
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.ranges
            .iter()
            .map(|r| self.bytes.get(r.clone()).unwrap_or_default())
    }
}

impl Handle {
    /// Runs one dump request on the socket `via` with a helper thread
    /// reading the kernel's datagrams while this thread decodes each data
    /// message with `decode` and hands it to `each`, in order. The errors
    /// are those of
    /// [`Handle::call`] (the first decode error fails the dump; the rest of
    /// it is still read); on an error, the messages handed on before it were
    /// read.
    pub(crate) fn dump_each<D>(
        &self,
        via: Via,
        msg: crate::codec::IpvsMessage,
        target: Target,
        mut decode: impl FnMut(&[u8]) -> std::result::Result<D, DecodeError>,
        mut each: impl FnMut(D),
    ) -> Result<()> {
        let op = describe(msg.cmd, &target);
        std::thread::scope(|scope| {
            let (tx, rx) = mpsc::sync_channel::<Bodies>(QUEUED_BATCHES);
            // Decoded batches come back emptied, to be filled again: the
            // dump is copied into the same few buffers, not into fresh
            // memory for every batch.
            let (back_tx, back_rx) = mpsc::channel::<Bodies>();
            let reader = scope.spawn(move || {
                let bodies = RefCell::new(Bodies::with_room());
                let copy = |body: &[u8]| {
                    let mut b = bodies.borrow_mut();
                    b.push(body);
                    if b.bytes.len() >= BATCH_BYTES {
                        let empty = back_rx.try_recv().unwrap_or_else(|_| Bodies::with_room());
                        // A send fails only when this thread's caller is
                        // unwinding from a panic: the rest is read and
                        // dropped, leaving the socket clean.
                        let _ = tx.send(std::mem::replace(&mut *b, empty));
                    }
                    Ok(())
                };
                let answer = self.call(via, msg, Kind::Dump, target, copy);
                (answer, bodies.into_inner())
            });
            let mut failed = None;
            let mut take = |bodies: &Bodies| {
                for body in bodies.iter() {
                    if failed.is_some() {
                        return;
                    }
                    match decode(body) {
                        Ok(d) => each(d),
                        Err(e) => failed = Some(e),
                    }
                }
            };
            for mut bodies in rx {
                take(&bodies);
                bodies.clear();
                // The reader may have finished: the buffer is dropped then.
                let _ = back_tx.send(bodies);
            }
            let (answer, last) = match reader.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            };
            take(&last);
            answer?;
            match failed {
                Some(source) => Err(Error::Decode { op, source }),
                None => Ok(()),
            }
        })
    }

    /// Dumps the real servers of each service in `keys`, one dump each, and
    /// calls `each(index, result)` once per key, in order, on this thread;
    /// each data message is decoded by `decode(index, body)` here too.
    /// Invalid keys get their validation error without a request. A list
    /// that took several passes is checked by [`settle`] (re-read on the
    /// other socket; `addr` names each real server) before it is reported.
    /// Returns early only on an I/O error of the socket or a wait for it
    /// that ran out (then the keys not yet reported have no result).
    pub(crate) fn dump_dests_each<D>(
        &self,
        keys: &[ServiceKey],
        mut decode: impl FnMut(usize, &[u8]) -> std::result::Result<D, DecodeError>,
        addr: impl Fn(&D) -> SocketAddr,
        mut each: impl FnMut(usize, Result<Vec<D>>),
    ) -> Result<()> {
        if keys.len() < OVERLAP_FROM {
            // `each` runs after the exchange has let go of the socket, so
            // that it may use the handle.
            let mut replies = Vec::with_capacity(keys.len());
            self.exchange(Via::Main, requests(keys), &mut decode, |index, r| {
                replies.push((index, r));
            })?;
            let mut next = 0;
            for (index, r) in replies {
                report_skipped(keys, &mut next, index, &mut each);
                let r = r.and_then(|a| self.settle_dests(keys, index, a, &mut decode, &addr));
                each(index, r);
                next = index + 1;
            }
            report_skipped(keys, &mut next, keys.len(), &mut each);
            return Ok(());
        }
        std::thread::scope(|scope| {
            let (tx, rx) = mpsc::sync_channel::<Batch>(QUEUED_BATCHES);
            let reader = scope.spawn(move || self.read_batches(keys, tx));
            let mut next = 0;
            for batch in rx {
                for (index, r) in batch.replies {
                    report_skipped(keys, &mut next, index, &mut each);
                    let r = decode_reply(keys, index, &batch.bytes, r, &mut decode)
                        .and_then(|a| self.settle_dests(keys, index, a, &mut decode, &addr));
                    each(index, r);
                    next = index + 1;
                }
            }
            match reader.join() {
                Ok(r) => r?,
                Err(panic) => std::panic::resume_unwind(panic),
            }
            report_skipped(keys, &mut next, keys.len(), &mut each);
            Ok(())
        })
    }

    /// [`settle`] for the dump of `keys[index]`: a re-read goes to the
    /// handle's other socket, which the helper thread of an overlapped read
    /// leaves free.
    fn settle_dests<D>(
        &self,
        keys: &[ServiceKey],
        index: usize,
        first: Answer<D>,
        decode: &mut impl FnMut(usize, &[u8]) -> std::result::Result<D, DecodeError>,
        addr: &impl Fn(&D) -> SocketAddr,
    ) -> Result<Vec<D>> {
        let Some(key) = keys.get(index) else {
            return Ok(first.data);
        };
        let again = || {
            let msg = request::dump_dests(key)?;
            self.call(
                Via::Tables,
                msg,
                Kind::Dump,
                Target::Service(*key),
                |body| decode(index, body),
            )
        };
        settle(key, first, again, addr)
    }

    /// The helper thread's side: runs the dumps, copying each message body
    /// into the current batch, and sends the batches.
    ///
    /// It holds the main socket only while it reads. It lets go between two
    /// dumps whenever another caller waits for the socket (the callback, say,
    /// or another thread), and asks for it again behind that caller. When
    /// the queue is full it stops reading, lets go, and waits for room
    /// without the socket: the caller's side may be running `each`, which
    /// may itself need the socket to return.
    fn read_batches(&self, keys: &[ServiceKey], tx: mpsc::SyncSender<Batch>) -> Result<()> {
        let mut left = requests(keys);
        let batch = RefCell::new(Batch::default());
        // A full batch the queue had no room for.
        let waiting: RefCell<Option<Batch>> = RefCell::new(None);
        let consumer_gone = Cell::new(false);
        let mut finished = false;
        while !finished {
            if let Some(full) = waiting.take()
                && tx.send(full).is_err()
            {
                return Ok(()); // the caller's side stopped (it panicked)
            }
            if consumer_gone.get() {
                return Ok(());
            }
            // One turn on the socket: at least one dump, then more until a
            // caller waits for the socket or the queue is full.
            let mut first = true;
            let turn = std::iter::from_fn(|| {
                let pause = waiting.borrow().is_some()
                    || consumer_gone.get()
                    || (!first && self.main.has_waiters());
                first = false;
                if pause {
                    return None;
                }
                let next = left.next();
                finished = next.is_none();
                next
            });
            let copy = |_: usize, body: &[u8]| {
                let mut b = batch.borrow_mut();
                let start = b.bytes.len();
                b.bytes.extend_from_slice(body);
                Ok(start..b.bytes.len())
            };
            let read = self.exchange(Via::Main, turn, copy, |index, r: Result<Answer<_>>| {
                let mut b = batch.borrow_mut();
                b.replies.push((index, r));
                let full = b.replies.len() >= BATCH_SERVICES || b.bytes.len() >= BATCH_BYTES;
                if full && waiting.borrow().is_none() {
                    match tx.try_send(std::mem::take(&mut *b)) {
                        Ok(()) => {}
                        Err(mpsc::TrySendError::Full(b)) => *waiting.borrow_mut() = Some(b),
                        Err(mpsc::TrySendError::Disconnected(_)) => consumer_gone.set(true),
                    }
                }
            });
            if let Err(e) = read {
                // What was read before the failure is still reported.
                for b in [waiting.take(), Some(batch.take())].into_iter().flatten() {
                    if !b.replies.is_empty() && tx.send(b).is_err() {
                        break;
                    }
                }
                return Err(e);
            }
        }
        for b in [waiting.take(), Some(batch.take())].into_iter().flatten() {
            if !b.replies.is_empty() && tx.send(b).is_err() {
                break;
            }
        }
        Ok(())
    }
}

/// A dump request for each valid key (invalid keys are skipped here and
/// reported by [`report_skipped`]).
fn requests(keys: &[ServiceKey]) -> impl Iterator<Item = Request> + Send + '_ {
    keys.iter().enumerate().filter_map(|(index, key)| {
        let msg = request::dump_dests(key).ok()?;
        Some(Request {
            index,
            msg,
            kind: Kind::Dump,
            target: Target::Service(*key),
        })
    })
}

/// Reports every key from `*next` up to `upto` that got no request: its
/// validation error (or, should the kernel's answers ever skip one, that
/// its answer was lost).
fn report_skipped<D>(
    keys: &[ServiceKey],
    next: &mut usize,
    upto: usize,
    each: &mut impl FnMut(usize, Result<Vec<D>>),
) {
    while *next < upto {
        let index = *next;
        let err = match keys.get(index).map(ServiceKey::validate) {
            Some(Err(e)) => Error::from(e),
            _ => Error::Lost {
                op: op(keys, index),
            },
        };
        each(index, Err(err));
        *next += 1;
    }
}

/// Decodes one dump's messages from a batch.
fn decode_reply<D>(
    keys: &[ServiceKey],
    index: usize,
    bytes: &[u8],
    reply: Result<Answer<Range<usize>>>,
    decode: &mut impl FnMut(usize, &[u8]) -> std::result::Result<D, DecodeError>,
) -> Result<Answer<D>> {
    let reply = reply?;
    let mut out = Vec::new();
    for range in reply.data {
        let body = bytes.get(range).unwrap_or_default();
        match decode(index, body) {
            Ok(d) => out.push(d),
            Err(source) => {
                return Err(Error::Decode {
                    op: op(keys, index),
                    source,
                });
            }
        }
    }
    Ok(Answer {
        data: out,
        datagrams: reply.datagrams,
    })
}

fn op(keys: &[ServiceKey], index: usize) -> super::Operation {
    match keys.get(index) {
        Some(key) => describe(IpvsCmd::GetDest, &Target::Service(*key)),
        None => describe(IpvsCmd::GetDest, &Target::Global),
    }
}
