//! The request pipeline, sans-IO: packing requests into datagrams and
//! turning the kernel's answers into one outcome per request. No socket,
//! thread or clock lives here; a driver (see [`super::Exchange`]) sends the
//! datagrams it fills, feeds it what each receive got, and tells it the time.
//!
//! The rules it enforces, in one place:
//!
//! * **Packing.** Requests are written back to back into one datagram, within
//!   the socket's largest send ([`Limits::max_send`]) and at most
//!   [`Limits::max_batch`] of them, so that even an answer for each fits the
//!   receive buffer. A dump ends its datagram: a socket runs one dump at a
//!   time.
//! * **Quiet requests.** A [`Kind::Quiet`] request asks for no ACK unless it
//!   is the last of its datagram. The kernel handles a datagram's requests in
//!   order and queues each answer before it starts the next, so once a later
//!   request of the datagram is answered, a quiet request without an answer
//!   succeeded; an [`Kind::Ack`] request without one hit the
//!   [`Failure::Unanswered`] case.
//! * **Overrun.** A receive that reports `ENOBUFS` means answers were
//!   dropped: the queue is drained without waiting and every request still
//!   without an answer is [`Failure::Lost`], never assumed done.
//! * **Cut datagrams.** A datagram larger than the receive length makes its
//!   request [`Failure::Truncated`]; a dump is asked again once first (it
//!   only reads), with a new sequence number.
//! * **Sequence numbers and senders.** Answers are matched by sequence
//!   number; stale ones (an abandoned exchange's) and duplicates are ignored,
//!   and datagrams from a sender other than the kernel are dropped and
//!   counted.
//! * **Silence.** A datagram whose answers stop for longer than the timeout
//!   ends with [`Failure::TimedOut`] for every request still open; the
//!   driver gives every receive only the time left before that deadline
//!   ([`Pipeline::deadline`]).
//! * **Interrupted dumps.** An answer with a message flagged
//!   `NLM_F_DUMP_INTR` (rtnetlink's sign that the table changed during the
//!   dump) is reported as such ([`Reply::interrupted`]); asking again is the
//!   caller's choice.
//!
//! Every request pushed gets exactly one outcome, in the order pushed.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::codec::frame::{
    self, FrameBody, FrameHeader, NLM_F_ACK, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST, NlError,
};
use crate::codec::{DecodeError, IpvsMessage};

/// How a request is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A "do" request sent with `NLM_F_ACK`: zero or more data replies, then
    /// an ACK or an error.
    Ack,
    /// A dump (`NLM_F_DUMP`): data replies, then `NLMSG_DONE` or an error.
    Dump,
    /// A "do" request sent without `NLM_F_ACK` (except the last request of a
    /// datagram): answered by its data replies if it has any, by an error
    /// when it fails, and otherwise by nothing. For requests whose handler
    /// never returns `EINTR`, since netlink does not answer that even as an
    /// error (see [`Failure::Unanswered`]): the service and real-server
    /// changes and the single-service lookup, not `DEL_DAEMON`. A lookup
    /// that succeeded always has its data reply, so a quiet lookup settled
    /// without data is a service the kernel did not report, never a missing
    /// answer taken for one (the kernel queues a request's replies before it
    /// handles the next request, whose answer settles it).
    Quiet,
}

impl Kind {
    /// The flags a request of this kind is written with (before the quiet
    /// rule may add `NLM_F_ACK` to the last of a datagram).
    fn flags(self) -> u16 {
        NLM_F_REQUEST
            | match self {
                Kind::Ack => NLM_F_ACK,
                Kind::Dump => NLM_F_DUMP,
                Kind::Quiet => 0,
            }
    }
}

/// Why a request failed.
#[derive(Debug)]
pub enum Failure {
    /// The kernel answered with an error.
    Kernel(NlError),
    /// A reply could not be decoded.
    Decode(DecodeError),
    /// The kernel's answer was dropped (receive buffer overrun): whether the
    /// request took effect is unknown.
    Lost,
    /// An answer came in a datagram larger than the socket's receive length
    /// and was cut off. A dump is asked again once before this is reported.
    Truncated,
    /// The kernel answered a later request of the same datagram, but never
    /// this "do" request. It handles a datagram's requests in order and
    /// queues each answer before starting the next, so this one will never
    /// be answered: netlink sends no answer at all when a handler returns
    /// `EINTR` (`netlink_rcv_skb` skips the ACK), which IPVS's `DEL_DAEMON`
    /// does when the sync thread it stops had not started running yet.
    Unanswered,
    /// Nothing arrived for the request's datagram for `waited`, the
    /// timeout: whether the request took effect is unknown.
    TimedOut {
        /// How long the last wait lasted.
        waited: Duration,
    },
}

/// The answer to one request, its data messages decoded into `D`
/// ([`IpvsMessage`] unless the caller decodes them itself).
#[derive(Debug)]
pub struct Reply<D = IpvsMessage> {
    /// Data messages received for the request, in order.
    pub data: Vec<D>,
    /// How many datagrams carried those messages. A dump answered in more
    /// than one datagram was produced in several passes of the kernel's dump
    /// callback, and is not a snapshot.
    pub datagrams: usize,
    /// The kernel flagged the answer `NLM_F_DUMP_INTR`: what it dumped
    /// changed while it was being dumped (an rtnetlink dump of links or
    /// addresses), so the data may miss or repeat entries and the dump is
    /// to be asked again.
    pub interrupted: bool,
    /// Outcome.
    pub result: Result<(), Failure>,
}

/// How requests are packed into datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The netlink port of the socket: the kernel's answers carry it (or 0).
    pub port: u32,
    /// The most bytes one datagram may carry.
    pub max_send: usize,
    /// The most requests one datagram may carry.
    pub max_batch: usize,
}

/// What [`Pipeline::push`] did with a request.
#[derive(Debug)]
pub enum Push<T> {
    /// The request is in the datagram.
    Added,
    /// The datagram is full: the request was not written; its tag comes
    /// back, to be pushed into the next datagram.
    Full(T),
}

/// What the driver is to do next.
#[derive(Debug, PartialEq, Eq)]
pub enum Io<'a> {
    /// Receive one datagram; wait for it only when `wait` (otherwise the
    /// queue is being drained and an empty one is [`Pipeline::on_empty`]).
    Recv {
        /// Whether to wait (up to the timeout) for a datagram.
        wait: bool,
    },
    /// Send these bytes (a cut dump asked again), then [`Pipeline::on_sent`].
    Send(&'a [u8]),
    /// No datagram is in flight: take the outcomes, then push more requests.
    Idle,
}

#[derive(Debug)]
struct Pending<T, D> {
    tag: T,
    kind: Kind,
    data: Vec<D>,
    datagrams: usize,
    /// The receive count of the datagram that last carried data for this
    /// request, to count datagrams.
    last_datagram: usize,
    decode_error: Option<DecodeError>,
    /// A datagram of this answer was cut off: its data is incomplete.
    truncated: bool,
    /// A message of this answer carried `NLM_F_DUMP_INTR`.
    interrupted: bool,
    done: Option<Result<(), Failure>>,
}

impl<T, D> Pending<T, D> {
    fn new(tag: T, kind: Kind) -> Self {
        Pending {
            tag,
            kind,
            data: Vec::new(),
            datagrams: 0,
            last_datagram: 0,
            decode_error: None,
            truncated: false,
            interrupted: false,
            done: None,
        }
    }

    fn into_outcome(self) -> (T, Reply<D>) {
        let result = match (self.done, self.decode_error, self.truncated) {
            (Some(Err(f @ Failure::TimedOut { .. })), _, _) => Err(f),
            (_, _, true) => Err(Failure::Truncated),
            (Some(Err(f)), _, _) => Err(f),
            (_, Some(e), _) => Err(Failure::Decode(e)),
            (Some(Ok(())), None, _) => Ok(()),
            (None, None, _) => Err(Failure::Lost),
        };
        let reply = Reply {
            data: self.data,
            datagrams: self.datagrams,
            interrupted: self.interrupted,
            result,
        };
        (self.tag, reply)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Requests are being pushed into the next datagram.
    Filling,
    /// The datagram was sent; its answers are awaited.
    Answering,
    /// A cut dump is to be asked again.
    Reask,
}

/// A datagram being filled: its requests numbered and packed within the
/// limits, with their bookkeeping, until it is sealed and put in flight.
///
/// A [`Pipeline`] fills its datagrams in one of these. A writer that wants
/// the next datagram filled while the current one is in flight (on another
/// thread, say) fills one apart with [`Staged::new`] and hands it over with
/// [`Pipeline::launch`]: the packing and quiet-ACK rules are the same code
/// either way.
#[derive(Debug)]
pub struct Staged<T, D = IpvsMessage> {
    limits: Limits,
    /// The sequence number the next request gets.
    next_seq: u32,
    /// The sequence number of `requests[0]`.
    first_seq: u32,
    requests: VecDeque<Pending<T, D>>,
    /// Where the datagram's last request starts in the caller's buffer.
    last_at: usize,
    /// The datagram ends with a dump: kept to ask again if its answer is cut.
    dump_request: Option<Vec<u8>>,
    sealed: bool,
}

impl<T, D> Staged<T, D> {
    /// An empty datagram whose requests are numbered from `first_seq` on,
    /// packed within `limits`.
    pub fn new(first_seq: u32, limits: Limits) -> Self {
        Staged {
            limits: Limits {
                max_batch: limits.max_batch.max(1),
                ..limits
            },
            next_seq: first_seq,
            first_seq,
            requests: VecDeque::new(),
            last_at: 0,
            dump_request: None,
            sealed: false,
        }
    }

    /// The sequence number the next request will get.
    #[cfg_attr(not(feature = "unstable"), allow(dead_code))] // used through `unstable`
    pub fn next_seq(&self) -> u32 {
        self.next_seq
    }

    /// How many requests the datagram holds.
    #[cfg_attr(not(feature = "unstable"), allow(dead_code))] // used through `unstable`
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether the datagram holds no request.
    #[cfg_attr(not(feature = "unstable"), allow(dead_code))] // used through `unstable`
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// Makes room for the bookkeeping of `requests` requests at once.
    pub fn reserve(&mut self, requests: usize) {
        self.requests.reserve(requests);
    }

    /// Whether another request may join the datagram.
    pub fn has_room(&self) -> bool {
        !self.sealed && self.requests.len() < self.limits.max_batch && self.dump_request.is_none()
    }

    /// Writes one request into `buf` (the datagram, which the caller empties
    /// before its first push) with `write(buf, seq, flags)`, which appends
    /// exactly one netlink message. A request that does not fit beside the
    /// ones already there is taken back out and its tag returned
    /// ([`Push::Full`]); the first request of a datagram is always taken. An
    /// error of `write` is returned as is, with the buffer as it was and
    /// nothing spent.
    pub fn push<E>(
        &mut self,
        buf: &mut Vec<u8>,
        kind: Kind,
        tag: T,
        write: impl FnOnce(&mut Vec<u8>, u32, u16) -> Result<(), E>,
    ) -> Result<Push<T>, E> {
        if !self.has_room() {
            return Ok(Push::Full(tag));
        }
        if self.requests.is_empty() {
            self.first_seq = self.next_seq;
        }
        let before = buf.len();
        if let Err(e) = write(buf, self.next_seq, kind.flags()) {
            buf.truncate(before);
            return Err(e);
        }
        if buf.len() > self.limits.max_send && !self.requests.is_empty() {
            buf.truncate(before);
            return Ok(Push::Full(tag));
        }
        self.next_seq = self.next_seq.wrapping_add(1);
        self.last_at = before;
        if kind == Kind::Dump {
            self.dump_request = Some(buf[before..].to_vec());
        }
        self.requests.push_back(Pending::new(tag, kind));
        Ok(Push::Added)
    }

    /// Closes the datagram in `buf` (a quiet last request asks for an ACK)
    /// and returns whether it holds anything to send. Nothing more joins it.
    pub fn seal(&mut self, buf: &mut [u8]) -> bool {
        if self.sealed || self.requests.is_empty() {
            return false;
        }
        if self.requests.back().is_some_and(|p| p.kind == Kind::Quiet)
            && let Some(last) = buf.get_mut(self.last_at..)
        {
            // Only the ACK is added: a request's own flags (a create's
            // NLM_F_CREATE) stay.
            frame::add_flags(last, NLM_F_REQUEST | NLM_F_ACK);
        }
        self.sealed = true;
        true
    }

    /// Takes over the room of outcomes already taken (any left in them are
    /// dropped) for the bookkeeping of the requests still to come, when it
    /// has more than this datagram's own: a writer that fills datagrams on
    /// one thread and takes their outcomes on another hands the room back
    /// instead of allocating it for every datagram.
    pub fn reuse(&mut self, spent: Outcomes<T, D>) {
        let mut room = spent.0;
        if self.requests.is_empty() && room.capacity() > self.requests.capacity() {
            room.clear();
            self.requests = room;
        }
    }

    /// Takes the sealed datagram out, for [`Pipeline::launch`], and leaves
    /// this one empty to fill the next datagram, numbering on. `None` when
    /// nothing was sealed.
    pub fn take(&mut self) -> Option<Staged<T, D>> {
        self.take_with(VecDeque::new())
    }

    /// [`Staged::take`], leaving `room` (empty) for the next datagram's
    /// requests.
    fn take_with(&mut self, room: VecDeque<Pending<T, D>>) -> Option<Staged<T, D>> {
        if !self.sealed {
            return None;
        }
        self.sealed = false;
        let taken = Staged {
            limits: self.limits,
            next_seq: self.next_seq,
            first_seq: self.first_seq,
            requests: std::mem::replace(&mut self.requests, room),
            last_at: std::mem::take(&mut self.last_at),
            dump_request: self.dump_request.take(),
            sealed: true,
        };
        self.first_seq = self.next_seq;
        Some(taken)
    }

    /// Gives the sealed datagram in `buf` the numbers from `first_seq` on,
    /// request by request along their headers' lengths (as `write` made
    /// them). A message length that does not fit stops the walk.
    fn renumber(&mut self, buf: &mut [u8], first_seq: u32) {
        let count = self.requests.len();
        let mut at = 0;
        let mut seq = first_seq;
        for _ in 0..count {
            let Some(header) = buf
                .get_mut(at..)
                .and_then(|rest| rest.get_mut(..frame::NLMSG_HDRLEN))
            else {
                break;
            };
            let len = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]) as usize;
            if len < frame::NLMSG_HDRLEN {
                break;
            }
            header[8..12].copy_from_slice(&seq.to_ne_bytes());
            seq = seq.wrapping_add(1);
            at = at.saturating_add(len.saturating_add(3) & !3);
        }
        // The pipeline counts on the numbers `first_seq..` in order, one
        // per request, whatever the walk found.
        let next_seq = first_seq.wrapping_add(count as u32);
        if let Some(req) = self.dump_request.as_mut()
            && let Some(s) = req.get_mut(8..12)
        {
            s.copy_from_slice(&next_seq.wrapping_sub(1).to_ne_bytes());
        }
        self.first_seq = first_seq;
        self.next_seq = next_seq;
    }

    /// Starts over empty, numbering from `first_seq`, keeping its room.
    fn restart(&mut self, first_seq: u32, limits: Limits) {
        let Staged {
            limits: self_limits,
            next_seq,
            first_seq: self_first_seq,
            requests,
            last_at,
            dump_request,
            sealed,
        } = self;
        *self_limits = Limits {
            max_batch: limits.max_batch.max(1),
            ..limits
        };
        *next_seq = first_seq;
        *self_first_seq = first_seq;
        requests.clear();
        *last_at = 0;
        *dump_request = None;
        *sealed = false;
    }
}

/// Outcomes taken from a [`Pipeline`] at once ([`Pipeline::take_outcomes`]),
/// each made when the iteration reaches it: a writer hands them to another
/// thread for its bookkeeping instead of making them on the one that waits
/// for the kernel.
#[derive(Debug)]
pub struct Outcomes<T, D = IpvsMessage>(VecDeque<Pending<T, D>>);

impl<T, D> Iterator for Outcomes<T, D> {
    type Item = (T, Reply<D>);

    fn next(&mut self) -> Option<(T, Reply<D>)> {
        self.0.pop_front().map(Pending::into_outcome)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.0.len(), Some(self.0.len()))
    }
}

impl<T, D> ExactSizeIterator for Outcomes<T, D> {}

/// The pipeline's state: one datagram in flight at a time, its requests'
/// answers, and the outcomes ready to be taken. `T` is the caller's tag for
/// each request, handed back with its outcome; `D` what data messages are
/// decoded into.
#[derive(Debug)]
pub struct Pipeline<T, D = IpvsMessage> {
    timeout: Duration,
    /// The datagram being filled; its numbering is the pipeline's.
    fill: Staged<T, D>,
    /// The sequence number of `pending[0]`.
    first_seq: u32,
    /// The requests of the datagram in flight.
    pending: VecDeque<Pending<T, D>>,
    /// Requests of `pending` without an outcome yet.
    open: usize,
    state: State,
    /// The datagram in flight ends with a dump: kept to ask again if its
    /// answer is cut.
    dump_request: Option<Vec<u8>>,
    reasked: bool,
    /// Answers were dropped or a datagram was cut: drain without waiting.
    draining: bool,
    /// Requests below this index have had every answer they will get.
    settled_below: usize,
    /// Datagrams received for the one in flight (to count an answer's).
    received: usize,
    /// When the datagram in flight last heard from the kernel (or was sent).
    heard_at: Option<Instant>,
    dropped_foreign: u64,
    /// Requests of finished datagrams, in order, each made an outcome when
    /// it is taken: a finished datagram's queue is swapped in whole when
    /// nothing was left here, instead of each request moved on its own.
    ready: VecDeque<Pending<T, D>>,
}

impl<T, D> Pipeline<T, D> {
    /// A pipeline numbering requests from `first_seq` on, packing datagrams
    /// within `limits`, and ending a datagram's wait after `timeout` of
    /// silence.
    pub fn new(first_seq: u32, limits: Limits, timeout: Duration) -> Self {
        Pipeline {
            timeout,
            fill: Staged::new(first_seq, limits),
            first_seq,
            pending: VecDeque::new(),
            open: 0,
            state: State::Filling,
            dump_request: None,
            reasked: false,
            draining: false,
            settled_below: 0,
            received: 0,
            heard_at: None,
            dropped_foreign: 0,
            ready: VecDeque::new(),
        }
    }

    /// Starts over as [`Pipeline::new`] would, keeping the room its queues
    /// have grown: a caller that exchanges a few requests at a time (one
    /// change synced after another) allocates them once. Whatever was still
    /// pending or ready is dropped.
    pub fn restart(&mut self, first_seq: u32, limits: Limits, timeout: Duration) {
        // Field by field, in place: every field is named, so a new one
        // cannot be forgotten here.
        let Pipeline {
            timeout: self_timeout,
            fill,
            first_seq: self_first_seq,
            pending,
            open,
            state,
            dump_request,
            reasked,
            draining,
            settled_below,
            received,
            heard_at,
            dropped_foreign,
            ready,
        } = self;
        *self_timeout = timeout;
        fill.restart(first_seq, limits);
        *self_first_seq = first_seq;
        pending.clear();
        *open = 0;
        *state = State::Filling;
        *dump_request = None;
        *reasked = false;
        *draining = false;
        *settled_below = 0;
        *received = 0;
        *heard_at = None;
        *dropped_foreign = 0;
        ready.clear();
    }

    /// Makes room for `requests` requests in one datagram and their
    /// outcomes, at once: a bulk writer's queues would otherwise grow by
    /// doubling, each step copying them, on the thread that waits for the
    /// kernel.
    #[cfg_attr(not(feature = "unstable"), allow(dead_code))] // used through `unstable`
    pub fn reserve(&mut self, requests: usize) {
        self.fill.reserve(requests);
        self.pending.reserve(requests);
        self.ready.reserve(requests);
    }

    /// The sequence number the next request will get (every number below it
    /// is spent, answered or not).
    pub fn next_seq(&self) -> u32 {
        self.fill.next_seq
    }

    /// Datagrams dropped because they did not come from the kernel.
    pub fn dropped_foreign(&self) -> u64 {
        self.dropped_foreign
    }

    /// Whether another request may join the datagram being filled.
    pub fn has_room(&self) -> bool {
        self.state == State::Filling && self.fill.has_room()
    }

    /// [`Staged::push`] into the datagram being filled (`buf`, which the
    /// caller empties before its first push); [`Push::Full`] while a
    /// datagram is in flight.
    pub fn push<E>(
        &mut self,
        buf: &mut Vec<u8>,
        kind: Kind,
        tag: T,
        write: impl FnOnce(&mut Vec<u8>, u32, u16) -> Result<(), E>,
    ) -> Result<Push<T>, E> {
        if self.state != State::Filling {
            return Ok(Push::Full(tag));
        }
        self.fill.push(buf, kind, tag, write)
    }

    /// The datagram being filled, to push into directly; `None` while one is
    /// in flight.
    pub(crate) fn filling(&mut self) -> Option<&mut Staged<T, D>> {
        (self.state == State::Filling).then_some(&mut self.fill)
    }

    /// [`Pipeline::push`] for a request encoded beforehand (with any
    /// sequence number and flags): it is copied into `buf` and given its
    /// sequence number and its kind's flags there.
    #[cfg_attr(not(feature = "unstable"), allow(dead_code))] // used through `unstable`
    pub fn push_encoded(
        &mut self,
        buf: &mut Vec<u8>,
        kind: Kind,
        tag: T,
        request: &[u8],
    ) -> Push<T> {
        let copy = |out: &mut Vec<u8>, seq: u32, flags: u16| {
            let at = out.len();
            out.extend_from_slice(request);
            set_header(&mut out[at..], seq, flags);
            Ok::<(), std::convert::Infallible>(())
        };
        match self.push(buf, kind, tag, copy) {
            Ok(p) => p,
            Err(never) => match never {},
        }
    }

    /// Closes the datagram in `buf` (a quiet last request asks for an ACK)
    /// and returns whether there is anything to send; if so, the caller sends
    /// `buf` and calls [`Pipeline::on_sent`].
    pub fn seal(&mut self, buf: &mut [u8]) -> bool {
        if self.state != State::Filling || !self.fill.seal(buf) {
            return false;
        }
        // The queue of the datagram in flight is empty now; its room serves
        // the next datagram filled here.
        let room = std::mem::take(&mut self.pending);
        match self.fill.take_with(room) {
            Some(sealed) => {
                self.fly(sealed);
                true
            }
            None => false,
        }
    }

    /// Puts a datagram filled apart ([`Staged`], sealed and taken) in flight
    /// as [`Pipeline::seal`] would; `buf` holds its bytes, which the caller
    /// sends before calling [`Pipeline::on_sent`]. The pipeline must be idle
    /// (nothing in flight or pushed); otherwise the datagram comes back
    /// untouched. Its requests keep their numbers when they follow the
    /// pipeline's; when a dump asked again took a number meanwhile, `buf`
    /// is renumbered here, so that no answer can be taken for another's.
    pub fn launch(&mut self, mut staged: Staged<T, D>, buf: &mut [u8]) -> Result<(), Staged<T, D>> {
        if self.state != State::Filling
            || !self.fill.requests.is_empty()
            || !staged.sealed
            || staged.requests.is_empty()
        {
            return Err(staged);
        }
        if staged.first_seq != self.fill.next_seq {
            staged.renumber(buf, self.fill.next_seq);
        }
        self.fly(staged);
        Ok(())
    }

    /// Puts a sealed datagram in flight; the pipeline numbers on after it.
    fn fly(&mut self, mut sealed: Staged<T, D>) {
        self.fill.next_seq = sealed.next_seq;
        self.fill.first_seq = sealed.next_seq;
        std::mem::swap(&mut self.pending, &mut sealed.requests);
        self.first_seq = sealed.first_seq;
        self.dump_request = sealed.dump_request.take();
        self.open = self.pending.len();
        self.state = State::Answering;
    }

    /// The datagram (or a dump asked again) was sent at `now`.
    pub fn on_sent(&mut self, now: Instant) {
        if self.state == State::Reask {
            self.state = State::Answering;
        }
        self.heard_at = Some(now);
    }

    /// What to do next.
    pub fn next_io(&self) -> Io<'_> {
        match self.state {
            State::Filling => Io::Idle,
            State::Answering => Io::Recv {
                wait: !self.draining,
            },
            State::Reask => Io::Send(self.dump_request.as_deref().unwrap_or_default()),
        }
    }

    /// A whole datagram arrived at `now` from netlink port `sender` (0 is
    /// the kernel); each data message's body is decoded with `decode`.
    pub fn on_datagram(
        &mut self,
        now: Instant,
        bytes: &[u8],
        sender: u32,
        decode: &mut impl FnMut(&T, u16, &[u8]) -> Result<D, DecodeError>,
    ) {
        if sender != 0 {
            self.dropped_foreign += 1;
            return;
        }
        if self.state != State::Answering {
            return;
        }
        self.heard_at = Some(now);
        self.received += 1;
        for f in frame::frames(bytes) {
            let f = match f {
                Ok(f) => f,
                Err(e) => {
                    // Nothing later in this datagram can be trusted: whatever
                    // is still open fails with the reason, and the datagram
                    // in flight ends (anything more for it is stale to the
                    // next one).
                    for p in self.pending.iter_mut().filter(|p| p.done.is_none()) {
                        p.done = Some(Err(Failure::Decode(e.clone())));
                    }
                    self.open = 0;
                    break;
                }
            };
            if f.header.port != 0 && f.header.port != self.fill.limits.port {
                continue; // not an answer to this socket's requests
            }
            self.on_frame(f.header, f.body, decode);
        }
        self.check_done();
    }

    fn on_frame(
        &mut self,
        header: FrameHeader,
        body: FrameBody<'_>,
        decode: &mut impl FnMut(&T, u16, &[u8]) -> Result<D, DecodeError>,
    ) {
        let seq = header.seq;
        let slot = seq.wrapping_sub(self.first_seq) as usize;
        if slot >= self.pending.len() {
            return; // a stale answer to an abandoned exchange
        }
        // Every earlier "do" request still open was handled without an
        // answer: a quiet one succeeded, any other is the `Unanswered` case;
        // unless answers were dropped: then its answer may have been one of
        // them. Answers come in order, so each request is settled once.
        let below = self.settled_below.min(slot);
        self.settled_below = self.settled_below.max(slot);
        let draining = self.draining;
        for earlier in self.pending.range_mut(below..slot) {
            if earlier.kind != Kind::Dump && earlier.done.is_none() {
                earlier.done = Some(match (draining, earlier.kind) {
                    (true, _) => Err(Failure::Lost),
                    (false, Kind::Quiet) => Ok(()),
                    (false, _) => Err(Failure::Unanswered),
                });
                self.open -= 1;
            }
        }
        let received = self.received;
        let Some(p) = self.pending.get_mut(slot) else {
            return;
        };
        if p.done.is_some() {
            return; // a duplicate, or late after the request was settled
        }
        p.interrupted |= header.flags & NLM_F_DUMP_INTR != 0;
        let finished = match (body, p.kind) {
            (FrameBody::Data(body), _) => {
                if p.last_datagram != received {
                    p.last_datagram = received;
                    p.datagrams += 1;
                }
                if p.decode_error.is_none() && !p.truncated {
                    match decode(&p.tag, header.kind, body) {
                        Ok(m) => p.data.push(m),
                        Err(e) => p.decode_error = Some(e),
                    }
                }
                None
            }
            (FrameBody::Error(e), _) if e.is_ack() => Some(Ok(())),
            (FrameBody::Error(e), _) => Some(Err(Failure::Kernel(e))),
            (FrameBody::Done(0), Kind::Dump) => Some(Ok(())),
            (FrameBody::Done(code), Kind::Dump) => Some(Err(Failure::Kernel(NlError {
                code,
                request_seq: seq,
                ..NlError::default()
            }))),
            _ => None,
        };
        if let Some(r) = finished {
            p.done = Some(r);
            self.open -= 1;
        }
    }

    /// A datagram arrived cut off at `now`: `head` is what was kept. Its
    /// first header says whose answer it was. Everything else still to come
    /// is already queued (a "do" request's answers before `send` returned, a
    /// dump's next datagram by the receive that got this one), so the queue
    /// is drained without waiting from here on.
    pub fn on_truncated(&mut self, now: Instant, head: &[u8]) {
        if self.state != State::Answering {
            return;
        }
        self.heard_at = Some(now);
        if let Ok(h) = frame::first_header(head)
            && let Some(p) = self
                .pending
                .get_mut(h.seq.wrapping_sub(self.first_seq) as usize)
        {
            p.truncated = true;
        }
        self.draining = true;
    }

    /// A receive reported an overrun (`ENOBUFS`): the kernel dropped answers.
    /// What it had to say for "do" requests is already queued, so the queue
    /// is drained without waiting, and whatever stays unanswered is lost.
    pub fn on_overrun(&mut self) {
        if self.state == State::Answering {
            self.draining = true;
        }
    }

    /// A receive without waiting found the queue empty: the datagram in
    /// flight has had every answer it will get.
    pub fn on_empty(&mut self) {
        if self.state == State::Answering && self.draining {
            self.open = 0;
            self.check_done();
        }
    }

    /// A wait for a datagram ended empty at `now`. Once the kernel has been
    /// silent for the timeout, every open request of the datagram in flight
    /// times out; before that the driver waits again.
    pub fn on_silence(&mut self, now: Instant) {
        if self.state != State::Answering {
            return;
        }
        let waited = self
            .heard_at
            .map_or(self.timeout, |t| now.saturating_duration_since(t));
        if waited < self.timeout {
            return;
        }
        for p in self.pending.iter_mut().filter(|p| p.done.is_none()) {
            p.done = Some(Err(Failure::TimedOut { waited }));
        }
        self.open = 0;
        self.reasked = true; // a timed-out dump is not asked again
        self.check_done();
    }

    /// When the wait for the datagram in flight ends, if nothing arrives.
    pub fn deadline(&self) -> Option<Instant> {
        match self.state {
            State::Answering => self.heard_at.map(|t| t + self.timeout),
            _ => None,
        }
    }

    /// The next outcome, in the order the requests were pushed.
    pub fn poll_outcome(&mut self) -> Option<(T, Reply<D>)> {
        self.ready.pop_front().map(Pending::into_outcome)
    }

    /// Every outcome ready now, in order, taken at once: what
    /// [`Pipeline::poll_outcome`] would return until `None`.
    pub fn take_outcomes(&mut self) -> Outcomes<T, D> {
        Outcomes(std::mem::take(&mut self.ready))
    }

    fn check_done(&mut self) {
        if self.open == 0 && self.state == State::Answering {
            self.finish();
        }
    }

    /// Ends the datagram in flight: its outcomes become ready, unless its
    /// dump was cut and is to be asked again.
    fn finish(&mut self) {
        let last_cut = self
            .pending
            .back()
            .is_some_and(|p| p.kind == Kind::Dump && p.truncated);
        let mut keep = None;
        if last_cut && !self.reasked && self.dump_request.as_ref().is_some_and(|r| r.len() >= 12) {
            keep = self.pending.pop_back();
        }
        if self.ready.is_empty() {
            std::mem::swap(&mut self.pending, &mut self.ready);
        } else {
            self.ready.append(&mut self.pending);
        }
        self.draining = false;
        self.settled_below = 0;
        self.received = 0;
        self.open = 0;
        match keep {
            Some(last) => {
                // The socket now takes whole datagrams, and a dump only
                // reads: ask once more, under a new sequence number.
                let seq = self.fill.next_seq;
                self.fill.next_seq = seq.wrapping_add(1);
                self.fill.first_seq = self.fill.next_seq;
                self.first_seq = seq;
                if let Some(req) = self.dump_request.as_mut() {
                    set_header(req, seq, Kind::Dump.flags());
                }
                self.pending.push_back(Pending::new(last.tag, last.kind));
                self.open = 1;
                self.reasked = true;
                self.state = State::Reask;
            }
            None => {
                self.dump_request = None;
                self.reasked = false;
                self.state = State::Filling;
            }
        }
    }
}

/// Gives the request that starts `request` its sequence number and flags
/// (the header's other fields stay as the codec wrote them); shorter input
/// is left alone.
fn set_header(request: &mut [u8], seq: u32, flags: u16) {
    frame::set_flags(request, flags);
    if let Some(s) = request.get_mut(8..12) {
        s.copy_from_slice(&seq.to_ne_bytes());
    }
}
