//! The report of a check, its verdict on IPVS, and a short diagnosis.

use std::fmt;
use std::path::PathBuf;

use super::check::{ModuleStatus, Verdict, check_with};
use super::name::Requirements;
use super::roots::{CheckConfig, KernelRelease};

/// The result of [`check`](super::check): one [`ModuleStatus`] per required
/// module, plus the functional probe's result if one was attached.
///
/// `Display` prints one line per module (name, verdict, evidence) and a
/// closing `IPVS usable: yes/no, because ...` line.
///
/// ```
/// use ipvsctl::kmod::{self, CheckConfig, Requirements, Roots};
///
/// let cfg = CheckConfig::default().with_roots(Roots::under("/nonexistent")).with_release("6.1.0");
/// let report = kmod::check_with(&Requirements::default(), &cfg);
/// assert_eq!(report.modules.len(), 5);
/// assert!(!report.all_present());
/// assert!(report.to_string().lines().last().unwrap().starts_with("IPVS usable: no, because "));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// The kernel release checked for.
    pub release: KernelRelease,
    /// `/lib/modules/<release>` (which may not exist).
    pub modules_dir: PathBuf,
    /// One entry per required module, in the order asked.
    pub modules: Vec<ModuleStatus>,
    /// The functional probe's result, if [`Report::with_probe`] was used.
    pub probe: Option<ProbeResult>,
}

/// What the functional probe found, kept in a [`Report`].
///
/// ```
/// use ipvsctl::kmod::{self, CheckConfig, ProbeResult, Requirements, Roots};
///
/// let cfg = CheckConfig::default().with_roots(Roots::under("/nonexistent")).with_release("6.1.0");
/// let report = kmod::check_with(&Requirements::ipvs_core(), &cfg).with_probe(Ok(None));
/// assert_eq!(report.probe, Some(ProbeResult::Absent));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProbeResult {
    /// The kernel resolved the IPVS generic netlink family.
    Present(FamilyInfo),
    /// The kernel answered that it has no such family.
    Absent,
    /// The probe could not ask (socket error, unexpected reply).
    Failed(String),
}

impl fmt::Display for ProbeResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeResult::Present(info) => write!(
                f,
                "the kernel resolved the {} generic netlink family (id {}, version {})",
                info.name, info.id, info.version
            ),
            ProbeResult::Absent => {
                f.write_str("the kernel has no IPVS generic netlink family (ENOENT from nlctrl)")
            }
            ProbeResult::Failed(e) => write!(f, "the probe could not ask the kernel: {e}"),
        }
    }
}

/// A generic netlink family as the kernel's controller reported it.
///
/// ```no_run
/// let f = ipvsctl::kmod::resolve_family("nlctrl")?.expect("the controller always exists");
/// println!("{} id {} version {}", f.name, f.id, f.version);
/// # Ok::<(), ipvsctl::kmod::KmodError>(())
/// ```
///
/// `#[non_exhaustive]`: the controller says more than this (header size,
/// attributes, operations), which may be kept one day; build one with
/// [`FamilyInfo::new`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FamilyInfo {
    /// The family's name.
    pub name: String,
    /// The id the kernel gave it (the netlink message type to use).
    pub id: u16,
    /// The family's version.
    pub version: u32,
}

impl FamilyInfo {
    /// A family of this name, id and version.
    pub fn new(name: impl Into<String>, id: u16, version: u32) -> Self {
        FamilyInfo {
            name: name.into(),
            id,
            version,
        }
    }
}

/// Whether IPVS can be used, and why.
///
/// ```
/// use ipvsctl::kmod::{self, CheckConfig, FamilyInfo, Requirements, Roots};
///
/// let cfg = CheckConfig::default().with_roots(Roots::under("/nonexistent")).with_release("6.1.0");
/// let family = FamilyInfo::new("IPVS", 33, 1);
/// let u = kmod::check_with(&Requirements::ipvs_core(), &cfg)
///     .with_probe(Ok(Some(family)))
///     .usability();
/// // The probe is the final word, even when the files disagree.
/// assert!(u.usable && u.probed);
/// assert!(u.to_string().starts_with("IPVS usable: yes, because the kernel resolved"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Usability {
    /// The answer.
    pub usable: bool,
    /// Whether the answer comes from the functional probe (the final word)
    /// rather than from module files alone.
    pub probed: bool,
    /// The reason, in plain words.
    pub because: String,
}

impl fmt::Display for Usability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "IPVS usable: {}, because {}",
            if self.usable { "yes" } else { "no" },
            self.because
        )
    }
}

impl Report {
    /// Attaches the result of a functional probe such as
    /// [`probe_family`](super::probe_family).
    ///
    /// ```no_run
    /// use ipvsctl::kmod::{self, Requirements};
    ///
    /// let report = kmod::check(&Requirements::default()).with_probe(kmod::probe_family());
    /// println!("{}", report.usability());
    /// ```
    pub fn with_probe(
        mut self,
        probe: Result<Option<FamilyInfo>, super::error::KmodError>,
    ) -> Self {
        self.probe = Some(match probe {
            Ok(Some(info)) => ProbeResult::Present(info),
            Ok(None) => ProbeResult::Absent,
            Err(e) => ProbeResult::Failed(e.to_string()),
        });
        self
    }

    /// The status of one module, by any spelling of its name.
    pub fn module(&self, name: &str) -> Option<&ModuleStatus> {
        let wanted = super::name::normalise(name);
        self.modules.iter().find(|m| m.module.as_str() == wanted)
    }

    /// Whether every required module is built in or loaded.
    pub fn all_present(&self) -> bool {
        self.modules.iter().all(|m| m.verdict.is_present())
    }

    /// Modules that are not present, with a short reason each; modules
    /// missing for the same reason share one entry.
    fn problems(&self) -> Vec<String> {
        let mut groups: Vec<(Vec<&str>, bool, String)> = Vec::new();
        for m in self.modules.iter().filter(|m| !m.verdict.is_present()) {
            let (missing, reason) = short(m);
            match groups
                .iter_mut()
                .find(|(_, mi, r)| *mi == missing && *r == reason)
            {
                Some((names, _, _)) => names.push(m.module.as_str()),
                None => groups.push((vec![m.module.as_str()], missing, reason)),
            }
        }
        groups
            .into_iter()
            .map(|(names, missing, reason)| {
                let verb = match (missing, names.len()) {
                    (true, 1) => "is missing",
                    (true, _) => "are missing",
                    (false, _) => "is not loaded but loadable",
                };
                format!("{} {verb}{reason}", names.join(", "))
            })
            .collect()
    }

    /// IPVS usable or not, and why. The probe, when attached and able to
    /// ask, is the final word (modules that are not ready are still named);
    /// without it, usable means every required module is built in or
    /// loaded.
    pub fn usability(&self) -> Usability {
        let problems = self.problems();
        let note = if problems.is_empty() {
            String::new()
        } else {
            format!("; not ready: {}", problems.join("; "))
        };
        match &self.probe {
            Some(p @ ProbeResult::Present(_)) => Usability {
                usable: true,
                probed: true,
                because: format!("{p}{note}"),
            },
            Some(p @ ProbeResult::Absent) => Usability {
                usable: false,
                probed: true,
                because: format!("{p}{note}"),
            },
            other => {
                let failed = match other {
                    Some(p @ ProbeResult::Failed(_)) => format!(" ({p})"),
                    _ => String::new(),
                };
                if problems.is_empty() && !self.modules.is_empty() {
                    Usability {
                        usable: true,
                        probed: false,
                        because: format!(
                            "every required module is built in or loaded (not probed{failed})"
                        ),
                    }
                } else if self.modules.is_empty() {
                    Usability {
                        usable: false,
                        probed: false,
                        because: format!("no module was checked and nothing was probed{failed}"),
                    }
                } else {
                    Usability {
                        usable: false,
                        probed: false,
                        because: format!("{}{failed}", problems.join("; ")),
                    }
                }
            }
        }
    }

    /// A short explanation of why IPVS is (or may be) unavailable.
    pub fn diagnosis(&self) -> Diagnosis {
        let u = self.usability();
        let summary = if u.usable {
            format!("IPVS looks usable: {}", u.because)
        } else {
            format!("IPVS unavailable: {}", u.because)
        };
        Diagnosis {
            summary,
            report: self.clone(),
        }
    }
}

/// Whether the module is missing, and the rest of the sentence after
/// "<name> is missing" or "<name> is not loaded but loadable".
fn short(m: &ModuleStatus) -> (bool, String) {
    match &m.verdict {
        Verdict::Loadable { path, .. } => (
            false,
            format!(" from {} (load it: modprobe {})", path.display(), m.module),
        ),
        Verdict::Missing { evidence } => {
            // The most telling item: a missing modules directory, else the
            // last place looked (modules.dep).
            let key = evidence
                .iter()
                .find(|e| matches!(e, super::Evidence::NoModulesDir { .. }))
                .or_else(|| evidence.last());
            (true, key.map(|e| format!(": {e}")).unwrap_or_default())
        }
        // Present modules are never asked about.
        v => (false, format!(" ({})", v.label())),
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "kernel {} ({}), modules directory {}",
            self.release.release,
            self.release.source,
            self.modules_dir.display()
        )?;
        for m in &self.modules {
            writeln!(f, "  {m}")?;
        }
        if let Some(p) = &self.probe {
            writeln!(f, "  probe: {p}")?;
        }
        write!(f, "{}", self.usability())
    }
}

/// A short explanation of why IPVS is unavailable, with the report behind
/// it. Its `Display` is the one-line summary.
///
/// ```
/// use ipvsctl::kmod::{self, CheckConfig, Requirements, Roots};
///
/// let cfg = CheckConfig::default().with_roots(Roots::under("/nonexistent")).with_release("6.1.0");
/// let d = kmod::check_with(&Requirements::ipvs_core(), &cfg).diagnosis();
/// assert_eq!(d.to_string(), d.summary);
/// assert_eq!(d.report.modules.len(), 1);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Diagnosis {
    /// One line, e.g. `IPVS unavailable: ip_vs is missing: no modules
    /// directory for running kernel 6.1.0-18-amd64 ...`.
    pub summary: String,
    /// The full report.
    pub report: Report,
}

impl fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary)
    }
}

/// Cheap diagnosis for error messages: checks `ip_vs` alone against the
/// running system, reading files only (no load, no probe).
///
/// Meant for embedding in an "IPVS unavailable" error after the family
/// failed to resolve.
///
/// ```no_run
/// let why = ipvsctl::kmod::diagnose();
/// eprintln!("{why}");
/// ```
pub fn diagnose() -> Diagnosis {
    diagnose_with(&Requirements::ipvs_core(), &CheckConfig::default())
}

/// [`diagnose`] for other modules and roots.
///
/// ```
/// use ipvsctl::kmod::{self, CheckConfig, Requirements, Roots};
///
/// let cfg = CheckConfig::default().with_roots(Roots::under("/nonexistent")).with_release("6.1.0");
/// let d = kmod::diagnose_with(&Requirements::ipvs_core(), &cfg);
/// assert!(d.summary.starts_with("IPVS unavailable: ip_vs is missing"));
/// ```
pub fn diagnose_with(req: &Requirements, cfg: &CheckConfig) -> Diagnosis {
    check_with(req, cfg).diagnosis()
}
