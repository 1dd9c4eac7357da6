//! Sync daemons against a real kernel, in a test binary of their own.
//!
//! `stop_daemon` once waited 60 s for an ACK that never came, in
//! `kernel_handle` next to tests that spawn `ip netns exec`: the kernel had
//! stopped the daemon but answered nothing. The cause: `DEL_DAEMON` returns
//! `kthread_stop`'s result, which is `EINTR` when the sync thread had not
//! started running yet (a daemon stopped right after it was started, on a
//! busy machine), and `netlink_rcv_skb` sends no answer at all for `EINTR`.
//! `stop_daemon` now sends a `GET_INFO` behind it in the same datagram and
//! takes "that one answered, `DEL_DAEMON` not" as the `EINTR` path
//! (`netlink::Failure::Unanswered`). `stops_a_daemon_that_never_ran` below
//! provokes the race on purpose.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};

use ipvsctl::Error;
use ipvsctl::codec::request;
use ipvsctl::model::{DaemonRole, SyncDaemon};
use ipvsctl::unstable::{DumpSize, Exchange, Failure, Kind, NlSocket, Protocol};

/// Sync-daemon errnos: ENODEV, EEXIST, ESRCH.
#[test]
fn daemon_errnos() {
    let (_ns, h) = support::netns_with_handle();
    let e = h
        .start_daemon(&SyncDaemon::new(DaemonRole::Master, "nosuch0"))
        .unwrap_err();
    assert!(matches!(e, Error::NoSuchDevice { .. }), "{e}");
    let d = SyncDaemon::new(DaemonRole::Backup, "lo");
    h.start_daemon(&d).unwrap();
    assert!(matches!(
        h.start_daemon(&d),
        Err(Error::DaemonRunning { .. })
    ));
    h.stop_daemon(DaemonRole::Backup).unwrap();
    assert!(matches!(
        h.stop_daemon(DaemonRole::Backup),
        Err(Error::DaemonNotRunning { .. })
    ));
}

/// A daemon stopped before its sync thread ever ran: the kernel stops it and
/// answers nothing (`EINTR`). With both vCPUs kept busy, `NEW_DAEMON` and
/// `DEL_DAEMON` in one datagram hit that case; the exchange reports it as
/// `Unanswered` (instead of waiting for the timeout), the daemon is gone,
/// and `Handle::stop_daemon` right after `start_daemon` succeeds every time.
#[test]
fn stops_a_daemon_that_never_ran() {
    let (_ns, h) = support::netns_with_handle();
    let master = SyncDaemon::new(DaemonRole::Master, "lo");
    let busy = AtomicBool::new(true);
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let raced = std::thread::scope(|s| {
        for _ in 0..cpus {
            s.spawn(|| {
                while busy.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        // Whatever happens below, even a failed assertion, the spinners stop
        // (the scope joins them before a panic goes on).
        let _stop = StopOnDrop(&busy);
        let mut sock = NlSocket::open(
            &h.netns().into(),
            Protocol::Generic,
            DumpSize::Large,
            h.timeout(),
        )
        .expect("socket");
        let mut seq = 0;
        let mut raced = 0;
        for _ in 0..20 {
            let requests = [
                (request::new_daemon(&master).unwrap(), Kind::Ack, "start"),
                (request::del_daemon(DaemonRole::Master), Kind::Ack, "stop"),
                (request::get_info(), Kind::Ack, "info"),
            ];
            let mut outcomes = Vec::new();
            Exchange::new(&mut sock, &mut seq)
                .run(h.family_id(), requests, |_, what, reply| {
                    outcomes.push((what, reply.result))
                })
                .expect("exchange");
            match outcomes.as_slice() {
                [("start", Ok(())), ("stop", stop), ("info", Ok(()))] => match stop {
                    Ok(()) => {}
                    Err(Failure::Unanswered) => raced += 1,
                    Err(other) => panic!("stop: {other:?}"),
                },
                other => panic!("unexpected outcomes: {other:?}"),
            }
            assert!(h.list_daemons().unwrap().is_empty(), "the daemon is gone");
        }
        for _ in 0..20 {
            h.start_daemon(&master).unwrap();
            h.stop_daemon(DaemonRole::Master).unwrap();
            assert!(h.list_daemons().unwrap().is_empty());
        }
        raced
    });
    eprintln!("DEL_DAEMON unanswered (EINTR) in {raced} of 20 start+stop datagrams");
    assert!(
        raced > 0,
        "the race was never provoked: the test proved nothing"
    );
}

/// Clears the flag the spinner threads loop on when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}
