//! Connection-tracking cleanup after a sync's deletes
//! ([`SyncOptions::conntrack_cleanup`](super::SyncOptions::conntrack_cleanup)).
//!
//! A UDP or SCTP client that keeps its source port keeps hitting the
//! conntrack entry that maps it to a real server, even once IPVS has
//! deleted that real server. The syncer therefore selects, for every
//! acknowledged delete of a UDP or SCTP real server or service, the
//! entries that still lead there, and deletes them in one pass once the
//! sync's IPVS writes are done. TCP is left alone: a TCP client opens a
//! new connection (a new tuple) when its peer goes away.

use crate::batch::Write;
use crate::conntrack::{ConntrackError, DeleteReport, Filter};
use crate::model::{Protocol, ServiceKey};

/// How many syncs in a row try a cleanup whose dump or deletes failed in a
/// way another try can fix (a lost answer, a timeout, a socket error).
/// The entries time out on their own eventually; this bounds the work.
const ATTEMPTS: u8 = 3;

/// The cleanup of one sync: what was selected and what the kernel did.
#[derive(Debug)]
#[non_exhaustive]
pub struct FlowCleanup {
    /// The selections made from the sync's acknowledged deletes (and from
    /// earlier syncs' cleanups that are being tried again), in the order
    /// the report's `per_filter` counts follow.
    pub filters: Vec<Filter>,
    /// The deletes (every entry found is deleted, already gone or failed),
    /// or why nothing was deleted. Failures another try can fix are tried
    /// again by the next syncs (up to three tries in all).
    pub result: Result<DeleteReport, ConntrackError>,
}

impl FlowCleanup {
    /// Whether every selected entry is gone.
    pub fn is_ok(&self) -> bool {
        self.result.as_ref().is_ok_and(DeleteReport::is_ok)
    }
}

/// The selection an acknowledged write calls for, if any: the real server's
/// entries for a deleted UDP or SCTP real server, the service's for a
/// deleted UDP or SCTP service. Firewall-mark services have no address to
/// select by; a real server of an all-ports service (port 0) has no port.
pub(crate) fn selection(write: &Write) -> Option<Filter> {
    match write {
        Write::DeleteDestination(key, real) if cleans(key) => Filter::real_server(key, *real).ok(),
        Write::DeleteService(key) if cleans(key) => match *key {
            ServiceKey::Addr { protocol, addr } if addr.port() == 0 => {
                Filter::vip(addr.ip(), &[protocol]).ok()
            }
            _ => Filter::service(key).ok(),
        },
        _ => None,
    }
}

fn cleans(key: &ServiceKey) -> bool {
    matches!(
        key,
        ServiceKey::Addr {
            protocol: Protocol::Udp | Protocol::Sctp,
            ..
        }
    )
}

/// Selections waiting for their cleanup, with the tries left.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    filters: Vec<(Filter, u8)>,
}

impl Pending {
    /// Adds a selection from this sync's writes.
    pub(crate) fn push(&mut self, filter: Filter) {
        if !self.filters.iter().any(|(f, _)| *f == filter) {
            self.filters.push((filter, ATTEMPTS));
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }

    /// Runs the cleanup with `delete` (one dump, pipelined deletes) and
    /// keeps for the next sync the selections another try may still fix.
    pub(crate) fn run(
        &mut self,
        delete: impl FnOnce(&[Filter]) -> Result<DeleteReport, ConntrackError>,
    ) -> FlowCleanup {
        let (filters, tries): (Vec<Filter>, Vec<u8>) =
            std::mem::take(&mut self.filters).into_iter().unzip();
        let result = delete(&filters);
        let again: Vec<bool> = match &result {
            Ok(report) => report
                .per_filter
                .iter()
                .map(|counts| counts.failed > 0)
                .chain(std::iter::repeat(false))
                .take(filters.len())
                .collect(),
            Err(e) => vec![retryable(e); filters.len()],
        };
        for ((filter, left), again) in filters.iter().zip(tries).zip(again) {
            if again && left > 1 {
                self.filters.push((filter.clone(), left - 1));
            }
        }
        FlowCleanup { filters, result }
    }
}

/// Whether another try may succeed: not for a refused filter, a kernel
/// without ctnetlink or a missing permission.
fn retryable(e: &ConntrackError) -> bool {
    !matches!(
        e,
        ConntrackError::InvalidFilter { .. }
            | ConntrackError::Unsupported { .. }
            | ConntrackError::PermissionDenied { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AddressFamily, ServiceKey};
    use std::io;

    fn udp() -> ServiceKey {
        ServiceKey::udp("10.96.0.10:53".parse().unwrap())
    }

    #[test]
    fn udp_and_sctp_deletes_are_selected_tcp_and_fwmark_ones_are_not() {
        let real = "10.244.0.1:53".parse().unwrap();
        let sctp = ServiceKey::sctp("10.96.0.11:3868".parse().unwrap());
        let tcp = ServiceKey::tcp("10.96.0.12:80".parse().unwrap());
        let mark = ServiceKey::fwmark(7, AddressFamily::Inet);
        assert_eq!(
            selection(&Write::DeleteDestination(udp(), real)),
            Some(Filter::real_server(&udp(), real).unwrap())
        );
        assert_eq!(
            selection(&Write::DeleteService(sctp)),
            Some(Filter::service(&sctp).unwrap())
        );
        assert_eq!(selection(&Write::DeleteService(tcp)), None);
        assert_eq!(selection(&Write::DeleteDestination(tcp, real)), None);
        assert_eq!(selection(&Write::DeleteService(mark)), None);
        assert_eq!(
            selection(&Write::AddDestination(
                udp(),
                crate::model::RealServer::new(real)
            )),
            None
        );
    }

    #[test]
    fn an_all_ports_service_is_selected_by_its_address() {
        let all = ServiceKey::udp("10.96.0.10:0".parse().unwrap());
        assert_eq!(
            selection(&Write::DeleteService(all)),
            Some(Filter::vip("10.96.0.10".parse().unwrap(), &[Protocol::Udp]).unwrap())
        );
        // Its real servers have no port to select by.
        let real = "10.244.0.1:0".parse().unwrap();
        assert_eq!(selection(&Write::DeleteDestination(all, real)), None);
    }

    #[test]
    fn a_failed_dump_is_tried_again_by_the_next_two_syncs_only() {
        let mut pending = Pending::default();
        pending.push(Filter::service(&udp()).unwrap());
        pending.push(Filter::service(&udp()).unwrap());
        let fail = |_: &[Filter]| {
            Err(ConntrackError::Socket(io::Error::from_raw_os_error(
                libc_enobufs(),
            )))
        };
        for _ in 0..ATTEMPTS {
            assert!(!pending.is_empty());
            let cleanup = pending.run(fail);
            assert_eq!(cleanup.filters.len(), 1, "a selection is kept once");
            assert!(!cleanup.is_ok());
        }
        assert!(pending.is_empty());
    }

    #[test]
    fn a_missing_ctnetlink_is_not_tried_again() {
        let mut pending = Pending::default();
        pending.push(Filter::service(&udp()).unwrap());
        pending.run(|_| {
            Err(ConntrackError::Unsupported {
                detail: "EPROTONOSUPPORT".into(),
            })
        });
        assert!(pending.is_empty());
    }

    #[test]
    fn only_the_filters_with_failed_entries_are_kept() {
        let mut pending = Pending::default();
        let a = Filter::service(&udp()).unwrap();
        let b = Filter::real_server(&udp(), "10.244.0.2:53".parse().unwrap()).unwrap();
        pending.push(a);
        pending.push(b.clone());
        let cleanup = pending.run(|filters| {
            let mut report = DeleteReport {
                per_filter: vec![Default::default(); filters.len()],
                ..DeleteReport::default()
            };
            report.per_filter[1].failed = 1;
            Ok(report)
        });
        assert_eq!(cleanup.filters.len(), 2);
        let again = pending.run(|filters| {
            assert_eq!(filters, std::slice::from_ref(&b));
            Ok(DeleteReport::default())
        });
        assert_eq!(again.filters, [b]);
        assert!(pending.is_empty());
    }

    fn libc_enobufs() -> i32 {
        105
    }
}
