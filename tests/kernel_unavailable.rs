//! A handle opened where the kernel has no IPVS gets the typed
//! `Error::Unavailable` (with the module check's diagnosis) on creation,
//! never a handle that silently does nothing.
//!
//! Runs in the test VM, which boots without ip_vs loaded: module autoloading
//! is pointed at `/bin/false` for the duration of the test, then restored to
//! show that the same call succeeds once IPVS can load.

mod support;

use std::fs;
use std::path::Path;

use ipvsctl::{Error, Handle};

const MODPROBE: &str = "/proc/sys/kernel/modprobe";

#[test]
fn no_ipvs_means_unavailable_on_open() {
    support::print_kernel_once();
    assert!(support::is_root(), "needs root (the VM runner provides it)");
    if Path::new("/sys/module/ip_vs").exists() {
        // Leftover from an earlier step of this boot: unload it if we can.
        let _ = support::run("modprobe", &["-r", "ip_vs_rr", "ip_vs_wlc", "ip_vs"]);
        assert!(
            !Path::new("/sys/module/ip_vs").exists(),
            "ip_vs is loaded and cannot be unloaded here; run this binary in the test VM \
             (IPVSCTL_VM=1 cargo test --test kernel_unavailable)"
        );
    }
    let saved = fs::read_to_string(MODPROBE).expect("read the modprobe path");
    fs::write(MODPROBE, "/bin/false").expect("point module autoloading at /bin/false");
    let result = Handle::new();
    fs::write(MODPROBE, saved.trim()).expect("restore the modprobe path");

    match result {
        Err(Error::Unavailable { reason }) => {
            assert!(reason.contains("\"IPVS\""), "{reason}");
            // The diagnosis of the module check is part of the message.
            assert!(reason.contains("ip_vs"), "{reason}");
            println!("unavailable as expected: {reason}");
        }
        Err(other) => panic!("expected Error::Unavailable, got {other}"),
        Ok(_) => panic!("a handle opened although IPVS could not load"),
    }
    // With autoloading back, the same call opens a working handle: the
    // kernel loads ip_vs for the family lookup from 5.16 ("ipvs: autoload
    // ipvs on genl access"); before, ip_vs has no family alias and has to be
    // loaded first.
    let release = support::kernel_release();
    let version =
        ipvsctl::capabilities::KernelVersion::parse(&release).expect("the release parses");
    if version < ipvsctl::capabilities::KernelVersion::new(5, 16, 0) {
        assert!(
            matches!(Handle::new(), Err(Error::Unavailable { .. })),
            "{release}: nothing loads ip_vs for the family"
        );
        support::run("modprobe", &["ip_vs"]);
    }
    let h = Handle::new().expect("IPVS autoloads once modprobe works again");
    h.list_services().expect("the handle works");
}
