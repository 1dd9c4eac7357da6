//! Any bytes as an IPVS generic-netlink reply: datagrams (dump streams, ACKs, errors with extended ACK) and message bodies, through every reply decoder.
//! The check is `checks::decode_reply` (tests/fuzz/checks.rs), shared with the corpus replay
//! test (tests/fuzz_replay.rs).
#![no_main]

#[path = "../../tests/fuzz/checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // tests/fuzz_replay.rs checks that every file here is in checks::TARGETS.
    let target = checks::target("decode_reply").expect("listed in checks::TARGETS");
    checks::run(target, data);
});
