//! What the check saw, kept with every verdict.

use std::fmt;
use std::path::PathBuf;

/// One observation behind a verdict: which file or path said so, and how.
///
/// ```
/// use ipvsctl::kmod::Evidence;
///
/// let e = Evidence::Line {
///     file: "/proc/modules".into(),
///     number: 3,
///     text: "ip_vs 180224 0 - Live 0x0000000000000000".into(),
/// };
/// assert_eq!(
///     e.to_string(),
///     "/proc/modules line 3: \"ip_vs 180224 0 - Live 0x0000000000000000\""
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Evidence {
    /// A file lists the module on this line.
    Line {
        /// The file.
        file: PathBuf,
        /// The line number, from 1.
        number: usize,
        /// The line as read.
        text: String,
    },
    /// A path exists; `content` is its first line when it is a small file.
    Exists {
        /// The path.
        path: PathBuf,
        /// The first line of the file, if it is a readable file.
        content: Option<String>,
        /// What its existence means.
        meaning: &'static str,
    },
    /// A file was read and does not list the module.
    NotListed {
        /// The file.
        file: PathBuf,
    },
    /// A path that would show the module does not exist.
    Absent {
        /// The path.
        path: PathBuf,
    },
    /// A file could not be read.
    Unreadable {
        /// The file.
        file: PathBuf,
        /// The error, as the system put it.
        error: String,
    },
    /// There is no modules directory for the running kernel release.
    NoModulesDir {
        /// The running kernel's release.
        release: String,
        /// The directory that should exist.
        expected: PathBuf,
        /// Releases that do have a directory beside it, sorted.
        found: Vec<String>,
        /// Why the parent could not be listed, if it could not.
        listing_error: Option<String>,
    },
}

impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Evidence::Line { file, number, text } => {
                write!(f, "{} line {number}: {text:?}", file.display())
            }
            Evidence::Exists {
                path,
                content,
                meaning,
            } => {
                write!(f, "{} exists", path.display())?;
                if let Some(c) = content {
                    write!(f, " ({c:?})")?;
                }
                write!(f, ", {meaning}")
            }
            Evidence::NotListed { file } => write!(f, "not listed in {}", file.display()),
            Evidence::Absent { path } => write!(f, "{} does not exist", path.display()),
            Evidence::Unreadable { file, error } => {
                write!(f, "cannot read {}: {error}", file.display())
            }
            Evidence::NoModulesDir {
                release,
                expected,
                found,
                listing_error,
            } => {
                write!(
                    f,
                    "no modules directory for running kernel {release} ({} does not exist); ",
                    expected.display()
                )?;
                if let Some(err) = listing_error {
                    let parent = expected.parent().unwrap_or(expected);
                    write!(f, "{}: {err}", parent.display())
                } else if found.is_empty() {
                    f.write_str("found no directory for any other release")
                } else {
                    write!(f, "found directories for {}", found.join(", "))?;
                    f.write_str(
                        " (modules from another kernel cannot be loaded: load them on the host, \
                         or mount the host's own /lib/modules)",
                    )
                }
            }
        }
    }
}
