//! Request builders: model values to [`IpvsMessage`]s. Every builder that
//! carries user configuration validates it first, so nothing invalid is ever
//! encoded.

use std::net::SocketAddr;

use super::attr::{DaemonAttr, DestAttr, IpvsAttr, PushValue, RawAddr, ServiceAttr, push_attr};
use super::message::{IpvsCmd, IpvsMessage};
use crate::model::{
    DaemonRole, ForwardMethod, RealServer, ServiceFlags, ServiceKey, SyncDaemon, Timeouts,
    ValidationError, VirtualServer, validate_destination,
};

// Which attributes a request carries is decided once, in the `each_*`
// functions below; the builders collect them into message values and the
// `write_*` functions (the bulk sync's direct path) emit them straight into
// a send buffer. Either way the attribute enums write the values and
// `attr::push_attr` the headers.

/// Where the `each_*` functions put a request's attributes: a list (the
/// message builders) or a send buffer ([`Wire`]). Every `put` and every
/// `each_*` function is inlined into its caller, so that on the wire path
/// each attribute's `Nla` methods fold to the one variant written there:
/// building and encoding a `NEW_DEST` then takes a fraction of the
/// instructions of a call per attribute that matches on the variant (see
/// docs/performance.md, "Measured effects of design choices").
trait AttrSink<A> {
    fn put(&mut self, attr: A);
}

impl<A> AttrSink<A> for Vec<A> {
    #[inline(always)]
    fn put(&mut self, attr: A) {
        self.push(attr);
    }
}

/// A send buffer as an [`AttrSink`]: each attribute appended with
/// [`push_attr`].
struct Wire<'a>(&'a mut Vec<u8>);

impl<A: PushValue> AttrSink<A> for Wire<'_> {
    #[inline(always)]
    fn put(&mut self, attr: A) {
        push_attr(self.0, &attr);
        if attr.owns_heap() {
            drop(attr);
        } else {
            // Nothing to free: no drop call for a number.
            std::mem::forget(attr);
        }
    }
}

/// The attributes that identify a service: AF, then FWMARK or PROTOCOL + ADDR +
/// PORT (the order the kernel itself uses in replies).
#[inline(always)]
fn each_key_attr(key: &ServiceKey, f: &mut impl AttrSink<ServiceAttr>) {
    f.put(ServiceAttr::Af(key.family().to_raw()));
    match key {
        ServiceKey::FwMark { mark, .. } => f.put(ServiceAttr::Fwmark(*mark)),
        ServiceKey::Addr { protocol, addr } => {
            f.put(ServiceAttr::Protocol(protocol.to_raw()));
            f.put(ServiceAttr::Addr(RawAddr::from_ip(addr.ip())));
            f.put(ServiceAttr::Port(addr.port()));
        }
    }
}

/// A service with its full configuration (for NEW and SET); the caller
/// validates.
#[inline(always)]
fn each_service_attr(vs: &VirtualServer, f: &mut impl AttrSink<ServiceAttr>) {
    each_key_attr(&vs.key, f);
    f.put(ServiceAttr::SchedName(vs.scheduler.name().to_owned()));
    if let Some(pe) = &vs.persistence_engine {
        f.put(ServiceAttr::PeName(pe.name().to_owned()));
    }
    // The mask covers every bit but the kernel-internal HASHED one, so an
    // update sets exactly the flags asked for, including clearing bits a newer
    // kernel defines that this value does not carry.
    f.put(ServiceAttr::Flags {
        flags: vs.flags.bits() & !ServiceFlags::KERNEL_HASHED,
        mask: !ServiceFlags::KERNEL_HASHED,
    });
    f.put(ServiceAttr::Timeout(vs.timeout));
    f.put(ServiceAttr::Netmask(vs.netmask.to_wire()));
}

/// A destination's identity: ADDR and PORT.
#[inline(always)]
fn each_dest_key_attr(addr: SocketAddr, f: &mut impl AttrSink<DestAttr>) {
    f.put(DestAttr::Addr(RawAddr::from_ip(addr.ip())));
    f.put(DestAttr::Port(addr.port()));
}

/// What `DEL_DEST` carries: the identity and the address family.
#[inline(always)]
fn each_del_dest_attr(addr: SocketAddr, f: &mut impl AttrSink<DestAttr>) {
    each_dest_key_attr(addr, f);
    f.put(DestAttr::AddrFamily(
        crate::model::AddressFamily::of(&addr.ip()).to_raw(),
    ));
}

/// A destination with its full configuration (for NEW and SET); the caller
/// validates.
#[inline(always)]
fn each_dest_attr(rs: &RealServer, f: &mut impl AttrSink<DestAttr>) {
    each_dest_key_attr(rs.addr, f);
    f.put(DestAttr::FwdMethod(rs.forward.raw()));
    f.put(DestAttr::Weight(rs.weight));
    f.put(DestAttr::UThresh(rs.upper_threshold));
    f.put(DestAttr::LThresh(rs.lower_threshold));
    f.put(DestAttr::AddrFamily(rs.family().to_raw()));
    if let ForwardMethod::Tunnel(t) = rs.forward {
        f.put(DestAttr::TunType(t.encap.raw_type()));
        f.put(DestAttr::TunPort(t.encap.port()));
        f.put(DestAttr::TunFlags(t.flags.bits()));
    }
}

fn key_attrs(key: &ServiceKey) -> Vec<ServiceAttr> {
    let mut attrs = Vec::with_capacity(9);
    each_key_attr(key, &mut attrs);
    attrs
}

fn service_attrs(vs: &VirtualServer) -> Result<Vec<ServiceAttr>, ValidationError> {
    vs.validate()?;
    let mut attrs = Vec::with_capacity(9);
    each_service_attr(vs, &mut attrs);
    Ok(attrs)
}

fn dest_attrs(key: &ServiceKey, rs: &RealServer) -> Result<Vec<DestAttr>, ValidationError> {
    validate_destination(key, rs)?;
    let mut attrs = Vec::with_capacity(10);
    each_dest_attr(rs, &mut attrs);
    Ok(attrs)
}

/// Appends the attributes of a service key (see `each_key_attr`) to `out`,
/// as [`del_service`] would carry them: for writers that frame requests
/// themselves. Validates nothing.
pub(crate) fn write_key_attrs(out: &mut Vec<u8>, key: &ServiceKey) {
    each_key_attr(key, &mut Wire(out));
}

/// Appends a service's attributes as [`new_service`] carries them.
/// Validates nothing: the caller has.
pub(crate) fn write_service_attrs(out: &mut Vec<u8>, vs: &VirtualServer) {
    each_service_attr(vs, &mut Wire(out));
}

/// Appends a real server's attributes as [`new_dest`] carries them.
/// Validates nothing: the caller has.
pub(crate) fn write_dest_attrs(out: &mut Vec<u8>, rs: &RealServer) {
    each_dest_attr(rs, &mut Wire(out));
}

/// Appends the real-server attributes of [`del_dest`].
pub(crate) fn write_del_dest_attrs(out: &mut Vec<u8>, addr: SocketAddr) {
    each_del_dest_attr(addr, &mut Wire(out));
}

/// `NEW_SERVICE`: add a virtual server.
///
/// ```
/// use ipvsctl::codec::request;
/// use ipvsctl::model::{ServiceKey, VirtualServer};
/// let vs = VirtualServer::new(ServiceKey::tcp("10.0.0.1:80".parse().unwrap()));
/// let msg = request::new_service(&vs).unwrap();
/// assert_eq!(msg.cmd, ipvsctl::codec::IpvsCmd::NewService);
/// ```
pub fn new_service(vs: &VirtualServer) -> Result<IpvsMessage, ValidationError> {
    Ok(IpvsMessage::new(
        IpvsCmd::NewService,
        vec![IpvsAttr::Service(service_attrs(vs)?)],
    ))
}

/// `SET_SERVICE`: change a virtual server's configuration (never its key).
pub fn set_service(vs: &VirtualServer) -> Result<IpvsMessage, ValidationError> {
    Ok(IpvsMessage::new(
        IpvsCmd::SetService,
        vec![IpvsAttr::Service(service_attrs(vs)?)],
    ))
}

/// `DEL_SERVICE`: delete a virtual server and its real servers.
pub fn del_service(key: &ServiceKey) -> Result<IpvsMessage, ValidationError> {
    key.validate()?;
    Ok(IpvsMessage::new(
        IpvsCmd::DelService,
        vec![IpvsAttr::Service(key_attrs(key))],
    ))
}

/// `GET_SERVICE` for one service (send without `NLM_F_DUMP`).
pub fn get_service(key: &ServiceKey) -> Result<IpvsMessage, ValidationError> {
    key.validate()?;
    Ok(IpvsMessage::new(
        IpvsCmd::GetService,
        vec![IpvsAttr::Service(key_attrs(key))],
    ))
}

/// `GET_SERVICE` for every service (send with `NLM_F_DUMP`).
pub fn dump_services() -> IpvsMessage {
    IpvsMessage::new(IpvsCmd::GetService, vec![])
}

/// `NEW_DEST`: add a real server to a virtual server.
pub fn new_dest(service: &ServiceKey, rs: &RealServer) -> Result<IpvsMessage, ValidationError> {
    service.validate()?;
    Ok(IpvsMessage::new(
        IpvsCmd::NewDest,
        vec![
            IpvsAttr::Service(key_attrs(service)),
            IpvsAttr::Dest(dest_attrs(service, rs)?),
        ],
    ))
}

/// `SET_DEST`: change a real server's configuration.
pub fn set_dest(service: &ServiceKey, rs: &RealServer) -> Result<IpvsMessage, ValidationError> {
    service.validate()?;
    Ok(IpvsMessage::new(
        IpvsCmd::SetDest,
        vec![
            IpvsAttr::Service(key_attrs(service)),
            IpvsAttr::Dest(dest_attrs(service, rs)?),
        ],
    ))
}

/// `DEL_DEST`: remove a real server from a virtual server.
pub fn del_dest(service: &ServiceKey, addr: SocketAddr) -> Result<IpvsMessage, ValidationError> {
    service.validate()?;
    let mut dest = Vec::with_capacity(3);
    each_del_dest_attr(addr, &mut dest);
    Ok(IpvsMessage::new(
        IpvsCmd::DelDest,
        vec![IpvsAttr::Service(key_attrs(service)), IpvsAttr::Dest(dest)],
    ))
}

/// `GET_DEST` dump of one virtual server's real servers (send with
/// `NLM_F_DUMP`).
pub fn dump_dests(service: &ServiceKey) -> Result<IpvsMessage, ValidationError> {
    service.validate()?;
    Ok(IpvsMessage::new(
        IpvsCmd::GetDest,
        vec![IpvsAttr::Service(key_attrs(service))],
    ))
}

/// `NEW_DAEMON`: start a sync daemon.
pub fn new_daemon(d: &SyncDaemon) -> Result<IpvsMessage, ValidationError> {
    d.validate()?;
    let mut attrs = vec![
        DaemonAttr::State(d.role.raw()),
        DaemonAttr::McastIfn(d.interface.clone()),
        DaemonAttr::SyncId(d.sync_id),
    ];
    if let Some(len) = d.max_len {
        attrs.push(DaemonAttr::SyncMaxLen(len));
    }
    match d.group {
        Some(std::net::IpAddr::V4(g)) => attrs.push(DaemonAttr::McastGroup(g)),
        Some(std::net::IpAddr::V6(g)) => attrs.push(DaemonAttr::McastGroup6(g)),
        None => {}
    }
    if let Some(port) = d.port {
        attrs.push(DaemonAttr::McastPort(port));
    }
    if let Some(ttl) = d.ttl {
        attrs.push(DaemonAttr::McastTtl(ttl));
    }
    Ok(IpvsMessage::new(
        IpvsCmd::NewDaemon,
        vec![IpvsAttr::Daemon(attrs)],
    ))
}

/// `DEL_DAEMON`: stop the daemon of a role.
pub fn del_daemon(role: DaemonRole) -> IpvsMessage {
    IpvsMessage::new(
        IpvsCmd::DelDaemon,
        vec![IpvsAttr::Daemon(vec![DaemonAttr::State(role.raw())])],
    )
}

/// `GET_DAEMON` dump (send with `NLM_F_DUMP`).
pub fn dump_daemons() -> IpvsMessage {
    IpvsMessage::new(IpvsCmd::GetDaemon, vec![])
}

/// `SET_CONFIG`: set timeouts (0 keeps a value).
pub fn set_config(t: &Timeouts) -> Result<IpvsMessage, ValidationError> {
    t.validate()?;
    Ok(IpvsMessage::new(
        IpvsCmd::SetConfig,
        vec![
            IpvsAttr::TimeoutTcp(t.tcp),
            IpvsAttr::TimeoutTcpFin(t.tcp_fin),
            IpvsAttr::TimeoutUdp(t.udp),
        ],
    ))
}

/// `GET_CONFIG`: read timeouts.
pub fn get_config() -> IpvsMessage {
    IpvsMessage::new(IpvsCmd::GetConfig, vec![])
}

/// `GET_INFO`: read version and connection-table size.
pub fn get_info() -> IpvsMessage {
    IpvsMessage::new(IpvsCmd::GetInfo, vec![])
}

/// `ZERO`: zero the counters of one service (and its real servers), or of
/// everything in the namespace.
pub fn zero(service: Option<&ServiceKey>) -> Result<IpvsMessage, ValidationError> {
    let attrs = match service {
        Some(key) => {
            key.validate()?;
            vec![IpvsAttr::Service(key_attrs(key))]
        }
        None => vec![],
    };
    Ok(IpvsMessage::new(IpvsCmd::Zero, attrs))
}

/// `FLUSH`: delete every service of the namespace.
pub fn flush() -> IpvsMessage {
    IpvsMessage::new(IpvsCmd::Flush, vec![])
}
