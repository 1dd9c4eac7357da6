//! Reading the kernel's state for a sync: one service dump, real-server dumps
//! streamed through one exchange per socket (optionally several sockets in
//! parallel), and pipelined single-service lookups.

use crate::codec::{DecodeError, IpvsCmd, IpvsMessage};
use crate::codec::{reply, request};
use crate::handle::{Answer, Request, Target, Via, describe};
use crate::model::{AddressFamily, ServiceKey, ValidationError, VirtualServer};
use crate::netlink::Kind;
use crate::{Error, Handle, Result};

use super::state::ObservedDest;

/// Every virtual server of the namespace (one dump), each handed to `each`
/// as it is decoded, repeats of a multi-part dump included; about
/// `expected` are expected (from 700 on, the kernel builds the
/// next datagrams while this thread decodes and runs `each`).
pub(crate) fn services(
    handle: &Handle,
    expected: usize,
    each: impl FnMut(VirtualServer),
) -> Result<()> {
    handle.each_service(expected, each)
}

/// The real servers of each service in `keys`, in the same order, one dump
/// per service. With several handles the keys are split between them and
/// read in parallel threads.
///
/// An empty dump is an empty list: the caller has just seen the service in a
/// service dump, and a service deleted in between is found by the next sync.
pub(crate) fn destinations(
    handles: &[&Handle],
    keys: &[ServiceKey],
) -> Result<Vec<Vec<ObservedDest>>> {
    let parts = handles.len().clamp(1, keys.len().max(1));
    if parts <= 1 || keys.len() < 64 {
        let Some(first) = handles.first() else {
            return Err(Error::Lost {
                op: describe(IpvsCmd::GetDest, &Target::Global),
            });
        };
        return destinations_one(first, keys);
    }
    let per = keys.len().div_ceil(parts);
    let results: Vec<Result<Vec<Vec<ObservedDest>>>> = std::thread::scope(|s| {
        let workers: Vec<_> = keys
            .chunks(per)
            .zip(handles.iter())
            .map(|(chunk, h)| s.spawn(move || destinations_one(h, chunk)))
            .collect();
        workers
            .into_iter()
            .map(|w| match w.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    });
    let mut out = Vec::with_capacity(keys.len());
    for r in results {
        out.extend(r?);
    }
    Ok(out)
}

fn destinations_one(handle: &Handle, keys: &[ServiceKey]) -> Result<Vec<Vec<ObservedDest>>> {
    let mut out: Vec<Option<Result<Vec<ObservedDest>>>> = (0..keys.len()).map(|_| None).collect();
    destinations_each(handle, keys, |index, r| {
        if let Some(slot) = out.get_mut(index) {
            *slot = Some(r);
        }
    })?;
    in_key_order(out, keys, IpvsCmd::GetDest)
}

/// The values of `slots`, one per key; a key without one is
/// [`Error::Lost`] (of command `cmd` on the key), never skipped.
fn in_key_order<V>(
    slots: Vec<Option<Result<V>>>,
    keys: &[ServiceKey],
    cmd: IpvsCmd,
) -> Result<Vec<V>> {
    slots
        .into_iter()
        .zip(keys)
        .map(|(r, key)| {
            r.unwrap_or_else(|| {
                Err(Error::Lost {
                    op: describe(cmd, &Target::Service(*key)),
                })
            })
        })
        .collect()
}

/// The real servers of each service in `keys` (one dump each), handed to
/// `each(index, result)` in order as they arrive, while the kernel works on
/// the next ones (see [`Handle::list_destinations_each`]). Each list has
/// every real server once and is one the table had (lists dumped in several
/// passes are read again until two reads agree, see
/// [`Handle::list_destinations`]), or is [`Error::Inconsistent`].
pub(crate) fn destinations_each(
    handle: &Handle,
    keys: &[ServiceKey],
    each: impl FnMut(usize, Result<Vec<ObservedDest>>),
) -> Result<()> {
    // Each message is decoded for the family of its service. A sync
    // compares configuration and connection counts, never the counters:
    // their nests are skipped.
    let decode = |index: usize, body: &[u8]| {
        let family = keys
            .get(index)
            .map_or(AddressFamily::Inet, ServiceKey::family);
        reply::destination_config_from_body(body, family).map(|(server, conns)| ObservedDest {
            server,
            conns: Some(conns),
        })
    };
    handle.dump_dests_each(keys, decode, |d| d.server.addr, each)
}

/// Looks up each service in `keys` (pipelined `GET_SERVICE`s): `None` for a
/// service that does not exist.
///
/// The lookups are quiet (only the last of a datagram asks for an ACK): the
/// data reply answers a lookup, and an ACK for each would double the
/// messages the kernel builds and this side receives.
pub(crate) fn lookup(handle: &Handle, keys: &[ServiceKey]) -> Result<Vec<Option<VirtualServer>>> {
    let decode = |_: usize, body: &[u8]| reply::virtual_server_from_body(body);
    per_key(
        handle,
        keys,
        (request::get_service, Kind::Quiet, IpvsCmd::GetService),
        decode,
        |r| match r {
            Err(Error::ServiceNotFound { .. }) => Ok(None),
            Err(e) => Err(e),
            Ok(answer) => Ok(answer.data.into_iter().next()),
        },
    )
}

/// How to ask about one service: the request builder, how it is answered,
/// and its command (which names a lost answer).
type PerKeyRequest = (
    fn(&ServiceKey) -> std::result::Result<IpvsMessage, ValidationError>,
    Kind,
    IpvsCmd,
);

/// One request per key, pipelined through one exchange; each message
/// decoded by `decode` as it arrives and each answer turned into a value by
/// `answer`. The values come back in the order of `keys`; a request the
/// kernel never answered is [`Error::Lost`].
fn per_key<D, V>(
    handle: &Handle,
    keys: &[ServiceKey],
    (build, kind, cmd): PerKeyRequest,
    decode: impl FnMut(usize, &[u8]) -> std::result::Result<D, DecodeError>,
    mut answer: impl FnMut(Result<Answer<D>>) -> Result<V>,
) -> Result<Vec<V>> {
    let mut out: Vec<Option<Result<V>>> = (0..keys.len()).map(|_| None).collect();
    let mut invalid = None;
    let requests = keys
        .iter()
        .enumerate()
        .filter_map(|(index, key)| match build(key) {
            Ok(msg) => Some(Request {
                index,
                msg,
                kind,
                target: Target::Service(*key),
            }),
            Err(e) => {
                invalid.get_or_insert(Error::from(e));
                None
            }
        });
    handle.exchange(Via::Main, requests, decode, |index, r| {
        if let Some(slot) = out.get_mut(index) {
            *slot = Some(answer(r));
        }
    })?;
    if let Some(e) = invalid {
        return Err(e);
    }
    in_key_order(out, keys, cmd)
}
