//! The generic-netlink controller messages needed to resolve the IPVS family
//! id (`CTRL_CMD_GETFAMILY` by name), built with netlink-packet-generic's
//! controller types.

use netlink_packet_core::{Emitable, NlasIterator};

use super::DecodeError;
use netlink_packet_generic::ctrl::nlas::GenlCtrlAttrs;
use netlink_packet_generic::ctrl::{GenlCtrl, GenlCtrlCmd};

use super::frame::{GENL_HDRLEN, NLM_F_ACK, NLM_F_REQUEST, NLMSG_HDRLEN};

/// `GENL_ID_CTRL`: the controller's fixed family id.
pub const GENL_ID_CTRL: u16 = 0x10;

/// Appends a `CTRL_CMD_GETFAMILY` request for `name` to `out`.
pub(crate) fn encode_get_family(out: &mut Vec<u8>, name: &str, seq: u32) {
    let ctrl = GenlCtrl {
        cmd: GenlCtrlCmd::GetFamily,
        nlas: vec![GenlCtrlAttrs::FamilyName(name.to_owned())],
    };
    let total = NLMSG_HDRLEN + GENL_HDRLEN + ctrl.buffer_len();
    let start = out.len();
    out.extend_from_slice(&(total as u32).to_ne_bytes());
    out.extend_from_slice(&GENL_ID_CTRL.to_ne_bytes());
    out.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    // Controller version 2, as the kernel's own tools send.
    out.extend_from_slice(&[u8::from(GenlCtrlCmd::GetFamily), 2, 0, 0]);
    out.resize(start + total, 0);
    ctrl.emit(&mut out[start + NLMSG_HDRLEN + GENL_HDRLEN..]);
}

/// `CTRL_ATTR_FAMILY_ID`.
const CTRL_ATTR_FAMILY_ID: u16 = 1;
/// `CTRL_ATTR_VERSION`.
const CTRL_ATTR_VERSION: u16 = 3;

/// What the controller says of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    for nla in NlasIterator::new(attrs) {
        let nla = nla.map_err(DecodeError::from_wire)?;
        let v = nla.value();
        if nla.kind() & super::consts::NLA_TYPE_MASK == CTRL_ATTR_VERSION && v.len() == 4 {
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
    for nla in NlasIterator::new(attrs) {
        let nla = nla.map_err(DecodeError::from_wire)?;
        if nla.kind() & super::consts::NLA_TYPE_MASK == CTRL_ATTR_FAMILY_ID {
            let v = nla.value();
            if v.len() == 2 {
                return Ok(u16::from_ne_bytes([v[0], v[1]]));
            }
            return Err(DecodeError::from("controller family id of the wrong size"));
        }
    }
    Err(DecodeError::from("controller reply without a family id"))
}
