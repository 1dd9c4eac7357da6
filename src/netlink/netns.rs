//! Network namespaces: open a netlink socket inside another network namespace
//! without moving the calling thread.
//!
//! A netlink socket belongs, for its whole life, to the network namespace of
//! the thread that created it. [`socket_in`] uses that: for any namespace
//! other than [`NetNs::Current`] it spawns a short-lived thread, moves *that*
//! thread into the namespace with `setns(2)`, creates the socket there and
//! hands it back. The caller's thread never changes namespace, so nothing else
//! in the process (other sockets, other threads, DNS lookups) is affected.
//!
//! Entering another network namespace needs `CAP_SYS_ADMIN` (in practice:
//! root). Errors name the namespace and the cause.
//!
//! A name or a path says where a namespace *is now*: `/run/netns/NAME` can be
//! deleted and created again, the pid of `/proc/PID/ns/net` reused, and
//! [`NetNs::Current`] depends on the thread that asks. [`NetNs::pin`] opens
//! the namespace once and keeps the file descriptor ([`PinnedNetNs`]); every
//! socket made from a pinned namespace is made in that very namespace, for as
//! long as the pin lives. A [`crate::Handle`] pins its namespace when it
//! opens.
//!
//! The crate's components that work in a namespace ([`crate::vip::VipDevice`],
//! [`crate::nodeips::Options`], [`crate::sysctl::Sysctls`],
//! [`crate::conns::ConnTable`]) therefore take a [`PinnedNetNs`], never a
//! name or a path: pin once (or take [`crate::Handle::netns`]) and hand the
//! same pin to each, and they all stay in the namespace the pin holds, with
//! the handle's IPVS table. Left unset, each works in the namespace of the
//! thread that calls it, looked up at each call: what a process that never
//! changes namespace wants, at no extra cost. The functions of this module
//! ([`socket_in`], [`run_in`]) make one socket or run one closure, so they
//! take any [`NetNs`] and resolve it once for that call.
//!
//! ```no_run
//! use ipvsctl::netlink::netns::{NetNs, socket_in};
//!
//! // A namespace created with `ip netns add blue`.
//! let ns = NetNs::named("blue");
//! let socket = socket_in(&ns, netlink_sys::protocols::NETLINK_ROUTE)?;
//! # drop(socket);
//! # Ok::<(), std::io::Error>(())
//! ```

use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags, Stat};
use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};

/// Where `ip netns add NAME` puts its namespaces.
const NAMED_NETNS_DIR: &str = "/run/netns";
/// The network namespace of the calling thread.
const THREAD_NETNS: &str = "/proc/thread-self/ns/net";

/// A network namespace to work in.
///
/// Cheap to clone: an open namespace file descriptor is shared through an
/// [`Arc`]. The default is [`NetNs::Current`].
///
/// ```
/// use ipvsctl::netlink::netns::NetNs;
///
/// assert!(NetNs::default().is_current());
/// assert_eq!(NetNs::named("blue").to_string(), "/run/netns/blue");
/// assert_eq!(NetNs::path("/proc/1/ns/net").to_string(), "/proc/1/ns/net");
/// assert_eq!(NetNs::of_pid(42).to_string(), "/proc/42/ns/net");
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub enum NetNs {
    /// The namespace of the calling thread. Sockets are created directly on
    /// the caller's thread; no thread is spawned.
    #[default]
    Current,
    /// A namespace file such as `/run/netns/NAME` or `/proc/PID/ns/net`,
    /// opened each time a socket is created.
    Path(PathBuf),
    /// A namespace created by `ip netns add NAME`, i.e. `/run/netns/NAME`.
    /// The name is checked (non-empty, no `/`, not `.` or `..`) when the
    /// namespace is entered.
    Named(String),
    /// An already open namespace file descriptor (for example one kept from
    /// `/proc/PID/ns/net` so the namespace outlives the process).
    Fd(Arc<OwnedFd>),
    /// A namespace pinned by [`NetNs::pin`] (or a handle's,
    /// [`crate::Handle::netns`]), so that a handle or socket opened from it
    /// works in exactly that namespace.
    Pinned(PinnedNetNs),
}

impl NetNs {
    /// A namespace given by the path of its namespace file.
    ///
    /// ```
    /// use ipvsctl::netlink::netns::NetNs;
    /// let ns = NetNs::path("/run/netns/blue");
    /// assert!(!ns.is_current());
    /// ```
    pub fn path(path: impl Into<PathBuf>) -> Self {
        NetNs::Path(path.into())
    }

    /// A namespace created with `ip netns add NAME` (`/run/netns/NAME`).
    ///
    /// ```
    /// use ipvsctl::netlink::netns::NetNs;
    /// assert_eq!(NetNs::named("blue").to_string(), "/run/netns/blue");
    /// ```
    pub fn named(name: impl Into<String>) -> Self {
        NetNs::Named(name.into())
    }

    /// The network namespace of process `pid` (`/proc/PID/ns/net`).
    ///
    /// ```
    /// use ipvsctl::netlink::netns::NetNs;
    /// assert_eq!(NetNs::of_pid(1).to_string(), "/proc/1/ns/net");
    /// ```
    pub fn of_pid(pid: u32) -> Self {
        NetNs::Path(PathBuf::from(format!("/proc/{pid}/ns/net")))
    }

    /// A namespace given by an open file descriptor of a network namespace.
    ///
    /// ```no_run
    /// use ipvsctl::netlink::netns::NetNs;
    /// let file = std::fs::File::open("/proc/1/ns/net")?;
    /// let ns = NetNs::fd(file.into());
    /// # drop(ns);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn fd(fd: OwnedFd) -> Self {
        NetNs::Fd(Arc::new(fd))
    }

    /// Whether this is [`NetNs::Current`].
    ///
    /// ```
    /// use ipvsctl::netlink::netns::NetNs;
    /// assert!(NetNs::Current.is_current());
    /// assert!(!NetNs::named("x").is_current());
    /// ```
    pub fn is_current(&self) -> bool {
        matches!(self, NetNs::Current)
    }

    /// Opens the namespace once and keeps it open: the namespace this value
    /// stands for now, whatever its name or path leads to later. For
    /// [`NetNs::Current`] that is the calling thread's namespace
    /// (`/proc/thread-self/ns/net`); pinning a [`NetNs::Pinned`] shares its
    /// descriptor.
    ///
    /// Errors: the namespace file cannot be opened (the message names it;
    /// for [`NetNs::Current`] this needs `/proc`), or an invalid
    /// [`NetNs::Named`] name. Whether the file is a network namespace is
    /// checked when a socket is made in it.
    ///
    /// ```
    /// use ipvsctl::netlink::netns::NetNs;
    ///
    /// let here = NetNs::Current.pin()?;
    /// assert!(here.to_string().starts_with("current (net:["));
    /// assert_eq!(NetNs::from(here.clone()).pin()?.inode(), here.inode());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn pin(&self) -> io::Result<PinnedNetNs> {
        if let NetNs::Pinned(pinned) = self {
            return Ok(pinned.clone());
        }
        let fd = match self.open()? {
            Some(fd) => fd,
            None => Arc::new(
                rustix::fs::open(
                    THREAD_NETNS,
                    OFlags::RDONLY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|errno| {
                    context(
                        errno.into(),
                        format!(
                            "cannot open the calling thread's network namespace \
                                 {THREAD_NETNS} (is /proc mounted?)"
                        ),
                    )
                })?,
            ),
        };
        let stat = rustix::fs::fstat(&*fd).map_err(|errno| {
            context(
                errno.into(),
                format!("cannot inspect network namespace {self}"),
            )
        })?;
        Ok(PinnedNetNs {
            fd,
            id: NsId::of(&stat),
            origin: self.to_string().into(),
        })
    }

    /// Opens the namespace file (for [`NetNs::Path`] and [`NetNs::Named`]).
    fn open_path(&self, path: &Path) -> io::Result<OwnedFd> {
        rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).map_err(|errno| {
            let source = io::Error::from(errno);
            let hint = match source.kind() {
                io::ErrorKind::NotFound => " (no such namespace)",
                io::ErrorKind::PermissionDenied => " (permission denied)",
                _ => "",
            };
            context(
                source,
                format!("cannot open network namespace {self}{hint}"),
            )
        })
    }

    /// Opens (or shares) a file descriptor for the namespace; `None` for
    /// [`NetNs::Current`].
    fn open(&self) -> io::Result<Option<Arc<OwnedFd>>> {
        match self {
            NetNs::Current => Ok(None),
            NetNs::Path(path) => self.open_path(path).map(|fd| Some(Arc::new(fd))),
            NetNs::Named(name) => {
                if name.is_empty() || name == "." || name == ".." || name.contains('/') {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("invalid network namespace name {name:?}"),
                    ));
                }
                let path = Path::new(NAMED_NETNS_DIR).join(name);
                self.open_path(&path).map(|fd| Some(Arc::new(fd)))
            }
            NetNs::Fd(fd) => Ok(Some(Arc::clone(fd))),
            NetNs::Pinned(pinned) => Ok(Some(Arc::clone(&pinned.fd))),
        }
    }
}

impl From<PinnedNetNs> for NetNs {
    fn from(pinned: PinnedNetNs) -> Self {
        NetNs::Pinned(pinned)
    }
}

impl From<&PinnedNetNs> for NetNs {
    fn from(pinned: &PinnedNetNs) -> Self {
        NetNs::Pinned(pinned.clone())
    }
}

impl fmt::Display for NetNs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetNs::Current => f.write_str("current"),
            NetNs::Path(path) => write!(f, "{}", path.display()),
            NetNs::Named(name) => write!(f, "{NAMED_NETNS_DIR}/{name}"),
            NetNs::Fd(_) => f.write_str("namespace file descriptor"),
            NetNs::Pinned(pinned) => pinned.fmt(f),
        }
    }
}

/// A network namespace held open by a file descriptor ([`NetNs::pin`]): what
/// every component of the crate takes to work in a namespace, and what
/// [`crate::Handle::netns`] returns.
///
/// Cheap to clone (the descriptor is shared). The namespace lives at least as
/// long as any clone, even when its name is deleted and every process in it
/// has exited. Displays as where it was pinned from and its identity, for
/// example `/run/netns/blue (net:[4026532301])`, the identity as
/// `readlink /proc/PID/ns/net` shows it.
#[derive(Clone, Debug)]
pub struct PinnedNetNs {
    fd: Arc<OwnedFd>,
    id: NsId,
    /// How the namespace was named when it was pinned.
    origin: Arc<str>,
}

/// What tells namespaces apart: the device and inode of their nsfs file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct NsId {
    dev: u64,
    inode: u64,
}

impl NsId {
    fn of(stat: &Stat) -> NsId {
        NsId {
            dev: stat.st_dev,
            inode: stat.st_ino,
        }
    }
}

impl PinnedNetNs {
    /// The namespace's inode number: the `N` of `net:[N]` in
    /// `readlink /proc/PID/ns/net`. Together with [`PinnedNetNs::dev`] it
    /// identifies the namespace.
    pub fn inode(&self) -> u64 {
        self.id.inode
    }

    /// The device number of the namespace file system (nsfs) the namespace's
    /// inode belongs to.
    pub fn dev(&self) -> u64 {
        self.id.dev
    }

    /// Whether the calling thread is in this namespace (`false` when its own
    /// namespace cannot be looked up).
    fn holds_calling_thread(&self) -> bool {
        rustix::fs::stat(THREAD_NETNS).is_ok_and(|stat| NsId::of(&stat) == self.id)
    }
}

impl AsFd for PinnedNetNs {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl fmt::Display for PinnedNetNs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (net:[{}])", self.origin, self.id.inode)
    }
}

/// Runs `f` inside the network namespace `ns` and returns its result.
///
/// For [`NetNs::Current`], and for a [`NetNs::Pinned`] namespace the calling
/// thread is in, `f` runs directly on the calling thread. For any other
/// namespace, the namespace file is opened on the calling thread (so a
/// missing path is reported as such), then `f` runs on a short-lived thread
/// that first enters the namespace with `setns(2)`; the calling thread never
/// changes namespace. Whatever `f` creates there that is bound to a
/// namespace at creation (sockets) stays in that namespace for its life.
///
/// Errors: the namespace file cannot be opened (the message names the path);
/// `setns` fails (`EPERM`: the process lacks `CAP_SYS_ADMIN`; `EINVAL`: the
/// file is not a network namespace); the thread cannot be spawned; or `f`'s
/// own error. A panic in `f` is propagated to the caller.
///
/// ```no_run
/// use ipvsctl::netlink::netns::{NetNs, run_in};
///
/// // Read the interface list as the namespace "blue" sees it.
/// // `/proc/thread-self`: the thread `run_in` moved, not the main thread that
/// // `/proc/self` would show.
/// let dev = run_in(&NetNs::named("blue"), || {
///     std::fs::read_to_string("/proc/thread-self/net/dev")
/// })?;
/// println!("{dev}");
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn run_in<T, F>(ns: &NetNs, f: F) -> io::Result<T>
where
    T: Send,
    F: FnOnce() -> io::Result<T> + Send,
{
    if let NetNs::Pinned(pinned) = ns
        && pinned.holds_calling_thread()
    {
        return f();
    }
    let Some(fd) = ns.open()? else {
        return f();
    };
    let joined = std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("ipvsctl-netns".into())
            .spawn_scoped(scope, || {
                enter(ns, &fd)?;
                f()
            })
            .map_err(|e| {
                context(
                    e,
                    format!("cannot spawn a thread to enter network namespace {ns}"),
                )
            })?;
        Ok::<_, io::Error>(worker.join())
    })?;
    match joined {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Moves the current (worker) thread into the namespace behind `fd`.
fn enter(ns: &NetNs, fd: &OwnedFd) -> io::Result<()> {
    move_into_link_name_space(fd.as_fd(), Some(LinkNameSpaceType::Network)).map_err(|errno| {
        let source = io::Error::from(errno);
        let why = if errno == rustix::io::Errno::PERM {
            " (permission denied: entering a network namespace needs CAP_SYS_ADMIN)"
        } else if errno == rustix::io::Errno::INVAL {
            " (not a network namespace)"
        } else {
            ""
        };
        context(source, format!("cannot enter network namespace {ns}{why}"))
    })
}

/// Creates a netlink socket of `protocol` (a [`netlink_sys::protocols`]
/// constant) inside the network namespace `ns`.
///
/// The calling thread does not change namespace (see [`run_in`]); the socket
/// belongs to `ns` for its whole life. For [`NetNs::Current`] (and a pinned
/// namespace the calling thread is in) the socket is created directly on the
/// calling thread. The socket is not bound yet.
///
/// ```no_run
/// use ipvsctl::netlink::netns::{NetNs, socket_in};
/// use netlink_sys::protocols::NETLINK_GENERIC;
///
/// let mut socket = socket_in(&NetNs::of_pid(1234), NETLINK_GENERIC)?;
/// socket.bind_auto()?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn socket_in(ns: &NetNs, protocol: isize) -> io::Result<netlink_sys::Socket> {
    run_in(ns, || {
        netlink_sys::Socket::new(protocol).map_err(|e| {
            context(
                e,
                format!("cannot create netlink socket (protocol {protocol})"),
            )
        })
    })
}

/// An I/O error with a sentence of context; keeps the original error as its
/// source and its kind.
#[derive(Debug)]
struct Context {
    message: String,
    source: io::Error,
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.message, self.source)
    }
}

impl std::error::Error for Context {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

fn context(source: io::Error, message: String) -> io::Error {
    io::Error::new(source.kind(), Context { message, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_namespace() {
        assert_eq!(NetNs::Current.to_string(), "current");
        assert_eq!(NetNs::named("a").to_string(), "/run/netns/a");
        assert_eq!(NetNs::path("/x/y").to_string(), "/x/y");
    }

    #[test]
    fn current_runs_on_the_calling_thread() {
        let me = std::thread::current().id();
        let there = run_in(&NetNs::Current, || Ok(std::thread::current().id())).ok();
        assert_eq!(there, Some(me));
    }

    #[test]
    fn missing_path_is_a_clear_not_found_error() {
        let ns = NetNs::path("/nonexistent/ipvsctl-test-ns");
        let err = match socket_in(&ns, netlink_sys::protocols::NETLINK_ROUTE) {
            Ok(_) => panic!("opening a missing namespace succeeded"),
            Err(e) => e,
        };
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let text = err.to_string();
        assert!(text.contains("/nonexistent/ipvsctl-test-ns"), "{text}");
        assert!(text.contains("no such namespace"), "{text}");
    }

    #[test]
    fn missing_named_namespace_names_its_path() {
        let err = run_in(&NetNs::named("ipvsctl-no-such-ns"), || Ok(())).err();
        let text = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("/run/netns/ipvsctl-no-such-ns"), "{text}");
    }

    #[test]
    fn bad_names_are_rejected_before_touching_the_filesystem() {
        for name in ["", ".", "..", "a/b", "../../proc/1/ns/net"] {
            let err = run_in(&NetNs::named(name), || Ok(())).err();
            assert_eq!(
                err.map(|e| e.kind()),
                Some(io::ErrorKind::InvalidInput),
                "{name:?}"
            );
        }
    }

    #[test]
    fn a_file_that_is_not_a_namespace_is_refused() {
        // /proc/self/status opens fine but setns(2) rejects it (EINVAL), or
        // EPERM when unprivileged: either way an error, never a socket.
        let err = run_in(&NetNs::path("/proc/self/status"), || Ok(())).err();
        let text = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            text.contains("cannot enter network namespace /proc/self/status"),
            "{text}"
        );
    }

    #[test]
    fn own_namespace_by_path_works_and_does_not_move_the_caller() {
        // Entering our own namespace is allowed for root and shows that the
        // worker thread does the work. Skip silently where not permitted.
        let before = std::fs::read_link("/proc/thread-self/ns/net").ok();
        let ns = NetNs::path("/proc/self/ns/net");
        match run_in(&ns, || Ok(std::thread::current().name().map(str::to_owned))) {
            Ok(name) => assert_eq!(name.as_deref(), Some("ipvsctl-netns")),
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}"),
        }
        assert_eq!(std::fs::read_link("/proc/thread-self/ns/net").ok(), before);
    }

    /// The inode of the calling thread's network namespace, from
    /// `readlink /proc/thread-self/ns/net` (`net:[N]`).
    fn own_inode() -> u64 {
        let link = std::fs::read_link(THREAD_NETNS).unwrap();
        let text = link.to_string_lossy();
        let digits = text.trim_start_matches("net:[").trim_end_matches(']');
        digits.parse().unwrap()
    }

    #[test]
    fn pinning_the_current_namespace_keeps_the_threads_own() {
        let pinned = NetNs::Current.pin().unwrap();
        assert_eq!(pinned.inode(), own_inode());
        assert_eq!(
            pinned.to_string(),
            format!("current (net:[{}])", own_inode())
        );
        // Pinning a pinned namespace shares it; so does opening by path.
        let again = NetNs::from(pinned.clone()).pin().unwrap();
        assert_eq!((again.dev(), again.inode()), (pinned.dev(), pinned.inode()));
        let by_path = NetNs::path(THREAD_NETNS).pin().unwrap();
        assert_eq!(
            (by_path.dev(), by_path.inode()),
            (pinned.dev(), pinned.inode())
        );
        assert!(
            by_path
                .to_string()
                .starts_with("/proc/thread-self/ns/net (net:[")
        );
    }

    #[test]
    fn a_pinned_namespace_the_caller_is_in_runs_on_the_calling_thread() {
        let me = std::thread::current().id();
        let pinned = NetNs::from(NetNs::Current.pin().unwrap());
        let there = run_in(&pinned, || Ok(std::thread::current().id())).ok();
        assert_eq!(there, Some(me));
    }

    #[test]
    fn pinning_a_missing_namespace_names_it() {
        let err = NetNs::named("ipvsctl-no-such-ns").pin().err();
        let text = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("/run/netns/ipvsctl-no-such-ns"), "{text}");
    }

    #[test]
    #[should_panic(expected = "boom")]
    fn a_panic_inside_is_propagated() {
        let ns = NetNs::path("/proc/self/ns/net");
        // When entering is not permitted the error is returned instead; make
        // the test panic either way so it is meaningful as root and harmless
        // otherwise.
        let _ = run_in(&ns, || -> io::Result<()> { panic!("boom") });
        panic!("boom");
    }
}
