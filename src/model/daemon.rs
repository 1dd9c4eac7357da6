//! The connection synchronisation daemon.

use std::net::IpAddr;

/// Which side of connection synchronisation a daemon runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum DaemonRole {
    /// Sends connection state (`IP_VS_STATE_MASTER`, 1).
    Master,
    /// Receives connection state (`IP_VS_STATE_BACKUP`, 2).
    Backup,
}

impl DaemonRole {
    /// The kernel's state number.
    pub fn raw(self) -> u32 {
        match self {
            DaemonRole::Master => 1,
            DaemonRole::Backup => 2,
        }
    }

    /// The role for a kernel state number.
    pub fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            1 => Some(DaemonRole::Master),
            2 => Some(DaemonRole::Backup),
            _ => None,
        }
    }
}

/// A sync daemon's configuration (`ipvsadm --start-daemon`).
///
/// Optional fields left `None` take the kernel's defaults (multicast group
/// 224.0.0.81, port 8848, TTL 1, maximum length from the interface MTU); the
/// kernel reports the values in force, so a daemon read back has them all.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct SyncDaemon {
    /// Master or backup.
    pub role: DaemonRole,
    /// The multicast interface (at most 15 bytes).
    pub interface: String,
    /// The synchronisation id (0..=255 in practice).
    pub sync_id: u32,
    /// Maximum sync message length (4.3+).
    pub max_len: Option<u16>,
    /// Multicast group, IPv4 or IPv6 (4.3+).
    pub group: Option<IpAddr>,
    /// Multicast UDP port (4.3+).
    pub port: Option<u16>,
    /// Multicast TTL (4.3+).
    pub ttl: Option<u8>,
}

impl SyncDaemon {
    /// A daemon with the kernel's defaults.
    ///
    /// ```
    /// use ipvsctl::model::{DaemonRole, SyncDaemon};
    /// let d = SyncDaemon::new(DaemonRole::Master, "eth0");
    /// assert!(d.validate().is_ok());
    /// ```
    pub fn new(role: DaemonRole, interface: &str) -> Self {
        SyncDaemon {
            role,
            interface: interface.to_owned(),
            sync_id: 0,
            max_len: None,
            group: None,
            port: None,
            ttl: None,
        }
    }
}
