//! The `modprobe` runner: which program, with what environment, and how
//! long it may take.

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use rustix::io::Errno;

use super::child::{self, Ended};
use super::error::KmodError;
use super::explain::Cause;
use super::load::{LoadFailure, LoadOutcome, LoadStep, LoadSuccess};
use super::name::ModuleName;
use crate::Timeout;

/// How long [`modprobe`] waits for the program unless [`Modprobe::with_timeout`]
/// says otherwise: 30 seconds. Loading a module takes milliseconds to a few
/// seconds (signature checks, firmware); one that takes longer is waiting
/// for something that may never happen (`docs/kernel-notes.md`: a scheduler
/// module whose initialisation waits for network-namespace cleanup).
pub const DEFAULT_MODPROBE_TIMEOUT: Timeout = Timeout::from_secs(30);

/// Where `modprobe` is looked for when no program is given, in this order:
/// the kernel's own default (`CONFIG_MODPROBE_PATH`) and the place of older
/// Debian, Alpine and busybox images; merged-/usr Debian, Ubuntu, Fedora and
/// RHEL; Arch; an image with only `/bin`; NixOS. Never through `PATH`.
pub const MODPROBE_CANDIDATES: [&str; 5] = [
    "/sbin/modprobe",
    "/usr/sbin/modprobe",
    "/usr/bin/modprobe",
    "/bin/modprobe",
    "/run/current-system/sw/bin/modprobe",
];

/// The whole environment `modprobe` runs with: what the kernel gives the
/// `modprobe` it starts itself to load a module, and the C locale, whose
/// messages [`Cause::from_loader_output`] reads. Nothing is inherited, so
/// no `MODPROBE_OPTIONS`, `LD_PRELOAD` or `PATH` of the caller's reaches it.
pub const MODPROBE_ENVIRONMENT: [(&str, &str); 4] = [
    ("HOME", "/"),
    ("TERM", "linux"),
    ("PATH", "/sbin:/usr/sbin:/bin:/usr/bin"),
    ("LC_ALL", "C"),
];

/// Which `modprobe` program to run, and how long it may take.
///
/// The program is the first of [`MODPROBE_CANDIDATES`] that exists (the
/// default), or one the caller names by absolute path. It may run for
/// [`DEFAULT_MODPROBE_TIMEOUT`], or what [`Modprobe::with_timeout`] sets;
/// then it is killed ([`modprobe`] says how).
///
/// ```
/// use std::time::Duration;
/// use ipvsctl::Timeout;
/// use ipvsctl::kmod::{self, KmodError, Modprobe};
///
/// let custom = Modprobe::at("/opt/kmod/bin/modprobe")?;
/// assert_eq!(custom.program(), Some("/opt/kmod/bin/modprobe".as_ref()));
/// assert_eq!(Modprobe::default().program(), None);
/// // A bare name would be looked up through PATH: refused.
/// assert!(matches!(Modprobe::at("modprobe"), Err(KmodError::InvalidModprobePath { .. })));
///
/// let two_minutes = Timeout::new(Duration::from_secs(120)).expect("within 1 ms to 1 h");
/// let patient = Modprobe::default().with_timeout(two_minutes);
/// assert_eq!(patient.timeout(), two_minutes);
/// assert_eq!(Modprobe::default().timeout(), kmod::DEFAULT_MODPROBE_TIMEOUT);
/// # Ok::<(), KmodError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Modprobe {
    program: Option<PathBuf>,
    timeout: Timeout,
}

impl Default for Modprobe {
    fn default() -> Self {
        Modprobe {
            program: None,
            timeout: DEFAULT_MODPROBE_TIMEOUT,
        }
    }
}

impl Modprobe {
    /// Runs the program at `path`, which must be absolute.
    pub fn at(path: impl Into<PathBuf>) -> Result<Self, KmodError> {
        let path = path.into();
        if !path.is_absolute() {
            return Err(KmodError::InvalidModprobePath {
                path,
                reason: "not an absolute path (it would be looked up through PATH or the \
                         working directory)",
            });
        }
        Ok(Modprobe {
            program: Some(path),
            ..Modprobe::default()
        })
    }

    /// Lets the program run for `timeout` instead of
    /// [`DEFAULT_MODPROBE_TIMEOUT`].
    pub fn with_timeout(self, timeout: Timeout) -> Self {
        Modprobe { timeout, ..self }
    }

    /// How long the program may run.
    pub fn timeout(&self) -> Timeout {
        self.timeout
    }

    /// The program the caller named; `None` for the usual places.
    pub fn program(&self) -> Option<&Path> {
        self.program.as_deref()
    }
}

/// A program that ran to its end, with everything it said.
///
/// ```no_run
/// use ipvsctl::kmod::{self, LoadStep, Modprobe, ModuleName};
///
/// let out = kmod::modprobe(&ModuleName::new("ip_vs_rr")?, &Modprobe::default());
/// for step in &out.steps {
///     if let LoadStep::Ran(run) = step {
///         println!("{}: {:?}\n{}", run.command_line(), run.status.code(), run.stderr_text());
///     }
/// }
/// # Ok::<(), ipvsctl::kmod::KmodError>(())
/// ```
///
/// `#[non_exhaustive]`: more of what is known about a run may be kept.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommandRun {
    /// The program as started.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// How it ended.
    pub status: ExitStatus,
    /// How long it ran.
    pub elapsed: Duration,
    /// Standard output, in full.
    pub stdout: Vec<u8>,
    /// Standard error, in full.
    pub stderr: Vec<u8>,
}

impl CommandRun {
    /// Standard output as text (invalid UTF-8 replaced).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Standard error as text (invalid UTF-8 replaced).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// The command line, for display.
    pub fn command_line(&self) -> String {
        command_line(&self.program, &self.args)
    }
}

impl fmt::Display for CommandRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "$ {} => {}", self.command_line(), self.status)?;
        write_output(f, &self.stdout, &self.stderr)
    }
}

/// A program that did not end within its timeout and was killed, with what
/// it printed until then.
///
/// ```
/// use std::time::Duration;
/// use ipvsctl::Timeout;
/// use ipvsctl::kmod::{self, Cause, LoadFailure, Modprobe, ModuleName};
///
/// // `sleep` stands in for a modprobe that never returns.
/// let timeout = Timeout::new(Duration::from_millis(200)).expect("within 1 ms to 1 h");
/// let hung = Modprobe::at("/bin/sleep")?.with_timeout(timeout);
/// let out = kmod::modprobe(&ModuleName::new("3600")?, &hung);
/// let Err(LoadFailure::Killed { run }) = &out.result else { panic!("{out}") };
/// assert!(run.after >= Duration::from_millis(200));
/// assert_eq!(out.result.as_ref().unwrap_err().cause(), Cause::TimedOut);
/// # Ok::<(), ipvsctl::kmod::KmodError>(())
/// ```
///
/// `#[non_exhaustive]`: more of what is known about a run may be kept.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KilledRun {
    /// The program as started.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// How long it was allowed.
    pub timeout: Duration,
    /// From its start to the kill (the timeout, and the little more it took
    /// to notice).
    pub after: Duration,
    /// How it ended once killed (by `SIGKILL`). `None`: it was still alive
    /// half a second after the kill, in an uninterruptible wait in the
    /// kernel, which no signal ends; a thread of this process reaps it if
    /// it ever leaves that wait.
    pub status: Option<ExitStatus>,
    /// Standard output, up to the kill.
    pub stdout: Vec<u8>,
    /// Standard error, up to the kill.
    pub stderr: Vec<u8>,
}

impl KilledRun {
    /// The command line, for display.
    pub fn command_line(&self) -> String {
        command_line(&self.program, &self.args)
    }

    /// Standard error and standard output so far, as one text.
    pub fn output_text(&self) -> String {
        let err = String::from_utf8_lossy(&self.stderr);
        let out = String::from_utf8_lossy(&self.stdout);
        [err.trim_end(), out.trim_end()]
            .into_iter()
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl fmt::Display for KilledRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "$ {} => killed at its deadline after {:?} (timeout {:?})",
            self.command_line(),
            self.after,
            self.timeout
        )?;
        match self.status {
            Some(status) => write!(f, ", {status}")?,
            None => f.write_str(", not dead yet (stuck in the kernel)")?,
        }
        write_output(f, &self.stdout, &self.stderr)
    }
}

fn command_line(program: &Path, args: &[OsString]) -> String {
    let mut s = program.display().to_string();
    for a in args {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

fn write_output(f: &mut fmt::Formatter<'_>, stdout: &[u8], stderr: &[u8]) -> fmt::Result {
    for (label, bytes) in [("stdout", stdout), ("stderr", stderr)] {
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim_end();
        if !text.is_empty() {
            write!(f, "\n    {label}: {}", text.replace('\n', "\n            "))?;
        }
    }
    Ok(())
}

/// Runs `cmd` within `timeout`, trying again for up to about 300 ms while
/// its program file is busy (`ETXTBSY`): open for writing somewhere, as when
/// a package upgrade replaces it, or for the moment another thread of this
/// process forks a child that inherits a descriptor of a freshly written
/// file.
fn run_unless_busy(cmd: &mut Command, timeout: Duration) -> io::Result<Ended> {
    let mut wait = Duration::from_millis(5);
    for _ in 0..6 {
        match child::run_within(cmd, timeout) {
            Err(e) if e.raw_os_error() == Some(Errno::TXTBSY.raw_os_error()) => {
                std::thread::sleep(wait);
                wait *= 2;
            }
            other => return other,
        }
    }
    child::run_within(cmd, timeout)
}

/// Runs `modprobe -- <module>`, keeping its exit status, standard output
/// and standard error in full.
///
/// The program is the one [`Modprobe`] names by absolute path, or the first
/// of [`MODPROBE_CANDIDATES`] that exists; `PATH` is never searched. It runs
/// with [`MODPROBE_ENVIRONMENT`] and nothing else of this process's
/// environment, in `/`, with standard input from `/dev/null`. (`modprobe`
/// runs as root and obeys `MODPROBE_OPTIONS`, whose `-C DIR` could name
/// configuration with `install` commands, and the dynamic loader obeys
/// `LD_PRELOAD`: neither may come from whoever set this process's
/// environment.)
///
/// It runs in a process group of its own, for at most
/// [`Modprobe::timeout`] on the monotonic clock. Then the group (`modprobe`
/// and whatever it started) is killed with `SIGKILL` and reaped, and the
/// result is [`LoadFailure::Killed`] with what it printed until then. A
/// `modprobe` inside the kernel's module loader may be in an uninterruptible
/// wait that no signal ends: the call still returns about half a second
/// after the deadline ([`KilledRun::status`] is then `None`).
///
/// ```no_run
/// use ipvsctl::kmod::{self, Modprobe, ModuleName};
///
/// let out = kmod::modprobe(&ModuleName::new("ip_vs")?, &Modprobe::default());
/// if let Err(failure) = &out.result {
///     eprintln!("{failure}\n{}", failure.explanation());
/// }
/// # Ok::<(), ipvsctl::kmod::KmodError>(())
/// ```
pub fn modprobe(module: &ModuleName, opts: &Modprobe) -> LoadOutcome {
    let candidates: Vec<PathBuf> = match &opts.program {
        Some(p) => vec![p.clone()],
        None => MODPROBE_CANDIDATES.iter().map(PathBuf::from).collect(),
    };
    let args: Vec<OsString> = vec!["--".into(), module.as_str().into()];
    let mut steps = Vec::new();
    for program in &candidates {
        let ended = run_unless_busy(
            Command::new(program)
                .args(&args)
                .env_clear()
                .envs(MODPROBE_ENVIRONMENT)
                .current_dir("/")
                .stdin(Stdio::null()),
            opts.timeout.get(),
        );
        match ended {
            Ok(ended) => {
                return LoadOutcome {
                    target: module.to_string(),
                    result: judge(program, &args, ended, opts.timeout.get(), &mut steps),
                    steps,
                };
            }
            Err(e) => {
                steps.push(LoadStep::SpawnFailed {
                    program: program.clone(),
                    error: e.to_string(),
                    errno: e.raw_os_error(),
                });
                if e.kind() != io::ErrorKind::NotFound {
                    return LoadOutcome {
                        target: module.to_string(),
                        steps,
                        result: Err(LoadFailure::Spawn {
                            program: program.clone(),
                            error: e.to_string(),
                            errno: e.raw_os_error(),
                        }),
                    };
                }
            }
        }
    }
    LoadOutcome {
        target: module.to_string(),
        steps,
        result: Err(LoadFailure::ModprobeNotInstalled { tried: candidates }),
    }
}

/// The step and the result of one run of `program`.
fn judge(
    program: &Path,
    args: &[OsString],
    ended: Ended,
    timeout: Duration,
    steps: &mut Vec<LoadStep>,
) -> Result<LoadSuccess, LoadFailure> {
    let status = match ended.status {
        Some(status) if !ended.killed => status,
        status => {
            let run = KilledRun {
                program: program.to_path_buf(),
                args: args.to_vec(),
                timeout,
                after: ended.elapsed,
                status,
                stdout: ended.stdout,
                stderr: ended.stderr,
            };
            steps.push(LoadStep::Killed(run.clone()));
            return Err(LoadFailure::Killed { run });
        }
    };
    let run = CommandRun {
        program: program.to_path_buf(),
        args: args.to_vec(),
        status,
        elapsed: ended.elapsed,
        stdout: ended.stdout,
        stderr: ended.stderr,
    };
    steps.push(LoadStep::Ran(run.clone()));
    if run.status.success() {
        Ok(LoadSuccess::Loaded)
    } else {
        let text = format!("{}\n{}", run.stderr_text(), run.stdout_text());
        Err(LoadFailure::Modprobe {
            cause: Cause::from_loader_output(&text),
            run,
        })
    }
}
