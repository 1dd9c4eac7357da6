//! The check: what each required module's state is, and why we think so.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::evidence::Evidence;
use super::modules_dep::{Compression, ModuleFile, ModulesDep, find_builtin, find_proc_module};
use super::name::{ModuleName, Purpose, Requirements};
use super::report::Report;
use super::roots::{CheckConfig, valid_release};

/// The state of one module, with what showed it.
///
/// ```
/// use ipvsctl::kmod::{self, CheckConfig, Requirements, Roots, Verdict};
///
/// let cfg = CheckConfig::default().with_roots(Roots::under("/nonexistent")).with_release("6.1.0");
/// let report = kmod::check_with(&Requirements::ipvs_core(), &cfg);
/// let status = &report.modules[0];
/// assert!(matches!(status.verdict, Verdict::Missing { .. }));
/// assert!(!status.verdict.is_present());
/// // Every verdict says what showed it.
/// for e in status.verdict.evidence() {
///     println!("{}: {e}", status.module);
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Compiled into the kernel: nothing to load.
    BuiltIn {
        /// `modules.builtin` line, or a `/sys/module/<name>` without
        /// `initstate`.
        evidence: Evidence,
    },
    /// Loaded now.
    Loaded {
        /// `/proc/modules` line, or `/sys/module/<name>/initstate`.
        evidence: Evidence,
    },
    /// Not loaded, but its file is listed for the running kernel.
    Loadable {
        /// The module file.
        path: PathBuf,
        /// Its compression, judged from the name.
        compression: Compression,
        /// Files to load before it, in load order.
        dependencies: Vec<ModuleFile>,
        /// The `modules.dep` line.
        evidence: Evidence,
    },
    /// Neither built in, loaded nor loadable.
    Missing {
        /// Every place that was looked at.
        evidence: Vec<Evidence>,
    },
}

impl Verdict {
    /// Whether the module is usable without loading anything.
    pub fn is_present(&self) -> bool {
        matches!(self, Verdict::BuiltIn { .. } | Verdict::Loaded { .. })
    }

    /// A one-word label: `built-in`, `loaded`, `loadable` or `missing`.
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::BuiltIn { .. } => "built-in",
            Verdict::Loaded { .. } => "loaded",
            Verdict::Loadable { .. } => "loadable",
            Verdict::Missing { .. } => "missing",
        }
    }

    /// The evidence, always at least one item.
    pub fn evidence(&self) -> Vec<&Evidence> {
        match self {
            Verdict::BuiltIn { evidence }
            | Verdict::Loaded { evidence }
            | Verdict::Loadable { evidence, .. } => vec![evidence],
            Verdict::Missing { evidence } => evidence.iter().collect(),
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::BuiltIn { evidence } | Verdict::Loaded { evidence } => {
                write!(f, "{}: {evidence}", self.label())
            }
            Verdict::Loadable {
                path,
                compression,
                dependencies,
                evidence,
            } => {
                write!(f, "loadable from {} ({compression}", path.display())?;
                if dependencies.is_empty() {
                    f.write_str(", no dependencies")?;
                } else {
                    let names: Vec<&str> = dependencies.iter().map(|d| d.name.as_str()).collect();
                    write!(f, ", after {}", names.join(", "))?;
                }
                write!(f, "): {evidence}")
            }
            Verdict::Missing { evidence } => {
                f.write_str("missing: ")?;
                for (i, e) in evidence.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{e}")?;
                }
                Ok(())
            }
        }
    }
}

/// One required module and its verdict.
///
/// Its `Display` is one report line: name, purpose, verdict, evidence.
///
/// ```
/// use ipvsctl::kmod::{self, CheckConfig, Requirements, Roots};
///
/// let cfg = CheckConfig::default().with_roots(Roots::under("/nonexistent")).with_release("6.1.0");
/// let report = kmod::check_with(&Requirements::ipvs_core(), &cfg);
/// assert!(report.modules[0].to_string().starts_with("ip_vs (IPVS core): missing: "));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModuleStatus {
    /// The module.
    pub module: ModuleName,
    /// Why it was asked for.
    pub purpose: Purpose,
    /// What state it is in, and why we think so.
    pub verdict: Verdict,
}

impl fmt::Display for ModuleStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.module, self.purpose, self.verdict)
    }
}

/// Checks `req` against the running system (`/proc`, `/sys`,
/// `/lib/modules`). Reads files only: loads nothing, probes nothing.
///
/// ```no_run
/// use ipvsctl::kmod::{self, Requirements};
///
/// let report = kmod::check(&Requirements::default());
/// println!("{report}");
/// ```
pub fn check(req: &Requirements) -> Report {
    check_with(req, &CheckConfig::default())
}

/// Checks `req` with explicit roots and, optionally, release.
///
/// Never fails: whatever cannot be read is reported as evidence.
///
/// ```
/// use ipvsctl::kmod::{self, CheckConfig, Requirements, Roots};
///
/// let cfg = CheckConfig::default()
///     .with_roots(Roots::under("/nonexistent"))
///     .with_release("6.1.0-18-amd64");
/// let report = kmod::check_with(&Requirements::ipvs_core(), &cfg);
/// assert_eq!(report.modules[0].verdict.label(), "missing");
/// ```
pub fn check_with(req: &Requirements, cfg: &CheckConfig) -> Report {
    let release = cfg.kernel_release();
    let roots = &cfg.roots;
    let modules_dir = roots.modules_dir(&release.release);
    let dir_problem = modules_dir_problem(&release.release, &modules_dir, &roots.lib_modules);

    let builtin_path = modules_dir.join("modules.builtin");
    let dep_path = modules_dir.join("modules.dep");
    let proc_path = roots.proc.join("modules");
    let (builtin, dep_text) = if dir_problem.is_none() {
        (read(&builtin_path), read(&dep_path))
    } else {
        (Err(String::new()), Err(String::new()))
    };
    let proc_modules = read(&proc_path);
    let dep = dep_text.as_deref().map(ModulesDep::parse).ok();

    let modules = req
        .iter()
        .map(|r| {
            let name = r.module.as_str();
            let mut missing = Vec::new();

            // 1. Built in, by modules.builtin.
            match &builtin {
                Ok(text) => match find_builtin(text, name) {
                    Some(l) => {
                        return status(
                            r,
                            Verdict::BuiltIn {
                                evidence: line(&builtin_path, l.number, l.text),
                            },
                        );
                    }
                    None => missing.push(Evidence::NotListed {
                        file: builtin_path.clone(),
                    }),
                },
                Err(e) if dir_problem.is_none() => missing.push(Evidence::Unreadable {
                    file: builtin_path.clone(),
                    error: e.clone(),
                }),
                Err(_) => {}
            }

            // 2. Loaded, by /proc/modules.
            match &proc_modules {
                Ok(text) => match find_proc_module(text, name) {
                    Some(l) => {
                        return status(
                            r,
                            Verdict::Loaded {
                                evidence: line(&proc_path, l.number, l.text),
                            },
                        );
                    }
                    None => missing.push(Evidence::NotListed {
                        file: proc_path.clone(),
                    }),
                },
                Err(e) => missing.push(Evidence::Unreadable {
                    file: proc_path.clone(),
                    error: e.clone(),
                }),
            }

            // 3. /sys/module/<name>: loaded modules have `initstate`;
            //    built-in ones that show up there (those with parameters or
            //    a version) do not.
            let sys_dir = roots.sys.join("module").join(name);
            if sys_dir.is_dir() {
                let initstate = sys_dir.join("initstate");
                let verdict = if initstate.exists() {
                    Verdict::Loaded {
                        evidence: Evidence::Exists {
                            content: first_line(&initstate),
                            path: initstate,
                            meaning: "so it is a loaded module",
                        },
                    }
                } else {
                    Verdict::BuiltIn {
                        evidence: Evidence::Exists {
                            path: sys_dir,
                            content: None,
                            meaning: "without an initstate file, so it is built into the kernel",
                        },
                    }
                };
                return status(r, verdict);
            }
            missing.push(Evidence::Absent { path: sys_dir });

            // 4. Loadable, by modules.dep.
            if let Some(problem) = &dir_problem {
                missing.push(problem.clone());
            } else {
                match (&dep, &dep_text) {
                    (Some(dep), _) => {
                        if let (Some(entry), Some(mut order)) =
                            (dep.get(name), dep.load_order(name, &modules_dir))
                        {
                            let own = order.pop();
                            let path = own
                                .map(|m| m.path)
                                .unwrap_or_else(|| modules_dir.join(&entry.path));
                            return status(
                                r,
                                Verdict::Loadable {
                                    path,
                                    compression: entry.compression,
                                    dependencies: order,
                                    evidence: line(
                                        &dep_path,
                                        entry.line_number,
                                        entry.line.clone(),
                                    ),
                                },
                            );
                        }
                        missing.push(Evidence::NotListed {
                            file: dep_path.clone(),
                        });
                    }
                    (None, Err(e)) => missing.push(Evidence::Unreadable {
                        file: dep_path.clone(),
                        error: e.clone(),
                    }),
                    (None, Ok(_)) => {}
                }
            }
            status(r, Verdict::Missing { evidence: missing })
        })
        .collect();

    Report {
        release,
        modules_dir,
        modules,
        probe: None,
    }
}

fn status(r: &super::name::Requirement, verdict: Verdict) -> ModuleStatus {
    ModuleStatus {
        module: r.module.clone(),
        purpose: r.purpose.clone(),
        verdict,
    }
}

fn line(file: &Path, number: usize, text: String) -> Evidence {
    Evidence::Line {
        file: file.to_path_buf(),
        number,
        text,
    }
}

fn read(path: &Path) -> Result<String, String> {
    match fs::read(path) {
        Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Err(e) => Err(e.to_string()),
    }
}

fn first_line(path: &Path) -> Option<String> {
    let text = fs::read(path).ok()?;
    if text.len() > 4096 {
        return None;
    }
    let text = String::from_utf8_lossy(&text);
    Some(text.lines().next().unwrap_or("").to_owned())
}

/// `Some(evidence)` when the modules directory for `release` is not there.
fn modules_dir_problem(release: &str, dir: &Path, lib_modules: &Path) -> Option<Evidence> {
    if valid_release(release) && dir.is_dir() {
        return None;
    }
    let (found, listing_error) = match list_releases(lib_modules) {
        Ok(found) => (found, None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            (Vec::new(), Some("does not exist either".to_owned()))
        }
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    Some(Evidence::NoModulesDir {
        release: release.to_owned(),
        expected: dir.to_path_buf(),
        found,
        listing_error,
    })
}

fn list_releases(lib_modules: &Path) -> io::Result<Vec<String>> {
    let mut found: Vec<String> = fs::read_dir(lib_modules)?
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    Ok(found)
}
