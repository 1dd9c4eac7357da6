//! One generic-netlink socket: opening (in any namespace), buffer sizing,
//! family resolution, raw send and receive. Everything about message layout
//! lives in [`crate::codec::frame`].

use std::io;

use netlink_sys::{Socket, protocols::NETLINK_GENERIC};

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
/// How long a receive may wait for the kernel before it is an error.
const RECV_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// Upper bound of the memory one queued ACK is charged (`skb->truesize` of a
/// small skb is 768 bytes on x86-64; doubled for safety).
const ACK_TRUESIZE: usize = 1536;

/// A bound, configured generic-netlink socket.
#[derive(Debug)]
pub struct GenlSocket {
    sock: Socket,
    port: u32,
    rcvbuf: usize,
    sndbuf: usize,
    rx: Vec<u8>,
}

impl GenlSocket {
    /// Opens a socket in `ns`, binds it, enables extended and capped ACKs and
    /// sizes its buffers.
    pub fn open(ns: &NetNs) -> io::Result<Self> {
        let mut sock = socket_in(ns, NETLINK_GENERIC)?;
        let addr = sock.bind_auto()?;
        // Extended ACKs carry the kernel's reason; capped ACKs keep every ACK
        // small (the request is not echoed back in full).
        sock.set_ext_ack(true)?;
        sock.set_cap_ack(true)?;
        // The kernel answers while handling the send, so a receive that
        // waits this long means something is wrong: fail instead of hanging
        // the caller forever.
        rustix::net::sockopt::set_socket_timeout(
            &sock,
            rustix::net::sockopt::Timeout::Recv,
            Some(RECV_TIMEOUT),
        )?;
        let rcvbuf = size_buffer(&sock, RCVBUF, Direction::Receive);
        let sndbuf = size_buffer(&sock, SNDBUF, Direction::Send);
        Ok(GenlSocket {
            sock,
            port: addr.port_number(),
            rcvbuf,
            sndbuf,
            rx: Vec::with_capacity(RECV_CHUNK),
        })
    }

    /// The socket's netlink port id.
    pub fn port(&self) -> u32 {
        self.port
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
    /// datagram larger than the buffer is an error, never silently cut.
    pub fn recv(&mut self) -> io::Result<&[u8]> {
        self.recv_with_flags(0)
    }

    /// [`GenlSocket::recv`] with extra `MSG_*` flags (such as `MSG_DONTWAIT`).
    pub fn recv_with_flags(&mut self, flags: i32) -> io::Result<&[u8]> {
        self.rx.clear();
        if self.rx.capacity() < RECV_CHUNK {
            self.rx.reserve(RECV_CHUNK);
        }
        let cap = self.rx.capacity();
        let n = loop {
            match self.sock.recv(&mut self.rx, MSG_TRUNC | flags) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        if n > cap {
            return Err(io::Error::other(format!(
                "netlink datagram of {n} bytes truncated to {cap}"
            )));
        }
        Ok(&self.rx[..n])
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
/// `ENOENT`: the controller's answer for an unknown family.
const ENOENT: i32 = 2;
