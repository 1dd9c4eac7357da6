//! The I/O of [`VipDevice`]: the device request, the address dump, and the
//! pipelined exchange of requests and ACKs over the crate's rtnetlink
//! socket.

use std::io;

use ipnetwork::IpNetwork;

use super::error::{AddressFailure, Change, VipError};
use super::report::VipReport;
use super::{
    BRING_UP, CHANGE_ADDRESSES, CREATE_DEVICE, EADDRNOTAVAIL, EEXIST, ENODEV, READ_DEVICE,
    VipDevice, wire,
};
use crate::codec::frame::{self, FrameBody, NlError};
use crate::netlink::route::{Received, RecvError, RouteSocket, check_timeout};
use crate::nodeips::{self, Family};

/// Receives each data message of an answer: its type and payload.
type OnData<'a> = dyn FnMut(u16, &[u8]) -> Result<(), VipError> + 'a;

impl VipDevice {
    pub(super) fn open(&self) -> Result<RouteSocket, VipError> {
        if let Some(reason) = check_timeout(self.timeout) {
            return Err(VipError::InvalidTimeout { reason });
        }
        RouteSocket::open(&self.netns, self.timeout).map_err(|source| VipError::Socket {
            device: self.name.clone(),
            source,
        })
    }

    /// The device as a dummy that is up, created if missing; whether it was
    /// created, whether it was brought up.
    pub(super) fn ensure(
        &self,
        rtnl: &mut RouteSocket,
    ) -> Result<(wire::Link, bool, bool), VipError> {
        if let Some(link) = self.get_link(rtnl)? {
            let link = self.check_dummy(link)?;
            if link.flags & wire::IFF_UP != 0 {
                return Ok((link, false, false));
            }
            self.bring_up(rtnl, link.index)?;
            return Ok((link, false, true));
        }
        let mut bytes = Vec::new();
        let seq = rtnl.next_seq();
        wire::create_dummy(&mut bytes, seq, &self.name);
        let created = match self.request(rtnl, &bytes, seq, CREATE_DEVICE, &mut |_, _| Ok(()))? {
            None => true,
            // Created by someone else since the lookup: check it as found.
            Some(err) if err.errno() == EEXIST => false,
            Some(err) => return Err(self.kernel(CREATE_DEVICE, &err)),
        };
        let link = self
            .get_link(rtnl)?
            .ok_or_else(|| self.kernel(READ_DEVICE, &errno_error(ENODEV)))?;
        let link = self.check_dummy(link)?;
        if !created && link.flags & wire::IFF_UP == 0 {
            // Someone else's fresh dummy of that name, still down.
            self.bring_up(rtnl, link.index)?;
            return Ok((link, false, true));
        }
        Ok((link, created, false))
    }

    /// Sets `IFF_UP` on interface `index`.
    fn bring_up(&self, rtnl: &mut RouteSocket, index: u32) -> Result<(), VipError> {
        let mut bytes = Vec::new();
        let seq = rtnl.next_seq();
        wire::set_up(&mut bytes, seq, index);
        match self.request(rtnl, &bytes, seq, BRING_UP, &mut |_, _| Ok(()))? {
            None => Ok(()),
            Some(err) => Err(self.kernel(BRING_UP, &err)),
        }
    }

    pub(super) fn check_dummy(&self, link: wire::Link) -> Result<wire::Link, VipError> {
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
    pub(super) fn get_link(&self, rtnl: &mut RouteSocket) -> Result<Option<wire::Link>, VipError> {
        let mut bytes = Vec::new();
        let seq = rtnl.next_seq();
        wire::get_link(&mut bytes, seq, &self.name);
        let mut found = None;
        let answer = self.request(rtnl, &bytes, seq, READ_DEVICE, &mut |kind, payload| {
            if kind == wire::RTM_NEWLINK {
                found = Some(wire::decode_link(payload).map_err(|detail| VipError::Io {
                    device: self.name.clone(),
                    request: READ_DEVICE,
                    source: io::Error::other(format!("malformed link message: {detail}")),
                })?);
            }
            Ok(())
        })?;
        match answer {
            None => Ok(found.filter(|link| link.name == self.name)),
            Some(err) if err.errno() == ENODEV => Ok(None),
            Some(err) => Err(self.kernel(READ_DEVICE, &err)),
        }
    }

    /// The addresses on interface `index`, from one address dump.
    pub(super) fn read(
        &self,
        rtnl: &mut RouteSocket,
        index: u32,
    ) -> Result<Vec<IpNetwork>, VipError> {
        let records =
            nodeips::dump::dump_addresses(rtnl, Family::Both).map_err(|source| VipError::Read {
                device: self.name.clone(),
                source,
            })?;
        Ok(records
            .iter()
            .filter(|r| r.index == index)
            .filter_map(|r| IpNetwork::new(r.local_address()?, r.prefix_len).ok())
            .collect())
    }

    /// Sends one request and waits for its answer: `None` for an ACK, the
    /// error otherwise. Data messages go to `on_data`.
    pub(super) fn request(
        &self,
        rtnl: &mut RouteSocket,
        bytes: &[u8],
        seq: u32,
        what: &'static str,
        on_data: &mut OnData<'_>,
    ) -> Result<Option<NlError>, VipError> {
        let mut answers = self.exchange(rtnl, bytes, seq, 1, what, on_data)?;
        Ok(answers.pop().flatten())
    }

    /// Sends `count` requests (sequence numbers `first..first + count`) in
    /// one datagram and waits for the answer to each.
    pub(super) fn exchange(
        &self,
        rtnl: &mut RouteSocket,
        bytes: &[u8],
        first: u32,
        count: usize,
        what: &'static str,
        on_data: &mut OnData<'_>,
    ) -> Result<Vec<Option<NlError>>, VipError> {
        rtnl.send(bytes).map_err(|source| self.io(what, source))?;
        let mut answers: Vec<Option<Option<NlError>>> = vec![None; count];
        let mut pending = count;
        while pending > 0 {
            let datagram = match rtnl.recv() {
                Ok(Received::Whole(d)) => d,
                Ok(Received::Truncated(len)) => {
                    return Err(self.io(
                        what,
                        io::Error::other(format!("a reply of {len} bytes did not fit")),
                    ));
                }
                Err(RecvError::TimedOut(waited)) => {
                    return Err(VipError::Timeout {
                        device: self.name.clone(),
                        request: what,
                        waited,
                    });
                }
                Err(RecvError::Io(source)) => return Err(self.io(what, source)),
            };
            for f in frame::frames(datagram) {
                let f = f.map_err(|e| self.io(what, io::Error::other(e.to_string())))?;
                let slot = f.header.seq.wrapping_sub(first) as usize;
                let Some(answer) = answers.get_mut(slot) else {
                    continue;
                };
                match f.body {
                    FrameBody::Error(err) => {
                        if answer.is_none() {
                            pending -= 1;
                        }
                        *answer = Some((!err.is_ack()).then_some(err));
                    }
                    FrameBody::Data(payload) => on_data(f.header.kind, payload)?,
                    _ => {}
                }
            }
        }
        Ok(answers.into_iter().map(Option::flatten).collect())
    }

    /// One datagram of address changes; the report gets each outcome.
    pub(super) fn apply(
        &self,
        rtnl: &mut RouteSocket,
        index: u32,
        batch: &[(Change, IpNetwork)],
        report: &mut VipReport,
    ) -> Result<(), VipError> {
        let mut bytes = Vec::new();
        let first = rtnl.seq().wrapping_add(1);
        for (change, net) in batch {
            let seq = rtnl.next_seq();
            match change {
                Change::Add => wire::add_address(&mut bytes, seq, index, *net),
                Change::Remove => wire::remove_address(&mut bytes, seq, index, *net),
            }
        }
        let answers = self.exchange(
            rtnl,
            &bytes,
            first,
            batch.len(),
            CHANGE_ADDRESSES,
            &mut |_, _| Ok(()),
        )?;
        for ((change, net), answer) in batch.iter().zip(answers) {
            match (change, answer) {
                (Change::Add, None) => report.added.push(*net),
                (Change::Remove, None) => report.removed.push(*net),
                // Gone already: what was wanted.
                (Change::Remove, Some(err)) if err.errno() == EADDRNOTAVAIL => {
                    report.removed.push(*net)
                }
                (change, Some(err)) => report.failed.push(AddressFailure {
                    device: self.name.clone(),
                    change: *change,
                    addr: *net,
                    error: io::Error::from_raw_os_error(err.errno()),
                    message: err.message,
                }),
            }
        }
        Ok(())
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

/// An error answer with `errno`, for the cases decided here.
pub(super) fn errno_error(errno: i32) -> NlError {
    NlError {
        code: -errno,
        ..NlError::default()
    }
}
