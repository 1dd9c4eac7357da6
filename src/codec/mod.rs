//! The sans-IO codec for the IPVS generic-netlink family: model values to
//! request bytes, reply bytes to model values. No sockets here.
//!
//! Layers, bottom up:
//!
//! * [`consts`] — the numbers of `include/uapi/linux/ip_vs.h`;
//! * [`attr`] — attribute enums (lossless wire form, with `Other` fallbacks);
//!   the one place where byte orders and layouts are decided;
//! * [`IpvsMessage`] — a command plus top-level attributes, sent as a
//!   command or a dump ([`RequestKind`]);
//! * [`request`] and [`reply`] — conversions between the model and messages;
//! * [`frame`] — netlink framing: writing requests into a send buffer,
//!   splitting datagrams into data, ACKs, errors (with extended ACK) and
//!   dump ends;
//! * [`ctrl`] — resolving the family id through the generic-netlink
//!   controller;
//! * `route` (crate-private) — the rtnetlink requests of [`crate::vip`] and
//!   [`crate::nodeips`] through one framing function, and the one decoder
//!   of link and address messages, one attribute space per file;
//! * [`conntrack`] — ctnetlink (`NETLINK_NETFILTER`): the dump, delete and
//!   create requests of [`crate::conntrack`] and the decoder of the
//!   entries a dump reports ([`conntrack::decode_datagram`]).
//!
//! Nothing here panics on input: a truncated or hostile reply is a
//! [`DecodeError`].
//!
//! # Stability: a low-level layer
//!
//! This module is the wire format. Most users need only [`crate::Handle`],
//! [`crate::sync`] and [`crate::model`], which never expose a type of
//! another crate. The codec is public for tools that build or inspect raw
//! IPVS messages (capture, replay, fuzzing), with these limits:
//!
//! * its types are this crate's own: [`DecodeError`], [`IpvsMessage`], the
//!   attribute enums and [`attr::UnknownAttr`] carry no type of
//!   netlink-packet-core or netlink-packet-generic;
//! * the attribute enums and [`IpvsMessage`] implement netlink-packet-core's
//!   `Nla` and `Emitable` traits (that is how they are written to the wire).
//!   Those trait implementations follow whatever netlink-packet-core
//!   version this crate depends on, and may change or go away in a minor
//!   release when that dependency is updated; use [`frame::encode_request`]
//!   and [`frame::decode_message`] for a stable way in and out;
//! * the attribute enums are `#[non_exhaustive]` and grow as the kernel's
//!   attribute spaces do.
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
pub mod conntrack;
pub mod consts;
pub mod ctrl;
mod error;
pub mod frame;
mod message;
pub mod reply;
pub mod request;
pub(crate) mod route;

pub use error::DecodeError;
pub use message::{IpvsCmd, IpvsMessage, RequestKind};
