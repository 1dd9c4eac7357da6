//! Names for addresses and ports when `-n` is not given, and for host and
//! service names on the command line.
//!
//! Ports are named from `/etc/services` (as ipvsadm does through
//! `getservbyport`). Addresses are printed numerically: the standard library
//! has no reverse lookup, so where ipvsadm would print a host name
//! ipvsadm-lite prints the address. Host names on the command line are
//! resolved with the system resolver (first IPv4 address).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};

use ipvsctl::model::Protocol;

use super::format::Namer;
use super::rules::Resolver;

/// `/etc/services`, parsed: (protocol, port) → first name and name → port.
#[derive(Debug, Default)]
pub struct Services {
    by_port: HashMap<(String, u16), String>,
    by_name: HashMap<(String, String), u16>,
}

impl Services {
    /// Reads `/etc/services`; an unreadable file gives an empty table.
    pub fn system() -> Self {
        std::fs::read_to_string("/etc/services")
            .map(|t| Self::parse(&t))
            .unwrap_or_default()
    }

    /// Parses the `/etc/services` format: `name port/proto [aliases] [# comment]`.
    pub fn parse(text: &str) -> Self {
        let mut s = Services::default();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("");
            let mut words = line.split_whitespace();
            let (Some(name), Some(pp)) = (words.next(), words.next()) else {
                continue;
            };
            let Some((port, proto)) = pp.split_once('/') else {
                continue;
            };
            let Ok(port) = port.parse::<u16>() else {
                continue;
            };
            s.by_port
                .entry((proto.to_owned(), port))
                .or_insert_with(|| name.to_owned());
            for n in std::iter::once(name).chain(words) {
                s.by_name
                    .entry((proto.to_owned(), n.to_owned()))
                    .or_insert(port);
            }
        }
        s
    }
}

fn proto_name(p: Protocol) -> Option<&'static str> {
    match p {
        Protocol::Tcp => Some("tcp"),
        Protocol::Udp => Some("udp"),
        Protocol::Sctp => Some("sctp"),
        _ => None,
    }
}

impl Namer for Services {
    fn port_name(&self, port: u16, protocol: Protocol) -> Option<String> {
        let proto = proto_name(protocol)?;
        self.by_port.get(&(proto.to_owned(), port)).cloned()
    }

    fn host_name(&self, _: IpAddr) -> Option<String> {
        None
    }
}

impl Resolver for Services {
    fn host(&self, name: &str) -> Option<Ipv4Addr> {
        (name, 0)
            .to_socket_addrs()
            .ok()?
            .find_map(|a| match a.ip() {
                IpAddr::V4(v4) => Some(v4),
                IpAddr::V6(_) => None,
            })
    }

    fn port(&self, name: &str, protocol: Protocol) -> Option<u16> {
        let proto = proto_name(protocol)?;
        self.by_name
            .get(&(proto.to_owned(), name.to_owned()))
            .copied()
    }
}
