//! # ipvsctl
//!
//! Control Linux IPVS, the kernel's layer-4 load balancer, over generic netlink.
//!
//! The crate is layered so that data flows one way:
//!
//! * [`model`] — plain data and validation, no I/O.
//! * [`codec`] — model ⇄ generic-netlink messages, pure (sans-IO).
//! * [`netlink`] — the socket: family resolution, sequence numbers, batching, namespaces.
//! * `handle` — the public operations built from codec + netlink.
//! * [`sync`] — plan (pure diff) and apply (executor) for bulk reconciliation.
//! * [`nodeips`], [`kmod`] — host-facing helpers.
#![deny(missing_docs)]
#![forbid(unsafe_op_in_unsafe_fn)]

pub mod codec;
pub mod conns;
mod handle;
pub mod kmod;
pub mod model;
pub mod netlink;
pub mod nodeips;
pub mod sync;
pub mod sysctl;

pub use handle::{BatchMode, BatchReport, Error, Handle, Op, Result};
pub use netlink::netns::NetNs;

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
