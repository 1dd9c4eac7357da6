//! The sans-IO codec for the IPVS generic-netlink family: model values to
//! request bytes, reply bytes to model values. No sockets here.
//!
//! Layers, bottom up:
//!
//! * [`consts`] — the numbers of `include/uapi/linux/ip_vs.h`;
//! * [`attr`] — attribute enums (lossless wire form, with `Other` fallbacks);
//!   the one place where byte orders and layouts are decided;
//! * [`IpvsMessage`] — a command plus top-level attributes;
//! * [`request`] and [`reply`] — conversions between the model and messages;
//! * [`frame`] — netlink framing: writing requests into a send buffer,
//!   splitting datagrams into data, ACKs, errors (with extended ACK) and
//!   dump ends;
//! * [`ctrl`] — resolving the family id through the generic-netlink
//!   controller.
//!
//! Nothing here panics on input: a truncated or hostile reply is a
//! [`DecodeError`].
//!
//! ```
//! use ipvsctl::codec::{frame, request};
//! use ipvsctl::model::{ServiceKey, VirtualServer};
//!
//! let vs = VirtualServer::new(ServiceKey::tcp("10.0.0.1:80".parse().unwrap()));
//! let mut out = Vec::new();
//! let msg = request::new_service(&vs).unwrap();
//! frame::encode_request(&mut out, &msg, 0x1c, 1, frame::NLM_F_ACK).unwrap();
//! // Decoding the request body gives the same message back.
//! let f = frame::frames(&out).next().unwrap().unwrap();
//! let frame::FrameBody::Data(body) = f.body else { unreachable!() };
//! assert_eq!(frame::decode_message(body).unwrap(), msg);
//! ```

pub mod attr;
pub mod consts;
pub mod ctrl;
pub mod frame;
mod message;
pub mod reply;
pub mod request;

pub use message::{IpvsCmd, IpvsMessage};
pub use netlink_packet_core::DecodeError;
