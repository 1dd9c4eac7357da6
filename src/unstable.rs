//! The crate's transport, for tests, benchmarks and capture tools that
//! drive netlink themselves: the socket ([`NlSocket`]), the sans-IO request
//! pipeline ([`Pipeline`] and its parts) and the driver ([`Exchange`]).
//!
//! **Outside semver.** Everything here may change or go away in any
//! release, patch releases included; it is built only with the feature
//! `unstable`. Programs that control IPVS want [`crate::Handle`],
//! [`crate::sync`], [`crate::vip`] and [`crate::nodeips`], which run every
//! request through this transport.
//!
//! ```no_run
//! use ipvsctl::NetNs;
//! use ipvsctl::Timeout;
//! use ipvsctl::unstable::{DumpSize, Exchange, NlSocket, Protocol};
//!
//! let mut sock = NlSocket::open(
//!     &NetNs::Current,
//!     Protocol::Generic,
//!     DumpSize::Large,
//!     Timeout::HANDLE_DEFAULT,
//! )?;
//! let mut seq = 0;
//! let ipvs = Exchange::new(&mut sock, &mut seq).resolve_family("IPVS")?;
//! println!("{ipvs:?}");
//! # Ok::<(), std::io::Error>(())
//! ```

pub use crate::codec::conntrack::entry::NewEntry;
pub use crate::netlink::exchange::Exchange;
pub use crate::netlink::pipeline::{
    Failure, Io, Kind, Limits, Outcomes, Pipeline, Push, Reply, Staged,
};
pub use crate::netlink::socket::{Datagram, DumpSize, NlSocket, Protocol};

/// Creates conntrack `entries` (as `conntrack -I` does) in `ct`'s
/// namespace, many per datagram: for tests and benchmarks that need a
/// table of a given size. Returns how many were created; the first entry
/// the kernel refused is the error.
pub fn conntrack_create(
    ct: &crate::conntrack::Conntrack,
    entries: &[NewEntry],
) -> Result<usize, crate::conntrack::ConntrackError> {
    crate::conntrack::create::create(ct, entries)
}

/// Appends the request for `write` straight into `out`, as the syncer's
/// writer does (no [`crate::codec::IpvsMessage`] built): the same bytes as
/// `frame::encode_request(out, &write.encode()?, family, seq, flags)` for a
/// valid `write`, written by the same attribute writers. For comparing the
/// two routes (`benches/codec.rs`); `write` must be valid.
pub fn encode_write(
    out: &mut Vec<u8>,
    write: &crate::batch::Write,
    family: u16,
    seq: u32,
    flags: u16,
) {
    crate::sync::wire::encode(out, write, family, seq, flags);
}
