//! The socket layer: generic-netlink family resolution, sequence numbers,
//! batching, dumps and network namespaces. Thin by design: it moves bytes
//! that [`crate::codec`] builds and parses.

pub mod netns;
mod exchange;
mod socket;

pub use exchange::{Exchange, Failure, Kind, Reply};
pub use socket::GenlSocket;
