//! The crate's rtnetlink socket, shared by [`crate::nodeips`] and
//! [`crate::vip`]: opened in a pinned network namespace, connected to the
//! kernel, and with a bounded wait on every receive.
//!
//! Like the generic-netlink socket ([`super::GenlSocket`]) it is connected to
//! port 0 right after it is bound, so no other socket can answer in the
//! kernel's place, and every receive drops what does not come from the
//! kernel (datagrams queued before the `connect`).

use std::io;
use std::time::{Duration, Instant};

use netlink_sys::Socket;
use netlink_sys::protocols::NETLINK_ROUTE;

use super::netns::{NetNs, socket_in};
use super::{connect_to_kernel, from_kernel};

/// `MSG_TRUNC` from `<sys/socket.h>` (Linux): `recv` returns the real
/// datagram length even when it did not fit.
const MSG_TRUNC: i32 = 0x20;
/// The kernel caps dump datagrams near 32 KiB; twice that leaves margin.
const INITIAL_RECV_BUF: usize = 64 * 1024;
/// Socket receive buffer (`SO_RCVBUF`) asked for: room for the ACKs of a
/// pipelined batch of changes.
const SOCKET_RCVBUF: usize = 1024 * 1024;

/// How long a receive waits for the kernel by default. The kernel answers
/// an rtnetlink request while handling the send (and builds each further
/// dump datagram while the receive runs), so any real wait means something
/// is wrong.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The shortest timeout accepted: `SO_RCVTIMEO` counts in microseconds and
/// takes zero as "wait forever", so nothing near zero is allowed.
pub(crate) const MIN_TIMEOUT: Duration = Duration::from_millis(1);
/// The longest timeout accepted.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// Why a timeout is refused, or `None` when it is accepted.
pub(crate) fn check_timeout(timeout: Duration) -> Option<String> {
    if (MIN_TIMEOUT..=MAX_TIMEOUT).contains(&timeout) {
        None
    } else {
        Some(format!(
            "{timeout:?} is outside {MIN_TIMEOUT:?} to {MAX_TIMEOUT:?}"
        ))
    }
}

/// What one receive got.
#[derive(Debug)]
pub(crate) enum Received<'a> {
    /// A whole datagram from the kernel.
    Whole(&'a [u8]),
    /// A datagram of this many bytes that did not fit the buffer: it is
    /// lost. [`RouteSocket::grow`] makes the next one fit.
    Truncated(usize),
}

/// Why a receive failed.
#[derive(Debug)]
pub(crate) enum RecvError {
    /// Nothing came from the kernel for this long.
    TimedOut(Duration),
    /// The socket failed.
    Io(io::Error),
}

/// A bound, connected rtnetlink socket with its sequence counter and receive
/// buffer.
#[derive(Debug)]
pub(crate) struct RouteSocket {
    /// Pinned, so that a socket opened again ([`RouteSocket::reopen`]) is in
    /// the same namespace as the first.
    netns: NetNs,
    socket: Socket,
    timeout: Duration,
    seq: u32,
    buf: Vec<u8>,
}

impl RouteSocket {
    /// Pins `netns` and opens a socket there whose receives wait at most
    /// `timeout` (see [`check_timeout`]).
    pub(crate) fn open(netns: &NetNs, timeout: Duration) -> io::Result<Self> {
        if let Some(reason) = check_timeout(timeout) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("receive timeout {reason}"),
            ));
        }
        let netns = NetNs::Pinned(netns.pin()?);
        Ok(RouteSocket {
            socket: Self::socket(&netns, timeout)?,
            netns,
            timeout,
            seq: 0,
            buf: Vec::with_capacity(INITIAL_RECV_BUF),
        })
    }

    fn socket(netns: &NetNs, timeout: Duration) -> io::Result<Socket> {
        let mut socket = socket_in(netns, NETLINK_ROUTE)?;
        socket.bind_auto()?;
        connect_to_kernel(&socket)?;
        rustix::net::sockopt::set_socket_timeout(
            &socket,
            rustix::net::sockopt::Timeout::Recv,
            Some(timeout),
        )?;
        // Capped ACKs stay small however large the request; extended ACKs
        // carry the kernel's reason for a refusal.
        socket.set_cap_ack(true)?;
        socket.set_ext_ack(true)?;
        // Forced past `rmem_max` where permitted (CAP_NET_ADMIN), else as
        // large as allowed; best effort, callers' batches fit the default.
        if rustix::net::sockopt::set_socket_recv_buffer_size_force(&socket, SOCKET_RCVBUF).is_err()
        {
            let _ = socket.set_rx_buf_sz(SOCKET_RCVBUF);
        }
        Ok(socket)
    }

    /// Replaces the socket by a fresh one in the same namespace: whatever
    /// was still queued for the old one (the rest of an abandoned dump) is
    /// gone.
    pub(crate) fn reopen(&mut self) -> io::Result<()> {
        self.socket = Self::socket(&self.netns, self.timeout)?;
        Ok(())
    }

    /// The next request's sequence number.
    pub(crate) fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// The sequence number handed out last.
    pub(crate) fn seq(&self) -> u32 {
        self.seq
    }

    /// Sends one datagram (one or more requests).
    pub(crate) fn send(&self, bytes: &[u8]) -> io::Result<()> {
        loop {
            match self.socket.send(bytes, 0) {
                Ok(n) if n == bytes.len() => return Ok(()),
                Ok(n) => {
                    return Err(io::Error::other(format!(
                        "rtnetlink send wrote {n} of {} bytes",
                        bytes.len()
                    )));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Receives the next datagram from the kernel, waiting at most the
    /// socket's timeout for it (datagrams from other senders are dropped and
    /// do not extend the wait).
    pub(crate) fn recv(&mut self) -> Result<Received<'_>, RecvError> {
        let start = Instant::now();
        loop {
            self.buf.clear();
            let capacity = self.buf.capacity();
            let len = match self.socket.recv_from(&mut self.buf, MSG_TRUNC) {
                // Sent before the socket was connected, by another process.
                Ok((_, from)) if !from_kernel(&from) => {
                    if start.elapsed() >= self.timeout {
                        return Err(RecvError::TimedOut(start.elapsed()));
                    }
                    continue;
                }
                Ok((len, _)) => len,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // SO_RCVTIMEO expired: EAGAIN on a blocking socket.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Err(RecvError::TimedOut(start.elapsed()));
                }
                Err(e) => return Err(RecvError::Io(e)),
            };
            if len > capacity {
                return Ok(Received::Truncated(len));
            }
            return Ok(Received::Whole(self.buf.get(..len).unwrap_or_default()));
        }
    }

    /// Makes the buffer large enough for a datagram of `needed` bytes, with
    /// margin.
    pub(crate) fn grow(&mut self, needed: usize) {
        self.buf = Vec::with_capacity(needed.saturating_mul(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_near_zero_or_huge_are_refused() {
        assert!(check_timeout(Duration::ZERO).is_some());
        assert!(check_timeout(Duration::from_micros(999)).is_some());
        assert!(check_timeout(Duration::from_secs(3601)).is_some());
        assert!(check_timeout(MIN_TIMEOUT).is_none());
        assert!(check_timeout(DEFAULT_TIMEOUT).is_none());
        assert!(check_timeout(MAX_TIMEOUT).is_none());
        let err = RouteSocket::open(&NetNs::Current, Duration::ZERO).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    /// A socket nobody answers: the receive ends after the timeout, as a
    /// timeout, and says how long it waited.
    #[test]
    fn a_silent_kernel_is_a_timeout_not_a_hang() {
        let timeout = Duration::from_millis(50);
        let mut socket = RouteSocket::open(&NetNs::Current, timeout).unwrap();
        let start = Instant::now();
        match socket.recv() {
            Err(RecvError::TimedOut(waited)) => {
                assert!(waited >= timeout, "{waited:?}");
                assert!(start.elapsed() < Duration::from_secs(5));
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
    }
}
