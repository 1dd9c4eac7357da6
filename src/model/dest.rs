//! Real servers (IPVS "destinations").

use std::fmt;
use std::net::SocketAddr;

use super::AddressFamily;

bitflags::bitflags! {
    /// Tunnel checksum flags (`IP_VS_TUNNEL_ENCAP_FLAG_*`, 5.3+). No flag is
    /// ipvsadm's `--tun-nocsum`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    pub struct TunnelFlags: u16 {
        /// Outer checksum (`--tun-csum`).
        const CSUM = 0x0001;
        /// Remote checksum offload (`--tun-remcsum`, GUE only).
        const REMCSUM = 0x0002;
    }
}

// Any 16-bit value, unknown bits included (see `ServiceFlags`).
#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for TunnelFlags {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(TunnelFlags::from_bits_retain(u.arbitrary()?))
    }

    fn size_hint(depth: usize) -> (usize, Option<usize>) {
        <u16 as arbitrary::Arbitrary>::size_hint(depth)
    }
}

/// The encapsulation of a tunnelled real server.
///
/// `#[non_exhaustive]`: the kernel has added tunnel types before (GUE in
/// 5.2, GRE in 5.3) and may add more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub enum TunnelEncap {
    /// IP-in-IP (the only kind before Linux 5.2).
    Ipip,
    /// Generic UDP Encapsulation to the given UDP port (5.2+, port non-zero).
    Gue {
        /// The destination UDP port of the encapsulation.
        port: u16,
    },
    /// GRE (5.3+).
    Gre,
}

impl TunnelEncap {
    /// `IP_VS_CONN_F_TUNNEL_TYPE_IPIP`.
    pub const RAW_IPIP: u8 = 0;
    /// `IP_VS_CONN_F_TUNNEL_TYPE_GUE`.
    pub const RAW_GUE: u8 = 1;
    /// `IP_VS_CONN_F_TUNNEL_TYPE_GRE`.
    pub const RAW_GRE: u8 = 2;

    /// The kernel's tunnel-type number.
    pub fn raw_type(self) -> u8 {
        match self {
            TunnelEncap::Ipip => Self::RAW_IPIP,
            TunnelEncap::Gue { .. } => Self::RAW_GUE,
            TunnelEncap::Gre => Self::RAW_GRE,
        }
    }

    /// The tunnel port on the wire (0 unless GUE).
    pub fn port(self) -> u16 {
        match self {
            TunnelEncap::Gue { port } => port,
            _ => 0,
        }
    }
}

/// Tunnel settings of a real server forwarded by tunnelling.
///
/// Construct with [`Tunnel::new`] (or [`Tunnel::IPIP`], [`Tunnel::gue`],
/// [`Tunnel::gre`]) and [`Tunnel::with_flags`]; `#[non_exhaustive]`, so a
/// new kernel tunnel attribute can become a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub struct Tunnel {
    /// The encapsulation.
    pub encap: TunnelEncap,
    /// Checksum flags.
    pub flags: TunnelFlags,
}

impl Tunnel {
    /// Plain IP-in-IP, no checksum flags: what `ipvsadm -i` creates.
    pub const IPIP: Tunnel = Tunnel::new(TunnelEncap::Ipip);

    /// A tunnel with the given encapsulation and no checksum flags.
    ///
    /// ```
    /// use ipvsctl::model::{Tunnel, TunnelEncap, TunnelFlags};
    /// let t = Tunnel::new(TunnelEncap::Gue { port: 6080 }).with_flags(TunnelFlags::CSUM);
    /// assert_eq!(t.encap.port(), 6080);
    /// ```
    pub const fn new(encap: TunnelEncap) -> Self {
        Tunnel {
            encap,
            flags: TunnelFlags::empty(),
        }
    }

    /// GUE to `port` without checksums.
    pub fn gue(port: u16) -> Self {
        Self::new(TunnelEncap::Gue { port })
    }

    /// GRE without checksums.
    pub fn gre() -> Self {
        Self::new(TunnelEncap::Gre)
    }

    /// Sets the checksum flags.
    pub fn with_flags(mut self, flags: TunnelFlags) -> Self {
        self.flags = flags;
        self
    }
}

/// How packets reach a real server.
///
/// `#[non_exhaustive]`: the kernel's forwarding field has room for more
/// methods than it defines today (`IP_VS_CONN_F_FWD_MASK` is 3 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub enum ForwardMethod {
    /// NAT (`-m`, "Masq").
    Masquerade,
    /// Local node ("Local"): the real server is this host.
    Local,
    /// IP tunnelling (`-i`, "Tunnel") with its settings. Tunnel settings exist
    /// only here, so "tunnel options on a non-tunnel server" cannot be
    /// expressed.
    Tunnel(Tunnel),
    /// Direct routing (`-g`, "Route"; ipvsadm's default).
    DirectRoute,
    /// Bypass (`IP_VS_CONN_F_BYPASS`): not settable with ipvsadm, decoded so
    /// that state made by other tools still lists.
    Bypass,
}

impl ForwardMethod {
    /// The kernel's forwarding number (`IP_VS_CONN_F_*`, masked with 0x7).
    pub fn raw(self) -> u32 {
        match self {
            ForwardMethod::Masquerade => 0,
            ForwardMethod::Local => 1,
            ForwardMethod::Tunnel(_) => 2,
            ForwardMethod::DirectRoute => 3,
            ForwardMethod::Bypass => 4,
        }
    }

    /// Whether this is tunnelling.
    pub fn is_tunnel(&self) -> bool {
        matches!(self, ForwardMethod::Tunnel(_))
    }
}

impl fmt::Display for ForwardMethod {
    /// The column text of `ipvsadm -L`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ForwardMethod::Masquerade => "Masq",
            ForwardMethod::Local => "Local",
            ForwardMethod::Tunnel(_) => "Tunnel",
            ForwardMethod::DirectRoute => "Route",
            ForwardMethod::Bypass => "Bypass",
        })
    }
}

/// A real server of a virtual server: identity ([`RealServer::addr`]) and
/// configuration.
///
/// Its address family is the family of `addr`; it may differ from the virtual
/// server's only with tunnelling (see [`super::validate_destination`]).
///
/// Construct with [`RealServer::new`] and the `with_*` methods (or assign the
/// public fields); `#[non_exhaustive]`, so a new kernel attribute can become
/// a field without breaking callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub struct RealServer {
    /// Address and port (port 0 on a firewall-mark service means "the
    /// packet's own port").
    pub addr: SocketAddr,
    /// Weight, 0..=`i32::MAX`; 0 takes no new connections.
    pub weight: u32,
    /// Forwarding method.
    pub forward: ForwardMethod,
    /// Upper connection threshold (0: no limit).
    #[cfg_attr(feature = "serde", serde(default))]
    pub upper_threshold: u32,
    /// Lower connection threshold.
    #[cfg_attr(feature = "serde", serde(default))]
    pub lower_threshold: u32,
}

impl RealServer {
    /// A real server with ipvsadm's defaults: weight 1, direct routing, no
    /// thresholds.
    ///
    /// ```
    /// use ipvsctl::model::{ForwardMethod, RealServer};
    /// let rs = RealServer::new("10.244.0.5:8080".parse().unwrap())
    ///     .with_weight(3)
    ///     .with_forward(ForwardMethod::Masquerade);
    /// assert_eq!(rs.weight, 3);
    /// ```
    pub fn new(addr: SocketAddr) -> Self {
        RealServer {
            addr,
            weight: 1,
            forward: ForwardMethod::DirectRoute,
            upper_threshold: 0,
            lower_threshold: 0,
        }
    }

    /// Sets the weight.
    pub fn with_weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }

    /// Sets the forwarding method.
    pub fn with_forward(mut self, forward: ForwardMethod) -> Self {
        self.forward = forward;
        self
    }

    /// Sets the upper and lower connection thresholds.
    pub fn with_thresholds(mut self, upper: u32, lower: u32) -> Self {
        self.upper_threshold = upper;
        self.lower_threshold = lower;
        self
    }

    /// The address family of the real server.
    pub fn family(&self) -> AddressFamily {
        AddressFamily::of(&self.addr.ip())
    }
}
