//! Arbitrary model values: validation, the request builders and batch operations, and the codec round trip of every valid value.
//! The check is `checks::model` (tests/fuzz/checks.rs), shared with the corpus replay
//! test (tests/fuzz_replay.rs).
#![no_main]

#[path = "../../tests/fuzz/checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // tests/fuzz_replay.rs checks that every file here is in checks::TARGETS.
    let target = checks::target("model").expect("listed in checks::TARGETS");
    checks::run(target, data);
});
