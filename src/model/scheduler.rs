//! Scheduler and persistence-engine names.

use std::fmt;

/// A scheduling algorithm, by the name the kernel registers it under.
///
/// The schedulers that ship with Linux have their own variants; any other
/// name (an out-of-tree module) is [`Scheduler::Other`]. Names are compared
/// exactly as the kernel compares them, so `Scheduler::from_name("rr")` and
/// `Scheduler::RoundRobin` are the same value.
///
/// `#[non_exhaustive]`: Linux keeps adding schedulers (`mh` in 4.18, `twos`
/// in 6.7); each new one gets its own variant, so match with a wildcard arm.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub enum Scheduler {
    /// `rr`: round robin.
    #[cfg_attr(feature = "serde", serde(rename = "rr"))]
    RoundRobin,
    /// `wrr`: weighted round robin.
    #[cfg_attr(feature = "serde", serde(rename = "wrr"))]
    WeightedRoundRobin,
    /// `lc`: least connection.
    #[cfg_attr(feature = "serde", serde(rename = "lc"))]
    LeastConnection,
    /// `wlc`: weighted least connection (ipvsadm's default).
    #[cfg_attr(feature = "serde", serde(rename = "wlc"))]
    WeightedLeastConnection,
    /// `lblc`: locality-based least connection.
    #[cfg_attr(feature = "serde", serde(rename = "lblc"))]
    LocalityBasedLeastConnection,
    /// `lblcr`: locality-based least connection with replication.
    #[cfg_attr(feature = "serde", serde(rename = "lblcr"))]
    LocalityBasedLeastConnectionReplication,
    /// `dh`: destination hashing.
    #[cfg_attr(feature = "serde", serde(rename = "dh"))]
    DestinationHashing,
    /// `sh`: source hashing.
    #[cfg_attr(feature = "serde", serde(rename = "sh"))]
    SourceHashing,
    /// `sed`: shortest expected delay.
    #[cfg_attr(feature = "serde", serde(rename = "sed"))]
    ShortestExpectedDelay,
    /// `nq`: never queue.
    #[cfg_attr(feature = "serde", serde(rename = "nq"))]
    NeverQueue,
    /// `fo`: weighted failover.
    #[cfg_attr(feature = "serde", serde(rename = "fo"))]
    WeightedFailover,
    /// `ovf`: weighted overflow.
    #[cfg_attr(feature = "serde", serde(rename = "ovf"))]
    WeightedOverflow,
    /// `mh`: Maglev hashing (4.18+).
    #[cfg_attr(feature = "serde", serde(rename = "mh"))]
    MaglevHashing,
    /// `twos`: weighted random twos choice (6.7+).
    #[cfg_attr(feature = "serde", serde(rename = "twos"))]
    TwoChoice,
    /// `none`: no scheduler (the kernel reports this for services without one).
    #[cfg_attr(feature = "serde", serde(rename = "none"))]
    None,
    /// Any other scheduler name.
    #[cfg_attr(feature = "serde", serde(untagged))]
    Other(String),
}

const KNOWN: [(&str, Scheduler); 15] = [
    ("rr", Scheduler::RoundRobin),
    ("wrr", Scheduler::WeightedRoundRobin),
    ("lc", Scheduler::LeastConnection),
    ("wlc", Scheduler::WeightedLeastConnection),
    ("lblc", Scheduler::LocalityBasedLeastConnection),
    ("lblcr", Scheduler::LocalityBasedLeastConnectionReplication),
    ("dh", Scheduler::DestinationHashing),
    ("sh", Scheduler::SourceHashing),
    ("sed", Scheduler::ShortestExpectedDelay),
    ("nq", Scheduler::NeverQueue),
    ("fo", Scheduler::WeightedFailover),
    ("ovf", Scheduler::WeightedOverflow),
    ("mh", Scheduler::MaglevHashing),
    ("twos", Scheduler::TwoChoice),
    ("none", Scheduler::None),
];

impl Scheduler {
    /// Every scheduler that ships with Linux (without `none`), oldest first.
    pub const BUILT_IN: [Scheduler; 14] = [
        Scheduler::RoundRobin,
        Scheduler::WeightedRoundRobin,
        Scheduler::LeastConnection,
        Scheduler::WeightedLeastConnection,
        Scheduler::LocalityBasedLeastConnection,
        Scheduler::LocalityBasedLeastConnectionReplication,
        Scheduler::DestinationHashing,
        Scheduler::SourceHashing,
        Scheduler::ShortestExpectedDelay,
        Scheduler::NeverQueue,
        Scheduler::WeightedFailover,
        Scheduler::WeightedOverflow,
        Scheduler::MaglevHashing,
        Scheduler::TwoChoice,
    ];

    /// The scheduler registered under `name`.
    ///
    /// ```
    /// use ipvsctl::model::Scheduler;
    /// assert_eq!(Scheduler::from_name("wrr"), Scheduler::WeightedRoundRobin);
    /// assert_eq!(Scheduler::from_name("mine").name(), "mine");
    /// ```
    pub fn from_name(name: &str) -> Self {
        KNOWN
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| Scheduler::Other(name.to_owned()))
    }

    /// The name the kernel knows this scheduler by.
    pub fn name(&self) -> &str {
        if let Scheduler::Other(name) = self {
            return name;
        }
        KNOWN.iter().find(|(_, s)| s == self).map_or("", |(n, _)| n)
    }

    /// The kernel module that provides this scheduler (`ip_vs_<name>`), or
    /// `None` for [`Scheduler::None`].
    pub fn module_name(&self) -> Option<String> {
        match self {
            Scheduler::None => None,
            other => Some(format!("ip_vs_{}", other.name())),
        }
    }
}

impl Default for Scheduler {
    /// `wlc`, as ipvsadm.
    fn default() -> Self {
        Scheduler::WeightedLeastConnection
    }
}

impl fmt::Display for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A persistence engine, by name (Linux ships `sip`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct PersistenceEngine(pub String);

impl PersistenceEngine {
    /// The SIP persistence engine (`ip_vs_pe_sip`).
    pub fn sip() -> Self {
        PersistenceEngine("sip".to_owned())
    }

    /// The engine's name.
    pub fn name(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PersistenceEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
