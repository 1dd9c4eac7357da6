//! The sync's write path: plan operations written straight into the send
//! buffer (no intermediate message values, no allocation per operation) and
//! sent pipelined on the syncer's own socket, every answer matched to its
//! operation by sequence number.
//!
//! The datagrams are packed and their answers settled by the crate's one
//! request pipeline ([`crate::netlink::pipeline`]): only the last request of
//! each datagram asks for an ACK, a request without an answer before a later
//! one's succeeded, an overrun makes the unanswered `Error::Lost`. This
//! saves the kernel an ACK message and the syncer a receive per request
//! (measured in the guest: the raw replay of a 1,000 × 10 cold apply in
//! 177 ms instead of 307 ms).
//!
//! This is the crate's second route from an IPVS operation to its bytes,
//! kept because it is measured to pay; the first is `Write::encode` and
//! `frame::encode_request`, which `Handle::apply` uses. The bytes are
//! exactly the first route's (a unit test below checks every operation
//! kind), and they cannot disagree on an attribute: only the netlink
//! framing is written here, while which attributes a request carries and
//! their bytes come from `codec::request::write_*`, the same code the
//! request builders use. Building the generic message values costs five
//! times the direct write: `benches/codec.rs` ("encode routes") put 10,000
//! `NEW_DEST` operations through `Write::encode` at 5.2 times the direct
//! writer's time (median of 21 alternating rounds, spread 1.9 to 8.6, on a
//! shared host; about 5.9 ms against 1.0 ms), and under emulation that
//! difference is as large as the kernel's own work.

use std::io;
use std::sync::mpsc;

use crate::Error;
use crate::batch::Write;
use crate::codec::attr::{begin_nest, end_nest};
use crate::codec::consts::{FAMILY_VERSION, cmd_attr};
use crate::codec::frame;
use crate::codec::request;
use crate::handle::outcome;
use crate::netlink::Failure;
use crate::netlink::pipeline::{Kind, Limits, Outcomes, Pipeline, Push, Reply, Staged};
use crate::netlink::{DumpSize, NlSocket, Protocol, drive};

/// Appends one request for `op` with the header flags `flags`
/// (`NLM_F_REQUEST` is always set). The operation must be valid (plan
/// operations are: desired values are validated on insertion, deletes name
/// objects the kernel reported).
pub(crate) fn encode(out: &mut Vec<u8>, op: &Write, family: u16, seq: u32, flags: u16) {
    let start =
        frame::push_request_header(out, family, flags, seq, op.cmd().to_raw(), FAMILY_VERSION);
    let svc = begin_nest(out, cmd_attr::SERVICE);
    match op {
        Write::AddService(vs) | Write::UpdateService(vs) => {
            request::write_service_attrs(out, vs);
            end_nest(out, svc);
        }
        Write::DeleteService(key) => {
            request::write_key_attrs(out, key);
            end_nest(out, svc);
        }
        Write::AddDestination(key, rs) | Write::UpdateDestination(key, rs) => {
            request::write_key_attrs(out, key);
            end_nest(out, svc);
            let d = begin_nest(out, cmd_attr::DEST);
            request::write_dest_attrs(out, rs);
            end_nest(out, d);
        }
        Write::DeleteDestination(key, addr) => {
            request::write_key_attrs(out, key);
            end_nest(out, svc);
            let d = begin_nest(out, cmd_attr::DEST);
            request::write_del_dest_attrs(out, *addr);
            end_nest(out, d);
        }
    }
    // Plan operations are far below netlink's 4 GiB length limit.
    let len = (out.len() - start) as u32;
    out[start..start + 4].copy_from_slice(&len.to_ne_bytes());
}

/// The syncer's write socket.
#[derive(Debug)]
pub(crate) struct Writer {
    sock: NlSocket,
    family: u16,
    seq: u32,
    /// The datagram buffer of small sends, kept across them (a sync of one
    /// change would otherwise allocate it every time).
    buf: Vec<u8>,
    /// The pipeline of small sends, restarted for each with its queues' room
    /// kept, for the same reason.
    small: Pipeline<usize, ()>,
}

impl Writer {
    /// A write socket in the handle's namespace, with its timeout.
    pub(crate) fn open(handle: &crate::Handle) -> io::Result<Writer> {
        let sock = NlSocket::open(
            &handle.netns().into(),
            Protocol::Generic,
            DumpSize::Large,
            handle.timeout(),
        )?;
        let small = Pipeline::new(1, limits(&sock, false), sock.timeout().get());
        Ok(Writer {
            sock,
            family: handle.family_id(),
            seq: 0,
            buf: Vec::new(),
            small,
        })
    }

    /// Sends `ops` in order, as many per datagram as the socket's buffers
    /// allow (or one per round trip), and calls `on_result(index, result)`
    /// exactly once per operation, in order. Returns how the send ended;
    /// `Err` when the socket itself failed (operations not reported by then
    /// have unknown outcomes).
    ///
    /// More than [`PIPELINE_FROM`] requests run as a pipeline of three threads:
    /// one fills the next datagram (a [`Staged`] one: encoded, numbered and
    /// packed) while another waits in `send` for the kernel (which does its
    /// work inside that call) and this one makes the outcomes of the previous
    /// datagram and reports them (the caller's bookkeeping). The thread the
    /// kernel waits for only puts each datagram in flight and takes its
    /// answers, so the library's own work hides behind the kernel's.
    pub(crate) fn send(
        &mut self,
        ops: &[Write],
        one_by_one: bool,
        mut on_result: impl FnMut(usize, Result<(), Error>),
    ) -> io::Result<Sent> {
        let limits = limits(&self.sock, one_by_one);
        let (max_batch, max_send) = (limits.max_batch, limits.max_send);
        let family = self.family;
        let first_seq = self.seq.wrapping_add(1);
        let timeout = self.sock.timeout().get();
        let sock = &mut self.sock;
        let mut timed_out = false;
        let mut on_reply = |index: usize, reply: Reply<()>| {
            timed_out |= matches!(reply.result, Err(Failure::TimedOut { .. }));
            report_one(ops, index, reply, &mut on_result);
        };
        let (result, next_seq, foreign) = if one_by_one || ops.len() <= PIPELINE_FROM {
            // Written straight into the datagram, on this thread.
            let pipe = &mut self.small;
            pipe.restart(first_seq, limits, timeout);
            let buf = &mut self.buf;
            let mut next = 0;
            let mut outcome = Ok(());
            while next < ops.len() && outcome.is_ok() {
                buf.clear();
                if let Some(fill) = pipe.filling() {
                    next = stage(fill, buf, ops, next, usize::MAX, family);
                }
                if !pipe.seal(buf) {
                    break;
                }
                outcome = drive(sock, pipe, buf, &mut |_, _, _| Ok(()));
                while let Some((index, reply)) = pipe.poll_outcome() {
                    on_reply(index, reply);
                }
            }
            (outcome, pipe.next_seq(), pipe.dropped_foreign())
        } else {
            let mut pipe = Pipeline::new(first_seq, limits, timeout);
            let outcome = std::thread::scope(|scope| {
                let (staged_tx, staged_rx) = mpsc::sync_channel::<(Staged<usize, ()>, Vec<u8>)>(1);
                let (spent_tx, spent_rx) = mpsc::sync_channel::<Vec<u8>>(2);
                let (outcomes_tx, outcomes_rx) = mpsc::sync_channel::<Outcomes<usize, ()>>(1);
                let (booked_tx, booked_rx) = mpsc::sync_channel::<Outcomes<usize, ()>>(2);
                scope.spawn(move || {
                    let mut staged = Staged::new(first_seq, limits);
                    let (mut next, mut ramp) = (0, RAMP_FROM);
                    while next < ops.len() {
                        let count = ramped(ramp, ops.len() - next, max_batch);
                        ramp = ramp.saturating_mul(RAMP_STEP);
                        let room = count.saturating_mul(ESTIMATED_OP_LEN).min(max_send);
                        // The buffers and the bookkeeping room of datagrams
                        // done with come back: nothing of this size is
                        // allocated or given back for each datagram.
                        let mut buf = spent_rx.try_recv().unwrap_or_default();
                        buf.clear();
                        buf.reserve(room);
                        if let Ok(booked) = booked_rx.try_recv() {
                            staged.reuse(booked);
                        }
                        staged.reserve(count);
                        next = stage(&mut staged, &mut buf, ops, next, count, family);
                        let Some(datagram) = staged.seal(&mut buf).then(|| staged.take()).flatten()
                        else {
                            return;
                        };
                        if staged_tx.send((datagram, buf)).is_err() {
                            return; // the sender stopped on a socket error
                        }
                    }
                });
                let pipe = &mut pipe;
                let sender = scope.spawn(move || -> io::Result<()> {
                    for (datagram, mut buf) in staged_rx {
                        if pipe.launch(datagram, &mut buf).is_err() {
                            // The pipeline is idle between datagrams, and a
                            // staged one is sealed and holds requests.
                            return Err(io::Error::other(
                                "the request pipeline refused a datagram",
                            ));
                        }
                        drive(sock, pipe, &buf, &mut |_, _, _| Ok(()))?;
                        let gone = outcomes_tx.send(pipe.take_outcomes()).is_err();
                        // Kept for a later datagram when the encoder wants it.
                        let _ = spent_tx.try_send(buf);
                        if gone {
                            break;
                        }
                    }
                    Ok(())
                });
                for mut outcomes in outcomes_rx {
                    for (index, reply) in outcomes.by_ref() {
                        on_reply(index, reply);
                    }
                    // Kept for a later datagram when the encoder wants it.
                    let _ = booked_tx.try_send(outcomes);
                }
                match sender.join() {
                    Ok(r) => r,
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            });
            (outcome, pipe.next_seq(), pipe.dropped_foreign())
        };
        self.seq = next_seq.wrapping_sub(1);
        self.sock.count_foreign(foreign);
        // Each request takes one number: fewer spent than operations would
        // be operations never sent nor reported, which must not pass for a
        // finished send.
        let sent = next_seq.wrapping_sub(first_seq) as usize;
        result.and_then(|()| {
            if sent == ops.len() {
                Ok(Sent {
                    answered: !timed_out,
                })
            } else {
                Err(io::Error::other(format!(
                    "the writer stopped after {sent} of {} requests",
                    ops.len()
                )))
            }
        })
    }
}

/// How a [`Writer::send`] that ran to its end went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sent {
    /// Whether every request was answered. A socket with a request the
    /// kernel stayed silent about is not used again: its answer could still
    /// come.
    pub(crate) answered: bool,
}

/// How `sock` packs a datagram: one request per datagram `one_by_one`,
/// otherwise as many as its buffers allow.
fn limits(sock: &NlSocket, one_by_one: bool) -> Limits {
    Limits {
        port: sock.port(),
        max_send: sock.max_send(),
        max_batch: if one_by_one { 1 } else { sock.max_batch() },
    }
}

/// About the encoded length of one plan operation (a service with a
/// scheduler, or a real server with its key), to size encode buffers.
const ESTIMATED_OP_LEN: usize = 128;

/// Plans with more requests than this are sent as a pipeline.
const PIPELINE_FROM: usize = 4 * RAMP_FROM;
/// The pipeline's first and smallest datagram, in requests.
const RAMP_FROM: usize = 64;
/// Each datagram of the ramp takes this many times the requests of the one
/// before it.
const RAMP_STEP: usize = 8;

/// How many requests the pipeline's next datagram takes: `ramp` (growing
/// from [`RAMP_FROM`] by [`RAMP_STEP`]) while it starts, never more than
/// `max_batch` or what is left. Small datagrams at the start shorten the
/// stages' serial part: the kernel starts after 64 requests are encoded
/// instead of a full datagram's 2,730 (measured in the guest on a
/// 1,000 x 10 cold apply: first `send` 1-2 ms after the start instead of
/// 16-31 ms). But each datagram costs the kernel and the sending thread a
/// round of their own, so the ramp is short: 64, 512, then full datagrams.
/// The encoding thread fills the next datagram in far less time than the
/// kernel takes for the current one, so a step of 8 never leaves the kernel
/// waiting for long; a step of 2 cost more in datagrams than it saved (see
/// docs/performance.md). The end is not ramped down: halving the last
/// datagrams shortened the bookkeeping after the last answer (20-60 us
/// instead of 190-280 us), but the extra datagrams cost more than that:
/// without them a 1,000 x 10 cold sync took 1.28-1.30 times the raw replay
/// instead of 1.34-1.40 (6.1 guest, 21 alternating pairs, two rounds of
/// each build).
fn ramped(ramp: usize, left: usize, max_batch: usize) -> usize {
    ramp.min(left).min(max_batch).max(1)
}

/// Writes up to `count` operations from `ops[next..]` into the datagram
/// `buf` that `staged` is filling, straight from the plan, as many as fit;
/// returns the index of the first operation left out.
fn stage(
    staged: &mut Staged<usize, ()>,
    buf: &mut Vec<u8>,
    ops: &[Write],
    mut next: usize,
    count: usize,
    family: u16,
) -> usize {
    let end = next.saturating_add(count);
    while next < end
        && let Some(op) = ops.get(next)
    {
        let write = |out: &mut Vec<u8>, seq, flags| {
            encode(out, op, family, seq, flags);
            Ok::<(), std::convert::Infallible>(())
        };
        match staged.push(buf, Kind::Quiet, next, write) {
            Ok(Push::Added) => next += 1,
            Ok(Push::Full(_)) => break,
            Err(never) => match never {},
        }
    }
    next
}

/// Hands one answer to `on_result` as the result of `ops[index]`.
fn report_one(
    ops: &[Write],
    index: usize,
    reply: Reply<()>,
    on_result: &mut impl FnMut(usize, Result<(), Error>),
) {
    let Some(op) = ops.get(index) else {
        return;
    };
    if reply.result.is_ok() {
        // No description of the operation is made for a success.
        on_result(index, Ok(()));
    } else {
        on_result(index, outcome(op.cmd(), &op.target(), reply).map(drop));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::frame::{self, NLM_F_ACK};
    use crate::model::{AddressFamily, ForwardMethod, RealServer, TunnelEncap};
    use crate::model::{Netmask, PersistenceEngine, Protocol, Scheduler, Tunnel, TunnelFlags};
    use crate::model::{ServiceKey, VirtualServer};
    use std::net::SocketAddr;

    fn check(op: Write) {
        let mut fast = Vec::new();
        encode(&mut fast, &op, 0x24, 77, NLM_F_ACK);
        let mut reference = Vec::new();
        frame::encode_request(&mut reference, &op.encode().unwrap(), 0x24, 77, NLM_F_ACK).unwrap();
        assert_eq!(fast, reference, "{op:?}");
        assert!(fast.len() >= frame::NLMSG_HDRLEN);
    }

    #[test]
    fn bytes_match_the_codec() {
        let keys = [
            ServiceKey::tcp("10.96.0.1:80".parse().unwrap()),
            ServiceKey::udp("[2001:db8::1]:53".parse().unwrap()),
            ServiceKey::Addr {
                protocol: Protocol::Sctp,
                addr: "10.0.0.1:3868".parse().unwrap(),
            },
            ServiceKey::fwmark(7, AddressFamily::Inet6),
        ];
        for key in keys {
            let mut vs = VirtualServer::new(key)
                .with_scheduler(Scheduler::from_name("mh"))
                .with_persistence(300)
                .with_netmask(Netmask::from_prefix(key.family(), 24));
            check(Write::AddService(vs.clone()));
            vs.persistence_engine = Some(PersistenceEngine::sip());
            vs.scheduler = Scheduler::from_name("abcdefghijklmno");
            check(Write::UpdateService(vs));
            check(Write::DeleteService(key));
            let other: SocketAddr = match key.family() {
                AddressFamily::Inet => "[2001:db8::9]:0".parse().unwrap(),
                AddressFamily::Inet6 => "10.1.2.3:0".parse().unwrap(),
            };
            let same: SocketAddr = match key.family() {
                AddressFamily::Inet => "10.244.0.1:8080".parse().unwrap(),
                AddressFamily::Inet6 => "[2001:db8::2]:8080".parse().unwrap(),
            };
            for rs in [
                RealServer::new(same).with_weight(5).with_thresholds(10, 3),
                RealServer::new(same).with_forward(ForwardMethod::Masquerade),
                RealServer::new(other).with_forward(ForwardMethod::Tunnel(Tunnel {
                    encap: TunnelEncap::Gue { port: 6080 },
                    flags: TunnelFlags::CSUM,
                })),
                RealServer::new(other).with_forward(ForwardMethod::Tunnel(Tunnel::IPIP)),
            ] {
                check(Write::AddDestination(key, rs));
                check(Write::UpdateDestination(key, rs));
                check(Write::DeleteDestination(key, rs.addr));
            }
        }
    }
}
