//! Connection-tracking cleanup over ctnetlink: read and delete the
//! conntrack entries of a service, of one real server behind it, or of a
//! whole virtual address.
//!
//! When a UDP or SCTP real server goes away, the conntrack entries that
//! still map clients to it keep sending their packets there: a client that
//! keeps its source port (a DNS resolver, a game, a tunnel) is
//! black-holed until the entry expires, since every packet refreshes it.
//! kube-proxy therefore deletes the entries of every removed UDP endpoint
//! (`conntrack -D --orig-dst VIP -p udp --dport PORT`, and with `--dst-nat
//! ENDPOINT` for one endpoint). A [`Conntrack`] does the same without a
//! `conntrack` binary: one dump of the table, matched against [`Filter`]s
//! in this process, then one delete per selected entry, pipelined (many per
//! datagram), each carrying the entry's id so that only the entry that was
//! read goes, never a newer one that reuses its tuple.
//!
//! Every entry found is accounted for in the [`DeleteReport`]: deleted,
//! already gone (`ENOENT`: it expired between the dump and the delete; not
//! an error), or failed with the reason. Filters are checked before
//! anything is sent ([`ConntrackError::InvalidFilter`] names the field);
//! TCP entries are deleted only when the filter says so
//! ([`Filter::allow_tcp`]).
//!
//! Needs `CAP_NET_ADMIN` over the namespace, for reading too
//! ([`ConntrackError::PermissionDenied`]). A kernel without ctnetlink is
//! [`ConntrackError::Unsupported`], never an empty table; asking loads
//! `nf_conntrack_netlink` (and `nf_conntrack`) where the kernel can load
//! modules. A namespace where nothing uses conntrack (no iptables or
//! nftables rule, no NAT, no IPVS FTP service registered its hooks) has an
//! empty table: IPVS's `net.ipv4.vs.conntrack=1` keeps conntrack entries
//! up to date only where conntrack is on.
//!
//! The table read and changed is the namespace of the calling thread, or a
//! pinned one ([`Conntrack::netns`], e.g. a [`Handle`](crate::Handle)'s).
//!
//! ```no_run
//! use ipvsctl::conntrack::{Conntrack, Filter};
//! use ipvsctl::model::ServiceKey;
//!
//! let dns = ServiceKey::udp("10.96.0.10:53".parse()?);
//! let ct = Conntrack::new();
//! // A real server was removed from the service: its clients start over.
//! let report = ct.delete(&Filter::real_server(&dns, "10.244.1.7:53".parse()?)?)?;
//! println!("{} deleted, {} already gone", report.total.deleted, report.total.already_gone);
//! for failure in &report.failed {
//!     eprintln!("{failure}");
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(any(test, feature = "unstable"))]
pub(crate) mod create;
mod error;
mod filter;
mod io;
mod report;

use crate::Timeout;
use crate::codec::conntrack::{AF_UNSPEC, CtRequest};
use crate::model::AddressFamily;
use crate::netlink::netns::{NetNs, PinnedNetNs};
use crate::netlink::{Failure, Kind};

pub use crate::codec::conntrack::{Counters, Entry, Tuple};
pub use error::ConntrackError;
pub use filter::Filter;
pub use report::{Counts, DeleteFailure, DeleteFailureReason, DeleteReport};

/// The conntrack table of a network namespace.
///
/// Cheap to clone; holds no socket (each call opens one and closes it).
#[derive(Clone, Debug)]
pub struct Conntrack {
    netns: NetNs,
    timeout: Timeout,
}

impl Default for Conntrack {
    fn default() -> Self {
        Conntrack::new()
    }
}

impl Conntrack {
    /// The table of the namespace of the thread that calls, at each call.
    pub fn new() -> Self {
        Conntrack {
            netns: NetNs::Current,
            timeout: Timeout::ROUTE_DEFAULT,
        }
    }

    /// Works in the pinned namespace `netns` ([`NetNs::pin`], or
    /// [`crate::Handle::netns`] for the namespace of a handle's IPVS table).
    ///
    /// ```no_run
    /// use ipvsctl::{Handle, HandleOptions, NetNs};
    /// use ipvsctl::conntrack::Conntrack;
    ///
    /// let ipvs = Handle::open(&NetNs::named("lb"), &HandleOptions::new())?;
    /// let ct = Conntrack::new().netns(ipvs.netns().clone());
    /// # drop(ct);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn netns(mut self, netns: PinnedNetNs) -> Self {
        self.netns = NetNs::Pinned(netns);
        self
    }

    /// Waits at most `timeout` for each answer of the kernel (default
    /// [`Timeout::ROUTE_DEFAULT`], 10 s); a silent kernel is
    /// [`ConntrackError::Timeout`] for a dump, and a failed entry
    /// ([`DeleteFailureReason::TimedOut`]) for a delete.
    pub fn timeout(mut self, timeout: Timeout) -> Self {
        self.timeout = timeout;
        self
    }

    /// The namespace worked in: [`NetNs::Pinned`] once set with
    /// [`Conntrack::netns`], else [`NetNs::Current`].
    pub fn namespace(&self) -> &NetNs {
        &self.netns
    }

    /// The entries `filter` selects, from one dump of the table.
    ///
    /// ```no_run
    /// use ipvsctl::conntrack::{Conntrack, Filter};
    /// use ipvsctl::model::ServiceKey;
    ///
    /// let svc = Filter::service(&ServiceKey::udp("10.96.0.10:53".parse()?))?;
    /// for e in Conntrack::new().entries(&svc)? {
    ///     println!("{}:{} -> {}:{} via {}:{} ({:?} s left)",
    ///         e.orig.src, e.orig.src_port, e.orig.dst, e.orig.dst_port,
    ///         e.reply.src, e.reply.src_port, e.timeout);
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn entries(&self, filter: &Filter) -> Result<Vec<Entry>, ConntrackError> {
        let mut ctnl = io::Ctnl::open(&self.netns, self.timeout)?;
        let (mut entries, _) = io::dump(&mut ctnl, dump_family(std::slice::from_ref(filter)))?;
        entries.retain(|e| filter.matches(e));
        Ok(entries)
    }

    /// Deletes the entries `filter` selects (see [`Conntrack::delete_all`]).
    pub fn delete(&self, filter: &Filter) -> Result<DeleteReport, ConntrackError> {
        self.delete_all(std::slice::from_ref(filter))
    }

    /// Deletes the entries any of `filters` selects, in one pass: the
    /// filters are checked (a TCP filter needs [`Filter::allow_tcp`]), the
    /// table is dumped once, and every selected entry gets one delete,
    /// pipelined. The report counts per filter and in total; an `Err` means
    /// nothing was deleted (the filters were refused, or the dump failed).
    ///
    /// ```no_run
    /// use ipvsctl::conntrack::{Conntrack, Filter};
    /// use ipvsctl::model::ServiceKey;
    ///
    /// let dns = ServiceKey::udp("10.96.0.10:53".parse()?);
    /// let gone = ServiceKey::sctp("10.96.0.20:3868".parse()?);
    /// let report = Conntrack::new().delete_all(&[
    ///     Filter::real_server(&dns, "10.244.1.7:53".parse()?)?,
    ///     Filter::service(&gone)?,
    /// ])?;
    /// assert_eq!(report.per_filter.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn delete_all(&self, filters: &[Filter]) -> Result<DeleteReport, ConntrackError> {
        for f in filters {
            f.check_delete()?;
        }
        let mut report = DeleteReport {
            per_filter: vec![Counts::default(); filters.len()],
            ..DeleteReport::default()
        };
        if filters.is_empty() {
            return Ok(report);
        }
        let mut ctnl = io::Ctnl::open(&self.netns, self.timeout)?;
        let (entries, dumps) = io::dump(&mut ctnl, dump_family(filters))?;
        report.dumps = dumps;
        // Each selected entry once, with the filters that select it.
        let mut selected: Vec<(Entry, Vec<usize>)> = Vec::new();
        for e in entries {
            let by: Vec<usize> = (0..filters.len())
                .filter(|&i| filters[i].matches(&e))
                .collect();
            if !by.is_empty() {
                selected.push((e, by));
            }
        }
        for (_, by) in &selected {
            report.total.found += 1;
            for &i in by {
                report.per_filter[i].found += 1;
            }
        }
        let requests = selected
            .iter()
            .enumerate()
            .map(|(i, (e, _))| (CtRequest::Delete(e), Kind::Quiet, i));
        let mut outcomes: Vec<Option<Result<(), Failure>>> = std::iter::repeat_with(|| None)
            .take(selected.len())
            .collect();
        let sent = ctnl.run(
            requests,
            |_, _| Ok(()),
            |_, i, reply| outcomes[i] = Some(reply.result),
        );
        for ((entry, by), outcome) in selected.into_iter().zip(outcomes) {
            let failure = match (&sent, outcome) {
                (_, Some(Ok(()))) => None,
                (_, Some(Err(Failure::Kernel(e)))) if e.errno() == io::ENOENT => {
                    report.total.already_gone += 1;
                    for &i in &by {
                        report.per_filter[i].already_gone += 1;
                    }
                    continue;
                }
                (_, Some(Err(f))) => Some(reason(f)),
                (Err(e), None) => Some(DeleteFailureReason::Other(format!(
                    "not sent or not answered: {e}"
                ))),
                (Ok(()), None) => Some(DeleteFailureReason::Other("no outcome".into())),
            };
            match failure {
                None => {
                    report.total.deleted += 1;
                    for &i in &by {
                        report.per_filter[i].deleted += 1;
                    }
                }
                Some(reason) => {
                    report.total.failed += 1;
                    for &i in &by {
                        report.per_filter[i].failed += 1;
                    }
                    report.failed.push(DeleteFailure { entry, reason });
                }
            }
        }
        Ok(report)
    }
}

/// Why a delete failed, from the pipeline's outcome.
fn reason(f: Failure) -> DeleteFailureReason {
    match f {
        Failure::Kernel(e) => DeleteFailureReason::Kernel {
            errno: e.errno(),
            message: e.message,
        },
        Failure::Lost | Failure::Unanswered => DeleteFailureReason::Lost,
        Failure::TimedOut { waited } => DeleteFailureReason::TimedOut { waited },
        other => DeleteFailureReason::Other(format!("{other:?}")),
    }
}

/// The family to dump: the filters' one, or all when they have both.
fn dump_family(filters: &[Filter]) -> u8 {
    let mut families = filters.iter().map(Filter::family);
    let Some(first) = families.next() else {
        return AF_UNSPEC;
    };
    if families.all(|f| f == first) {
        match first {
            AddressFamily::Inet => 2,
            AddressFamily::Inet6 => 10,
        }
    } else {
        AF_UNSPEC
    }
}

#[cfg(test)]
mod tests;
