//! Validation before anything is encoded: every error names the field and the
//! reason, so a bad value never reaches the kernel.

use super::{
    AddressFamily, ForwardMethod, MAX_NAME_LEN, Netmask, Protocol, RealServer, Scheduler,
    ServiceFlags, ServiceKey, SyncDaemon, Timeouts, TunnelEncap, VirtualServer,
};

/// Why a model value cannot be sent to the kernel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidationError {
    /// A name (scheduler, persistence engine, interface) is longer than the
    /// kernel's 15 bytes.
    #[error("{field}: {name:?} is {len} bytes long; the kernel takes at most {max}")]
    NameTooLong {
        /// Which field.
        field: &'static str,
        /// The name given.
        name: String,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A name is empty or contains a NUL byte.
    #[error("{field}: {name:?} is not a valid name (empty or contains NUL)")]
    NameInvalid {
        /// Which field.
        field: &'static str,
        /// The name given.
        name: String,
    },
    /// An IPv4 persistence netmask whose ones are not contiguous.
    #[error("netmask: {mask} is not a contiguous IPv4 netmask")]
    NonContiguousNetmask {
        /// The mask given.
        mask: std::net::Ipv4Addr,
    },
    /// An IPv6 persistence prefix length outside 1..=128.
    #[error("netmask: IPv6 prefix length {prefix} is outside 1..=128")]
    Ipv6PrefixOutOfRange {
        /// The prefix given.
        prefix: u8,
    },
    /// A netmask of the other address family than the service's.
    #[error("netmask: an {netmask} netmask on an {service} service")]
    NetmaskFamilyMismatch {
        /// The netmask's family.
        netmask: AddressFamily,
        /// The service's family.
        service: AddressFamily,
    },
    /// Port 0 on a service that is neither persistent nor firewall-mark based.
    #[error(
        "port: port 0 on {key} is only allowed for persistent services (ipvsadm: zero port specified for non-persistent service)"
    )]
    ZeroPort {
        /// The service.
        key: ServiceKey,
    },
    /// Firewall mark 0 (the kernel would treat it as "no mark").
    #[error("fwmark: firewall mark 0 is not a valid service key")]
    ZeroFwMark,
    /// A weight the kernel reads as negative.
    #[error("weight: {weight} is above the kernel's limit {}", i32::MAX)]
    WeightOutOfRange {
        /// The weight given.
        weight: u32,
    },
    /// A connection threshold above `i32::MAX` (the kernel answers EINVAL,
    /// ipvsadm says "illegal u_threshold specified").
    #[error("{field}: {value} is above the kernel's limit {}", i32::MAX)]
    ThresholdOutOfRange {
        /// Which threshold.
        field: &'static str,
        /// The value given.
        value: u32,
    },
    /// A lower threshold above the upper one (the kernel answers ERANGE,
    /// including when the upper threshold is 0).
    #[error("thresholds: lower threshold {lower} is above upper threshold {upper}")]
    ThresholdsInverted {
        /// Lower threshold.
        lower: u32,
        /// Upper threshold.
        upper: u32,
    },
    /// A GUE tunnel without a port.
    #[error("tunnel port: GUE tunnelling needs a non-zero port")]
    GueWithoutPort,
    /// A real server of another address family than its virtual server,
    /// without tunnelling.
    #[error(
        "address family: {server} real server on an {service} service needs tunnelling (got {forward})"
    )]
    FamilyMismatch {
        /// The service's family.
        service: AddressFamily,
        /// The real server's family.
        server: AddressFamily,
        /// The forwarding method given.
        forward: ForwardMethod,
    },
    /// A timeout the kernel would overflow: it stores seconds × HZ in 32
    /// bits, so anything above [`MAX_TIMEOUT`] could come back changed.
    #[error("{field}: {value} s is above {max} s (the kernel stores seconds × HZ in 32 bits)", max = MAX_TIMEOUT)]
    TimeoutTooLarge {
        /// Which timeout.
        field: &'static str,
        /// The value given.
        value: u32,
    },
    /// A value the kernel cannot keep as written, so that what it reports
    /// back would not compare equal to it: an IPv6 address with a scope id
    /// or flow label, a built-in scheduler or protocol spelt as `Other`, or
    /// the kernel-internal `HASHED` service flag. Write the canonical form.
    #[error("{field}: {given} would come back from the kernel as {canonical}; write that instead")]
    NotCanonical {
        /// Which field.
        field: &'static str,
        /// The value given.
        given: Box<str>,
        /// The value the kernel would report.
        canonical: Box<str>,
    },
    /// A sync-daemon multicast group that is not a multicast address.
    #[error("multicast group: {group} is not a multicast address")]
    NotMulticast {
        /// The group given.
        group: std::net::IpAddr,
    },
}

/// The largest timeout, in seconds, that survives the kernel's `seconds × HZ`
/// arithmetic for every `HZ` up to 1000 (`u32::MAX / 1000`, about 49 days).
pub const MAX_TIMEOUT: u32 = u32::MAX / 1000;

fn check_timeout(field: &'static str, value: u32) -> Result<(), ValidationError> {
    if value > MAX_TIMEOUT {
        return Err(ValidationError::TimeoutTooLarge { field, value });
    }
    Ok(())
}

fn check_name(field: &'static str, name: &str) -> Result<(), ValidationError> {
    if name.is_empty() || name.contains('\0') {
        return Err(ValidationError::NameInvalid {
            field,
            name: name.to_owned(),
        });
    }
    if name.len() > MAX_NAME_LEN {
        return Err(ValidationError::NameTooLong {
            field,
            name: name.to_owned(),
            len: name.len(),
            max: MAX_NAME_LEN,
        });
    }
    Ok(())
}

/// Refuses an IPv6 socket address with a scope id or flow label: the kernel
/// keeps only the address and port.
fn check_plain_addr(
    field: &'static str,
    addr: std::net::SocketAddr,
) -> Result<(), ValidationError> {
    let plain = std::net::SocketAddr::new(addr.ip(), addr.port());
    if let std::net::SocketAddr::V6(v6) = addr
        && (v6.scope_id() != 0 || v6.flowinfo() != 0)
    {
        return Err(ValidationError::NotCanonical {
            field,
            given: format!("{v6} (flow label {:#x})", v6.flowinfo()).into(),
            canonical: plain.to_string().into(),
        });
    }
    Ok(())
}

impl ServiceKey {
    /// Checks the key on its own: firewall mark non-zero, and nothing the
    /// kernel would not report back as given (an IPv6 scope id or flow
    /// label; TCP, UDP or SCTP spelt as [`Protocol::Other`]).
    ///
    /// ```
    /// use ipvsctl::model::{Protocol, ServiceKey, ValidationError};
    /// let key = ServiceKey::Addr { protocol: Protocol::Other(6), addr: "10.0.0.1:80".parse().unwrap() };
    /// assert!(matches!(key.validate(), Err(ValidationError::NotCanonical { field: "protocol", .. })));
    /// ```
    pub fn validate(&self) -> Result<(), ValidationError> {
        match *self {
            ServiceKey::FwMark { mark: 0, .. } => Err(ValidationError::ZeroFwMark),
            ServiceKey::FwMark { .. } => Ok(()),
            ServiceKey::Addr { protocol, addr } => {
                let canonical = Protocol::from_raw(protocol.to_raw());
                if canonical != protocol {
                    return Err(ValidationError::NotCanonical {
                        field: "protocol",
                        given: format!("{protocol:?}").into(),
                        canonical: format!("{canonical:?}").into(),
                    });
                }
                check_plain_addr("service address", addr)
            }
        }
    }
}

impl VirtualServer {
    /// Checks everything the kernel or ipvsadm would reject.
    ///
    /// ```
    /// use ipvsctl::model::{Scheduler, ServiceKey, ValidationError, VirtualServer};
    /// let vs = VirtualServer::new(ServiceKey::tcp("10.0.0.1:80".parse().unwrap()))
    ///     .with_scheduler(Scheduler::Other("a-very-long-scheduler".into()));
    /// assert!(matches!(vs.validate(), Err(ValidationError::NameTooLong { field: "scheduler", .. })));
    /// ```
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.key.validate()?;
        check_name("scheduler", self.scheduler.name())?;
        let scheduler = Scheduler::from_name(self.scheduler.name());
        if scheduler != self.scheduler {
            return Err(ValidationError::NotCanonical {
                field: "scheduler",
                given: format!("{:?}", self.scheduler).into(),
                canonical: format!("{scheduler:?}").into(),
            });
        }
        let flags = ServiceFlags::from_kernel(self.flags.bits());
        if flags != self.flags {
            return Err(ValidationError::NotCanonical {
                field: "flags",
                given: format!("{:#x}", self.flags.bits()).into(),
                canonical: format!("{:#x} (the kernel's HASHED bit is its own)", flags.bits())
                    .into(),
            });
        }
        check_timeout("persistence timeout", self.timeout)?;
        if let Some(pe) = &self.persistence_engine {
            check_name("persistence engine", pe.name())?;
        }
        let family = self.family();
        match self.netmask {
            Netmask::V4(mask) if family == AddressFamily::Inet => {
                if self.netmask.prefix_len().is_none() {
                    return Err(ValidationError::NonContiguousNetmask { mask });
                }
            }
            Netmask::V6(prefix) if family == AddressFamily::Inet6 => {
                if !(1..=128).contains(&prefix) {
                    return Err(ValidationError::Ipv6PrefixOutOfRange { prefix });
                }
            }
            other => {
                return Err(ValidationError::NetmaskFamilyMismatch {
                    netmask: other.family(),
                    service: family,
                });
            }
        }
        if let ServiceKey::Addr { addr, .. } = self.key
            && addr.port() == 0
            && !self.flags.contains(ServiceFlags::PERSISTENT)
        {
            return Err(ValidationError::ZeroPort { key: self.key });
        }
        Ok(())
    }
}

impl RealServer {
    /// Checks the real server on its own (weight, thresholds, tunnel). Use
    /// [`validate_destination`] to check it against its virtual server too.
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_plain_addr("real server address", self.addr)?;
        if self.weight > i32::MAX as u32 {
            return Err(ValidationError::WeightOutOfRange {
                weight: self.weight,
            });
        }
        for (field, value) in [
            ("upper threshold", self.upper_threshold),
            ("lower threshold", self.lower_threshold),
        ] {
            if value > i32::MAX as u32 {
                return Err(ValidationError::ThresholdOutOfRange { field, value });
            }
        }
        if self.lower_threshold > self.upper_threshold {
            return Err(ValidationError::ThresholdsInverted {
                lower: self.lower_threshold,
                upper: self.upper_threshold,
            });
        }
        if let ForwardMethod::Tunnel(t) = self.forward
            && t.encap == (TunnelEncap::Gue { port: 0 })
        {
            return Err(ValidationError::GueWithoutPort);
        }
        Ok(())
    }
}

/// Checks a real server against the virtual server it belongs to: on its own,
/// and its address family (a different family only with tunnelling).
///
/// ```
/// use ipvsctl::model::{validate_destination, RealServer, ServiceKey, ValidationError};
/// let key = ServiceKey::tcp("10.0.0.1:80".parse().unwrap());
/// let rs = RealServer::new("[2001:db8::1]:80".parse().unwrap());
/// assert!(matches!(validate_destination(&key, &rs), Err(ValidationError::FamilyMismatch { .. })));
/// ```
pub fn validate_destination(
    service: &ServiceKey,
    server: &RealServer,
) -> Result<(), ValidationError> {
    server.validate()?;
    if service.family() != server.family() && !server.forward.is_tunnel() {
        return Err(ValidationError::FamilyMismatch {
            service: service.family(),
            server: server.family(),
            forward: server.forward,
        });
    }
    Ok(())
}

impl Timeouts {
    /// Checks that every timeout survives the kernel's arithmetic.
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_timeout("tcp timeout", self.tcp)?;
        check_timeout("tcpfin timeout", self.tcp_fin)?;
        check_timeout("udp timeout", self.udp)
    }
}

impl SyncDaemon {
    /// Checks the interface name and multicast group.
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_name("interface", &self.interface)?;
        if let Some(group) = self.group
            && !group.is_multicast()
        {
            return Err(ValidationError::NotMulticast { group });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Scheduler, Tunnel};

    fn vs(addr: &str) -> VirtualServer {
        VirtualServer::new(ServiceKey::tcp(addr.parse().unwrap()))
    }

    /// What the kernel could not report back as given is refused, naming
    /// the field and the form to write instead.
    #[test]
    fn non_canonical_values_are_refused() {
        let field = |r: Result<(), ValidationError>| match r {
            Err(ValidationError::NotCanonical { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let scoped: std::net::SocketAddr = "[fe80::1%2]:80".parse().unwrap();
        assert_eq!(field(ServiceKey::tcp(scoped).validate()), "service address");
        let flow = std::net::SocketAddrV6::new("2001:db8::1".parse().unwrap(), 80, 7, 0);
        assert_eq!(
            field(RealServer::new(flow.into()).validate()),
            "real server address"
        );
        let rr = vs("10.0.0.1:80").with_scheduler(Scheduler::Other("rr".into()));
        assert_eq!(field(rr.validate()), "scheduler");
        let mut hashed = vs("10.0.0.1:80");
        hashed.flags = ServiceFlags::from_bits_retain(ServiceFlags::KERNEL_HASHED);
        assert_eq!(field(hashed.validate()), "flags");
        let udp = ServiceKey::Addr {
            protocol: Protocol::Other(17),
            addr: "10.0.0.1:53".parse().unwrap(),
        };
        assert_eq!(field(udp.validate()), "protocol");
        // The canonical forms pass.
        assert_eq!(
            vs("10.0.0.1:80")
                .with_scheduler(Scheduler::RoundRobin)
                .validate(),
            Ok(())
        );
        assert_eq!(
            ServiceKey::tcp("[fe80::1]:80".parse().unwrap()).validate(),
            Ok(())
        );
        let err = rr.validate().unwrap_err().to_string();
        assert!(
            err.starts_with("scheduler: Other(\"rr\") would come back"),
            "{err}"
        );
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(vs("10.0.0.1:80").validate(), Ok(()));
        assert_eq!(vs("[2001:db8::1]:80").validate(), Ok(()));
        let fw = VirtualServer::new(ServiceKey::fwmark(7, AddressFamily::Inet6));
        assert_eq!(fw.validate(), Ok(()));
        assert_eq!(fw.netmask, Netmask::V6(128));
    }

    #[test]
    fn scheduler_and_pe_names() {
        let ok = vs("10.0.0.1:80").with_scheduler(Scheduler::Other("a".repeat(15)));
        assert_eq!(ok.validate(), Ok(()));
        let long = vs("10.0.0.1:80").with_scheduler(Scheduler::Other("a".repeat(16)));
        assert!(matches!(
            long.validate(),
            Err(ValidationError::NameTooLong {
                field: "scheduler",
                len: 16,
                ..
            })
        ));
        let pe = vs("10.0.0.1:80")
            .with_persistence_engine(crate::model::PersistenceEngine("p".repeat(16)));
        assert!(matches!(
            pe.validate(),
            Err(ValidationError::NameTooLong {
                field: "persistence engine",
                ..
            })
        ));
        let nul = vs("10.0.0.1:80").with_scheduler(Scheduler::Other("r\0r".into()));
        assert!(matches!(
            nul.validate(),
            Err(ValidationError::NameInvalid { .. })
        ));
    }

    #[test]
    fn netmasks() {
        let bad = vs("10.0.0.1:80").with_netmask(Netmask::V4("255.0.255.0".parse().unwrap()));
        assert!(matches!(
            bad.validate(),
            Err(ValidationError::NonContiguousNetmask { .. })
        ));
        let good = vs("10.0.0.1:80").with_netmask(Netmask::from_prefix(AddressFamily::Inet, 0));
        assert_eq!(good.validate(), Ok(()));
        for p in [0u8, 129, 255] {
            let v6 = vs("[::1]:80").with_netmask(Netmask::V6(p));
            assert_eq!(
                v6.validate(),
                Err(ValidationError::Ipv6PrefixOutOfRange { prefix: p })
            );
        }
        let mixed = vs("[::1]:80").with_netmask(Netmask::full(AddressFamily::Inet));
        assert!(matches!(
            mixed.validate(),
            Err(ValidationError::NetmaskFamilyMismatch { .. })
        ));
    }

    #[test]
    fn timeouts() {
        assert_eq!(
            vs("10.0.0.1:80").with_persistence(MAX_TIMEOUT).validate(),
            Ok(())
        );
        assert!(matches!(
            vs("10.0.0.1:80")
                .with_persistence(MAX_TIMEOUT + 1)
                .validate(),
            Err(ValidationError::TimeoutTooLarge {
                field: "persistence timeout",
                ..
            })
        ));
        let t = Timeouts {
            tcp: 900,
            tcp_fin: 120,
            udp: u32::MAX,
        };
        assert!(matches!(
            t.validate(),
            Err(ValidationError::TimeoutTooLarge {
                field: "udp timeout",
                ..
            })
        ));
    }

    #[test]
    fn zero_port_and_mark() {
        assert!(matches!(
            vs("10.0.0.1:0").validate(),
            Err(ValidationError::ZeroPort { .. })
        ));
        assert_eq!(vs("10.0.0.1:0").with_persistence(360).validate(), Ok(()));
        let fw = VirtualServer::new(ServiceKey::fwmark(0, AddressFamily::Inet));
        assert_eq!(fw.validate(), Err(ValidationError::ZeroFwMark));
    }

    #[test]
    fn real_servers() {
        let rs = RealServer::new("10.0.0.2:80".parse().unwrap());
        assert_eq!(rs.with_weight(i32::MAX as u32).validate(), Ok(()));
        assert!(matches!(
            rs.with_weight(i32::MAX as u32 + 1).validate(),
            Err(ValidationError::WeightOutOfRange { .. })
        ));
        assert!(matches!(
            rs.with_thresholds(10, 20).validate(),
            Err(ValidationError::ThresholdsInverted {
                lower: 20,
                upper: 10
            })
        ));
        assert!(matches!(
            rs.with_thresholds(0, 1).validate(),
            Err(ValidationError::ThresholdsInverted { .. })
        ));
        assert_eq!(rs.with_thresholds(20, 10).validate(), Ok(()));
        assert!(matches!(
            rs.with_thresholds(1 << 31, 0).validate(),
            Err(ValidationError::ThresholdOutOfRange {
                field: "upper threshold",
                ..
            })
        ));
        let gue0 = rs.with_forward(ForwardMethod::Tunnel(Tunnel::gue(0)));
        assert_eq!(gue0.validate(), Err(ValidationError::GueWithoutPort));
        assert_eq!(
            rs.with_forward(ForwardMethod::Tunnel(Tunnel::gue(6080)))
                .validate(),
            Ok(())
        );
    }

    #[test]
    fn mixed_family_needs_tunnel() {
        let key = ServiceKey::tcp("10.0.0.1:80".parse().unwrap());
        let v6 = RealServer::new("[2001:db8::2]:80".parse().unwrap());
        assert!(matches!(
            validate_destination(&key, &v6),
            Err(ValidationError::FamilyMismatch { .. })
        ));
        let tun = v6.with_forward(ForwardMethod::Tunnel(Tunnel::IPIP));
        assert_eq!(validate_destination(&key, &tun), Ok(()));
    }

    #[test]
    fn daemon() {
        let mut d = SyncDaemon::new(crate::model::DaemonRole::Backup, "eth0");
        assert_eq!(d.validate(), Ok(()));
        d.group = Some("10.0.0.1".parse().unwrap());
        assert!(matches!(
            d.validate(),
            Err(ValidationError::NotMulticast { .. })
        ));
        d.group = None;
        d.interface = "x".repeat(16);
        assert!(matches!(
            d.validate(),
            Err(ValidationError::NameTooLong {
                field: "interface",
                ..
            })
        ));
    }
}
