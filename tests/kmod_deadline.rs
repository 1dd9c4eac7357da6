//! A `modprobe` that never ends is killed at its deadline, with its process
//! group, and the caller learns so.
// The module is public with the feature `kmod` only.
#![cfg(feature = "kmod")]

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ipvsctl::Timeout;
use ipvsctl::kmod::{self, Cause, LoadFailure, LoadStep, Modprobe, ModuleName};

/// A directory of this test's own.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ipvsctl-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// A "modprobe" that notes its pid and that of a child it starts, prints a
/// line, and never exits.
fn hanging_modprobe(dir: &Path) -> PathBuf {
    let script = dir.join("modprobe");
    fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             sleep 3600 &\n\
             echo $! > {dir}/child.pid\n\
             echo $$ > {dir}/modprobe.pid\n\
             echo \"inserting $2\"\n\
             echo 'waiting for the kernel' >&2\n\
             exec sleep 3600\n",
            dir = dir.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// Whether a process with `pid` exists (a zombie counts: it is not reaped).
fn alive(pid: &str) -> bool {
    Path::new("/proc").join(pid).exists()
}

#[test]
fn a_modprobe_that_never_exits_is_killed_at_the_deadline() {
    let dir = scratch("kmod-deadline");
    let timeout = Duration::from_millis(500);
    let opts = Modprobe::at(hanging_modprobe(&dir))
        .unwrap()
        .with_timeout(Timeout::new(timeout).unwrap());

    // A watchdog: a call that does not return fails the test instead of
    // hanging it.
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    std::thread::spawn(move || {
        let _ = tx.send(kmod::modprobe(&ModuleName::new("ip_vs").unwrap(), &opts));
    });
    let out = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("modprobe still running 20 s after a 500 ms deadline");
    let took = start.elapsed();
    println!("{out}\nreturned after {took:?}");

    assert!(took >= timeout, "{took:?}");
    assert!(took < timeout + Duration::from_secs(3), "{took:?}");
    let Err(LoadFailure::Killed { run }) = &out.result else {
        panic!("not killed: {out}");
    };
    assert_eq!(run.timeout, timeout);
    assert!(run.after >= timeout && run.after < took + Duration::from_millis(1));
    assert_eq!(run.stdout, b"inserting ip_vs\n");
    assert_eq!(run.stderr, b"waiting for the kernel\n");
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(run.status.and_then(|s| s.signal()), Some(9));
    assert!(matches!(out.steps[..], [LoadStep::Killed(_)]));
    let failure = out.result.as_ref().unwrap_err();
    assert_eq!(failure.cause(), Cause::TimedOut);
    let text = failure.to_string();
    assert!(text.contains("did not finish within 500ms"), "{text}");
    assert!(text.contains("waiting for the kernel"), "{text}");

    // modprobe and what it started are gone, and reaped.
    for file in ["modprobe.pid", "child.pid"] {
        let pid = fs::read_to_string(dir.join(file)).unwrap();
        let pid = pid.trim();
        let deadline = Instant::now() + Duration::from_secs(2);
        // The background child is reparented and reaped by init, a moment
        // after the kill.
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!alive(pid), "{file}: process {pid} is still there");
    }
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_modprobe_that_ends_in_time_is_judged_by_its_output() {
    let dir = scratch("kmod-deadline-quick");
    let script = dir.join("modprobe");
    fs::write(
        &script,
        "#!/bin/sh\necho \"modprobe: ERROR: could not insert '$2': Exec format error\" >&2\nexit 1\n",
    )
    .unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let out = kmod::modprobe(
        &ModuleName::new("ip_vs_rr").unwrap(),
        &Modprobe::at(&script).unwrap(),
    );
    let Err(LoadFailure::Modprobe { run, cause }) = &out.result else {
        panic!("{out}");
    };
    assert_eq!(*cause, Cause::ExecFormat);
    assert_eq!(run.status.code(), Some(1));
    assert!(run.elapsed < kmod::DEFAULT_MODPROBE_TIMEOUT.get());
    fs::remove_dir_all(&dir).unwrap();
}
