//! The I/O part of the resolver: one `RTM_GETLINK` dump and one
//! `RTM_GETADDR` dump over the crate's rtnetlink socket
//! ([`RouteSocket`]), in any network namespace, every wait bounded.

use std::io;
use std::time::Duration;

use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::address::AddressMessage;
use netlink_packet_route::link::{LinkAttribute, LinkExtentMask, LinkMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::decode::{self, OnMessage, RTM_NEWADDR, RTM_NEWLINK};
use super::error::NodeIpsError;
use super::options::{Family, Options};
use super::records::{AddressRecord, LinkRecord, Records};
use crate::netlink::netns::NetNs;
use crate::netlink::route::{Received, RecvError, RouteSocket, check_timeout};
/// How many times a dump is retried when the kernel flags it inconsistent.
const MAX_ATTEMPTS: u32 = 5;

const LINK_DUMP: &str = "link dump";
const ADDRESS_DUMP: &str = "address dump";

/// Dumps every interface and every address of [`Options::family`] in
/// [`Options::netns`]: exactly one `RTM_GETLINK` dump and one `RTM_GETADDR`
/// dump (repeated only if the kernel flags a dump as interrupted by
/// concurrent changes, or a datagram did not fit the receive buffer). Each
/// wait for the kernel is bounded by [`Options::timeout`]; a silent kernel
/// is [`NodeIpsError::Timeout`]. The other options are for
/// [`filter`](super::filter).
///
/// ```no_run
/// use ipvsctl::nodeips::{dump_records, Family, Options};
///
/// let records = dump_records(&Options::new().family(Family::Both))?;
/// println!("{} interfaces, {} addresses", records.links.len(), records.addresses.len());
/// # Ok::<(), ipvsctl::nodeips::NodeIpsError>(())
/// ```
pub fn dump_records(opts: &Options) -> Result<Records, NodeIpsError> {
    dump_records_within(&opts.netns, opts.family, opts.timeout)
}

/// [`dump_records`] with each wait bounded by `timeout`.
pub(crate) fn dump_records_within(
    netns: &NetNs,
    family: Family,
    timeout: Duration,
) -> Result<Records, NodeIpsError> {
    let mut rtnl = open(netns, timeout)?;
    Ok(Records {
        links: dump_links(&mut rtnl)?,
        addresses: dump_addresses(&mut rtnl, family)?,
    })
}

/// Opens the rtnetlink socket the dumps run on (see [`RouteSocket`]).
pub(crate) fn open(netns: &NetNs, timeout: Duration) -> Result<RouteSocket, NodeIpsError> {
    if let Some(reason) = check_timeout(timeout) {
        return Err(NodeIpsError::InvalidOption {
            option: "timeout",
            reason,
        });
    }
    RouteSocket::open(netns, timeout).map_err(NodeIpsError::Socket)
}

/// One `RTM_GETLINK` dump, without statistics.
fn dump_links(rtnl: &mut RouteSocket) -> Result<Vec<LinkRecord>, NodeIpsError> {
    let mut links = LinkMessage::default();
    // Interface statistics are the bulk of a link message; they are not needed.
    links
        .attributes
        .push(LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats]));
    dump(
        rtnl,
        RouteNetlinkMessage::GetLink(links),
        LINK_DUMP,
        |msg_type, payload| {
            if msg_type == RTM_NEWLINK {
                decode::decode_link(payload).map(Some)
            } else {
                Ok(None)
            }
        },
    )
}

/// One `RTM_GETADDR` dump of `family`, every interface's addresses.
pub(crate) fn dump_addresses(
    rtnl: &mut RouteSocket,
    family: Family,
) -> Result<Vec<AddressRecord>, NodeIpsError> {
    let mut addrs = AddressMessage::default();
    addrs.header.family = match family {
        Family::V4 => AddressFamily::Inet,
        Family::V6 => AddressFamily::Inet6,
        Family::Both => AddressFamily::Unspec,
    };
    dump(
        rtnl,
        RouteNetlinkMessage::GetAddress(addrs),
        ADDRESS_DUMP,
        |msg_type, payload| {
            if msg_type == RTM_NEWADDR {
                decode::decode_address(payload)
            } else {
                Ok(None)
            }
        },
    )
}

/// Sends `request` as a dump and decodes every reply message with `decode`
/// until `NLMSG_DONE`; returns what it kept. A dump that must be redone
/// starts from an empty list.
fn dump<T>(
    rtnl: &mut RouteSocket,
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
        message.header.sequence_number = rtnl.next_seq();
        message.serialize(&mut bytes);
        rtnl.send(&bytes).map_err(|source| NodeIpsError::Io {
            request: what,
            source,
        })?;

        let mut items = Vec::new();
        let mut keep = |msg_type: u16, payload: &[u8]| {
            items.extend(decode(msg_type, payload)?);
            Ok(())
        };
        match receive(rtnl, what, &mut keep)? {
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
                // The rest of the abandoned dump is still queued on the old
                // socket; a fresh socket starts clean.
                rtnl.reopen().map_err(NodeIpsError::Socket)?;
                rtnl.grow(needed);
            }
        }
    }
}

/// Reads the datagrams of the current request until `NLMSG_DONE`.
fn receive(
    rtnl: &mut RouteSocket,
    what: &'static str,
    on_message: &mut OnMessage<'_>,
) -> Result<Outcome, NodeIpsError> {
    let mut interrupted = false;
    let seq = rtnl.seq();
    loop {
        let datagram = match rtnl.recv() {
            Ok(Received::Whole(datagram)) => datagram,
            Ok(Received::Truncated(len)) => return Ok(Outcome::Truncated(len)),
            Err(RecvError::TimedOut(waited)) => {
                return Err(NodeIpsError::Timeout {
                    request: what,
                    waited,
                });
            }
            Err(RecvError::Io(source)) => {
                return Err(NodeIpsError::Io {
                    request: what,
                    source,
                });
            }
        };
        let progress = decode::walk_datagram(datagram, seq, what, on_message)?;
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
