//! Address messages (`RTM_NEWADDR`: `struct ifaddrmsg`, then `IFA_*`
//! attributes).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::codec::DecodeError;
use crate::codec::attr::{RawAttrs, RawNla};

use super::fixed_header;

/// `sizeof(struct ifaddrmsg)`.
const IFADDRMSG_LEN: usize = 8;
/// `IFA_ADDRESS`, `IFA_LOCAL`, `IFA_FLAGS`.
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_FLAGS: u16 = 8;
/// `AF_INET`, `AF_INET6`.
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

/// One attribute of an address message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AddressAttr {
    /// `IFA_ADDRESS`: the prefix address (the peer on point-to-point links).
    Address(IpAddr),
    /// `IFA_LOCAL`: this host's address.
    Local(IpAddr),
    /// `IFA_FLAGS`: all 32 flag bits (`IFA_F_*`).
    Flags(u32),
    /// Anything else, not looked at.
    Other,
}

impl AddressAttr {
    /// Parses one attribute of a message of `family`; an address of the
    /// wrong size for the family is an error.
    fn parse(nla: &RawNla<'_>, family: u8) -> Result<Self, DecodeError> {
        let ip = |what: &str| ip_of(family, nla.value(), what);
        Ok(match nla.kind() {
            IFA_ADDRESS => AddressAttr::Address(ip("IFA_ADDRESS")?),
            IFA_LOCAL => AddressAttr::Local(ip("IFA_LOCAL")?),
            IFA_FLAGS => AddressAttr::Flags(u32::from_ne_bytes(nla.value().try_into().map_err(
                |_| {
                    DecodeError::from(format!(
                        "IFA_FLAGS of {} bytes (4 expected)",
                        nla.value().len()
                    ))
                },
            )?)),
            _ => AddressAttr::Other,
        })
    }
}

fn ip_of(family: u8, value: &[u8], what: &str) -> Result<IpAddr, DecodeError> {
    match (family, value.len()) {
        (AF_INET, 4) => Ok(IpAddr::V4(Ipv4Addr::new(
            value[0], value[1], value[2], value[3],
        ))),
        (AF_INET6, 16) => {
            let mut octets = [0; 16];
            octets.copy_from_slice(value);
            Ok(IpAddr::V6(Ipv6Addr::from(octets)))
        }
        _ => Err(DecodeError::from(format!(
            "{what} of {} bytes in a message of family {family}",
            value.len()
        ))),
    }
}

/// What the crate reads of an address message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Address {
    /// Interface index (`ifa_index`).
    pub index: u32,
    /// Prefix length.
    pub prefix_len: u8,
    /// `IFA_LOCAL`.
    pub local: Option<IpAddr>,
    /// `IFA_ADDRESS`.
    pub address: Option<IpAddr>,
    /// The header's 8 flag bits, replaced by `IFA_FLAGS` (all 32) when
    /// present.
    pub flags: u32,
}

/// Decodes an address message's payload; `None` for families other than
/// IPv4 and IPv6. Attributes other than the addresses and the flags are
/// skipped; a short payload, a malformed attribute or an address of the
/// wrong family is an error.
pub(crate) fn decode(payload: &[u8]) -> Result<Option<Address>, DecodeError> {
    let header: [u8; IFADDRMSG_LEN] = fixed_header("address message", payload)?;
    let family = header[0];
    if family != AF_INET && family != AF_INET6 {
        return Ok(None);
    }
    let mut address = Address {
        index: u32::from_ne_bytes([header[4], header[5], header[6], header[7]]),
        prefix_len: header[1],
        local: None,
        address: None,
        flags: u32::from(header[2]),
    };
    for nla in RawAttrs::new(payload.get(IFADDRMSG_LEN..).unwrap_or_default()) {
        match AddressAttr::parse(&nla?, family)? {
            AddressAttr::Address(a) => address.address = Some(a),
            AddressAttr::Local(a) => address.local = Some(a),
            AddressAttr::Flags(f) => address.flags = f,
            AddressAttr::Other => {}
        }
    }
    Ok(Some(address))
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::Emitable;
    use netlink_packet_route::AddressFamily;
    use netlink_packet_route::address::{
        AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage,
    };

    fn payload(family: AddressFamily, attrs: Vec<AddressAttribute>) -> Vec<u8> {
        let mut m = AddressMessage::default();
        m.header.index = 3;
        m.header.family = family;
        m.header.prefix_len = 24;
        m.header.flags = AddressHeaderFlags::Permanent;
        m.attributes = attrs;
        let mut buf = vec![0; m.buffer_len()];
        m.emit(&mut buf);
        buf
    }

    #[test]
    fn local_address_and_the_header_flags() {
        let got = decode(&payload(
            AddressFamily::Inet,
            vec![
                AddressAttribute::Local("10.0.0.2".parse().unwrap()),
                AddressAttribute::Address("10.0.0.1".parse().unwrap()),
                AddressAttribute::Label("eth0".into()),
            ],
        ))
        .unwrap()
        .unwrap();
        assert_eq!(got.index, 3);
        assert_eq!(got.prefix_len, 24);
        assert_eq!(got.local, Some("10.0.0.2".parse().unwrap()));
        assert_eq!(got.address, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(got.flags, 0x80);
    }

    #[test]
    fn ifa_flags_replace_the_header_flags() {
        let got = decode(&payload(
            AddressFamily::Inet6,
            vec![AddressAttribute::Flags(
                AddressFlags::Permanent | AddressFlags::StablePrivacy,
            )],
        ))
        .unwrap()
        .unwrap();
        assert_eq!(got.flags, 0x880);
    }

    #[test]
    fn other_families_are_none_and_mismatches_errors() {
        assert_eq!(
            decode(&payload(AddressFamily::Packet, vec![])).unwrap(),
            None
        );
        let mismatch = payload(
            AddressFamily::Inet,
            vec![AddressAttribute::Address("2001:db8::1".parse().unwrap())],
        );
        assert!(decode(&mismatch).is_err());
        assert!(decode(&[2, 24, 0]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_payloads_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let _ = decode(&bytes);
        }
    }
}
