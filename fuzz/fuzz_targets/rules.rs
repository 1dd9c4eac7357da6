//! Any text as an `ipvsadm -S` rule file, through the parser and the `-R`
//! table of examples/ipvsadm-lite, and back through rule lines. The check is
//! `checks::rules` (tests/fuzz/checks.rs), shared with the corpus replay test
//! (tests/fuzz_replay.rs).
#![no_main]

#[path = "../../tests/fuzz/checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // tests/fuzz_replay.rs checks that every file here is in checks::TARGETS.
    let target = checks::target("rules").expect("listed in checks::TARGETS");
    checks::run(target, data);
});
