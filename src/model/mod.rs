//! Plain data and validation: what users program against. No I/O here.
//!
//! # Identity and configuration
//!
//! Every kernel object has an *identity* (which object) and a *configuration*
//! (what it does):
//!
//! * a virtual server is identified by its [`ServiceKey`] (protocol + socket
//!   address, or firewall mark + address family);
//! * a real server is identified, within its virtual server, by its socket
//!   address ([`RealServer::addr`]).
//!
//! `==` on [`VirtualServer`] and [`RealServer`] compares identity *and*
//! configuration: two values are equal exactly when the kernel object needs no
//! update to go from one to the other. The codec normalises what the kernel
//! fills in on its own (the internal `HASHED` flag, 16-byte address
//! attributes, the flags mask), so for every valid value `x`, what the kernel
//! reports after adding `x` compares equal to `x`.
//!
//! Statistics and connection counts live in separate read-only types
//! ([`ServiceSnapshot`], [`DestinationSnapshot`]) and never take part in
//! equality of the configuration types.

mod daemon;
mod dest;
mod family;
mod scheduler;
mod service;
mod status;
mod validate;

pub use daemon::{DaemonRole, SyncDaemon};
pub use dest::{ForwardMethod, RealServer, Tunnel, TunnelEncap, TunnelFlags};
pub use family::{AddressFamily, Protocol};
pub use scheduler::{PersistenceEngine, Scheduler};
#[cfg(test)]
pub(crate) use service::keys_differing_in_one_field;
pub use service::{Netmask, ServiceFlags, ServiceKey, VirtualServer};
pub use status::{
    ConnCounts, DestinationSnapshot, Info, ServiceSnapshot, Stats, StatsSource, Timeouts, Version,
};
pub use validate::{MAX_TIMEOUT, ValidationError, validate_destination};

/// The longest name the kernel accepts for a scheduler, persistence engine or
/// interface (`IP_VS_SCHEDNAME_MAXLEN` / `IP_VS_PENAME_MAXLEN` /
/// `IP_VS_IFNAME_MAXLEN` are 16 bytes including the terminating NUL).
pub const MAX_NAME_LEN: usize = 15;
