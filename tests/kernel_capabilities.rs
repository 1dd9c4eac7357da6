//! `Handle::capabilities` against the real kernel: what differs between the
//! kernels the guest boots (5.10, 6.1, 6.12 and the newest 7.x), checked
//! against `uname -r`, Debian's `ipvsadm` and the kernel's own answers, each
//! asserted per release. Each test works in its
//! own fresh network namespace; addresses are from the documentation ranges
//! and no packet is sent.
//!
//! Run on every kernel: `IPVSCTL_VM_KERNEL=5.10 cargo test --test
//! kernel_capabilities`, and the same with 6.1, 6.12 and 7 (or
//! `scripts/test kernels`).

mod support;

use std::process::Command;

use ipvsctl::capabilities::{Availability, KernelVersion, Support};
use ipvsctl::model::{
    ForwardMethod, PersistenceEngine, RealServer, Scheduler, ServiceKey, Tunnel, VirtualServer,
};
use ipvsctl::sysctl::{SysctlError, Sysctls, knobs};
use ipvsctl::{Error, NetNs};

/// `net.ipv4.vs.run_estimation` ("ipvs: add sysctl_run_estimation to
/// support disable estimation").
const RUN_ESTIMATION: KernelVersion = KernelVersion::new(5, 16, 0);
/// `net.ipv4.vs.est_nice` and `est_cpulist` ("ipvs: use kthreads for stats
/// estimation").
const ESTIMATION_KTHREADS: KernelVersion = KernelVersion::new(6, 2, 0);

fn uname_r() -> String {
    let out = Command::new("uname").arg("-r").output().expect("run uname");
    assert!(out.status.success(), "uname -r failed: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn key(addr: &str) -> ServiceKey {
    ServiceKey::tcp(addr.parse().unwrap())
}

#[test]
fn release_and_info_match_uname_and_ipvsadm() {
    let (ns, ipvs) = support::netns_with_handle();
    let caps = ipvs.capabilities().expect("capabilities");
    println!("{caps}");
    assert_eq!(caps.release, uname_r());
    assert_eq!(caps.version, KernelVersion::parse(&uname_r()));
    assert!(caps.version.is_some(), "release {:?} parses", caps.release);

    // ipvsadm's header: "IP Virtual Server version 1.2.1 (size=4096)".
    let header = ns.ipvsadm("-Ln");
    let want = format!(
        "IP Virtual Server version {} (size={})",
        caps.info.version, caps.info.conn_tab_size
    );
    assert!(header.starts_with(&want), "{want:?} vs\n{header}");
}

#[test]
fn twos_follows_the_release_and_the_kernel_agrees() {
    let (_ns, ipvs) = support::netns_with_handle();
    let caps = ipvs.capabilities().expect("capabilities");
    let version = caps.version.expect("release parses");
    let twos = caps.scheduler(&Scheduler::TwoChoice);
    let vs = VirtualServer::new(key("192.0.2.10:80")).with_scheduler(Scheduler::TwoChoice);
    if version >= KernelVersion::SCHEDULER_TWOS {
        assert_eq!(twos.is_usable(), Some(true), "{version}: twos {twos:?}");
        caps.check_service(&vs).expect("twos passes the check");
        ipvs.add_service(&vs).expect("the kernel has twos");
        assert_eq!(
            ipvs.get_service(&vs.key).unwrap().service.scheduler,
            Scheduler::TwoChoice
        );
    } else {
        assert_eq!(twos, Availability::Absent, "{version}");
        match caps.check_service(&vs) {
            Err(Error::KernelLacks {
                feature, kernel, ..
            }) => {
                assert_eq!(feature, "scheduler \"twos\"");
                assert_eq!(kernel, caps.release);
            }
            other => panic!("expected KernelLacks, got {other:?}"),
        }
        assert!(ipvs.list_services().unwrap().is_empty(), "nothing was sent");
        // Without the check the kernel itself refuses, after trying to load it.
        let err = ipvs.add_service(&vs).expect_err("the kernel has no twos");
        assert!(
            matches!(err, Error::UnknownScheduler { .. }),
            "kernel answer: {err:?}"
        );
    }
    // What both kernels have: every scheduler up to mh, and the SIP engine.
    for s in Scheduler::BUILT_IN
        .iter()
        .filter(|s| **s != Scheduler::TwoChoice)
    {
        assert_eq!(caps.scheduler(s).is_usable(), Some(true), "{s}");
    }
    assert_eq!(
        caps.persistence_engine(&PersistenceEngine::sip())
            .is_usable(),
        Some(true)
    );
}

#[test]
fn attributes_are_judged_by_version_until_the_kernel_shows_them() {
    let (_ns, ipvs) = support::netns_with_handle();
    let empty = ipvs.capabilities().expect("capabilities");
    assert_eq!(
        empty.tunnel_gue,
        Support::ByVersion {
            since: KernelVersion::TUNNEL_GUE
        }
    );
    assert_eq!(
        empty.stats64,
        Support::ByVersion {
            since: KernelVersion::STATS64
        }
    );
    assert!(ipvs.list_services().unwrap().is_empty(), "nothing created");

    let k = key("192.0.2.20:80");
    ipvs.add_service(&VirtualServer::new(k).with_scheduler(Scheduler::RoundRobin))
        .unwrap();
    let plain = RealServer::new("198.51.100.1:80".parse().unwrap())
        .with_forward(ForwardMethod::DirectRoute);
    ipvs.add_destination(&k, &plain).unwrap();
    let before = ipvs.list_destinations(&k).unwrap();

    let caps = ipvs.capabilities().expect("capabilities");
    assert_eq!(caps.tunnel_gue, Support::Seen);
    assert_eq!(caps.tunnel_gre_and_flags, Support::Seen);
    assert_eq!(caps.stats64, Support::Seen);
    assert_eq!(caps.mixed_family, Support::Seen);
    assert_eq!(ipvs.list_destinations(&k).unwrap().len(), before.len());

    // Both kernels keep GUE and GRE settings: the check lets them through and
    // the kernel reads them back as given.
    for (i, tunnel) in [Tunnel::gue(6080), Tunnel::gre()].into_iter().enumerate() {
        let rs = RealServer::new(format!("198.51.100.{}:80", i + 2).parse().unwrap())
            .with_forward(ForwardMethod::Tunnel(tunnel));
        caps.check_destination(&rs).expect("tunnels pass the check");
        ipvs.add_destination(&k, &rs).expect("tunnel kept");
    }
}

/// The connection-table size in `GET_INFO` (and so in ipvsadm's header):
/// the one global table's fixed size before 7.1; from 7.1 the namespace's
/// own table, 0 until its first service.
#[test]
fn connection_table_size_follows_the_release() {
    let (ns, ipvs) = support::netns_with_handle();
    let caps = ipvs.capabilities().expect("capabilities");
    let version = caps.version.expect("release parses");
    let bits: u32 = std::fs::read_to_string("/sys/module/ip_vs/parameters/conn_tab_bits")
        .expect("conn_tab_bits")
        .trim()
        .parse()
        .expect("a number");
    let max = 1u32 << bits;
    let size = caps.info.conn_tab_size;
    if version >= KernelVersion::PER_NAMESPACE_TABLES {
        assert_eq!(size, 0, "{version}: no table before the first service");
        ns.ipvsadm("-A -t 192.0.2.30:80 -s rr");
        let size = ipvs.capabilities().unwrap().info.conn_tab_size;
        assert!(
            size.is_power_of_two() && size <= max,
            "{version}: {size}, at most {max}"
        );
        assert!(
            ns.ipvsadm("-Ln")
                .starts_with(&format!("IP Virtual Server version 1.2.1 (size={size})")),
            "ipvsadm shows the same size"
        );
    } else {
        assert_eq!(size, max, "{version}: 2^conn_tab_bits, for every namespace");
    }
}

/// IPVS sysctls that came with later kernels: there from their release on,
/// `NotAvailable` (not a failure of some other kind) before.
#[test]
fn newer_sysctls_follow_the_release() {
    let (ns, ipvs) = support::netns_with_handle();
    let version = ipvs
        .capabilities()
        .unwrap()
        .version
        .expect("release parses");
    let sysctls = Sysctls::new().netns(NetNs::path(ns.path()).pin().unwrap());
    let run_estimation = sysctls.read(&knobs::RUN_ESTIMATION);
    let est_nice = sysctls.read(&knobs::EST_NICE);
    let lfactor = sysctls.read(&knobs::ipvs_integer("conn_lfactor").unwrap());
    let cases: [(&str, KernelVersion, Result<(), SysctlError>); 3] = [
        (
            "run_estimation",
            RUN_ESTIMATION,
            run_estimation.map(|on| assert!(on, "estimation is on by default")),
        ),
        (
            "est_nice",
            ESTIMATION_KTHREADS,
            est_nice.map(|n| assert_eq!(n, 0, "default nice")),
        ),
        (
            "conn_lfactor",
            KernelVersion::PER_NAMESPACE_TABLES,
            lfactor.map(|f| assert!((-8..=8).contains(&f), "conn_lfactor {f}")),
        ),
    ];
    for (name, since, got) in cases {
        if version >= since {
            got.unwrap_or_else(|e| panic!("{version}: {name} (since {since}): {e}"));
        } else {
            match got {
                Err(SysctlError::NotAvailable { kernel, .. }) => {
                    assert_eq!(KernelVersion::parse(&kernel), Some(version));
                }
                other => panic!("{version}: {name} came with {since}: {other:?}"),
            }
        }
    }
}
