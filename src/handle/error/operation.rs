//! The operation an [`Error`](super::Error) is about, kept as a value and
//! turned into words only when displayed.

use std::fmt;
use std::net::SocketAddr;

use super::Target;
use crate::codec::IpvsCmd;
use crate::model::{DaemonRole, ServiceKey};

/// What was asked when an [`Error`](super::Error) happened, with the object
/// it acted on: every variant of [`Error`](super::Error) that has an `op`
/// field carries one, so a caller can match on which operation failed.
///
/// `Display` gives the words of the error messages (`add real server
/// 10.244.1.7:8080 of TCP 10.96.0.10:80`); nothing is formatted until then.
///
/// ```
/// use ipvsctl::Operation;
/// use ipvsctl::model::ServiceKey;
/// let key = ServiceKey::tcp("10.96.0.10:80".parse().unwrap());
/// let op = Operation::DeleteService(key);
/// assert_eq!(op.to_string(), "delete virtual server TCP 10.96.0.10:80");
/// assert_eq!(op.service(), Some(&key));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Adding a virtual server ([`crate::Handle::add_service`],
    /// [`crate::batch::Write::AddService`]).
    AddService(ServiceKey),
    /// Changing a virtual server ([`crate::Handle::update_service`],
    /// [`crate::batch::Write::UpdateService`]).
    UpdateService(ServiceKey),
    /// Deleting a virtual server.
    DeleteService(ServiceKey),
    /// Reading one virtual server ([`crate::Handle::get_service`]).
    GetService(ServiceKey),
    /// Listing every virtual server of the namespace.
    ListServices,
    /// Adding a real server.
    AddDestination {
        /// The virtual server.
        service: ServiceKey,
        /// The real server.
        server: SocketAddr,
    },
    /// Changing a real server.
    UpdateDestination {
        /// The virtual server.
        service: ServiceKey,
        /// The real server.
        server: SocketAddr,
    },
    /// Removing a real server.
    DeleteDestination {
        /// The virtual server.
        service: ServiceKey,
        /// The real server.
        server: SocketAddr,
    },
    /// Listing the real servers of a virtual server.
    ListDestinations(ServiceKey),
    /// Starting a connection sync daemon.
    StartDaemon(DaemonRole),
    /// Stopping a connection sync daemon.
    StopDaemon(DaemonRole),
    /// Listing the sync daemons.
    ListDaemons,
    /// Setting the connection timeouts.
    SetTimeouts,
    /// Reading the connection timeouts.
    GetTimeouts,
    /// Reading the IPVS version and connection-table size.
    GetInfo,
    /// Zeroing the counters of one virtual server, or of all (`None`).
    ZeroCounters(Option<ServiceKey>),
    /// Deleting every virtual server.
    Flush,
    /// A request known only by its command: one sent with
    /// [`crate::Handle::request`], which names no object.
    Request(IpvsCmd),
    /// Opening the network namespace of a handle.
    OpenNamespace,
    /// Opening a netlink socket of a handle.
    OpenSocket,
    /// Resolving the `IPVS` generic-netlink family when a handle opens.
    ResolveFamily,
    /// Sending requests or receiving their answers: the socket itself
    /// failed, not one request.
    Exchange,
    /// Checking the kernel modules a scheduler or engine needs
    /// ([`crate::capabilities::Capabilities`]).
    CheckModules,
    /// Opening the write socket of a [`crate::sync::Syncer`].
    OpenSyncSocket,
    /// Sending a [`crate::sync::Syncer`]'s write batch: its socket failed.
    SyncWrite,
    /// Saving a [`crate::sync::Syncer`]'s ownership ledger through its
    /// [`crate::sync::LedgerStore`].
    SaveLedger,
    /// Starting the worker thread of the async front (feature `tokio`).
    StartWorker,
}

impl Operation {
    /// The virtual server the operation acted on, if it names one.
    pub fn service(&self) -> Option<&ServiceKey> {
        match self {
            Operation::AddService(key)
            | Operation::UpdateService(key)
            | Operation::DeleteService(key)
            | Operation::GetService(key)
            | Operation::ListDestinations(key)
            | Operation::ZeroCounters(Some(key)) => Some(key),
            Operation::AddDestination { service, .. }
            | Operation::UpdateDestination { service, .. }
            | Operation::DeleteDestination { service, .. } => Some(service),
            _ => None,
        }
    }

    /// The real server the operation acted on, if it names one.
    pub fn server(&self) -> Option<SocketAddr> {
        match self {
            Operation::AddDestination { server, .. }
            | Operation::UpdateDestination { server, .. }
            | Operation::DeleteDestination { server, .. } => Some(*server),
            _ => None,
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Operation as O;
        let (service, server) = (self.service(), self.server());
        let what = match self {
            O::AddService(_) => command_name(IpvsCmd::NewService),
            O::UpdateService(_) => command_name(IpvsCmd::SetService),
            O::DeleteService(_) => command_name(IpvsCmd::DelService),
            O::GetService(_) => command_name(IpvsCmd::GetService),
            O::ListServices => "list virtual servers",
            O::AddDestination { .. } => command_name(IpvsCmd::NewDest),
            O::UpdateDestination { .. } => command_name(IpvsCmd::SetDest),
            O::DeleteDestination { .. } => command_name(IpvsCmd::DelDest),
            O::ListDestinations(_) => command_name(IpvsCmd::GetDest),
            O::StartDaemon(role) => return write!(f, "start sync daemon ({role:?})"),
            O::StopDaemon(role) => return write!(f, "stop sync daemon ({role:?})"),
            O::ListDaemons => command_name(IpvsCmd::GetDaemon),
            O::SetTimeouts => command_name(IpvsCmd::SetConfig),
            O::GetTimeouts => command_name(IpvsCmd::GetConfig),
            O::GetInfo => command_name(IpvsCmd::GetInfo),
            O::ZeroCounters(_) => command_name(IpvsCmd::Zero),
            O::Flush => command_name(IpvsCmd::Flush),
            O::Request(cmd) => command_name(*cmd),
            O::OpenNamespace => "open network namespace",
            O::OpenSocket => "open netlink socket",
            O::ResolveFamily => "resolve the IPVS generic-netlink family",
            O::Exchange => "netlink exchange",
            O::CheckModules => "check kernel modules",
            O::OpenSyncSocket => "open the sync's netlink socket",
            O::SyncWrite => "sync write",
            O::SaveLedger => "save the sync's ownership ledger",
            O::StartWorker => "start the async worker thread",
        };
        match (server, service) {
            (Some(addr), Some(key)) => write!(f, "{what} {addr} of {key}"),
            (None, Some(key)) => write!(f, "{what} {key}"),
            _ => f.write_str(what),
        }
    }
}

/// What a command does, in the words of error messages.
fn command_name(cmd: IpvsCmd) -> &'static str {
    match cmd {
        IpvsCmd::NewService => "add virtual server",
        IpvsCmd::SetService => "edit virtual server",
        IpvsCmd::DelService => "delete virtual server",
        IpvsCmd::GetService => "get virtual server",
        IpvsCmd::NewDest => "add real server",
        IpvsCmd::SetDest => "edit real server",
        IpvsCmd::DelDest => "delete real server",
        IpvsCmd::GetDest => "list real servers",
        IpvsCmd::NewDaemon => "start sync daemon",
        IpvsCmd::DelDaemon => "stop sync daemon",
        IpvsCmd::GetDaemon => "list sync daemons",
        IpvsCmd::SetConfig => "set timeouts",
        IpvsCmd::GetConfig => "get timeouts",
        IpvsCmd::GetInfo | IpvsCmd::SetInfo => "get info",
        IpvsCmd::Zero => "zero counters",
        IpvsCmd::Flush => "flush",
        IpvsCmd::Other(_) => "request",
    }
}

/// The operation of a request: its command and what it acted on. A command
/// sent without the object it needs (a raw [`crate::Handle::request`]) is an
/// [`Operation::Request`].
pub(crate) fn describe(cmd: IpvsCmd, target: &Target) -> Operation {
    use Operation as O;
    match target {
        Target::NewService { key, .. } | Target::Service(key) => match cmd {
            IpvsCmd::NewService => O::AddService(*key),
            IpvsCmd::SetService => O::UpdateService(*key),
            IpvsCmd::DelService => O::DeleteService(*key),
            IpvsCmd::GetService => O::GetService(*key),
            IpvsCmd::GetDest => O::ListDestinations(*key),
            IpvsCmd::Zero => O::ZeroCounters(Some(*key)),
            cmd => O::Request(cmd),
        },
        Target::Dest { key, addr } => {
            let (service, server) = (*key, *addr);
            match cmd {
                IpvsCmd::NewDest => O::AddDestination { service, server },
                IpvsCmd::SetDest => O::UpdateDestination { service, server },
                IpvsCmd::DelDest => O::DeleteDestination { service, server },
                cmd => O::Request(cmd),
            }
        }
        Target::Daemon(Some(role)) if cmd == IpvsCmd::NewDaemon => O::StartDaemon(*role),
        Target::Daemon(Some(role)) if cmd == IpvsCmd::DelDaemon => O::StopDaemon(*role),
        Target::Daemon(_) | Target::Global => match cmd {
            IpvsCmd::GetService => O::ListServices,
            IpvsCmd::GetDaemon => O::ListDaemons,
            IpvsCmd::SetConfig => O::SetTimeouts,
            IpvsCmd::GetConfig => O::GetTimeouts,
            IpvsCmd::GetInfo | IpvsCmd::SetInfo => O::GetInfo,
            IpvsCmd::Zero => O::ZeroCounters(None),
            IpvsCmd::Flush => O::Flush,
            cmd => O::Request(cmd),
        },
    }
}
