//! Any bytes as the file of a `sync::FileLedger`: opening it never panics, errors are typed and name the file, and a ledger read saves and reads back equal, in the same bytes when saved again.
//! The check is `checks::ledger_file` (tests/fuzz/checks.rs), shared with the corpus replay
//! test (tests/fuzz_replay.rs).
#![no_main]

#[path = "../../tests/fuzz/checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // tests/fuzz_replay.rs checks that every file here is in checks::TARGETS.
    let target = checks::target("ledger_file").expect("listed in checks::TARGETS");
    checks::run(target, data);
});
