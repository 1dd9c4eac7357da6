//! The transport: one netlink socket type for generic netlink (IPVS) and
//! rtnetlink (VIP devices, node IPs), one sans-IO request pipeline, and one
//! driver between them; plus network namespaces. Thin by design: it moves
//! bytes that [`crate::codec`] builds and parses.
//!
//! * [`netns`] — network namespaces (public: [`netns::NetNs`] is what the
//!   high-level API takes);
//! * `socket` — the socket (`ipvsctl::unstable::NlSocket` with feature
//!   `unstable`): opened for a protocol in any namespace,
//!   connected to the kernel, buffers sized, and the receive-deadline rule;
//! * `pipeline` — the sans-IO state machine every request goes through:
//!   packing, quiet ACKs, overruns, cut datagrams, duplicates and stale
//!   answers, foreign senders, interrupted dumps, silence;
//! * `exchange` — the driver: sends what the pipeline fills, feeds it what
//!   each receive got, and gives every receive only the time left before
//!   the pipeline's deadline.
//!
//! Only [`netns`] is public API. The socket, the pipeline and the driver
//! are the crate's own; tools and tests that drive them directly get them
//! from `ipvsctl::unstable` (feature `unstable`), outside semver.

pub(crate) mod dump;
pub(crate) mod exchange;
pub mod netns;
pub(crate) mod pipeline;
pub(crate) mod socket;

pub(crate) use exchange::{Exchange, drive};
pub(crate) use pipeline::{Failure, Kind, Reply};
pub(crate) use socket::{DumpSize, NlSocket, Protocol};
