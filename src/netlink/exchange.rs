//! The driver of the [`Pipeline`] over an [`NlSocket`], for every protocol:
//! it only sends the datagrams the pipeline fills and receives what the
//! kernel answers, and hands every request's [`Reply`] to the caller. The
//! rules of packing and answering (quiet requests, overruns, cut datagrams,
//! duplicates, foreign senders, silence) are the pipeline's, see
//! [`super::pipeline`]; the receive-deadline rule is the socket's and this
//! driver's (see [`super::socket`]).

use std::io;
use std::time::{Duration, Instant};

use super::pipeline::{Failure, Io, Kind, Limits, Pipeline, Push, Reply};
use super::socket::{Datagram, NlSocket};
use crate::codec::ctrl::{self, FamilyInfo};
use crate::codec::frame::{self, EncodeError};
use crate::codec::{DecodeError, IpvsMessage};

/// Runs requests through a socket: packing, sending, matching replies.
pub struct Exchange<'a> {
    sock: &'a mut NlSocket,
    seq: &'a mut u32,
}

/// `ENOBUFS`.
const ENOBUFS: i32 = 105;
/// `ENOENT`: the controller's answer for an unknown family.
const ENOENT: i32 = 2;

impl<'a> Exchange<'a> {
    /// An exchange on `sock`, numbering requests from `*seq + 1` on; `*seq`
    /// is left at the last number spent.
    pub fn new(sock: &'a mut NlSocket, seq: &'a mut u32) -> Self {
        Exchange { sock, seq }
    }

    /// Sends every IPVS request (of the generic-netlink family `family`) and
    /// calls `on_reply(index, tag, reply)` once for each, in order.
    /// Requests are taken from the iterator as they are sent, so a long run
    /// keeps only one datagram's worth in memory; `tag` is the caller's
    /// context for the request, handed back with its reply. Every wait for
    /// the kernel ends at the socket's timeout after its last answer
    /// ([`NlSocket::timeout`]): requests of a datagram the kernel stays
    /// silent about get [`super::Failure::TimedOut`]. Returns early only on
    /// an I/O error of the socket itself; then the requests not yet answered
    /// have not been reported.
    #[cfg_attr(not(any(feature = "unstable", feature = "kmod")), allow(dead_code))] // used through `unstable` and `kmod`
    pub fn run<I, T, F>(&mut self, family: u16, requests: I, on_reply: F) -> io::Result<()>
    where
        I: IntoIterator<Item = (IpvsMessage, Kind, T)>,
        F: FnMut(usize, T, Reply),
    {
        self.run_decoded(
            family,
            requests,
            |_, body| frame::decode_message(body),
            on_reply,
        )
    }

    /// [`Exchange::run`], with each data message's body (generic-netlink
    /// header first) handed to `decode` along with its request's tag, as it
    /// arrives: a large dump is decoded straight into the caller's values
    /// (e.g. [`crate::codec::reply::service_from_body`]) without building
    /// [`IpvsMessage`]s. The first decode error of a request fails it with
    /// [`super::Failure::Decode`]; its remaining messages are still consumed.
    pub fn run_decoded<I, T, D, Dec, F>(
        &mut self,
        family: u16,
        requests: I,
        mut decode: Dec,
        on_reply: F,
    ) -> io::Result<()>
    where
        I: IntoIterator<Item = (IpvsMessage, Kind, T)>,
        Dec: FnMut(&T, &[u8]) -> Result<D, DecodeError>,
        F: FnMut(usize, T, Reply<D>),
    {
        let write = |msg: &IpvsMessage, out: &mut Vec<u8>, seq, flags| {
            frame::encode_request(out, msg, family, seq, flags).map(drop)
        };
        self.run_with(requests, write, |tag, _, body| decode(tag, body), on_reply)
    }

    /// The one loop under every exchange: requests of any protocol, each
    /// written by `write(request, buf, seq, flags)` (which appends exactly
    /// one message with that sequence number and at least those flags), each
    /// data message handed to `decode(tag, message_type, body)` as it
    /// arrives, and each outcome to `on_reply` in order.
    pub(crate) fn run_with<I, R, T, D, W, Dec, F>(
        &mut self,
        requests: I,
        write: W,
        mut decode: Dec,
        mut on_reply: F,
    ) -> io::Result<()>
    where
        I: IntoIterator<Item = (R, Kind, T)>,
        W: Fn(&R, &mut Vec<u8>, u32, u16) -> Result<(), EncodeError>,
        Dec: FnMut(&T, u16, &[u8]) -> Result<D, DecodeError>,
        F: FnMut(usize, T, Reply<D>),
    {
        let limits = Limits {
            port: self.sock.port(),
            max_send: self.sock.max_send(),
            max_batch: self.sock.max_batch(),
        };
        let timeout = self.sock.timeout().get();
        let mut pipe = Pipeline::new(self.seq.wrapping_add(1), limits, timeout);
        let mut iter = requests.into_iter().enumerate();
        let mut carry: Option<(usize, R, Kind, T)> = None;
        // Grown as requests are added (and kept across this exchange's
        // datagrams): a 64 KiB buffer for a one-request exchange made glibc
        // move its heap top (brk) on every call.
        let mut buf = Vec::with_capacity(4 << 10);
        let mut decode = |tag: &(usize, T), kind: u16, body: &[u8]| decode(&tag.1, kind, body);
        let result = 'run: loop {
            buf.clear();
            while pipe.has_room() {
                let Some((index, request, kind, tag)) = carry
                    .take()
                    .or_else(|| iter.next().map(|(i, (r, k, t))| (i, r, k, t)))
                else {
                    break;
                };
                let written = |out: &mut Vec<u8>, seq, flags| write(&request, out, seq, flags);
                match pipe.push(&mut buf, kind, (index, tag), written) {
                    Ok(Push::Added) => {}
                    Ok(Push::Full((index, tag))) => {
                        carry = Some((index, request, kind, tag));
                        break;
                    }
                    Err(e) => break 'run Err(io::Error::other(e)),
                }
            }
            if !pipe.seal(&mut buf) {
                break Ok(());
            }
            if let Err(e) = drive(self.sock, &mut pipe, &buf, &mut decode) {
                break Err(e);
            }
            while let Some(((index, tag), reply)) = pipe.poll_outcome() {
                on_reply(index, tag, reply);
            }
        };
        self.finish(&pipe);
        result
    }

    /// Resolves a generic-netlink family by name through the controller.
    /// `Ok(None)` means the kernel has no such family (for IPVS: the module
    /// is not loaded and could not be autoloaded).
    pub fn resolve_family(&mut self, name: &str) -> io::Result<Option<FamilyInfo>> {
        let write = |name: &&str, out: &mut Vec<u8>, seq, flags| {
            ctrl::encode_get_family(out, name, seq, flags);
            Ok(())
        };
        let mut found = Ok(None);
        self.run_with(
            [(name, Kind::Ack, ())],
            write,
            |_, _, body| ctrl::decode_family(body),
            |_, (), reply| {
                found = match reply.result {
                    Ok(()) => Ok(reply.data.into_iter().next_back()),
                    Err(Failure::Kernel(e)) if e.errno() == ENOENT => Ok(None),
                    Err(Failure::Kernel(e)) => Err(io::Error::from_raw_os_error(e.errno())),
                    Err(Failure::TimedOut { waited }) => Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no answer from the generic-netlink controller in {waited:?}"),
                    )),
                    Err(other) => Err(io::Error::other(format!(
                        "generic-netlink controller: {other:?}"
                    ))),
                };
            },
        )?;
        found
    }

    /// Books what a pipeline spent: sequence numbers and foreign datagrams.
    fn finish<T, D>(&mut self, pipe: &Pipeline<T, D>) {
        *self.seq = pipe.next_seq().wrapping_sub(1);
        self.sock.count_foreign(pipe.dropped_foreign());
    }
}

/// Sends the sealed datagram `datagram` and does the pipeline's I/O until
/// its outcomes are ready. The pipeline drops (and counts) datagrams from
/// any sender but the kernel.
///
/// Every wait ends at the pipeline's deadline (its timeout after the
/// kernel last answered): each receive is given the time left before it,
/// and a receive that a signal or another sender's datagram ended is
/// followed by one given the time left then, never a full timeout again.
pub(crate) fn drive<T, D>(
    sock: &mut NlSocket,
    pipe: &mut Pipeline<T, D>,
    datagram: &[u8],
    decode: &mut impl FnMut(&T, u16, &[u8]) -> Result<D, DecodeError>,
) -> io::Result<()> {
    sock.send(datagram)?;
    pipe.on_sent(Instant::now());
    loop {
        let wait = match pipe.next_io() {
            Io::Idle => return Ok(()),
            Io::Send(bytes) => {
                sock.send(bytes)?;
                pipe.on_sent(Instant::now());
                continue;
            }
            Io::Recv { wait } => wait,
        };
        let received = if wait {
            let now = Instant::now();
            let left = pipe
                .deadline()
                .map_or(Duration::ZERO, |d| d.saturating_duration_since(now));
            if left.is_zero() {
                pipe.on_silence(now);
                continue;
            }
            sock.recv_within(left)
        } else {
            sock.recv_now()
        };
        match received {
            Ok((Datagram::Whole(d), sender)) => pipe.on_datagram(Instant::now(), d, sender, decode),
            Ok((Datagram::Truncated { .. }, sender)) if sender != 0 => {
                pipe.on_datagram(Instant::now(), &[], sender, decode)
            }
            Ok((Datagram::Truncated { head, .. }, _)) => pipe.on_truncated(Instant::now(), head),
            Err(e) if e.raw_os_error() == Some(ENOBUFS) => pipe.on_overrun(),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && !wait => pipe.on_empty(),
            // Not a receive that waits: nothing to bound, ask again.
            Err(e) if e.kind() == io::ErrorKind::Interrupted && !wait => {}
            // The time left ran out, or a signal ended the wait: the
            // pipeline times the datagram out once its deadline has passed,
            // and the next receive gets only what is left.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                pipe.on_silence(Instant::now())
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::thread::JoinHandleExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::Timeout;
    use crate::codec::frame::NLM_F_CAPPED;
    use crate::netlink::netns::NetNs;
    use crate::netlink::socket::{DumpSize, Protocol};

    /// `NLMSG_NOOP` as a dump request: below `NLMSG_MIN_TYPE`, without
    /// `NLM_F_ACK`, so the kernel takes it and never answers.
    fn unanswered_request() -> Vec<u8> {
        let mut req = Vec::new();
        // Flags are the pipeline's to set (`NLM_F_REQUEST | NLM_F_DUMP`).
        for word in [16u32, 1, 0, 0] {
            req.extend_from_slice(&word.to_ne_bytes());
        }
        req
    }

    /// A signal every few milliseconds (tokio's SIGCHLD handler is one real
    /// source) interrupts every receive; the wait for a silent kernel still
    /// ends at its deadline, not one full timeout after the last signal.
    #[test]
    fn signals_cannot_extend_a_wait_for_a_silent_kernel() {
        const SIGNAL: i32 = signal_hook::consts::SIGUSR2;
        let timeout = Duration::from_millis(200);
        let caught = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(SIGNAL, Arc::clone(&caught)).unwrap();
        let (done_tx, done_rx) = mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let mut sock = NlSocket::open(
                &NetNs::Current,
                Protocol::Generic,
                DumpSize::Large,
                Timeout::new(timeout).unwrap(),
            )
            .unwrap();
            let limits = Limits {
                port: sock.port(),
                max_send: sock.max_send(),
                max_batch: sock.max_batch(),
            };
            let mut pipe = Pipeline::<(), ()>::new(1, limits, timeout);
            let mut buf = Vec::new();
            pipe.push_encoded(&mut buf, Kind::Dump, (), &unanswered_request());
            assert!(pipe.seal(&mut buf));
            let start = Instant::now();
            drive(&mut sock, &mut pipe, &buf, &mut |_, _, _| Ok(())).unwrap();
            let waited = start.elapsed();
            let (_, reply) = pipe.poll_outcome().unwrap();
            let _ = done_tx.send((waited, reply.result));
        });
        let stop = Arc::new(AtomicBool::new(false));
        let target = waiter.as_pthread_t();
        let signaller = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: `target` is the waiting thread, which is still
                    // joinable (it is joined only after `stop` is set), so
                    // its pthread_t is valid; the signal has a handler that
                    // only sets a flag.
                    unsafe { libc::pthread_kill(target, SIGNAL) };
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        };
        // The watchdog: a wait that signals keep going is a failure here,
        // not a hung test.
        let outcome = done_rx.recv_timeout(timeout * 10);
        stop.store(true, Ordering::Relaxed);
        signaller.join().unwrap();
        let (waited, result) = outcome.expect("the wait outlived ten timeouts under signals");
        assert!(caught.load(Ordering::Relaxed), "no signal was delivered");
        assert!(
            matches!(result, Err(Failure::TimedOut { .. })),
            "{result:?}"
        );
        assert!(waited >= timeout, "{waited:?}");
        assert!(waited < timeout + Duration::from_millis(100), "{waited:?}");
        waiter.join().unwrap();
    }

    const EPERM: i32 = 1;
    const ECONNREFUSED: i32 = 111;

    /// An `NLMSG_ERROR` answer with `errno` for request `seq`, as another
    /// socket could forge it.
    fn forged_error(seq: u32, errno: i32) -> Vec<u8> {
        let mut b = Vec::new();
        for word in [36u32, 2 | (u32::from(NLM_F_CAPPED) << 16), seq, 0] {
            b.extend_from_slice(&word.to_ne_bytes());
        }
        b.extend_from_slice(&(-errno).to_ne_bytes());
        for word in [20u32, 0x10 | (5 << 16), seq, 0] {
            b.extend_from_slice(&word.to_ne_bytes());
        }
        b
    }

    /// A datagram another socket queued before the connect ("nlctrl does
    /// not exist") is dropped and counted; later ones are refused.
    #[test]
    fn datagrams_from_other_sockets_are_refused_or_dropped() {
        use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_GENERIC};
        let mut sock = Socket::new(NETLINK_GENERIC).unwrap();
        let addr = sock.bind_auto().unwrap();
        let mut forger = Socket::new(NETLINK_GENERIC).unwrap();
        forger.bind_auto().unwrap();
        let to = SocketAddr::new(addr.port_number(), 0);
        match forger.send_to(&forged_error(1, ENOENT), &to, 0) {
            Ok(_) => {}
            // Sending to another port needs CAP_NET_ADMIN: nothing to test.
            Err(e) if e.raw_os_error() == Some(EPERM) => return,
            Err(e) => panic!("{e}"),
        }
        crate::netlink::socket::connect_to_kernel(&sock).unwrap();
        let refused = forger.send_to(&forged_error(1, ENOENT), &to, 0);
        assert_eq!(
            refused.map_err(|e| e.raw_os_error()),
            Err(Some(ECONNREFUSED))
        );
        let mut sock =
            NlSocket::configure(sock, addr, DumpSize::Page, Timeout::HANDLE_DEFAULT).unwrap();
        let mut seq = 0;
        let family = Exchange::new(&mut sock, &mut seq)
            .resolve_family("nlctrl")
            .unwrap();
        assert_eq!(family.map(|f| f.id), Some(0x10), "took the forged answer");
        assert_eq!(sock.dropped_foreign(), 1);
    }
}
