//! Host tests of the functional probe that hold on any Linux host.
// The module is public with the feature `kmod` only.
#![cfg(feature = "kmod")]

use ipvsctl::kmod::{self, KmodError, SchedulerProbe};

#[test]
fn the_controller_resolves_itself() {
    let f = kmod::resolve_family("nlctrl").unwrap().unwrap();
    assert_eq!(f.name, "nlctrl");
    assert_eq!(f.id, 0x10);
    assert!(f.version >= 1);
}

#[test]
fn an_unknown_family_is_absent_not_an_error() {
    assert_eq!(kmod::resolve_family("ipvsctl-nosuch").unwrap(), None);
    assert!(matches!(
        kmod::resolve_family("ipvsctl-no-such-family"),
        Err(KmodError::InvalidFamilyName(_))
    ));
    assert!(kmod::resolve_family("").is_err());
}

#[test]
fn the_ipvs_probe_answers() {
    // Present or absent depending on the host; either way an answer.
    match kmod::probe_family() {
        Ok(Some(f)) => assert_eq!(f.name, "IPVS"),
        Ok(None) => {}
        Err(e) => panic!("the probe could not ask: {e}"),
    }
}

#[test]
fn scheduler_probe_checks_the_name_first() {
    for bad in ["", "r r", "a-very-long-scheduler-name"] {
        assert!(
            matches!(
                kmod::probe_scheduler(bad, kmod::DEFAULT_PROBE_TIMEOUT),
                Err(KmodError::InvalidModuleName { .. })
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn scheduler_probe_runs_in_its_own_namespace() {
    let before = std::fs::read_link("/proc/thread-self/ns/net").ok();
    match kmod::probe_scheduler("rr", kmod::DEFAULT_PROBE_TIMEOUT) {
        // Without CAP_SYS_ADMIN there is no private namespace to use.
        Err(KmodError::Netns(_)) => {}
        Ok(SchedulerProbe::FamilyAbsent | SchedulerProbe::Works { .. }) => {}
        Ok(SchedulerProbe::Refused { errno, explanation }) => {
            panic!("refused: {errno} {explanation}")
        }
        Ok(other) => panic!("{other}"),
        Err(e) => panic!("{e}"),
    }
    // The calling thread's namespace did not change.
    assert_eq!(std::fs::read_link("/proc/thread-self/ns/net").ok(), before);
}
