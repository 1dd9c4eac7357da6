//! The request pipeline (sans-IO) on arbitrary request counts, limits and receive events: no panic, one outcome per request.
//! The check is `checks::pipeline` (tests/fuzz/checks.rs), shared with the corpus replay
//! test (tests/fuzz_replay.rs).
#![no_main]

#[path = "../../tests/fuzz/checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // tests/fuzz_replay.rs checks that every file here is in checks::TARGETS.
    let target = checks::target("pipeline").expect("listed in checks::TARGETS");
    checks::run(target, data);
});
