//! Bytes → records: walks the netlink messages of one received datagram and
//! decodes link and address messages. Pure; never panics on any input.

use std::net::IpAddr;

use netlink_packet_core::{
    DecodeError, NLM_F_DUMP_INTR, NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP, NLMSG_OVERRUN,
    NetlinkBuffer, NlaBuffer, NlasIterator, Parseable, ParseableParametrized,
};
use netlink_packet_route::AddressFamily;
use netlink_packet_route::address::{AddressAttribute, AddressHeader};
use netlink_packet_route::link::{LinkAttribute, LinkHeader};

use super::error::NodeIpsError;
use super::records::{AddressFlags, AddressRecord, InterfaceFlags, LinkRecord};

/// `RTM_NEWLINK`.
pub(crate) const RTM_NEWLINK: u16 = 16;
/// `RTM_NEWADDR`.
pub(crate) const RTM_NEWADDR: u16 = 20;
/// `IFLA_IFNAME`.
const IFLA_IFNAME: u16 = 3;
/// `IFA_ADDRESS`, `IFA_LOCAL`, `IFA_FLAGS`.
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_FLAGS: u16 = 8;
/// Size of `ifinfomsg` and `ifaddrmsg`.
const IFINFOMSG_LEN: usize = 16;
const IFADDRMSG_LEN: usize = 8;

/// Receives each data message of a reply: its type and payload.
pub(crate) type OnMessage<'a> = dyn FnMut(u16, &[u8]) -> Result<(), NodeIpsError> + 'a;

/// What a datagram told us about the dump in progress.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Progress {
    /// `NLMSG_DONE` was seen: the dump is complete.
    pub done: bool,
    /// A message carried `NLM_F_DUMP_INTR`: the dump is inconsistent.
    pub interrupted: bool,
}

/// Walks the messages of one datagram. Messages with another sequence
/// number (left over from an earlier request) are ignored. Data messages are
/// passed to `on_message(type, payload)`. Stops at `NLMSG_DONE`.
pub(crate) fn walk_datagram(
    datagram: &[u8],
    seq: u32,
    request: &'static str,
    on_message: &mut OnMessage<'_>,
) -> Result<Progress, NodeIpsError> {
    let mut progress = Progress::default();
    let mut rest = datagram;
    while !rest.is_empty() {
        let msg = NetlinkBuffer::new_checked(rest).map_err(|e| malformed(request, &e))?;
        // new_checked guarantees 16 <= length <= rest.len().
        let len = msg.length() as usize;
        let payload = rest.get(16..len).unwrap_or_default();
        let aligned = len.saturating_add(3) & !3;
        rest = rest.get(aligned..).unwrap_or_default();

        if msg.sequence_number() != seq {
            continue;
        }
        if msg.flags() & NLM_F_DUMP_INTR != 0 {
            progress.interrupted = true;
        }
        match msg.message_type() {
            NLMSG_NOOP => {}
            NLMSG_DONE => {
                // A dump that failed midway reports a negative errno here.
                if let Some(errno) = read_i32(payload).filter(|e| *e < 0) {
                    return Err(kernel_error(request, errno));
                }
                progress.done = true;
                return Ok(progress);
            }
            NLMSG_ERROR => {
                let errno = read_i32(payload).ok_or_else(|| NodeIpsError::Malformed {
                    request,
                    detail: "NLMSG_ERROR shorter than its error code".into(),
                })?;
                if errno == 0 {
                    // An acknowledgement: nothing more will come.
                    progress.done = true;
                    return Ok(progress);
                }
                return Err(kernel_error(request, errno));
            }
            NLMSG_OVERRUN => {
                return Err(NodeIpsError::Malformed {
                    request,
                    detail: "NLMSG_OVERRUN: data lost".into(),
                });
            }
            other => on_message(other, payload)?,
        }
    }
    Ok(progress)
}

fn read_i32(payload: &[u8]) -> Option<i32> {
    let bytes: [u8; 4] = payload.get(..4)?.try_into().ok()?;
    Some(i32::from_ne_bytes(bytes))
}

fn kernel_error(request: &'static str, errno: i32) -> NodeIpsError {
    NodeIpsError::Kernel {
        request,
        source: std::io::Error::from_raw_os_error(errno.saturating_neg()),
    }
}

fn malformed(request: &'static str, err: &DecodeError) -> NodeIpsError {
    NodeIpsError::Malformed {
        request,
        detail: err.to_string(),
    }
}

/// Decodes an `RTM_NEWLINK` payload (`ifinfomsg` + attributes). Only
/// `IFLA_IFNAME` is decoded; other attributes are not looked at, so an
/// attribute this crate does not know cannot break the dump.
pub(crate) fn decode_link(payload: &[u8]) -> Result<LinkRecord, NodeIpsError> {
    const REQ: &str = "link dump";
    let header = LinkHeader::parse(payload).map_err(|e| malformed(REQ, &e))?;
    let mut name = String::new();
    for nla in NlasIterator::new(payload.get(IFINFOMSG_LEN..).unwrap_or_default()) {
        let nla = nla.map_err(|e| malformed(REQ, &e))?;
        if nla.kind() == IFLA_IFNAME {
            let attr = LinkAttribute::parse_with_param(&nla, header.interface_family)
                .map_err(|e| malformed(REQ, &e))?;
            if let LinkAttribute::IfName(n) = attr {
                name = n;
            }
        }
    }
    Ok(LinkRecord {
        index: header.index,
        name,
        flags: InterfaceFlags::from_bits_retain(header.flags.bits()),
    })
}

/// Decodes an `RTM_NEWADDR` payload (`ifaddrmsg` + attributes). Returns
/// `None` for families other than IPv4 and IPv6. Flags are the header's
/// 8 bits, replaced by `IFA_FLAGS` (all 32 bits) when present.
pub(crate) fn decode_address(payload: &[u8]) -> Result<Option<AddressRecord>, NodeIpsError> {
    const REQ: &str = "address dump";
    let header = AddressHeader::parse(payload).map_err(|e| malformed(REQ, &e))?;
    if !matches!(header.family, AddressFamily::Inet | AddressFamily::Inet6) {
        return Ok(None);
    }
    let mut record = AddressRecord {
        index: header.index,
        prefix_len: header.prefix_len,
        local: None,
        address: None,
        flags: AddressFlags::from_bits_retain(u32::from(header.flags.bits())),
    };
    for nla in NlasIterator::new(payload.get(IFADDRMSG_LEN..).unwrap_or_default()) {
        let nla = nla.map_err(|e| malformed(REQ, &e))?;
        if !matches!(nla.kind(), IFA_ADDRESS | IFA_LOCAL | IFA_FLAGS) {
            continue;
        }
        match parse_address_attribute(&nla).map_err(|e| malformed(REQ, &e))? {
            AddressAttribute::Address(a) => record.address = Some(checked(a, &header)?),
            AddressAttribute::Local(a) => record.local = Some(checked(a, &header)?),
            AddressAttribute::Flags(f) => record.flags = AddressFlags::from_bits_retain(f.bits()),
            _ => {}
        }
    }
    Ok(Some(record))
}

fn parse_address_attribute(nla: &NlaBuffer<&[u8]>) -> Result<AddressAttribute, DecodeError> {
    AddressAttribute::parse(nla)
}

/// An address attribute must match the header's family.
fn checked(addr: IpAddr, header: &AddressHeader) -> Result<IpAddr, NodeIpsError> {
    let ok = match header.family {
        AddressFamily::Inet => addr.is_ipv4(),
        AddressFamily::Inet6 => addr.is_ipv6(),
        _ => false,
    };
    if ok {
        Ok(addr)
    } else {
        Err(NodeIpsError::Malformed {
            request: "address dump",
            detail: format!("address {addr} in a message of family {:?}", header.family),
        })
    }
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
