//! Corpus replay: every input the fuzzers ever kept, re-checked on every
//! `cargo test`, on stable Rust, without cargo-fuzz.
//!
//! For each target of `tests/fuzz/checks.rs` (the very checks the fuzz
//! targets run, allocation budget included), every file of
//! `tests/fuzz/corpus/TARGET/` (the curated corpus) and
//! `tests/fuzz/regressions/TARGET/` (inputs that once crashed a target, named
//! after what they found) is run through the check. The codec fixtures
//! captured from real kernels (`tests/fixtures/*/*.txt`) are replayed through
//! the decode and round-trip checks as well, datagram by datagram and as
//! whole dump streams.
//!
//! The checks and their inputs live under `tests/`, so all of this runs from
//! the published `.crate` too. Only the cargo-fuzz project (`fuzz/`, a crate
//! of its own) stays out of the package; the test that compares its targets
//! with the checks says so and skips that comparison where `fuzz/` is absent.
//!
//! The checks count allocations through a process-wide allocator, so every
//! test of this binary takes its turn (`SERIAL`): another test allocating
//! meanwhile would count against the input being checked.

#[path = "fuzz/checks.rs"]
mod checks;

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

/// This test's turn: held for the whole test (a failed test poisons the
/// lock; the next one goes on).
fn turn() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The files of a directory, sorted; none if it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

/// Runs `check` on every input, collecting failures instead of stopping at
/// the first, and fails naming every failing input.
fn replay_all(what: &str, inputs: Vec<(String, Vec<u8>)>, check: impl Fn(&[u8])) -> usize {
    let mut failed = Vec::new();
    for (name, data) in &inputs {
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| check(data))) {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failed.push(format!("{name}: {msg}"));
        }
    }
    assert!(
        failed.is_empty(),
        "{what}: {} of {} inputs failed:\n{}",
        failed.len(),
        inputs.len(),
        failed.join("\n")
    );
    eprintln!("{what}: {} inputs replayed", inputs.len());
    inputs.len()
}

fn replay_target(name: &str) {
    let _turn = turn();
    let t =
        checks::target(name).unwrap_or_else(|| panic!("no target {name} in tests/fuzz/checks.rs"));
    let mut inputs = Vec::new();
    let mut curated = 0;
    for kind in ["corpus", "regressions"] {
        for path in files(&root().join("tests/fuzz").join(kind).join(name)) {
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            curated += usize::from(kind == "corpus");
            inputs.push((
                format!("tests/fuzz/{kind}/{name}/{}", file_name(&path)),
                data,
            ));
        }
    }
    assert!(
        curated > 0,
        "tests/fuzz/corpus/{name}/ is empty: every target keeps a curated corpus"
    );
    replay_all(name, inputs, |data| checks::run(t, data));
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[test]
fn decode_reply_corpus() {
    replay_target("decode_reply");
}

#[test]
fn roundtrip_corpus() {
    replay_target("roundtrip");
}

#[test]
fn model_corpus() {
    replay_target("model");
}

#[test]
fn rules_corpus() {
    replay_target("rules");
}

#[test]
fn sync_plan_corpus() {
    replay_target("sync_plan");
}

#[test]
fn pipeline_corpus() {
    replay_target("pipeline");
}

#[test]
fn conntrack_corpus() {
    replay_target("conntrack");
}

#[test]
fn ledger_file_corpus() {
    // The check's files go once the replay is done, whether it passed or not.
    struct RemoveFiles;
    impl Drop for RemoveFiles {
        fn drop(&mut self) {
            checks::remove_ledger_files();
        }
    }
    let _remove = RemoveFiles;
    replay_target("ledger_file");
}

/// Every target in `fuzz/fuzz_targets/` is in `checks::TARGETS` and has a
/// replay test here, and the other way round: a target cannot be added
/// without its corpus being replayed. Every directory of `tests/fuzz/corpus/`
/// and `tests/fuzz/regressions/` names a target, so inputs of a renamed
/// target cannot drop out of the replay unnoticed.
#[test]
fn every_target_is_replayed() {
    let _turn = turn();
    let listed: BTreeSet<String> = checks::TARGETS.iter().map(|t| t.name.to_owned()).collect();
    let here = include_str!("fuzz_replay.rs");
    for name in &listed {
        assert!(
            here.contains(&format!("replay_target(\"{name}\")")),
            "tests/fuzz_replay.rs does not replay {name}"
        );
    }
    for kind in ["corpus", "regressions"] {
        let dir = root().join("tests/fuzz").join(kind);
        for name in files_and_dirs(&dir).iter().map(|d| file_name(d)) {
            assert!(
                listed.contains(&name),
                "tests/fuzz/{kind}/{name}/: no target {name} in checks::TARGETS"
            );
        }
    }
    // The cargo-fuzz project is a crate of its own and not part of the
    // published package: from the `.crate` there is nothing to compare.
    let fuzz = root().join("fuzz");
    if !fuzz.join("Cargo.toml").exists() {
        eprintln!(
            "every_target_is_replayed: {} is absent (the published package leaves \
             the cargo-fuzz project out); fuzz_targets/ and fuzz/Cargo.toml not compared",
            fuzz.display()
        );
        return;
    }
    let on_disk: BTreeSet<String> = files(&fuzz.join("fuzz_targets"))
        .iter()
        .filter_map(|p| file_name(p).strip_suffix(".rs").map(str::to_owned))
        .collect();
    assert_eq!(on_disk, listed, "fuzz/fuzz_targets/ vs checks::TARGETS");
    let manifest = std::fs::read_to_string(fuzz.join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for name in &listed {
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "fuzz/Cargo.toml has no [[bin]] for {name}"
        );
    }
}

/// One datagram or dump stream of a fixture file.
struct FixtureInput {
    name: String,
    bytes: Vec<u8>,
}

/// Reads the datagrams of a fixture file (`send N` / `recv N` followed by
/// hex lines, see tests/fixtures/README.md). Each received datagram is an
/// input; so is each step's whole receive stream (a dump that took several
/// datagrams, with its `NLMSG_DONE`), and each sent request.
fn fixture_inputs(path: &Path) -> Vec<FixtureInput> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file = path.display().to_string();
    let mut out = Vec::new();
    let mut step = String::new();
    let mut stream = Vec::new();
    let mut current: Option<(String, usize, Vec<u8>)> = None;
    let flush = |current: &mut Option<(String, usize, Vec<u8>)>,
                 stream: &mut Vec<u8>,
                 out: &mut Vec<FixtureInput>| {
        if let Some((name, len, bytes)) = current.take() {
            assert_eq!(bytes.len(), len, "{name}: length line says {len}");
            if name.contains(" recv ") {
                stream.extend_from_slice(&bytes);
            }
            out.push(FixtureInput { name, bytes });
        }
    };
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end();
        let mut words = line.split_whitespace();
        match words.next() {
            Some("step") => {
                flush(&mut current, &mut stream, &mut out);
                step = words.next().unwrap_or_default().to_owned();
            }
            Some(dir @ ("send" | "recv")) => {
                flush(&mut current, &mut stream, &mut out);
                let len: usize = words
                    .next()
                    .and_then(|w| w.parse().ok())
                    .unwrap_or_else(|| panic!("{file}:{}: bad length line", n + 1));
                current = Some((
                    format!("{file} {step} {dir} line {}", n + 1),
                    len,
                    Vec::new(),
                ));
            }
            Some("end") => {
                flush(&mut current, &mut stream, &mut out);
                if !stream.is_empty() {
                    out.push(FixtureInput {
                        name: format!("{file} {step} whole receive stream"),
                        bytes: std::mem::take(&mut stream),
                    });
                }
            }
            Some(w) if current.is_some() && w.bytes().all(|b| b.is_ascii_hexdigit()) => {
                let Some((_, _, bytes)) = current.as_mut() else {
                    unreachable!("checked by the guard")
                };
                for word in line.split_whitespace() {
                    for pair in word.as_bytes().chunks(2) {
                        let hex = std::str::from_utf8(pair).unwrap_or_default();
                        let b = u8::from_str_radix(hex, 16)
                            .unwrap_or_else(|_| panic!("{file}:{}: bad hex {hex:?}", n + 1));
                        bytes.push(b);
                    }
                }
            }
            _ => flush(&mut current, &mut stream, &mut out),
        }
    }
    flush(&mut current, &mut stream, &mut out);
    out
}

/// The real-kernel fixtures through the decode and round-trip checks.
#[test]
fn fixtures_decode_and_roundtrip() {
    let _turn = turn();
    let mut inputs = Vec::new();
    for dir in files_and_dirs(&root().join("tests/fixtures")) {
        for f in files(&dir) {
            if f.extension().is_some_and(|e| e == "txt") {
                inputs.extend(fixture_inputs(&f));
            }
        }
    }
    assert!(
        inputs.len() > 100,
        "only {} datagrams found under tests/fixtures/*/*.txt",
        inputs.len()
    );
    let decode = checks::target("decode_reply").expect("decode_reply");
    let roundtrip = checks::target("roundtrip").expect("roundtrip");
    let inputs: Vec<(String, Vec<u8>)> = inputs.into_iter().map(|i| (i.name, i.bytes)).collect();
    replay_all("fixtures", inputs, |data| {
        checks::run(decode, data);
        checks::run(roundtrip, data);
    });
}

fn files_and_dirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    v
}

// ---------------------------------------------------------------------------
// Long inputs: no quadratic blow-up.

/// A generic-netlink body (`NEW_SERVICE`) with `n` unknown top-level
/// attributes of 4 bytes each.
fn long_top_level(n: usize) -> Vec<u8> {
    let mut b = vec![1, 1, 0, 0];
    for i in 0..n {
        b.extend_from_slice(&8u16.to_ne_bytes());
        b.extend_from_slice(&99u16.to_ne_bytes());
        b.extend_from_slice(&(i as u32).to_ne_bytes());
    }
    b
}

/// A body with one service nest holding `n` attributes (ports, all but the
/// last superseded: the decoders keep the last of each).
fn long_nested(n: usize) -> Vec<u8> {
    let inner_len = 8 * n;
    let mut b = vec![1, 1, 0, 0];
    b.extend_from_slice(&((4 + inner_len) as u16).to_ne_bytes());
    b.extend_from_slice(&1u16.to_ne_bytes());
    for i in 0..n {
        b.extend_from_slice(&6u16.to_ne_bytes());
        b.extend_from_slice(&4u16.to_ne_bytes()); // IPVS_SVC_ATTR_PORT
        b.extend_from_slice(&(i as u16).to_be_bytes());
        b.extend_from_slice(&[0, 0]);
    }
    b
}

/// A dump stream of `n` complete service messages and `NLMSG_DONE`.
fn long_dump(n: usize) -> Vec<u8> {
    use ipvsctl::codec::frame::{NLM_F_MULTI, NLMSG_DONE};
    use ipvsctl::codec::{IpvsCmd, request};
    use ipvsctl::model::{ServiceKey, VirtualServer};
    let mut out = Vec::new();
    for i in 0..n {
        let key = ServiceKey::tcp(std::net::SocketAddr::from((
            [10, 0, (i >> 8) as u8, i as u8],
            80,
        )));
        let mut msg = request::new_service(&VirtualServer::new(key)).expect("valid");
        msg.cmd = IpvsCmd::NewService;
        let start = out.len();
        ipvsctl::codec::frame::encode_request(&mut out, &msg, 0x20, 1, NLM_F_MULTI)
            .expect("encodes");
        // Replies come from the kernel: no NLM_F_REQUEST.
        let flags = u16::from_ne_bytes([out[start + 6], out[start + 7]]) & !1;
        out[start + 6..start + 8].copy_from_slice(&flags.to_ne_bytes());
    }
    out.extend_from_slice(&20u32.to_ne_bytes());
    out.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
    out.extend_from_slice(&NLM_F_MULTI.to_ne_bytes());
    out.extend_from_slice(&[0; 12]);
    out
}

/// Bytes allocated by one run of a target's check on `data`.
fn allocated_by(target: &str, data: &[u8]) -> usize {
    let t = checks::target(target).expect("target");
    let before = checks::allocated_total();
    checks::run(t, data);
    checks::allocated_total() - before
}

/// Decoding (and re-encoding) four times as long an attribute list or dump
/// stream allocates at most about four times as much: no work that grows
/// with the square of the input (re-parsing, re-copying) hides in the
/// decoders. Allocation counts are exact, unlike timings.
#[test]
fn long_inputs_allocate_linearly() {
    let _turn = turn();
    type Build = fn(usize) -> Vec<u8>;
    let cases: [(&str, Build, usize); 3] = [
        ("top-level attributes", long_top_level, 20_000),
        ("nested attributes", long_nested, 2_000),
        ("dump stream", long_dump, 1_000),
    ];
    for (what, build, n) in cases {
        for target in ["decode_reply", "roundtrip"] {
            let small = allocated_by(target, &build(n));
            let large = allocated_by(target, &build(4 * n));
            eprintln!(
                "{target} on {what}: {small} bytes for {n}, {large} for {}",
                4 * n
            );
            assert!(
                large <= small * 9 / 2,
                "{target} on {what}: {small} bytes allocated for {n}, {large} for {} (more than 4.5x)",
                4 * n
            );
            assert!(
                large >= small,
                "{target} on {what}: fewer bytes for more input?"
            );
        }
    }
}
