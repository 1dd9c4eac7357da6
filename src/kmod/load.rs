//! The explicit, opt-in load step: `modprobe`, or `finit_module(2)` with
//! the order from `modules.dep`. Everything the loader said is kept.

use std::ffi::c_int;
use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use rustix::io::Errno;

use super::check::{Verdict, check_with};
use super::confine::{Escape, ModulesDir, Refusal};
use super::evidence::Evidence;
use super::explain::Cause;
use super::modprobe::{CommandRun, KilledRun, Modprobe, modprobe};
use super::modules_dep::{Compression, ModuleFile, module_name_of_path};
use super::name::{ModuleName, Requirements};
use super::report::Report;
use super::roots::CheckConfig;

/// `MODULE_INIT_COMPRESSED_FILE` from `<linux/module.h>` (Linux 5.17+):
/// the kernel decompresses the file itself.
pub const MODULE_INIT_COMPRESSED_FILE: u32 = 4;

/// Which loader [`load_needed`] uses.
///
/// ```no_run
/// use ipvsctl::kmod::{self, Loader, Requirements};
///
/// // No modprobe program in this image: load through finit_module(2).
/// let report = kmod::check(&Requirements::default());
/// let all_ok = kmod::load_needed(&report, &Loader::FinitModule).iter().all(|o| o.is_ok());
/// # let _ = all_ok;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Loader {
    /// Run `modprobe -- <module>` once per module (it reads the real
    /// `/lib/modules`, whatever [`Roots`](super::Roots) say).
    Modprobe(Modprobe),
    /// Call `finit_module(2)` on each file, dependencies first, as the
    /// check's `modules.dep` line gives them. Needs no program.
    FinitModule,
}

/// One thing the loader did.
///
/// ```
/// use ipvsctl::kmod::{self, LoadStep};
///
/// let out = kmod::finit_file("/nonexistent/ip_vs.ko".as_ref());
/// assert!(matches!(out.steps[..], [LoadStep::OpenFailed { errno: Some(2), .. }]));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadStep {
    /// A program ran to its end.
    Ran(CommandRun),
    /// A program did not end within its timeout and was killed.
    Killed(KilledRun),
    /// A program could not be started.
    SpawnFailed {
        /// The program.
        program: PathBuf,
        /// The error as the system put it.
        error: String,
        /// Its errno, if any.
        errno: Option<i32>,
    },
    /// A module file could not be opened.
    OpenFailed {
        /// The file.
        path: PathBuf,
        /// The error as the system put it.
        error: String,
        /// Its errno, if any.
        errno: Option<i32>,
    },
    /// `finit_module(2)` was called on a file.
    FinitModule {
        /// The module's name.
        name: String,
        /// The file.
        path: PathBuf,
        /// The flags passed.
        flags: u32,
        /// `Ok` or the errno.
        result: Result<(), i32>,
    },
}

impl fmt::Display for LoadStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadStep::Ran(run) => write!(f, "{run}"),
            LoadStep::Killed(run) => write!(f, "{run}"),
            LoadStep::SpawnFailed { program, error, .. } => {
                write!(f, "cannot start {}: {error}", program.display())
            }
            LoadStep::OpenFailed { path, error, .. } => {
                write!(f, "cannot open {}: {error}", path.display())
            }
            LoadStep::FinitModule {
                path,
                flags,
                result,
                ..
            } => {
                write!(f, "finit_module({}, flags {flags}) => ", path.display())?;
                match result {
                    Ok(()) => f.write_str("ok"),
                    Err(e) => write!(f, "{}", io::Error::from_raw_os_error(*e)),
                }
            }
        }
    }
}

/// How a load succeeded.
///
/// ```no_run
/// use ipvsctl::kmod::{self, CheckConfig, LoadSuccess, ModuleName};
///
/// let out = kmod::finit_load(&ModuleName::new("ip_vs")?, &CheckConfig::default());
/// if out.result == Ok(LoadSuccess::AlreadyLoaded) {
///     println!("ip_vs was already there");
/// }
/// # Ok::<(), ipvsctl::kmod::KmodError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadSuccess {
    /// The loader loaded it (for `modprobe`: exited 0, which it also does
    /// when the module was already there).
    Loaded,
    /// `finit_module(2)` said `EEXIST`: it was already loaded.
    AlreadyLoaded,
    /// The check found it built in or loaded, so nothing was run.
    NothingToDo,
}

/// Why a load failed. [`LoadFailure::explanation`] says it in plain words,
/// with the fix.
///
/// ```
/// use ipvsctl::kmod::{Cause, Compression, LoadFailure};
///
/// let f = LoadFailure::FinitModule {
///     path: "/tmp/ip_vs_rr.ko".into(),
///     errno: 8,
///     compression: Compression::None,
///     cause: Cause::from_errno(8),
/// };
/// assert_eq!(f.to_string(), "finit_module(/tmp/ip_vs_rr.ko) failed: Exec format error (os error 8)");
/// assert!(f.explanation().contains("load the modules on the host"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadFailure {
    /// No `modprobe` program was found.
    #[error("modprobe is not installed (tried {})", join_paths(.tried))]
    ModprobeNotInstalled {
        /// Every program path tried.
        tried: Vec<PathBuf>,
    },
    /// `modprobe` exists but could not be started.
    #[error("cannot start {}: {error}", .program.display())]
    Spawn {
        /// The program.
        program: PathBuf,
        /// The error as the system put it.
        error: String,
        /// Its errno, if any.
        errno: Option<i32>,
    },
    /// `modprobe` ran and failed.
    #[error("{} failed ({}): {}", .run.command_line(), .run.status, .run.stderr_text().trim_end())]
    Modprobe {
        /// The run, with everything it printed.
        run: CommandRun,
        /// What its output says.
        cause: Cause,
    },
    /// `modprobe` did not end within its timeout ([`Modprobe::timeout`]):
    /// it was killed.
    #[error(
        "{} did not finish within {:?}: killed after {:?}{}",
        .run.command_line(),
        .run.timeout,
        .run.after,
        killed_output(.run)
    )]
    Killed {
        /// The run, with what it printed until the kill.
        run: KilledRun,
    },
    /// `finit_module(2)` failed on a file.
    #[error("finit_module({}) failed: {}", .path.display(), os_error(.errno))]
    FinitModule {
        /// The file.
        path: PathBuf,
        /// The errno.
        errno: i32,
        /// The file's compression.
        compression: Compression,
        /// The classified errno.
        cause: Cause,
    },
    /// A module file could not be opened.
    #[error("cannot open {}: {error}", .path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// The error as the system put it.
        error: String,
        /// The classified errno.
        cause: Cause,
    },
    /// A `modules.dep` entry of the module's chain names a file outside the
    /// modules directory the check read. Refused before any file of the
    /// chain was opened: nothing was loaded.
    #[error(
        "modules.dep entry {} (module {module}) is outside {}: {escape}; refused, nothing loaded",
        .entry.display(),
        .modules_dir.display()
    )]
    OutsideModulesDir {
        /// The module whose file the entry is (the one asked for, or a
        /// dependency).
        module: String,
        /// The entry as `modules.dep` writes it.
        entry: PathBuf,
        /// The modules directory the check read.
        modules_dir: PathBuf,
        /// How the entry leads out of it.
        escape: Escape,
    },
    /// The check found no file for the module, so `finit_module` has
    /// nothing to load.
    #[error("{module} is not loadable: {}", join_evidence(.evidence))]
    NotLoadable {
        /// The module.
        module: ModuleName,
        /// What the check saw.
        evidence: Vec<Evidence>,
    },
}

fn killed_output(run: &KilledRun) -> String {
    let text = run.output_text();
    if text.is_empty() {
        String::new()
    } else {
        format!("; it printed: {text}")
    }
}

fn os_error(errno: &i32) -> io::Error {
    io::Error::from_raw_os_error(*errno)
}

fn join_paths(p: &[PathBuf]) -> String {
    p.iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn join_evidence(e: &[Evidence]) -> String {
    e.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl LoadFailure {
    /// The recognised reason.
    pub fn cause(&self) -> Cause {
        match self {
            LoadFailure::ModprobeNotInstalled { .. } => Cause::ModprobeNotInstalled,
            LoadFailure::Spawn { errno, .. } => errno.map_or(Cause::Other, Cause::from_errno),
            LoadFailure::Modprobe { cause, .. }
            | LoadFailure::FinitModule { cause, .. }
            | LoadFailure::Open { cause, .. } => *cause,
            LoadFailure::NotLoadable { .. } => Cause::NotFound,
            LoadFailure::Killed { .. } => Cause::TimedOut,
            LoadFailure::OutsideModulesDir { .. } => Cause::OutsideModulesDir,
        }
    }

    /// What went wrong and how to fix it, in plain words.
    ///
    /// ```
    /// use ipvsctl::kmod::LoadFailure;
    ///
    /// let f = LoadFailure::ModprobeNotInstalled { tried: vec!["/sbin/modprobe".into()] };
    /// assert!(f.explanation().starts_with("modprobe not installed"));
    /// ```
    pub fn explanation(&self) -> String {
        let cause = self.cause();
        match self {
            LoadFailure::ModprobeNotInstalled { tried } => format!(
                "modprobe not installed (tried {}): {}",
                join_paths(tried),
                cause.explanation()
            ),
            LoadFailure::FinitModule {
                compression: c @ (Compression::Xz | Compression::Zstd | Compression::Gzip),
                cause: Cause::InvalidModule,
                ..
            } => format!(
                "the kernel refused the {c} file (Invalid argument). Either {} Or {}",
                Cause::CompressionUnsupported.explanation(),
                Cause::InvalidModule.explanation()
            ),
            _ => cause.explanation().to_owned(),
        }
    }
}

/// The result of loading one module (or file).
///
/// Its `Display` gives the result, the explanation of a failure, and every
/// step with the loader's output.
///
/// ```
/// use ipvsctl::kmod::{self, Cause, Modprobe, ModuleName};
///
/// let out = kmod::modprobe(&ModuleName::new("ip_vs")?, &Modprobe::at("/nonexistent/modprobe")?);
/// assert!(!out.is_ok());
/// assert_eq!(out.result.as_ref().unwrap_err().cause(), Cause::ModprobeNotInstalled);
/// assert!(out.to_string().contains("modprobe not installed"));
/// # Ok::<(), ipvsctl::kmod::KmodError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadOutcome {
    /// The module name, or the file name for [`finit_file`].
    pub target: String,
    /// Every program run and syscall made, in order.
    pub steps: Vec<LoadStep>,
    /// Success, or the failure with its explanation.
    pub result: Result<LoadSuccess, LoadFailure>,
}

impl LoadOutcome {
    /// Whether the module is now there.
    pub fn is_ok(&self) -> bool {
        self.result.is_ok()
    }
}

impl fmt::Display for LoadOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.result {
            Ok(LoadSuccess::Loaded) => write!(f, "{}: loaded", self.target)?,
            Ok(LoadSuccess::AlreadyLoaded) => write!(f, "{}: already loaded", self.target)?,
            Ok(LoadSuccess::NothingToDo) => {
                write!(f, "{}: nothing to do (built in or loaded)", self.target)?
            }
            Err(e) => write!(
                f,
                "{}: FAILED: {e}\n  why: {}",
                self.target,
                e.explanation()
            )?,
        }
        for s in &self.steps {
            write!(f, "\n  {s}")?;
        }
        Ok(())
    }
}

/// Loads a module with `finit_module(2)`, dependencies first, using the
/// `modules.dep` of `cfg`'s roots and release. No program is needed.
///
/// Only files inside that release's modules directory are loaded: before
/// any file is opened, every file of the chain is checked, and an entry
/// that is an absolute path elsewhere, climbs out with `..`, or resolves
/// through a symbolic link to a file elsewhere fails the whole load with
/// [`LoadFailure::OutsideModulesDir`]. Files are opened by their resolved
/// path, without following a symbolic link.
///
/// ```no_run
/// use ipvsctl::kmod::{self, CheckConfig, ModuleName};
///
/// let out = kmod::finit_load(&ModuleName::new("ip_vs_wrr")?, &CheckConfig::default());
/// println!("{out}");
/// # Ok::<(), ipvsctl::kmod::KmodError>(())
/// ```
pub fn finit_load(module: &ModuleName, cfg: &CheckConfig) -> LoadOutcome {
    let req = Requirements::empty().with_module(module.as_str());
    match req {
        Ok(req) => {
            let report = check_with(&req, cfg);
            match report.modules.first() {
                Some(status) => finit_verdict(module, &status.verdict, &report.modules_dir),
                None => not_loadable(module, Vec::new()),
            }
        }
        // A ModuleName is always a valid module name.
        Err(_) => not_loadable(module, Vec::new()),
    }
}

/// Loads every module of `report` that is not built in or loaded, with
/// `loader`, in the report's order. Stops nothing on failure: each module
/// gets its own outcome.
///
/// ```no_run
/// use ipvsctl::kmod::{self, Loader, Modprobe, Requirements};
///
/// let report = kmod::check(&Requirements::default());
/// for outcome in kmod::load_needed(&report, &Loader::Modprobe(Modprobe::default())) {
///     println!("{outcome}");
/// }
/// ```
pub fn load_needed(report: &Report, loader: &Loader) -> Vec<LoadOutcome> {
    report
        .modules
        .iter()
        .map(|m| {
            if m.verdict.is_present() {
                return LoadOutcome {
                    target: m.module.to_string(),
                    steps: Vec::new(),
                    result: Ok(LoadSuccess::NothingToDo),
                };
            }
            match loader {
                Loader::Modprobe(opts) => modprobe(&m.module, opts),
                Loader::FinitModule => finit_verdict(&m.module, &m.verdict, &report.modules_dir),
            }
        })
        .collect()
}

fn not_loadable(module: &ModuleName, evidence: Vec<Evidence>) -> LoadOutcome {
    LoadOutcome {
        target: module.to_string(),
        steps: Vec::new(),
        result: Err(LoadFailure::NotLoadable {
            module: module.clone(),
            evidence,
        }),
    }
}

fn finit_verdict(module: &ModuleName, verdict: &Verdict, modules_dir: &Path) -> LoadOutcome {
    match verdict {
        Verdict::BuiltIn { .. } | Verdict::Loaded { .. } => LoadOutcome {
            target: module.to_string(),
            steps: Vec::new(),
            result: Ok(LoadSuccess::NothingToDo),
        },
        Verdict::Missing { evidence } => not_loadable(module, evidence.clone()),
        Verdict::Loadable {
            path,
            compression,
            dependencies,
            ..
        } => {
            let mut files = dependencies.clone();
            files.push(ModuleFile {
                name: module.to_string(),
                path: path.clone(),
                compression: *compression,
            });
            match confine_all(modules_dir, files) {
                Ok(files) => finit_files(module.to_string(), &files, open_confined),
                Err((file_of, refusal)) => refused(module, modules_dir, file_of, refusal),
            }
        }
    }
}

/// `files` with their real paths, if every one is inside `modules_dir`;
/// else the first that is not (by module name) and why. Opens no file.
fn confine_all(
    modules_dir: &Path,
    files: Vec<ModuleFile>,
) -> Result<Vec<ModuleFile>, (String, Refusal)> {
    let dir = ModulesDir::new(modules_dir).map_err(|r| (String::new(), r))?;
    files
        .into_iter()
        .map(|file| match dir.confine(&file.path) {
            Ok(real) => Ok(ModuleFile { path: real, ..file }),
            Err(r) => Err((file.name, r)),
        })
        .collect()
}

/// The outcome of a load that [`confine_all`] stopped before it began.
fn refused(module: &ModuleName, modules_dir: &Path, file_of: String, r: Refusal) -> LoadOutcome {
    match r {
        Refusal::Outside { entry, escape } => LoadOutcome {
            target: module.to_string(),
            steps: Vec::new(),
            result: Err(LoadFailure::OutsideModulesDir {
                module: file_of,
                entry,
                modules_dir: modules_dir.to_path_buf(),
                escape,
            }),
        },
        Refusal::Unresolvable { path, error } => {
            open_failed(module.to_string(), Vec::new(), &path, &error)
        }
    }
}

/// Loads one module file with `finit_module(2)`, without dependencies:
/// the counterpart of `insmod PATH`.
///
/// ```no_run
/// let out = ipvsctl::kmod::finit_file("/tmp/ip_vs_sh.ko".as_ref());
/// println!("{out}");
/// ```
pub fn finit_file(path: &Path) -> LoadOutcome {
    let text = path.to_string_lossy();
    let (name, compression) = module_name_of_path(&text).unwrap_or_else(|| {
        let base = path.file_name().map(|n| n.to_string_lossy().into_owned());
        (base.unwrap_or_else(|| text.to_string()), Compression::None)
    });
    finit_files(
        name.clone(),
        &[ModuleFile {
            name,
            path: path.to_path_buf(),
            compression,
        }],
        |path| File::open(path),
    )
}

/// Opens a file whose path has been resolved, refusing a symbolic link
/// put in its place since.
fn open_confined(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as c_int)
        .open(path)
}

fn open_failed(
    target: String,
    mut steps: Vec<LoadStep>,
    path: &Path,
    e: &io::Error,
) -> LoadOutcome {
    let errno = e.raw_os_error();
    steps.push(LoadStep::OpenFailed {
        path: path.to_path_buf(),
        error: e.to_string(),
        errno,
    });
    LoadOutcome {
        target,
        steps,
        result: Err(LoadFailure::Open {
            path: path.to_path_buf(),
            error: e.to_string(),
            cause: errno.map_or(Cause::Other, Cause::from_errno),
        }),
    }
}

fn finit_files(
    target: String,
    files: &[ModuleFile],
    open: fn(&Path) -> io::Result<File>,
) -> LoadOutcome {
    let mut steps = Vec::new();
    let mut last = Ok(LoadSuccess::Loaded);
    for file in files {
        let file_handle = match open(&file.path) {
            Ok(f) => f,
            Err(e) => return open_failed(target, steps, &file.path, &e),
        };
        let flags = if file.compression == Compression::None {
            0
        } else {
            MODULE_INIT_COMPRESSED_FILE
        };
        let result = rustix::system::finit_module(&file_handle, c"", flags as c_int)
            .map_err(|e| e.raw_os_error());
        steps.push(LoadStep::FinitModule {
            name: file.name.clone(),
            path: file.path.clone(),
            flags,
            result,
        });
        last = match result {
            Ok(()) => Ok(LoadSuccess::Loaded),
            Err(e) if e == Errno::EXIST.raw_os_error() => Ok(LoadSuccess::AlreadyLoaded),
            Err(errno) => {
                let cause = match Cause::from_errno(errno) {
                    _ if file.compression != Compression::None
                        && errno == Errno::OPNOTSUPP.raw_os_error() =>
                    {
                        Cause::CompressionUnsupported
                    }
                    Cause::InvalidModule
                        if file.compression != Compression::None && !kernel_decompresses() =>
                    {
                        Cause::CompressionUnsupported
                    }
                    c => c,
                };
                return LoadOutcome {
                    target,
                    steps,
                    result: Err(LoadFailure::FinitModule {
                        path: file.path.clone(),
                        errno,
                        compression: file.compression,
                        cause,
                    }),
                };
            }
        };
    }
    LoadOutcome {
        target,
        steps,
        result: last,
    }
}

/// Whether the running kernel is new enough (5.17+) to know
/// `MODULE_INIT_COMPRESSED_FILE` at all.
fn kernel_decompresses() -> bool {
    let uname = rustix::system::uname();
    let release = uname.release().to_string_lossy();
    release_at_least(&release, (5, 17))
}

/// Compares the `major.minor` at the start of a release string.
pub(crate) fn release_at_least(release: &str, want: (u32, u32)) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= want,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::release_at_least;

    #[test]
    fn release_comparison() {
        assert!(release_at_least("5.17.0", (5, 17)));
        assert!(release_at_least("6.1.0-18-amd64", (5, 17)));
        assert!(!release_at_least("5.10.0-28-amd64", (5, 17)));
        assert!(!release_at_least("4.19", (5, 17)));
        assert!(!release_at_least("", (5, 17)));
        assert!(!release_at_least("garbage", (5, 17)));
        assert!(!release_at_least("99999999999999.1", (5, 17)));
    }
}
