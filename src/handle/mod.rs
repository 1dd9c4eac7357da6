//! The handle: every IPVS operation over one generic-netlink socket (and a
//! second one, opened on first use, for dumps of the whole service table:
//! see [`DumpSize`] for why one socket cannot serve both kinds of dump well).
//!
//! What users need to know (threads, namespaces, errors) is on [`Handle`]
//! itself: this module is private and only its re-exports are documented.

mod admin;
pub mod batch;
pub mod capabilities;
mod dests;
mod error;
mod lane;
mod overlap;
mod services;

pub use error::{Error, Operation, Result};
pub(crate) use error::{Target, describe};

use crate::Timeout;
use crate::codec::{DecodeError, IpvsCmd, IpvsMessage, RequestKind, consts, frame};
use crate::netlink::Failure;
use crate::netlink::netns::{NetNs, PinnedNetNs};
use crate::netlink::{DumpSize, Exchange, Kind, NlSocket, Protocol, Reply};
use lane::Lane;

/// A connection to the kernel's IPVS in one network namespace: every
/// operation of `ipvsadm` (services, real servers, timeouts, sync daemons,
/// counters, flush), typed, plus pipelined batches ([`Handle::apply`]).
///
/// Opening a handle resolves the `IPVS` generic-netlink family once. Where
/// the kernel has no IPVS (module missing and not loadable) it refuses to
/// open with [`Error::Unavailable`], whose reason carries the kernel-module
/// check's diagnosis (what `kmod::diagnose` gives with the feature `kmod`;
/// the check is there without it), so a handle never sends a
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
/// or a reference. Calls from several threads take turns on the socket, in
/// the order they asked for it (each waits at most the handle's timeout,
/// see below); a request and all of its replies are one turn, so replies
/// are never mixed up between callers. For parallel throughput open
/// one handle per thread (each has its own sockets); for bulk work use
/// [`Handle::apply`], which pipelines many requests per round trip, or a
/// [`Syncer`](crate::sync::Syncer). No caller's code runs during a turn:
/// the callbacks of [`Handle::apply_with`] and
/// [`Handle::list_destinations_each`] may use the handle themselves.
///
/// A socket whose exchange did not finish (a request timed out, the socket
/// failed, or a panic unwound out of the call) is closed, never used again:
/// the next request opens a fresh one, so an answer meant for the abandoned
/// exchange can never be taken for the answer to a later request, and the
/// handle stays usable.
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
/// * [`Error::Timeout`]: a wait ran out of the handle's timeout (see below);
/// * [`Error::Unsupported`]: the kernel accepted a request but ignored part
///   of it (found by reading back);
/// * [`Error::Io`] and [`Error::Decode`]: the socket failed, or a reply
///   could not be decoded.
///
/// Nothing panics on a kernel reply, and every wait of the handle ends
/// within its timeout ([`HandleOptions::timeout`], 60 seconds unless set),
/// measured on the monotonic clock: a request the kernel stays silent about
/// for that long, or a caller that waits that long for the socket while
/// other callers use it, gets [`Error::Timeout`]. The bound is per wait: a
/// long dump or batch that keeps getting answers runs as long as it needs,
/// and the time a callback of the caller's takes does not count against it
/// (a helper thread that waits for the callback to take its answers holds
/// no socket meanwhile). A socket whose request timed out is closed and the
/// next request opens a new one, so the handle stays usable. One wait
/// cannot be bounded: netlink runs the kernel's handler for a request
/// inside `send`, in the calling thread, and nothing interrupts it (a
/// scheduler module whose loading waits on the IPVS mutex is one way it can
/// hang). The thread in that `send` stays there (for a call that talks to
/// the kernel from a helper thread, [`Handle::list_destinations_each`] and a
/// syncer's large writes, so does the caller, which waits for its helper);
/// every other caller of the handle gets [`Error::Timeout`] from its wait
/// for the socket instead of waiting with it, and should treat the handle
/// as unusable (open a new one).
#[derive(Debug)]
pub struct Handle {
    /// Every request but the table-wide service dump ([`DumpSize::Page`]).
    main: Lane<Inner>,
    /// Table-wide service dumps ([`DumpSize::Large`]), opened on first use.
    tables: Lane<Inner>,
    family: u16,
    netns: PinnedNetNs,
    timeout: Timeout,
    /// Requests per datagram of the main socket (see
    /// [`NlSocket::max_batch`]).
    max_batch: usize,
}

/// How a [`Handle`] is opened.
///
/// ```no_run
/// use std::time::Duration;
/// use ipvsctl::{Handle, HandleOptions, NetNs, Timeout};
/// let timeout = Timeout::new(Duration::from_secs(5))?;
/// let options = HandleOptions::new().with_timeout(timeout);
/// let ipvs = Handle::open(&NetNs::Current, &options)?;
/// assert_eq!(ipvs.timeout(), timeout);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandleOptions {
    /// The bound of every wait of the handle (60 seconds unless set): for
    /// the kernel's next answer, for the handle's socket while another
    /// thread uses it, and for room in the send buffer. A wait that runs
    /// out is [`Error::Timeout`].
    pub timeout: Timeout,
}

impl Default for HandleOptions {
    fn default() -> Self {
        HandleOptions {
            timeout: Timeout::HANDLE_DEFAULT,
        }
    }
}

impl HandleOptions {
    /// The defaults: a 60-second timeout.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the bound of every wait (see [`HandleOptions::timeout`]).
    pub fn with_timeout(mut self, timeout: Timeout) -> Self {
        self.timeout = timeout;
        self
    }
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
    sock: NlSocket,
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
        Self::open(&NetNs::Current, &HandleOptions::new())
    }

    /// Opens a handle in any network namespace (the caller's, a path such
    /// as `/run/netns/NAME`, or an open namespace fd), with `options` (see
    /// [`HandleOptions`]), without moving the calling thread: the socket is
    /// created inside the namespace and keeps it for life. [`Handle::new`]
    /// is this with the caller's namespace and the default options.
    ///
    /// The namespace is pinned here, once ([`NetNs::pin`]; for
    /// [`NetNs::Current`], the calling thread's namespace): every socket the
    /// handle opens later (the table-dump socket, a [`crate::sync::Syncer`]'s
    /// write and reader sockets) is made in that same namespace, even if the
    /// name now leads to another one (`ip netns del` and `add`, a reused pid)
    /// or a later call comes from a thread in another namespace.
    ///
    /// ```no_run
    /// use ipvsctl::{Handle, HandleOptions, NetNs};
    /// let ipvs = Handle::open(&NetNs::named("blue"), &HandleOptions::new())?;
    /// # Ok::<(), ipvsctl::Error>(())
    /// ```
    pub fn open(netns: &NetNs, options: &HandleOptions) -> Result<Self> {
        let netns = netns
            .pin()
            .map_err(|e| Error::io(Operation::OpenNamespace, e))?;
        let mut sock = open_socket(&netns, DumpSize::Page, options.timeout)?;
        let mut seq = 0;
        let family = Exchange::new(&mut sock, &mut seq)
            .resolve_family(consts::FAMILY_NAME)
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
            max_batch: sock.max_batch(),
            timeout: sock.timeout(),
            main: Lane::new(Some(Inner { sock, seq })),
            tables: Lane::new(None),
            family: family.id,
            netns,
        })
    }

    /// The network namespace this handle works in, pinned when it opened;
    /// it displays as what the handle was opened with and the namespace's
    /// identity (`/run/netns/blue (net:[4026532301])`). Hand it to the other
    /// components ([`crate::vip::VipDevice::netns`],
    /// [`crate::nodeips::Options::netns`], [`crate::sysctl::Sysctls::netns`],
    /// [`crate::conns::ConnTable::netns`]) to keep them with this handle's
    /// IPVS table; a handle opened from it ([`NetNs::from`]) works in exactly
    /// the same namespace.
    ///
    /// ```no_run
    /// use ipvsctl::{Handle, HandleOptions, NetNs};
    /// use ipvsctl::sysctl::{Sysctls, knobs};
    ///
    /// let ipvs = Handle::open(&NetNs::named("lb"), &HandleOptions::new())?;
    /// let sysctls = Sysctls::new().netns(ipvs.netns().clone());
    /// sysctls.write(&knobs::CONNTRACK, &true)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn netns(&self) -> &PinnedNetNs {
        &self.netns
    }

    /// The resolved generic-netlink family id of IPVS.
    pub fn family_id(&self) -> u16 {
        self.family
    }

    /// The bound of every wait of this handle ([`HandleOptions::timeout`]).
    pub fn timeout(&self) -> Timeout {
        self.timeout
    }

    /// Sends one raw IPVS message and returns the data messages of its
    /// reply: an escape hatch for requests the typed API cannot express (the
    /// codec's [`crate::codec::attr`] enums build anything), sent as `kind`
    /// says (a command, or a dump with `NLM_F_DUMP`). Kernel errors come
    /// back typed, without an object.
    ///
    /// ```no_run
    /// use ipvsctl::codec::{RequestKind, request};
    /// let ipvs = ipvsctl::Handle::new()?;
    /// let replies = ipvs.request(request::dump_services(), RequestKind::Dump)?;
    /// # Ok::<(), ipvsctl::Error>(())
    /// ```
    pub fn request(&self, msg: IpvsMessage, kind: RequestKind) -> Result<Vec<IpvsMessage>> {
        let kind = match kind {
            RequestKind::Do => Kind::Ack,
            RequestKind::Dump => Kind::Dump,
        };
        self.call(Via::Main, msg, kind, Target::Global, frame::decode_message)
            .map(|a| a.data)
    }

    /// Runs requests pipelined on the socket `via`, taking them from the
    /// iterator as they are sent; each data message is decoded by `decode`
    /// (given the request's index and the message body) as it arrives, and
    /// `on_reply` gets each request's [`Request::index`] and its answer or
    /// typed error, in order. The one way every request of the handle
    /// reaches the kernel.
    ///
    /// The socket is lent to one caller at a time, in order of asking; a
    /// caller that waits longer than the handle's timeout for it gets
    /// [`Error::Timeout`]. `decode` and `on_reply` run while it is lent and
    /// must not use the handle. A socket whose exchange did not finish
    /// (timed out, failed, or unwound from a panic) is closed, and the next
    /// request opens a new one: late answers cannot reach a later request.
    pub(crate) fn exchange<I, D, Dec, F>(
        &self,
        via: Via,
        requests: I,
        mut decode: Dec,
        mut on_reply: F,
    ) -> Result<()>
    where
        I: IntoIterator<Item = Request>,
        Dec: FnMut(usize, &[u8]) -> std::result::Result<D, DecodeError>,
        F: FnMut(usize, Result<Answer<D>>),
    {
        let mut requests = requests.into_iter().peekable();
        let Some(first) = requests.peek() else {
            return Ok(());
        };
        let first_op = describe(first.msg.cmd, &first.target);
        let (lane, dumps) = match via {
            Via::Main => (&self.main, DumpSize::Page),
            Via::Tables => (&self.tables, DumpSize::Large),
        };
        let (lease, socket) = lane
            .lend(self.timeout.get())
            .map_err(|waited| Error::Timeout {
                op: first_op.clone(),
                waited,
            })?;
        let mut inner = match socket {
            Some(inner) => inner,
            None => Inner {
                sock: open_socket(&self.netns, dumps, self.timeout)?,
                seq: 1,
            },
        };
        let Inner { sock, seq } = &mut inner;
        let reqs = requests.map(|r| {
            let ctx = Context {
                index: r.index,
                cmd: r.msg.cmd,
                target: r.target,
            };
            (r.msg, r.kind, ctx)
        });
        let mut timed_out = false;
        let outcome = Exchange::new(sock, seq).run_decoded(
            self.family,
            reqs,
            |ctx, body| decode(ctx.index, body),
            |_, ctx, reply| {
                timed_out |= matches!(reply.result, Err(Failure::TimedOut { .. }));
                on_reply(ctx.index, outcome(ctx.cmd, &ctx.target, reply))
            },
        );
        // Only a socket whose every request was answered serves the next
        // caller. Otherwise (here, or a panic unwinding out of the exchange)
        // the lease ends without it and the next request opens a fresh one.
        if !timed_out && outcome.is_ok() {
            lease.give_back(inner);
        }
        outcome.map_err(|e| match e.kind() {
            // A send that found no room in the buffer within the timeout.
            std::io::ErrorKind::WouldBlock => Error::Timeout {
                op: first_op,
                waited: self.timeout.get(),
            },
            _ => Error::io(Operation::Exchange, e),
        })
    }

    /// Runs one request on the socket `via` (see [`Handle::exchange`]) and
    /// returns its answer, each data message decoded by `decode`, or its
    /// typed error.
    pub(crate) fn call<D>(
        &self,
        via: Via,
        msg: IpvsMessage,
        kind: Kind,
        target: Target,
        mut decode: impl FnMut(&[u8]) -> std::result::Result<D, DecodeError>,
    ) -> Result<Answer<D>> {
        let op = describe(msg.cmd, &target);
        let request = [Request {
            index: 0,
            msg,
            kind,
            target,
        }];
        let mut out = None;
        self.exchange(via, request, |_, body| decode(body), |_, r| out = Some(r))?;
        out.unwrap_or(Err(Error::Lost { op }))
    }

    /// Sends one request on the handle's socket and waits for its ACK.
    pub(crate) fn ack(&self, msg: IpvsMessage, target: Target) -> Result<()> {
        self.call(Via::Main, msg, Kind::Ack, target, frame::decode_message)
            .map(drop)
    }

    /// Another handle in the same pinned namespace with the same options
    /// (a syncer's parallel readers).
    pub(crate) fn open_sibling(&self) -> Result<Handle> {
        let options = HandleOptions::new().with_timeout(self.timeout);
        Handle::open(&NetNs::from(&self.netns), &options)
    }

    /// Requests per datagram of the main socket.
    pub(crate) fn max_batch(&self) -> usize {
        self.max_batch
    }
}

/// Opens one of the handle's sockets, with the handle's timeout.
fn open_socket(netns: &PinnedNetNs, dumps: DumpSize, timeout: Timeout) -> Result<NlSocket> {
    NlSocket::open(&NetNs::from(netns), Protocol::Generic, dumps, timeout)
        .map_err(|e| Error::io(Operation::OpenSocket, e))
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

/// Turns the reply to a request (`cmd` on `target`) into its data or its
/// typed error.
pub(crate) fn outcome<D>(cmd: IpvsCmd, target: &Target, reply: Reply<D>) -> Result<Answer<D>> {
    let op = || describe(cmd, target);
    match reply.result {
        Ok(()) => Ok(Answer {
            data: reply.data,
            datagrams: reply.datagrams,
        }),
        Err(Failure::Kernel(e)) => Err(Error::from_kernel(op(), target, e)),
        Err(Failure::Decode(source)) => Err(Error::Decode { op: op(), source }),
        Err(Failure::Lost) => Err(Error::Lost { op: op() }),
        Err(Failure::Unanswered) => Err(Error::Unanswered { op: op() }),
        Err(Failure::TimedOut { waited }) => Err(Error::Timeout { op: op(), waited }),
        Err(Failure::Truncated) => Err(Error::io(
            op(),
            std::io::Error::other("the answer was larger than the receive buffer and was cut off"),
        )),
    }
}
