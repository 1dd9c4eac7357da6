//! Namespace-wide operations: flush, zero, timeouts, info, sync daemons.

use super::{Error, Handle, Operation, Request, Result, Target, Via};
use crate::codec::{frame, reply, request};
use crate::model::{DaemonRole, Info, ServiceKey, SyncDaemon, Timeouts};
use crate::netlink::Kind;

fn decode<T>(op: Operation, r: std::result::Result<T, crate::codec::DecodeError>) -> Result<T> {
    r.map_err(|source| Error::Decode { op, source })
}

fn single(
    op: Operation,
    data: Vec<crate::codec::IpvsMessage>,
) -> Result<crate::codec::IpvsMessage> {
    data.into_iter().next().ok_or_else(|| Error::Decode {
        op,
        source: crate::codec::DecodeError::from("the kernel sent no reply message"),
    })
}

impl Handle {
    /// Deletes every virtual server of the namespace (timeouts and sync
    /// daemons are untouched).
    ///
    /// The kernel keeps the deleted real servers in the namespace's
    /// destination trash for two to three minutes, and every real server
    /// added meanwhile walks that list: re-adding a large table right after
    /// a flush is many times slower than adding it to an empty namespace,
    /// and the gap grows with the table (figures in `docs/performance.md` in
    /// the repository). To replace a table, sync to the new one
    /// ([`crate::sync::Syncer`]) instead of flushing first.
    pub fn flush(&self) -> Result<()> {
        self.ack(request::flush(), Target::Global)
    }

    /// Zeroes the counters of every service, or of one service and its real
    /// servers.
    pub fn zero(&self, service: Option<&ServiceKey>) -> Result<()> {
        let target = service.map_or(Target::Global, |k| Target::Service(*k));
        self.ack(request::zero(service)?, target)
    }

    /// Reads the connection timeouts.
    pub fn timeouts(&self) -> Result<Timeouts> {
        let data = self
            .call(
                Via::Main,
                request::get_config(),
                Kind::Ack,
                Target::Global,
                frame::decode_message,
            )
            .map(|a| a.data)?;
        decode(
            Operation::GetTimeouts,
            reply::timeouts(&single(Operation::GetTimeouts, data)?),
        )
    }

    /// Sets connection timeouts; a 0 field keeps the current value.
    pub fn set_timeouts(&self, t: &Timeouts) -> Result<()> {
        self.ack(request::set_config(t)?, Target::Global)
    }

    /// Reads the IPVS version and connection-table size.
    pub fn info(&self) -> Result<Info> {
        let data = self
            .call(
                Via::Main,
                request::get_info(),
                Kind::Ack,
                Target::Global,
                frame::decode_message,
            )
            .map(|a| a.data)?;
        decode(
            Operation::GetInfo,
            reply::info(&single(Operation::GetInfo, data)?),
        )
    }

    /// Starts a connection sync daemon.
    pub fn start_daemon(&self, d: &SyncDaemon) -> Result<()> {
        let msg = request::new_daemon(d)?;
        self.ack(msg, Target::Daemon(Some(d.role)))
    }

    /// Stops the sync daemon of a role.
    ///
    /// The kernel stops a sync thread with `kthread_stop` and returns its
    /// result, which is `EINTR` when the thread had not started running yet
    /// (a daemon stopped right after it was started, on a busy machine); for
    /// `EINTR` netlink sends no answer at all, so a plain request would
    /// wait for an ACK that never comes. The request is therefore followed
    /// by a `GET_INFO` in the same datagram: when that one is answered and
    /// `DEL_DAEMON` was not, the kernel took the `EINTR` path, which stops the
    /// daemon all the same (its state is cleared and its threads are gone),
    /// and this returns `Ok`.
    pub fn stop_daemon(&self, role: DaemonRole) -> Result<()> {
        let requests = [
            Request {
                index: 0,
                msg: request::del_daemon(role),
                kind: Kind::Ack,
                target: Target::Daemon(Some(role)),
            },
            Request {
                index: 1,
                msg: request::get_info(),
                kind: Kind::Ack,
                target: Target::Global,
            },
        ];
        let mut results: [Option<Result<()>>; 2] = [None, None];
        self.exchange(
            Via::Main,
            requests,
            |_, _| Ok(()),
            |index, r| {
                if let Some(slot) = results.get_mut(index) {
                    *slot = Some(r.map(drop));
                }
            },
        )?;
        match results {
            [Some(Err(Error::Unanswered { .. })), Some(Ok(()))] => Ok(()),
            [Some(stop), _] => stop,
            [None, _] => Err(Error::Lost {
                op: super::describe(
                    crate::codec::IpvsCmd::DelDaemon,
                    &Target::Daemon(Some(role)),
                ),
            }),
        }
    }

    /// Lists running sync daemons (at most a master and a backup).
    pub fn list_daemons(&self) -> Result<Vec<SyncDaemon>> {
        let data = self
            .call(
                Via::Main,
                request::dump_daemons(),
                Kind::Dump,
                Target::Daemon(None),
                frame::decode_message,
            )
            .map(|a| a.data)?;
        data.into_iter()
            .map(|m| decode(Operation::ListDaemons, reply::daemon(m)))
            .collect()
    }
}
