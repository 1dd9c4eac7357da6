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
///
/// Construct with [`SyncDaemon::new`] and the `with_*` methods;
/// `#[non_exhaustive]`, so a new kernel attribute can become a field.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
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
    pub fn new(role: DaemonRole, interface: impl Into<String>) -> Self {
        SyncDaemon {
            role,
            interface: interface.into(),
            sync_id: 0,
            max_len: None,
            group: None,
            port: None,
            ttl: None,
        }
    }

    /// Sets the synchronisation id (`--syncid`).
    ///
    /// ```
    /// use ipvsctl::model::{DaemonRole, SyncDaemon};
    /// let d = SyncDaemon::new(DaemonRole::Backup, "eth1")
    ///     .with_sync_id(7)
    ///     .with_group([239, 1, 2, 3].into())
    ///     .with_port(8849)
    ///     .with_ttl(2)
    ///     .with_max_len(1400);
    /// assert!(d.validate().is_ok());
    /// ```
    pub fn with_sync_id(mut self, sync_id: u32) -> Self {
        self.sync_id = sync_id;
        self
    }

    /// Sets the maximum sync message length (`--sync-maxlen`; the kernel's
    /// default unless set).
    pub fn with_max_len(mut self, max_len: u16) -> Self {
        self.max_len = Some(max_len);
        self
    }

    /// Sets the multicast group (`--mcast-group`; the kernel's
    /// default unless set).
    pub fn with_group(mut self, group: IpAddr) -> Self {
        self.group = Some(group);
        self
    }

    /// Sets the multicast UDP port (`--mcast-port`; the kernel's
    /// default unless set).
    pub fn with_port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Sets the multicast TTL (`--mcast-ttl`; the kernel's
    /// default unless set).
    pub fn with_ttl(mut self, ttl: u8) -> Self {
        self.ttl = Some(ttl);
        self
    }
}
