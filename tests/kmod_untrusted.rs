//! Host tests: the load step trusts neither the caller's environment nor
//! the paths `modules.dep` names.
//!
//! The process environment is shared by every test of a binary, so a test
//! that needs a hostile `PATH` or `MODPROBE_OPTIONS` runs its body in a
//! child process of its own: this binary again, with `--exact` and the
//! variables set for that child only ([`rerun`]).
//!
//! No test here loads anything into the kernel: the fake module files are
//! text, and the tests check that the loader refuses before it opens them.
// The module is public with the feature `kmod` only.
#![cfg(feature = "kmod")]

mod support;

use std::ffi::OsString;
use std::fs;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ipvsctl::kmod::{
    self, Cause, CheckConfig, Escape, KmodError, LoadFailure, LoadStep, Loader,
    MODPROBE_CANDIDATES, MODPROBE_ENVIRONMENT, Modprobe, ModuleName, Requirements, Roots,
};
use rustix::fs::inotify;

/// Set in the child process that [`rerun`] starts.
const CHILD: &str = "IPVSCTL_KMOD_TEST_CHILD";
/// The fake program the child is to run, given by the parent.
const FAKE: &str = "IPVSCTL_KMOD_TEST_FAKE";

use support::ScratchDir as Dir;

fn name(n: &str) -> ModuleName {
    ModuleName::new(n).unwrap()
}

fn in_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// Runs the test `test` of this binary in a child process whose
/// environment is this one's plus `env`, and fails unless the child's test
/// passed.
fn rerun(test: &str, env: &[(&str, OsString)]) -> Output {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let text = format!(
        "child {test}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    // libtest prints "running 0 tests" when the filter matched nothing.
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "{text}"
    );
    println!("{text}");
    out
}

/// Prepends `dir` to this process's `PATH`.
fn path_with_first(dir: &Path) -> OsString {
    let mut dirs = vec![dir.to_path_buf()];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).unwrap()
}

/// A module name no kernel has: the real modprobe, if the child reaches
/// it, only says it is not found.
const NO_SUCH_MODULE: &str = "ipvsctl_test_no_such_module";

#[test]
fn a_modprobe_first_on_path_is_not_run() {
    if in_child() {
        let out = kmod::modprobe(&name(NO_SUCH_MODULE), &Modprobe::default());
        println!("{out}");
        for step in &out.steps {
            let program = match step {
                LoadStep::Ran(run) => &run.program,
                LoadStep::SpawnFailed { program, .. } => program,
                s => panic!("unexpected step {s}"),
            };
            assert!(
                program.is_absolute()
                    && MODPROBE_CANDIDATES.iter().any(|c| program == Path::new(c)),
                "ran {} (not one of {MODPROBE_CANDIDATES:?})",
                program.display()
            );
        }
        return;
    }
    let d = Dir::new("kmod-untrusted-path");
    let marker = d.0.join("marker");
    d.script(
        "bin/modprobe",
        &format!("echo \"$0 $*\" > '{}'\nexit 0", marker.display()),
    );
    rerun(
        "a_modprobe_first_on_path_is_not_run",
        &[("PATH", path_with_first(&d.0.join("bin")))],
    );
    assert!(
        !marker.exists(),
        "the modprobe first on PATH ran: {}",
        fs::read_to_string(&marker).unwrap_or_default()
    );
}

#[test]
fn a_modprobe_program_is_named_by_absolute_path_only() {
    for bad in [
        "modprobe",
        "bin/modprobe",
        "./modprobe",
        "../sbin/modprobe",
        "",
    ] {
        match Modprobe::at(bad) {
            Err(e @ KmodError::InvalidModprobePath { .. }) => {
                assert!(e.to_string().contains("not an absolute path"), "{e}");
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    for candidate in MODPROBE_CANDIDATES {
        assert!(Path::new(candidate).is_absolute(), "{candidate}");
        assert!(candidate.ends_with("/modprobe"), "{candidate}");
    }
    let names: Vec<&str> = MODPROBE_ENVIRONMENT.iter().map(|(k, _)| *k).collect();
    assert_eq!(names, ["HOME", "TERM", "PATH", "LC_ALL"]);
}

/// Variables modprobe, the dynamic loader or a shell would act on.
const HOSTILE_ENV: [(&str, &str); 5] = [
    (
        "MODPROBE_OPTIONS",
        "-C /nonexistent/ipvsctl-test-modprobe.d",
    ),
    ("LD_PRELOAD", "/nonexistent/ipvsctl-test-preload.so"),
    ("LD_LIBRARY_PATH", "/nonexistent/ipvsctl-test-lib"),
    ("ENV", "/nonexistent/ipvsctl-test-shrc"),
    ("IFS", "/"),
];

/// What a shell itself may add when it runs `env`.
const SHELL_OWN: [&str; 3] = ["PWD", "SHLVL", "_"];

#[test]
fn modprobe_sees_only_a_fixed_environment() {
    if in_child() {
        let program = PathBuf::from(std::env::var_os(FAKE).unwrap());
        let out = kmod::modprobe(&name("ip_vs"), &Modprobe::at(program).unwrap());
        println!("{out}");
        let Some(LoadStep::Ran(run)) = out.steps.first() else {
            panic!("the fake modprobe did not run: {out}");
        };
        let env = run.stdout_text();
        let names: Vec<&str> = env
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .collect();
        for (hostile, _) in HOSTILE_ENV {
            assert!(
                !names.contains(&hostile),
                "{hostile} reached modprobe:\n{env}"
            );
        }
        for n in &names {
            assert!(
                ["PATH", "LC_ALL", "HOME", "TERM"].contains(n) || SHELL_OWN.contains(n),
                "{n} reached modprobe:\n{env}"
            );
        }
        // What the kernel gives the modprobe it runs itself, and the C locale.
        for want in [
            "PATH=/sbin:/usr/sbin:/bin:/usr/bin",
            "HOME=/",
            "TERM=linux",
            "LC_ALL=C",
        ] {
            assert!(env.lines().any(|l| l == want), "no {want}:\n{env}");
        }
        return;
    }
    let d = Dir::new("kmod-untrusted-env");
    let fake = d.script("modprobe", "env");
    let mut env: Vec<(&str, OsString)> = HOSTILE_ENV
        .iter()
        .map(|&(k, v)| (k, OsString::from(v)))
        .collect();
    env.push((FAKE, fake.into_os_string()));
    rerun("modprobe_sees_only_a_fixed_environment", &env);
}

/// Reports the names of files opened in some directories (inotify
/// `IN_OPEN`), to show that a file was never opened.
struct OpenWatch(OwnedFd);

impl OpenWatch {
    fn new(dirs: &[&Path]) -> Self {
        let fd =
            inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC).unwrap();
        for dir in dirs {
            inotify::add_watch(&fd, *dir, inotify::WatchFlags::OPEN).unwrap();
        }
        OpenWatch(fd)
    }

    /// Names of the files opened since the last call.
    fn opened(&self) -> Vec<String> {
        let mut buf = [MaybeUninit::uninit(); 4096];
        let mut events = inotify::Reader::new(&self.0, &mut buf);
        let mut names = Vec::new();
        loop {
            match events.next() {
                Ok(e) => {
                    if let Some(n) = e.file_name() {
                        names.push(n.to_string_lossy().into_owned());
                    }
                }
                Err(rustix::io::Errno::WOULDBLOCK) => return names,
                Err(e) => panic!("inotify: {e}"),
            }
        }
    }
}

const REL: &str = "6.1.0-ipvsctl-test";

/// A host tree whose `modules.dep` names files outside its modules
/// directory: `<tree>/outside/evil.ko` by absolute path, `<tree>/lib/evil.ko`
/// by `../../evil.ko`, and `<tree>/outside/evil.ko` again through a symbolic
/// link inside the modules directory. Every module file is text.
struct HostileTree {
    dir: Dir,
    outside: PathBuf,
}

impl HostileTree {
    fn new() -> Self {
        let dir = Dir::new("kmod-untrusted-dep");
        let outside = dir.write("outside/evil.ko", "not a module\n");
        dir.write("lib/evil.ko", "not a module\n");
        let modules = format!("lib/modules/{REL}");
        dir.write("proc/sys/kernel/osrelease", &format!("{REL}\n"));
        dir.write("proc/modules", "");
        dir.write(&format!("{modules}/modules.builtin"), "");
        dir.write(&format!("{modules}/kernel/good.ko"), "not a module\n");
        dir.write(&format!("{modules}/kernel/old.ko"), "not a module\n");
        fs::create_dir_all(dir.0.join(&modules).join("kernel/sub")).unwrap();
        std::os::unix::fs::symlink(&outside, dir.0.join(&modules).join("kernel/link.ko")).unwrap();
        dir.write(
            &format!("{modules}/modules.dep"),
            &format!(
                "kernel/absolute.ko: {} kernel/good.ko\n\
                 kernel/dotdot.ko: kernel/good.ko ../../evil.ko\n\
                 kernel/link.ko:\n\
                 kernel/inner.ko: kernel/sub/../missing.ko\n\
                 kernel/good.ko:\n\
                 {}/kernel/old.ko:\n",
                outside.display(),
                dir.0.join(&modules).display()
            ),
        );
        HostileTree { dir, outside }
    }

    fn cfg(&self) -> CheckConfig {
        CheckConfig::default().with_roots(Roots::under(&self.dir.0))
    }

    fn modules_dir(&self) -> PathBuf {
        self.dir.0.join("lib/modules").join(REL)
    }

    /// Watches every directory holding a module file of the tree.
    fn watch(&self) -> OpenWatch {
        OpenWatch::new(&[
            self.outside.parent().unwrap(),
            &self.dir.0.join("lib"),
            &self.modules_dir().join("kernel"),
        ])
    }
}

#[test]
fn finit_refuses_modules_dep_entries_outside_the_modules_directory() {
    let tree = HostileTree::new();
    let watch = tree.watch();
    let cases = [
        (
            "absolute",
            tree.outside.display().to_string(),
            "evil",
            Escape::AbsolutePath,
        ),
        (
            "dotdot",
            "../../evil.ko".to_owned(),
            "evil",
            Escape::ParentDir,
        ),
        (
            "link",
            "kernel/link.ko".to_owned(),
            "link",
            Escape::ResolvesTo(fs::canonicalize(&tree.outside).unwrap()),
        ),
    ];
    // Every case is tried, and every problem reported.
    let mut problems = Vec::new();
    for (module, entry, file_of, escape) in &cases {
        let out = kmod::finit_load(&name(module), &tree.cfg());
        println!("{out}");
        if !out.steps.is_empty() {
            problems.push(format!("{module}: the loader acted: {out}"));
        }
        match &out.result {
            Ok(_) => problems.push(format!("{module}: loaded: {out}")),
            Err(failure) if !failure.to_string().contains(entry.as_str()) => problems.push(
                format!("{module}: the failure does not name {entry}: {failure}"),
            ),
            Err(failure) => {
                let want = LoadFailure::OutsideModulesDir {
                    module: (*file_of).to_owned(),
                    entry: PathBuf::from(entry),
                    modules_dir: tree.modules_dir(),
                    escape: escape.clone(),
                };
                if failure != &want {
                    problems.push(format!("{module}: {failure:?}, not {want:?}"));
                }
                if failure.cause() != Cause::OutsideModulesDir {
                    problems.push(format!("{module}: cause {:?}", failure.cause()));
                }
            }
        }
        let opened = watch.opened();
        if !opened.is_empty() {
            problems.push(format!("{module}: opened {opened:?}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // The same through load_needed, which works from a report.
    let req = Requirements::empty().with_module("dotdot").unwrap();
    let report = kmod::check_with(&req, &tree.cfg());
    let outcomes = kmod::load_needed(&report, &Loader::FinitModule);
    assert!(outcomes[0].steps.is_empty(), "{}", outcomes[0]);
    assert!(
        matches!(
            &outcomes[0].result,
            Err(LoadFailure::OutsideModulesDir { entry, escape: Escape::ParentDir, .. })
                if entry == Path::new("../../evil.ko")
        ),
        "{}",
        outcomes[0]
    );
    let text = outcomes[0].to_string();
    assert!(text.contains("refused, nothing loaded"), "{text}");
    assert!(text.contains("regenerate it with depmod"), "{text}");
    assert_eq!(watch.opened(), Vec::<String>::new());
}

/// A relative entry, and an absolute one inside the directory (as
/// module-init-tools wrote them), are let through.
#[test]
fn finit_opens_a_file_inside_by_its_real_path() {
    let tree = HostileTree::new();
    for module in ["good", "old"] {
        let out = kmod::finit_load(&name(module), &tree.cfg());
        println!("{out}");
        // The kernel refuses a text file (or has no module support here);
        // what matters is that the file was let through, by its real path.
        let file = tree.modules_dir().join(format!("kernel/{module}.ko"));
        let real = fs::canonicalize(file).unwrap();
        match &out.steps[..] {
            [LoadStep::FinitModule { path, result, .. }] => {
                assert_eq!(path, &real, "{out}");
                assert!(result.is_err(), "{out}");
            }
            s => panic!("{module}: unexpected {s:?}"),
        }
    }
}

#[test]
fn finit_follows_a_dotdot_that_stays_inside() {
    let tree = HostileTree::new();
    let out = kmod::finit_load(&name("inner"), &tree.cfg());
    println!("{out}");
    // Not refused: it goes on to the file, which is not there.
    match &out.steps[..] {
        [LoadStep::OpenFailed { path, errno, .. }] => {
            assert_eq!(*errno, Some(2), "{out}");
            assert!(path.ends_with("missing.ko"), "{out}");
        }
        s => panic!("unexpected {s:?}"),
    }
}
