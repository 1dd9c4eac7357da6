//! `-L -c` / `--connection`: the connection table, formatted as ipvsadm
//! 1.31's `list_conn` does.
//!
//! ipvsadm reads `/proc/net/ip_vs_conn` itself; ipvsadm-lite reads it
//! through `ipvsctl::conns` and prints the same columns: protocol, expiry
//! as `MM:SS`, state, then client, virtual and real address and port, and
//! with `--persistent-conn` the persistence engine's name and data.

use std::fmt::Write as _;
use std::net::SocketAddr;

use ipvsctl::conns::{self, ConnError, ConnTable, Connection};
use ipvsctl::model::Protocol;

use super::format::{self, Namer};
use super::rules::Format;

/// The listing's two title lines.
pub fn title(out: &mut String, f: &Format) {
    out.push_str("IPVS connection entries\n");
    if f.persistent_conn {
        let _ = writeln!(
            out,
            "pro expire {:<11} {:<18} {:<18} {:<18} {:<16} pe_data",
            "state", "source", "virtual", "destination", "pe name"
        );
    } else {
        let _ = writeln!(
            out,
            "pro expire {:<11} {:<18} {:<18} destination",
            "state", "source", "virtual"
        );
    }
}

/// One entry's line.
pub fn entry(out: &mut String, c: &Connection, f: &Format, n: &dyn Namer) {
    // ipvsadm names ports for TCP and UDP only (it maps any other protocol
    // name to 0 before looking up services).
    let naming = match c.protocol {
        Protocol::Tcp | Protocol::Udp => c.protocol,
        _ => Protocol::Other(0),
    };
    let name = |a: SocketAddr| format::addrport(a, naming, f, n);
    let expire = format!("{:02}:{:02}", c.expires_secs / 60, c.expires_secs % 60);
    let (client, virt, real) = (name(c.client), name(c.virtual_addr), name(c.real));
    let _ = write!(
        out,
        "{:<3} {:<6} {:<11} {:<18} {:<18} ",
        conns::protocol_name(c.protocol),
        expire,
        c.state.as_str(),
        client,
        virt
    );
    // ipvsadm prints the engine columns only when the entry has both (its
    // sscanf then fills all 11 fields), and of the data its first word.
    let pe = c.persistence.as_ref().and_then(|p| {
        let data = p.data.split_ascii_whitespace().next()?;
        Some((p.engine.as_str(), data))
    });
    match pe {
        Some((engine, data)) if f.persistent_conn => {
            let _ = writeln!(out, "{real:<16} {engine:<18} {data}");
        }
        _ => {
            let _ = writeln!(out, "{real}");
        }
    }
}

/// The whole listing of the caller's namespace.
pub fn list(out: &mut String, f: &Format, n: &dyn Namer) -> Result<(), String> {
    let reader = ConnTable::new().connections().map_err(|e| match e {
        ConnError::Io { .. } => "cannot open file /proc/net/ip_vs_conn".to_owned(),
        other => other.to_string(),
    })?;
    title(out, f);
    for c in reader {
        let c = c.map_err(|e| format!("unexpected input from /proc/net/ip_vs_conn: {e}"))?;
        entry(out, &c, f, n);
    }
    Ok(())
}
