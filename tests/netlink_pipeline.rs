//! The request pipeline on the host, no kernel: the datagrams captured from
//! real kernels (`tests/fixtures/`) replayed through it, and synthetic
//! faults (failures in the middle and at the end of a datagram, overruns,
//! cut datagrams, duplicate, stale and out-of-order answers, another
//! sender, silence). Every request must get exactly one outcome.

#[path = "fixtures/capture.rs"]
mod capture;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use ipvsctl::codec::frame::{self, FrameBody, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
use ipvsctl::codec::{IpvsMessage, request};
use ipvsctl::unstable::{Failure, Io, Kind, Limits, Pipeline, Push, Reply, Staged};

const FAMILY: u16 = 0x20;
const PORT: u32 = 4242;
const TIMEOUT: Duration = Duration::from_secs(5);
const EEXIST: i32 = 17;
const ENOENT: i32 = 2;

fn limits(max_batch: usize) -> Limits {
    Limits {
        port: PORT,
        max_send: 1 << 20,
        max_batch,
    }
}

fn pipeline(first_seq: u32, max_batch: usize) -> Pipeline<usize, IpvsMessage> {
    Pipeline::new(first_seq, limits(max_batch), TIMEOUT)
}

/// A netlink message of `kind` for `seq` from the kernel to `PORT`.
fn message(kind: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
    b.extend_from_slice(&kind.to_ne_bytes());
    b.extend_from_slice(&flags.to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&PORT.to_ne_bytes());
    b.extend_from_slice(payload);
    while b.len() % 4 != 0 {
        b.push(0);
    }
    b
}

/// An ACK (`errno` 0) or an error for `seq`, capped (the request's header
/// echoed, not its body).
fn answer(seq: u32, errno: i32) -> Vec<u8> {
    let mut payload = (-errno).to_ne_bytes().to_vec();
    payload.extend_from_slice(&message(FAMILY, 1, seq, &[])[..16]);
    message(frame::NLMSG_ERROR, 0x100, seq, &payload)
}

/// One data message for `seq`: a `GET_INFO` reply without attributes.
fn data(seq: u32) -> Vec<u8> {
    message(FAMILY, frame::NLM_F_MULTI, seq, &[15, 1, 0, 0])
}

fn done(seq: u32) -> Vec<u8> {
    message(
        frame::NLMSG_DONE,
        frame::NLM_F_MULTI,
        seq,
        &0i32.to_ne_bytes(),
    )
}

fn decode(_: &usize, _: u16, body: &[u8]) -> Result<IpvsMessage, ipvsctl::codec::DecodeError> {
    frame::decode_message(body)
}

/// Pushes `kinds` (tagged 0, 1, ...) into one datagram, seals and "sends"
/// it; returns the bytes sent.
fn send(pipe: &mut Pipeline<usize, IpvsMessage>, kinds: &[Kind], now: Instant) -> Vec<u8> {
    let mut buf = Vec::new();
    for (tag, &kind) in kinds.iter().enumerate() {
        let msg = request::flush();
        let pushed = pipe.push(&mut buf, kind, tag, |out, seq, flags| {
            frame::encode_request(out, &msg, FAMILY, seq, flags).map(drop)
        });
        assert!(matches!(pushed, Ok(Push::Added)), "request {tag} refused");
    }
    assert!(pipe.seal(&mut buf));
    pipe.on_sent(now);
    buf
}

fn feed(pipe: &mut Pipeline<usize, IpvsMessage>, now: Instant, datagram: &[u8]) {
    pipe.on_datagram(now, datagram, 0, &mut decode);
}

/// Every outcome ready, checking each tag comes once and in order.
fn outcomes(pipe: &mut Pipeline<usize, IpvsMessage>) -> Vec<(usize, Reply)> {
    let mut out = Vec::new();
    while let Some(o) = pipe.poll_outcome() {
        out.push(o);
    }
    let tags: Vec<usize> = out.iter().map(|(t, _)| *t).collect();
    let mut sorted = tags.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(tags, sorted, "outcomes out of order or repeated");
    out
}

fn errno(r: &Reply) -> Option<i32> {
    match &r.result {
        Err(Failure::Kernel(e)) => Some(e.errno()),
        _ => None,
    }
}

fn flags_of(datagram: &[u8]) -> Vec<u16> {
    frame::frames(datagram)
        .map(|f| f.unwrap().header.flags)
        .collect()
}

#[test]
fn only_the_last_quiet_request_asks_for_an_ack() {
    let mut pipe = pipeline(1, 64);
    let sent = send(&mut pipe, &[Kind::Quiet; 4], Instant::now());
    let acks: Vec<bool> = flags_of(&sent).iter().map(|f| f & NLM_F_ACK != 0).collect();
    assert_eq!(acks, [false, false, false, true]);
    assert_eq!(pipe.next_io(), Io::Recv { wait: true });
    feed(&mut pipe, Instant::now(), &answer(4, 0));
    let out = outcomes(&mut pipe);
    assert_eq!(out.len(), 4);
    assert!(out.iter().all(|(_, r)| r.result.is_ok()));
    assert_eq!(pipe.next_io(), Io::Idle);
    assert_eq!(pipe.next_seq(), 5);
}

/// The ACK the last quiet request of a datagram asks for is added to its
/// own flags: a create request (`NLM_F_CREATE`, as a conntrack entry's)
/// stays a create.
#[test]
fn the_last_quiet_request_keeps_its_own_flags() {
    const NLM_F_CREATE: u16 = 0x400;
    let mut pipe = pipeline(1, 64);
    let mut buf = Vec::new();
    for tag in 0..2 {
        let msg = request::flush();
        let pushed = pipe.push(&mut buf, Kind::Quiet, tag, |out, seq, flags| {
            frame::encode_request(out, &msg, FAMILY, seq, flags | NLM_F_CREATE).map(drop)
        });
        assert!(matches!(pushed, Ok(Push::Added)));
    }
    assert!(pipe.seal(&mut buf));
    assert_eq!(
        flags_of(&buf),
        [
            NLM_F_REQUEST | NLM_F_CREATE,
            NLM_F_REQUEST | NLM_F_CREATE | NLM_F_ACK
        ]
    );
}

#[test]
fn a_quiet_request_failing_in_the_middle_fails_alone() {
    let mut pipe = pipeline(10, 64);
    send(&mut pipe, &[Kind::Quiet; 5], Instant::now());
    let mut datagram = answer(12, EEXIST);
    datagram.extend(answer(14, 0));
    feed(&mut pipe, Instant::now(), &datagram);
    let out = outcomes(&mut pipe);
    let errnos: Vec<Option<i32>> = out.iter().map(|(_, r)| errno(r)).collect();
    assert_eq!(errnos, [None, None, Some(EEXIST), None, None]);
    assert!(out[0].1.result.is_ok() && out[4].1.result.is_ok());
}

#[test]
fn a_failing_last_request_settles_the_ones_before_it() {
    let mut pipe = pipeline(1, 64);
    send(&mut pipe, &[Kind::Quiet; 3], Instant::now());
    feed(&mut pipe, Instant::now(), &answer(3, ENOENT));
    let out = outcomes(&mut pipe);
    assert!(out[0].1.result.is_ok() && out[1].1.result.is_ok());
    assert_eq!(errno(&out[2].1), Some(ENOENT));
}

#[test]
fn quiet_lookups_are_answered_by_their_data() {
    // Lookups as `read::lookup` sends them: each answered by its data
    // reply (each in a datagram of its own, as the kernel sends them), a
    // missing service by an error, the last also by its ACK.
    let mut pipe = pipeline(1, 64);
    let sent = send(&mut pipe, &[Kind::Quiet; 4], Instant::now());
    let acks: Vec<bool> = flags_of(&sent).iter().map(|f| f & NLM_F_ACK != 0).collect();
    assert_eq!(acks, [false, false, false, true]);
    for datagram in [data(1), answer(2, ENOENT), data(3), data(4), answer(4, 0)] {
        feed(&mut pipe, Instant::now(), &datagram);
    }
    let out = outcomes(&mut pipe);
    let found: Vec<(usize, bool, Option<i32>)> = out
        .iter()
        .map(|(_, r)| (r.data.len(), r.result.is_ok(), errno(r)))
        .collect();
    assert_eq!(
        found,
        [
            (1, true, None),
            (0, false, Some(ENOENT)),
            (1, true, None),
            (1, true, None)
        ]
    );
}

#[test]
fn an_overrun_loses_every_unsettled_quiet_lookup() {
    let mut pipe = pipeline(1, 64);
    send(&mut pipe, &[Kind::Quiet; 3], Instant::now());
    feed(&mut pipe, Instant::now(), &data(1));
    pipe.on_overrun();
    // The second lookup's data was dropped: it is lost, never a lookup that
    // found nothing; and so is the first, whose data came but whose
    // outcome was not settled by a later answer before the overrun.
    assert_eq!(pipe.next_io(), Io::Recv { wait: false });
    feed(&mut pipe, Instant::now(), &answer(3, 0));
    pipe.on_empty();
    let out = outcomes(&mut pipe);
    assert!(matches!(out[0].1.result, Err(Failure::Lost)));
    assert!(matches!(out[1].1.result, Err(Failure::Lost)));
    assert!(out[1].1.data.is_empty());
    assert!(out[2].1.result.is_ok());
}

#[test]
fn an_ack_request_without_an_answer_is_unanswered() {
    let mut pipe = pipeline(1, 64);
    send(&mut pipe, &[Kind::Ack, Kind::Ack], Instant::now());
    feed(&mut pipe, Instant::now(), &answer(2, 0));
    let out = outcomes(&mut pipe);
    assert!(matches!(out[0].1.result, Err(Failure::Unanswered)));
    assert!(out[1].1.result.is_ok());
}

#[test]
fn an_overrun_makes_the_unanswered_lost() {
    let mut pipe = pipeline(1, 64);
    send(&mut pipe, &[Kind::Quiet; 4], Instant::now());
    feed(&mut pipe, Instant::now(), &answer(2, EEXIST));
    pipe.on_overrun();
    assert_eq!(pipe.next_io(), Io::Recv { wait: false });
    pipe.on_empty();
    let out = outcomes(&mut pipe);
    // Answered before the overrun (the kernel drops from the first answer
    // that finds the buffer full on; nothing reads while it answers).
    assert!(out[0].1.result.is_ok());
    assert_eq!(errno(&out[1].1), Some(EEXIST));
    assert!(matches!(out[2].1.result, Err(Failure::Lost)));
    assert!(matches!(out[3].1.result, Err(Failure::Lost)));
    // The pipeline is ready for the next datagram, numbered on.
    send(&mut pipe, &[Kind::Ack], Instant::now());
    feed(&mut pipe, Instant::now(), &answer(5, 0));
    assert!(outcomes(&mut pipe)[0].1.result.is_ok());
}

#[test]
fn a_cut_dump_is_asked_again_once() {
    let mut pipe = pipeline(7, 64);
    send(&mut pipe, &[Kind::Ack, Kind::Dump], Instant::now());
    feed(&mut pipe, Instant::now(), &answer(7, 0));
    let cut = data(8);
    pipe.on_truncated(Instant::now(), &cut[..16]);
    pipe.on_empty();
    // Asked again under a new number, with the dump flags.
    let again = match pipe.next_io() {
        Io::Send(b) => b.to_vec(),
        other => panic!("expected a re-ask, got {other:?}"),
    };
    let header = frame::frames(&again).next().unwrap().unwrap().header;
    assert_eq!(header.seq, 9);
    assert_eq!(header.flags & NLM_F_DUMP, NLM_F_DUMP);
    pipe.on_sent(Instant::now());
    let mut whole = data(9);
    whole.extend(data(9));
    whole.extend(done(9));
    feed(&mut pipe, Instant::now(), &whole);
    let out = outcomes(&mut pipe);
    assert_eq!(out.len(), 2);
    assert!(out[0].1.result.is_ok());
    assert!(out[1].1.result.is_ok());
    assert_eq!(out[1].1.data.len(), 2);
    assert_eq!(pipe.next_seq(), 10);
}

/// Stages `kinds` (tagged from `first_tag`) into one datagram apart from
/// any pipeline, seals it and takes it out; returns it with its bytes.
fn stage(
    staged: &mut Staged<usize, IpvsMessage>,
    kinds: &[Kind],
    first_tag: usize,
) -> (Staged<usize, IpvsMessage>, Vec<u8>) {
    let mut buf = Vec::new();
    for (i, &kind) in kinds.iter().enumerate() {
        let msg = request::flush();
        let pushed = staged.push(&mut buf, kind, first_tag + i, |out, seq, flags| {
            frame::encode_request(out, &msg, FAMILY, seq, flags).map(drop)
        });
        assert!(matches!(pushed, Ok(Push::Added)), "request {i} refused");
    }
    assert!(staged.seal(&mut buf));
    assert!(!staged.has_room(), "a sealed datagram takes nothing more");
    let datagram = staged.take().expect("sealed");
    assert!(staged.take().is_none(), "taken once");
    (datagram, buf)
}

fn seqs_of(datagram: &[u8]) -> Vec<u32> {
    frame::frames(datagram)
        .map(|f| f.unwrap().header.seq)
        .collect()
}

#[test]
fn datagrams_staged_apart_keep_the_rules_and_their_numbers() {
    let mut pipe = pipeline(40, 64);
    let mut staged = Staged::new(pipe.next_seq(), limits(64));
    // Two datagrams staged before the first is answered.
    let (first, mut first_bytes) = stage(&mut staged, &[Kind::Quiet; 3], 0);
    let (second, mut second_bytes) = stage(&mut staged, &[Kind::Quiet; 2], 3);
    assert_eq!(seqs_of(&first_bytes), [40, 41, 42]);
    assert_eq!(seqs_of(&second_bytes), [43, 44]);
    let acks: Vec<bool> = flags_of(&first_bytes)
        .iter()
        .map(|f| f & NLM_F_ACK != 0)
        .collect();
    assert_eq!(acks, [false, false, true]);
    pipe.launch(first, &mut first_bytes).expect("idle");
    pipe.on_sent(Instant::now());
    // Busy: the second comes back untouched.
    let second = pipe
        .launch(second, &mut second_bytes)
        .expect_err("one datagram in flight at a time");
    assert_eq!(second.len(), 2);
    let mut datagram = answer(41, EEXIST);
    datagram.extend(answer(42, 0));
    feed(&mut pipe, Instant::now(), &datagram);
    let taken: Vec<(usize, Reply)> = pipe.take_outcomes().collect();
    let errnos: Vec<(usize, Option<i32>)> = taken.iter().map(|(t, r)| (*t, errno(r))).collect();
    assert_eq!(errnos, [(0, None), (1, Some(EEXIST)), (2, None)]);
    assert!(taken[0].1.result.is_ok() && taken[2].1.result.is_ok());
    pipe.launch(second, &mut second_bytes).expect("idle again");
    pipe.on_sent(Instant::now());
    assert_eq!(seqs_of(&second_bytes), [43, 44], "numbers kept");
    feed(&mut pipe, Instant::now(), &answer(42, EEXIST)); // stale
    feed(&mut pipe, Instant::now(), &answer(44, 0));
    let out = outcomes(&mut pipe);
    let tags: Vec<usize> = out.iter().map(|(t, _)| *t).collect();
    assert_eq!(tags, [3, 4]);
    assert!(out.iter().all(|(_, r)| r.result.is_ok()));
    assert_eq!(pipe.next_seq(), 45);
    assert_eq!(pipe.take_outcomes().len(), 0);
}

#[test]
fn a_staged_datagram_is_renumbered_after_a_dump_asked_again() {
    let mut pipe = pipeline(1, 64);
    let mut staged = Staged::new(2, limits(64));
    // Staged while the dump (number 1) is in flight, numbered from 2.
    let (later, mut later_bytes) = stage(&mut staged, &[Kind::Quiet; 2], 1);
    send(&mut pipe, &[Kind::Dump], Instant::now());
    pipe.on_truncated(Instant::now(), &data(1)[..16]);
    pipe.on_empty();
    // The dump is asked again as number 2: the staged requests move on.
    assert!(matches!(pipe.next_io(), Io::Send(_)));
    pipe.on_sent(Instant::now());
    let mut whole = data(2);
    whole.extend(done(2));
    feed(&mut pipe, Instant::now(), &whole);
    assert!(outcomes(&mut pipe)[0].1.result.is_ok());
    assert_eq!(pipe.next_seq(), 3);
    pipe.launch(later, &mut later_bytes).expect("idle");
    pipe.on_sent(Instant::now());
    assert_eq!(seqs_of(&later_bytes), [3, 4]);
    let acks: Vec<bool> = flags_of(&later_bytes)
        .iter()
        .map(|f| f & NLM_F_ACK != 0)
        .collect();
    assert_eq!(acks, [false, true], "flags untouched by the renumbering");
    // A late answer under the dump's number is not taken for request 1.
    feed(&mut pipe, Instant::now(), &answer(2, EEXIST));
    feed(&mut pipe, Instant::now(), &answer(4, 0));
    let out = outcomes(&mut pipe);
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|(_, r)| r.result.is_ok()));
    assert_eq!(pipe.next_seq(), 5);
}

#[test]
fn the_room_of_taken_outcomes_serves_a_later_datagram() {
    let mut pipe = pipeline(1, 64);
    let mut staged = Staged::new(1, limits(64));
    staged.reserve(40);
    let (first, mut bytes) = stage(&mut staged, &[Kind::Quiet; 40], 0);
    pipe.launch(first, &mut bytes).expect("idle");
    pipe.on_sent(Instant::now());
    feed(&mut pipe, Instant::now(), &answer(40, 0));
    let mut taken = pipe.take_outcomes();
    // Partly used: the rest is dropped with the room handed back.
    assert_eq!(taken.by_ref().take(3).count(), 3);
    assert_eq!(taken.len(), 37);
    staged.reuse(taken);
    // The requests still work as before, numbered on.
    let (second, mut bytes) = stage(&mut staged, &[Kind::Quiet; 2], 40);
    assert_eq!(seqs_of(&bytes), [41, 42]);
    pipe.launch(second, &mut bytes).expect("idle");
    pipe.on_sent(Instant::now());
    feed(&mut pipe, Instant::now(), &answer(42, 0));
    let tags: Vec<usize> = pipe.take_outcomes().map(|(t, _)| t).collect();
    assert_eq!(tags, [40, 41]);
    // Not while a datagram is being filled: its requests stay.
    let mut open = Staged::new(43, limits(64));
    let mut buf = Vec::new();
    let msg = request::flush();
    let pushed = open.push(&mut buf, Kind::Quiet, 7, |out, seq, flags| {
        frame::encode_request(out, &msg, FAMILY, seq, flags).map(drop)
    });
    assert!(matches!(pushed, Ok(Push::Added)));
    open.reuse(pipe.take_outcomes());
    assert_eq!(open.len(), 1);
}

#[test]
fn launch_refuses_what_is_not_a_sealed_datagram() {
    let mut pipe = pipeline(1, 64);
    let mut bytes = Vec::new();
    // Empty.
    let empty: Staged<usize, IpvsMessage> = Staged::new(1, limits(64));
    assert!(pipe.launch(empty, &mut bytes).is_err());
    // Not sealed.
    let mut open = Staged::new(1, limits(64));
    let msg = request::flush();
    let pushed = open.push(&mut bytes, Kind::Quiet, 0, |out, seq, flags| {
        frame::encode_request(out, &msg, FAMILY, seq, flags).map(drop)
    });
    assert!(matches!(pushed, Ok(Push::Added)));
    let open = pipe.launch(open, &mut bytes).expect_err("not sealed");
    assert_eq!(open.len(), 1);
    // A request pushed into the pipeline itself: it is filling.
    let mut buf = Vec::new();
    let pushed = pipe.push(&mut buf, Kind::Quiet, 9, |out, seq, flags| {
        frame::encode_request(out, &msg, FAMILY, seq, flags).map(drop)
    });
    assert!(matches!(pushed, Ok(Push::Added)));
    let mut staged = Staged::new(2, limits(64));
    let (sealed, mut sealed_bytes) = stage(&mut staged, &[Kind::Quiet], 1);
    assert!(pipe.launch(sealed, &mut sealed_bytes).is_err());
    assert_eq!(pipe.next_io(), Io::Idle);
}

#[test]
fn a_dump_cut_twice_is_truncated() {
    let mut pipe = pipeline(1, 64);
    send(&mut pipe, &[Kind::Dump], Instant::now());
    pipe.on_truncated(Instant::now(), &data(1)[..16]);
    pipe.on_empty();
    assert!(matches!(pipe.next_io(), Io::Send(_)));
    pipe.on_sent(Instant::now());
    pipe.on_truncated(Instant::now(), &data(2)[..16]);
    pipe.on_empty();
    let out = outcomes(&mut pipe);
    assert_eq!(out.len(), 1);
    assert!(matches!(out[0].1.result, Err(Failure::Truncated)));
    assert_eq!(pipe.next_io(), Io::Idle);
}

#[test]
fn duplicate_stale_and_out_of_order_answers_change_nothing() {
    let mut pipe = pipeline(100, 64);
    send(&mut pipe, &[Kind::Quiet; 3], Instant::now());
    let mut datagram = answer(99, EEXIST); // stale: an abandoned exchange's
    datagram.extend(answer(7, ENOENT)); // long stale
    datagram.extend(answer(101, EEXIST));
    datagram.extend(answer(101, ENOENT)); // duplicate
    datagram.extend(answer(100, ENOENT)); // out of order: 100 is settled
    feed(&mut pipe, Instant::now(), &datagram);
    assert_eq!(pipe.next_io(), Io::Recv { wait: true });
    feed(&mut pipe, Instant::now(), &answer(102, 0));
    feed(&mut pipe, Instant::now(), &answer(102, EEXIST)); // after the end
    let out = outcomes(&mut pipe);
    assert_eq!(out.len(), 3);
    assert!(out[0].1.result.is_ok());
    assert_eq!(errno(&out[1].1), Some(EEXIST));
    assert!(out[2].1.result.is_ok());
}

#[test]
fn a_datagram_from_another_port_is_dropped_and_counted() {
    let mut pipe = pipeline(1, 64);
    send(&mut pipe, &[Kind::Ack], Instant::now());
    pipe.on_datagram(Instant::now(), &answer(1, EEXIST), 777, &mut decode);
    assert_eq!(pipe.dropped_foreign(), 1);
    assert_eq!(pipe.next_io(), Io::Recv { wait: true });
    // A message addressed to another socket's port is not ours either.
    let mut other = answer(1, ENOENT);
    other[12..16].copy_from_slice(&9u32.to_ne_bytes());
    feed(&mut pipe, Instant::now(), &other);
    feed(&mut pipe, Instant::now(), &answer(1, 0));
    assert!(outcomes(&mut pipe)[0].1.result.is_ok());
}

#[test]
fn silence_until_the_timeout_times_the_datagram_out() {
    let start = Instant::now();
    let mut pipe = pipeline(1, 64);
    send(&mut pipe, &[Kind::Quiet, Kind::Quiet, Kind::Dump], start);
    feed(
        &mut pipe,
        start + Duration::from_secs(1),
        &answer(1, EEXIST),
    );
    assert_eq!(
        pipe.deadline(),
        Some(start + Duration::from_secs(1) + TIMEOUT)
    );
    // Woken early: not yet.
    pipe.on_silence(start + Duration::from_secs(3));
    assert_eq!(pipe.next_io(), Io::Recv { wait: true });
    pipe.on_silence(start + Duration::from_secs(6));
    let out = outcomes(&mut pipe);
    assert_eq!(errno(&out[0].1), Some(EEXIST));
    for (_, r) in &out[1..] {
        match r.result {
            Err(Failure::TimedOut { waited }) => assert_eq!(waited, TIMEOUT),
            ref other => panic!("expected a timeout, got {other:?}"),
        }
    }
    assert_eq!(pipe.next_io(), Io::Idle);
    // Answers arriving late are stale for the next datagram.
    send(&mut pipe, &[Kind::Ack], start + Duration::from_secs(7));
    feed(
        &mut pipe,
        start + Duration::from_secs(7),
        &answer(2, ENOENT),
    );
    feed(&mut pipe, start + Duration::from_secs(7), &answer(4, 0));
    assert!(outcomes(&mut pipe)[0].1.result.is_ok());
}

#[test]
fn a_restarted_pipeline_forgets_everything_but_its_room() {
    let mut pipe = pipeline(1, 64);
    // Left mid-exchange: two requests open, one outcome not taken, a
    // foreign datagram counted.
    send(
        &mut pipe,
        &[Kind::Quiet, Kind::Quiet, Kind::Quiet],
        Instant::now(),
    );
    feed(&mut pipe, Instant::now(), &answer(1, EEXIST));
    pipe.on_datagram(Instant::now(), &answer(2, 0), 777, &mut decode);
    pipe.restart(40, limits(2), TIMEOUT);
    assert_eq!(pipe.next_io(), Io::Idle);
    assert_eq!(pipe.next_seq(), 40);
    assert_eq!(pipe.dropped_foreign(), 0);
    assert_eq!(pipe.deadline(), None);
    assert!(pipe.poll_outcome().is_none());
    // Numbered from the new start, within the new limits; the old
    // exchange's answers are stale.
    let sent = send(&mut pipe, &[Kind::Quiet, Kind::Quiet], Instant::now());
    let seqs: Vec<u32> = frame::frames(&sent)
        .map(|f| f.unwrap().header.seq)
        .collect();
    assert_eq!(seqs, [40, 41]);
    feed(&mut pipe, Instant::now(), &answer(3, ENOENT));
    assert_eq!(pipe.next_io(), Io::Recv { wait: true });
    feed(&mut pipe, Instant::now(), &answer(41, 0));
    let out = outcomes(&mut pipe);
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|(_, r)| r.result.is_ok()));
}

#[test]
fn a_malformed_datagram_fails_what_is_open() {
    let mut pipe = pipeline(1, 64);
    send(&mut pipe, &[Kind::Quiet, Kind::Quiet], Instant::now());
    let mut datagram = answer(1, EEXIST);
    datagram.extend_from_slice(&[200, 0, 0, 0, 2, 0]); // a header cut short
    feed(&mut pipe, Instant::now(), &datagram);
    // Done at once: what still comes for it is stale for the next datagram.
    assert_eq!(pipe.next_io(), Io::Idle);
    let out = outcomes(&mut pipe);
    assert_eq!(errno(&out[0].1), Some(EEXIST));
    assert!(matches!(out[1].1.result, Err(Failure::Decode(_))));
}

#[test]
fn datagrams_respect_the_limits() {
    let mut pipe = Pipeline::<usize, IpvsMessage>::new(
        1,
        Limits {
            port: PORT,
            max_send: 100,
            max_batch: 3,
        },
        TIMEOUT,
    );
    let msg = request::flush();
    let write = |out: &mut Vec<u8>, seq, flags| {
        frame::encode_request(out, &msg, FAMILY, seq, flags).map(drop)
    };
    let mut buf = Vec::new();
    // 20 bytes each: five fit 100 bytes, but three is the batch.
    for tag in 0..3 {
        assert!(matches!(
            pipe.push(&mut buf, Kind::Quiet, tag, write),
            Ok(Push::Added)
        ));
    }
    assert!(matches!(
        pipe.push(&mut buf, Kind::Quiet, 3, write),
        Ok(Push::Full(3))
    ));
    assert_eq!(buf.len(), 60);
    // A dump closes its datagram.
    let mut pipe = pipeline(1, 64);
    let mut buf = Vec::new();
    assert!(matches!(
        pipe.push(&mut buf, Kind::Dump, 0, write),
        Ok(Push::Added)
    ));
    // The first request always goes, however large.
    let mut pipe = Pipeline::<usize, IpvsMessage>::new(
        1,
        Limits {
            port: PORT,
            max_send: 10,
            max_batch: 8,
        },
        TIMEOUT,
    );
    let mut buf = Vec::new();
    assert!(matches!(
        pipe.push(&mut buf, Kind::Ack, 0, write),
        Ok(Push::Added)
    ));
    assert!(matches!(
        pipe.push(&mut buf, Kind::Ack, 1, write),
        Ok(Push::Full(1))
    ));
}

/// The kind a captured request was sent as.
fn kind_of(flags: u16) -> Kind {
    if flags & NLM_F_DUMP == NLM_F_DUMP {
        Kind::Dump
    } else if flags & NLM_F_ACK != 0 {
        Kind::Ack
    } else {
        Kind::Quiet
    }
}

/// Rewrites the sequence number of every message of a received datagram
/// with `map` (unknown numbers become stale ones) and its port to `PORT`.
fn renumber(datagram: &[u8], map: &BTreeMap<u32, u32>) -> Vec<u8> {
    let mut out = datagram.to_vec();
    let mut at = 0;
    while at + 16 <= out.len() {
        let len = u32::from_ne_bytes(out[at..at + 4].try_into().unwrap()) as usize;
        let seq = u32::from_ne_bytes(out[at + 8..at + 12].try_into().unwrap());
        let new = map.get(&seq).copied().unwrap_or(0xdead_0000);
        out[at + 8..at + 12].copy_from_slice(&new.to_ne_bytes());
        out[at + 12..at + 16].copy_from_slice(&PORT.to_ne_bytes());
        if len < 16 {
            break;
        }
        at += len.next_multiple_of(4);
    }
    out
}

/// Every captured exchange of both tools on every kernel, replayed: each
/// sent datagram's requests pushed (numbered anew), the kernel's datagrams
/// fed back, and each request's outcome compared with what the capture
/// says the kernel answered.
#[test]
fn captured_exchanges_replay_to_one_outcome_per_request() {
    let captures = capture::load();
    assert!(!captures.is_empty(), "no fixtures");
    let mut requests_seen = 0;
    for cap in &captures {
        for step in &cap.steps {
            let label = format!("{} {}", cap.label(), step.name);
            let mut pipe: Pipeline<usize, IpvsMessage> = pipeline(1000, 4096);
            let mut map = BTreeMap::new();
            // Expected per request: its errno (0 for an ACK) and data count.
            let mut expected: Vec<(Option<i32>, usize)> = Vec::new();
            let mut sent_base = 0;
            let mut i = 0;
            let d = &step.datagrams;
            while i < d.len() {
                if !d[i].sent {
                    i += 1; // an answer to nothing this step sent
                    continue;
                }
                let mut buf = Vec::new();
                let mut seqs = Vec::new();
                for f in frame::frames(&d[i].bytes) {
                    let f = f.unwrap_or_else(|e| panic!("{label}: {e}"));
                    let tag = expected.len();
                    let new = pipe.next_seq();
                    let at = seqs.len();
                    let bytes = &d[i].bytes;
                    let start = frame_start(bytes, at);
                    let one = &bytes[start..start + f.header.len as usize];
                    match pipe.push_encoded(&mut buf, kind_of(f.header.flags), tag, one) {
                        Push::Added => {}
                        Push::Full(_) => panic!("{label}: datagram over the limits"),
                    }
                    map.insert(f.header.seq, new);
                    seqs.push(f.header.seq);
                    expected.push((None, 0));
                }
                assert!(pipe.seal(&mut buf), "{label}");
                pipe.on_sent(Instant::now());
                i += 1;
                while i < d.len() && !d[i].sent {
                    for f in frame::frames(&d[i].bytes) {
                        let f = f.unwrap();
                        if let Some(slot) = seqs.iter().position(|s| *s == f.header.seq) {
                            let e = &mut expected[sent_base + slot];
                            match f.body {
                                FrameBody::Data(_) => e.1 += 1,
                                FrameBody::Error(err) => e.0 = e.0.or(Some(err.errno())),
                                _ => {}
                            }
                        }
                    }
                    let renumbered = renumber(&d[i].bytes, &map);
                    pipe.on_datagram(Instant::now(), &renumbered, 0, &mut decode);
                    i += 1;
                }
                if pipe.next_io() != Io::Idle {
                    // The capture ends here (a tool that stopped reading).
                    pipe.on_silence(Instant::now() + TIMEOUT);
                }
                sent_base = expected.len();
            }
            let out = outcomes(&mut pipe);
            assert_eq!(
                out.len(),
                expected.len(),
                "{label}: one outcome per request"
            );
            let tags: BTreeSet<usize> = out.iter().map(|(t, _)| *t).collect();
            assert_eq!(tags.len(), expected.len(), "{label}");
            for ((tag, reply), (errno_want, data_want)) in out.iter().zip(&expected) {
                match (errno_want, &reply.result) {
                    (Some(e), Err(Failure::Kernel(got))) if *e != 0 => {
                        assert_eq!(got.errno(), *e, "{label} #{tag}")
                    }
                    (Some(0), Ok(())) | (None, Ok(())) => {}
                    (None, Err(Failure::Unanswered | Failure::TimedOut { .. })) => {}
                    (want, got) => panic!("{label} #{tag}: expected {want:?}, got {got:?}"),
                }
                if reply.result.is_ok() {
                    assert_eq!(
                        reply.data.len(),
                        *data_want,
                        "{label} #{tag}: data messages"
                    );
                }
            }
            requests_seen += expected.len();
        }
    }
    assert!(
        requests_seen > 100,
        "only {requests_seen} requests replayed"
    );
}

/// Where the `n`th message of `bytes` starts.
fn frame_start(bytes: &[u8], n: usize) -> usize {
    let mut at = 0;
    for _ in 0..n {
        let len = u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        at += len.next_multiple_of(4);
    }
    at
}

// rtnetlink-shaped answers: the VIP device's address changes and the node
// IPs' link and address dumps go through the same pipeline.

/// `RTM_NEWLINK`, `NLM_F_DUMP_INTR`.
const RTM_NEWLINK: u16 = 16;
const NLM_F_DUMP_INTR: u16 = 0x10;

/// A link message for `seq` (an `ifinfomsg` for interface `index`, no
/// attributes) with `flags`.
fn link(seq: u32, index: u32, flags: u16) -> Vec<u8> {
    let mut ifinfomsg = [0u8; 16];
    ifinfomsg[4..8].copy_from_slice(&index.to_ne_bytes());
    message(RTM_NEWLINK, flags, seq, &ifinfomsg)
}

/// A pipeline of rtnetlink requests whose data is kept as (message type,
/// interface index).
fn route_pipeline(first_seq: u32) -> Pipeline<usize, (u16, u32)> {
    Pipeline::new(first_seq, limits(64), TIMEOUT)
}

fn decode_link(
    _: &usize,
    kind: u16,
    body: &[u8],
) -> Result<(u16, u32), ipvsctl::codec::DecodeError> {
    let index = body
        .get(4..8)
        .ok_or("short ifinfomsg")?
        .try_into()
        .map(u32::from_ne_bytes)
        .map_err(|_| "short ifinfomsg")?;
    Ok((kind, index))
}

/// Pushes `count` requests of `kind` (an rtnetlink request is bytes like any
/// other to the pipeline), seals and "sends" them.
fn send_route(pipe: &mut Pipeline<usize, (u16, u32)>, kind: Kind, count: usize) {
    let mut buf = Vec::new();
    for tag in 0..count {
        // RTM_NEWADDR / RTM_GETLINK alike: a header and a 16-byte body.
        let request = message(20, 0, 0, &[0; 16]);
        assert!(matches!(
            pipe.push_encoded(&mut buf, kind, tag, &request),
            Push::Added
        ));
    }
    assert!(pipe.seal(&mut buf));
    pipe.on_sent(Instant::now());
}

fn route_outcomes(pipe: &mut Pipeline<usize, (u16, u32)>) -> Vec<Reply<(u16, u32)>> {
    let mut out = Vec::new();
    while let Some((tag, reply)) = pipe.poll_outcome() {
        assert_eq!(tag, out.len());
        out.push(reply);
    }
    out
}

#[test]
fn an_interrupted_link_dump_is_reported_and_a_clean_one_is_not() {
    let mut pipe = route_pipeline(1);
    send_route(&mut pipe, Kind::Dump, 1);
    let multi = frame::NLM_F_MULTI;
    let mut first = link(1, 1, multi);
    first.extend(link(1, 2, multi | NLM_F_DUMP_INTR));
    pipe.on_datagram(Instant::now(), &first, 0, &mut decode_link);
    pipe.on_datagram(Instant::now(), &done(1), 0, &mut decode_link);
    let out = route_outcomes(&mut pipe);
    assert!(out[0].result.is_ok());
    assert!(out[0].interrupted);
    assert_eq!(out[0].data, [(RTM_NEWLINK, 1), (RTM_NEWLINK, 2)]);
    assert_eq!(out[0].datagrams, 1);

    send_route(&mut pipe, Kind::Dump, 1);
    let mut clean = link(2, 1, multi);
    clean.extend(done(2));
    pipe.on_datagram(Instant::now(), &clean, 0, &mut decode_link);
    let out = route_outcomes(&mut pipe);
    assert!(out[0].result.is_ok());
    assert!(!out[0].interrupted);
}

/// Five address changes in one datagram, each asking for an ACK; the kernel
/// answers the first two, then the receive buffer overruns. The third and
/// fourth answers were dropped: their outcome is unknown (lost), never a
/// success; the fifth, still queued, is read while draining.
#[test]
fn an_overrun_in_the_middle_of_an_address_batch_loses_only_the_dropped_answers() {
    let mut pipe = route_pipeline(1);
    send_route(&mut pipe, Kind::Ack, 5);
    let mut answered = answer(1, 0);
    answered.extend(answer(2, EEXIST));
    pipe.on_datagram(Instant::now(), &answered, 0, &mut decode_link);
    pipe.on_overrun();
    assert_eq!(pipe.next_io(), Io::Recv { wait: false });
    pipe.on_datagram(Instant::now(), &answer(5, 0), 0, &mut decode_link);
    pipe.on_empty();
    let out = route_outcomes(&mut pipe);
    assert_eq!(out.len(), 5);
    assert!(out[0].result.is_ok());
    assert!(matches!(&out[1].result, Err(Failure::Kernel(e)) if e.errno() == EEXIST));
    assert!(matches!(out[2].result, Err(Failure::Lost)));
    assert!(matches!(out[3].result, Err(Failure::Lost)));
    assert!(out[4].result.is_ok());
}

/// A link dump whose datagram did not fit the receive buffer: the rest of
/// the cut answer is drained, and the dump is asked again whole under a new
/// number; links of the cut attempt are not kept.
#[test]
fn a_cut_link_dump_is_asked_again_and_only_the_whole_answer_kept() {
    let mut pipe = route_pipeline(3);
    send_route(&mut pipe, Kind::Dump, 1);
    let multi = frame::NLM_F_MULTI;
    pipe.on_truncated(Instant::now(), &link(3, 1, multi)[..16]);
    assert_eq!(pipe.next_io(), Io::Recv { wait: false });
    let mut rest = link(3, 7, multi);
    rest.extend(done(3));
    pipe.on_datagram(Instant::now(), &rest, 0, &mut decode_link);
    let again = match pipe.next_io() {
        Io::Send(b) => b.to_vec(),
        other => panic!("expected the dump asked again, got {other:?}"),
    };
    let header = frame::frames(&again).next().unwrap().unwrap().header;
    assert_eq!(header.seq, 4);
    assert_eq!(header.flags & NLM_F_DUMP, NLM_F_DUMP);
    pipe.on_sent(Instant::now());
    // A late answer to the cut attempt is stale now.
    pipe.on_datagram(Instant::now(), &link(3, 9, multi), 0, &mut decode_link);
    let mut whole = link(4, 1, multi);
    whole.extend(link(4, 2, multi));
    whole.extend(done(4));
    pipe.on_datagram(Instant::now(), &whole, 0, &mut decode_link);
    let out = route_outcomes(&mut pipe);
    assert_eq!(out.len(), 1);
    assert!(out[0].result.is_ok());
    assert_eq!(out[0].data, [(RTM_NEWLINK, 1), (RTM_NEWLINK, 2)]);
}
