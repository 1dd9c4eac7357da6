//! One generic-netlink socket: opening (in any namespace), buffer sizing,
//! family resolution, raw send and receive. Everything about message layout
//! lives in [`crate::codec::frame`].

use std::io;
use std::time::Duration;

use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_GENERIC};

use super::netns::{NetNs, socket_in};
use crate::codec::ctrl;
use crate::codec::frame::{self, FrameBody};

/// Receive-buffer size asked for (forced where the caller has
/// `CAP_NET_ADMIN`, which IPVS needs anyway). Pipelined ACKs queue here while
/// the kernel works through a batch; [`GenlSocket::max_batch`] keeps every
/// batch's ACKs within it.
const RCVBUF: usize = 8 << 20;
/// Send-buffer size asked for: a batch is one datagram and must fit.
const SNDBUF: usize = 4 << 20;
/// The largest datagram the kernel builds for a dump is 32 KiB (and a
/// non-capped error echoes at most a request); 64 KiB leaves room, and
/// `MSG_TRUNC` detects anything larger instead of losing it.
pub(crate) const RECV_CHUNK: usize = 64 << 10;
/// `sizeof(struct skb_shared_info)` on x86-64 and arm64 kernels with the
/// default 17 fragments: what the kernel takes from a page before the data.
const SKB_SHARED_INFO: usize = 320;
/// How long a receive (or a send that waits for buffer space) may wait for
/// the kernel before it is an error, unless set otherwise
/// ([`GenlSocket::set_timeout`]).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Upper bound of the memory one queued ACK is charged (`skb->truesize` of a
/// small skb is 768 bytes on x86-64; doubled for safety).
const ACK_TRUESIZE: usize = 1536;

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
    /// least its first message header), the rest is gone. The socket has
    /// switched to [`DumpSize::Large`], so this cannot happen twice.
    Truncated {
        /// The bytes that were kept.
        head: &'a [u8],
        /// The datagram's real length.
        len: usize,
    },
}

/// A bound, configured generic-netlink socket that takes answers from the
/// kernel only.
///
/// Any process that may send netlink messages in the namespace (one with
/// `CAP_NET_ADMIN` over it, such as root of a container's user namespace)
/// can send datagrams to any port there, for example a forged ACK with the
/// sequence number a socket waits for. Every socket of the crate is therefore
/// connected to the kernel (port 0) right after it is bound: Linux then
/// refuses unicast datagrams to it from any other port (`ECONNREFUSED` to the
/// sender; `netlink_getsockbyportid` in `net/netlink/af_netlink.c` compares
/// a connected socket's `dst_portid` with the sender's port). Datagrams queued
/// before the `connect` are still in the queue, so every receive also checks
/// the sender's address and drops, and counts, what does not come from the
/// kernel ([`GenlSocket::dropped_foreign`]).
#[derive(Debug)]
pub struct GenlSocket {
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
    timeout: Duration,
    /// What `SO_RCVTIMEO` is set to now.
    rcvtimeo: Duration,
}

impl GenlSocket {
    /// Opens a socket in `ns`, binds it, connects it to the kernel (see
    /// [`GenlSocket`]), enables extended and capped ACKs and sizes its
    /// buffers; its dumps come in [`DumpSize::Large`] datagrams.
    pub fn open(ns: &NetNs) -> io::Result<Self> {
        Self::open_with(ns, DumpSize::Large)
    }

    /// [`GenlSocket::open`] with a choice of dump datagram size.
    pub fn open_with(ns: &NetNs, dumps: DumpSize) -> io::Result<Self> {
        let mut sock = socket_in(ns, NETLINK_GENERIC)?;
        let addr = sock.bind_auto()?;
        connect_to_kernel(&sock)?;
        Self::configure(sock, addr, dumps)
    }

    /// Sets a bound, connected socket up (see [`GenlSocket::open`]).
    fn configure(sock: Socket, addr: SocketAddr, dumps: DumpSize) -> io::Result<Self> {
        // Extended ACKs carry the kernel's reason; capped ACKs keep every ACK
        // small (the request is not echoed back in full).
        sock.set_ext_ack(true)?;
        sock.set_cap_ack(true)?;
        let rcvbuf = size_buffer(&sock, RCVBUF, Direction::Receive);
        let sndbuf = size_buffer(&sock, SNDBUF, Direction::Send);
        Ok(GenlSocket {
            sock,
            port: addr.port_number(),
            rcvbuf,
            sndbuf,
            recv_len: RECV_CHUNK,
            rx: vec![0; RECV_CHUNK],
            dropped_foreign: 0,
            timeout: DEFAULT_TIMEOUT,
            rcvtimeo: DEFAULT_TIMEOUT,
        })
        .and_then(|mut s| {
            s.set_dump_size(dumps);
            s.set_timeout(DEFAULT_TIMEOUT)?;
            Ok(s)
        })
    }

    /// Bounds every wait of this socket: a receive that gets nothing for
    /// `timeout` fails with `WouldBlock` (and an [`super::Exchange`] reports
    /// [`super::Failure::TimedOut`]), and so does a send that waits that
    /// long for buffer space. A send cannot be bounded beyond that: netlink
    /// runs the kernel's handler for each request inside `send`, in the
    /// calling thread, and nothing interrupts it. A zero `timeout` is taken
    /// as one millisecond (zero would mean "wait forever" to the kernel).
    pub fn set_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        use rustix::net::sockopt::{Timeout, set_socket_timeout};
        let timeout = timeout.max(Duration::from_millis(1));
        set_socket_timeout(&self.sock, Timeout::Recv, Some(timeout))?;
        set_socket_timeout(&self.sock, Timeout::Send, Some(timeout))?;
        self.timeout = timeout;
        self.rcvtimeo = timeout;
        Ok(())
    }

    /// The bound of every wait (see [`GenlSocket::set_timeout`]).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Counts datagrams from another sender that a caller of
    /// [`GenlSocket::recv_from`] dropped.
    pub(crate) fn count_foreign(&mut self, dropped: u64) {
        self.dropped_foreign += dropped;
    }

    /// Changes the receive length, and with it the size of the datagrams the
    /// kernel builds for this socket's dumps from now on. The kernel never
    /// shrinks that size back: a [`DumpSize::Page`] socket that has received
    /// large datagrams gets its next large one cut off, which
    /// [`GenlSocket::recv_datagram`] reports and heals by going back to
    /// [`DumpSize::Large`].
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
    /// [`GenlSocket`]). Anything but 0 means another process in the
    /// namespace tried to answer in the kernel's place.
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

    /// Sends one datagram (one or more requests).
    pub fn send(&self, buf: &[u8]) -> io::Result<()> {
        let n = self.sock.send(buf, 0)?;
        if n != buf.len() {
            return Err(io::Error::other(format!(
                "netlink send wrote {n} of {} bytes",
                buf.len()
            )));
        }
        Ok(())
    }

    /// Receives one datagram into the socket's buffer and returns it. A
    /// datagram larger than the receive length is an error, never silently
    /// cut (see [`GenlSocket::recv_datagram`] to recover from it).
    pub fn recv(&mut self) -> io::Result<&[u8]> {
        self.recv_with_flags(0)
    }

    /// [`GenlSocket::recv`] with extra `MSG_*` flags (such as `MSG_DONTWAIT`).
    pub fn recv_with_flags(&mut self, flags: i32) -> io::Result<&[u8]> {
        match self.recv_datagram(flags)? {
            Datagram::Whole(d) => Ok(d),
            Datagram::Truncated { head, len } => Err(io::Error::other(format!(
                "netlink datagram of {len} bytes truncated to {}",
                head.len()
            ))),
        }
    }

    /// Receives one datagram, telling a whole one from one cut short. After
    /// a cut the socket asks for 64 KiB from then on, so the
    /// kernel's next datagrams fit (a [`DumpSize::Page`] socket on a kernel
    /// whose page-sized datagrams are larger than expected heals itself).
    /// Datagrams from any sender but the kernel are dropped and counted
    /// ([`GenlSocket::dropped_foreign`]).
    pub fn recv_datagram(&mut self, flags: i32) -> io::Result<Datagram<'_>> {
        loop {
            let (n, sender) = self.recv_raw(flags)?;
            if sender == 0 {
                return Ok(self.datagram(n));
            }
            self.dropped_foreign += 1;
        }
    }

    /// [`GenlSocket::recv_datagram`] that keeps datagrams from any sender
    /// and returns the sender's port (0 is the kernel) with each: for
    /// callers that drop them themselves (and count them with
    /// `count_foreign`).
    pub fn recv_from(&mut self, flags: i32) -> io::Result<(Datagram<'_>, u32)> {
        let (n, sender) = self.recv_raw(flags)?;
        Ok((self.datagram(n), sender))
    }

    /// One receive that waits at most about `left`: the datagram and its
    /// sender's port (0 is the kernel). `SO_RCVTIMEO` is set to `left` when
    /// it differs from the value set by more than [`DEADLINE_SLACK`] (so a
    /// wait of a full timeout after an answer costs no system call), and a
    /// signal ends the receive (`Interrupted`) instead of starting it again
    /// with a fresh timeout: the caller works out the time left anew, so
    /// signals cannot push a deadline back.
    pub(crate) fn recv_within(&mut self, left: Duration) -> io::Result<(Datagram<'_>, u32)> {
        use rustix::net::sockopt::{Timeout, set_socket_timeout};
        // Zero would mean "wait for ever" to the kernel.
        let left = left.max(Duration::from_micros(1));
        if self.rcvtimeo.abs_diff(left) > DEADLINE_SLACK {
            set_socket_timeout(&self.sock, Timeout::Recv, Some(left))?;
            self.rcvtimeo = left;
        }
        let (n, sender) = self.recv_raw(0)?;
        Ok((self.datagram(n), sender))
    }

    /// One receive that does not wait: an empty queue is `WouldBlock`.
    pub(crate) fn recv_now(&mut self) -> io::Result<(Datagram<'_>, u32)> {
        let (n, sender) = self.recv_raw(MSG_DONTWAIT)?;
        Ok((self.datagram(n), sender))
    }

    /// One receive into the socket's buffer: the datagram's real length and
    /// its sender's port. A signal ends it (`Interrupted`).
    fn recv_raw(&mut self, flags: i32) -> io::Result<(usize, u32)> {
        let want = self.recv_len.min(self.rx.len());
        let mut window = &mut self.rx[..want];
        let (n, from) = self.sock.recv_from(&mut window, MSG_TRUNC | flags)?;
        let sender = if from_kernel(&from) {
            0
        } else {
            from.port_number().max(1)
        };
        Ok((n, sender))
    }

    /// The datagram of `n` bytes just received (cut if longer than asked).
    fn datagram(&mut self, n: usize) -> Datagram<'_> {
        let want = self.recv_len.min(self.rx.len());
        if n > want {
            self.recv_len = RECV_CHUNK;
            return Datagram::Truncated {
                head: &self.rx[..want],
                len: n,
            };
        }
        Datagram::Whole(&self.rx[..n])
    }

    /// Resolves a generic-netlink family by name. `Ok(None)` means the
    /// kernel has no such family (for IPVS: the module is not loaded and could
    /// not be autoloaded).
    pub fn resolve_family(&mut self, name: &str, seq: u32) -> io::Result<Option<ctrl::FamilyInfo>> {
        let mut req = Vec::with_capacity(64);
        ctrl::encode_get_family(&mut req, name, seq);
        self.send(&req)?;
        let mut id = None;
        loop {
            let port = self.port;
            let datagram = self.recv()?;
            for f in frame::frames(datagram) {
                let f = f.map_err(io::Error::other)?;
                if f.header.seq != seq || (f.header.port != 0 && f.header.port != port) {
                    continue;
                }
                match f.body {
                    FrameBody::Data(body) => {
                        id = Some(ctrl::decode_family(body).map_err(io::Error::other)?)
                    }
                    FrameBody::Error(e) if e.is_ack() => return Ok(id),
                    FrameBody::Error(e) if e.errno() == ENOENT => return Ok(None),
                    FrameBody::Error(e) => {
                        return Err(io::Error::from_raw_os_error(e.errno()));
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Connects a bound netlink socket to the kernel (port 0, no groups): Linux
/// then refuses unicast datagrams to it from every other port (see
/// [`GenlSocket`]). Needs no privilege.
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
/// kernel whose value differs is caught by `MSG_TRUNC` and healed (see
/// [`GenlSocket::recv_datagram`]).
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
    use rustix::net::sockopt as so;
    let fd = &sock;
    let granted = match dir {
        Direction::Receive => {
            if so::set_socket_recv_buffer_size_force(fd, want).is_err() {
                let _ = so::set_socket_recv_buffer_size(fd, want);
            }
            so::socket_recv_buffer_size(fd)
        }
        Direction::Send => {
            if so::set_socket_send_buffer_size_force(fd, want).is_err() {
                let _ = so::set_socket_send_buffer_size(fd, want);
            }
            so::socket_send_buffer_size(fd)
        }
    };
    // The kernel doubles what it is given for bookkeeping; count half.
    granted.map_or(212_992 / 2, |g| g / 2)
}

/// `MSG_TRUNC`: make `recv` report a datagram's real length.
const MSG_TRUNC: i32 = 0x20;
/// `MSG_DONTWAIT`.
const MSG_DONTWAIT: i32 = 0x40;
/// How far the receive timeout may be from the time left before it is set
/// again: a wait ends at most this long after its deadline.
const DEADLINE_SLACK: Duration = Duration::from_millis(1);
/// `ENOENT`: the controller's answer for an unknown family.
const ENOENT: i32 = 2;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::frame::NLM_F_CAPPED;

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

    #[test]
    fn datagrams_from_other_sockets_are_refused_or_dropped() {
        let mut sock = Socket::new(NETLINK_GENERIC).unwrap();
        let addr = sock.bind_auto().unwrap();
        let mut forger = Socket::new(NETLINK_GENERIC).unwrap();
        forger.bind_auto().unwrap();
        let to = SocketAddr::new(addr.port_number(), 0);
        // Queued before the socket is connected: "nlctrl does not exist".
        match forger.send_to(&forged_error(7, ENOENT), &to, 0) {
            Ok(_) => {}
            // Sending to another port needs CAP_NET_ADMIN: nothing to test.
            Err(e) if e.raw_os_error() == Some(EPERM) => return,
            Err(e) => panic!("{e}"),
        }
        connect_to_kernel(&sock).unwrap();
        // From now on the kernel refuses them.
        let refused = forger.send_to(&forged_error(7, ENOENT), &to, 0);
        assert_eq!(
            refused.map_err(|e| e.raw_os_error()),
            Err(Some(ECONNREFUSED))
        );
        let mut sock = GenlSocket::configure(sock, addr, DumpSize::Page).unwrap();
        let family = sock.resolve_family("nlctrl", 7).unwrap();
        assert_eq!(family.map(|f| f.id), Some(0x10), "took the forged answer");
        assert_eq!(sock.dropped_foreign(), 1);
    }
}
