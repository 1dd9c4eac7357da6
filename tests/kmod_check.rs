//! Host tests of the kernel module check against prepared trees.
// The module is public with the feature `kmod` only.
#![cfg(feature = "kmod")]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use ipvsctl::kmod::{
    self, CheckConfig, Compression, Evidence, ModulesDep, ReleaseSource, Requirements, Roots,
    Verdict,
};

const REL: &str = "6.1.0-18-amd64";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/kmod/mixed")
}

/// A fresh directory under the system temp dir, removed on drop.
struct Tree(PathBuf);

impl Tree {
    fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ipvsctl-kmod-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Tree(dir)
    }
    fn write(&self, rel: &str, text: &str) -> &Self {
        let p = self.0.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
        self
    }
    fn mkdir(&self, rel: &str) -> &Self {
        fs::create_dir_all(self.0.join(rel)).unwrap();
        self
    }
    fn cfg(&self) -> CheckConfig {
        CheckConfig::default().with_roots(Roots::under(&self.0))
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn mixed_report() -> kmod::Report {
    let req = Requirements::default()
        .with_scheduler("mh")
        .unwrap()
        .with_persistence_engine("sip")
        .unwrap();
    kmod::check_with(
        &req,
        &CheckConfig::default().with_roots(Roots::under(fixture())),
    )
}

#[test]
fn release_comes_from_osrelease() {
    let r = mixed_report();
    assert_eq!(r.release.release, REL);
    assert_eq!(
        r.release.source,
        ReleaseSource::File(fixture().join("proc/sys/kernel/osrelease"))
    );
    assert_eq!(r.modules_dir, fixture().join("lib/modules").join(REL));
}

#[test]
fn loaded_from_proc_modules() {
    let r = mixed_report();
    let m = r.module("ip_vs").unwrap();
    match &m.verdict {
        Verdict::Loaded {
            evidence: Evidence::Line { file, number, text },
        } => {
            assert_eq!(file, &fixture().join("proc/modules"));
            assert_eq!(*number, 2);
            assert!(text.starts_with("ip_vs 192512"));
        }
        v => panic!("unexpected {v:?}"),
    }
    assert_eq!(r.module("ip-vs-rr").unwrap().verdict.label(), "loaded");
}

#[test]
fn builtin_from_modules_builtin() {
    let r = mixed_report();
    match &r.module("nf_conntrack").unwrap().verdict {
        Verdict::BuiltIn {
            evidence: Evidence::Line { file, number, text },
        } => {
            assert!(file.ends_with("modules.builtin"));
            assert_eq!(*number, 1);
            assert_eq!(text, "kernel/net/netfilter/nf_conntrack.ko");
        }
        v => panic!("unexpected {v:?}"),
    }
}

#[test]
fn loadable_with_path_and_dependency_chain() {
    let r = mixed_report();
    let dir = fixture().join("lib/modules").join(REL);
    match &r.module("ip_vs_wrr").unwrap().verdict {
        Verdict::Loadable {
            path,
            compression,
            dependencies,
            evidence,
        } => {
            assert_eq!(path, &dir.join("kernel/net/netfilter/ipvs/ip_vs_wrr.ko"));
            assert_eq!(*compression, Compression::None);
            let names: Vec<&str> = dependencies.iter().map(|d| d.name.as_str()).collect();
            assert_eq!(names, ["libcrc32c", "nf_defrag_ipv6", "ip_vs"]);
            assert_eq!(
                dependencies[2].path,
                dir.join("kernel/net/netfilter/ipvs/ip_vs.ko")
            );
            match evidence {
                Evidence::Line { file, number, .. } => {
                    assert_eq!(file, &dir.join("modules.dep"));
                    assert_eq!(*number, 5);
                }
                e => panic!("unexpected {e:?}"),
            }
        }
        v => panic!("unexpected {v:?}"),
    }
    // The persistence engine's chain puts its own dependency before it.
    match &r.module("ip_vs_pe_sip").unwrap().verdict {
        Verdict::Loadable { dependencies, .. } => {
            let names: Vec<&str> = dependencies.iter().map(|d| d.name.as_str()).collect();
            assert_eq!(
                names,
                ["libcrc32c", "nf_defrag_ipv6", "ip_vs", "nf_conntrack_sip"]
            );
        }
        v => panic!("unexpected {v:?}"),
    }
}

#[test]
fn missing_lists_every_place_looked() {
    let r = mixed_report();
    let m = r.module("ip_vs_sh").unwrap();
    let Verdict::Missing { evidence } = &m.verdict else {
        panic!("unexpected {:?}", m.verdict);
    };
    let text: Vec<String> = evidence.iter().map(ToString::to_string).collect();
    assert_eq!(evidence.len(), 4, "{text:?}");
    assert!(text[0].starts_with("not listed in ") && text[0].ends_with("modules.builtin"));
    assert!(text[1].ends_with("proc/modules"));
    assert!(text[2].ends_with("sys/module/ip_vs_sh does not exist"));
    assert!(text[3].ends_with("modules.dep"));
}

#[test]
fn every_verdict_has_evidence() {
    let r = mixed_report();
    assert_eq!(r.modules.len(), 7);
    for m in &r.modules {
        assert!(!m.verdict.evidence().is_empty(), "{m}");
        let line = m.to_string();
        assert!(line.len() > m.module.as_str().len() + 20, "{line}");
    }
}

#[test]
fn sys_module_initstate_means_loaded_and_its_absence_built_in() {
    let t = Tree::new("sys");
    t.write("proc/sys/kernel/osrelease", "6.6.0\n")
        .write("proc/modules", "")
        .write("lib/modules/6.6.0/modules.builtin", "")
        .write("lib/modules/6.6.0/modules.dep", "")
        .write("sys/module/ip_vs/initstate", "live\n")
        .write("sys/module/nf_conntrack/parameters/hashsize", "1024\n");
    let req = Requirements::ipvs_core().with_conntrack();
    let r = kmod::check_with(&req, &t.cfg());
    match &r.modules[0].verdict {
        Verdict::Loaded {
            evidence: Evidence::Exists { path, content, .. },
        } => {
            assert!(path.ends_with("sys/module/ip_vs/initstate"));
            assert_eq!(content.as_deref(), Some("live"));
        }
        v => panic!("unexpected {v:?}"),
    }
    match &r.modules[1].verdict {
        Verdict::BuiltIn {
            evidence: Evidence::Exists { path, .. },
        } => assert!(path.ends_with("sys/module/nf_conntrack")),
        v => panic!("unexpected {v:?}"),
    }
}

#[test]
fn compressed_modules_and_dashes() {
    let t = Tree::new("xz");
    t.write("proc/sys/kernel/osrelease", "6.12.9-amd64\n")
        .write("proc/modules", "")
        .write("lib/modules/6.12.9-amd64/modules.builtin", "")
        .write(
            "lib/modules/6.12.9-amd64/modules.dep",
            "kernel/net/netfilter/ipvs/ip_vs_sh.ko.zst: kernel/net/netfilter/ipvs/ip_vs.ko.xz kernel/lib/lib-crc32c.ko.gz\n\
             kernel/net/netfilter/ipvs/ip_vs.ko.xz: kernel/lib/lib-crc32c.ko.gz\n\
             kernel/lib/lib-crc32c.ko.gz:\n",
        );
    let req = Requirements::ipvs_core()
        .with_scheduler("sh")
        .unwrap()
        .with_module("lib-crc32c")
        .unwrap();
    let r = kmod::check_with(&req, &t.cfg());
    let label = |n: &str| r.module(n).unwrap().verdict.label();
    assert_eq!(label("ip_vs"), "loadable");
    assert_eq!(label("lib_crc32c"), "loadable");
    match &r.module("ip_vs_sh").unwrap().verdict {
        Verdict::Loadable {
            path,
            compression,
            dependencies,
            ..
        } => {
            assert!(path.ends_with("ip_vs_sh.ko.zst"));
            assert_eq!(*compression, Compression::Zstd);
            let got: Vec<(&str, Compression)> = dependencies
                .iter()
                .map(|d| (d.name.as_str(), d.compression))
                .collect();
            assert_eq!(
                got,
                [
                    ("lib_crc32c", Compression::Gzip),
                    ("ip_vs", Compression::Xz)
                ]
            );
        }
        v => panic!("unexpected {v:?}"),
    }
}

#[test]
fn mismatched_release_names_the_directories_found() {
    let t = Tree::new("mismatch");
    t.write("proc/sys/kernel/osrelease", "6.8.0-45-generic\n")
        .write("proc/modules", "")
        .write("lib/modules/5.15.0-91-generic/modules.dep", "")
        .mkdir("lib/modules/6.5.0-14-generic");
    let r = kmod::check_with(&Requirements::default(), &t.cfg());
    for m in &r.modules {
        let Verdict::Missing { evidence } = &m.verdict else {
            panic!("unexpected {m}");
        };
        let last = evidence.last().unwrap();
        match last {
            Evidence::NoModulesDir { release, found, .. } => {
                assert_eq!(release, "6.8.0-45-generic");
                assert_eq!(found, &["5.15.0-91-generic", "6.5.0-14-generic"]);
            }
            e => panic!("unexpected {e:?}"),
        }
        let text = last.to_string();
        assert!(
            text.starts_with("no modules directory for running kernel 6.8.0-45-generic"),
            "{text}"
        );
        assert!(
            text.contains("found directories for 5.15.0-91-generic, 6.5.0-14-generic"),
            "{text}"
        );
    }
    let d = r.diagnosis().to_string();
    assert!(
        d.starts_with(
            "IPVS unavailable: ip_vs, ip_vs_rr, ip_vs_wrr, ip_vs_sh, nf_conntrack are missing: \
             no modules directory for running kernel 6.8.0-45-generic"
        ),
        "{d}"
    );
}

#[test]
fn no_lib_modules_at_all() {
    let t = Tree::new("nolib");
    t.write("proc/sys/kernel/osrelease", "6.1.0\n");
    let r = kmod::check_with(&Requirements::ipvs_core(), &t.cfg());
    let Verdict::Missing { evidence } = &r.modules[0].verdict else {
        panic!("unexpected {:?}", r.modules[0].verdict);
    };
    // /proc/modules unreadable, /sys/module absent, no modules dir.
    assert!(matches!(evidence[0], Evidence::Unreadable { .. }));
    let last = evidence.last().unwrap().to_string();
    assert!(
        last.ends_with("lib/modules: does not exist either"),
        "{last}"
    );
}

#[test]
fn release_from_caller_and_uname_fallback() {
    let t = Tree::new("rel");
    let mut cfg = t.cfg();
    let r = cfg.kernel_release();
    assert!(matches!(r.source, ReleaseSource::Uname { .. }), "{r:?}");
    assert!(!r.release.is_empty());
    cfg.release = Some("9.9.9".into());
    assert_eq!(cfg.kernel_release().source, ReleaseSource::Caller);

    // A release that is not one path component is not used as one.
    t.write("proc/sys/kernel/osrelease", "../../etc\n");
    let r = t.cfg().kernel_release();
    assert!(matches!(r.source, ReleaseSource::Uname { .. }), "{r:?}");
    cfg.release = Some("../x".into());
    let rep = kmod::check_with(&Requirements::ipvs_core(), &cfg);
    assert_eq!(rep.modules[0].verdict.label(), "missing");
}

#[test]
fn garbage_inputs_do_not_panic() {
    let t = Tree::new("garbage");
    let junk = "\u{0}\u{ffff}:::\n: \n.ko:\n/.ko.xz: a b\n::::ip_vs.ko\nip_vs.ko ip_vs.ko: :\n\
                kernel/a.ko: kernel/a.ko\nkernel/b.ko: kernel/c.ko\nkernel/c.ko: kernel/b.ko\n";
    t.write("proc/sys/kernel/osrelease", "6.1.0\n")
        .write("proc/modules", junk)
        .write("lib/modules/6.1.0/modules.builtin", junk)
        .write("lib/modules/6.1.0/modules.dep", junk);
    fs::write(t.0.join("proc/modules"), [0xff, 0xfe, b'\n', 0x80]).unwrap();
    let req = Requirements::ipvs_core()
        .with_module("a")
        .unwrap()
        .with_module("b")
        .unwrap();
    let r = kmod::check_with(&req, &t.cfg());
    let _ = r.to_string();
    // Self-dependency and a cycle still give a finite chain.
    let dep = ModulesDep::parse(junk);
    let order = dep.load_order("b", Path::new("/m")).unwrap();
    let names: Vec<&str> = order.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["c", "b"]);
    assert_eq!(dep.load_order("a", Path::new("/m")).unwrap().len(), 1);
}

#[test]
fn requirements_map_schedulers_and_engines() {
    let names =
        |r: &Requirements| -> Vec<String> { r.iter().map(|x| x.module.to_string()).collect() };
    assert_eq!(
        names(&Requirements::default()),
        ["ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack"]
    );
    let mut all = Requirements::empty();
    for s in kmod::KERNEL_SCHEDULERS {
        all = all.with_scheduler(s).unwrap();
    }
    all = all.with_persistence_engine("sip").unwrap();
    let got = names(&all);
    assert_eq!(got.len(), 15);
    assert_eq!(got[0], "ip_vs_rr");
    assert_eq!(got[13], "ip_vs_twos");
    assert_eq!(got[14], "ip_vs_pe_sip");
    assert!(Requirements::empty().with_scheduler("").is_err());
    assert!(Requirements::empty().with_scheduler("r r").is_err());
    assert!(Requirements::empty().with_module(&"x".repeat(56)).is_err());
    // Duplicates, in any spelling, are dropped.
    let r = Requirements::ipvs_core().with_module("ip-vs").unwrap();
    assert_eq!(r.len(), 1);
}
