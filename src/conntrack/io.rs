//! The I/O: a ctnetlink socket, one dump and pipelined deletes through the
//! crate's one request pipeline (overruns, cut datagrams, foreign senders,
//! stale answers and the receive deadline handled as for IPVS).

use std::collections::HashSet;
use std::io;

use super::ConntrackError;
use crate::Timeout;
use crate::codec::DecodeError;
use crate::codec::conntrack::{self as codec, CtRequest, Entry};
use crate::netlink::dump::{self, DumpError};
use crate::netlink::netns::NetNs;
use crate::netlink::{DumpSize, Exchange, Kind, NlSocket, Protocol, Reply};

/// How many times a dump is asked for before its failure is reported, when
/// its answer was cut, its answers were dropped or the kernel flagged it
/// interrupted.
const MAX_ATTEMPTS: u32 = 5;
/// `EPERM`, `ENOENT`, `EINVAL`, `EOPNOTSUPP`, `EPROTONOSUPPORT`.
const EPERM: i32 = 1;
pub(crate) const ENOENT: i32 = 2;
const EINVAL: i32 = 22;
const EOPNOTSUPP: i32 = 95;
const EPROTONOSUPPORT: i32 = 93;

pub(crate) const DUMP: &str = "dump";

/// A netfilter netlink socket with its request numbering.
#[derive(Debug)]
pub(crate) struct Ctnl {
    sock: NlSocket,
    seq: u32,
}

impl Ctnl {
    /// Opens a `NETLINK_NETFILTER` socket in `netns`; a kernel without
    /// nfnetlink (`EPROTONOSUPPORT`, after the kernel tried to load it) is
    /// [`ConntrackError::Unsupported`].
    pub(crate) fn open(netns: &NetNs, timeout: Timeout) -> Result<Ctnl, ConntrackError> {
        match NlSocket::open(netns, Protocol::Netfilter, DumpSize::Large, timeout) {
            Ok(sock) => Ok(Ctnl { sock, seq: 0 }),
            Err(e) if e.raw_os_error() == Some(EPROTONOSUPPORT) => {
                Err(ConntrackError::Unsupported {
                    detail: format!("no NETLINK_NETFILTER socket ({e}): nfnetlink is missing"),
                })
            }
            Err(e) => Err(ConntrackError::Socket(e)),
        }
    }

    /// Runs `requests` through the pipeline; each data message goes to
    /// `decode(type, payload)`, each outcome to `on_reply` in order.
    pub(crate) fn run<'a, T, D>(
        &mut self,
        requests: impl IntoIterator<Item = (CtRequest<'a>, Kind, T)>,
        mut decode: impl FnMut(u16, &[u8]) -> Result<D, DecodeError>,
        on_reply: impl FnMut(usize, T, Reply<D>),
    ) -> io::Result<()> {
        let write = |request: &CtRequest<'a>, out: &mut Vec<u8>, seq, flags| {
            request.write(out, seq, flags);
            Ok(())
        };
        Exchange::new(&mut self.sock, &mut self.seq).run_with(
            requests,
            write,
            |_, kind, body| decode(kind, body),
            on_reply,
        )
    }
}

/// The error of a request the kernel refused.
pub(crate) fn kernel_error(request: &'static str, errno: i32) -> ConntrackError {
    match errno {
        EPERM => ConntrackError::PermissionDenied { request },
        _ => ConntrackError::Kernel {
            request,
            source: io::Error::from_raw_os_error(errno),
        },
    }
}

/// One dump of the entries of `family` (`AF_UNSPEC`: all), asked again when
/// its answer was cut, dropped or flagged interrupted, up to
/// [`MAX_ATTEMPTS`] times ([`dump::whole`]); returns the entries (each
/// once) and the number of dumps asked for.
pub(crate) fn dump(ctnl: &mut Ctnl, family: u8) -> Result<(Vec<Entry>, u32), ConntrackError> {
    let once = || {
        let mut answer = None;
        ctnl.run(
            [(CtRequest::Dump(family), Kind::Dump, ())],
            codec::decode,
            |_, (), reply| answer = Some(reply),
        )?;
        Ok(answer)
    };
    match dump::whole(MAX_ATTEMPTS, once) {
        Ok((entries, attempts)) => Ok((unique(entries.into_iter()), attempts)),
        Err(DumpError::Io(source)) => Err(ConntrackError::Io {
            request: DUMP,
            source,
        }),
        // nfnetlink answers EINVAL for a subsystem it does not have once
        // request_module could not load it.
        Err(DumpError::Kernel(errno @ (EINVAL | EOPNOTSUPP))) => Err(ConntrackError::Unsupported {
            detail: format!(
                "the kernel answered a ctnetlink dump with {}: \
                     nf_conntrack_netlink is not loaded and could not be loaded",
                io::Error::from_raw_os_error(errno)
            ),
        }),
        Err(DumpError::Kernel(errno)) => Err(kernel_error(DUMP, errno)),
        Err(DumpError::Decode(e)) => Err(ConntrackError::Malformed {
            request: DUMP,
            detail: e.to_string(),
        }),
        Err(DumpError::TimedOut(waited)) => Err(ConntrackError::Timeout {
            request: DUMP,
            waited,
        }),
        Err(DumpError::Incomplete { last, .. }) => Err(ConntrackError::Io {
            request: DUMP,
            source: io::Error::other(last.describe()),
        }),
    }
}

/// The entries, each once: a dump walks a hash table that may change
/// meanwhile and can report an entry twice.
fn unique(entries: impl Iterator<Item = Entry>) -> Vec<Entry> {
    let mut seen = HashSet::new();
    entries
        .filter(|e| seen.insert((e.id, e.orig, e.zone)))
        .collect()
}
