//! Pipelined batches of writes to the IPVS table ([`Handle::apply`]).
//!
//! The crate names operations with three words, each for one thing:
//!
//! * a [`Write`] is a change to the table *with its data* (the virtual or
//!   real server to add, the key to delete): what a batch sends and what a
//!   sync plans ([`crate::sync::Plan::writes`]);
//! * an [`Operation`] is *what was being done* when an
//!   [`Error`] happened, with only the objects that name it (a service key,
//!   a real server's address): every error carries one, and
//!   [`Write::operation`] is the one a write's failure is about;
//! * [`IpvsCmd`](crate::codec::IpvsCmd) is the generic-netlink command on
//!   the wire, for the codec.
//!
//! A `Write`'s variants are named as the `Operation`s they perform
//! (`Write::AddService` fails as `Operation::AddService`).
//!
//! ```
//! use ipvsctl::Operation;
//! use ipvsctl::batch::Write;
//! use ipvsctl::model::{ServiceKey, VirtualServer};
//! let key = ServiceKey::tcp("10.96.0.1:443".parse().unwrap());
//! let write = Write::AddService(VirtualServer::new(key));
//! assert_eq!(write.operation(), Operation::AddService(key));
//! ```

use std::net::SocketAddr;

use super::dests::dest_target;
use super::services::new_service_target;
use super::{Error, Handle, Operation, Request, Result, Target, Via, describe};
use crate::codec::{IpvsCmd, IpvsMessage, request};
use crate::model::{RealServer, ServiceKey, ValidationError, VirtualServer};
use crate::netlink::Kind;

/// One change to the IPVS table, with its data: an item of a batch
/// ([`Handle::apply`]) or of a sync's plan (module docs: how it differs from
/// [`Operation`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Write {
    /// Add a virtual server.
    AddService(VirtualServer),
    /// Change a virtual server's configuration.
    UpdateService(VirtualServer),
    /// Delete a virtual server.
    DeleteService(ServiceKey),
    /// Add a real server.
    AddDestination(ServiceKey, RealServer),
    /// Change a real server.
    UpdateDestination(ServiceKey, RealServer),
    /// Remove a real server.
    DeleteDestination(ServiceKey, SocketAddr),
}

impl Write {
    /// The request for this operation, validated.
    pub fn encode(&self) -> std::result::Result<IpvsMessage, ValidationError> {
        match self {
            Write::AddService(vs) => request::new_service(vs),
            Write::UpdateService(vs) => request::set_service(vs),
            Write::DeleteService(key) => request::del_service(key),
            Write::AddDestination(key, rs) => request::new_dest(key, rs),
            Write::UpdateDestination(key, rs) => request::set_dest(key, rs),
            Write::DeleteDestination(key, addr) => request::del_dest(key, *addr),
        }
    }

    /// The operation this write performs, as an [`Error`] about it names
    /// it (the service and real server, without the settings).
    pub fn operation(&self) -> Operation {
        describe(self.cmd(), &self.target())
    }

    /// The command of the operation's request.
    pub(crate) fn cmd(&self) -> IpvsCmd {
        match self {
            Write::AddService(_) => IpvsCmd::NewService,
            Write::UpdateService(_) => IpvsCmd::SetService,
            Write::DeleteService(_) => IpvsCmd::DelService,
            Write::AddDestination(..) => IpvsCmd::NewDest,
            Write::UpdateDestination(..) => IpvsCmd::SetDest,
            Write::DeleteDestination(..) => IpvsCmd::DelDest,
        }
    }

    /// The virtual server the operation acts on (or belongs to).
    pub(crate) fn key(&self) -> ServiceKey {
        match self {
            Write::AddService(vs) | Write::UpdateService(vs) => vs.key,
            Write::DeleteService(k)
            | Write::AddDestination(k, _)
            | Write::UpdateDestination(k, _)
            | Write::DeleteDestination(k, _) => *k,
        }
    }

    /// What a failure of the operation is described with.
    pub(crate) fn target(&self) -> Target {
        match self {
            Write::AddService(vs) | Write::UpdateService(vs) => new_service_target(vs),
            Write::DeleteService(key) => Target::Service(*key),
            Write::AddDestination(key, rs) | Write::UpdateDestination(key, rs) => {
                dest_target(key, rs.addr)
            }
            Write::DeleteDestination(key, addr) => dest_target(key, *addr),
        }
    }
}

/// How a batch is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BatchMode {
    /// Many requests per datagram, answers matched by sequence number (the
    /// default). Only the last request of a datagram asks for an ACK: the
    /// kernel answers the others only when they fail, and answers a
    /// datagram's requests in order, so once the last one is answered every
    /// earlier one without an answer succeeded (an overrun of the receive
    /// buffer makes them [`Error::Lost`] instead).
    #[default]
    Pipelined,
    /// One request per round trip, the way other IPVS libraries work (for
    /// comparison and for debugging).
    OneByOne,
}

/// What a batch did: every operation is accounted for, either counted in
/// `succeeded` or listed in `failed`, unless the socket failed and the batch
/// was `aborted`.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct BatchReport {
    /// Operations the kernel carried out.
    pub succeeded: usize,
    /// Requests sent to the kernel (operations refused by validation are not
    /// sent).
    pub sent: usize,
    /// Failed operations by index in the batch, with their typed errors,
    /// sorted by index.
    pub failed: Vec<(usize, Error)>,
    /// The socket failure that cut the batch short (its operation is
    /// [`Operation::Exchange`](crate::Operation::Exchange)), if one did:
    /// requests sent but not answered before it have unknown outcomes (read
    /// back to find out), and the operations after them were not sent. The
    /// operations answered before it are counted in `succeeded` and `failed`
    /// as usual; those refused by validation are still in `failed`.
    pub aborted: Option<Error>,
}

impl BatchReport {
    /// Whether every operation succeeded: nothing failed and the batch was
    /// not aborted.
    pub fn is_ok(&self) -> bool {
        self.failed.is_empty() && self.aborted.is_none()
    }
}

impl Handle {
    /// Applies write operations in order, pipelined, and reports each
    /// failure with its index. An operation that fails validation is not sent
    /// and does not stop the others; neither does a kernel error.
    ///
    /// ```no_run
    /// use ipvsctl::Handle;
    /// use ipvsctl::batch::Write;
    /// use ipvsctl::model::{RealServer, ServiceKey, VirtualServer};
    /// let ipvs = Handle::new()?;
    /// let key = ServiceKey::tcp("10.96.0.1:443".parse().unwrap());
    /// let report = ipvs.apply([
    ///     Write::AddService(VirtualServer::new(key)),
    ///     Write::AddDestination(key, RealServer::new("10.244.0.2:6443".parse().unwrap())),
    /// ]);
    /// assert!(report.is_ok(), "{:?} {:?}", report.failed, report.aborted);
    /// # Ok::<(), ipvsctl::Error>(())
    /// ```
    pub fn apply<I>(&self, ops: I) -> BatchReport
    where
        I: IntoIterator<Item = Write>,
    {
        self.apply_with(ops, BatchMode::Pipelined, |_, _| {})
    }

    /// [`Handle::apply`] with a mode and a callback that sees every
    /// operation's outcome (index, result) as it arrives.
    ///
    /// Neither `on_result` nor the `ops` iterator runs with the handle's
    /// lock held, so both may use the handle (or another thread may, in
    /// between): operations are drawn one datagram's worth at a time with
    /// the lock released, the lock is taken for that datagram's exchange
    /// only, and the outcomes are handed to `on_result` after it is released
    /// again. A panic in either leaves the handle usable; the operations of
    /// the datagrams already exchanged have taken effect, the others were
    /// not sent. Operations refused by validation are reported last.
    pub fn apply_with<I, F>(&self, ops: I, mode: BatchMode, mut on_result: F) -> BatchReport
    where
        I: IntoIterator<Item = Write>,
        F: FnMut(usize, &Result<()>),
    {
        let mut report = BatchReport::default();
        let mut invalid: Vec<(usize, Error)> = Vec::new();
        // Pipelined, a request is answered only on failure or as the last of
        // its datagram (see `BatchMode::Pipelined`).
        let (kind, per_turn) = match mode {
            BatchMode::Pipelined => (Kind::Quiet, self.max_batch()),
            BatchMode::OneByOne => (Kind::Ack, 1),
        };
        // Operations are encoded as they are drawn, so a batch of any size
        // keeps one datagram's worth of requests in memory. Invalid ones are
        // set aside with their index and never sent.
        let mut ops = ops.into_iter().enumerate();
        let mut requests: Vec<Request> = Vec::with_capacity(per_turn.min(1024));
        let mut answers: Vec<(usize, Result<()>)> = Vec::with_capacity(per_turn.min(1024));
        loop {
            while requests.len() < per_turn {
                let Some((index, op)) = ops.next() else { break };
                match op.encode() {
                    Ok(msg) => requests.push(Request {
                        index,
                        msg,
                        kind,
                        target: op.target(),
                    }),
                    Err(e) => invalid.push((index, e.into())),
                }
            }
            if requests.is_empty() {
                break;
            }
            let outcome = self.exchange(
                Via::Main,
                requests.drain(..),
                |_, _| Ok(()),
                |index, r| answers.push((index, r.map(drop))),
            );
            for (index, r) in answers.drain(..) {
                on_result(index, &r);
                report.sent += 1;
                match r {
                    Ok(()) => report.succeeded += 1,
                    Err(e) => report.failed.push((index, e)),
                }
            }
            if let Err(e) = outcome {
                // The socket itself failed: requests without an answer cannot
                // be named one by one any more.
                report.aborted = Some(e);
                break;
            }
        }
        for (i, e) in invalid {
            let r = Err(e);
            on_result(i, &r);
            if let Err(e) = r {
                report.failed.push((i, e));
            }
        }
        report.failed.sort_by_key(|(i, _)| *i);
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_write_performs_the_operation_of_its_name() {
        let key = ServiceKey::tcp("10.96.0.1:443".parse().unwrap());
        let server: SocketAddr = "10.244.0.2:6443".parse().unwrap();
        let vs = VirtualServer::new(key);
        let rs = RealServer::new(server);
        let cases = [
            (Write::AddService(vs.clone()), Operation::AddService(key)),
            (Write::UpdateService(vs), Operation::UpdateService(key)),
            (Write::DeleteService(key), Operation::DeleteService(key)),
            (
                Write::AddDestination(key, rs),
                Operation::AddDestination {
                    service: key,
                    server,
                },
            ),
            (
                Write::UpdateDestination(key, rs),
                Operation::UpdateDestination {
                    service: key,
                    server,
                },
            ),
            (
                Write::DeleteDestination(key, server),
                Operation::DeleteDestination {
                    service: key,
                    server,
                },
            ),
        ];
        for (write, operation) in cases {
            assert_eq!(write.operation(), operation, "{write:?}");
        }
    }
}
