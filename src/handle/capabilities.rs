//! What the running kernel's IPVS can do, found out without changing
//! anything: the release, `GET_INFO`, the module files, and the attributes
//! the kernel puts in its answers.
//!
//! Attributes a kernel does not know are ignored, not refused: a real server
//! added with a GUE tunnel on 5.1 becomes plain IP-in-IP. [`Capabilities`]
//! says what is there, and [`Capabilities::check_service`] /
//! [`Capabilities::check_destination`] turn a request this kernel would
//! ignore or refuse into [`Error::KernelLacks`] before it is sent.
//! [`Handle::capabilities`] finds them out.

use std::fmt;

use super::{Error, Handle, Result, Target, Via};
use crate::codec::attr::{DestAttr, IpvsAttr};
use crate::codec::{frame, reply, request};
use crate::kmod::{self, CheckConfig, Evidence, ModuleStatus, Requirements, Verdict};
use crate::model::{
    ForwardMethod, Info, PersistenceEngine, RealServer, Scheduler, ServiceKey, StatsSource,
    TunnelEncap, TunnelFlags, VirtualServer,
};
use crate::netlink::Kind;

/// How many services' real servers [`Handle::capabilities`] reads, at most,
/// looking for one real server whose attributes show what the kernel sends.
const DEST_SAMPLE: usize = 8;

/// A kernel version as `major.minor.patch`, taken from the front of a
/// release string (`6.1.0-18-amd64` is 6.1.0, `5.14.0-362.el9.x86_64` is
/// 5.14.0, `6.12` is 6.12.0).
///
/// Distribution kernels backport features (RHEL's 4.18 has many of 5.x), so
/// a version says what the mainline release of that number had; evidence
/// from the kernel's own answers always takes precedence ([`Support`]).
///
/// ```
/// use ipvsctl::capabilities::KernelVersion;
/// let v = KernelVersion::parse("6.1.0-18-amd64").unwrap();
/// assert_eq!(v, KernelVersion::new(6, 1, 0));
/// assert!(v < KernelVersion::new(6, 7, 0));
/// assert!(KernelVersion::parse("6.12.117+deb12-amd64").unwrap() >= KernelVersion::new(6, 7, 0));
/// assert_eq!(KernelVersion::parse("linux"), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelVersion {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// Patch level (0 when the release has none).
    pub patch: u32,
}

impl KernelVersion {
    /// GUE tunnels, `IPVS_DEST_ATTR_TUN_TYPE` and `TUN_PORT` (mainline
    /// commit "ipvs: allow tunneling with gue encapsulation").
    pub const TUNNEL_GUE: KernelVersion = KernelVersion::new(5, 2, 0);
    /// GRE tunnels and `IPVS_DEST_ATTR_TUN_FLAGS` ("ipvs: allow tunneling
    /// with gre encapsulation", "ipvs: add checksum support for gue
    /// encapsulation").
    pub const TUNNEL_GRE_AND_FLAGS: KernelVersion = KernelVersion::new(5, 3, 0);
    /// 64-bit statistics, `IPVS_SVC_ATTR_STATS64` / `IPVS_DEST_ATTR_STATS64`.
    pub const STATS64: KernelVersion = KernelVersion::new(4, 1, 0);
    /// Real servers of the other address family than their service,
    /// `IPVS_DEST_ATTR_ADDR_FAMILY`.
    pub const MIXED_FAMILY: KernelVersion = KernelVersion::new(3, 18, 0);
    /// The `mh` scheduler (found by its module; listed for reference).
    pub const SCHEDULER_MH: KernelVersion = KernelVersion::new(4, 18, 0);
    /// The `twos` scheduler (found by its module; listed for reference).
    pub const SCHEDULER_TWOS: KernelVersion = KernelVersion::new(6, 7, 0);
    /// Each namespace's own service and connection tables, resized with
    /// their load (the `svc_lfactor` and `conn_lfactor` sysctls): a service
    /// lookup stays a short hash-chain walk however large the table, and
    /// `GET_INFO` reports the namespace's current connection-table size
    /// ("ipvs: show the current conn_tab size to users"). Before, one
    /// service hash of 256 buckets served every namespace.
    pub const PER_NAMESPACE_TABLES: KernelVersion = KernelVersion::new(7, 1, 0);

    /// `major.minor.patch`.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        KernelVersion {
            major,
            minor,
            patch,
        }
    }

    /// The version at the front of a release string, or `None` when it does
    /// not start with at least `major.minor`.
    pub fn parse(release: &str) -> Option<Self> {
        let end = release
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(release.len());
        let mut parts = release[..end].split('.').map(str::parse::<u32>);
        let major = parts.next()?.ok()?;
        let minor = parts.next()?.ok()?;
        let patch = parts.next().map_or(Some(0), Result::ok)?;
        Some(KernelVersion::new(major, minor, patch))
    }
}

/// The running kernel's release, as `uname -r` prints it (the same in every
/// network namespace).
pub(crate) fn running_release() -> String {
    rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned()
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Whether the kernel has a feature, and what showed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Support {
    /// The kernel sent the feature's attribute in an answer.
    Seen,
    /// The kernel sent an answer that carries the attribute on every kernel
    /// that has it, without it.
    NotSent,
    /// No answer showed it either way; the running version is at least
    /// `since`, the mainline release that brought it.
    ByVersion {
        /// The release that brought the feature.
        since: KernelVersion,
    },
    /// No answer showed it either way; the running version is older than
    /// `since`, the mainline release that brought it (a distribution kernel
    /// may have it backported).
    BeforeVersion {
        /// The release that brought the feature.
        since: KernelVersion,
    },
    /// No answer showed it and the release could not be parsed.
    Unknown,
}

impl Support {
    /// `Some(true)` when the feature is there, `Some(false)` when it is not,
    /// `None` when nothing tells.
    pub fn is_available(self) -> Option<bool> {
        match self {
            Support::Seen | Support::ByVersion { .. } => Some(true),
            Support::NotSent | Support::BeforeVersion { .. } => Some(false),
            Support::Unknown => None,
        }
    }

    /// Judges from an answer when there was one (`Some(seen)`), else from
    /// the version.
    fn judge(seen: Option<bool>, version: Option<KernelVersion>, since: KernelVersion) -> Self {
        match (seen, version) {
            (Some(true), _) => Support::Seen,
            (Some(false), _) => Support::NotSent,
            (None, Some(v)) if v >= since => Support::ByVersion { since },
            (None, Some(_)) => Support::BeforeVersion { since },
            (None, None) => Support::Unknown,
        }
    }
}

impl fmt::Display for Support {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Support::Seen => f.write_str("yes (seen in the kernel's answer)"),
            Support::NotSent => f.write_str("no (absent from the kernel's answer)"),
            Support::ByVersion { since } => write!(f, "yes (by version: since {since})"),
            Support::BeforeVersion { since } => write!(f, "no (by version: since {since})"),
            Support::Unknown => f.write_str("unknown"),
        }
    }
}

/// Whether a scheduler or persistence engine can be used, by the module
/// files: the kernel-module check's verdict (`kmod::check`, public with the
/// feature `kmod`), summarised for a handle's user. The check's answer to
/// "can this scheduler be used?" says why; `kmod::probe_scheduler` confirms
/// it with the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Availability {
    /// Built in or loaded: usable now.
    Present,
    /// Its module file is listed for the running kernel: the kernel loads
    /// it on first use, or load it first (`modprobe`, or
    /// `kmod::load_needed` with the feature `kmod`).
    Loadable,
    /// Not built in, not loaded, and the running kernel's `modules.dep` was
    /// read and does not list it: the kernel refuses it (`ENOENT`).
    Absent,
    /// Not present, and the module files of the running kernel could not be
    /// read (a container without the host's `/lib/modules`): the kernel may
    /// still be able to load it.
    Unknown,
}

impl Availability {
    fn of(status: &ModuleStatus) -> Self {
        match &status.verdict {
            Verdict::BuiltIn { .. } | Verdict::Loaded { .. } => Availability::Present,
            Verdict::Loadable { .. } => Availability::Loadable,
            Verdict::Missing { evidence } => {
                let dep_read = evidence.iter().any(
                    |e| matches!(e, Evidence::NotListed { file } if file.ends_with("modules.dep")),
                );
                if dep_read {
                    Availability::Absent
                } else {
                    Availability::Unknown
                }
            }
        }
    }

    /// Whether the kernel can use it (now, or after loading its module);
    /// `None` when nothing tells.
    pub fn is_usable(self) -> Option<bool> {
        match self {
            Availability::Present | Availability::Loadable => Some(true),
            Availability::Absent => Some(false),
            Availability::Unknown => None,
        }
    }
}

/// What the running kernel's IPVS can do ([`Handle::capabilities`]).
///
/// A snapshot: a module loaded later, or a real server added, can change
/// it. Keep it and pass requests through [`Capabilities::check_service`] /
/// [`Capabilities::check_destination`] to refuse, before sending, what this
/// kernel would ignore or refuse; the handle's own calls never consult it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// The running kernel's release, as `uname -r` prints it.
    pub release: String,
    /// The version at the front of [`Capabilities::release`], if it parses.
    pub version: Option<KernelVersion>,
    /// IPVS version and connection-table size from `GET_INFO` (from Linux
    /// 7.1 the size of the namespace's own table: 0 until its first
    /// service).
    pub info: Info,
    /// Every scheduler in [`Scheduler::BUILT_IN`], with its availability.
    pub schedulers: Vec<(Scheduler, Availability)>,
    /// Every persistence engine Linux ships (`sip`), with its availability.
    pub persistence_engines: Vec<(PersistenceEngine, Availability)>,
    /// Tunnel type and port of real servers (`IPVS_DEST_ATTR_TUN_TYPE`,
    /// `TUN_PORT`; GUE encapsulation): 5.2.
    pub tunnel_gue: Support,
    /// Tunnel flags (`IPVS_DEST_ATTR_TUN_FLAGS`; GRE encapsulation and the
    /// checksum flags): 5.3.
    pub tunnel_gre_and_flags: Support,
    /// 64-bit statistics (`IPVS_SVC_ATTR_STATS64`, `IPVS_DEST_ATTR_STATS64`):
    /// 4.1.
    pub stats64: Support,
    /// Real servers of the other address family than their service
    /// (`IPVS_DEST_ATTR_ADDR_FAMILY`): 3.18.
    pub mixed_family: Support,
}

/// What the kernel's answers showed: `Some(present)` per attribute when an
/// answer that would carry it was seen.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Seen {
    stats64: Option<bool>,
    tun_type: Option<bool>,
    tun_flags: Option<bool>,
    addr_family: Option<bool>,
}

impl Seen {
    /// Notes the attributes of one destination nest.
    fn destination(&mut self, attrs: &[DestAttr]) {
        let has = |f: fn(&DestAttr) -> bool| Some(attrs.iter().any(f));
        self.tun_type = has(|a| matches!(a, DestAttr::TunType(_)));
        self.tun_flags = has(|a| matches!(a, DestAttr::TunFlags(_)));
        self.addr_family = has(|a| matches!(a, DestAttr::AddrFamily(_)));
        if self.stats64.is_none() {
            self.stats64 = has(|a| matches!(a, DestAttr::Stats64(_)));
        }
    }
}

impl Handle {
    /// Finds out what the running kernel's IPVS can do, changing nothing.
    ///
    /// Reads `uname -r` (`/proc/sys/kernel/osrelease`), asks `GET_INFO`,
    /// checks the module files of every known scheduler and persistence
    /// engine (the kernel-module check: files only, nothing is loaded), dumps
    /// this namespace's service table once, and dumps the real servers of up
    /// to 8 of its services until one has a real server: the attributes the
    /// kernel puts in those answers show which ones it knows. With no service
    /// or no real server to look at, a feature is judged by version
    /// ([`Support::ByVersion`]; the releases are the `KernelVersion` constants). Nothing is created, so nothing is
    /// left behind and no other table is touched; the cost is that of one
    /// [`Handle::list_services`].
    ///
    /// The answer is not kept by the handle: keep it, and ask again after
    /// loading modules.
    ///
    /// ```no_run
    /// use ipvsctl::model::{Scheduler, ServiceKey, VirtualServer};
    /// let ipvs = ipvsctl::Handle::new()?;
    /// let caps = ipvs.capabilities()?;
    /// println!("{} (IPVS {}), GUE tunnels: {}", caps.release, caps.info.version, caps.tunnel_gue);
    /// let vs = VirtualServer::new(ServiceKey::tcp("10.96.0.10:80".parse().unwrap()))
    ///     .with_scheduler(Scheduler::TwoChoice);
    /// caps.check_service(&vs)?; // Error::KernelLacks on 6.1, which has no `twos`
    /// ipvs.add_service(&vs)?;
    /// # Ok::<(), ipvsctl::Error>(())
    /// ```
    pub fn capabilities(&self) -> Result<Capabilities> {
        let info = self.info()?;
        let seen = self.seen_attributes()?;
        let mut req = Requirements::empty();
        for s in Scheduler::BUILT_IN {
            req = req.with_scheduler(s.name()).map_err(module_name_error)?;
        }
        for e in kmod::KERNEL_PERSISTENCE_ENGINES {
            req = req.with_persistence_engine(e).map_err(module_name_error)?;
        }
        let report = kmod::check_with(&req, &CheckConfig::default());
        let release = report.release.release.clone();
        let version = KernelVersion::parse(&release);
        let mut modules = report.modules.iter().map(Availability::of);
        let schedulers = Scheduler::BUILT_IN
            .into_iter()
            .zip(modules.by_ref())
            .collect();
        let persistence_engines = kmod::KERNEL_PERSISTENCE_ENGINES
            .into_iter()
            .map(|e| PersistenceEngine(e.to_owned()))
            .zip(modules)
            .collect();
        Ok(Capabilities {
            release,
            version,
            info,
            schedulers,
            persistence_engines,
            tunnel_gue: Support::judge(seen.tun_type, version, KernelVersion::TUNNEL_GUE),
            tunnel_gre_and_flags: Support::judge(
                seen.tun_flags,
                version,
                KernelVersion::TUNNEL_GRE_AND_FLAGS,
            ),
            stats64: Support::judge(seen.stats64, version, KernelVersion::STATS64),
            mixed_family: Support::judge(seen.addr_family, version, KernelVersion::MIXED_FAMILY),
        })
    }

    /// The attributes seen in this namespace's service dump and in the
    /// first real server of the first few services that have one.
    fn seen_attributes(&self) -> Result<Seen> {
        let mut seen = Seen::default();
        let services = self
            .call(
                Via::Tables,
                request::dump_services(),
                Kind::Dump,
                Target::Global,
                reply::service_from_body,
            )?
            .data;
        if let Some(s) = services.first() {
            seen.stats64 = Some(s.stats.source == StatsSource::Stats64);
        }
        for key in services.iter().take(DEST_SAMPLE).map(|s| s.service.key) {
            if let Some(attrs) = self.first_destination_attrs(&key)? {
                seen.destination(&attrs);
                break;
            }
        }
        Ok(seen)
    }

    /// The raw attributes of the first real server of `key`, if it has one.
    fn first_destination_attrs(&self, key: &ServiceKey) -> Result<Option<Vec<DestAttr>>> {
        let msg = request::dump_dests(key)?;
        let answer = match self.call(
            Via::Main,
            msg,
            Kind::Dump,
            Target::Service(*key),
            frame::decode_message,
        ) {
            Ok(answer) => answer,
            // Deleted since the service dump: look at the next one.
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(answer
            .data
            .into_iter()
            .flat_map(|m| m.attrs)
            .find_map(|a| match a {
                IpvsAttr::Dest(attrs) => Some(attrs),
                _ => None,
            }))
    }
}

/// The crate's own scheduler and engine names are always valid module names.
fn module_name_error(e: kmod::KmodError) -> Error {
    Error::io(
        super::Operation::CheckModules,
        std::io::Error::other(e.to_string()),
    )
}

impl Capabilities {
    /// The availability of a scheduler; [`Availability::Unknown`] for
    /// [`Scheduler::Other`] and [`Scheduler::None`], which are not checked.
    pub fn scheduler(&self, scheduler: &Scheduler) -> Availability {
        self.schedulers
            .iter()
            .find(|(s, _)| s == scheduler)
            .map_or(Availability::Unknown, |(_, a)| *a)
    }

    /// The availability of a persistence engine; [`Availability::Unknown`]
    /// for engines Linux does not ship.
    pub fn persistence_engine(&self, engine: &PersistenceEngine) -> Availability {
        self.persistence_engines
            .iter()
            .find(|(e, _)| e == engine)
            .map_or(Availability::Unknown, |(_, a)| *a)
    }

    /// Refuses a virtual server whose scheduler or persistence engine this
    /// kernel does not have and cannot load ([`Availability::Absent`]), with
    /// [`Error::KernelLacks`]. No syscall; anything not known to be absent
    /// passes, and the kernel has the last word.
    pub fn check_service(&self, vs: &VirtualServer) -> Result<()> {
        if self.scheduler(&vs.scheduler) == Availability::Absent {
            return Err(self.lacks(
                format!("scheduler {:?}", vs.scheduler.name()),
                module_reason(&format!("ip_vs_{}", vs.scheduler.name())),
            ));
        }
        if let Some(pe) = &vs.persistence_engine
            && self.persistence_engine(pe) == Availability::Absent
        {
            return Err(self.lacks(
                format!("persistence engine {:?}", pe.name()),
                module_reason(&format!("ip_vs_pe_{}", pe.name())),
            ));
        }
        Ok(())
    }

    /// Refuses a real server with tunnel settings this kernel would ignore
    /// (GUE before 5.2; GRE or tunnel flags before 5.3: the kernel would
    /// forward plain IP-in-IP), with [`Error::KernelLacks`]. No syscall.
    pub fn check_destination(&self, rs: &RealServer) -> Result<()> {
        let ForwardMethod::Tunnel(tunnel) = rs.forward else {
            return Ok(());
        };
        let (feature, support) = match tunnel.encap {
            TunnelEncap::Gre => ("GRE tunnels", self.tunnel_gre_and_flags),
            _ if tunnel.flags != TunnelFlags::empty() => {
                ("tunnel flags", self.tunnel_gre_and_flags)
            }
            TunnelEncap::Gue { .. } => ("GUE tunnels", self.tunnel_gue),
            TunnelEncap::Ipip => return Ok(()),
        };
        if support.is_available() == Some(false) {
            return Err(self.lacks(
                feature.to_owned(),
                format!("{support}; the kernel would ignore the setting and use IP-in-IP"),
            ));
        }
        Ok(())
    }

    fn lacks(&self, feature: String, reason: String) -> Error {
        Error::KernelLacks {
            feature,
            kernel: self.release.clone(),
            reason,
        }
    }
}

/// Why a module counts as absent.
fn module_reason(module: &str) -> String {
    format!(
        "module {module} is not built in, not loaded, and not in the running kernel's modules.dep"
    )
}

impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "kernel {} (IPVS {}, connection table {})",
            self.release, self.info.version, self.info.conn_tab_size
        )?;
        let list = |items: Vec<(&str, Availability)>| {
            items
                .into_iter()
                .map(|(n, a)| format!("{n}={}", label(a)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let scheds = self
            .schedulers
            .iter()
            .map(|(s, a)| (s.name(), *a))
            .collect();
        let engines = self
            .persistence_engines
            .iter()
            .map(|(e, a)| (e.name(), *a))
            .collect();
        writeln!(f, "schedulers: {}", list(scheds))?;
        writeln!(f, "persistence engines: {}", list(engines))?;
        writeln!(f, "GUE tunnels: {}", self.tunnel_gue)?;
        writeln!(
            f,
            "GRE tunnels, tunnel flags: {}",
            self.tunnel_gre_and_flags
        )?;
        writeln!(f, "64-bit statistics: {}", self.stats64)?;
        write!(f, "mixed-family real servers: {}", self.mixed_family)
    }
}

fn label(a: Availability) -> &'static str {
    match a {
        Availability::Present => "present",
        Availability::Loadable => "loadable",
        Availability::Absent => "absent",
        Availability::Unknown => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse_by_their_leading_version() {
        let cases = [
            ("6.1.0-18-amd64", Some((6, 1, 0))),
            ("6.12.117+deb12-amd64", Some((6, 12, 117))),
            ("5.14.0-362.8.1.el9_3.x86_64", Some((5, 14, 0))),
            ("4.18.0-553.el8_10.x86_64", Some((4, 18, 0))),
            ("7.2.0-rc1", Some((7, 2, 0))),
            ("7.2-rc1", Some((7, 2, 0))),
            ("6.8", Some((6, 8, 0))),
            ("5.15.0-91-generic", Some((5, 15, 0))),
            ("6", None),
            ("6.", None),
            ("", None),
            ("linux-6.1", None),
            ("99999999999.1", None),
        ];
        for (release, want) in cases {
            let got = KernelVersion::parse(release).map(|v| (v.major, v.minor, v.patch));
            assert_eq!(got, want, "{release:?}");
        }
    }

    #[test]
    fn versions_order_numerically_not_textually() {
        assert!(KernelVersion::new(6, 12, 0) > KernelVersion::new(6, 7, 0));
        assert!(KernelVersion::new(6, 1, 192) < KernelVersion::new(6, 7, 0));
        assert!(KernelVersion::new(10, 0, 0) > KernelVersion::new(9, 99, 99));
        assert_eq!(
            KernelVersion::parse("6.12"),
            KernelVersion::parse("6.12.0-1")
        );
    }

    #[test]
    fn answers_outweigh_the_version() {
        let old = Some(KernelVersion::new(4, 18, 0));
        let new = Some(KernelVersion::new(6, 1, 0));
        let gue = KernelVersion::TUNNEL_GUE;
        assert_eq!(Support::judge(Some(true), old, gue), Support::Seen);
        assert_eq!(Support::judge(Some(false), new, gue), Support::NotSent);
        assert_eq!(
            Support::judge(None, new, gue),
            Support::ByVersion { since: gue }
        );
        assert_eq!(
            Support::judge(None, old, gue),
            Support::BeforeVersion { since: gue }
        );
        assert_eq!(Support::judge(None, None, gue), Support::Unknown);
        assert_eq!(Support::Unknown.is_available(), None);
    }

    fn caps(twos: Availability, gue: Support, gre: Support) -> Capabilities {
        let schedulers = Scheduler::BUILT_IN
            .into_iter()
            .map(|s| {
                let a = if s == Scheduler::TwoChoice {
                    twos
                } else {
                    Availability::Present
                };
                (s, a)
            })
            .collect();
        Capabilities {
            release: "6.1.0-18-amd64".into(),
            version: KernelVersion::parse("6.1.0-18-amd64"),
            info: Info {
                version: crate::model::Version(0x010201),
                conn_tab_size: 4096,
            },
            schedulers,
            persistence_engines: vec![(PersistenceEngine::sip(), Availability::Absent)],
            tunnel_gue: gue,
            tunnel_gre_and_flags: gre,
            stats64: Support::Seen,
            mixed_family: Support::Seen,
        }
    }

    fn service(s: Scheduler) -> VirtualServer {
        VirtualServer::new(ServiceKey::tcp("192.0.2.1:80".parse().unwrap())).with_scheduler(s)
    }

    fn tunnelled(t: crate::model::Tunnel) -> RealServer {
        RealServer::new("198.51.100.1:80".parse().unwrap()).with_forward(ForwardMethod::Tunnel(t))
    }

    #[test]
    fn only_an_absent_scheduler_or_engine_is_refused() {
        let c = caps(Availability::Absent, Support::Seen, Support::Seen);
        let err = c.check_service(&service(Scheduler::TwoChoice)).unwrap_err();
        assert!(
            matches!(&err, Error::KernelLacks { feature, kernel, .. }
                if feature == "scheduler \"twos\"" && kernel == "6.1.0-18-amd64"),
            "{err:?}"
        );
        assert!(err.to_string().contains("ip_vs_twos"), "{err}");
        c.check_service(&service(Scheduler::RoundRobin)).unwrap();
        c.check_service(&service(Scheduler::Other("mine".into())))
            .unwrap();
        let sip = service(Scheduler::RoundRobin).with_persistence_engine(PersistenceEngine::sip());
        assert!(matches!(
            c.check_service(&sip),
            Err(Error::KernelLacks { .. })
        ));
        for a in [Availability::Unknown, Availability::Loadable] {
            let c = caps(a, Support::Seen, Support::Seen);
            c.check_service(&service(Scheduler::TwoChoice)).unwrap();
        }
    }

    #[test]
    fn tunnels_the_kernel_would_ignore_are_refused() {
        use crate::model::Tunnel;
        let before = |v| Support::BeforeVersion { since: v };
        let old = caps(
            Availability::Present,
            before(KernelVersion::TUNNEL_GUE),
            before(KernelVersion::TUNNEL_GRE_AND_FLAGS),
        );
        for t in [Tunnel::gue(6080), Tunnel::gre()] {
            assert!(matches!(
                old.check_destination(&tunnelled(t)),
                Err(Error::KernelLacks { .. })
            ));
        }
        old.check_destination(&tunnelled(Tunnel::IPIP)).unwrap();
        // 5.2: GUE without flags passes, GRE and GUE with flags do not.
        let v52 = caps(Availability::Present, Support::Seen, Support::NotSent);
        v52.check_destination(&tunnelled(Tunnel::gue(6080)))
            .unwrap();
        let mut flagged = Tunnel::gue(6080);
        flagged.flags = TunnelFlags::from_bits_retain(1);
        assert!(v52.check_destination(&tunnelled(flagged)).is_err());
        assert!(v52.check_destination(&tunnelled(Tunnel::gre())).is_err());
        let unknown = caps(Availability::Present, Support::Unknown, Support::Unknown);
        unknown
            .check_destination(&tunnelled(Tunnel::gre()))
            .unwrap();
    }

    #[test]
    fn a_module_is_absent_only_when_modules_dep_was_read() {
        let root = std::env::temp_dir().join(format!("ipvsctl-caps-{}", std::process::id()));
        let dir = root.join("lib/modules/6.1.0");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(root.join("proc")).unwrap();
        std::fs::write(dir.join("modules.builtin"), "").unwrap();
        std::fs::write(
            dir.join("modules.dep"),
            "kernel/net/netfilter/ipvs/ip_vs_rr.ko:\n",
        )
        .unwrap();
        std::fs::write(root.join("proc/modules"), "").unwrap();
        let req = Requirements::empty()
            .with_scheduler("rr")
            .and_then(|r| r.with_scheduler("twos"))
            .unwrap();
        let verdicts = |roots: kmod::Roots| {
            let cfg = CheckConfig {
                roots,
                release: Some("6.1.0".into()),
            };
            let report = kmod::check_with(&req, &cfg);
            report
                .modules
                .iter()
                .map(Availability::of)
                .collect::<Vec<_>>()
        };
        let seen = verdicts(kmod::Roots::under(&root));
        let unseen = verdicts(kmod::Roots::under(root.join("nonexistent")));
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(seen, [Availability::Loadable, Availability::Absent]);
        assert_eq!(unseen, [Availability::Unknown, Availability::Unknown]);
    }
}
