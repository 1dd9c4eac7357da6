//! Host tests of the load step: what the loader said is kept in full and
//! explained in plain words. No test here loads anything into the kernel.
// The module is public with the feature `kmod` only.
#![cfg(feature = "kmod")]

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use ipvsctl::kmod::{
    self, Cause, CheckConfig, Compression, LoadFailure, LoadStep, LoadSuccess, Loader, Modprobe,
    ModuleName, Requirements, Roots,
};

use support::ScratchDir as Dir;

fn name(n: &str) -> ModuleName {
    ModuleName::new(n).unwrap()
}

#[test]
fn loader_messages_map_to_causes() {
    let cases = [
        (
            "modprobe: ERROR: could not insert 'ip_vs_rr': Exec format error",
            Cause::ExecFormat,
        ),
        (
            "insmod: ERROR: could not insert module /tmp/x.ko: Invalid module format",
            Cause::ExecFormat,
        ),
        (
            "modprobe: ERROR: could not insert 'ip_vs': Operation not permitted",
            Cause::NotPermitted,
        ),
        (
            "modprobe: FATAL: Module ip_vs_nosuch not found in directory /lib/modules/6.1.0-18-amd64",
            Cause::NotFound,
        ),
        (
            "modprobe: module ip_vs_nosuch not found in modules.dep",
            Cause::NotFound,
        ),
        (
            "insmod: ERROR: could not load module /x.ko: No such file or directory",
            Cause::NotFound,
        ),
        (
            "modprobe: ERROR: could not insert 'ip_vs': Key was rejected by service",
            Cause::SignatureRejected,
        ),
        (
            "modprobe: ERROR: could not insert 'ip_vs': Unknown symbol in module, or unknown parameter (see dmesg)",
            Cause::InvalidModule,
        ),
        (
            "modprobe: ERROR: could not insert 'ip_vs': Function not implemented",
            Cause::NoModuleSupport,
        ),
        (
            "insmod: ERROR: could not insert module /tmp/x.ko: Unknown symbol in module",
            Cause::InvalidModule,
        ),
        (
            "modprobe: ERROR: could not insert 'ip_vs': Module has wrong symbol version",
            Cause::ExecFormat,
        ),
        ("something else entirely", Cause::Other),
        ("", Cause::Other),
    ];
    for (text, want) in cases {
        assert_eq!(Cause::from_loader_output(text), want, "{text}");
    }
}

#[test]
fn errnos_map_to_causes() {
    let cases = [
        (8, Cause::ExecFormat),          // ENOEXEC
        (1, Cause::NotPermitted),        // EPERM
        (2, Cause::NotFound),            // ENOENT
        (129, Cause::SignatureRejected), // EKEYREJECTED
        (126, Cause::SignatureRejected), // ENOKEY
        (22, Cause::InvalidModule),      // EINVAL
        (38, Cause::NoModuleSupport),    // ENOSYS
        (16, Cause::Other),              // EBUSY
        (-5, Cause::Other),
        (0, Cause::Other),
    ];
    for (errno, want) in cases {
        assert_eq!(Cause::from_errno(errno), want, "{errno}");
    }
}

#[test]
fn explanations_say_what_to_do() {
    let exec = Cause::ExecFormat.explanation();
    assert!(exec.contains("another kernel or architecture"), "{exec}");
    assert!(exec.contains("load the modules on the host"), "{exec}");
    let perm = Cause::NotPermitted.explanation();
    assert!(
        perm.contains("CAP_SYS_MODULE") && perm.contains("container"),
        "{perm}"
    );
    assert!(
        Cause::NotFound
            .explanation()
            .contains("not installed for the running kernel")
    );
    assert!(
        Cause::ModprobeNotInstalled
            .explanation()
            .contains("finit_module")
    );
    assert!(Cause::CompressionUnsupported.explanation().contains("5.17"));
}

#[test]
fn nonexistent_modprobe_is_not_installed() {
    let d = Dir::new("kmod-load-nomp");
    let program = d.0.join("no-such-modprobe");
    let out = kmod::modprobe(&name("ip_vs"), &Modprobe::at(program.clone()).unwrap());
    let Err(failure) = &out.result else {
        panic!("unexpected {out}");
    };
    assert_eq!(
        failure,
        &LoadFailure::ModprobeNotInstalled {
            tried: vec![program.clone()]
        }
    );
    assert_eq!(failure.cause(), Cause::ModprobeNotInstalled);
    assert!(
        failure.explanation().starts_with("modprobe not installed"),
        "{}",
        failure.explanation()
    );
    match &out.steps[..] {
        [
            LoadStep::SpawnFailed {
                program: p, errno, ..
            },
        ] => {
            assert_eq!(p, &program);
            assert_eq!(*errno, Some(2));
        }
        s => panic!("unexpected {s:?}"),
    }
    assert!(out.to_string().contains("modprobe not installed"), "{out}");
}

#[test]
fn modprobe_output_is_kept_in_full_and_explained() {
    let d = Dir::new("kmod-load-mp");
    let program = d.script(
        "modprobe",
        "echo \"args: $* LC_ALL=$LC_ALL\"\n\
         echo \"modprobe: ERROR: could not insert 'ip_vs_rr': Exec format error\" >&2\n\
         echo 'second line' >&2\n\
         exit 1",
    );
    let out = kmod::modprobe(&name("ip-vs-rr"), &Modprobe::at(program.clone()).unwrap());
    let Err(LoadFailure::Modprobe { run, cause }) = &out.result else {
        panic!("unexpected {out}");
    };
    assert_eq!(*cause, Cause::ExecFormat);
    assert_eq!(run.program, program);
    assert_eq!(run.status.code(), Some(1));
    assert_eq!(run.stdout_text(), "args: -- ip_vs_rr LC_ALL=C\n");
    assert_eq!(
        run.stderr_text(),
        "modprobe: ERROR: could not insert 'ip_vs_rr': Exec format error\nsecond line\n"
    );
    let failure = out.result.as_ref().unwrap_err();
    assert!(
        failure
            .explanation()
            .contains("load the modules on the host")
    );
    let text = out.to_string();
    assert!(text.contains("Exec format error"), "{text}");
    assert!(text.contains("second line"), "{text}");
    assert!(text.contains("exit status: 1"), "{text}");
    assert!(matches!(&out.steps[..], [LoadStep::Ran(_)]));
}

/// A program file still open for writing cannot be executed (`ETXTBSY`);
/// in a threaded process that happens for a moment to any freshly written
/// file while another thread forks. The load waits it out.
#[test]
fn a_busy_program_file_is_run_once_it_is_free() {
    use std::io::Write as _;
    let d = Dir::new("kmod-load-mp3");
    let path = d.0.join("busy");
    let mut file = fs::File::create(&path).unwrap();
    file.write_all(b"#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(40));
        drop(file);
    });
    let out = kmod::modprobe(&name("ip_vs"), &Modprobe::at(path).unwrap());
    writer.join().unwrap();
    assert_eq!(out.result, Ok(LoadSuccess::Loaded), "{out}");
}

#[test]
fn modprobe_permission_and_success() {
    let d = Dir::new("kmod-load-mp2");
    let denied = d.script(
        "denied",
        "echo \"modprobe: ERROR: could not insert 'ip_vs': Operation not permitted\" >&2; exit 1",
    );
    let out = kmod::modprobe(&name("ip_vs"), &Modprobe::at(denied).unwrap());
    let failure = out.result.unwrap_err();
    assert_eq!(failure.cause(), Cause::NotPermitted);
    assert!(failure.explanation().contains("CAP_SYS_MODULE"));

    let ok = d.script("ok", "exit 0");
    let out = kmod::modprobe(&name("ip_vs"), &Modprobe::at(ok).unwrap());
    assert_eq!(out.result, Ok(LoadSuccess::Loaded));
}

#[test]
fn modprobe_that_cannot_be_executed() {
    let d = Dir::new("kmod-load-noexec");
    let p = d.0.join("modprobe");
    fs::write(&p, "not a program").unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
    let out = kmod::modprobe(&name("ip_vs"), &Modprobe::at(p).unwrap());
    match out.result {
        Err(LoadFailure::Spawn { errno, .. }) => assert_eq!(errno, Some(13)), // EACCES
        r => panic!("unexpected {r:?}"),
    }
}

#[test]
fn finit_of_missing_module_is_not_loadable_without_syscalls() {
    let cfg = CheckConfig::default()
        .with_roots(Roots::under(env!("CARGO_MANIFEST_DIR")).clone())
        .with_release("no-such-release");
    let out = kmod::finit_load(&name("ip_vs_nosuch"), &cfg);
    assert!(out.steps.is_empty());
    let Err(failure @ LoadFailure::NotLoadable { module, evidence }) = &out.result else {
        panic!("unexpected {out}");
    };
    assert_eq!(module.as_str(), "ip_vs_nosuch");
    assert!(!evidence.is_empty());
    assert_eq!(failure.cause(), Cause::NotFound);
    assert!(
        out.to_string()
            .contains("no modules directory for running kernel no-such-release")
    );
}

#[test]
fn load_needed_skips_present_modules() {
    let cfg = CheckConfig::default().with_roots(Roots::under(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/kmod/mixed"),
    ));
    let req = Requirements::ipvs_core()
        .with_scheduler("rr")
        .unwrap()
        .with_conntrack()
        .with_scheduler("sh")
        .unwrap();
    let report = kmod::check_with(&req, &cfg);
    let outcomes = kmod::load_needed(&report, &Loader::FinitModule);
    let results: Vec<_> = outcomes.iter().map(|o| o.result.clone()).collect();
    assert_eq!(results[0], Ok(LoadSuccess::NothingToDo));
    assert_eq!(results[1], Ok(LoadSuccess::NothingToDo));
    assert_eq!(results[2], Ok(LoadSuccess::NothingToDo));
    assert!(matches!(results[3], Err(LoadFailure::NotLoadable { .. })));
    assert!(outcomes.iter().all(|o| o.steps.is_empty()));
}

#[test]
fn finit_file_that_cannot_be_opened() {
    let out = kmod::finit_file("/nonexistent/dir/ip_vs_sh.ko.xz".as_ref());
    assert_eq!(out.target, "ip_vs_sh");
    match &out.result {
        Err(LoadFailure::Open { cause, .. }) => assert_eq!(*cause, Cause::NotFound),
        r => panic!("unexpected {r:?}"),
    }
    assert!(matches!(
        &out.steps[..],
        [LoadStep::OpenFailed { errno: Some(2), .. }]
    ));
}

#[test]
fn finit_failures_are_explained() {
    let f = LoadFailure::FinitModule {
        path: "/tmp/garbled/ip_vs_sh.ko".into(),
        errno: 8,
        compression: Compression::None,
        cause: Cause::from_errno(8),
    };
    assert_eq!(
        f.to_string(),
        "finit_module(/tmp/garbled/ip_vs_sh.ko) failed: Exec format error (os error 8)"
    );
    assert!(f.explanation().contains("another kernel or architecture"));

    let compressed = LoadFailure::FinitModule {
        path: "/x/ip_vs.ko.zst".into(),
        errno: 22,
        compression: Compression::Zstd,
        cause: Cause::InvalidModule,
    };
    let e = compressed.explanation();
    assert!(
        e.contains("zstd-compressed") && e.contains("CONFIG_MODULE_DECOMPRESS"),
        "{e}"
    );
}
