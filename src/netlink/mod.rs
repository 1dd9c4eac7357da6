//! The socket layer: generic-netlink family resolution, sequence numbers,
//! batching, dumps and network namespaces. Thin by design: it moves bytes
//! that [`crate::codec`] builds and parses.

mod exchange;
pub mod netns;
mod socket;

pub use exchange::{Exchange, Failure, Kind, Reply};
pub use socket::{Datagram, DumpSize, GenlSocket};
pub(crate) use socket::{connect_to_kernel, from_kernel};
