//! Kernel test of the module check, the load step and the probe.
//!
//! Runs inside the throw-away QEMU guest of `scripts/vm-run` (a stock Debian
//! kernel that boots with no IPVS module loaded, its modules in
//! `/lib/modules`, and root). Outside such a guest it does nothing, so that
//! it never loads modules into a developer's own kernel; set
//! `IPVSCTL_KERNEL_TESTS=1` to run it anyway on a disposable machine.
//!
//! One `#[test]` runs the whole sequence, because loading modules is global
//! state and tests in one binary run in parallel. Every message the kernel,
//! modprobe and insmod gave is printed (run with `--nocapture` to see them).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use ipvsctl::kmod::{
    self, Cause, CheckConfig, Compression, LoadFailure, LoadStep, LoadSuccess, Loader, Modprobe,
    ModuleName, Report, Requirements, SchedulerProbe, Verdict,
};

fn in_guest() -> bool {
    Path::new("/run/ipvsctl-vm").is_dir() || std::env::var_os("IPVSCTL_KERNEL_TESTS").is_some()
}

fn name(n: &str) -> ModuleName {
    ModuleName::new(n).unwrap()
}

fn step(title: &str) {
    println!("\n=== {title}");
}

fn label(r: &Report, module: &str) -> &'static str {
    r.module(module).unwrap().verdict.label()
}

/// A scratch directory in the guest's tmpfs.
fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!("ipvsctl-kernel-kmod-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// The bytes of a module file: decompressed with the system's tools when
/// the file is compressed.
fn module_bytes(path: &Path, compression: Compression) -> Vec<u8> {
    let tool = match compression {
        Compression::None => return fs::read(path).unwrap(),
        Compression::Xz => "xz",
        Compression::Zstd => "zstd",
        Compression::Gzip => "gzip",
    };
    let out = Command::new(tool).arg("-dc").arg(path).output().unwrap();
    assert!(out.status.success(), "{tool} -dc {}", path.display());
    out.stdout
}

#[test]
fn check_load_probe_and_explain_failures() {
    if !in_guest() {
        println!(
            "skipped: not inside the scripts/vm-run guest (set IPVSCTL_KERNEL_TESTS=1 to force)"
        );
        return;
    }
    let release = CheckConfig::default().kernel_release().release;
    println!("kernel {release}");

    step("check before loading anything");
    let req = Requirements::default()
        .with_scheduler("wrr")
        .unwrap()
        .with_scheduler("lc")
        .unwrap()
        .with_scheduler("sh")
        .unwrap()
        .with_module("ip_vs_nosuch")
        .unwrap();
    let before = kmod::check(&req);
    println!("{before}");
    for m in &before.modules {
        assert!(!m.verdict.evidence().is_empty(), "{m}");
    }
    let ip_vs_before = label(&before, "ip_vs");
    assert!(
        ip_vs_before == "loadable" || ip_vs_before == "loaded",
        "ip_vs is {ip_vs_before}"
    );
    for s in ["ip_vs_rr", "ip_vs_wrr", "ip_vs_lc", "ip_vs_sh"] {
        let l = label(&before, s);
        assert!(l == "loadable" || l == "loaded", "{s} is {l}");
    }
    match &before.module("ip_vs_nosuch").unwrap().verdict {
        Verdict::Missing { evidence } => {
            let last = evidence.last().unwrap().to_string();
            assert!(last.starts_with("not listed in /lib/modules/"), "{last}");
            assert!(last.ends_with("/modules.dep"), "{last}");
        }
        v => panic!("ip_vs_nosuch: {v}"),
    }
    let d = before.diagnosis().to_string();
    println!("diagnosis: {d}");
    assert!(d.contains("ip_vs_nosuch is missing"), "{d}");

    step("modprobe ip_vs");
    let out = kmod::modprobe(&name("ip_vs"), &Modprobe::default());
    println!("{out}");
    assert_eq!(out.result, Ok(LoadSuccess::Loaded), "{out}");
    let after = kmod::check(&Requirements::ipvs_core());
    println!("{after}");
    match &after.modules[0].verdict {
        Verdict::Loaded { evidence } => {
            assert!(evidence.to_string().starts_with("/proc/modules line "))
        }
        v => panic!("ip_vs after modprobe: {v}"),
    }

    step("unload ip_vs, then probe: the kernel loads ip_vs itself for the family");
    let rm = Command::new("modprobe")
        .args(["-r", "ip_vs"])
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    println!(
        "$ modprobe -r ip_vs => {} {}",
        rm.status,
        String::from_utf8_lossy(&rm.stderr).trim_end()
    );
    assert!(rm.status.success());
    assert_eq!(label(&kmod::check(&req), "ip_vs"), "loadable");
    let probe = kmod::probe_family();
    println!("{probe:?}");
    assert_eq!(probe.unwrap().map(|f| f.name), Some("IPVS".to_owned()));
    let autoloaded = kmod::check(&Requirements::ipvs_core());
    println!("{autoloaded}");
    assert_eq!(label(&autoloaded, "ip_vs"), "loaded");

    step("finit_module ip_vs_wrr (dependencies from modules.dep)");
    let out = kmod::finit_load(&name("ip_vs_wrr"), &CheckConfig::default());
    println!("{out}");
    assert!(out.is_ok(), "{out}");
    let finit: Vec<(&str, Result<(), i32>)> = out
        .steps
        .iter()
        .filter_map(|s| match s {
            LoadStep::FinitModule { name, result, .. } => Some((name.as_str(), *result)),
            _ => None,
        })
        .collect();
    assert_eq!(finit.last(), Some(&("ip_vs_wrr", Ok(()))), "{finit:?}");
    // ip_vs was already there: EEXIST, which counts as success.
    assert!(finit.contains(&("ip_vs", Err(17))), "{finit:?}");
    assert_eq!(label(&kmod::check(&req), "ip_vs_wrr"), "loaded");

    step("probe after loading");
    let family = kmod::probe_family()
        .unwrap()
        .expect("IPVS family after loading ip_vs");
    println!("{family:?}");
    assert_eq!(family.name, "IPVS");
    let probed = kmod::check(&Requirements::ipvs_core()).with_probe(Ok(Some(family.clone())));
    println!("{probed}");
    let u = probed.usability();
    assert!(u.usable && u.probed, "{u}");

    step("scheduler probe in a private network namespace");
    let wrr = kmod::probe_scheduler("wrr").unwrap();
    println!("wrr: {wrr}");
    assert!(
        matches!(
            wrr,
            SchedulerProbe::Works {
                delete_errno: 0,
                ..
            }
        ),
        "{wrr:?}"
    );
    // ip_vs_sh is not loaded: the kernel loads it itself for the service.
    let sh = kmod::probe_scheduler("sh").unwrap();
    println!("sh: {sh}");
    assert!(matches!(sh, SchedulerProbe::Works { .. }), "{sh:?}");
    assert_eq!(label(&kmod::check(&req), "ip_vs_sh"), "loaded");
    let nosuch = kmod::probe_scheduler("nosuch").unwrap();
    println!("nosuch: {nosuch}");
    match &nosuch {
        SchedulerProbe::Refused { errno, explanation } => {
            assert_eq!(*errno, 2);
            assert!(explanation.contains("ip_vs_nosuch"), "{explanation}");
        }
        other => panic!("nosuch: {other:?}"),
    }

    step("modprobe a module that does not exist");
    let out = kmod::modprobe(&name("ip_vs_nosuch"), &Modprobe::default());
    println!("{out}");
    let Err(failure @ LoadFailure::Modprobe { run, .. }) = &out.result else {
        panic!("{out}");
    };
    assert_eq!(failure.cause(), Cause::NotFound, "{out}");
    assert!(run.stderr_text().contains("ip_vs_nosuch"), "{out}");
    assert_ne!(run.status.code(), Some(0));

    step("a damaged copy of a real module");
    let dir = scratch();
    let Verdict::Loadable {
        path, compression, ..
    } = &before.module("ip_vs_lc").unwrap().verdict
    else {
        panic!("ip_vs_lc is not loadable");
    };
    let mut bytes = module_bytes(path, *compression);
    assert_eq!(&bytes[..4], b"\x7fELF");
    let keep = bytes.len() / 3;
    bytes.truncate(keep);
    for b in bytes.iter_mut().skip(64).step_by(7) {
        *b ^= 0x5a;
    }
    let damaged = dir.join("ip_vs_lc.ko");
    fs::write(&damaged, &bytes).unwrap();
    let out = kmod::finit_file(&damaged);
    println!("{out}");
    let Err(failure) = &out.result else {
        panic!("a damaged module loaded: {out}");
    };
    println!("explanation: {}", failure.explanation());
    assert!(matches!(failure, LoadFailure::FinitModule { .. }), "{out}");
    assert_eq!(failure.cause(), Cause::ExecFormat, "{out}");
    assert!(
        failure.to_string().contains("Exec format error"),
        "{failure}"
    );
    assert!(
        failure
            .explanation()
            .contains("another kernel or architecture")
    );
    // What insmod says about the same file, and how it is read.
    let insmod = Command::new("insmod")
        .arg(&damaged)
        .env("LC_ALL", "C")
        .output();
    match insmod {
        Ok(o) => {
            let stderr = String::from_utf8_lossy(&o.stderr);
            println!(
                "$ insmod {} => {}\n  stderr: {}",
                damaged.display(),
                o.status,
                stderr.trim_end()
            );
            assert!(!o.status.success());
            assert_eq!(
                Cause::from_loader_output(&stderr),
                Cause::ExecFormat,
                "{stderr}"
            );
        }
        Err(e) => println!("insmod could not run: {e}"),
    }

    step("a compressed copy through finit_module");
    // Compressed the way kernel builds compress modules. A kernel without
    // CONFIG_MODULE_DECOMPRESS must be reported as such.
    let plain = module_bytes(path, *compression);
    let plain_path = dir.join("ip_vs_lc.ko");
    fs::write(&plain_path, &plain).unwrap();
    let xz = Command::new("xz")
        .args(["--check=crc32", "--lzma2=dict=1MiB", "-f", "-k"])
        .arg(&plain_path)
        .status();
    match xz {
        Ok(s) if s.success() => {
            let out = kmod::finit_file(&dir.join("ip_vs_lc.ko.xz"));
            println!("{out}");
            match &out.result {
                Ok(_) => assert_eq!(label(&kmod::check(&req), "ip_vs_lc"), "loaded"),
                Err(f) => {
                    println!("explanation: {}", f.explanation());
                    assert_eq!(f.cause(), Cause::CompressionUnsupported, "{out}");
                }
            }
        }
        other => println!("xz not available ({other:?}); skipped"),
    }

    step("load everything else that is needed, with modprobe");
    let report = kmod::check(&Requirements::default());
    for out in kmod::load_needed(&report, &Loader::Modprobe(Modprobe::default())) {
        println!("{out}");
        assert!(out.is_ok(), "{out}");
    }
    let last = kmod::check(&Requirements::default()).with_probe(kmod::probe_family());
    println!("{last}");
    assert!(last.all_present(), "{last}");
    let u = last.usability();
    assert!(u.usable && u.probed, "{u}");

    let _ = fs::remove_dir_all(&dir);
}
