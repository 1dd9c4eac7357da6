//! Pipelined request/reply exchanges over a [`GenlSocket`].
//!
//! Requests are written back to back into one datagram (a *chunk*), sent with
//! one `send`, and their replies matched to them by sequence number. The
//! kernel works through every message of a datagram in order, answering each,
//! before `send` returns, so a chunk is sized to keep its ACKs within the
//! receive buffer. A dump ends its chunk (a socket runs one dump at a time).
//!
//! Every request gets exactly one [`Reply`]: success, the kernel's error, a
//! decode error, [`Failure::Lost`] when the kernel dropped its answer
//! (`ENOBUFS`), or [`Failure::Unanswered`] when the kernel answered a later
//! request of the same datagram but never this one, so nothing is silently
//! lost and nothing waits for an answer that cannot come.
//!
//! A [`Kind::Quiet`] request asks for no ACK unless it is the last of its
//! datagram: the kernel answers it only when it fails, and queues the
//! answers of a datagram's requests in order before it starts the next, so
//! once a later request of the datagram is answered, a quiet request without
//! an answer succeeded (unless answers were dropped: then it is
//! [`Failure::Lost`]). This spares the kernel an ACK message and the reader
//! a receive per request.

use std::collections::VecDeque;
use std::io;

use super::socket::{Datagram, GenlSocket};
use crate::codec::frame::{self, FrameBody, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NlError};
use crate::codec::{DecodeError, IpvsMessage};

/// How a request is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A "do" request sent with `NLM_F_ACK`: zero or more data replies, then
    /// an ACK or an error.
    Ack,
    /// A dump (`NLM_F_DUMP`): data replies, then `NLMSG_DONE` or an error.
    Dump,
    /// A "do" request without data replies that is answered only when it
    /// fails (no `NLM_F_ACK`, except on the last request of a datagram):
    /// for requests whose handler never returns `EINTR`, since netlink does
    /// not answer that even as an error (see [`Failure::Unanswered`]) — the
    /// service and real-server changes, not `DEL_DAEMON`.
    Quiet,
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
}

/// The answer to one request, its data messages decoded into `D`
/// ([`IpvsMessage`] unless the caller decodes them itself, see
/// [`Exchange::run_decoded`]).
#[derive(Debug)]
pub struct Reply<D = IpvsMessage> {
    /// Data messages received for the request, in order.
    pub data: Vec<D>,
    /// How many datagrams carried those messages. A dump answered in more
    /// than one datagram was produced in several passes of the kernel's dump
    /// callback, and is not a snapshot.
    pub datagrams: usize,
    /// Outcome.
    pub result: Result<(), Failure>,
}

struct Pending<T, D> {
    index: usize,
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
    done: Option<Result<(), Failure>>,
}

impl<T, D> Pending<T, D> {
    fn new(index: usize, tag: T, kind: Kind) -> Self {
        Pending {
            index,
            tag,
            kind,
            data: Vec::new(),
            datagrams: 0,
            last_datagram: 0,
            decode_error: None,
            truncated: false,
            done: None,
        }
    }
}

/// Runs requests through a socket: chunking, sending, matching replies.
pub struct Exchange<'a> {
    sock: &'a mut GenlSocket,
    family: u16,
    seq: &'a mut u32,
}

/// `MSG_DONTWAIT`.
const MSG_DONTWAIT: i32 = 0x40;
/// `ENOBUFS`.
const ENOBUFS: i32 = 105;

impl<'a> Exchange<'a> {
    /// An exchange on `sock` for the family `family`, numbering requests from
    /// `*seq` on.
    pub fn new(sock: &'a mut GenlSocket, family: u16, seq: &'a mut u32) -> Self {
        Exchange { sock, family, seq }
    }

    /// Sends every request and calls `on_reply(index, tag, reply)` once for
    /// each, in order. Requests are taken from the iterator as they are sent,
    /// so a long run keeps only one chunk in memory; `tag` is the caller's
    /// context for the request, handed back with its reply. Returns early only
    /// on an I/O error of the socket itself; then the requests not yet
    /// answered have not been reported.
    pub fn run<I, T, F>(&mut self, requests: I, on_reply: F) -> io::Result<()>
    where
        I: IntoIterator<Item = (IpvsMessage, Kind, T)>,
        F: FnMut(usize, T, Reply),
    {
        self.run_decoded(requests, |_, body| frame::decode_message(body), on_reply)
    }

    /// [`Exchange::run`], with each data message's body (generic-netlink
    /// header first) handed to `decode` along with its request's tag, as it
    /// arrives: a large dump is decoded straight into the caller's values
    /// (e.g. [`crate::codec::reply::service_from_body`]) without building
    /// [`IpvsMessage`]s. The first decode error of a request fails it with
    /// [`Failure::Decode`]; its remaining messages are still consumed.
    pub fn run_decoded<I, T, D, Dec, F>(
        &mut self,
        requests: I,
        mut decode: Dec,
        mut on_reply: F,
    ) -> io::Result<()>
    where
        I: IntoIterator<Item = (IpvsMessage, Kind, T)>,
        Dec: FnMut(&T, &[u8]) -> Result<D, DecodeError>,
        F: FnMut(usize, T, Reply<D>),
    {
        let max_batch = self.sock.max_batch();
        let max_send = self.sock.max_send();
        let mut iter = requests.into_iter().enumerate();
        let mut carry: Option<(usize, (IpvsMessage, Kind, T))> = None;
        let mut buf = Vec::with_capacity(64 << 10);
        loop {
            buf.clear();
            let mut pending: VecDeque<Pending<T, D>> = VecDeque::new();
            let first_seq = self.seq.wrapping_add(1);
            // Where the chunk's dump request starts in `buf`, to ask again.
            let mut dump_at = None;
            // Where the chunk's last request starts: a quiet one asks for an
            // ACK there, to close the datagram.
            let mut last_at = 0;
            while let Some((index, (msg, kind, tag))) = carry.take().or_else(|| iter.next()) {
                let before = buf.len();
                let seq = self.seq.wrapping_add(1);
                let flags = match kind {
                    Kind::Ack => NLM_F_ACK,
                    Kind::Dump => NLM_F_DUMP,
                    Kind::Quiet => 0,
                };
                frame::encode_request(&mut buf, &msg, self.family, seq, flags)
                    .map_err(io::Error::other)?;
                if buf.len() > max_send && !pending.is_empty() {
                    // Does not fit this datagram: first of the next one.
                    buf.truncate(before);
                    carry = Some((index, (msg, kind, tag)));
                    break;
                }
                *self.seq = seq;
                last_at = before;
                pending.push_back(Pending::new(index, tag, kind));
                if kind == Kind::Dump {
                    dump_at = Some(before);
                    break;
                }
                if pending.len() >= max_batch {
                    break;
                }
            }
            if pending.is_empty() {
                return Ok(());
            }
            if pending.back().is_some_and(|p| p.kind == Kind::Quiet) {
                frame::set_flags(&mut buf[last_at..], NLM_F_REQUEST | NLM_F_ACK);
            }
            self.sock.send(&buf)?;
            self.collect(first_seq, &mut pending, &mut decode)?;
            if let Some(at) = dump_at {
                self.redo_truncated_dump(&buf[at..], &mut pending, &mut decode)?;
            }
            for p in pending {
                let result = match (p.done, p.decode_error, p.truncated) {
                    (_, _, true) => Err(Failure::Truncated),
                    (Some(Err(f)), _, _) => Err(f),
                    (_, Some(e), _) => Err(Failure::Decode(e)),
                    (Some(Ok(())), None, _) => Ok(()),
                    (None, None, _) => Err(Failure::Lost),
                };
                on_reply(
                    p.index,
                    p.tag,
                    Reply {
                        data: p.data,
                        datagrams: p.datagrams,
                        result,
                    },
                );
            }
        }
    }

    /// Asks again for a dump (the last request of a chunk, encoded in
    /// `request`) whose answer was cut off: the socket now takes whole
    /// datagrams, and a dump only reads, so asking twice is safe.
    fn redo_truncated_dump<T, D>(
        &mut self,
        request: &[u8],
        pending: &mut VecDeque<Pending<T, D>>,
        decode: &mut impl FnMut(&T, &[u8]) -> Result<D, DecodeError>,
    ) -> io::Result<()> {
        let Some(last) = pending.pop_back() else {
            return Ok(());
        };
        if !(last.kind == Kind::Dump && last.truncated) || request.len() < 12 {
            pending.push_back(last);
            return Ok(());
        }
        let seq = self.seq.wrapping_add(1);
        *self.seq = seq;
        let mut again = request.to_vec();
        again[8..12].copy_from_slice(&seq.to_ne_bytes());
        let mut one = VecDeque::from([Pending::new(last.index, last.tag, last.kind)]);
        self.sock.send(&again)?;
        self.collect(seq, &mut one, decode)?;
        pending.extend(one);
        Ok(())
    }

    /// Receives until every pending request of a chunk is answered.
    fn collect<T, D>(
        &mut self,
        first_seq: u32,
        pending: &mut VecDeque<Pending<T, D>>,
        decode: &mut impl FnMut(&T, &[u8]) -> Result<D, DecodeError>,
    ) -> io::Result<()> {
        let mut open = pending.len();
        let mut draining = false;
        // Requests below this index have had every answer they will get.
        let mut settled_below = 0;
        let mut received = 0usize;
        let port = self.sock.port();
        while open > 0 {
            let datagram = match self.recv(draining) {
                Ok(Some(Datagram::Whole(d))) => d,
                Ok(Some(Datagram::Truncated { head, .. })) => {
                    // Its messages are gone; its first header says whose they
                    // were. Everything else still to come is already queued
                    // (answers to "do" requests before `send` returned, a
                    // dump's next datagram by the receive that got this one),
                    // so drain without blocking from here on.
                    if let Ok(h) = frame::first_header(head)
                        && let Some(p) = pending.get_mut(h.seq.wrapping_sub(first_seq) as usize)
                    {
                        p.truncated = true;
                    }
                    draining = true;
                    continue;
                }
                Ok(None) => break, // draining, and the queue is empty
                Err(e) if e.raw_os_error() == Some(ENOBUFS) => {
                    // The kernel dropped answers. Everything it had to say for
                    // "do" requests is already queued (it answers them before
                    // send returns): drain without blocking, and whatever stays
                    // unanswered is reported as lost.
                    draining = true;
                    continue;
                }
                Err(e) => return Err(e),
            };
            received += 1;
            for f in frame::frames(datagram) {
                let f = f.map_err(io::Error::other)?;
                if f.header.port != 0 && f.header.port != port {
                    continue;
                }
                let slot = f.header.seq.wrapping_sub(first_seq) as usize;
                if slot >= pending.len() {
                    continue; // a stale answer to an abandoned exchange
                }
                // Every earlier "do" request still open was handled without
                // an answer: a quiet one succeeded, any other hit the
                // `Failure::Unanswered` case; unless answers were dropped:
                // then its answer may have been one of them. Answers come in
                // order, so each request is looked at once here.
                let below = settled_below.min(slot);
                settled_below = settled_below.max(slot);
                for earlier in pending.range_mut(below..slot) {
                    if earlier.kind != Kind::Dump && earlier.done.is_none() {
                        earlier.done = Some(match (draining, earlier.kind) {
                            (true, _) => Err(Failure::Lost),
                            (false, Kind::Quiet) => Ok(()),
                            (false, _) => Err(Failure::Unanswered),
                        });
                        open -= 1;
                    }
                }
                let Some(p) = pending.get_mut(slot) else {
                    continue;
                };
                if p.done.is_some() {
                    continue;
                }
                let finished = match (f.body, p.kind) {
                    (FrameBody::Data(body), _) => {
                        if p.last_datagram != received {
                            p.last_datagram = received;
                            p.datagrams += 1;
                        }
                        if p.decode_error.is_none() && !p.truncated {
                            match decode(&p.tag, body) {
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
                        request_seq: f.header.seq,
                        ..NlError::default()
                    }))),
                    _ => None,
                };
                if let Some(r) = finished {
                    p.done = Some(r);
                    open -= 1;
                }
            }
        }
        Ok(())
    }

    fn recv(&mut self, nonblocking: bool) -> io::Result<Option<Datagram<'_>>> {
        if !nonblocking {
            return self.sock.recv_datagram(0).map(Some);
        }
        match self.sock.recv_datagram(MSG_DONTWAIT) {
            Ok(d) => Ok(Some(d)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}
