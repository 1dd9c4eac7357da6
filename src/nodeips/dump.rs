//! The I/O part of the resolver: one `RTM_GETLINK` dump and one
//! `RTM_GETADDR` dump over an rtnetlink socket, in any network namespace.

use std::io;

use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::address::AddressMessage;
use netlink_packet_route::link::{LinkAttribute, LinkExtentMask, LinkMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::Socket;
use netlink_sys::protocols::NETLINK_ROUTE;

use super::decode::{self, OnMessage, RTM_NEWADDR, RTM_NEWLINK};
use super::error::NodeIpsError;
use super::options::Family;
use super::records::Records;
use crate::netlink::netns::{NetNs, socket_in};
use crate::netlink::{connect_to_kernel, from_kernel};

/// `MSG_TRUNC` from `<sys/socket.h>` (Linux): `recv` returns the real
/// datagram length even when it did not fit.
const MSG_TRUNC: i32 = 0x20;
/// The kernel caps dump datagrams near 32 KiB; twice that leaves margin.
const INITIAL_RECV_BUF: usize = 64 * 1024;
/// Socket receive buffer (`SO_RCVBUF`) asked for.
const SOCKET_RCVBUF: usize = 1024 * 1024;
/// How many times a dump is retried when the kernel flags it inconsistent.
const MAX_ATTEMPTS: u32 = 5;

const LINK_DUMP: &str = "link dump";
const ADDRESS_DUMP: &str = "address dump";

/// Dumps every interface and every address of `family` in `netns`: exactly
/// one `RTM_GETLINK` dump and one `RTM_GETADDR` dump (repeated only if the
/// kernel flags a dump as interrupted by concurrent changes, or a datagram did
/// not fit the receive buffer).
///
/// ```no_run
/// use ipvsctl::netlink::netns::NetNs;
/// use ipvsctl::nodeips::{dump_records, Family};
///
/// let records = dump_records(&NetNs::Current, Family::Both)?;
/// println!("{} interfaces, {} addresses", records.links.len(), records.addresses.len());
/// # Ok::<(), ipvsctl::nodeips::NodeIpsError>(())
/// ```
pub fn dump_records(netns: &NetNs, family: Family) -> Result<Records, NodeIpsError> {
    let mut rtnl = Rtnl::open(netns)?;
    let mut records = Records::default();

    let mut links = LinkMessage::default();
    // Interface statistics are the bulk of a link message; they are not needed.
    links
        .attributes
        .push(LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats]));
    records.links = rtnl.dump(
        RouteNetlinkMessage::GetLink(links),
        LINK_DUMP,
        |msg_type, payload| {
            if msg_type == RTM_NEWLINK {
                decode::decode_link(payload).map(Some)
            } else {
                Ok(None)
            }
        },
    )?;

    let mut addrs = AddressMessage::default();
    addrs.header.family = match family {
        Family::V4 => AddressFamily::Inet,
        Family::V6 => AddressFamily::Inet6,
        Family::Both => AddressFamily::Unspec,
    };
    records.addresses = rtnl.dump(
        RouteNetlinkMessage::GetAddress(addrs),
        ADDRESS_DUMP,
        |msg_type, payload| {
            if msg_type == RTM_NEWADDR {
                decode::decode_address(payload)
            } else {
                Ok(None)
            }
        },
    )?;
    Ok(records)
}

/// A bound rtnetlink socket with its sequence counter and receive buffer.
struct Rtnl {
    netns: NetNs,
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Rtnl {
    /// Pins `netns` first: a socket opened again later (see
    /// [`Rtnl::dump`]) is in the same namespace as the first.
    fn open(netns: &NetNs) -> Result<Self, NodeIpsError> {
        let netns = NetNs::Pinned(netns.pin().map_err(NodeIpsError::Socket)?);
        Ok(Rtnl {
            socket: Self::socket(&netns)?,
            netns,
            seq: 0,
            buf: Vec::with_capacity(INITIAL_RECV_BUF),
        })
    }

    fn socket(netns: &NetNs) -> Result<Socket, NodeIpsError> {
        let mut socket = socket_in(netns, NETLINK_ROUTE).map_err(NodeIpsError::Socket)?;
        socket.bind_auto().map_err(NodeIpsError::Socket)?;
        connect_to_kernel(&socket).map_err(NodeIpsError::Socket)?;
        // Best effort: a smaller buffer only slows a dump down, it loses nothing.
        let _ = socket.set_rx_buf_sz(SOCKET_RCVBUF);
        Ok(socket)
    }

    /// Sends `request` as a dump and decodes every reply message with
    /// `decode` until `NLMSG_DONE`; returns what it kept. A dump that must be
    /// redone starts from an empty list.
    fn dump<T>(
        &mut self,
        request: RouteNetlinkMessage,
        what: &'static str,
        decode: impl Fn(u16, &[u8]) -> Result<Option<T>, NodeIpsError>,
    ) -> Result<Vec<T>, NodeIpsError> {
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        let mut message = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(request));
        message.finalize();
        let mut bytes = vec![0; message.buffer_len()];
        let mut interrupted = 0;
        let mut truncated = 0;
        loop {
            self.seq = self.seq.wrapping_add(1);
            message.header.sequence_number = self.seq;
            message.serialize(&mut bytes);
            self.send(&bytes, what)?;

            let mut items = Vec::new();
            let mut keep = |msg_type: u16, payload: &[u8]| {
                items.extend(decode(msg_type, payload)?);
                Ok(())
            };
            match self.receive(what, &mut keep)? {
                Outcome::Complete => return Ok(items),
                Outcome::Interrupted => {
                    interrupted += 1;
                    if interrupted >= MAX_ATTEMPTS {
                        return Err(NodeIpsError::DumpInterrupted {
                            request: what,
                            attempts: interrupted,
                        });
                    }
                }
                Outcome::Truncated(needed) => {
                    truncated += 1;
                    if truncated >= MAX_ATTEMPTS {
                        return Err(NodeIpsError::Io {
                            request: what,
                            source: io::Error::other(
                                "reply datagrams kept overflowing the receive buffer",
                            ),
                        });
                    }
                    // The rest of the abandoned dump is still queued on the
                    // old socket; a fresh socket starts clean.
                    self.socket = Self::socket(&self.netns)?;
                    self.buf = Vec::with_capacity(needed.saturating_mul(2));
                }
            }
        }
    }

    fn send(&self, bytes: &[u8], what: &'static str) -> Result<(), NodeIpsError> {
        loop {
            match self.socket.send(bytes, 0) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(NodeIpsError::Io {
                        request: what,
                        source,
                    });
                }
            }
        }
    }

    /// Reads the datagrams of the current request until `NLMSG_DONE`.
    fn receive(
        &mut self,
        what: &'static str,
        on_message: &mut OnMessage<'_>,
    ) -> Result<Outcome, NodeIpsError> {
        let mut interrupted = false;
        loop {
            self.buf.clear();
            let capacity = self.buf.capacity();
            let len = match self.socket.recv_from(&mut self.buf, MSG_TRUNC) {
                // Sent before the socket was connected, by another process.
                Ok((_, from)) if !from_kernel(&from) => continue,
                Ok((len, _)) => len,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(NodeIpsError::Io {
                        request: what,
                        source,
                    });
                }
            };
            if len > capacity {
                return Ok(Outcome::Truncated(len));
            }
            let datagram = self.buf.get(..len).unwrap_or_default();
            let progress = decode::walk_datagram(datagram, self.seq, what, on_message)?;
            interrupted |= progress.interrupted;
            if progress.done {
                return Ok(if interrupted {
                    Outcome::Interrupted
                } else {
                    Outcome::Complete
                });
            }
        }
    }
}

/// How a dump ended.
#[derive(Debug)]
enum Outcome {
    /// `NLMSG_DONE` seen, consistent.
    Complete,
    /// `NLMSG_DONE` seen, but `NLM_F_DUMP_INTR` was set on some message.
    Interrupted,
    /// A datagram of this many bytes did not fit the receive buffer.
    Truncated(usize),
}
