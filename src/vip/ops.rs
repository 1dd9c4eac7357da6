//! The I/O of [`VipDevice`]: the device requests, the address dump, and the
//! address changes, all through the crate's one request pipeline on an
//! rtnetlink socket ([`Rtnl`]).

use std::io;

use ipnetwork::IpNetwork;

use super::error::{AddressFailure, Change, VipError};
use super::report::VipReport;
use super::{
    BRING_UP, CHANGE_ADDRESSES, CREATE_DEVICE, EADDRNOTAVAIL, EEXIST, ENOBUFS, ENODEV, READ_DEVICE,
    VipDevice,
};
use crate::codec::DecodeError;
use crate::codec::frame::NlError;
use crate::codec::route::{self, RTM_NEWLINK, RouteRequest, link::Link};
use crate::netlink::{Failure, Kind, Reply};
use crate::nodeips::Family;
use crate::nodeips::dump::{Rtnl, dump_addresses};

impl VipDevice {
    pub(super) fn open(&self) -> Result<Rtnl, VipError> {
        Rtnl::open(&self.netns, self.timeout).map_err(|source| VipError::Socket {
            device: self.name.clone(),
            source,
        })
    }

    /// The device as a dummy that is up, created if missing; whether it was
    /// created, whether it was brought up.
    pub(super) fn ensure(&self, rtnl: &mut Rtnl) -> Result<(Link, bool, bool), VipError> {
        if let Some(link) = self.get_link(rtnl)? {
            let link = self.check_dummy(link)?;
            if link.flags & route::link::IFF_UP != 0 {
                return Ok((link, false, false));
            }
            self.bring_up(rtnl, link.index)?;
            return Ok((link, false, true));
        }
        let created = match self.request(rtnl, route::create_dummy(&self.name), CREATE_DEVICE)? {
            Ok(_) => true,
            // Created by someone else since the lookup: check it as found.
            Err(err) if err.errno() == EEXIST => false,
            Err(err) => return Err(self.kernel(CREATE_DEVICE, &err)),
        };
        let link = self
            .get_link(rtnl)?
            .ok_or_else(|| self.kernel(READ_DEVICE, &errno_error(ENODEV)))?;
        let link = self.check_dummy(link)?;
        if !created && link.flags & route::link::IFF_UP == 0 {
            // Someone else's fresh dummy of that name, still down.
            self.bring_up(rtnl, link.index)?;
            return Ok((link, false, true));
        }
        Ok((link, created, false))
    }

    /// Sets `IFF_UP` on interface `index`.
    fn bring_up(&self, rtnl: &mut Rtnl, index: u32) -> Result<(), VipError> {
        match self.request(rtnl, route::set_up(index), BRING_UP)? {
            Ok(_) => Ok(()),
            Err(err) => Err(self.kernel(BRING_UP, &err)),
        }
    }

    pub(super) fn check_dummy(&self, link: Link) -> Result<Link, VipError> {
        if link.kind.as_deref() == Some("dummy") {
            Ok(link)
        } else {
            Err(VipError::NotDummy {
                device: self.name.clone(),
                kind: link.kind,
            })
        }
    }

    /// The device's link message, `None` when there is no such device.
    pub(super) fn get_link(&self, rtnl: &mut Rtnl) -> Result<Option<Link>, VipError> {
        match self.request(rtnl, route::get_link(&self.name), READ_DEVICE)? {
            Ok(links) => Ok(links
                .into_iter()
                .flatten()
                .find(|link| link.name == self.name)),
            Err(err) if err.errno() == ENODEV => Ok(None),
            Err(err) => Err(self.kernel(READ_DEVICE, &err)),
        }
    }

    /// The addresses on interface `index`, from one address dump.
    pub(super) fn read(&self, rtnl: &mut Rtnl, index: u32) -> Result<Vec<IpNetwork>, VipError> {
        let records = dump_addresses(rtnl, Family::Both).map_err(|source| VipError::Read {
            device: self.name.clone(),
            source,
        })?;
        Ok(records
            .iter()
            .filter(|r| r.index == index)
            .filter_map(|r| IpNetwork::new(r.local_address()?, r.prefix_len).ok())
            .collect())
    }

    /// Sends one request and waits for its answer: its link messages when
    /// the kernel accepted it, the kernel's error otherwise. An answer the
    /// kernel never gave, or gave unreadable, is an error of its own.
    fn request(
        &self,
        rtnl: &mut Rtnl,
        request: RouteRequest,
        what: &'static str,
    ) -> Result<Result<Vec<Option<Link>>, NlError>, VipError> {
        let mut answer = None;
        rtnl.run(
            [(request, Kind::Ack, ())],
            |(), kind, payload| decode_link(kind, payload),
            |_, (), reply| answer = Some(reply),
        )
        .map_err(|source| self.io(what, source))?;
        let reply = answer.ok_or_else(|| self.io(what, io::Error::other("no outcome")))?;
        match reply.result {
            Ok(()) => Ok(Ok(reply.data)),
            Err(Failure::Kernel(err)) => Ok(Err(err)),
            Err(failure) => Err(self.unanswered(what, failure)),
        }
    }

    /// Sends the address changes of `changes`, pipelined, and puts each
    /// outcome in the report. A change whose answer the kernel dropped (a
    /// receive-buffer overrun) is settled by reading the device's addresses
    /// again: done if the device shows it done, failed otherwise.
    pub(super) fn apply(
        &self,
        rtnl: &mut Rtnl,
        index: u32,
        changes: &[(Change, IpNetwork)],
        report: &mut VipReport,
    ) -> Result<(), VipError> {
        let requests = changes.iter().map(|(change, net)| {
            let request = match change {
                Change::Add => route::add_address(index, *net),
                Change::Remove => route::remove_address(index, *net),
            };
            (request, Kind::Ack, (*change, *net))
        });
        let mut unknown = Vec::new();
        let mut timed_out = None;
        rtnl.run(
            requests,
            |_, _, _| Ok(()),
            |_, (change, net), reply: Reply<()>| match reply.result {
                Ok(()) => report.record(change, net),
                // Gone already: what was wanted.
                Err(Failure::Kernel(err))
                    if change == Change::Remove && err.errno() == EADDRNOTAVAIL =>
                {
                    report.record(change, net)
                }
                Err(Failure::Kernel(err)) => report.failed.push(AddressFailure {
                    device: self.name.clone(),
                    change,
                    addr: net,
                    error: io::Error::from_raw_os_error(err.errno()),
                    message: err.message,
                }),
                Err(Failure::TimedOut { waited }) => {
                    timed_out.get_or_insert(waited);
                }
                Err(_) => unknown.push((change, net)),
            },
        )
        .map_err(|source| self.io(CHANGE_ADDRESSES, source))?;
        if let Some(waited) = timed_out {
            return Err(VipError::Timeout {
                device: self.name.clone(),
                request: CHANGE_ADDRESSES,
                waited,
            });
        }
        if !unknown.is_empty() {
            self.settle(rtnl, index, &unknown, report);
        }
        Ok(())
    }

    /// Settles changes whose answers were dropped by what the device holds
    /// now: an add whose address is there and a remove whose address is gone
    /// are done; the others failed, and so do all of them if the device
    /// cannot be read.
    fn settle(
        &self,
        rtnl: &mut Rtnl,
        index: u32,
        unknown: &[(Change, IpNetwork)],
        report: &mut VipReport,
    ) {
        let held = self.read(rtnl, index);
        for &(change, net) in unknown {
            match unknown_outcome(change, net, held.as_deref()) {
                None => report.record(change, net),
                Some(message) => report.failed.push(AddressFailure {
                    device: self.name.clone(),
                    change,
                    addr: net,
                    error: io::Error::from_raw_os_error(ENOBUFS),
                    message: Some(message),
                }),
            }
        }
    }

    /// The error for a request the kernel did not answer readably.
    fn unanswered(&self, what: &'static str, failure: Failure) -> VipError {
        match failure {
            Failure::TimedOut { waited } => VipError::Timeout {
                device: self.name.clone(),
                request: what,
                waited,
            },
            Failure::Decode(e) => self.io(what, io::Error::other(format!("malformed answer: {e}"))),
            other => self.io(
                what,
                io::Error::other(format!("the kernel's answer was lost: {other:?}")),
            ),
        }
    }

    pub(super) fn kernel(&self, request: &'static str, err: &NlError) -> VipError {
        VipError::Kernel {
            device: self.name.clone(),
            request,
            source: io::Error::from_raw_os_error(err.errno()),
            message: err.message.clone(),
        }
    }

    pub(super) fn io(&self, request: &'static str, source: io::Error) -> VipError {
        VipError::Io {
            device: self.name.clone(),
            request,
            source,
        }
    }
}

/// How a change whose answer was dropped ended, by the device's addresses
/// read afterwards (`held`): `None` when they show it done, else why it
/// counts as failed.
fn unknown_outcome(
    change: Change,
    net: IpNetwork,
    held: Result<&[IpNetwork], &VipError>,
) -> Option<String> {
    const DROPPED: &str = "the kernel's answer was dropped (receive buffer overrun)";
    match held {
        Ok(held) if held.contains(&net) == (change == Change::Add) => None,
        Ok(_) if change == Change::Add => Some(format!(
            "{DROPPED}; the device read afterwards does not hold it"
        )),
        Ok(_) => Some(format!(
            "{DROPPED}; the device read afterwards still holds it"
        )),
        Err(e) => Some(format!("{DROPPED} and reading the device failed: {e}")),
    }
}

/// A link message of an answer decoded; other messages are skipped.
fn decode_link(kind: u16, payload: &[u8]) -> Result<Option<Link>, DecodeError> {
    if kind == RTM_NEWLINK {
        route::link::decode(payload).map(Some)
    } else {
        Ok(None)
    }
}

impl VipReport {
    /// A change the kernel made (or found made).
    fn record(&mut self, change: Change, net: IpNetwork) {
        match change {
            Change::Add => self.added.push(net),
            Change::Remove => self.removed.push(net),
        }
    }
}

/// An error answer with `errno`, for the cases decided here.
pub(super) fn errno_error(errno: i32) -> NlError {
    NlError {
        code: -errno,
        ..NlError::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_whose_answer_was_dropped_is_settled_by_the_re_read() {
        let net: IpNetwork = "10.96.0.1/32".parse().unwrap();
        let other: IpNetwork = "10.96.0.2/32".parse().unwrap();
        let with = [net, other];
        let without = [other];
        assert_eq!(unknown_outcome(Change::Add, net, Ok(&with)), None);
        assert_eq!(unknown_outcome(Change::Remove, net, Ok(&without)), None);
        let not_added = unknown_outcome(Change::Add, net, Ok(&without)).unwrap();
        assert!(not_added.ends_with("does not hold it"), "{not_added}");
        let not_removed = unknown_outcome(Change::Remove, net, Ok(&with)).unwrap();
        assert!(not_removed.ends_with("still holds it"), "{not_removed}");
        let unreadable = VipError::Io {
            device: "kube-ipvs0".into(),
            request: CHANGE_ADDRESSES,
            source: io::Error::other("gone"),
        };
        for change in [Change::Add, Change::Remove] {
            let failed = unknown_outcome(change, net, Err(&unreadable)).unwrap();
            assert!(failed.contains("reading the device failed"), "{failed}");
        }
    }
}
