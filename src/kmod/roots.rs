//! Where the check looks, and which kernel release it looks for.

use std::fmt;
use std::path::{Path, PathBuf};

/// The file-system roots the check reads. [`Roots::default`] is the real
/// system: `/proc`, `/sys` and `/lib/modules`.
///
/// Point them elsewhere to check a prepared tree, or a container's view of
/// the host:
///
/// ```
/// use ipvsctl::kmod::Roots;
///
/// let roots = Roots::under("/tmp/fake-host");
/// assert_eq!(roots.lib_modules, std::path::Path::new("/tmp/fake-host/lib/modules"));
/// assert_eq!(Roots::default().proc, std::path::Path::new("/proc"));
/// ```
///
/// `#[non_exhaustive]`: build with [`Roots::under`] or [`Roots::default`]
/// and the `with_*` methods.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Roots {
    /// procfs: `modules` and `sys/kernel/osrelease` are read from here.
    pub proc: PathBuf,
    /// sysfs: `module/<name>` is looked at here.
    pub sys: PathBuf,
    /// The parent of the per-release module directories.
    pub lib_modules: PathBuf,
}

impl Roots {
    /// `prefix/proc`, `prefix/sys` and `prefix/lib/modules`.
    pub fn under(prefix: impl AsRef<Path>) -> Self {
        let p = prefix.as_ref();
        Self {
            proc: p.join("proc"),
            sys: p.join("sys"),
            lib_modules: p.join("lib").join("modules"),
        }
    }

    /// Sets the procfs root.
    pub fn with_proc(mut self, proc: impl Into<PathBuf>) -> Self {
        self.proc = proc.into();
        self
    }

    /// Sets the sysfs root.
    pub fn with_sys(mut self, sys: impl Into<PathBuf>) -> Self {
        self.sys = sys.into();
        self
    }

    /// Sets the parent of the per-release module directories.
    pub fn with_lib_modules(mut self, lib_modules: impl Into<PathBuf>) -> Self {
        self.lib_modules = lib_modules.into();
        self
    }

    /// `/lib/modules/<release>`.
    pub fn modules_dir(&self, release: &str) -> PathBuf {
        self.lib_modules.join(release)
    }
}

impl Default for Roots {
    fn default() -> Self {
        Self {
            proc: PathBuf::from("/proc"),
            sys: PathBuf::from("/sys"),
            lib_modules: PathBuf::from("/lib/modules"),
        }
    }
}

/// Settings of a check: where to look and, optionally, which release to
/// assume instead of the running one.
///
/// ```
/// use ipvsctl::kmod::{CheckConfig, Roots};
///
/// let cfg = CheckConfig::default()
///     .with_roots(Roots::under("/tmp/fake-host"))
///     .with_release("6.1.0-18-amd64");
/// assert_eq!(cfg.kernel_release().release, "6.1.0-18-amd64");
/// ```
///
/// `#[non_exhaustive]`: build with [`CheckConfig::default`] and the
/// `with_*` methods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckConfig {
    /// Where to look.
    pub roots: Roots,
    /// The kernel release to check for. `None` (the default) reads
    /// `<proc>/sys/kernel/osrelease`, falling back to `uname(2)`.
    pub release: Option<String>,
}

impl CheckConfig {
    /// Sets where to look (default [`Roots::default`]).
    pub fn with_roots(mut self, roots: Roots) -> Self {
        self.roots = roots;
        self
    }

    /// Checks for `release` instead of the running kernel's release.
    pub fn with_release(mut self, release: impl Into<String>) -> Self {
        self.release = Some(release.into());
        self
    }

    /// The release the check is for, and where it came from.
    pub fn kernel_release(&self) -> KernelRelease {
        if let Some(r) = &self.release {
            return KernelRelease {
                release: r.clone(),
                source: ReleaseSource::Caller,
            };
        }
        let path = self.roots.proc.join("sys/kernel/osrelease");
        let file_problem = match std::fs::read_to_string(&path) {
            Ok(text) => {
                let r = text.trim();
                if valid_release(r) {
                    return KernelRelease {
                        release: r.to_owned(),
                        source: ReleaseSource::File(path),
                    };
                }
                format!("{} holds no usable release ({r:?})", path.display())
            }
            Err(e) => format!("cannot read {}: {e}", path.display()),
        };
        let uname = rustix::system::uname();
        let r = uname.release().to_string_lossy().into_owned();
        KernelRelease {
            release: r,
            source: ReleaseSource::Uname { file_problem },
        }
    }
}

/// A release is used as one path component: refuse anything else.
pub(crate) fn valid_release(r: &str) -> bool {
    !r.is_empty() && r != "." && r != ".." && !r.contains('/') && !r.contains('\0')
}

/// The kernel release a check is for.
///
/// ```
/// use ipvsctl::kmod::{CheckConfig, ReleaseSource};
///
/// let cfg = CheckConfig::default().with_release("6.1.0-18-amd64");
/// let r = cfg.kernel_release();
/// assert_eq!((r.release.as_str(), r.source), ("6.1.0-18-amd64", ReleaseSource::Caller));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelRelease {
    /// For example `6.1.0-18-amd64`.
    pub release: String,
    /// Where it came from.
    pub source: ReleaseSource,
}

/// Where the kernel release came from.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseSource {
    /// Read from this file (normally `/proc/sys/kernel/osrelease`).
    File(PathBuf),
    /// From `uname(2)`, because the file could not be used.
    Uname {
        /// Why the file was not used.
        file_problem: String,
    },
    /// Given by the caller in [`CheckConfig::release`].
    Caller,
}

impl fmt::Display for ReleaseSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReleaseSource::File(p) => write!(f, "from {}", p.display()),
            ReleaseSource::Uname { file_problem } => {
                write!(f, "from uname(2), because {file_problem}")
            }
            ReleaseSource::Caller => f.write_str("given by the caller"),
        }
    }
}
