//! The generic-netlink controller messages needed to resolve the IPVS family
//! id (`CTRL_CMD_GETFAMILY` by name). The request is framed by
//! [`super::frame`]'s request writer and the attribute writer every IPVS
//! request uses; its one attribute's value is netlink-packet-generic's
//! controller type. Replies are read with the codec's attribute reader.

use netlink_packet_generic::ctrl::GenlCtrlCmd;
use netlink_packet_generic::ctrl::nlas::GenlCtrlAttrs;

use super::DecodeError;
use super::attr::{PushValue, RawAttrs, push_attr};
use super::frame::{self, GENL_HDRLEN};

/// `GENL_ID_CTRL`: the controller's fixed family id.
pub const GENL_ID_CTRL: u16 = 0x10;

/// Controller version 2, as the kernel's own tools send.
const CTRL_VERSION: u8 = 2;

impl PushValue for GenlCtrlAttrs {}

/// Appends a `CTRL_CMD_GETFAMILY` request for `name` to `out`, with
/// `flags` (`NLM_F_REQUEST` is always set).
pub(crate) fn encode_get_family(out: &mut Vec<u8>, name: &str, seq: u32, flags: u16) {
    let cmd = u8::from(GenlCtrlCmd::GetFamily);
    // GENL_ID_CTRL is a valid family id and a family name (the crate asks
    // for "IPVS") is far below netlink's length limits, so neither step
    // fails; the unit test below checks the bytes.
    let Ok(start) = frame::begin_request(out, GENL_ID_CTRL, flags, seq, cmd, CTRL_VERSION) else {
        return;
    };
    push_attr(out, &GenlCtrlAttrs::FamilyName(name.to_owned()));
    let _ = frame::end_request(out, start);
}

/// `CTRL_ATTR_FAMILY_ID`.
const CTRL_ATTR_FAMILY_ID: u16 = 1;
/// `CTRL_ATTR_VERSION`.
const CTRL_ATTR_VERSION: u16 = 3;

/// What the controller says of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FamilyInfo {
    /// The family id: the netlink message type of its requests.
    pub id: u16,
    /// The family's version (0 if the reply had none).
    pub version: u32,
}

/// Reads id and version out of a controller reply body. Only those two
/// attributes are looked at, so attributes a newer kernel adds cannot make
/// resolution fail.
pub(crate) fn decode_family(data: &[u8]) -> Result<FamilyInfo, DecodeError> {
    let id = decode_family_id(data)?;
    let mut version = 0;
    let attrs = data.get(GENL_HDRLEN..).unwrap_or(&[]);
    for nla in RawAttrs::new(attrs) {
        let nla = nla?;
        let v = nla.value();
        if nla.kind() == CTRL_ATTR_VERSION && v.len() == 4 {
            version = u32::from_ne_bytes([v[0], v[1], v[2], v[3]]);
        }
    }
    Ok(FamilyInfo { id, version })
}

/// Reads the family id out of a controller reply body (generic-netlink header
/// and attributes). Only the id attribute is looked at, so attributes a newer
/// kernel adds to the reply cannot make resolution fail.
pub fn decode_family_id(data: &[u8]) -> Result<u16, DecodeError> {
    let attrs = data
        .get(GENL_HDRLEN..)
        .ok_or_else(|| DecodeError::from("controller reply truncated"))?;
    for nla in RawAttrs::new(attrs) {
        let nla = nla?;
        if nla.kind() == CTRL_ATTR_FAMILY_ID {
            let v = nla.value();
            if v.len() == 2 {
                return Ok(u16::from_ne_bytes([v[0], v[1]]));
            }
            return Err(DecodeError::from("controller family id of the wrong size"));
        }
    }
    Err(DecodeError::from("controller reply without a family id"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request the kernel's own `genl ctrl get name IPVS` sends, but for
    /// the sequence number; and a reply captured from Linux 6.1, trimmed to
    /// the attributes read (name, id, version) plus one the decoder skips.
    #[test]
    fn get_family_request_and_reply_bytes() {
        let mut out = Vec::new();
        encode_get_family(&mut out, "IPVS", 7, frame::NLM_F_ACK);
        assert_eq!(
            out,
            [
                32, 0, 0, 0, 0x10, 0, 5, 0, 7, 0, 0, 0, 0, 0, 0, 0, // nlmsghdr
                3, 2, 0, 0, // CTRL_CMD_GETFAMILY, version 2
                9, 0, 2, 0, b'I', b'P', b'V', b'S', 0, 0, 0, 0, // FAMILY_NAME
            ]
        );
        let reply = [
            1, 2, 0, 0, // CTRL_CMD_NEWFAMILY, version 2
            6, 0, 1, 0, 0x24, 0, 0, 0, // FAMILY_ID 0x24
            9, 0, 2, 0, b'I', b'P', b'V', b'S', 0, 0, 0, 0, // FAMILY_NAME
            8, 0, 3, 0, 1, 0, 0, 0, // VERSION 1
            8, 0, 4, 0, 0, 0, 0, 0, // HDRSIZE 0
        ];
        assert_eq!(
            decode_family(&reply).unwrap(),
            FamilyInfo {
                id: 0x24,
                version: 1
            }
        );
        assert_eq!(decode_family_id(&reply).unwrap(), 0x24);
        // A length running past the buffer is an error, not a panic.
        assert!(decode_family(&reply[..9]).is_err());
    }
}
