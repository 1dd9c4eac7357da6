//! Sync-daemon errors against a real kernel, in a test binary of their own.
//!
//! In `kernel_handle`, next to tests that run `ip netns exec` and delete
//! their namespaces at the same moment, the ACK of `stop_daemon(Backup)`
//! never arrived (the receive timed out after 60 s) although the kernel had
//! finished the request: the sync thread was gone and no task was blocked.
//! It happened on every full run of that binary on the development machine
//! in November 2026 and never under strace or alone; it is not understood
//! (README "Kernel facts found while testing"). Here the daemon test runs
//! without that company, so that its own assertions are what it checks.

mod support;

use ipvsctl::Error;
use ipvsctl::model::{DaemonRole, SyncDaemon};

/// Sync-daemon errnos: ENODEV, EEXIST, ESRCH.
#[test]
fn daemon_errnos() {
    let (_ns, h) = support::netns_with_handle();
    let e = h
        .start_daemon(&SyncDaemon::new(DaemonRole::Master, "nosuch0"))
        .unwrap_err();
    assert!(matches!(e, Error::NoSuchDevice { .. }), "{e}");
    let d = SyncDaemon::new(DaemonRole::Backup, "lo");
    h.start_daemon(&d).unwrap();
    assert!(matches!(
        h.start_daemon(&d),
        Err(Error::DaemonRunning { .. })
    ));
    h.stop_daemon(DaemonRole::Backup).unwrap();
    assert!(matches!(
        h.stop_daemon(DaemonRole::Backup),
        Err(Error::DaemonNotRunning { .. })
    ));
}
