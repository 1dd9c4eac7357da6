//! Kernel test of the module check, the load step and the probe.
//!
//! The cargo runner (`scripts/cargo-runner`) starts this binary in the
//! throw-away QEMU guest of `scripts/vm-run` (a stock Debian kernel that
//! boots with no IPVS module loaded, its modules in `/lib/modules`, root),
//! or on the host when the host has IPVS and root.
//!
//! In the guest (or with `IPVSCTL_KERNEL_TESTS=1` on a disposable machine)
//! it runs the whole sequence, which loads and unloads modules. On a host it
//! runs only what leaves the host's modules as they were, apart from what
//! the kernel loads itself for a scheduler probe.
//!
//! One `#[test]` runs the sequence, because loaded modules are global state
//! and tests in one binary run in parallel. Every message the kernel,
//! modprobe and insmod gave is printed (run with `--nocapture` to see them).
// The module is public with the feature `kmod` only.
#![cfg(feature = "kmod")]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use ipvsctl::kmod::{
    self, Cause, CheckConfig, Compression, LoadFailure, LoadStep, LoadSuccess, Loader, Modprobe,
    ModuleName, Report, Requirements, Roots, SchedulerProbe, Verdict,
};

/// True in a machine that is thrown away after the test.
fn disposable() -> bool {
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

/// The modules the test looks at: the defaults, two more schedulers, and
/// one that does not exist.
fn requirements() -> Requirements {
    Requirements::default()
        .with_scheduler("wrr")
        .unwrap()
        .with_scheduler("lc")
        .unwrap()
        .with_scheduler("sh")
        .unwrap()
        .with_module("ip_vs_nosuch")
        .unwrap()
}

/// A scratch directory (in the guest: its tmpfs).
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
        other => panic!("no decompressor known for {other:?}"),
    };
    let out = Command::new(tool).arg("-dc").arg(path).output().unwrap();
    assert!(out.status.success(), "{tool} -dc {}", path.display());
    out.stdout
}

/// The file of a module: from the check's verdict if it is loadable, else
/// from `modules.dep` directly (it may be loaded already).
fn module_file(module: &str) -> (PathBuf, Compression) {
    let cfg = CheckConfig::default();
    let dir = cfg.roots.modules_dir(&cfg.kernel_release().release);
    let text = fs::read_to_string(dir.join("modules.dep")).unwrap();
    let dep = kmod::ModulesDep::parse(&text);
    let order = dep.load_order(module, &dir).unwrap();
    let own = order.last().unwrap();
    (own.path.clone(), own.compression)
}

#[test]
fn check_load_probe_and_explain_failures() {
    let release = CheckConfig::default().kernel_release().release;
    let full = disposable();
    println!(
        "kernel {release}, {}",
        if full {
            "disposable machine: full sequence"
        } else {
            "host: only steps that leave its modules as they were"
        }
    );
    let req = requirements();

    step("check before loading anything");
    let before = kmod::check(&req);
    println!("{before}");
    for m in &before.modules {
        assert!(!m.verdict.evidence().is_empty(), "{m}");
    }
    for s in ["ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_lc", "ip_vs_sh"] {
        let l = label(&before, s);
        assert_ne!(l, "missing", "{s}: {}", before.module(s).unwrap());
    }
    if full {
        // The guest boots with no IPVS module loaded.
        assert_eq!(label(&before, "ip_vs"), "loadable");
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

    if full {
        loads_and_autoload(&req);
    }

    step("probe");
    let family = kmod::probe_family()
        .unwrap()
        .expect("IPVS family (the kernel loads ip_vs itself when asked)");
    println!("{family:?}");
    assert_eq!(family.name, "IPVS");
    let probed = kmod::check(&Requirements::ipvs_core()).with_probe(Ok(Some(family.clone())));
    println!("{probed}");
    let u = probed.usability();
    assert!(u.usable && u.probed, "{u}");

    step("scheduler probe in a private network namespace");
    let rr = kmod::probe_scheduler("rr", kmod::DEFAULT_PROBE_TIMEOUT).unwrap();
    println!("rr: {rr}");
    assert!(
        matches!(
            rr,
            SchedulerProbe::Works {
                delete_errno: 0,
                ..
            }
        ),
        "{rr:?}"
    );
    let nosuch = kmod::probe_scheduler("nosuch", kmod::DEFAULT_PROBE_TIMEOUT).unwrap();
    println!("nosuch: {nosuch}");
    match &nosuch {
        SchedulerProbe::Refused { errno, explanation } => {
            assert_eq!(*errno, 2);
            assert!(explanation.contains("ip_vs_nosuch"), "{explanation}");
        }
        other => panic!("nosuch: {other:?}"),
    }
    if full {
        // ip_vs_sh is not loaded: the kernel loads it itself for the service.
        assert_eq!(label(&kmod::check(&req), "ip_vs_sh"), "loadable");
        let sh = kmod::probe_scheduler("sh", kmod::DEFAULT_PROBE_TIMEOUT).unwrap();
        println!("sh: {sh}");
        assert!(
            matches!(
                sh,
                SchedulerProbe::Works {
                    delete_errno: 0,
                    ..
                }
            ),
            "{sh:?}"
        );
        assert_eq!(label(&kmod::check(&req), "ip_vs_sh"), "loaded");
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
    let (path, compression) = module_file("ip_vs_lc");
    let plain = module_bytes(&path, compression);
    assert_eq!(&plain[..4], b"\x7fELF");
    let mut bytes = plain.clone();
    bytes.truncate(plain.len() / 3);
    for b in bytes.iter_mut().skip(64).step_by(7) {
        *b ^= 0x5a;
    }
    let damaged = dir.join("damaged").join("ip_vs_lc.ko");
    fs::create_dir_all(damaged.parent().unwrap()).unwrap();
    fs::write(&damaged, &bytes).unwrap();
    let out = kmod::finit_file(&damaged);
    println!("{out}");
    let Err(failure) = &out.result else {
        panic!("a damaged module loaded: {out}");
    };
    println!("explanation: {}", failure.explanation());
    assert!(matches!(failure, LoadFailure::FinitModule { .. }), "{out}");
    if failure.cause() == Cause::NotPermitted && !full {
        println!("no CAP_SYS_MODULE on this host: explained as such");
    } else {
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
        match Command::new("insmod")
            .arg(&damaged)
            .env("LC_ALL", "C")
            .output()
        {
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
    }

    if full {
        outside_entries_are_refused(&dir, &plain, &req);
        compressed_copy(&dir, &plain, &req);
        load_the_rest();
    }
    let _ = fs::remove_dir_all(&dir);
}

/// The first mainline release whose ip_vs has the generic-netlink family
/// alias, so that the kernel loads it for a family lookup ("ipvs: autoload
/// ipvs on genl access"); 5.10 has none.
const FAMILY_AUTOLOAD: ipvsctl::capabilities::KernelVersion =
    ipvsctl::capabilities::KernelVersion::new(5, 16, 0);

/// modprobe, unload, the kernel's own load on a family lookup (from 5.16;
/// before, modprobe again), then finit_module with the modules.dep chain.
fn loads_and_autoload(req: &Requirements) {
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
    assert_eq!(label(&kmod::check(req), "ip_vs"), "loadable");
    let probe = kmod::probe_family();
    println!("{probe:?}");
    let release = CheckConfig::default().kernel_release().release;
    let version =
        ipvsctl::capabilities::KernelVersion::parse(&release).expect("the release parses");
    if version >= FAMILY_AUTOLOAD {
        assert_eq!(probe.unwrap().map(|f| f.name), Some("IPVS".to_owned()));
    } else {
        // No family alias in ip_vs: nothing loads it for the lookup.
        assert_eq!(probe.unwrap().map(|f| f.name), None, "{release}");
        let out = kmod::modprobe(&name("ip_vs"), &Modprobe::default());
        assert_eq!(out.result, Ok(LoadSuccess::Loaded), "{out}");
    }
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
    assert_eq!(label(&kmod::check(req), "ip_vs_wrr"), "loaded");
}

/// A `modules.dep` whose entry for ip_vs_lc names a good copy of it outside
/// the modules directory: by absolute path, by `..`, and through a symbolic
/// link inside the directory. The load is refused each time and the module
/// stays unloaded.
fn outside_entries_are_refused(dir: &Path, plain: &[u8], req: &Requirements) {
    step("modules.dep entries outside the modules directory");
    let copy = dir.join("outside").join("ip_vs_lc.ko");
    fs::create_dir_all(copy.parent().unwrap()).unwrap();
    fs::write(&copy, plain).unwrap();
    let release = CheckConfig::default().kernel_release().release;
    let lib_modules = dir.join("lib").join("modules");
    let modules_dir = lib_modules.join(&release);
    fs::create_dir_all(modules_dir.join("kernel")).unwrap();
    fs::write(modules_dir.join("modules.builtin"), "").unwrap();
    std::os::unix::fs::symlink(&copy, modules_dir.join("kernel/ip_vs_lc.ko")).unwrap();
    // The running system's /proc and /sys, a hostile modules tree.
    let cfg = CheckConfig::default().with_roots(Roots::default().with_lib_modules(lib_modules));
    for entry in [
        copy.display().to_string(),
        "../../../outside/ip_vs_lc.ko".to_owned(),
        "kernel/ip_vs_lc.ko".to_owned(),
    ] {
        fs::write(modules_dir.join("modules.dep"), format!("{entry}:\n")).unwrap();
        let out = kmod::finit_load(&name("ip_vs_lc"), &cfg);
        println!("{entry}: {out}");
        assert_eq!(label(&kmod::check(req), "ip_vs_lc"), "loadable", "{out}");
        assert!(out.steps.is_empty(), "{out}");
        match &out.result {
            Err(LoadFailure::OutsideModulesDir { entry: named, .. }) => {
                assert_eq!(named, Path::new(&entry), "{out}")
            }
            _ => panic!("{out}"),
        }
    }
}

/// An xz-compressed copy through finit_module with
/// MODULE_INIT_COMPRESSED_FILE: loads where the kernel decompresses modules
/// itself (CONFIG_MODULE_DECOMPRESS), is reported as unsupported elsewhere.
fn compressed_copy(dir: &Path, plain: &[u8], req: &Requirements) {
    step("a compressed copy through finit_module");
    let plain_path = dir.join("ip_vs_lc.ko");
    fs::write(&plain_path, plain).unwrap();
    // Compressed the way kernel builds compress modules.
    let xz = Command::new("xz")
        .args(["--check=crc32", "--lzma2=dict=1MiB", "-f", "-k"])
        .arg(&plain_path)
        .status();
    match xz {
        Ok(s) if s.success() => {
            assert_eq!(label(&kmod::check(req), "ip_vs_lc"), "loadable");
            let out = kmod::finit_file(&dir.join("ip_vs_lc.ko.xz"));
            println!("{out}");
            match &out.result {
                Ok(_) => assert_eq!(label(&kmod::check(req), "ip_vs_lc"), "loaded"),
                Err(f) => {
                    println!("explanation: {}", f.explanation());
                    assert_eq!(f.cause(), Cause::CompressionUnsupported, "{out}");
                }
            }
        }
        other => println!("xz not available ({other:?}); skipped"),
    }
}

/// Whatever of the defaults is still not loaded, with modprobe; then the
/// report and the probe agree.
fn load_the_rest() {
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
}
