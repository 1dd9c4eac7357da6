//! An IPVS generic-netlink message: a command and its top-level attributes.

use netlink_packet_core::Emitable;

use super::DecodeError;

use super::attr::{IpvsAttr, RawAttrs, emit_all, len_all};
use super::consts::FAMILY_VERSION;

/// IPVS commands (`IPVS_CMD_*`). `#[non_exhaustive]`: a command a newer
/// kernel adds gets its own variant (until then it decodes as `Other`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IpvsCmd {
    /// Add a service.
    NewService,
    /// Edit a service.
    SetService,
    /// Delete a service.
    DelService,
    /// Get one service, or dump all.
    GetService,
    /// Add a destination.
    NewDest,
    /// Edit a destination.
    SetDest,
    /// Delete a destination.
    DelDest,
    /// Dump a service's destinations.
    GetDest,
    /// Start a sync daemon.
    NewDaemon,
    /// Stop a sync daemon.
    DelDaemon,
    /// Dump sync daemons.
    GetDaemon,
    /// Set timeouts (also the reply to `GetConfig`).
    SetConfig,
    /// Get timeouts.
    GetConfig,
    /// Reply to `GetInfo`.
    SetInfo,
    /// Get version and connection-table size.
    GetInfo,
    /// Zero counters.
    Zero,
    /// Delete every service.
    Flush,
    /// A command number this crate does not know.
    Other(u8),
}

impl IpvsCmd {
    /// The command number.
    pub fn to_raw(self) -> u8 {
        match self {
            Self::NewService => 1,
            Self::SetService => 2,
            Self::DelService => 3,
            Self::GetService => 4,
            Self::NewDest => 5,
            Self::SetDest => 6,
            Self::DelDest => 7,
            Self::GetDest => 8,
            Self::NewDaemon => 9,
            Self::DelDaemon => 10,
            Self::GetDaemon => 11,
            Self::SetConfig => 12,
            Self::GetConfig => 13,
            Self::SetInfo => 14,
            Self::GetInfo => 15,
            Self::Zero => 16,
            Self::Flush => 17,
            Self::Other(n) => n,
        }
    }

    /// The command for a number.
    pub fn from_raw(raw: u8) -> Self {
        match raw {
            1 => Self::NewService,
            2 => Self::SetService,
            3 => Self::DelService,
            4 => Self::GetService,
            5 => Self::NewDest,
            6 => Self::SetDest,
            7 => Self::DelDest,
            8 => Self::GetDest,
            9 => Self::NewDaemon,
            10 => Self::DelDaemon,
            11 => Self::GetDaemon,
            12 => Self::SetConfig,
            13 => Self::GetConfig,
            14 => Self::SetInfo,
            15 => Self::GetInfo,
            16 => Self::Zero,
            17 => Self::Flush,
            n => Self::Other(n),
        }
    }

    /// Whether the top-level attributes of this command are info attributes.
    pub(crate) fn carries_info(self) -> bool {
        matches!(self, Self::SetInfo | Self::GetInfo)
    }
}

/// Which of the kernel's two handlers of a command answers a request sent
/// with [`crate::Handle::request`]: generic netlink gives every command a
/// `doit` and a `dumpit` handler, chosen by the request's `NLM_F_DUMP` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestKind {
    /// The command's `doit` handler: it acts on (or reads) the one object
    /// the message names and is acknowledged.
    Do,
    /// The command's `dumpit` handler (`NLM_F_DUMP`): every object of its
    /// kind (every service, every real server of a service, every sync
    /// daemon), in as many datagrams as it takes.
    Dump,
}

/// A whole IPVS message (the generic-netlink payload): command, version and
/// attributes. This is the lossless wire form; [`super::request`] builds
/// these from the model and [`super::reply`] turns them into the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpvsMessage {
    /// The command.
    pub cmd: IpvsCmd,
    /// The family version in the header (1 on every kernel).
    pub version: u8,
    /// Top-level attributes.
    pub attrs: Vec<IpvsAttr>,
}

impl IpvsMessage {
    /// A message of version [`FAMILY_VERSION`].
    pub fn new(cmd: IpvsCmd, attrs: Vec<IpvsAttr>) -> Self {
        IpvsMessage {
            cmd,
            version: FAMILY_VERSION,
            attrs,
        }
    }

    /// Parses the attributes that follow a generic-netlink header.
    pub(crate) fn parse_attrs(cmd: IpvsCmd, version: u8, buf: &[u8]) -> Result<Self, DecodeError> {
        let info = cmd.carries_info();
        let mut attrs = Vec::with_capacity(2);
        for nla in RawAttrs::new(buf) {
            attrs.push(IpvsAttr::parse_view(&nla?, info)?);
        }
        Ok(IpvsMessage {
            cmd,
            version,
            attrs,
        })
    }
}

impl Emitable for IpvsMessage {
    fn buffer_len(&self) -> usize {
        len_all(&self.attrs)
    }

    fn emit(&self, buffer: &mut [u8]) {
        emit_all(&self.attrs, buffer)
    }
}
