//! Keeping the `finit_module` loader inside the modules directory the check
//! read: `modules.dep` is data, and a line naming a file elsewhere is
//! refused before any file is opened.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

/// How a `modules.dep` entry leads out of its modules directory.
///
/// ```
/// use ipvsctl::kmod::Escape;
///
/// assert_eq!(Escape::ParentDir.to_string(), "its \"..\" leads out of it");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Escape {
    /// An absolute path that is not under the modules directory.
    AbsolutePath,
    /// A relative path whose `..` components climb above the modules
    /// directory.
    ParentDir,
    /// A path inside the modules directory that resolves, through symbolic
    /// links, to this file outside it.
    ResolvesTo(PathBuf),
}

impl fmt::Display for Escape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Escape::AbsolutePath => f.write_str("an absolute path outside it"),
            Escape::ParentDir => f.write_str("its \"..\" leads out of it"),
            Escape::ResolvesTo(p) => write!(f, "a symbolic link to {}", p.display()),
        }
    }
}

/// Why a module file was not let through.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The entry, as `modules.dep` names it, leads outside.
    Outside {
        /// Relative to the modules directory if it is written so, else the
        /// absolute path as written.
        entry: PathBuf,
        escape: Escape,
    },
    /// A path could not be resolved (usually: the file is not there).
    Unresolvable { path: PathBuf, error: io::Error },
}

/// The modules directory a check read, and where it really is.
pub(crate) struct ModulesDir<'a> {
    as_named: &'a Path,
    real: PathBuf,
}

impl<'a> ModulesDir<'a> {
    /// Resolves `dir` (on a merged-/usr system `/lib/modules/<release>` is
    /// really `/usr/lib/modules/<release>`).
    pub(crate) fn new(dir: &'a Path) -> Result<Self, Refusal> {
        match fs::canonicalize(dir) {
            Ok(real) => Ok(ModulesDir {
                as_named: dir,
                real,
            }),
            Err(error) => Err(Refusal::Unresolvable {
                path: dir.to_path_buf(),
                error,
            }),
        }
    }

    /// The real path of `file` (a `modules.dep` entry resolved against this
    /// directory), if it lies inside the directory.
    ///
    /// The entry is judged by its text first, so a path that is plainly
    /// elsewhere is never touched; then its symbolic links are resolved
    /// (which reads links and directories, and opens no file). The caller
    /// opens the returned path, which has no symbolic link left in it.
    pub(crate) fn confine(&self, file: &Path) -> Result<PathBuf, Refusal> {
        let rel = file
            .strip_prefix(self.as_named)
            .or_else(|_| file.strip_prefix(&self.real))
            .map_err(|_| Refusal::Outside {
                entry: file.to_path_buf(),
                escape: Escape::AbsolutePath,
            })?;
        if climbs_out(rel) {
            return Err(Refusal::Outside {
                entry: rel.to_path_buf(),
                escape: Escape::ParentDir,
            });
        }
        let real = fs::canonicalize(file).map_err(|error| Refusal::Unresolvable {
            path: file.to_path_buf(),
            error,
        })?;
        if real.starts_with(&self.real) && real != self.real {
            Ok(real)
        } else {
            Err(Refusal::Outside {
                entry: rel.to_path_buf(),
                escape: Escape::ResolvesTo(real),
            })
        }
    }
}

/// Whether the `..` components of a relative path climb above its start,
/// reading the path as text.
fn climbs_out(rel: &Path) -> bool {
    let mut depth = 0usize;
    for c in rel.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return true,
            },
            Component::RootDir | Component::Prefix(_) => return true,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::climbs_out;
    use std::path::Path;

    #[test]
    fn dotdot_is_judged_by_depth() {
        for (rel, out) in [
            ("kernel/ip_vs.ko", false),
            ("kernel/../ip_vs.ko", false),
            ("./kernel/sub/../../ip_vs.ko", false),
            ("../ip_vs.ko", true),
            ("../../evil.ko", true),
            ("kernel/../../evil.ko", true),
            ("kernel/./../.././evil.ko", true),
            ("", false),
        ] {
            assert_eq!(climbs_out(Path::new(rel)), out, "{rel}");
        }
    }
}
