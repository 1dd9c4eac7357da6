//! Operations and errors display the words they always have, and can be
//! matched on as values.

use std::io;
use std::net::SocketAddr;

use super::{Error, Operation, Target, describe};
use crate::codec::IpvsCmd;
use crate::codec::frame::NlError;
use crate::model::{AddressFamily, DaemonRole, ServiceKey, ValidationError};

fn key() -> ServiceKey {
    ServiceKey::tcp("10.96.0.10:80".parse().unwrap())
}

fn addr() -> SocketAddr {
    "10.244.1.7:8080".parse().unwrap()
}

fn new_service() -> Target {
    Target::NewService {
        key: key(),
        scheduler: "wrr".into(),
        engine: None,
    }
}

fn dest() -> Target {
    Target::Dest {
        key: key(),
        addr: addr(),
    }
}

fn kernel(errno: i32, message: Option<&str>) -> NlError {
    NlError {
        code: -errno,
        message: message.map(str::to_owned),
        bad_attr_offset: None,
        missing_attr: None,
        request_seq: 7,
    }
}

/// Every command with the target the handle sends it with, and the words
/// its errors have always started with.
#[test]
fn operations_display_the_words_of_error_messages() {
    let fwm = ServiceKey::fwmark(7, AddressFamily::Inet6);
    let cases = [
        (
            IpvsCmd::NewService,
            new_service(),
            "add virtual server TCP 10.96.0.10:80",
        ),
        (
            IpvsCmd::SetService,
            new_service(),
            "edit virtual server TCP 10.96.0.10:80",
        ),
        (
            IpvsCmd::DelService,
            Target::Service(key()),
            "delete virtual server TCP 10.96.0.10:80",
        ),
        (
            IpvsCmd::GetService,
            Target::Service(fwm),
            "get virtual server FWM 7 IPv6",
        ),
        (IpvsCmd::GetService, Target::Global, "list virtual servers"),
        (
            IpvsCmd::NewDest,
            dest(),
            "add real server 10.244.1.7:8080 of TCP 10.96.0.10:80",
        ),
        (
            IpvsCmd::SetDest,
            dest(),
            "edit real server 10.244.1.7:8080 of TCP 10.96.0.10:80",
        ),
        (
            IpvsCmd::DelDest,
            dest(),
            "delete real server 10.244.1.7:8080 of TCP 10.96.0.10:80",
        ),
        (
            IpvsCmd::GetDest,
            Target::Service(key()),
            "list real servers TCP 10.96.0.10:80",
        ),
        (
            IpvsCmd::NewDaemon,
            Target::Daemon(Some(DaemonRole::Master)),
            "start sync daemon (Master)",
        ),
        (
            IpvsCmd::DelDaemon,
            Target::Daemon(Some(DaemonRole::Backup)),
            "stop sync daemon (Backup)",
        ),
        (
            IpvsCmd::GetDaemon,
            Target::Daemon(None),
            "list sync daemons",
        ),
        (IpvsCmd::SetConfig, Target::Global, "set timeouts"),
        (IpvsCmd::GetConfig, Target::Global, "get timeouts"),
        (IpvsCmd::GetInfo, Target::Global, "get info"),
        (IpvsCmd::Zero, Target::Global, "zero counters"),
        (
            IpvsCmd::Zero,
            Target::Service(key()),
            "zero counters TCP 10.96.0.10:80",
        ),
        (IpvsCmd::Flush, Target::Global, "flush"),
        // Raw requests (`Handle::request`) name no object.
        (IpvsCmd::NewService, Target::Global, "add virtual server"),
        (IpvsCmd::DelDest, Target::Global, "delete real server"),
        (IpvsCmd::Other(42), Target::Global, "request"),
    ];
    for (cmd, target, words) in cases {
        assert_eq!(describe(cmd, &target).to_string(), words, "{cmd:?}");
    }
    let others = [
        (Operation::OpenNamespace, "open network namespace"),
        (Operation::OpenSocket, "open netlink socket"),
        (
            Operation::ResolveFamily,
            "resolve the IPVS generic-netlink family",
        ),
        (Operation::Exchange, "netlink exchange"),
        (Operation::CheckModules, "check kernel modules"),
        (Operation::OpenSyncSocket, "open the sync's netlink socket"),
        (Operation::SyncWrite, "sync write"),
        (Operation::SaveLedger, "save the sync's ownership ledger"),
        (Operation::StartWorker, "start the async worker thread"),
    ];
    for (op, words) in others {
        assert_eq!(op.to_string(), words, "{op:?}");
    }
}

#[test]
fn requests_become_typed_operations_with_their_object() {
    assert_eq!(
        describe(IpvsCmd::SetService, &new_service()),
        Operation::UpdateService(key())
    );
    assert_eq!(
        describe(IpvsCmd::DelDest, &dest()),
        Operation::DeleteDestination {
            service: key(),
            server: addr()
        }
    );
    assert_eq!(
        describe(IpvsCmd::Zero, &Target::Global),
        Operation::ZeroCounters(None)
    );
    assert_eq!(
        describe(
            IpvsCmd::DelDaemon,
            &Target::Daemon(Some(DaemonRole::Master))
        ),
        Operation::StopDaemon(DaemonRole::Master)
    );
    // A command without the object it needs is not given a made-up one.
    assert_eq!(
        describe(IpvsCmd::NewDest, &Target::Service(key())),
        Operation::Request(IpvsCmd::NewDest)
    );
    let op = describe(IpvsCmd::NewDest, &dest());
    assert_eq!((op.service(), op.server()), (Some(&key()), Some(addr())));
    assert_eq!(Operation::ListServices.service(), None);
}

#[test]
fn kernel_errors_match_on_the_operation_and_display_as_before() {
    let target = Target::Service(key());
    let e = Error::from_kernel(
        describe(IpvsCmd::GetService, &target),
        &target,
        kernel(3, None),
    );
    assert_eq!(
        e.to_string(),
        "get virtual server TCP 10.96.0.10:80: virtual server TCP 10.96.0.10:80 does not exist"
    );
    assert!(
        matches!(
            &e,
            Error::ServiceNotFound { op: Operation::GetService(k), key: found }
                if *k == key() && *found == key()
        ),
        "{e:?}"
    );
    assert_eq!(e.operation(), Some(&Operation::GetService(key())));
    assert!(e.is_not_found());
    assert_eq!(e.errno(), Some(3));

    let e = Error::from_kernel(
        describe(IpvsCmd::NewDest, &dest()),
        &dest(),
        kernel(17, None),
    );
    assert_eq!(
        e.to_string(),
        "add real server 10.244.1.7:8080 of TCP 10.96.0.10:80: \
         real server 10.244.1.7:8080 of TCP 10.96.0.10:80 already exists"
    );
    assert!(matches!(
        e,
        Error::DestinationExists {
            op: Operation::AddDestination { .. },
            ..
        }
    ));

    let e = Error::from_kernel(
        describe(IpvsCmd::NewService, &new_service()),
        &new_service(),
        kernel(2, None),
    );
    assert_eq!(
        e.to_string(),
        "add virtual server TCP 10.96.0.10:80: the kernel has no scheduler \"wrr\" \
         (is module ip_vs_wrr available?)"
    );

    let e = Error::from_kernel(
        describe(IpvsCmd::SetDest, &dest()),
        &dest(),
        kernel(22, Some("bad weight")),
    );
    assert_eq!(
        e.to_string(),
        "edit real server 10.244.1.7:8080 of TCP 10.96.0.10:80: invalid argument: bad weight"
    );
    assert_eq!(e.kernel_message(), Some("bad weight"));

    let role = Target::Daemon(Some(DaemonRole::Master));
    let e = Error::from_kernel(describe(IpvsCmd::NewDaemon, &role), &role, kernel(17, None));
    assert_eq!(
        e.to_string(),
        "start sync daemon (Master): the sync daemon is already running"
    );
    assert!(matches!(
        e,
        Error::DaemonRunning {
            op: Operation::StartDaemon(DaemonRole::Master)
        }
    ));
}

#[test]
fn other_errors_carry_their_operation() {
    let e = Error::io(Operation::OpenSocket, io::Error::other("no buffer space"));
    assert_eq!(e.to_string(), "open netlink socket: no buffer space");
    assert_eq!(e.operation(), Some(&Operation::OpenSocket));

    let e = Error::Lost {
        op: describe(IpvsCmd::DelService, &Target::Service(key())),
    };
    assert_eq!(
        e.to_string(),
        "delete virtual server TCP 10.96.0.10:80: \
         the kernel's answer was lost (receive buffer overrun); outcome unknown"
    );

    let e = Error::Inconsistent {
        op: Operation::ListDestinations(key()),
        reads: 4,
    };
    assert_eq!(
        e.to_string(),
        "list real servers TCP 10.96.0.10:80: \
         the list changed while it was read in several passes (4 reads disagreed)"
    );

    let e = Error::from(ValidationError::ZeroFwMark);
    assert_eq!(e.operation(), None);
}

/// A socket failure is not an operation's failure, but a report that has
/// one is not ok.
#[test]
fn aborted_reports_are_not_ok() {
    let mut batch = crate::batch::BatchReport::default();
    assert!(batch.is_ok());
    batch.aborted = Some(Error::io(
        Operation::Exchange,
        io::Error::from_raw_os_error(105),
    ));
    assert!(!batch.is_ok() && batch.failed.is_empty());
    assert_eq!(batch.aborted.as_ref().and_then(Error::errno), Some(105));

    let mut sync = crate::sync::SyncReport::default();
    assert!(sync.is_ok());
    sync.aborted = Some(Error::io(
        Operation::SyncWrite,
        io::Error::from_raw_os_error(105),
    ));
    assert!(!sync.is_ok() && sync.root_failures().next().is_none());
    assert!(
        sync.aborted
            .as_ref()
            .is_some_and(|e| e.to_string().starts_with("sync write: "))
    );
}
