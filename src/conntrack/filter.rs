//! Which entries a cleanup selects: pure, checked before anything is sent.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use super::ConntrackError;
use crate::codec::conntrack::Entry;
use crate::model::{AddressFamily, Protocol, ServiceKey};

/// A selection of conntrack entries, made from what a load balancer knows.
///
/// * [`Filter::service`]: entries whose original destination is the
///   service's virtual address, port and protocol (what `conntrack -D
///   --orig-dst VIP -p udp --dport PORT` selects);
/// * [`Filter::real_server`]: of those, the ones whose reply source is the
///   real server's address and port: the reply tuple IPVS writes for a
///   masqueraded (NAT) connection (`conntrack --dst-nat`'s idea). Direct
///   routing and tunnels do not rewrite the reply tuple, so their entries
///   cannot be told apart by real server: select them by service.
/// * [`Filter::vip`]: entries to a virtual address on any port, of the
///   protocols named.
///
/// Every zone is selected. Firewall-mark services have no address to select
/// by ([`ConntrackError::InvalidFilter`] with field `service`).
///
/// Protocols are explicit: UDP and SCTP are what a cleanup is for (their
/// entries keep sending a client to a real server that is gone); a filter
/// that selects TCP can be read ([`super::Conntrack::entries`]) but is
/// deleted only once [`Filter::allow_tcp`] says so, since deleting the entry
/// of a live TCP connection makes conntrack pick it up again mid-stream or
/// count its packets invalid, depending on `nf_conntrack_tcp_loose`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Filter {
    selector: Selector,
    tcp_allowed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Selector {
    Service {
        protocol: Protocol,
        addr: SocketAddr,
    },
    RealServer {
        protocol: Protocol,
        addr: SocketAddr,
        real: SocketAddr,
    },
    Vip {
        vip: IpAddr,
        protocols: Vec<Protocol>,
    },
}

fn invalid(field: &'static str, value: impl fmt::Display, reason: &'static str) -> ConntrackError {
    ConntrackError::InvalidFilter {
        field,
        value: value.to_string(),
        reason,
    }
}

/// The protocols a filter may name: the ones with ports IPVS balances.
fn check_protocol(field: &'static str, p: Protocol) -> Result<Protocol, ConntrackError> {
    match p {
        Protocol::Tcp | Protocol::Udp | Protocol::Sctp => Ok(p),
        Protocol::Other(_) => Err(invalid(field, p, "only TCP, UDP and SCTP are selectable")),
    }
}

fn check_address(field: &'static str, ip: IpAddr) -> Result<(), ConntrackError> {
    if ip.is_unspecified() {
        return Err(invalid(
            field,
            ip,
            "the unspecified address selects nothing",
        ));
    }
    Ok(())
}

/// The protocol and address of a service key that has them.
fn service_addr(key: &ServiceKey) -> Result<(Protocol, SocketAddr), ConntrackError> {
    match *key {
        ServiceKey::Addr { protocol, addr } => {
            let protocol = check_protocol("service.protocol", protocol)?;
            check_address("service.address", addr.ip())?;
            if addr.port() == 0 {
                return Err(invalid(
                    "service.port",
                    addr.port(),
                    "port 0 (an all-ports service) has no port to select by: use Filter::vip",
                ));
            }
            Ok((protocol, addr))
        }
        ServiceKey::FwMark { mark, .. } => Err(invalid(
            "service",
            format_args!("fwmark {mark}"),
            "a firewall-mark service has no address to select entries by",
        )),
    }
}

impl Filter {
    /// Entries of the service `key`: original destination = its address
    /// and port, of its protocol.
    ///
    /// ```
    /// use ipvsctl::conntrack::Filter;
    /// use ipvsctl::model::{AddressFamily, ServiceKey};
    ///
    /// let dns = Filter::service(&ServiceKey::udp("10.96.0.10:53".parse()?))?;
    /// assert_eq!(dns.family(), AddressFamily::Inet);
    /// assert!(Filter::service(&ServiceKey::fwmark(7, AddressFamily::Inet)).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn service(key: &ServiceKey) -> Result<Filter, ConntrackError> {
        let (protocol, addr) = service_addr(key)?;
        Ok(Filter::new(Selector::Service { protocol, addr }))
    }

    /// Entries of the service `key` whose reply source is `real` (address
    /// and port): the connections IPVS masqueraded to that real server.
    /// `real` must be of the service's family and have a port.
    ///
    /// ```
    /// use ipvsctl::conntrack::{ConntrackError, Filter};
    /// use ipvsctl::model::ServiceKey;
    ///
    /// let key = ServiceKey::udp("10.96.0.10:53".parse()?);
    /// let gone = Filter::real_server(&key, "10.244.1.7:53".parse()?)?;
    /// # drop(gone);
    /// let mixed = Filter::real_server(&key, "[fd00::7]:53".parse()?);
    /// assert!(matches!(mixed, Err(ConntrackError::InvalidFilter { field: "real_server", .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn real_server(key: &ServiceKey, real: SocketAddr) -> Result<Filter, ConntrackError> {
        let (protocol, addr) = service_addr(key)?;
        if real.is_ipv4() != addr.is_ipv4() {
            return Err(invalid(
                "real_server",
                real,
                "not of the service's address family",
            ));
        }
        check_address("real_server.address", real.ip())?;
        if real.port() == 0 {
            return Err(invalid(
                "real_server.port",
                real.port(),
                "a masqueraded real server has a port",
            ));
        }
        Ok(Filter::new(Selector::RealServer {
            protocol,
            addr,
            real,
        }))
    }

    /// Entries whose original destination is `vip`, any port, of one of
    /// `protocols` (not empty).
    ///
    /// ```
    /// use ipvsctl::conntrack::Filter;
    /// use ipvsctl::model::Protocol;
    ///
    /// let all = Filter::vip("fd09::9".parse()?, &[Protocol::Udp, Protocol::Sctp])?;
    /// # drop(all);
    /// assert!(Filter::vip("fd09::9".parse()?, &[]).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn vip(vip: IpAddr, protocols: &[Protocol]) -> Result<Filter, ConntrackError> {
        check_address("vip", vip)?;
        if protocols.is_empty() {
            return Err(invalid("protocols", "[]", "name at least one protocol"));
        }
        let mut list = Vec::new();
        for &p in protocols {
            let p = check_protocol("protocols", p)?;
            if !list.contains(&p) {
                list.push(p);
            }
        }
        Ok(Filter::new(Selector::Vip {
            vip,
            protocols: list,
        }))
    }

    fn new(selector: Selector) -> Filter {
        Filter {
            selector,
            tcp_allowed: false,
        }
    }

    /// Lets [`super::Conntrack::delete`] delete the TCP entries this filter
    /// selects (see [`Filter`]).
    pub fn allow_tcp(mut self) -> Filter {
        self.tcp_allowed = true;
        self
    }

    /// The address family of the entries selected.
    pub fn family(&self) -> AddressFamily {
        let ip = match &self.selector {
            Selector::Service { addr, .. } | Selector::RealServer { addr, .. } => addr.ip(),
            Selector::Vip { vip, .. } => *vip,
        };
        AddressFamily::of(&ip)
    }

    /// Whether the filter selects TCP entries.
    pub fn selects_tcp(&self) -> bool {
        match &self.selector {
            Selector::Service { protocol, .. } | Selector::RealServer { protocol, .. } => {
                *protocol == Protocol::Tcp
            }
            Selector::Vip { protocols, .. } => protocols.contains(&Protocol::Tcp),
        }
    }

    /// Whether a delete may use the filter: TCP only when allowed.
    pub(crate) fn check_delete(&self) -> Result<(), ConntrackError> {
        if self.selects_tcp() && !self.tcp_allowed {
            return Err(invalid(
                "protocol",
                Protocol::Tcp,
                "TCP entries are deleted only through Filter::allow_tcp",
            ));
        }
        Ok(())
    }

    /// Whether `entry` is selected.
    ///
    /// ```
    /// use ipvsctl::conntrack::Filter;
    /// use ipvsctl::model::ServiceKey;
    ///
    /// let f = Filter::service(&ServiceKey::udp("10.96.0.10:53".parse()?))?;
    /// // Entries come from Conntrack::entries; see its example.
    /// # drop(f);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn matches(&self, entry: &Entry) -> bool {
        let o = &entry.orig;
        match &self.selector {
            Selector::Service { protocol, addr } => {
                o.protocol == *protocol && o.dst == addr.ip() && o.dst_port == addr.port()
            }
            Selector::RealServer {
                protocol,
                addr,
                real,
            } => {
                let r = &entry.reply;
                o.protocol == *protocol
                    && o.dst == addr.ip()
                    && o.dst_port == addr.port()
                    && r.src == real.ip()
                    && r.src_port == real.port()
            }
            Selector::Vip { vip, protocols } => o.dst == *vip && protocols.contains(&o.protocol),
        }
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.selector {
            Selector::Service { protocol, addr } => write!(f, "{protocol} {addr}"),
            Selector::RealServer {
                protocol,
                addr,
                real,
            } => write!(f, "{protocol} {addr} -> {real}"),
            Selector::Vip { vip, protocols } => {
                write!(f, "{vip}")?;
                for p in protocols {
                    write!(f, " {p}")?;
                }
                Ok(())
            }
        }
    }
}
