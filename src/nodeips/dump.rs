//! The I/O part of the resolver: one `RTM_GETLINK` dump and one
//! `RTM_GETADDR` dump, in any network namespace, through the crate's one
//! request pipeline (so overruns, cut datagrams, foreign senders, stale
//! answers and the receive deadline are handled as for IPVS), decoded by
//! the codec's link and address decoders ([`crate::codec::route`]).

use std::io;

use super::error::NodeIpsError;
use super::options::{Family, Options};
use super::records::{AddressFlags, AddressRecord, InterfaceFlags, LinkRecord, Records};
use crate::Timeout;
use crate::codec::DecodeError;
use crate::codec::route::{self, DumpFamily, RTM_NEWADDR, RTM_NEWLINK, RouteRequest};
use crate::netlink::dump::{self, DumpError, Incomplete};
use crate::netlink::netns::NetNs;
use crate::netlink::{DumpSize, Exchange, Kind, NlSocket, Protocol, Reply};

/// How many times a dump is asked for before its failure is reported, when
/// the kernel flags it interrupted by concurrent changes, its answer was
/// cut or its answers were dropped.
const MAX_ATTEMPTS: u32 = 5;

const LINK_DUMP: &str = "link dump";
const ADDRESS_DUMP: &str = "address dump";

/// An rtnetlink socket with its request numbering: what the node-IP dumps
/// and [`crate::vip`] run their exchanges on.
#[derive(Debug)]
pub(crate) struct Rtnl {
    sock: NlSocket,
    seq: u32,
}

impl Rtnl {
    /// Opens an rtnetlink socket in `netns` whose waits end after `timeout`
    /// of silence.
    pub(crate) fn open(netns: &NetNs, timeout: Timeout) -> io::Result<Rtnl> {
        Ok(Rtnl {
            sock: NlSocket::open(netns, Protocol::Route, DumpSize::Large, timeout)?,
            seq: 0,
        })
    }

    /// Runs `requests` through the pipeline (see [`Exchange`]); each data
    /// message goes to `decode(type, payload)`, each outcome to `on_reply`
    /// in order.
    pub(crate) fn run<T, D>(
        &mut self,
        requests: impl IntoIterator<Item = (RouteRequest, Kind, T)>,
        mut decode: impl FnMut(&T, u16, &[u8]) -> Result<D, DecodeError>,
        on_reply: impl FnMut(usize, T, Reply<D>),
    ) -> io::Result<()> {
        let write = |request: &RouteRequest, out: &mut Vec<u8>, seq, flags| {
            request.write(out, seq, flags);
            Ok(())
        };
        Exchange::new(&mut self.sock, &mut self.seq).run_with(
            requests,
            write,
            |tag, kind, body| decode(tag, kind, body),
            on_reply,
        )
    }
}

/// Dumps every interface and every address of [`Options::family`] in
/// [`Options::netns`]: exactly one `RTM_GETLINK` dump and one `RTM_GETADDR`
/// dump (repeated only if the kernel flags a dump as interrupted by
/// concurrent changes, or a datagram did not fit the receive buffer). Each
/// wait for the kernel is bounded by [`Options::timeout`]; a silent kernel
/// is [`NodeIpsError::Timeout`]. The other options are for
/// [`filter`](super::filter).
///
/// ```no_run
/// use ipvsctl::nodeips::{dump_records, Family, Options};
///
/// let records = dump_records(&Options::new().family(Family::Both))?;
/// println!("{} interfaces, {} addresses", records.links.len(), records.addresses.len());
/// # Ok::<(), ipvsctl::nodeips::NodeIpsError>(())
/// ```
pub fn dump_records(opts: &Options) -> Result<Records, NodeIpsError> {
    dump_records_within(&opts.netns, opts.family, opts.timeout)
}

/// [`dump_records`] with each wait bounded by `timeout`.
pub(crate) fn dump_records_within(
    netns: &NetNs,
    family: Family,
    timeout: Timeout,
) -> Result<Records, NodeIpsError> {
    let mut rtnl = Rtnl::open(netns, timeout).map_err(NodeIpsError::Socket)?;
    Ok(Records {
        links: dump_links(&mut rtnl)?,
        addresses: dump_addresses(&mut rtnl, family)?,
    })
}

/// One `RTM_GETLINK` dump, without statistics.
fn dump_links(rtnl: &mut Rtnl) -> Result<Vec<LinkRecord>, NodeIpsError> {
    dump(rtnl, route::dump_links(), LINK_DUMP, |kind, payload| {
        if kind != RTM_NEWLINK {
            return Ok(None);
        }
        let link = route::link::decode(payload)?;
        Ok(Some(LinkRecord {
            index: link.index,
            name: link.name,
            flags: InterfaceFlags::from_bits_retain(link.flags),
        }))
    })
}

/// One `RTM_GETADDR` dump of `family`, every interface's addresses.
pub(crate) fn dump_addresses(
    rtnl: &mut Rtnl,
    family: Family,
) -> Result<Vec<AddressRecord>, NodeIpsError> {
    let family = match family {
        Family::V4 => DumpFamily::V4,
        Family::V6 => DumpFamily::V6,
        Family::Both => DumpFamily::Both,
    };
    let request = route::dump_addresses(family);
    dump(rtnl, request, ADDRESS_DUMP, |kind, payload| {
        if kind != RTM_NEWADDR {
            return Ok(None);
        }
        Ok(route::address::decode(payload)?.map(|a| AddressRecord {
            index: a.index,
            prefix_len: a.prefix_len,
            local: a.local,
            address: a.address,
            flags: AddressFlags::from_bits_retain(a.flags),
        }))
    })
}

/// Runs `request` as a dump and keeps what `decode` makes of its messages.
/// A dump that the kernel flags interrupted, whose answer was cut, or
/// whose answers were dropped is asked again, up to [`MAX_ATTEMPTS`] times
/// in all ([`dump::whole`]).
fn dump<T>(
    rtnl: &mut Rtnl,
    request: RouteRequest,
    what: &'static str,
    decode: impl Fn(u16, &[u8]) -> Result<Option<T>, DecodeError>,
) -> Result<Vec<T>, NodeIpsError> {
    let once = || {
        let mut answer = None;
        rtnl.run(
            [(request.clone(), Kind::Dump, ())],
            |(), kind, payload| decode(kind, payload),
            |_, (), reply| answer = Some(reply),
        )?;
        Ok(answer)
    };
    match dump::whole(MAX_ATTEMPTS, once) {
        Ok((data, _)) => Ok(data),
        Err(DumpError::Io(source)) => Err(NodeIpsError::Io {
            request: what,
            source,
        }),
        Err(DumpError::Kernel(errno)) => Err(NodeIpsError::Kernel {
            request: what,
            source: io::Error::from_raw_os_error(errno),
        }),
        Err(DumpError::Decode(e)) => Err(NodeIpsError::Malformed {
            request: what,
            detail: e.to_string(),
        }),
        Err(DumpError::TimedOut(waited)) => Err(NodeIpsError::Timeout {
            request: what,
            waited,
        }),
        Err(DumpError::Incomplete {
            attempts,
            last: Incomplete::Interrupted,
        }) => Err(NodeIpsError::DumpInterrupted {
            request: what,
            attempts,
        }),
        Err(DumpError::Incomplete { last, .. }) => Err(NodeIpsError::Io {
            request: what,
            source: io::Error::other(last.describe()),
        }),
    }
}
