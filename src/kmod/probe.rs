//! The functional probe, the final word: does the kernel answer for the
//! IPVS generic netlink family? Optionally: can a service with a given
//! scheduler be created, in a private network namespace?

use std::fmt;
use std::io;
use std::time::{Duration, Instant};

use netlink_packet_core::{
    DefaultNla, Emitable, NLA_F_NESTED, NLA_TYPE_MASK, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL,
    NLM_F_REQUEST, NLMSG_ERROR, NetlinkBuffer, NetlinkMessage, NetlinkPayload, NlasIterator,
};
use netlink_packet_generic::ctrl::nlas::GenlCtrlAttrs;
use netlink_packet_generic::ctrl::{GenlCtrl, GenlCtrlCmd};
use netlink_packet_generic::{GenlFamily, GenlMessage};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_GENERIC};
use rustix::io::Errno;

use super::error::KmodError;
use super::name::ModuleName;

/// The name IPVS registers its generic netlink family under.
pub const IPVS_FAMILY: &str = "IPVS";

/// How long the probe waits for the kernel's reply. The kernel answers
/// generic netlink requests while handling the send, so this is a guard,
/// not a wait.
const REPLY_DEADLINE: Duration = Duration::from_secs(5);

/// A generic netlink family as the kernel's controller reported it.
///
/// ```no_run
/// let f = ipvsctl::kmod::resolve_family("nlctrl")?.expect("the controller always exists");
/// println!("{} id {} version {}", f.name, f.id, f.version);
/// # Ok::<(), ipvsctl::kmod::KmodError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FamilyInfo {
    /// The family's name.
    pub name: String,
    /// The id the kernel gave it (the netlink message type to use).
    pub id: u16,
    /// The family's version.
    pub version: u32,
}

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
    let socket = open()?;
    resolve_on(&socket, name)
}

fn resolve_on(socket: &Socket, name: &str) -> Result<Option<FamilyInfo>, KmodError> {
    let mut genl = GenlMessage::from_payload(GenlCtrl {
        cmd: GenlCtrlCmd::GetFamily,
        nlas: vec![GenlCtrlAttrs::FamilyName(name.to_owned())],
    });
    genl.finalize();
    let mut msg = NetlinkMessage::from(genl);
    msg.header.flags = NLM_F_REQUEST | NLM_F_ACK;
    msg.header.sequence_number = 1;
    msg.finalize();
    let mut bytes = vec![0u8; msg.buffer_len()];
    msg.serialize(&mut bytes);

    let (data, errno) = transact(socket, &bytes, 1)?;
    if errno == Errno::NOENT.raw_os_error() {
        return Ok(None);
    }
    if errno != 0 {
        return Err(KmodError::Netlink {
            during: "CTRL_CMD_GETFAMILY",
            source: io::Error::from_raw_os_error(errno),
        });
    }
    data.iter()
        .find_map(|m| family_from_reply(m))
        .map(Some)
        .ok_or_else(|| {
            KmodError::Protocol(format!("no family attributes in the reply for {name:?}"))
        })
}

/// Reads id, name and version from a `CTRL_CMD_NEWFAMILY` message: with
/// the crate's controller types, or attribute by attribute if they refuse
/// an attribute a newer kernel added.
fn family_from_reply(message: &[u8]) -> Option<FamilyInfo> {
    if let Ok(parsed) = NetlinkMessage::<GenlMessage<GenlCtrl>>::deserialize(message) {
        if let NetlinkPayload::InnerMessage(genl) = parsed.payload {
            let mut info = FamilyInfo {
                name: String::new(),
                id: 0,
                version: 0,
            };
            for nla in genl.payload.nlas {
                match nla {
                    GenlCtrlAttrs::FamilyId(id) => info.id = id,
                    GenlCtrlAttrs::FamilyName(n) => info.name = n,
                    GenlCtrlAttrs::Version(v) => info.version = v,
                    _ => {}
                }
            }
            return (info.id != 0).then_some(info);
        }
    }
    let buf = NetlinkBuffer::new_checked(message).ok()?;
    let attrs = buf.payload().get(4..)?;
    let mut info = FamilyInfo {
        name: String::new(),
        id: 0,
        version: 0,
    };
    for nla in NlasIterator::new(attrs).flatten() {
        let v = nla.value();
        match nla.kind() & NLA_TYPE_MASK {
            1 => info.id = u16::from_ne_bytes(v.get(..2)?.try_into().ok()?),
            2 => {
                let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
                info.name = String::from_utf8_lossy(&v[..end]).into_owned();
            }
            3 => info.version = u32::from_ne_bytes(v.get(..4)?.try_into().ok()?),
            _ => {}
        }
    }
    (info.id != 0).then_some(info)
}

fn open() -> Result<Socket, KmodError> {
    let err = |during| move |source| KmodError::Netlink { during, source };
    let mut socket = Socket::new(NETLINK_GENERIC).map_err(err("socket"))?;
    socket.bind_auto().map_err(err("bind"))?;
    socket
        .connect(&SocketAddr::new(0, 0))
        .map_err(err("connect"))?;
    socket
        .set_non_blocking(true)
        .map_err(err("set non-blocking"))?;
    Ok(socket)
}

/// Sends one request (with `NLM_F_ACK`) and collects the replies up to the
/// acknowledgement. Returns the data messages and the ack's errno (0 for
/// success, positive otherwise).
fn transact(socket: &Socket, request: &[u8], seq: u32) -> Result<(Vec<Vec<u8>>, i32), KmodError> {
    socket
        .send(request, 0)
        .map_err(|source| KmodError::Netlink {
            during: "send",
            source,
        })?;
    let deadline = Instant::now() + REPLY_DEADLINE;
    let mut data = Vec::new();
    loop {
        let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
        match socket.recv(&mut buf, 0) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return Err(KmodError::Protocol(
                        "the kernel did not reply within 5 seconds".into(),
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(source) => {
                return Err(KmodError::Netlink {
                    during: "recv",
                    source,
                });
            }
        }
        let mut offset = 0;
        while offset < buf.len() {
            let rest = buf.get(offset..).unwrap_or(&[]);
            let nl = NetlinkBuffer::new_checked(rest)
                .map_err(|e| KmodError::Protocol(format!("bad netlink header: {e}")))?;
            let len = nl.length() as usize;
            let msg = rest.get(..len).unwrap_or(rest);
            if nl.sequence_number() == seq {
                if nl.message_type() == NLMSG_ERROR {
                    let code = nl
                        .payload()
                        .get(..4)
                        .and_then(|b| b.try_into().ok())
                        .map(i32::from_ne_bytes)
                        .ok_or_else(|| KmodError::Protocol("short error message".into()))?;
                    return Ok((data, code.saturating_abs()));
                }
                data.push(msg.to_vec());
            }
            // Messages are 4-byte aligned.
            offset += (len + 3) & !3;
        }
    }
}

/// What [`probe_scheduler`] found.
///
/// ```no_run
/// use ipvsctl::kmod::{self, SchedulerProbe};
///
/// match kmod::probe_scheduler("mh")? {
///     SchedulerProbe::Works { .. } => println!("mh works"),
///     SchedulerProbe::FamilyAbsent => println!("no IPVS: {}", kmod::diagnose()),
///     SchedulerProbe::Refused { explanation, .. } => println!("mh: {explanation}"),
/// }
/// # Ok::<(), ipvsctl::kmod::KmodError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// Creates and deletes a test service (firewall mark 1, IPv4) with
/// `scheduler`, in a private network namespace, on a thread of its own so
/// the caller's thread never changes namespace.
///
/// The kernel loads `ip_vs_<scheduler>` itself when it can, so a success
/// means the scheduler is usable. Needs `CAP_SYS_ADMIN` (for the namespace)
/// and `CAP_NET_ADMIN`.
///
/// The messages are built here, minimally (two commands, one nested
/// attribute), so this module does not depend on the crate's handle.
///
/// ```no_run
/// match ipvsctl::kmod::probe_scheduler("wrr")? {
///     ipvsctl::kmod::SchedulerProbe::Works { .. } => println!("wrr works"),
///     other => println!("wrr: {other}"),
/// }
/// # Ok::<(), ipvsctl::kmod::KmodError>(())
/// ```
pub fn probe_scheduler(scheduler: &str) -> Result<SchedulerProbe, KmodError> {
    // Validates the name; IP_VS_SCHEDNAME_MAXLEN is 16 with the NUL.
    ModuleName::for_scheduler(scheduler)?;
    if scheduler.len() > 15 {
        return Err(KmodError::InvalidModuleName {
            name: scheduler.to_owned(),
            reason: "IPVS scheduler names are at most 15 bytes",
        });
    }
    let scheduler = scheduler.to_owned();
    in_private_netns(move || probe_scheduler_here(&scheduler))?
}

/// Runs `work` on a new thread moved into a new network namespace; the
/// namespace goes away when the thread ends.
fn in_private_netns<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, KmodError> {
    let thread = std::thread::Builder::new()
        .name("ipvsctl-kmod-probe".into())
        .spawn(move || {
            // SAFETY: only CLONE_NEWNET is passed: this thread gets a new
            // network namespace. File descriptor tables are not unshared
            // (the hazard `unshare_unsafe` documents is CLONE_FILES), and no
            // other thread is affected.
            unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) }
                .map_err(|e| KmodError::Netns(e.into()))?;
            Ok(work())
        })
        .map_err(|e| KmodError::ProbeThread(e.to_string()))?;
    thread
        .join()
        .map_err(|_| KmodError::ProbeThread("it panicked".into()))?
}

fn probe_scheduler_here(scheduler: &str) -> Result<SchedulerProbe, KmodError> {
    let socket = open()?;
    let Some(family) = resolve_on(&socket, IPVS_FAMILY)? else {
        return Ok(SchedulerProbe::FamilyAbsent);
    };
    let new = ipvs_service_request(family.id, IPVS_CMD_NEW_SERVICE, 2, Some(scheduler));
    let (_, errno) = transact(&socket, &new, 2)?;
    if errno != 0 {
        return Ok(SchedulerProbe::Refused {
            errno,
            explanation: refusal(errno, scheduler),
        });
    }
    let del = ipvs_service_request(family.id, IPVS_CMD_DEL_SERVICE, 3, None);
    let (_, delete_errno) = transact(&socket, &del, 3)?;
    Ok(SchedulerProbe::Works {
        family,
        delete_errno,
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

// From <linux/ip_vs.h>.
const IPVS_GENL_VERSION: u8 = 1;
const IPVS_CMD_NEW_SERVICE: u8 = 1;
// 2 is IPVS_CMD_SET_SERVICE.
const IPVS_CMD_DEL_SERVICE: u8 = 3;
const IPVS_CMD_ATTR_SERVICE: u16 = 1;
const IPVS_SVC_ATTR_AF: u16 = 1;
const IPVS_SVC_ATTR_FWMARK: u16 = 5;
const IPVS_SVC_ATTR_SCHED_NAME: u16 = 6;
const IPVS_SVC_ATTR_FLAGS: u16 = 7;
const IPVS_SVC_ATTR_TIMEOUT: u16 = 8;
const IPVS_SVC_ATTR_NETMASK: u16 = 9;
const AF_INET: u16 = 2;
const PROBE_FWMARK: u32 = 1;

/// A raw IPVS command: just enough for the probe.
#[derive(Debug)]
struct IpvsRaw {
    cmd: u8,
    attrs: Vec<DefaultNla>,
}

impl GenlFamily for IpvsRaw {
    fn family_name() -> &'static str {
        IPVS_FAMILY
    }
    fn command(&self) -> u8 {
        self.cmd
    }
    fn version(&self) -> u8 {
        IPVS_GENL_VERSION
    }
}

impl Emitable for IpvsRaw {
    fn buffer_len(&self) -> usize {
        self.attrs.as_slice().buffer_len()
    }
    fn emit(&self, buffer: &mut [u8]) {
        self.attrs.as_slice().emit(buffer)
    }
}

/// A fwmark service; with a scheduler it is a full entry for
/// `IPVS_CMD_NEW_SERVICE`, without one a key for `IPVS_CMD_DEL_SERVICE`.
fn ipvs_service_request(family_id: u16, cmd: u8, seq: u32, scheduler: Option<&str>) -> Vec<u8> {
    let mut svc = vec![
        DefaultNla::new(IPVS_SVC_ATTR_AF, AF_INET.to_ne_bytes().to_vec()),
        DefaultNla::new(IPVS_SVC_ATTR_FWMARK, PROBE_FWMARK.to_ne_bytes().to_vec()),
    ];
    if let Some(s) = scheduler {
        let mut name = s.as_bytes().to_vec();
        name.push(0);
        svc.push(DefaultNla::new(IPVS_SVC_ATTR_SCHED_NAME, name));
        // struct ip_vs_flags { flags, mask }
        svc.push(DefaultNla::new(IPVS_SVC_ATTR_FLAGS, vec![0; 8]));
        svc.push(DefaultNla::new(
            IPVS_SVC_ATTR_TIMEOUT,
            0u32.to_ne_bytes().to_vec(),
        ));
        svc.push(DefaultNla::new(
            IPVS_SVC_ATTR_NETMASK,
            u32::MAX.to_ne_bytes().to_vec(),
        ));
    }
    let slice = svc.as_slice();
    let mut nested = vec![0u8; slice.buffer_len()];
    slice.emit(&mut nested);
    let mut genl = GenlMessage::from_payload(IpvsRaw {
        cmd,
        attrs: vec![DefaultNla::new(
            IPVS_CMD_ATTR_SERVICE | NLA_F_NESTED,
            nested,
        )],
    });
    genl.set_resolved_family_id(family_id);
    let mut msg = NetlinkMessage::from(genl);
    msg.header.flags = NLM_F_REQUEST | NLM_F_ACK;
    if cmd == IPVS_CMD_NEW_SERVICE {
        msg.header.flags |= NLM_F_CREATE | NLM_F_EXCL;
    }
    msg.header.sequence_number = seq;
    msg.finalize();
    let mut bytes = vec![0u8; msg.buffer_len()];
    msg.serialize(&mut bytes);
    bytes
}
