//! Host tests of the report: its text, the usable verdict and the diagnosis.
// The module is public with the feature `kmod` only.
#![cfg(feature = "kmod")]

use std::path::Path;

use ipvsctl::kmod::{self, CheckConfig, FamilyInfo, KmodError, ProbeResult, Requirements, Roots};

fn mixed(req: &Requirements) -> kmod::Report {
    let cfg = CheckConfig::default().with_roots(Roots::under(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/kmod/mixed"),
    ));
    kmod::check_with(req, &cfg)
}

fn ipvs_family() -> FamilyInfo {
    FamilyInfo::new("IPVS", 0x22, 1)
}

#[test]
fn one_line_per_module_then_the_verdict() {
    let r = mixed(&Requirements::default());
    let text = r.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1 + 5 + 1, "{text}");
    assert!(
        lines[0].starts_with("kernel 6.1.0-18-amd64 (from "),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].starts_with("  ip_vs (IPVS core): loaded: "),
        "{}",
        lines[1]
    );
    assert!(lines[1].contains("proc/modules line 2"), "{}", lines[1]);
    assert!(lines[2].starts_with("  ip_vs_rr (scheduler rr): loaded: "));
    assert!(lines[3].starts_with("  ip_vs_wrr (scheduler wrr): loadable from "));
    assert!(lines[3].contains("after libcrc32c, nf_defrag_ipv6, ip_vs"));
    assert!(lines[4].starts_with("  ip_vs_sh (scheduler sh): missing: not listed in "));
    assert!(lines[5].starts_with("  nf_conntrack (connection tracking): built-in: "));
    assert!(
        lines[6].starts_with("IPVS usable: no, because ip_vs_wrr is not loaded but loadable from ")
    );
    assert!(lines[6].contains("(load it: modprobe ip_vs_wrr)"));
    assert!(lines[6].contains("; ip_vs_sh is missing: not listed in "));
}

#[test]
fn all_present_without_probe_is_usable_but_unprobed() {
    let req = Requirements::ipvs_core()
        .with_scheduler("rr")
        .unwrap()
        .with_conntrack();
    let r = mixed(&req);
    assert!(r.all_present());
    let u = r.usability();
    assert!(u.usable && !u.probed);
    assert_eq!(
        u.to_string(),
        "IPVS usable: yes, because every required module is built in or loaded (not probed)"
    );
    assert!(r.diagnosis().summary.starts_with("IPVS looks usable"));
}

#[test]
fn the_probe_is_the_final_word() {
    let req = Requirements::default();
    let present = mixed(&req).with_probe(Ok(Some(ipvs_family())));
    let u = present.usability();
    assert!(u.usable && u.probed);
    assert!(
        u.because
            .starts_with("the kernel resolved the IPVS generic netlink family (id 34, version 1)"),
        "{}",
        u.because
    );
    // Modules that are not ready are still named.
    assert!(
        u.because.contains("not ready: ip_vs_wrr is not loaded"),
        "{}",
        u.because
    );
    assert!(
        present
            .to_string()
            .contains("\n  probe: the kernel resolved the IPVS")
    );

    // ip_vs is in /proc/modules, yet the kernel says no: the probe wins.
    let absent = mixed(&Requirements::ipvs_core()).with_probe(Ok(None));
    let u = absent.usability();
    assert!(!u.usable && u.probed);
    assert_eq!(
        u.to_string(),
        "IPVS usable: no, because the kernel has no IPVS generic netlink family (ENOENT from nlctrl)"
    );
    assert_eq!(absent.probe, Some(ProbeResult::Absent));
}

#[test]
fn a_failed_probe_falls_back_to_the_modules() {
    let err = KmodError::Netlink {
        during: "socket",
        source: std::io::Error::from_raw_os_error(97),
    };
    let r = mixed(&Requirements::ipvs_core()).with_probe(Err(err));
    let u = r.usability();
    assert!(u.usable && !u.probed);
    assert!(
        u.because
            .contains("the probe could not ask the kernel: netlink: socket:"),
        "{}",
        u.because
    );
}

#[test]
fn missing_modules_with_one_reason_are_grouped() {
    let cfg = CheckConfig::default()
        .with_roots(Roots::under(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/kmod/mixed"),
        ))
        .with_release("6.8.0-45-generic");
    let r = kmod::check_with(
        &Requirements::ipvs_core().with_scheduler("wrr").unwrap(),
        &cfg,
    );
    let u = r.usability();
    // ip_vs is in the fixture's /proc/modules; ip_vs_wrr has no directory.
    assert!(
        u.because.starts_with(
            "ip_vs_wrr is missing: no modules directory for running kernel 6.8.0-45-generic"
        ),
        "{}",
        u.because
    );
    assert!(
        u.because
            .contains("found directories for 5.10.0-28-amd64, 6.1.0-18-amd64")
    );

    let r = kmod::check_with(
        &Requirements::empty()
            .with_scheduler("sh")
            .unwrap()
            .with_scheduler("lc")
            .unwrap(),
        &cfg,
    );
    assert!(
        r.usability()
            .because
            .starts_with("ip_vs_sh, ip_vs_lc are missing: no modules directory")
    );
}

#[test]
fn diagnosis_is_one_line() {
    let cfg = CheckConfig::default()
        .with_roots(Roots::under("/nonexistent-ipvsctl-root"))
        .with_release("6.1.0-18-amd64");
    let d = kmod::diagnose_with(&Requirements::ipvs_core(), &cfg);
    let text = d.to_string();
    assert_eq!(text.lines().count(), 1);
    assert_eq!(
        text,
        "IPVS unavailable: ip_vs is missing: no modules directory for running kernel \
         6.1.0-18-amd64 (/nonexistent-ipvsctl-root/lib/modules/6.1.0-18-amd64 does not exist); \
         /nonexistent-ipvsctl-root/lib/modules: does not exist either"
    );
    assert_eq!(d.report.modules.len(), 1);
}

#[test]
fn diagnose_on_this_host_does_not_panic() {
    let d = kmod::diagnose();
    assert!(!d.summary.is_empty());
    assert_eq!(d.summary.lines().count(), 1, "{}", d.summary);
}

#[test]
fn empty_requirements() {
    let r = mixed(&Requirements::empty());
    assert!(!r.usability().usable);
    assert!(
        r.to_string()
            .ends_with("IPVS usable: no, because no module was checked and nothing was probed")
    );
}
