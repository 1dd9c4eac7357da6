//! Any bytes as a ctnetlink answer (conntrack dump datagrams, and one entry
//! message's payload), through the conntrack decoder and the delete writer.
//! The check is `checks::conntrack` (tests/fuzz/checks.rs), shared with the
//! corpus replay test (tests/fuzz_replay.rs).
#![no_main]

#[path = "../../tests/fuzz/checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // tests/fuzz_replay.rs checks that every file here is in checks::TARGETS.
    let target = checks::target("conntrack").expect("listed in checks::TARGETS");
    checks::run(target, data);
});
