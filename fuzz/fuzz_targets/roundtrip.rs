//! Decode, encode, decode: what decodes re-encodes to bytes that decode to the same message, and model values decoded from it survive the request builders.
//! The check is `checks::roundtrip` (tests/fuzz/checks.rs), shared with the corpus replay
//! test (tests/fuzz_replay.rs).
#![no_main]

#[path = "../../tests/fuzz/checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // tests/fuzz_replay.rs checks that every file here is in checks::TARGETS.
    let target = checks::target("roundtrip").expect("listed in checks::TARGETS");
    checks::run(target, data);
});
