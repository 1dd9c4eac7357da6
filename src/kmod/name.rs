//! Module names and the list of modules a caller needs.

use std::fmt;
use std::str::FromStr;

use super::error::KmodError;

/// The longest module name the kernel accepts (`MODULE_NAME_LEN` is 64 bytes
/// minus a `unsigned long`, including the terminating NUL).
pub const MAX_MODULE_NAME_LEN: usize = 55;

/// Every scheduler shipped with the Linux kernel, by its IPVS name.
///
/// ```
/// use ipvsctl::kmod::{KERNEL_SCHEDULERS, Requirements};
///
/// let mut all = Requirements::empty();
/// for s in KERNEL_SCHEDULERS {
///     all = all.with_scheduler(s)?;
/// }
/// assert_eq!(all.len(), 14);
/// # Ok::<(), ipvsctl::kmod::KmodError>(())
/// ```
///
/// Each lives in the module `ip_vs_<name>`.
pub const KERNEL_SCHEDULERS: [&str; 14] = [
    "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf", "mh", "twos",
];

/// Every persistence engine shipped with the Linux kernel, by its IPVS name.
///
/// Each lives in the module `ip_vs_pe_<name>`.
pub const KERNEL_PERSISTENCE_ENGINES: [&str; 1] = ["sip"];

/// The schedulers [`Requirements::default`] asks for: the ones kube-proxy
/// checks for in IPVS mode.
pub const DEFAULT_SCHEDULERS: [&str; 3] = ["rr", "wrr", "sh"];

/// A kernel module name in its canonical form: dashes replaced by
/// underscores, as the kernel itself reports names in `/proc/modules`.
///
/// ```
/// use ipvsctl::kmod::ModuleName;
///
/// let name: ModuleName = "nf-conntrack".parse()?;
/// assert_eq!(name.as_str(), "nf_conntrack");
/// assert!("ip vs".parse::<ModuleName>().is_err());
/// # Ok::<(), ipvsctl::kmod::KmodError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModuleName(String);

impl ModuleName {
    /// Validates and normalises `name` (dashes become underscores).
    ///
    /// Accepts ASCII letters, digits, `_` and `-`, at most
    /// [`MAX_MODULE_NAME_LEN`] bytes.
    ///
    /// ```
    /// use ipvsctl::kmod::ModuleName;
    ///
    /// assert_eq!(ModuleName::new("ip_vs")?.as_str(), "ip_vs");
    /// # Ok::<(), ipvsctl::kmod::KmodError>(())
    /// ```
    pub fn new(name: &str) -> Result<Self, KmodError> {
        let invalid = |reason: &'static str| KmodError::InvalidModuleName {
            name: name.to_owned(),
            reason,
        };
        if name.is_empty() {
            return Err(invalid("it is empty"));
        }
        if name.len() > MAX_MODULE_NAME_LEN {
            return Err(invalid("it is longer than the kernel allows (55 bytes)"));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(invalid(
                "only ASCII letters, digits, '_' and '-' are allowed",
            ));
        }
        Ok(Self(normalise(name)))
    }

    /// The module name for an IPVS scheduler: `ip_vs_<scheduler>`.
    ///
    /// Any well-formed name is accepted (out-of-tree schedulers exist); see
    /// [`KERNEL_SCHEDULERS`] for the ones the kernel ships.
    ///
    /// ```
    /// use ipvsctl::kmod::ModuleName;
    ///
    /// assert_eq!(ModuleName::for_scheduler("mh")?.as_str(), "ip_vs_mh");
    /// # Ok::<(), ipvsctl::kmod::KmodError>(())
    /// ```
    pub fn for_scheduler(scheduler: &str) -> Result<Self, KmodError> {
        check_component(scheduler, "scheduler")?;
        Self::new(&format!("ip_vs_{scheduler}"))
    }

    /// The module name for an IPVS persistence engine: `ip_vs_pe_<engine>`.
    ///
    /// ```
    /// use ipvsctl::kmod::ModuleName;
    ///
    /// assert_eq!(ModuleName::for_persistence_engine("sip")?.as_str(), "ip_vs_pe_sip");
    /// # Ok::<(), ipvsctl::kmod::KmodError>(())
    /// ```
    pub fn for_persistence_engine(engine: &str) -> Result<Self, KmodError> {
        check_component(engine, "persistence engine")?;
        Self::new(&format!("ip_vs_pe_{engine}"))
    }

    /// The canonical name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn check_component(part: &str, what: &'static str) -> Result<(), KmodError> {
    if part.is_empty() {
        return Err(KmodError::InvalidModuleName {
            name: format!("{what} \"\""),
            reason: "the name is empty",
        });
    }
    Ok(())
}

/// Replaces dashes with underscores, as the kernel and kmod do when they
/// compare module names.
pub(crate) fn normalise(name: &str) -> String {
    name.replace('-', "_")
}

impl FromStr for ModuleName {
    type Err = KmodError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl fmt::Display for ModuleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for ModuleName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Why a module is on the list.
///
/// ```
/// use ipvsctl::kmod::{Purpose, Requirements};
///
/// let req = Requirements::default();
/// let purposes: Vec<String> = req.iter().map(|r| r.purpose.to_string()).collect();
/// assert_eq!(purposes[0], "IPVS core");
/// assert_eq!(purposes[1], "scheduler rr");
/// assert!(matches!(req.iter().last().map(|r| &r.purpose), Some(Purpose::Conntrack)));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Purpose {
    /// `ip_vs` itself.
    Core,
    /// The scheduler of that name.
    Scheduler(String),
    /// The persistence engine of that name.
    PersistenceEngine(String),
    /// Connection tracking, which IPVS uses for NAT and which kube-proxy
    /// relies on.
    Conntrack,
    /// Asked for by name by the caller.
    Extra,
}

impl fmt::Display for Purpose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Purpose::Core => f.write_str("IPVS core"),
            Purpose::Scheduler(s) => write!(f, "scheduler {s}"),
            Purpose::PersistenceEngine(p) => write!(f, "persistence engine {p}"),
            Purpose::Conntrack => f.write_str("connection tracking"),
            Purpose::Extra => f.write_str("requested"),
        }
    }
}

/// One module on the list, with the reason it is there.
///
/// ```
/// use ipvsctl::kmod::{Purpose, Requirements};
///
/// let req = Requirements::empty().with_persistence_engine("sip")?;
/// let r = req.iter().next().unwrap();
/// assert_eq!(r.module.as_str(), "ip_vs_pe_sip");
/// assert_eq!(r.purpose, Purpose::PersistenceEngine("sip".into()));
/// # Ok::<(), ipvsctl::kmod::KmodError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Requirement {
    /// The module.
    pub module: ModuleName,
    /// Why it is needed.
    pub purpose: Purpose,
}

/// The modules a caller needs, in the order they are checked and loaded.
///
/// [`Requirements::default`] is `ip_vs`, the schedulers `rr`, `wrr` and `sh`
/// (`ip_vs_rr`, `ip_vs_wrr`, `ip_vs_sh`) and `nf_conntrack`: what kube-proxy
/// in IPVS mode needs. [`Requirements::ipvs_core`] is `ip_vs` alone.
/// Duplicates are dropped.
///
/// ```
/// use ipvsctl::kmod::Requirements;
///
/// let req = Requirements::ipvs_core()
///     .with_scheduler("mh")?
///     .with_persistence_engine("sip")?
///     .with_module("ip_vs_nosuch")?;
/// let names: Vec<&str> = req.iter().map(|r| r.module.as_str()).collect();
/// assert_eq!(names, ["ip_vs", "ip_vs_mh", "ip_vs_pe_sip", "ip_vs_nosuch"]);
/// # Ok::<(), ipvsctl::kmod::KmodError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirements {
    list: Vec<Requirement>,
}

impl Requirements {
    /// An empty list.
    pub fn empty() -> Self {
        Self { list: Vec::new() }
    }

    /// `ip_vs` alone.
    pub fn ipvs_core() -> Self {
        let mut r = Self::empty();
        r.push(ModuleName(String::from("ip_vs")), Purpose::Core);
        r
    }

    /// Adds the module for a scheduler (`ip_vs_<name>`).
    pub fn with_scheduler(mut self, scheduler: &str) -> Result<Self, KmodError> {
        let module = ModuleName::for_scheduler(scheduler)?;
        self.push(module, Purpose::Scheduler(scheduler.to_owned()));
        Ok(self)
    }

    /// Adds the module for a persistence engine (`ip_vs_pe_<name>`).
    pub fn with_persistence_engine(mut self, engine: &str) -> Result<Self, KmodError> {
        let module = ModuleName::for_persistence_engine(engine)?;
        self.push(module, Purpose::PersistenceEngine(engine.to_owned()));
        Ok(self)
    }

    /// Adds `nf_conntrack`.
    pub fn with_conntrack(mut self) -> Self {
        self.push(ModuleName(String::from("nf_conntrack")), Purpose::Conntrack);
        self
    }

    /// Adds any module by name.
    pub fn with_module(mut self, name: &str) -> Result<Self, KmodError> {
        let module = ModuleName::new(name)?;
        self.push(module, Purpose::Extra);
        Ok(self)
    }

    fn push(&mut self, module: ModuleName, purpose: Purpose) {
        if !self.list.iter().any(|r| r.module == module) {
            self.list.push(Requirement { module, purpose });
        }
    }

    /// The requirements in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Requirement> {
        self.list.iter()
    }

    /// How many modules are listed.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

impl Default for Requirements {
    fn default() -> Self {
        let mut r = Self::ipvs_core();
        for s in DEFAULT_SCHEDULERS {
            r.push(
                ModuleName(format!("ip_vs_{s}")),
                Purpose::Scheduler(s.to_owned()),
            );
        }
        r.with_conntrack()
    }
}

impl<'a> IntoIterator for &'a Requirements {
    type Item = &'a Requirement;
    type IntoIter = std::slice::Iter<'a, Requirement>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}
