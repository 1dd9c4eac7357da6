//! One line of the connection table to a [`Connection`].
//!
//! The kernel prints (net/netfilter/ipvs/ip_vs_conn.c) IPv4 addresses as 8
//! hex digits in host order, IPv6 addresses as eight colon-separated groups
//! of 4 hex digits, ports as 4 hex digits, then the state name, then either
//! expiry and the optional persistence engine columns (`ip_vs_conn`) or the
//! origin and expiry (`ip_vs_conn_sync`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{ConnState, Connection, Origin, PersistenceData, Table};
use crate::model::Protocol;

/// A column of the connection table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Field {
    /// The first line, naming the columns.
    Header,
    /// The whole line (encoding, column count).
    Line,
    /// `Pro`.
    Protocol,
    /// `FromIP`.
    ClientAddress,
    /// `FPrt`.
    ClientPort,
    /// `ToIP`.
    VirtualAddress,
    /// `TPrt`.
    VirtualPort,
    /// `DestIP`.
    RealAddress,
    /// `DPrt`.
    RealPort,
    /// `State`.
    State,
    /// `Origin` (`ip_vs_conn_sync`).
    Origin,
    /// `Expires`.
    Expires,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::Header => "header",
            Field::Line => "line",
            Field::Protocol => "protocol (Pro)",
            Field::ClientAddress => "client address (FromIP)",
            Field::ClientPort => "client port (FPrt)",
            Field::VirtualAddress => "virtual address (ToIP)",
            Field::VirtualPort => "virtual port (TPrt)",
            Field::RealAddress => "real server address (DestIP)",
            Field::RealPort => "real server port (DPrt)",
            Field::State => "state",
            Field::Origin => "origin",
            Field::Expires => "expiry (Expires)",
        })
    }
}

/// A line of the connection table that does not have the kernel's format.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("connection table line {line}: {field}: {reason}")]
#[non_exhaustive]
pub struct ConnParseError {
    /// The line number, 1 for the header.
    pub line: u64,
    /// The column that is wrong.
    pub field: Field,
    /// What is wrong with it.
    pub reason: String,
}

fn err(line: u64, field: Field, reason: impl Into<String>) -> ConnParseError {
    ConnParseError {
        line,
        field,
        reason: reason.into(),
    }
}

/// The error for input without even a header line.
pub(super) fn header_missing(line: u64) -> ConnParseError {
    err(line, Field::Header, "empty input: no column header")
}

/// The header line: which view of the table follows.
pub(super) fn header(raw: &[u8], line: u64) -> Result<Table, ConnParseError> {
    let text = std::str::from_utf8(raw).map_err(|_| err(line, Field::Header, "not UTF-8"))?;
    let mut words = text.split_ascii_whitespace();
    if words.next() != Some("Pro") || words.next() != Some("FromIP") {
        return Err(err(
            line,
            Field::Header,
            format!("expected the kernel's column header \"Pro FromIP ...\", got {text:?}"),
        ));
    }
    Ok(if words.any(|w| w == "Origin") {
        Table::ConnSync
    } else {
        Table::Conn
    })
}

/// One entry line of `table`.
pub(super) fn entry(raw: &[u8], line: u64, table: Table) -> Result<Connection, ConnParseError> {
    let text = std::str::from_utf8(raw).map_err(|_| err(line, Field::Line, "not UTF-8"))?;
    let mut words = text.split_ascii_whitespace();
    let mut next = |field: Field| {
        words
            .next()
            .ok_or_else(|| err(line, field, "missing (line ends early)"))
    };
    let protocol = protocol(next(Field::Protocol)?, line)?;
    let client_ip = address(next(Field::ClientAddress)?, line, Field::ClientAddress)?;
    let client_port = port(next(Field::ClientPort)?, line, Field::ClientPort)?;
    let virtual_ip = address(next(Field::VirtualAddress)?, line, Field::VirtualAddress)?;
    let virtual_port = port(next(Field::VirtualPort)?, line, Field::VirtualPort)?;
    let real_ip = address(next(Field::RealAddress)?, line, Field::RealAddress)?;
    let real_port = port(next(Field::RealPort)?, line, Field::RealPort)?;
    if client_ip.is_ipv4() != virtual_ip.is_ipv4() {
        return Err(err(
            line,
            Field::VirtualAddress,
            "client and virtual address are of different families",
        ));
    }
    let state = ConnState::from_name(next(Field::State)?);
    let origin = match table {
        Table::Conn => None,
        Table::ConnSync => Some(match next(Field::Origin)? {
            "LOCAL" => Origin::Local,
            "SYNC" => Origin::Sync,
            other => {
                return Err(err(
                    line,
                    Field::Origin,
                    format!("{other:?} is neither LOCAL nor SYNC"),
                ));
            }
        }),
    };
    let expires = next(Field::Expires)?;
    let expires_secs = expires.parse::<u64>().map_err(|_| {
        err(
            line,
            Field::Expires,
            format!("{expires:?} is not a number of seconds"),
        )
    })?;
    let persistence = match (table, words.next()) {
        (Table::Conn, Some(engine)) => Some(PersistenceData {
            engine: engine.to_owned(),
            data: words.collect::<Vec<_>>().join(" "),
        }),
        (Table::ConnSync, Some(extra)) => {
            return Err(err(
                line,
                Field::Line,
                format!("unexpected column {extra:?} after the expiry"),
            ));
        }
        (_, None) => None,
    };
    Ok(Connection {
        protocol,
        client: SocketAddr::new(client_ip, client_port),
        virtual_addr: SocketAddr::new(virtual_ip, virtual_port),
        real: SocketAddr::new(real_ip, real_port),
        state,
        expires_secs,
        persistence,
        origin,
    })
}

fn protocol(word: &str, line: u64) -> Result<Protocol, ConnParseError> {
    Ok(match word {
        "TCP" => Protocol::Tcp,
        "UDP" => Protocol::Udp,
        "SCTP" => Protocol::Sctp,
        "IP" => Protocol::Other(0),
        "ICMP" => Protocol::Other(1),
        "ICMPv6" => Protocol::Other(58),
        other => match other.strip_prefix("IP_").map(str::parse::<u8>) {
            Some(Ok(n)) => Protocol::Other(u16::from(n)),
            _ => {
                return Err(err(
                    line,
                    Field::Protocol,
                    format!("unknown protocol name {other:?}"),
                ));
            }
        },
    })
}

/// 8 hex digits (IPv4, host order) or the kernel's full IPv6 form.
fn address(word: &str, line: u64, field: Field) -> Result<IpAddr, ConnParseError> {
    if word.contains(':') {
        return word
            .parse::<Ipv6Addr>()
            .map(IpAddr::V6)
            .map_err(|_| err(line, field, format!("{word:?} is not an IPv6 address")));
    }
    if word.len() != 8 || !word.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(err(
            line,
            field,
            format!("{word:?} is neither 8 hex digits (IPv4) nor an IPv6 address"),
        ));
    }
    u32::from_str_radix(word, 16)
        .map(|bits| IpAddr::V4(Ipv4Addr::from(bits)))
        .map_err(|_| err(line, field, format!("{word:?} is not hexadecimal")))
}

/// 1 to 4 hex digits.
fn port(word: &str, line: u64, field: Field) -> Result<u16, ConnParseError> {
    if word.is_empty() || word.len() > 4 || !word.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(err(
            line,
            field,
            format!("{word:?} is not a port in 4 hex digits"),
        ));
    }
    u16::from_str_radix(word, 16)
        .map_err(|_| err(line, field, format!("{word:?} is not hexadecimal")))
}
