//! The handle's timeout against a request stuck in the kernel.
//!
//! A netlink `send` runs the kernel's handler in the sending thread, and
//! IPVS loads a scheduler it does not have from inside `ADD_SERVICE`,
//! waiting for `modprobe` to finish. Module autoloading is pointed at a
//! script that sleeps, so one thread's `add_service` stays in `send` for
//! seconds; another thread using the same handle must get `Error::Timeout`
//! after the handle's timeout instead of waiting with it, and the handle
//! must work once the stuck request returns.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ipvsctl::model::{Scheduler, ServiceKey, VirtualServer};
use ipvsctl::{Error, Handle, HandleOptions, NetNs, Operation};

const MODPROBE: &str = "/proc/sys/kernel/modprobe";
/// How long the fake `modprobe` takes.
const MODPROBE_SLEEP: Duration = Duration::from_secs(4);

/// Points module autoloading at a slow script while it lives.
struct SlowModprobe {
    saved: String,
    script: PathBuf,
    started: PathBuf,
}

impl SlowModprobe {
    fn install() -> SlowModprobe {
        let dir = std::env::temp_dir();
        let pid = std::process::id();
        let script = dir.join(format!("ipvsctl-slow-modprobe-{pid}"));
        let started = dir.join(format!("ipvsctl-slow-modprobe-{pid}.started"));
        let _ = fs::remove_file(&started);
        let body = format!(
            "#!/bin/sh\ntouch {}\nsleep {}\nexit 1\n",
            started.display(),
            MODPROBE_SLEEP.as_secs()
        );
        fs::write(&script, body).expect("write the fake modprobe");
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).expect("chmod");
        let saved = fs::read_to_string(MODPROBE).expect("read the modprobe path");
        fs::write(MODPROBE, script.to_str().unwrap()).expect("point autoloading at the script");
        SlowModprobe {
            saved,
            script,
            started,
        }
    }

    /// Waits (bounded) until the kernel has started the script.
    fn wait_started(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !Path::new(&self.started).exists() {
            assert!(Instant::now() < deadline, "the kernel never ran modprobe");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for SlowModprobe {
    fn drop(&mut self) {
        let _ = fs::write(MODPROBE, self.saved.trim());
        let _ = fs::remove_file(&self.script);
        let _ = fs::remove_file(&self.started);
    }
}

#[test]
fn a_caller_behind_a_request_stuck_in_the_kernel_times_out_and_the_handle_recovers() {
    support::require_ipvs();
    let ns = support::TestNetns::with_ipvs();
    let timeout = Duration::from_millis(500);
    let options = HandleOptions::new().with_timeout(ipvsctl::Timeout::new(timeout).unwrap());
    let h = Handle::open(&NetNs::path(ns.path()), &options).expect("open handle");
    assert_eq!(h.timeout().get(), timeout);
    let key = ServiceKey::tcp("10.96.7.1:80".parse().unwrap());
    let slow = SlowModprobe::install();
    std::thread::scope(|s| {
        let stuck = s.spawn(|| {
            let start = Instant::now();
            let vs = VirtualServer::new(key).with_scheduler(Scheduler::from_name("ipvsctlslow"));
            (h.add_service(&vs), start.elapsed())
        });
        slow.wait_started();
        let start = Instant::now();
        let waiting = h.info();
        let elapsed = start.elapsed();
        match waiting {
            Err(Error::Timeout { op, waited }) => {
                assert_eq!(op, Operation::GetInfo, "{op}");
                assert!(waited >= timeout, "waited only {waited:?}");
                assert!(
                    elapsed < timeout + Duration::from_secs(2),
                    "took {elapsed:?}"
                );
                println!("timed out as expected after {waited:?} ({elapsed:?}): {op}");
            }
            other => {
                panic!("expected Error::Timeout while the other request is stuck, got {other:?}")
            }
        }
        let (added, took) = stuck.join().expect("the stuck thread");
        // The kernel waited for the script inside the send, then found no
        // such scheduler.
        assert!(
            took >= MODPROBE_SLEEP - Duration::from_millis(500),
            "{took:?}"
        );
        assert!(
            matches!(added, Err(Error::UnknownScheduler { .. })),
            "{added:?}"
        );
    });
    drop(slow);
    // The handle works again, on the same socket.
    h.info().expect("info after the timeout");
    h.add_service(&VirtualServer::new(key))
        .expect("add after the timeout");
    assert_eq!(h.list_services().expect("list").len(), 1);
}
