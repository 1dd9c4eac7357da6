//! The IPVS connection table, read from `/proc/net/ip_vs_conn` (and
//! `/proc/net/ip_vs_conn_sync`) as typed entries.
//!
//! The kernel publishes its connection entries only as text in procfs (there
//! is no netlink dump of connections). [`ConnReader`] streams that text: one
//! line at a time through a [`BufRead`] with one reused line buffer, so a
//! table of a million entries is never held in memory as a whole.
//!
//! The file shows the table of the network namespace it was opened in. A
//! [`ConnTable`] opens `/proc/thread-self/net/ip_vs_conn` in the calling
//! thread's namespace, or in a pinned one ([`ConnTable::netns`]) from a
//! thread inside it (see [`run_in`](crate::netlink::netns::run_in())); reading
//! then happens on the caller's thread.
//!
//! [`ConnTable::totals`] reads the namespace's totals beside the table
//! (`/proc/net/ip_vs_stats`: connections, packets and bytes since IPVS was
//! loaded there).
//!
//! Every line is checked; a line that does not have the kernel's format is a
//! [`ConnError::Parse`] naming the line and the field, never a panic.
//!
//! A listing is not a snapshot: the kernel serves the file a page per read
//! and resumes by counting entries again (up to 6.12 in a table shared by
//! all namespaces), so connections made or dropped while the file is read
//! (before 7.x anywhere on the host) can make it repeat or skip entries, as
//! `ipvsadm -Lc` does. Entries are yielded as printed; a consumer that must
//! not count one twice removes repeats by protocol, client, virtual address
//! and real server.
//!
//! ```no_run
//! use ipvsctl::conns::{ConnState, ConnTable};
//!
//! let mut established = 0;
//! for entry in ConnTable::new().connections()? {
//!     if entry?.state == ConnState::Established {
//!         established += 1;
//!     }
//! }
//! println!("{established} established TCP connections");
//! # Ok::<(), ipvsctl::conns::ConnError>(())
//! ```

mod parse;
mod totals;

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::model::{Protocol, Stats};
use crate::netlink::netns::{NetNs, PinnedNetNs, run_in};

pub use parse::{ConnParseError, Field};
pub use totals::TotalsParseError;

/// The connection table of the calling thread's namespace, as `ipvsadm -Lc` reads it.
const CONN_FILE: &str = "/proc/thread-self/net/ip_vs_conn";
/// The same table with each entry's origin (local or learnt from a sync daemon).
const CONN_SYNC_FILE: &str = "/proc/thread-self/net/ip_vs_conn_sync";
/// The namespace's totals of connections, packets and bytes.
const TOTALS_FILE: &str = "/proc/thread-self/net/ip_vs_stats";

/// Which of the two procfs views a reader parses: they differ in one column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Table {
    /// `/proc/net/ip_vs_conn`: expiry, then the persistence engine columns
    /// when an entry has them.
    Conn,
    /// `/proc/net/ip_vs_conn_sync`: the origin (`LOCAL`/`SYNC`), then expiry.
    ConnSync,
}

/// One IPVS connection entry.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Connection {
    /// The connection's protocol. Persistence templates of firewall-mark
    /// services have protocol 0 (`IP`), see [`Connection::fwmark`].
    pub protocol: Protocol,
    /// The client's address and port.
    pub client: SocketAddr,
    /// The virtual address and port the client sent to (for a persistence
    /// template of a firewall-mark service: the mark, see [`Connection::fwmark`]).
    pub virtual_addr: SocketAddr,
    /// The real server the connection is forwarded to. May be of another
    /// family than the client (IPv4 service, IPv6 tunnel destination).
    pub real: SocketAddr,
    /// The protocol state as the kernel names it.
    pub state: ConnState,
    /// Seconds until the entry expires unless traffic refreshes it.
    pub expires_secs: u64,
    /// The persistence engine's name and data (for example `sip` and the
    /// Call-ID), when the entry has them; [`Table::Conn`] only.
    pub persistence: Option<PersistenceData>,
    /// Whether the entry was made here or learnt from a sync daemon;
    /// [`Table::ConnSync`] only.
    pub origin: Option<Origin>,
}

impl Connection {
    /// The firewall mark, for a persistence template of a firewall-mark
    /// service (protocol 0, `IP`): the kernel stores the mark in the virtual
    /// address (IPv4: the whole address; IPv6: the last 32 bits, the rest zero).
    ///
    /// ```
    /// use ipvsctl::conns::ConnReader;
    ///
    /// let table = "Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData\n\
    ///              IP  0A000002 0000 00000005 0000 0A010002 0000 NONE            359\n";
    /// let entry = ConnReader::new(table.as_bytes()).next().unwrap()?;
    /// assert_eq!(entry.fwmark(), Some(5));
    /// # Ok::<(), ipvsctl::conns::ConnError>(())
    /// ```
    pub fn fwmark(&self) -> Option<u32> {
        if self.protocol != Protocol::Other(0) {
            return None;
        }
        match self.virtual_addr.ip() {
            std::net::IpAddr::V4(a) => Some(u32::from(a)),
            std::net::IpAddr::V6(a) => {
                let bits = u128::from(a);
                (bits >> 32 == 0).then_some(bits as u32)
            }
        }
    }
}

/// A persistence engine's columns of an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PersistenceData {
    /// The engine's name, e.g. `sip`.
    pub engine: String,
    /// The engine's data as the kernel prints it (may be empty).
    pub data: String,
}

/// Where a connection entry came from ([`Table::ConnSync`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Made by this host's IPVS (`LOCAL`).
    Local,
    /// Learnt from a master sync daemon (`SYNC`).
    Sync,
}

/// A connection's protocol state, as the kernel's state tables name it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnState {
    /// `NONE`: no state yet (also a template that is not yet assured).
    None,
    /// `ESTABLISHED` (TCP, SCTP).
    Established,
    /// `SYN_SENT` (TCP).
    SynSent,
    /// `SYN_RECV` (TCP).
    SynRecv,
    /// `FIN_WAIT` (TCP).
    FinWait,
    /// `TIME_WAIT` (TCP).
    TimeWait,
    /// `CLOSE` (TCP, SCTP).
    Close,
    /// `CLOSE_WAIT` (TCP).
    CloseWait,
    /// `LAST_ACK` (TCP).
    LastAck,
    /// `LISTEN` (TCP).
    Listen,
    /// `SYNACK` (TCP).
    SynAck,
    /// `UDP`: the one state of a UDP entry.
    Udp,
    /// `ASSURED`: a persistence template that saw traffic.
    Assured,
    /// Any other name (SCTP states, `ERR!`, states of future kernels).
    Other(Box<str>),
}

impl ConnState {
    /// The state for the kernel's name of it.
    ///
    /// ```
    /// use ipvsctl::conns::ConnState;
    /// assert_eq!(ConnState::from_name("ESTABLISHED"), ConnState::Established);
    /// assert_eq!(ConnState::from_name("COOKIE_ECHOED").as_str(), "COOKIE_ECHOED");
    /// ```
    pub fn from_name(name: &str) -> ConnState {
        match name {
            "NONE" => ConnState::None,
            "ESTABLISHED" => ConnState::Established,
            "SYN_SENT" => ConnState::SynSent,
            "SYN_RECV" => ConnState::SynRecv,
            "FIN_WAIT" => ConnState::FinWait,
            "TIME_WAIT" => ConnState::TimeWait,
            "CLOSE" => ConnState::Close,
            "CLOSE_WAIT" => ConnState::CloseWait,
            "LAST_ACK" => ConnState::LastAck,
            "LISTEN" => ConnState::Listen,
            "SYNACK" => ConnState::SynAck,
            "UDP" => ConnState::Udp,
            "ASSURED" => ConnState::Assured,
            other => ConnState::Other(other.into()),
        }
    }

    /// The kernel's name of the state, as `ipvsadm -Lc` prints it.
    pub fn as_str(&self) -> &str {
        match self {
            ConnState::None => "NONE",
            ConnState::Established => "ESTABLISHED",
            ConnState::SynSent => "SYN_SENT",
            ConnState::SynRecv => "SYN_RECV",
            ConnState::FinWait => "FIN_WAIT",
            ConnState::TimeWait => "TIME_WAIT",
            ConnState::Close => "CLOSE",
            ConnState::CloseWait => "CLOSE_WAIT",
            ConnState::LastAck => "LAST_ACK",
            ConnState::Listen => "LISTEN",
            ConnState::SynAck => "SYNACK",
            ConnState::Udp => "UDP",
            ConnState::Assured => "ASSURED",
            ConnState::Other(name) => name,
        }
    }
}

impl fmt::Display for ConnState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kernel's name of a protocol in the connection table (`TCP`, `UDP`,
/// `SCTP`, `IP` for 0, `ICMP`, `ICMPv6`, else `IP_<number>`).
///
/// ```
/// use ipvsctl::conns::protocol_name;
/// use ipvsctl::model::Protocol;
/// assert_eq!(protocol_name(Protocol::Tcp), "TCP");
/// assert_eq!(protocol_name(Protocol::Other(0)), "IP");
/// assert_eq!(protocol_name(Protocol::Other(47)), "IP_47");
/// ```
pub fn protocol_name(protocol: Protocol) -> std::borrow::Cow<'static, str> {
    match protocol {
        Protocol::Tcp => "TCP".into(),
        Protocol::Udp => "UDP".into(),
        Protocol::Sctp => "SCTP".into(),
        Protocol::Other(0) => "IP".into(),
        Protocol::Other(1) => "ICMP".into(),
        Protocol::Other(58) => "ICMPv6".into(),
        Protocol::Other(n) => format!("IP_{n}").into(),
    }
}

/// Why the connection table could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnError {
    /// The file could not be opened or read (`NotFound` for the open: IPVS
    /// is not loaded, the kernel publishes the file only with `ip_vs`).
    #[error("cannot read {path} in network namespace {netns}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The namespace it was read in.
        netns: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A line does not have the kernel's format.
    #[error(transparent)]
    Parse(#[from] ConnParseError),
    /// `/proc/net/ip_vs_stats` does not have the kernel's format.
    #[error(transparent)]
    Totals(#[from] TotalsParseError),
}

/// A streaming reader of the connection table: an iterator of entries,
/// parsed one line at a time.
///
/// The first line must be the kernel's column header (it tells which
/// [`Table`] the text is); every further line is one entry. Iteration ends
/// at the end of the input, or after the first error.
///
/// ```
/// use ipvsctl::conns::{ConnReader, ConnState};
///
/// let table = "Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData\n\
///              TCP 0A000002 A1B2 0A090909 0050 0A010002 1F90 ESTABLISHED     899\n";
/// let entries: Vec<_> = ConnReader::new(table.as_bytes()).collect::<Result<_, _>>()?;
/// assert_eq!(entries[0].client.to_string(), "10.0.0.2:41394");
/// assert_eq!(entries[0].real.to_string(), "10.1.0.2:8080");
/// assert_eq!(entries[0].state, ConnState::Established);
/// assert_eq!(entries[0].expires_secs, 899);
/// # Ok::<(), ipvsctl::conns::ConnError>(())
/// ```
#[derive(Debug)]
pub struct ConnReader<R> {
    input: R,
    line: Vec<u8>,
    line_no: u64,
    table: Option<Table>,
    path: PathBuf,
    netns: String,
    done: bool,
}

impl<R: BufRead> ConnReader<R> {
    /// A reader of the table text in `input` (the header line first).
    pub fn new(input: R) -> ConnReader<R> {
        ConnReader::named(input, PathBuf::from("<input>"), String::from("current"))
    }

    fn named(input: R, path: PathBuf, netns: String) -> ConnReader<R> {
        ConnReader {
            input,
            line: Vec::with_capacity(256),
            line_no: 0,
            table: None,
            path,
            netns,
            done: false,
        }
    }

    /// Which view the header announced; `None` before the first entry was
    /// asked for.
    pub fn table(&self) -> Option<Table> {
        self.table
    }

    /// Reads the next line into the buffer; `Ok(false)` at the end.
    fn next_line(&mut self) -> Result<bool, ConnError> {
        self.line.clear();
        let n = self
            .input
            .read_until(b'\n', &mut self.line)
            .map_err(|source| ConnError::Io {
                path: self.path.clone(),
                netns: self.netns.clone(),
                source,
            })?;
        self.line_no += 1;
        Ok(n > 0)
    }

    fn step(&mut self) -> Result<Option<Connection>, ConnError> {
        if self.table.is_none() {
            if !self.next_line()? {
                return Err(parse::header_missing(self.line_no).into());
            }
            self.table = Some(parse::header(&self.line, self.line_no)?);
        }
        let table = self.table.unwrap_or(Table::Conn);
        loop {
            if !self.next_line()? {
                return Ok(None);
            }
            if self.line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Ok(Some(parse::entry(&self.line, self.line_no, table)?));
        }
    }
}

impl<R: BufRead> Iterator for ConnReader<R> {
    type Item = Result<Connection, ConnError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(entry)) => Some(Ok(entry)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// The IPVS connection table of one network namespace, read as streams of
/// entries ([`ConnTable::connections`], [`ConnTable::sync_connections`]).
///
/// [`ConnTable::new`] reads the table of the calling thread's namespace, as
/// it is at each call; [`ConnTable::netns`] fixes a pinned namespace (for
/// example a handle's, [`crate::Handle::netns`]). Cheap to clone.
///
/// ```no_run
/// use ipvsctl::{Handle, HandleOptions, NetNs};
/// use ipvsctl::conns::ConnTable;
///
/// let ipvs = Handle::open(&NetNs::named("lb"), &HandleOptions::new())?;
/// let table = ConnTable::new().netns(ipvs.netns().clone());
/// println!("{} entries", table.connections()?.count());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct ConnTable {
    netns: NetNs,
}

impl ConnTable {
    /// The table of the calling thread's namespace, looked up at each call.
    pub fn new() -> ConnTable {
        ConnTable::default()
    }

    /// The table of the pinned namespace `netns` ([`NetNs::pin`], or
    /// [`crate::Handle::netns`]) instead, even after the name it was pinned
    /// by leads to another namespace.
    pub fn netns(mut self, netns: PinnedNetNs) -> ConnTable {
        self.netns = NetNs::Pinned(netns);
        self
    }

    /// The namespace: [`NetNs::Pinned`] once set with [`ConnTable::netns`],
    /// else [`NetNs::Current`] (the calling thread's).
    pub fn namespace(&self) -> &NetNs {
        &self.netns
    }

    /// The table (`/proc/net/ip_vs_conn` as the namespace sees it), as a
    /// streaming reader.
    ///
    /// The file is opened inside the namespace; the returned reader keeps
    /// showing that namespace's table wherever it is read.
    ///
    /// Errors: the namespace cannot be entered, or the file cannot be opened
    /// (`NotFound`: `ip_vs` is not loaded).
    pub fn connections(&self) -> Result<ConnReader<BufReader<File>>, ConnError> {
        open(&self.netns, CONN_FILE)
    }

    /// The table with each entry's [`Origin`] (`/proc/net/ip_vs_conn_sync`),
    /// as a streaming reader. See [`ConnTable::connections`].
    pub fn sync_connections(&self) -> Result<ConnReader<BufReader<File>>, ConnError> {
        open(&self.netns, CONN_SYNC_FILE)
    }

    /// The namespace's totals (`/proc/net/ip_vs_stats`): connections,
    /// packets and bytes IPVS has handled since it was loaded in the
    /// namespace, and their rate estimates, as [`Stats`] with
    /// [`StatsSource::Procfs`](crate::model::StatsSource::Procfs). No netlink command returns these; unlike the
    /// services' counters, they keep what deleted services handled.
    ///
    /// Errors: as [`ConnTable::connections`], or [`ConnError::Totals`] when
    /// the file does not have the kernel's format.
    ///
    /// ```no_run
    /// let totals = ipvsctl::conns::ConnTable::new().totals()?;
    /// println!("{} connections, {} bytes in", totals.conns, totals.in_bytes);
    /// # Ok::<(), ipvsctl::conns::ConnError>(())
    /// ```
    pub fn totals(&self) -> Result<Stats, ConnError> {
        let io = |source| ConnError::Io {
            path: PathBuf::from(TOTALS_FILE),
            netns: self.netns.to_string(),
            source,
        };
        // Opened inside the namespace, read here: the file keeps showing the
        // namespace it was opened in.
        let mut file = run_in(&self.netns, || File::open(TOTALS_FILE)).map_err(io)?;
        let mut text = String::with_capacity(512);
        file.read_to_string(&mut text).map_err(io)?;
        Ok(totals::parse(&text)?)
    }
}

fn open(ns: &NetNs, path: &str) -> Result<ConnReader<BufReader<File>>, ConnError> {
    let file = run_in(ns, || File::open(path)).map_err(|source| ConnError::Io {
        path: PathBuf::from(path),
        netns: ns.to_string(),
        source,
    })?;
    Ok(ConnReader::named(
        BufReader::with_capacity(64 * 1024, file),
        PathBuf::from(path),
        ns.to_string(),
    ))
}

#[cfg(test)]
mod tests;
