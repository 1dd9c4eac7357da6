//! The crate's one netlink socket, for generic netlink (IPVS), rtnetlink
//! (VIP devices, node IPs) and nfnetlink (connection tracking) alike:
//! opening in any namespace, connecting to the kernel, buffer sizing, raw
//! send, and the two receives the driver
//! ([`super::drive`]) uses. Everything about message layout lives in
//! [`crate::codec::frame`]; every rule about answers in
//! [`super::pipeline`].
//!
//! # The receive-deadline rule
//!
//! A wait for the kernel ends at a deadline (an [`Instant`]) that nothing
//! can push back. The driver hands [`NlSocket::recv_within`] the time left
//! before that deadline; the socket sets its receive timeout (`SO_RCVTIMEO`)
//! to it when it differs from the one set by more than a millisecond (so
//! the common case, a full timeout after an answer, costs no system call),
//! and a receive interrupted by a signal (`EINTR`) is returned as such
//! instead of being started again with a fresh timeout. The driver then
//! works out the time left anew: a periodic signal (tokio's SIGCHLD
//! handler, a profiler's timer) cannot keep a wait on a silent kernel going.

use std::io;
use std::time::Duration;

use netlink_sys::protocols::{NETLINK_GENERIC, NETLINK_NETFILTER, NETLINK_ROUTE};
use netlink_sys::{Socket, SocketAddr};
use rustix::net::sockopt;

use super::netns::{NetNs, socket_in};
use crate::Timeout;

/// Receive-buffer size asked for (forced where the caller has
/// `CAP_NET_ADMIN`, which IPVS and address changes need anyway). Pipelined
/// ACKs queue here while the kernel works through a batch;
/// [`NlSocket::max_batch`] keeps every batch's ACKs within it.
const RCVBUF: usize = 8 << 20;
/// Send-buffer size asked for: a batch is one datagram and must fit.
const SNDBUF: usize = 4 << 20;
/// The largest datagram the kernel builds for a dump is 32 KiB unless a
/// message needs more (an rtnetlink link message with many virtual
/// functions can); 64 KiB leaves room, and `MSG_TRUNC` detects anything
/// larger instead of losing it, after which the socket asks for that much.
pub(crate) const RECV_CHUNK: usize = 64 << 10;
/// The most a receive ever asks for, whatever length a cut datagram
/// reported.
const RECV_MAX: usize = 16 << 20;
/// `sizeof(struct skb_shared_info)` on x86-64 and arm64 kernels with the
/// default 17 fragments: what the kernel takes from a page before the data.
const SKB_SHARED_INFO: usize = 320;
/// Upper bound of the memory one queued ACK is charged (`skb->truesize` of a
/// small skb is 768 bytes on x86-64; doubled for safety).
const ACK_TRUESIZE: usize = 1536;
/// How far the receive timeout may be from the time left before it is set
/// again: a wait ends at most this long after its deadline.
const DEADLINE_SLACK: Duration = Duration::from_millis(1);

/// Which netlink protocol a socket speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Generic netlink (`NETLINK_GENERIC`): IPVS and its controller.
    Generic,
    /// rtnetlink (`NETLINK_ROUTE`): links and addresses.
    Route,
    /// nfnetlink (`NETLINK_NETFILTER`): connection tracking (ctnetlink).
    Netfilter,
}

impl Protocol {
    fn number(self) -> isize {
        match self {
            Protocol::Generic => NETLINK_GENERIC,
            Protocol::Route => NETLINK_ROUTE,
            Protocol::Netfilter => NETLINK_NETFILTER,
        }
    }
}

/// How large the datagrams are that the kernel builds for this socket's
/// dumps.
///
/// The kernel sizes every dump datagram by the largest receive the socket has
/// ever made (up to 32 KiB; it never shrinks back), and kernels built with
/// `init_on_alloc` (Debian's, among others) zero each one. A dump of one
/// service's real servers fills a fraction of a page, so on a large-buffer
/// socket most of its cost is zeroing two 32 KiB buffers. The table-wide
/// service dump is the opposite: the kernel walks the table from the start
/// for every datagram, so page-sized datagrams make it several times slower
/// on a large table. Figures: `docs/performance.md` in the repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DumpSize {
    /// One page (the kernel's `NLMSG_GOODSIZE`): for many small dumps.
    Page,
    /// 32 KiB, the kernel's largest: for dumps of the whole table.
    Large,
}

/// What one receive got.
#[derive(Debug)]
pub enum Datagram<'a> {
    /// The whole datagram.
    Whole(&'a [u8]),
    /// A datagram larger than the receive length: only `head` was kept (at
    /// least its first message header), the rest is gone. The socket asks
    /// for at least that length from then on, so the next one fits.
    Truncated {
        /// The bytes that were kept.
        head: &'a [u8],
        /// The datagram's real length.
        #[cfg_attr(not(feature = "unstable"), allow(dead_code))] // used through `unstable`
        len: usize,
    },
}

/// A bound, configured netlink socket that takes answers from the kernel
/// only.
///
/// Any process that may send netlink messages in the namespace (one with
/// `CAP_NET_ADMIN` over it, such as root of a container's user namespace)
/// can send datagrams to any port there, for example a forged ACK with the
/// sequence number a socket waits for. Every socket of the crate is therefore
/// connected to the kernel (port 0) right after it is bound: Linux then
/// refuses unicast datagrams to it from any other port (`ECONNREFUSED` to the
/// sender; `netlink_getsockbyportid` in `net/netlink/af_netlink.c` compares
/// a connected socket's `dst_portid` with the sender's port). Datagrams queued
/// before the `connect` are still in the queue, so every receive reports the
/// sender's port and the pipeline drops, and counts, what does not come
/// from the kernel ([`NlSocket::dropped_foreign`]).
#[derive(Debug)]
pub struct NlSocket {
    sock: Socket,
    port: u32,
    rcvbuf: usize,
    sndbuf: usize,
    /// The length every receive asks for: it decides the kernel's dump
    /// datagram size (see [`DumpSize`]).
    recv_len: usize,
    rx: Vec<u8>,
    /// Datagrams received from a sender other than the kernel, and dropped.
    dropped_foreign: u64,
    /// The bound of every wait.
    timeout: Timeout,
    /// What `SO_RCVTIMEO` is set to now.
    rcvtimeo: Duration,
}

impl NlSocket {
    /// Opens a socket of `protocol` in `ns`, binds it, connects it to the
    /// kernel (see [`NlSocket`]), enables extended and capped ACKs, sizes
    /// its buffers and bounds its waits by `timeout`.
    pub fn open(
        ns: &NetNs,
        protocol: Protocol,
        dumps: DumpSize,
        timeout: Timeout,
    ) -> io::Result<Self> {
        let mut sock = socket_in(ns, protocol.number())?;
        let addr = sock.bind_auto()?;
        connect_to_kernel(&sock)?;
        Self::configure(sock, addr, dumps, timeout)
    }

    /// Sets a bound, connected socket up (see [`NlSocket::open`]).
    pub(crate) fn configure(
        sock: Socket,
        addr: SocketAddr,
        dumps: DumpSize,
        timeout: Timeout,
    ) -> io::Result<Self> {
        // Extended ACKs carry the kernel's reason; capped ACKs keep every ACK
        // small (the request is not echoed back in full).
        sock.set_ext_ack(true)?;
        sock.set_cap_ack(true)?;
        let rcvbuf = size_buffer(&sock, RCVBUF, Direction::Receive);
        let sndbuf = size_buffer(&sock, SNDBUF, Direction::Send);
        let mut s = NlSocket {
            sock,
            port: addr.port_number(),
            rcvbuf,
            sndbuf,
            recv_len: RECV_CHUNK,
            rx: vec![0; RECV_CHUNK],
            dropped_foreign: 0,
            timeout,
            rcvtimeo: timeout.get(),
        };
        s.set_dump_size(dumps);
        s.set_timeout(timeout)?;
        Ok(s)
    }

    /// Bounds every wait of this socket: a wait for the kernel's answers
    /// that gets nothing for `timeout` ends (the exchange reports
    /// [`super::Failure::TimedOut`]), and so does a send that waits that
    /// long for buffer space. A send cannot be bounded beyond that: netlink
    /// runs the kernel's handler for each request inside `send`, in the
    /// calling thread, and nothing interrupts it.
    pub fn set_timeout(&mut self, timeout: Timeout) -> io::Result<()> {
        sockopt::set_socket_timeout(&self.sock, sockopt::Timeout::Recv, Some(timeout.get()))?;
        sockopt::set_socket_timeout(&self.sock, sockopt::Timeout::Send, Some(timeout.get()))?;
        self.timeout = timeout;
        self.rcvtimeo = timeout.get();
        Ok(())
    }

    /// The bound of every wait (see [`NlSocket::set_timeout`]).
    pub fn timeout(&self) -> Timeout {
        self.timeout
    }

    /// Counts datagrams from another sender that the pipeline dropped.
    pub(crate) fn count_foreign(&mut self, dropped: u64) {
        self.dropped_foreign += dropped;
    }

    /// Changes the receive length, and with it the size of the datagrams the
    /// kernel builds for this socket's dumps from now on. The kernel never
    /// shrinks that size back: a [`DumpSize::Page`] socket that has received
    /// large datagrams gets its next large one cut off, which the receive
    /// reports ([`Datagram::Truncated`]) and heals by asking for more.
    pub fn set_dump_size(&mut self, dumps: DumpSize) {
        self.recv_len = match dumps {
            DumpSize::Page => page_goodsize(),
            DumpSize::Large => RECV_CHUNK,
        };
    }

    /// The socket's netlink port id.
    pub fn port(&self) -> u32 {
        self.port
    }

    /// How many datagrams this socket received from a sender other than the
    /// kernel and dropped: sent to its port before it was connected (see
    /// [`NlSocket`]). Anything but 0 means another process in the
    /// namespace tried to answer in the kernel's place.
    #[cfg_attr(not(feature = "unstable"), allow(dead_code))] // used through `unstable`
    pub fn dropped_foreign(&self) -> u64 {
        self.dropped_foreign
    }

    /// How many ACK-answered requests may be in flight at once so that their
    /// ACKs never overflow the receive buffer.
    pub fn max_batch(&self) -> usize {
        (self.rcvbuf / 2 / ACK_TRUESIZE).clamp(1, 4096)
    }

    /// How many bytes one send may carry (the kernel refuses datagrams over
    /// `sndbuf - 32`).
    pub fn max_send(&self) -> usize {
        self.sndbuf.saturating_sub(64).max(4096)
    }

    /// Sends one datagram (one or more requests). A send interrupted by a
    /// signal before it sent anything is sent again.
    pub fn send(&self, buf: &[u8]) -> io::Result<()> {
        let n = loop {
            match self.sock.send(buf, 0) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        if n != buf.len() {
            return Err(io::Error::other(format!(
                "netlink send wrote {n} of {} bytes",
                buf.len()
            )));
        }
        Ok(())
    }

    /// One receive that waits at most about `left` (see the module's
    /// receive-deadline rule): the datagram and its sender's port (0 is the
    /// kernel). Nothing for `left` is `WouldBlock`; a signal is
    /// `Interrupted`, never a wait started again.
    pub(crate) fn recv_within(&mut self, left: Duration) -> io::Result<(Datagram<'_>, u32)> {
        // Zero would mean "wait for ever" to the kernel.
        let left = left.max(Duration::from_micros(1));
        if self.rcvtimeo.abs_diff(left) > DEADLINE_SLACK {
            sockopt::set_socket_timeout(&self.sock, sockopt::Timeout::Recv, Some(left))?;
            self.rcvtimeo = left;
        }
        self.recv_raw(0)
    }

    /// One receive that does not wait: an empty queue is `WouldBlock`.
    pub(crate) fn recv_now(&mut self) -> io::Result<(Datagram<'_>, u32)> {
        self.recv_raw(MSG_DONTWAIT)
    }

    /// One receive that waits at most the socket's timeout, from any sender
    /// (a cut datagram is an error): for benchmarks and tests that measure
    /// the kernel without the pipeline. A signal ends it (`Interrupted`).
    #[cfg_attr(not(feature = "unstable"), allow(dead_code))] // used through `unstable`
    pub fn recv(&mut self) -> io::Result<&[u8]> {
        let timeout = self.timeout.get();
        match self.recv_within(timeout)? {
            (Datagram::Whole(d), _) => Ok(d),
            (Datagram::Truncated { head, len }, _) => Err(io::Error::other(format!(
                "netlink datagram of {len} bytes truncated to {}",
                head.len()
            ))),
        }
    }

    /// One receive into the socket's buffer, with `MSG_TRUNC`: the datagram
    /// (cut if longer than asked) and its sender's port.
    fn recv_raw(&mut self, flags: i32) -> io::Result<(Datagram<'_>, u32)> {
        let want = self.recv_len;
        if self.rx.len() < want {
            self.rx.resize(want, 0);
        }
        let mut window = &mut self.rx[..want];
        let (n, from) = self.sock.recv_from(&mut window, MSG_TRUNC | flags)?;
        let sender = if from_kernel(&from) {
            0
        } else {
            from.port_number().max(1)
        };
        if n > want {
            // Ask for enough from now on: the kernel's next datagrams fit.
            self.recv_len = n.clamp(RECV_CHUNK, RECV_MAX);
            return Ok((
                Datagram::Truncated {
                    head: &self.rx[..want],
                    len: n,
                },
                sender,
            ));
        }
        Ok((Datagram::Whole(&self.rx[..n]), sender))
    }
}

/// Connects a bound netlink socket to the kernel (port 0, no groups): Linux
/// then refuses unicast datagrams to it from every other port (see
/// [`NlSocket`]). Needs no privilege.
pub(crate) fn connect_to_kernel(sock: &Socket) -> io::Result<()> {
    sock.connect(&SocketAddr::new(0, 0))
}

/// Whether a datagram's sender address is the kernel's (port 0). Every
/// unicast the kernel sends has port 0; another socket's datagram carries
/// that socket's port, which the kernel fills in and the sender cannot
/// choose.
pub(crate) fn from_kernel(sender: &SocketAddr) -> bool {
    sender.port_number() == 0
}

/// The kernel's `NLMSG_GOODSIZE`: a page (at most 8 KiB) less the skb's
/// shared info. Asking for exactly this keeps dump datagrams at one page; a
/// kernel whose value differs is caught by `MSG_TRUNC` and healed.
fn page_goodsize() -> usize {
    rustix::param::page_size().min(8192) - SKB_SHARED_INFO
}

enum Direction {
    Receive,
    Send,
}

/// Asks for `want` bytes, forcing past the system maximum where permitted,
/// and returns what the kernel granted (it reports the doubled value).
fn size_buffer(sock: &Socket, want: usize, dir: Direction) -> usize {
    let fd = &sock;
    let granted = match dir {
        Direction::Receive => {
            if sockopt::set_socket_recv_buffer_size_force(fd, want).is_err() {
                let _ = sockopt::set_socket_recv_buffer_size(fd, want);
            }
            sockopt::socket_recv_buffer_size(fd)
        }
        Direction::Send => {
            if sockopt::set_socket_send_buffer_size_force(fd, want).is_err() {
                let _ = sockopt::set_socket_send_buffer_size(fd, want);
            }
            sockopt::socket_send_buffer_size(fd)
        }
    };
    // The kernel doubles what it is given for bookkeeping; count half.
    granted.map_or(212_992 / 2, |g| g / 2)
}

/// `MSG_TRUNC`: make `recv` report a datagram's real length.
const MSG_TRUNC: i32 = 0x20;
/// `MSG_DONTWAIT`.
const MSG_DONTWAIT: i32 = 0x40;
