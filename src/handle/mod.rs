//! The handle: every IPVS operation over one generic-netlink socket (and a
//! second one, opened on first use, for dumps of the whole service table:
//! see [`DumpSize`] for why one socket cannot serve both kinds of dump well).
//!
//! What users need to know (threads, namespaces, errors) is on [`Handle`]
//! itself: this module is private and only its re-exports are documented.

mod admin;
mod batch;
mod capabilities;
mod dests;
mod error;
mod overlap;
mod services;

use std::sync::{Mutex, MutexGuard};

pub use batch::{BatchMode, BatchReport, Op};
pub use capabilities::{Availability, Capabilities, KernelVersion, Support};
pub use error::{Error, Operation, Result};
pub(crate) use error::{Target, describe};

use crate::codec::{DecodeError, IpvsCmd, IpvsMessage, consts, frame};
use crate::netlink::Failure;
use crate::netlink::netns::NetNs;
use crate::netlink::{DumpSize, Exchange, GenlSocket, Kind, Reply};

/// A connection to the kernel's IPVS in one network namespace: every
/// operation of `ipvsadm` (services, real servers, timeouts, sync daemons,
/// counters, flush), typed, plus pipelined batches ([`Handle::apply`]).
///
/// Opening a handle resolves the `IPVS` generic-netlink family once. Where
/// the kernel has no IPVS (module missing and not loadable) it refuses to
/// open with [`Error::Unavailable`], whose reason carries the kernel-module
/// check's diagnosis ([`crate::kmod::diagnose`]), so a handle never sends a
/// request that cannot reach IPVS. Every reply is matched to its request by
/// sequence number and port, and each request consumes exactly the replies
/// and ACKs it asked for. Dropping the handle closes its sockets.
///
/// ```no_run
/// use ipvsctl::Handle;
/// use ipvsctl::model::{RealServer, ServiceKey, VirtualServer};
///
/// let ipvs = Handle::new()?;
/// let key = ServiceKey::tcp("192.0.2.10:80".parse().unwrap());
/// ipvs.add_service(&VirtualServer::new(key))?;
/// ipvs.add_destination(&key, &RealServer::new("198.51.100.1:8080".parse().unwrap()))?;
/// for dest in ipvs.list_destinations(&key)? {
///     println!("{key} -> {} weight {}", dest.server.addr, dest.server.weight);
/// }
/// # Ok::<(), ipvsctl::Error>(())
/// ```
///
/// # Threads
///
/// `Handle` is `Send + Sync`: share one through an [`Arc`](std::sync::Arc)
/// or a reference. Calls from several threads are serialised on the socket
/// by a mutex; a request and all of its replies are one critical section, so
/// replies are never mixed up between callers. For parallel throughput open
/// one handle per thread (each has its own sockets); for bulk work use
/// [`Handle::apply`], which pipelines many requests per round trip, or a
/// [`Syncer`](crate::sync::Syncer). A caller that panicked mid-request
/// leaves the handle usable: the replies of the abandoned exchange are told
/// apart by sequence number.
///
/// # Network namespaces
///
/// IPVS tables are per network namespace. [`Handle::new`] works in the
/// caller's namespace; [`Handle::open`] in another one ([`NetNs`]: a named
/// namespace of `ip netns add`, a path such as `/proc/PID/ns/net`, or an open
/// namespace file descriptor). The socket is created inside that namespace by
/// a short-lived helper thread and belongs to it for life; the calling thread
/// and the rest of the process never change namespace. Entering another
/// namespace needs `CAP_SYS_ADMIN`; IPVS itself needs `CAP_NET_ADMIN` in the
/// initial user namespace (a rootless container gets
/// [`Error::PermissionDenied`]). The namespace is pinned when the handle
/// opens: a [`NetNs::Path`] or [`NetNs::Named`] is opened once, and
/// [`NetNs::Current`] is the calling thread's namespace at that moment
/// ([`NetNs::pin`]). Every later socket of the handle, its table-dump
/// socket and a [`Syncer`](crate::sync::Syncer)'s write and reader sockets,
/// is made in that pinned namespace, even if `/run/netns/NAME` is deleted
/// and created again, the pid is reused, or the handle is used from a thread
/// in another namespace; [`Handle::netns`] reports it.
///
/// Every socket is connected to the kernel (netlink port 0), and each
/// received datagram's sender is checked: another process in the namespace
/// cannot answer in the kernel's place.
///
/// # Errors
///
/// Every operation returns [`Result`], with an [`Error`] that names the
/// operation and the object it acted on:
///
/// * [`Error::Invalid`]: a value refused before anything was sent (the field
///   and the reason, see [`crate::model::ValidationError`]);
/// * the kernel's errno turned into what it means for that operation:
///   [`Error::ServiceExists`], [`Error::ServiceNotFound`],
///   [`Error::DestinationExists`], [`Error::DestinationNotFound`],
///   [`Error::UnknownScheduler`], [`Error::PermissionDenied`] and so on, or
///   [`Error::Kernel`] for any other errno; [`Error::errno`] and
///   [`Error::kernel_message`] (the extended ACK) work on all of them, and
///   [`Error::is_not_found`] / [`Error::is_exists`] test the common cases;
/// * [`Error::Lost`] and [`Error::Unanswered`]: the request was sent but its
///   answer never came, so whether it took effect is unknown (read back to
///   find out);
/// * [`Error::Unsupported`]: the kernel accepted a request but ignored part
///   of it (found by reading back);
/// * [`Error::Io`] and [`Error::Decode`]: the socket failed, or a reply
///   could not be decoded.
///
/// Nothing panics on a kernel reply, and every wait for one is bounded: a
/// receive that waits 60 seconds fails with [`Error::Io`] instead of hanging.
#[derive(Debug)]
pub struct Handle {
    /// Every request but the table-wide service dump ([`DumpSize::Page`]).
    inner: Mutex<Inner>,
    /// Table-wide service dumps ([`DumpSize::Large`]), opened on first use.
    tables: Mutex<Option<Inner>>,
    family: u16,
    netns: NetNs,
}

/// Which of the handle's sockets a request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// The socket of every request.
    Main,
    /// The socket of table-wide service dumps.
    Tables,
}

#[derive(Debug)]
struct Inner {
    sock: GenlSocket,
    seq: u32,
}

/// One request with what is needed to explain its failure.
pub(crate) struct Request {
    /// The caller's index for the request, handed back with its result.
    pub index: usize,
    pub msg: IpvsMessage,
    pub kind: Kind,
    pub target: Target,
}

impl Handle {
    /// Opens a handle in the caller's network namespace.
    ///
    /// ```no_run
    /// let ipvs = ipvsctl::Handle::new()?;
    /// println!("{} services", ipvs.list_services()?.len());
    /// # Ok::<(), ipvsctl::Error>(())
    /// ```
    pub fn new() -> Result<Self> {
        Self::open(&NetNs::Current)
    }

    /// Opens a handle in another network namespace (a path such as
    /// `/run/netns/NAME`, or an open namespace fd) without moving the calling
    /// thread: the socket is created inside the namespace and keeps it for
    /// life.
    ///
    /// The namespace is pinned here, once ([`NetNs::pin`]; for
    /// [`NetNs::Current`], the calling thread's namespace): every socket the
    /// handle opens later (the table-dump socket, a [`crate::sync::Syncer`]'s
    /// write and reader sockets) is made in that same namespace, even if the
    /// name now leads to another one (`ip netns del` and `add`, a reused pid)
    /// or a later call comes from a thread in another namespace.
    ///
    /// ```no_run
    /// use ipvsctl::{Handle, NetNs};
    /// let ipvs = Handle::open(&NetNs::named("blue"))?;
    /// # Ok::<(), ipvsctl::Error>(())
    /// ```
    pub fn open(netns: &NetNs) -> Result<Self> {
        let netns = NetNs::Pinned(
            netns
                .pin()
                .map_err(|e| Error::io(Operation::OpenNamespace, e))?,
        );
        let mut sock = GenlSocket::open_with(&netns, DumpSize::Page)
            .map_err(|e| Error::io(Operation::OpenSocket, e))?;
        let family = sock
            .resolve_family(consts::FAMILY_NAME, 1)
            .map_err(|e| Error::io(Operation::ResolveFamily, e))?;
        let Some(family) = family else {
            return Err(Error::Unavailable {
                reason: format!(
                    "the kernel has no \"IPVS\" generic-netlink family (network namespace: {netns}); {}",
                    crate::kmod::diagnose()
                ),
            });
        };
        Ok(Handle {
            inner: Mutex::new(Inner { sock, seq: 1 }),
            tables: Mutex::new(None),
            family: family.id,
            netns,
        })
    }

    /// The network namespace this handle works in: always a
    /// [`NetNs::Pinned`], which displays as what the handle was opened with
    /// and the namespace's identity (`/run/netns/blue (net:[4026532301])`).
    /// A handle opened from it works in exactly the same namespace.
    pub fn netns(&self) -> &NetNs {
        &self.netns
    }

    /// The resolved generic-netlink family id of IPVS.
    pub fn family_id(&self) -> u16 {
        self.family
    }

    /// Sends one raw IPVS message and returns the data messages of its
    /// reply: an escape hatch for requests the typed API cannot express (the
    /// codec's [`crate::codec::attr`] enums build anything). `dump` sends it
    /// with `NLM_F_DUMP`. Kernel errors come back typed, without an object.
    ///
    /// ```no_run
    /// use ipvsctl::codec::request;
    /// let ipvs = ipvsctl::Handle::new()?;
    /// let replies = ipvs.request(request::dump_services(), true)?;
    /// # Ok::<(), ipvsctl::Error>(())
    /// ```
    pub fn request(&self, msg: IpvsMessage, dump: bool) -> Result<Vec<IpvsMessage>> {
        let kind = if dump { Kind::Dump } else { Kind::Ack };
        self.call(msg, kind, Target::Global)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic in another caller leaves the socket usable: replies of an
        // abandoned exchange are told apart by sequence number.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs requests pipelined, taking them from the iterator as they are
    /// sent; `on_reply` gets each request's [`Request::index`] and its reply
    /// turned into data or a typed error, in order.
    pub(crate) fn run<I, F>(&self, requests: I, mut on_reply: F) -> Result<()>
    where
        I: IntoIterator<Item = Request>,
        F: FnMut(usize, Result<Vec<IpvsMessage>>),
    {
        self.run_answers(requests, |i, r| on_reply(i, r.map(|a| a.data)))
    }

    /// [`Handle::run`], also telling how many datagrams each answer took.
    pub(crate) fn run_answers<I, F>(&self, requests: I, on_reply: F) -> Result<()>
    where
        I: IntoIterator<Item = Request>,
        F: FnMut(usize, Result<Answer>),
    {
        self.run_decoded(requests, |_, body| frame::decode_message(body), on_reply)
    }

    /// [`Handle::run_answers`], each data message decoded by `decode` (given
    /// the request's index and the message body) as it arrives: the path of
    /// large dumps, which never builds [`IpvsMessage`]s.
    pub(crate) fn run_decoded<I, D, Dec, F>(
        &self,
        requests: I,
        decode: Dec,
        on_reply: F,
    ) -> Result<()>
    where
        I: IntoIterator<Item = Request>,
        Dec: FnMut(usize, &[u8]) -> std::result::Result<D, DecodeError>,
        F: FnMut(usize, Result<Answer<D>>),
    {
        self.exchange(&mut self.lock(), requests, decode, on_reply)
    }

    /// Runs requests through the socket `inner` (see [`Handle::run_decoded`]).
    fn exchange<I, D, Dec, F>(
        &self,
        inner: &mut Inner,
        requests: I,
        mut decode: Dec,
        mut on_reply: F,
    ) -> Result<()>
    where
        I: IntoIterator<Item = Request>,
        Dec: FnMut(usize, &[u8]) -> std::result::Result<D, DecodeError>,
        F: FnMut(usize, Result<Answer<D>>),
    {
        let Inner { sock, seq } = inner;
        let reqs = requests.into_iter().map(|r| {
            let ctx = Context {
                index: r.index,
                cmd: r.msg.cmd,
                target: r.target,
            };
            (r.msg, r.kind, ctx)
        });
        Exchange::new(sock, self.family, seq)
            .run_decoded(
                reqs,
                |ctx, body| decode(ctx.index, body),
                |_, ctx, reply| on_reply(ctx.index, reply_result(&ctx, reply)),
            )
            .map_err(|e| Error::io(Operation::Exchange, e))
    }

    /// Runs one request and returns its data replies, or its typed error.
    pub(crate) fn call(
        &self,
        msg: IpvsMessage,
        kind: Kind,
        target: Target,
    ) -> Result<Vec<IpvsMessage>> {
        self.call_answer(msg, kind, target).map(|a| a.data)
    }

    /// [`Handle::call`], also telling how many datagrams the answer took.
    pub(crate) fn call_answer(
        &self,
        msg: IpvsMessage,
        kind: Kind,
        target: Target,
    ) -> Result<Answer> {
        self.call_decoded(msg, kind, target, frame::decode_message)
    }

    /// [`Handle::call_answer`], the data decoded by `decode` as it arrives
    /// (see [`Handle::run_decoded`]).
    pub(crate) fn call_decoded<D>(
        &self,
        msg: IpvsMessage,
        kind: Kind,
        target: Target,
        decode: impl FnMut(&[u8]) -> std::result::Result<D, DecodeError>,
    ) -> Result<Answer<D>> {
        self.call_via(Via::Main, msg, kind, target, decode)
    }

    /// [`Handle::call_decoded`] on a chosen socket.
    pub(crate) fn call_via<D>(
        &self,
        via: Via,
        msg: IpvsMessage,
        kind: Kind,
        target: Target,
        mut decode: impl FnMut(&[u8]) -> std::result::Result<D, DecodeError>,
    ) -> Result<Answer<D>> {
        let mut out = None;
        let op = describe(msg.cmd, &target);
        let request = [Request {
            index: 0,
            msg,
            kind,
            target,
        }];
        let decode = |_, body: &[u8]| decode(body);
        let on_reply = |_, r| out = Some(r);
        match via {
            Via::Main => self.exchange(&mut self.lock(), request, decode, on_reply)?,
            Via::Tables => {
                let mut tables = self.tables.lock().unwrap_or_else(|p| p.into_inner());
                let inner = match &mut *tables {
                    Some(inner) => inner,
                    slot => {
                        let sock = GenlSocket::open_with(&self.netns, DumpSize::Large)
                            .map_err(|e| Error::io(Operation::OpenSocket, e))?;
                        slot.insert(Inner { sock, seq: 1 })
                    }
                };
                self.exchange(inner, request, decode, on_reply)?
            }
        }
        out.unwrap_or(Err(Error::Lost { op }))
    }
}

/// What is kept of a request while it is in flight: enough to explain its
/// failure.
struct Context {
    index: usize,
    cmd: IpvsCmd,
    target: Target,
}

/// The data of a successful reply.
pub(crate) struct Answer<D = IpvsMessage> {
    pub data: Vec<D>,
    /// Datagrams the data came in (see [`Reply::datagrams`]).
    pub datagrams: usize,
}

/// Turns a reply into the request's data or its typed error.
fn reply_result<D>(ctx: &Context, reply: Reply<D>) -> Result<Answer<D>> {
    let op = || describe(ctx.cmd, &ctx.target);
    match reply.result {
        Ok(()) => Ok(Answer {
            data: reply.data,
            datagrams: reply.datagrams,
        }),
        Err(Failure::Kernel(e)) => Err(Error::from_kernel(op(), &ctx.target, e)),
        Err(Failure::Decode(source)) => Err(Error::Decode { op: op(), source }),
        Err(Failure::Lost) => Err(Error::Lost { op: op() }),
        Err(Failure::Unanswered) => Err(Error::Unanswered { op: op() }),
        Err(Failure::Truncated) => Err(Error::io(
            op(),
            std::io::Error::other("the answer was larger than the receive buffer and was cut off"),
        )),
    }
}
