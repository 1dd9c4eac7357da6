//! The functional probe, the final word: does the kernel answer for the
//! IPVS generic netlink family? Optionally: can a service with a given
//! scheduler be created, in a private network namespace?

use std::fmt;
use std::io;
use std::sync::mpsc;
use std::time::Duration;

use rustix::io::Errno;

use super::error::KmodError;
use super::name::ModuleName;
use super::report::FamilyInfo;
use crate::Timeout;
use crate::codec::request;
use crate::model::{AddressFamily, Scheduler, ServiceKey, VirtualServer};
use crate::netlink::netns::NetNs;
use crate::netlink::{DumpSize, Exchange, Failure, Kind, NlSocket, Protocol};

/// The name IPVS registers its generic netlink family under.
pub const IPVS_FAMILY: &str = "IPVS";

/// Asks the kernel's generic netlink controller for the IPVS family.
///
/// `Ok(Some(_))` means IPVS works in this kernel; `Ok(None)` means the
/// kernel answered that there is no such family.
///
/// Asking is not read-only: when the family is not registered, the kernel
/// tries to load a module that declares it, and `ip_vs` does (its alias is
/// `net-pf-16-proto-16-family-IPVS`). The kernel runs its own modprobe
/// helper for that, in the host's namespaces with the host's
/// `/lib/modules`, whoever asks. So on a kernel that can autoload modules
/// this probe loads `ip_vs` itself, even from a container whose own
/// `/lib/modules` does not match the kernel; `Ok(None)` then means the
/// kernel could not load it either.
///
/// ```no_run
/// match ipvsctl::kmod::probe_family()? {
///     Some(f) => println!("IPVS family id {}", f.id),
///     None => println!("no IPVS: {}", ipvsctl::kmod::diagnose()),
/// }
/// # Ok::<(), ipvsctl::kmod::KmodError>(())
/// ```
pub fn probe_family() -> Result<Option<FamilyInfo>, KmodError> {
    resolve_family(IPVS_FAMILY)
}

/// Resolves any generic netlink family by name (`CTRL_CMD_GETFAMILY`).
///
/// ```no_run
/// let ctrl = ipvsctl::kmod::resolve_family("nlctrl")?;
/// assert_eq!(ctrl.map(|f| f.id), Some(0x10));
/// # Ok::<(), ipvsctl::kmod::KmodError>(())
/// ```
pub fn resolve_family(name: &str) -> Result<Option<FamilyInfo>, KmodError> {
    // GENL_NAMSIZ is 16 with the NUL; longer names get EINVAL.
    if name.is_empty() || name.len() > 15 || name.contains('\0') {
        return Err(KmodError::InvalidFamilyName(name.to_owned()));
    }
    let mut socket = open()?;
    resolve_on(&mut socket, name)
}

fn resolve_on(socket: &mut NlSocket, name: &str) -> Result<Option<FamilyInfo>, KmodError> {
    let mut seq = 0;
    let found = Exchange::new(socket, &mut seq)
        .resolve_family(name)
        .map_err(|source| KmodError::Netlink {
            during: "CTRL_CMD_GETFAMILY",
            source,
        })?;
    Ok(found.map(|f| FamilyInfo::new(name, f.id, f.version)))
}

fn open() -> Result<NlSocket, KmodError> {
    NlSocket::open(
        &NetNs::Current,
        Protocol::Generic,
        DumpSize::Large,
        Timeout::HANDLE_DEFAULT,
    )
    .map_err(|source| KmodError::Netlink {
        during: "socket",
        source,
    })
}

/// What [`probe_scheduler`] found.
///
/// ```no_run
/// use ipvsctl::kmod::{self, SchedulerProbe};
///
/// match kmod::probe_scheduler("mh", kmod::DEFAULT_PROBE_TIMEOUT)? {
///     SchedulerProbe::Works { .. } => println!("mh works"),
///     SchedulerProbe::FamilyAbsent => println!("no IPVS: {}", kmod::diagnose()),
///     SchedulerProbe::Refused { explanation, .. } => println!("mh: {explanation}"),
///     other => println!("mh: {other}"),
/// }
/// # Ok::<(), ipvsctl::kmod::KmodError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchedulerProbe {
    /// A test service with the scheduler was created (and deleted).
    Works {
        /// The IPVS family.
        family: FamilyInfo,
        /// The errno of the delete, 0 on success (the namespace goes away
        /// with the thread either way).
        delete_errno: i32,
    },
    /// The kernel has no IPVS family.
    FamilyAbsent,
    /// The kernel refused to create the service.
    Refused {
        /// The errno.
        errno: i32,
        /// What it means here, in plain words.
        explanation: String,
    },
}

impl fmt::Display for SchedulerProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchedulerProbe::Works { family, .. } => write!(
                f,
                "a test service was created and deleted (IPVS family id {})",
                family.id
            ),
            SchedulerProbe::FamilyAbsent => f.write_str("the kernel has no IPVS family"),
            SchedulerProbe::Refused { errno, explanation } => write!(
                f,
                "the kernel refused a test service: {}: {explanation}",
                io::Error::from_raw_os_error(*errno)
            ),
        }
    }
}

/// How long [`probe_scheduler`] is usually given: 10 seconds. The probe
/// is two requests in a fresh namespace, answered in milliseconds; the
/// kernel may load the scheduler's module meanwhile, which takes longer but
/// not seconds.
pub const DEFAULT_PROBE_TIMEOUT: Timeout = Timeout::from_secs(10);

/// Creates and deletes a test service (firewall mark 1, IPv4) with
/// `scheduler`, in a private network namespace, on a thread of its own so
/// the caller's thread never changes namespace.
///
/// The kernel loads `ip_vs_<scheduler>` itself when it can, so a success
/// means the scheduler is usable. Needs `CAP_SYS_ADMIN` (for the namespace)
/// and `CAP_NET_ADMIN`.
///
/// This is the functional confirmation, layered on the answer of
/// [`check`](super::check) (or [`Capabilities`](crate::capabilities::Capabilities) on a
/// handle): it changes the kernel's state (it may load a module), so check
/// first, load what is needed ([`load_needed`](super::load_needed)), then
/// probe. Never probe `lblc` or `lblcr` before their modules are loaded: the
/// kernel would load them while holding the IPVS mutex, which can deadlock
/// with network-namespace cleanup (the module docs say more).
///
/// The caller waits at most `timeout` ([`DEFAULT_PROBE_TIMEOUT`] is a
/// fair choice). A thread stuck in the kernel cannot be killed: at the
/// deadline the probe returns [`KmodError::ProbeTimedOut`] and leaves its
/// thread detached; it ends, and its namespace goes away, when the kernel
/// lets it go (never, in a deadlock).
///
/// The requests are built by the crate's codec and sent through its
/// netlink layer (not the handle, whose error path uses this module).
///
/// ```no_run
/// use ipvsctl::kmod::{self, DEFAULT_PROBE_TIMEOUT, SchedulerProbe};
///
/// match kmod::probe_scheduler("wrr", DEFAULT_PROBE_TIMEOUT)? {
///     SchedulerProbe::Works { .. } => println!("wrr works"),
///     other => println!("wrr: {other}"),
/// }
/// # Ok::<(), ipvsctl::kmod::KmodError>(())
/// ```
pub fn probe_scheduler(scheduler: &str, timeout: Timeout) -> Result<SchedulerProbe, KmodError> {
    let timeout = timeout.get();
    // Validates the name; IP_VS_SCHEDNAME_MAXLEN is 16 with the NUL.
    ModuleName::for_scheduler(scheduler)?;
    if scheduler.len() > 15 {
        return Err(KmodError::InvalidModuleName {
            name: scheduler.to_owned(),
            reason: "IPVS scheduler names are at most 15 bytes",
        });
    }
    let name = scheduler.to_owned();
    let work = in_private_netns(move || probe_scheduler_here(&name));
    match within(timeout, work)? {
        Some(result) => result,
        None => Err(KmodError::ProbeTimedOut {
            scheduler: scheduler.to_owned(),
            timeout,
        }),
    }
}

/// `work` moved into a new network namespace: the namespace goes away when
/// the thread that runs it ends.
fn in_private_netns<T>(
    work: impl FnOnce() -> Result<T, KmodError> + Send + 'static,
) -> impl FnOnce() -> Result<T, KmodError> + Send + 'static {
    move || {
        // SAFETY: only CLONE_NEWNET is passed: this thread gets a new
        // network namespace. File descriptor tables are not unshared (the
        // hazard `unshare_unsafe` documents is CLONE_FILES), and no other
        // thread is affected; `within` runs this on a thread of its own.
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) }
            .map_err(|e| KmodError::Netns(e.into()))?;
        work()
    }
}

/// Runs `work` on a thread of its own and waits for it until `timeout` has
/// passed: `Ok(None)` then, and the thread is left detached (a thread
/// blocked in a system call cannot be stopped from outside).
fn within<T: Send + 'static>(
    timeout: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<Option<T>, KmodError> {
    let (tx, rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("ipvsctl-kmod-probe".into())
        .spawn(move || {
            // The receiver is gone when the caller stopped waiting.
            let _ = tx.send(work());
        })
        .map_err(|e| KmodError::ProbeThread(e.to_string()))?;
    match rx.recv_timeout(timeout) {
        Ok(result) => Ok(Some(result)),
        Err(mpsc::RecvTimeoutError::Timeout) => Ok(None),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            Err(KmodError::ProbeThread("it panicked".into()))
        }
    }
}

fn probe_scheduler_here(scheduler: &str) -> Result<SchedulerProbe, KmodError> {
    let mut socket = open()?;
    let Some(family) = resolve_on(&mut socket, IPVS_FAMILY)? else {
        return Ok(SchedulerProbe::FamilyAbsent);
    };
    let key = ServiceKey::fwmark(PROBE_FWMARK, AddressFamily::Inet);
    let service = VirtualServer::new(key).with_scheduler(Scheduler::from_name(scheduler));
    let invalid = |e: crate::model::ValidationError| KmodError::InvalidModuleName {
        name: scheduler.to_owned(),
        reason: if matches!(e, crate::model::ValidationError::NameTooLong { .. }) {
            "IPVS scheduler names are at most 15 bytes"
        } else {
            "not a valid IPVS scheduler name"
        },
    };
    let requests = [
        (
            request::new_service(&service).map_err(invalid)?,
            Kind::Ack,
            (),
        ),
        (request::del_service(&key).map_err(invalid)?, Kind::Ack, ()),
    ];
    let mut errnos = [0i32; 2];
    let mut seq = 1;
    Exchange::new(&mut socket, &mut seq)
        .run(family.id, requests, |i, (), reply| {
            errnos[i] = match reply.result {
                Ok(()) => 0,
                Err(Failure::Kernel(e)) => e.errno(),
                // No answer: the handler returned EINTR (see the variant).
                Err(Failure::Unanswered) => Errno::INTR.raw_os_error(),
                Err(Failure::TimedOut { .. }) => Errno::TIMEDOUT.raw_os_error(),
                Err(Failure::Decode(_) | Failure::Lost | Failure::Truncated) => {
                    Errno::IO.raw_os_error()
                }
            };
        })
        .map_err(|source| KmodError::Netlink {
            during: "IPVS test service",
            source,
        })?;
    if errnos[0] != 0 {
        return Ok(SchedulerProbe::Refused {
            errno: errnos[0],
            explanation: refusal(errnos[0], scheduler),
        });
    }
    Ok(SchedulerProbe::Works {
        family,
        delete_errno: errnos[1],
    })
}

fn refusal(errno: i32, scheduler: &str) -> String {
    if errno == Errno::NOENT.raw_os_error() {
        format!(
            "the kernel has no scheduler {scheduler:?}: module ip_vs_{scheduler} is not built in, \
             not loaded, and the kernel could not load it"
        )
    } else if errno == Errno::PERM.raw_os_error() {
        "changing IPVS needs CAP_NET_ADMIN, which this process does not have".into()
    } else {
        "unexpected; the kernel log (dmesg) may say more".into()
    }
}

/// The firewall mark of the probe's test service.
const PROBE_FWMARK: u32 = 1;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_stuck_probe_thread_is_left_at_the_deadline() {
        let timeout = Duration::from_millis(200);
        let start = Instant::now();
        let got = within(timeout, || std::thread::sleep(Duration::from_secs(30))).unwrap();
        let took = start.elapsed();
        assert_eq!(got, None);
        assert!(
            took >= timeout && took < timeout + Duration::from_secs(2),
            "{took:?}"
        );
    }

    #[test]
    fn a_probe_that_ends_in_time_gives_its_answer() {
        assert_eq!(within(Duration::from_secs(20), || 7).unwrap(), Some(7));
        assert!(matches!(
            within(Duration::from_secs(20), || -> u8 { panic!("probe") }),
            Err(KmodError::ProbeThread(_))
        ));
    }
}
