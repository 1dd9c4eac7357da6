//! The plan step of bulk sync on arbitrary desired and observed states: applied to the observed state, the plan gives the desired state within scope.
//! The check is `checks::sync_plan` (tests/fuzz/checks.rs), shared with the corpus replay
//! test (tests/fuzz_replay.rs).
#![no_main]

#[path = "../../tests/fuzz/checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // tests/fuzz_replay.rs checks that every file here is in checks::TARGETS.
    let target = checks::target("sync_plan").expect("listed in checks::TARGETS");
    checks::run(target, data);
});
