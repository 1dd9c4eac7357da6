//! The socket layer: generic-netlink family resolution, sequence numbers,
//! batching, dumps and network namespaces. Thin by design: it moves bytes
//! that [`crate::codec`] builds and parses.
//!
//! # Stability: a low-level layer
//!
//! [`crate::Handle`] is built on this module and is what most users need;
//! [`netns::NetNs`] (also at the crate root) is the only part the
//! high-level API takes. The rest is public for tools that drive a socket
//! themselves (tests, capture programs) and follows the crate's own
//! versioning with one exception: [`netns::socket_in`] returns a
//! `netlink_sys::Socket`, so its signature follows whatever netlink-sys
//! version this crate depends on and may change in a minor release when
//! that dependency is updated.

mod exchange;
pub mod netns;
pub mod pipeline;
pub(crate) mod route;
mod socket;

pub use exchange::Exchange;
pub(crate) use exchange::drive;
pub use pipeline::{Failure, Kind, Reply};
pub use socket::{DEFAULT_TIMEOUT, Datagram, DumpSize, GenlSocket};
pub(crate) use socket::{connect_to_kernel, from_kernel};
