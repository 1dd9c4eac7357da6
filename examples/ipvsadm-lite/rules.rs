//! The ipvsadm command grammar, pure: one command line (`parse_args`) or a
//! rule file in the `ipvsadm -S` format (`parse`) becomes [`Command`]s.
//!
//! No I/O happens here (host and service names are looked up through a
//! [`Resolver`] the caller passes, [`NoResolver`] by default), and nothing
//! panics on any input: this module is also a fuzz target.
//!
//! The grammar follows ipvsadm 1.31 as Debian ships it, including its quirks,
//! so that the same command line means the same thing and fails with the same
//! message and exit status:
//!
//! * options are read in order and the first problem found is reported;
//! * the first option must be a command (`-A`, `-L`, ...); a second command is
//!   an "invalid option";
//! * short options cluster (`-Ln`), take their value attached or as the next
//!   word (`-p600`, `-p 600`); long options take `--opt=value` or
//!   `--opt value`; `-p`'s value is optional (a following word that starts
//!   with `-` is not taken);
//! * addresses are parsed like `inet_aton` (so `10.1` is `10.0.0.1`) and
//!   `inet_pton` for IPv6, `[addr]:port` for IPv6 with a port;
//! * exit status 2 for a bad value or combination, 255 for an unknown option
//!   or a missing command.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use ipvsctl::model::{
    AddressFamily, DaemonRole, ForwardMethod, Netmask, PersistenceEngine, Protocol, RealServer,
    Scheduler, ServiceFlags, ServiceKey, SyncDaemon, Timeouts, Tunnel, TunnelEncap, TunnelFlags,
    VirtualServer,
};

/// The longest persistence timeout ipvsadm accepts (31 days).
pub const MAX_TIMEOUT: u32 = 86400 * 31;

/// What a listing shows and how (`-n`, `--stats`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Format {
    /// `-n`: numeric addresses and ports.
    pub numeric: bool,
    /// `--stats`.
    pub stats: bool,
    /// `--rate`.
    pub rate: bool,
    /// `--thresholds`.
    pub thresholds: bool,
    /// `--persistent-conn`.
    pub persistent_conn: bool,
    /// `--nosort`.
    pub nosort: bool,
    /// `--exact`.
    pub exact: bool,
    /// `--tun-info`.
    pub tun_info: bool,
    /// `-S`: rule format.
    pub rule: bool,
    /// Firewall marks above `i32::MAX` printed unsigned. ipvsadm prints
    /// marks with `%d`, and its own `-R` refuses the negative number that
    /// gives; lines this tool writes to be read back (the `--dry-run` plan)
    /// set this.
    pub unsigned_marks: bool,
}

/// What `-L` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListWhat {
    /// Every service (with the version header).
    All,
    /// One service (no header).
    Service(ServiceKey),
    /// `--timeout`.
    Timeout,
    /// `--daemon`.
    Daemon,
    /// `-c`: the connection table.
    Connections,
}

/// Options of `-R` that go beyond ipvsadm. Without any, `-R` runs the
/// rules' lines in order the way `ipvsadm -R` does: it adds, and deletes
/// only what a `-D`, `-d` or `-C` line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RestoreOptions {
    /// `--clear-first`: flush everything, then run the lines (`ipvsadm -C;
    /// ipvsadm -R`; slow after a large table: the kernel's destination
    /// trash, docs/kernel-notes.md).
    pub clear_first: bool,
    /// `--replace-table`: the rules are the whole table. What they keep is
    /// updated in place (never deleted and re-created), and every service
    /// they do not name is deleted, also those of other programs.
    pub replace_table: bool,
    /// `--dry-run`: print the operations instead of applying them.
    pub dry_run: bool,
}

/// One ipvsadm command, with every value resolved to the library's model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `-A`.
    AddService(VirtualServer),
    /// `-E`.
    EditService(VirtualServer),
    /// `-D`.
    DeleteService(ServiceKey),
    /// `-a`.
    AddServer(ServiceKey, RealServer),
    /// `-e`.
    EditServer(ServiceKey, RealServer),
    /// `-d`.
    DeleteServer(ServiceKey, SocketAddr),
    /// `-C`.
    Clear,
    /// `-L` / `-l`.
    List(ListWhat, Format),
    /// `-Z`.
    Zero(Option<ServiceKey>),
    /// `--set tcp tcpfin udp`.
    SetTimeouts(Timeouts),
    /// `-S`.
    Save(Format),
    /// `-R`.
    Restore(RestoreOptions),
    /// `--start-daemon`.
    StartDaemon(SyncDaemon),
    /// `--stop-daemon`.
    StopDaemon(DaemonRole),
    /// `-h`.
    Help,
    /// `-v`.
    Version,
}

/// A command line that cannot be run: ipvsadm's message and exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    /// The message (one line, as ipvsadm prints it, without the newline).
    pub message: String,
    /// The exit status ipvsadm uses for it (2 or 255).
    pub status: i32,
    /// Whether ipvsadm exits on it. It does on a bad value or combination
    /// and on a missing command; an unknown option or a missing option value
    /// only makes that line fail, so `ipvsadm -R` reports it and goes on.
    pub exits: bool,
}

impl CliError {
    fn fail(message: impl Into<String>) -> Self {
        CliError {
            message: message.into(),
            status: 2,
            exits: true,
        }
    }

    fn popt(message: impl Into<String>) -> Self {
        CliError {
            message: message.into(),
            status: 255,
            exits: false,
        }
    }

    fn try_help(program: &str) -> Self {
        CliError {
            message: format!("Try `{program} -h' or '{program} --help' for more information."),
            status: 255,
            exits: true,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// A rule-file line that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// Why.
    pub error: CliError,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.error.message)
    }
}

impl std::error::Error for ParseError {}

/// One command of a rule file with its line number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// 1-based line number.
    pub line: usize,
    /// The command.
    pub command: Command,
}

/// Looks up names that are not numeric (ipvsadm uses the resolver and
/// `/etc/services`).
pub trait Resolver: Sync {
    /// The IPv4 address of a host name.
    fn host(&self, name: &str) -> Option<Ipv4Addr>;
    /// The port of a service name for a protocol.
    fn port(&self, name: &str, protocol: Protocol) -> Option<u16>;
}

/// Resolves nothing: only numeric addresses and ports are accepted.
#[allow(dead_code)] // used by `parse` (the fuzz target's entry point) and tests
#[derive(Debug, Clone, Copy, Default)]
pub struct NoResolver;

impl Resolver for NoResolver {
    fn host(&self, _: &str) -> Option<Ipv4Addr> {
        None
    }
    fn port(&self, _: &str, _: Protocol) -> Option<u16> {
        None
    }
}

/// Parses a rule file (the output of `ipvsadm -S`, or any lines of ipvsadm
/// arguments): one command per line, the word `ipvsadm` ignored wherever it
/// stands, blank lines skipped, `#` starting a comment. Numeric addresses and
/// ports only.
///
/// Stops at the first bad line.
#[allow(dead_code)] // the fuzz target's entry point; the binary resolves names
pub fn parse(text: &str) -> Result<Vec<Rule>, ParseError> {
    parse_with(text, "ipvsadm", &NoResolver)
}

/// [`parse`] with a program name for messages and a resolver.
pub fn parse_with(
    text: &str,
    program: &str,
    resolver: &dyn Resolver,
) -> Result<Vec<Rule>, ParseError> {
    parse_part(text, program, resolver, BadLines::Stop).map(|part| part.rules)
}

/// What parsing a rule file does with a line that ipvsadm does not exit on
/// (an unknown option, a missing option value: see [`CliError::exits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadLines {
    /// Stop there: the first bad line is the error.
    Stop,
    /// Keep it as a skipped line, as `ipvsadm -R` reports it and goes on;
    /// only an error ipvsadm exits on stops.
    Skip,
}

/// A part of a rule file: its rules, the lines skipped (see
/// [`BadLines::Skip`]), both in line order, and its count of newlines (the
/// lines before the next part of a split text).
#[derive(Debug, Default)]
struct Part {
    rules: Vec<Rule>,
    skipped: Vec<ParseError>,
    newlines: usize,
}

/// [`parse_with`] for a part of a text, bad lines taken as `bad` says.
fn parse_part(
    text: &str,
    program: &str,
    resolver: &dyn Resolver,
    bad: BadLines,
) -> Result<Part, ParseError> {
    // Rule lines are about 40 bytes long.
    let mut part = Part {
        rules: Vec::with_capacity(text.len() / 32 + 1),
        ..Part::default()
    };
    let mut words = Vec::with_capacity(16);
    for (i, line) in text.split('\n').enumerate() {
        part.newlines = i;
        line_words(line, &mut words);
        if words.is_empty() {
            continue;
        }
        let parsed = match fast_rule(&words) {
            Some(command) => Ok(command),
            None => parse_args(program, &words, resolver),
        };
        let command = match parsed {
            // ipvsadm refuses -R inside -R (it would read stdin again).
            Ok(Command::Restore(_)) => Err(CliError::try_help(program)),
            other => other,
        };
        match command {
            Ok(command) => part.rules.push(Rule {
                line: i + 1,
                command,
            }),
            Err(error) if bad == BadLines::Skip && !error.exits => {
                part.skipped.push(ParseError { line: i + 1, error });
            }
            Err(error) => return Err(ParseError { line: i + 1, error }),
        }
    }
    Ok(part)
}

/// [`parse_with`], the lines split among `threads` threads: the same rules,
/// in parts that are in order (not copied into one vector: a 110,000-rule
/// restore would copy 13 MB), and the same first error by line number.
#[allow(dead_code)] // the tests' entry point; the binary uses parse_each
pub fn parse_split(
    text: &str,
    program: &str,
    resolver: &dyn Resolver,
    threads: usize,
) -> Result<Vec<Vec<Rule>>, ParseError> {
    let mut parts = Vec::new();
    parse_each(
        text,
        program,
        resolver,
        threads,
        BadLines::Stop,
        |rules, _| {
            parts.push(rules);
            Ok(())
        },
    )?;
    Ok(parts)
}

/// Parts per thread in [`parse_each`]: small parts let the caller start on
/// the first one after an eighth of the parsing instead of a half.
const PARTS_PER_THREAD: usize = 4;

/// [`parse_with`] over `threads` threads, each part's rules (and lines
/// skipped, see [`BadLines`]) handed to `each` in file order as soon as it
/// and every part before it are parsed, so that the caller's work on them
/// (building the restored table) runs while later parts are parsed: 110,000
/// lines take a quarter of a second to parse under emulation, and the table
/// another sixth.
///
/// The first parse error by line number wins, whatever `each` returned;
/// without one, `each`'s first error (after which it is not called again).
pub fn parse_each(
    text: &str,
    program: &str,
    resolver: &dyn Resolver,
    threads: usize,
    bad: BadLines,
    mut each: impl FnMut(Vec<Rule>, Vec<ParseError>) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    if threads <= 1 || text.len() < 64 << 10 {
        let part = parse_part(text, program, resolver, bad)?;
        return each(part.rules, part.skipped);
    }
    let parts = split_at_lines(text, threads * PARTS_PER_THREAD);
    let next = AtomicUsize::new(0);
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let (parts, next, done_tx) = (&parts, &next, done_tx.clone());
            scope.spawn(move || {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(part) = parts.get(index) else {
                        break;
                    };
                    // A closed channel: the caller stopped at an error.
                    if done_tx
                        .send((index, parse_part(part, program, resolver, bad)))
                        .is_err()
                    {
                        break;
                    }
                }
            });
        }
        drop(done_tx);
        // Parts finish out of order; each waits here for those before it.
        let mut waiting: Vec<Option<_>> = parts.iter().map(|_| None).collect();
        let (mut in_order, mut lines_before) = (0, 0);
        let mut failed = None;
        for (index, result) in done_rx {
            if let Some(slot) = waiting.get_mut(index) {
                *slot = Some(result);
            }
            while let Some(result) = waiting.get_mut(in_order).and_then(Option::take) {
                in_order += 1;
                let mut part: Part = result.map_err(|e| ParseError {
                    line: e.line + lines_before,
                    error: e.error,
                })?;
                part.rules.iter_mut().for_each(|r| r.line += lines_before);
                part.skipped.iter_mut().for_each(|e| e.line += lines_before);
                lines_before += part.newlines;
                if failed.is_none() {
                    failed = each(part.rules, part.skipped).err();
                }
            }
        }
        failed.map_or(Ok(()), Err)
    })
}

/// `text` cut into `parts` parts of about equal size, each ending just
/// after a newline (the last at the end of the text).
fn split_at_lines(text: &str, parts: usize) -> Vec<&str> {
    let mut out = Vec::with_capacity(parts);
    let mut start = 0;
    for k in 1..=parts {
        let aim = (text.len() * k / parts).max(start);
        let end = match text.as_bytes().get(aim..) {
            Some(rest) if k < parts => rest
                .iter()
                .position(|&b| b == b'\n')
                .map_or(text.len(), |i| aim + i + 1),
            _ => text.len(),
        };
        out.push(text.get(start..end).unwrap_or(""));
        start = end;
    }
    out
}

/// The words of one rule-file line, into `out` (cleared first; kept by the
/// caller so that 100,000 lines need one vector). Words are split at
/// spaces, tabs and carriage returns, scanned as bytes: all three are ASCII,
/// so every cut falls on a character boundary.
pub fn line_words<'a>(line: &'a str, out: &mut Vec<&'a str>) {
    out.clear();
    let bytes = line.as_bytes();
    for piece in bytes.split(|b| matches!(b, b' ' | b'\t' | b'\r')) {
        // The piece's place in the line, to take it as `&str`.
        let start = piece.as_ptr() as usize - bytes.as_ptr() as usize;
        let w = line.get(start..start + piece.len()).unwrap_or("");
        if w.is_empty() || w == "ipvsadm" {
            continue;
        }
        if w.starts_with('#') {
            break;
        }
        out.push(w);
    }
}

/// The two line shapes `ipvsadm -S -n` writes for a plain IPv4 table, read
/// without the general parser: `-A -t|-u ADDR:PORT -s SCHED` and
/// `-a -t|-u ADDR:PORT -r ADDR:PORT -m|-g -w WEIGHT`, addresses as four
/// decimal parts, numbers in plain decimal without leading zeros. Anything
/// else is `None`, and [`parse_args`] reads the line.
///
/// For the lines it takes it gives exactly what [`parse_args`] gives (a
/// test and the `rules` fuzz target compare the two); it exists because
/// the general parser spends about 4,500 instructions on such a line
/// (option table, popt-style tokens, option-class checks), which made
/// parsing a 110,000-line restore take 0.6 s of the 3.4 s under emulation.
pub fn fast_rule(words: &[&str]) -> Option<Command> {
    match *words {
        ["-A", proto, service, "-s", sched] => {
            // Longer names are truncated by the general parser.
            if sched.len() > ipvsctl::model::MAX_NAME_LEN {
                return None;
            }
            let (protocol, ip, port) = fast_service(proto, service)?;
            let mut st = State::new();
            (st.opts, st.protocol, st.addr, st.port) =
                (Opt::Service.bit(), protocol, Some(IpAddr::V4(ip)), port);
            st.sched = sched.to_owned();
            Some(Command::AddService(self::service(&st, st.key())))
        }
        ["-a", proto, service, "-r", server, fwd, "-w", weight] => {
            // Built directly, not through `State` (ten of these lines per
            // service line in a restore).
            let (protocol, service_ip, service_port) = fast_service(proto, service)?;
            let (ip, port) = fast_addr_port(server)?;
            // A direct-routing server takes the service's port, as in the
            // general parser.
            let (forward, port) = match fwd {
                "-m" => (ForwardMethod::Masquerade, port),
                "-g" => (ForwardMethod::DirectRoute, service_port),
                _ => return None,
            };
            let weight = fast_decimal(weight).filter(|&w| w <= i32::MAX as u32)?;
            let server = RealServer::new(SocketAddr::new(IpAddr::V4(ip), port))
                .with_forward(forward)
                .with_weight(weight);
            let key = ServiceKey::Addr {
                protocol,
                addr: SocketAddr::new(IpAddr::V4(service_ip), service_port),
            };
            Some(Command::AddServer(key, server))
        }
        _ => None,
    }
}

/// `-t|-u ADDR:PORT` (port not 0) in [`fast_rule`].
fn fast_service(proto: &str, service: &str) -> Option<(Protocol, Ipv4Addr, u16)> {
    let protocol = match proto {
        "-t" => Protocol::Tcp,
        "-u" => Protocol::Udp,
        _ => return None,
    };
    let (ip, port) = fast_addr_port(service)?;
    if port == 0 {
        return None; // an error for a service, left to the general parser
    }
    Some((protocol, ip, port))
}

/// `a.b.c.d:port` as Rust's strict parsers read it (four decimal parts of
/// one to three digits, no leading zero, each at most 255; `inet_aton` reads
/// them the same way) and a plain decimal port, in one pass over the bytes:
/// `str::parse::<Ipv4Addr>` was a fifth of the fast path's instructions.
fn fast_addr_port(text: &str) -> Option<(Ipv4Addr, u16)> {
    let b = text.as_bytes();
    let mut at = 0;
    let mut octets = [0u8; 4];
    for (n, octet) in octets.iter_mut().enumerate() {
        let end = if n == 3 { b':' } else { b'.' };
        let start = at;
        let mut value = 0u32;
        loop {
            match *b.get(at)? {
                d @ b'0'..=b'9' if at - start < 3 => value = value * 10 + u32::from(d - b'0'),
                c if c == end && at > start => break,
                _ => return None,
            }
            at += 1;
        }
        if at - start > 1 && b[start] == b'0' {
            return None;
        }
        *octet = u8::try_from(value).ok()?;
        at += 1;
    }
    let port = u16::try_from(fast_decimal(text.get(at..)?)?).ok()?;
    Some((Ipv4Addr::from(octets), port))
}

/// Up to 10 decimal digits without a leading zero (or "0"): text that
/// `strtol` and every other reading of a number agree on.
fn fast_decimal(text: &str) -> Option<u32> {
    let b = text.as_bytes();
    if b.is_empty() || b.len() > 10 || (b.len() > 1 && b[0] == b'0') {
        return None;
    }
    b.iter().try_fold(0u32, |n, &d| {
        d.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(u32::from(d - b'0')))?
    })
}

// --- options -------------------------------------------------------------------

/// The option classes ipvsadm checks against each command (bit positions
/// and names as in its messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Opt {
    Numeric,
    Connection,
    Service,
    Scheduler,
    Persistent,
    Netmask,
    Server,
    Forward,
    Weight,
    UThreshold,
    LThreshold,
    McastIf,
    Timeout,
    Daemon,
    Stats,
    Rate,
    Thresholds,
    PersistentConn,
    NoSort,
    SyncId,
    Exact,
    Ops,
    Pe,
    SchedFlags,
    McastGroup,
    McastPort,
    McastTtl,
    SyncMaxLen,
    TunInfo,
    TunType,
    TunPort,
    TunNoCsum,
    TunCsum,
    TunRemCsum,
}

const OPT_COUNT: usize = 34;

const OPT_NAMES: [&str; OPT_COUNT] = [
    "numeric",
    "connection",
    "service-address",
    "scheduler",
    "persistent",
    "netmask",
    "real-server",
    "forwarding-method",
    "weight",
    "u-threshold",
    "l-threshold",
    "mcast-interface",
    "timeout",
    "daemon",
    "stats",
    "rate",
    "thresholds",
    "persistent-conn",
    "nosort",
    "syncid",
    "exact",
    "ops",
    "pe",
    "sched-flags",
    "mcast-group",
    "mcast-port",
    "mcast-ttl",
    "sync-maxlen",
    "tun-info",
    "tun-type",
    "tun-port",
    "tun-nocsum",
    "tun-csum",
    "tun-remcsum",
];

impl Opt {
    fn bit(self) -> u64 {
        1u64 << (self as u8)
    }
    fn name(self) -> &'static str {
        OPT_NAMES[self as usize]
    }
    fn from_index(i: usize) -> &'static str {
        OPT_NAMES.get(i).copied().unwrap_or("?")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmd {
    Add,
    Edit,
    Del,
    Flush,
    List,
    AddDest,
    DelDest,
    EditDest,
    SetTimeout,
    StartDaemon,
    StopDaemon,
    Restore,
    Save,
    Zero,
}

impl Cmd {
    fn name(self) -> &'static str {
        match self {
            Cmd::Add => "add-service",
            Cmd::Edit => "edit-service",
            Cmd::Del => "delete-service",
            Cmd::Flush => "flush",
            Cmd::List => "list",
            Cmd::AddDest => "add-server",
            Cmd::DelDest => "delete-server",
            Cmd::EditDest => "edit-server",
            Cmd::SetTimeout => "set",
            Cmd::StartDaemon => "start-daemon",
            Cmd::StopDaemon => "stop-daemon",
            Cmd::Restore => "restore",
            Cmd::Save => "save",
            Cmd::Zero => "zero",
        }
    }

    /// Which options the command requires (`+`), allows (` `), refuses
    /// (`x`) or allows one of (`1`), one character per [`Opt`] in order.
    fn rules(self) -> &'static [u8; OPT_COUNT] {
        //                 n c s s p M r f w x y m t d s r t p s s e o p b g p t s t t t n c r
        match self {
            Cmd::Add | Cmd::Edit => b"xx+   xxxxxxxxxxxxxxx   xxxxxxxxxx",
            Cmd::Del => b"xx+xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            Cmd::Flush | Cmd::SetTimeout | Cmd::Restore => b"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            Cmd::List => b" 11xxxxxxxxx11       xxxxxxx xxxxx",
            Cmd::AddDest | Cmd::EditDest => b"xx+xxx+    xxxxxxxxxxxxxxxxxx     ",
            Cmd::DelDest => b"xx+xxx+xxxxxxxxxxxxxxxxxxxxxxxxxxx",
            Cmd::StartDaemon => b"xxxxxxxxxxx xxxxxxx xxxx    xxxxxx",
            Cmd::StopDaemon => b"xxxxxxxxxxxxxxxxxxx xxxxxxxxxxxxxx",
            Cmd::Save => b" xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            Cmd::Zero => b"xx xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        }
    }
}

/// How an option word is spelled and whether it takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arg {
    None,
    Required,
    Optional,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    AddService,
    EditService,
    DeleteService,
    Clear,
    List,
    Zero,
    AddServer,
    EditServer,
    DeleteServer,
    Set,
    Help,
    Version,
    Restore,
    Save,
    StartDaemon,
    StopDaemon,
    Tcp,
    Udp,
    Sctp,
    FwMark,
    Scheduler,
    Persistent,
    Netmask,
    RealServer,
    Masq,
    Ipip,
    Gate,
    Weight,
    UThreshold,
    LThreshold,
    Numeric,
    Connection,
    McastIf,
    SyncId,
    Timeout,
    Daemon,
    Stats,
    Rate,
    Thresholds,
    PersistentConn,
    NoSort,
    Sort,
    Exact,
    Ipv6,
    Ops,
    Pe,
    SchedFlags,
    McastGroup,
    McastPort,
    McastTtl,
    SyncMaxLen,
    TunInfo,
    TunType,
    TunPort,
    TunNoCsum,
    TunCsum,
    TunRemCsum,
    // ipvsadm-lite's own -R options.
    ClearFirst,
    ReplaceTable,
    DryRun,
}

/// (long name, short letter, value, key)
const OPTIONS: &[(&str, Option<char>, Arg, Key)] = &[
    ("add-service", Some('A'), Arg::None, Key::AddService),
    ("edit-service", Some('E'), Arg::None, Key::EditService),
    ("delete-service", Some('D'), Arg::None, Key::DeleteService),
    ("clear", Some('C'), Arg::None, Key::Clear),
    ("list", Some('L'), Arg::None, Key::List),
    ("list", Some('l'), Arg::None, Key::List),
    ("zero", Some('Z'), Arg::None, Key::Zero),
    ("add-server", Some('a'), Arg::None, Key::AddServer),
    ("edit-server", Some('e'), Arg::None, Key::EditServer),
    ("delete-server", Some('d'), Arg::None, Key::DeleteServer),
    ("set", None, Arg::None, Key::Set),
    ("help", Some('h'), Arg::None, Key::Help),
    ("version", Some('v'), Arg::None, Key::Version),
    ("restore", Some('R'), Arg::None, Key::Restore),
    ("save", Some('S'), Arg::None, Key::Save),
    ("start-daemon", None, Arg::Required, Key::StartDaemon),
    ("stop-daemon", None, Arg::Required, Key::StopDaemon),
    ("tcp-service", Some('t'), Arg::Required, Key::Tcp),
    ("udp-service", Some('u'), Arg::Required, Key::Udp),
    ("sctp-service", None, Arg::Required, Key::Sctp),
    ("fwmark-service", Some('f'), Arg::Required, Key::FwMark),
    ("scheduler", Some('s'), Arg::Required, Key::Scheduler),
    ("persistent", Some('p'), Arg::Optional, Key::Persistent),
    ("netmask", Some('M'), Arg::Required, Key::Netmask),
    ("real-server", Some('r'), Arg::Required, Key::RealServer),
    ("masquerading", Some('m'), Arg::None, Key::Masq),
    ("ipip", Some('i'), Arg::None, Key::Ipip),
    ("gatewaying", Some('g'), Arg::None, Key::Gate),
    ("weight", Some('w'), Arg::Required, Key::Weight),
    ("u-threshold", Some('x'), Arg::Required, Key::UThreshold),
    ("l-threshold", Some('y'), Arg::Required, Key::LThreshold),
    ("numeric", Some('n'), Arg::None, Key::Numeric),
    ("connection", Some('c'), Arg::None, Key::Connection),
    ("mcast-interface", None, Arg::Required, Key::McastIf),
    ("syncid", None, Arg::Required, Key::SyncId),
    ("timeout", None, Arg::None, Key::Timeout),
    ("daemon", None, Arg::None, Key::Daemon),
    ("stats", None, Arg::None, Key::Stats),
    ("rate", None, Arg::None, Key::Rate),
    ("thresholds", None, Arg::None, Key::Thresholds),
    ("persistent-conn", None, Arg::None, Key::PersistentConn),
    ("nosort", None, Arg::None, Key::NoSort),
    ("sort", None, Arg::None, Key::Sort),
    ("exact", Some('X'), Arg::None, Key::Exact),
    ("ipv6", Some('6'), Arg::None, Key::Ipv6),
    ("ops", Some('o'), Arg::None, Key::Ops),
    ("pe", None, Arg::Required, Key::Pe),
    ("sched-flags", Some('b'), Arg::Required, Key::SchedFlags),
    ("mcast-group", None, Arg::Required, Key::McastGroup),
    ("mcast-port", None, Arg::Required, Key::McastPort),
    ("mcast-ttl", None, Arg::Required, Key::McastTtl),
    ("sync-maxlen", None, Arg::Required, Key::SyncMaxLen),
    ("tun-info", None, Arg::None, Key::TunInfo),
    ("tun-type", None, Arg::Required, Key::TunType),
    ("tun-port", None, Arg::Required, Key::TunPort),
    ("tun-nocsum", None, Arg::None, Key::TunNoCsum),
    ("tun-csum", None, Arg::None, Key::TunCsum),
    ("tun-remcsum", None, Arg::None, Key::TunRemCsum),
    ("clear-first", None, Arg::None, Key::ClearFirst),
    ("replace-table", None, Arg::None, Key::ReplaceTable),
    ("dry-run", None, Arg::None, Key::DryRun),
];

/// One item of the option stream: an option with its value, or a bare word.
enum Item<'a> {
    Opt(Key, Option<&'a str>, &'a str),
    Word(&'a str),
}

/// Splits words into options the way popt does: the items up to the first
/// problem, and the problem (with popt's message), if any.
fn tokenize<'a>(words: &[&'a str]) -> (Vec<Item<'a>>, Option<CliError>) {
    let mut items = Vec::with_capacity(words.len());
    let error = tokenize_into(words, &mut items).err();
    (items, error)
}

fn tokenize_into<'a>(words: &[&'a str], items: &mut Vec<Item<'a>>) -> Result<(), CliError> {
    let mut i = 0;
    let mut rest_are_words = false;
    while let Some(&w) = words.get(i) {
        i += 1;
        if rest_are_words || w == "-" || !w.starts_with('-') {
            items.push(Item::Word(w));
            continue;
        }
        if w == "--" {
            rest_are_words = true;
            continue;
        }
        if let Some(long) = w.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            let Some(&(_, _, arg, key)) = OPTIONS.iter().find(|o| o.0 == name) else {
                return Err(CliError::popt(format!("{w}: unknown option")));
            };
            let value = match (arg, inline) {
                (Arg::None, Some(_)) => {
                    return Err(CliError::popt(format!(
                        "{w}: option does not take an argument"
                    )));
                }
                (Arg::None, None) => None,
                (_, Some(v)) => Some(v),
                (Arg::Required, None) => match words.get(i) {
                    Some(v) => {
                        i += 1;
                        Some(*v)
                    }
                    None => return Err(CliError::popt(format!("{w}: missing argument"))),
                },
                (Arg::Optional, None) => match words.get(i) {
                    Some(v) if !v.starts_with('-') => {
                        i += 1;
                        Some(*v)
                    }
                    _ => None,
                },
            };
            items.push(Item::Opt(key, value, w));
            continue;
        }
        // A cluster of short options.
        let cluster = &w[1..];
        for (pos, c) in cluster.char_indices() {
            let Some(&(_, _, arg, key)) = OPTIONS.iter().find(|o| o.1 == Some(c)) else {
                return Err(CliError::popt(format!("{w}: unknown option")));
            };
            if arg == Arg::None {
                items.push(Item::Opt(key, None, w));
                continue;
            }
            let attached = &cluster[pos + c.len_utf8()..];
            let value = if !attached.is_empty() {
                Some(attached)
            } else {
                match (arg, words.get(i)) {
                    (Arg::Required, Some(v)) => {
                        i += 1;
                        Some(*v)
                    }
                    (Arg::Required, None) => {
                        return Err(CliError::popt(format!("{w}: missing argument")));
                    }
                    (_, Some(v)) if !v.starts_with('-') => {
                        i += 1;
                        Some(*v)
                    }
                    _ => None,
                }
            };
            items.push(Item::Opt(key, value, w));
            break;
        }
    }
    Ok(())
}

// --- the parse state -------------------------------------------------------------

/// Everything a command line sets, in ipvsadm's raw terms until the end.
struct State {
    cmd: Option<Cmd>,
    opts: u64,
    // Service.
    fwmark: u32,
    af: AddressFamily,
    protocol: Protocol,
    addr: Option<IpAddr>,
    port: u16,
    sched: String,
    flags: u32,
    timeout: u32,
    netmask: RawMask,
    pe: String,
    sched_flags: String,
    // Destination.
    dest: Option<(IpAddr, u16)>,
    fwd: Fwd,
    weight: u32,
    u_threshold: u32,
    l_threshold: u32,
    tun_type: u8,
    tun_port: u16,
    tun_flags: u16,
    // Daemon.
    role: DaemonRole,
    ifname: String,
    syncid: u32,
    maxlen: Option<u16>,
    group: Option<IpAddr>,
    mport: Option<u16>,
    ttl: Option<u8>,
    // Listing.
    format: Format,
    restore: RestoreOptions,
    words: Vec<String>,
}

/// A persistence netmask as ipvsadm holds it before it knows the family.
#[derive(Debug, Clone, Copy)]
enum RawMask {
    V4(Ipv4Addr),
    V6(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fwd {
    Masq,
    Tunnel,
    Route,
}

impl State {
    fn new() -> Self {
        State {
            cmd: None,
            opts: 0,
            fwmark: 0,
            af: AddressFamily::Inet,
            protocol: Protocol::Tcp,
            addr: None,
            port: 0,
            sched: String::new(),
            flags: 0,
            timeout: 0,
            netmask: RawMask::V4(Ipv4Addr::BROADCAST),
            pe: String::new(),
            sched_flags: String::new(),
            dest: None,
            fwd: Fwd::Route,
            weight: 1,
            u_threshold: 0,
            l_threshold: 0,
            tun_type: TunnelEncap::RAW_IPIP,
            tun_port: 0,
            tun_flags: 0,
            role: DaemonRole::Master,
            ifname: String::new(),
            syncid: 0,
            maxlen: None,
            group: None,
            mport: None,
            ttl: None,
            format: Format::default(),
            restore: RestoreOptions::default(),
            words: Vec::new(),
        }
    }

    fn set_option(&mut self, o: Opt) -> Result<(), CliError> {
        if self.opts & o.bit() != 0 {
            return Err(CliError::fail(format!(
                "multiple '{}' options specified",
                o.name()
            )));
        }
        self.opts |= o.bit();
        Ok(())
    }

    fn has(&self, o: Opt) -> bool {
        self.opts & o.bit() != 0
    }

    fn key(&self) -> ServiceKey {
        if self.fwmark != 0 {
            return ServiceKey::FwMark {
                mark: self.fwmark,
                family: self.af,
            };
        }
        let ip = self.addr.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        ServiceKey::Addr {
            protocol: self.protocol,
            addr: SocketAddr::new(ip, self.port),
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// Parses one command line (without the program name). `program` is used in
/// messages as ipvsadm uses its `argv[0]`.
pub fn parse_args(
    program: &str,
    args: &[&str],
    resolver: &dyn Resolver,
) -> Result<Command, CliError> {
    let (items, popt_error) = tokenize(args);
    let mut st = State::new();
    let mut opts = items.into_iter();
    // The first option must be a command (a problem reading it is also
    // answered with the pointer to --help).
    let first = loop {
        match opts.next() {
            Some(Item::Word(w)) => st.words.push(w.to_owned()),
            Some(Item::Opt(k, v, _)) => break (k, v),
            None => return Err(CliError::try_help(program)),
        }
    };
    match first {
        (Key::AddService, _) => st.cmd = Some(Cmd::Add),
        (Key::EditService, _) => st.cmd = Some(Cmd::Edit),
        (Key::DeleteService, _) => st.cmd = Some(Cmd::Del),
        (Key::AddServer, _) => st.cmd = Some(Cmd::AddDest),
        (Key::EditServer, _) => st.cmd = Some(Cmd::EditDest),
        (Key::DeleteServer, _) => st.cmd = Some(Cmd::DelDest),
        (Key::Clear, _) => st.cmd = Some(Cmd::Flush),
        (Key::List, _) => st.cmd = Some(Cmd::List),
        (Key::Zero, _) => st.cmd = Some(Cmd::Zero),
        (Key::Set, _) => st.cmd = Some(Cmd::SetTimeout),
        (Key::Restore, _) => st.cmd = Some(Cmd::Restore),
        (Key::Save, _) => st.cmd = Some(Cmd::Save),
        (Key::StartDaemon, v) | (Key::StopDaemon, v) => {
            let start = first.0 == Key::StartDaemon;
            st.cmd = Some(if start {
                Cmd::StartDaemon
            } else {
                Cmd::StopDaemon
            });
            st.role = match v.unwrap_or("") {
                "master" => DaemonRole::Master,
                "backup" => DaemonRole::Backup,
                _ if start => {
                    return Err(CliError::fail("illegal start-daemon parameter specified"));
                }
                _ => return Err(CliError::fail("illegal start_daemon specified")),
            };
        }
        (Key::Help, _) => return Ok(Command::Help),
        (Key::Version, _) => return Ok(Command::Version),
        _ => return Err(CliError::try_help(program)),
    }
    for item in opts {
        match item {
            Item::Word(w) => st.words.push(w.to_owned()),
            Item::Opt(key, value, spelled) => option(&mut st, key, value, spelled, resolver)?,
        }
    }
    if let Some(e) = popt_error {
        return Err(e);
    }
    finish(program, st)
}

fn option(
    st: &mut State,
    key: Key,
    value: Option<&str>,
    spelled: &str,
    resolver: &dyn Resolver,
) -> Result<(), CliError> {
    let v = value.unwrap_or("");
    match key {
        Key::Tcp | Key::Udp | Key::Sctp => {
            st.set_option(Opt::Service)?;
            st.protocol = match key {
                Key::Tcp => Protocol::Tcp,
                Key::Udp => Protocol::Udp,
                _ => Protocol::Sctp,
            };
            match parse_service(v, st.protocol, resolver) {
                Some(p) => {
                    st.af = AddressFamily::of(&p.addr);
                    st.addr = Some(p.addr);
                    if p.addr.is_ipv6() {
                        st.netmask = RawMask::V6(128);
                    }
                    if let Some(port) = p.port {
                        st.port = port;
                    }
                }
                None => {
                    return Err(CliError::fail(
                        "illegal virtual server address[:port] specified",
                    ));
                }
            }
        }
        Key::FwMark => {
            st.set_option(Opt::Service)?;
            st.af = AddressFamily::Inet;
            st.protocol = Protocol::Tcp;
            st.fwmark = match strtol(v) {
                Some(n) if n > 0 && n <= i64::from(u32::MAX) => n as u32,
                _ => {
                    return Err(CliError::fail(format!(
                        "invalid fwmark value `{v}' specified"
                    )));
                }
            };
        }
        Key::Scheduler => {
            st.set_option(Opt::Scheduler)?;
            st.sched = truncate(v, ipvsctl::model::MAX_NAME_LEN);
        }
        Key::Persistent => {
            st.set_option(Opt::Persistent)?;
            st.flags |= ServiceFlags::PERSISTENT.bits();
            st.timeout = match value {
                None => VirtualServer::DEFAULT_PERSISTENCE_TIMEOUT,
                Some(t) => parse_timeout(t, 1)?,
            };
        }
        Key::Netmask => {
            st.set_option(Opt::Netmask)?;
            if st.af != AddressFamily::Inet6 {
                match inet_aton(v).or_else(|| resolver.host(v)) {
                    Some(m) => st.netmask = RawMask::V4(m),
                    None => {
                        return Err(CliError::fail(
                            "illegal virtual server persistent mask specified",
                        ));
                    }
                }
            } else {
                let n = atoi(v);
                if !(1..=128).contains(&n) {
                    return Err(CliError::fail("illegal ipv6 netmask specified"));
                }
                st.netmask = RawMask::V6(n as u32);
            }
        }
        Key::RealServer => {
            st.set_option(Opt::Server)?;
            match parse_service(v, st.protocol, resolver) {
                Some(p) => st.dest = Some((p.addr, p.port.unwrap_or(st.port))),
                None => {
                    return Err(CliError::fail(
                        "illegal real server address[:port] specified",
                    ));
                }
            }
        }
        Key::Ipip | Key::Gate | Key::Masq => {
            st.set_option(Opt::Forward)?;
            st.fwd = match key {
                Key::Ipip => Fwd::Tunnel,
                Key::Gate => Fwd::Route,
                _ => Fwd::Masq,
            };
        }
        Key::Weight => {
            st.set_option(Opt::Weight)?;
            st.weight = number(v, 0, i64::from(i32::MAX))
                .ok_or_else(|| CliError::fail("illegal weight specified"))?;
        }
        Key::UThreshold => {
            st.set_option(Opt::UThreshold)?;
            st.u_threshold = number(v, 0, i64::from(i32::MAX))
                .ok_or_else(|| CliError::fail("illegal u_threshold specified"))?;
        }
        Key::LThreshold => {
            st.set_option(Opt::LThreshold)?;
            st.l_threshold = number(v, 0, i64::from(i32::MAX))
                .ok_or_else(|| CliError::fail("illegal l_threshold specified"))?;
        }
        Key::Connection => st.set_option(Opt::Connection)?,
        Key::Numeric => {
            st.set_option(Opt::Numeric)?;
            st.format.numeric = true;
        }
        Key::McastIf => {
            st.set_option(Opt::McastIf)?;
            st.ifname = truncate(v, ipvsctl::model::MAX_NAME_LEN);
        }
        Key::SyncId => {
            st.set_option(Opt::SyncId)?;
            st.syncid =
                number(v, 0, 255).ok_or_else(|| CliError::fail("illegal syncid specified"))?;
        }
        Key::Timeout => st.set_option(Opt::Timeout)?,
        Key::Daemon => st.set_option(Opt::Daemon)?,
        Key::Stats => {
            st.set_option(Opt::Stats)?;
            st.format.stats = true;
        }
        Key::Rate => {
            st.set_option(Opt::Rate)?;
            st.format.rate = true;
        }
        Key::Thresholds => {
            st.set_option(Opt::Thresholds)?;
            st.format.thresholds = true;
        }
        Key::PersistentConn => {
            st.set_option(Opt::PersistentConn)?;
            st.format.persistent_conn = true;
        }
        Key::NoSort => {
            st.set_option(Opt::NoSort)?;
            st.format.nosort = true;
        }
        Key::Sort => {}
        Key::Exact => {
            st.set_option(Opt::Exact)?;
            st.format.exact = true;
        }
        Key::Ipv6 => {
            if st.fwmark != 0 {
                st.af = AddressFamily::Inet6;
                st.netmask = RawMask::V6(128);
            } else {
                return Err(CliError::fail("-6 used before -f\n"));
            }
        }
        Key::Ops => {
            st.set_option(Opt::Ops)?;
            st.flags |= ServiceFlags::ONE_PACKET.bits();
        }
        Key::Pe => {
            st.set_option(Opt::Pe)?;
            st.pe = truncate(v, ipvsctl::model::MAX_NAME_LEN);
        }
        Key::SchedFlags => {
            st.set_option(Opt::SchedFlags)?;
            st.sched_flags = truncate(v, 127);
        }
        Key::McastGroup => {
            st.set_option(Opt::McastGroup)?;
            if v.contains(':') {
                match v.parse::<Ipv6Addr>() {
                    Ok(a) if a.is_multicast() => st.group = Some(IpAddr::V6(a)),
                    _ => {
                        return Err(CliError::fail(format!("invalid IPv6 mcast-group `{v}'")));
                    }
                }
            } else {
                match v.parse::<Ipv4Addr>() {
                    Ok(a) if a.is_multicast() => st.group = Some(IpAddr::V4(a)),
                    _ => {
                        return Err(CliError::fail(format!("invalid IPv4 mcast-group `{v}'")));
                    }
                }
            }
        }
        Key::McastPort => {
            st.set_option(Opt::McastPort)?;
            st.mport = Some(
                number(v, 1, 65535)
                    .and_then(|n| u16::try_from(n).ok())
                    .ok_or_else(|| CliError::fail("illegal mcast-port specified"))?,
            );
        }
        Key::McastTtl => {
            st.set_option(Opt::McastTtl)?;
            st.ttl = Some(
                number(v, 1, 255)
                    .and_then(|n| u8::try_from(n).ok())
                    .ok_or_else(|| CliError::fail("illegal mcast-ttl specified"))?,
            );
        }
        Key::SyncMaxLen => {
            st.set_option(Opt::SyncMaxLen)?;
            st.maxlen = Some(
                number(v, 1, 65535 - 20 - 8)
                    .and_then(|n| u16::try_from(n).ok())
                    .ok_or_else(|| CliError::fail("illegal sync-maxlen specified"))?,
            );
        }
        Key::TunInfo => {
            st.set_option(Opt::TunInfo)?;
            st.format.tun_info = true;
        }
        Key::TunType => {
            st.set_option(Opt::TunType)?;
            st.tun_type = match v {
                "ipip" => TunnelEncap::RAW_IPIP,
                "gue" => TunnelEncap::RAW_GUE,
                "gre" => TunnelEncap::RAW_GRE,
                _ => return Err(CliError::fail("illegal tunnel type specified")),
            };
        }
        Key::TunPort => {
            st.set_option(Opt::TunPort)?;
            st.tun_port = number(v, 1, 65535)
                .and_then(|n| u16::try_from(n).ok())
                .ok_or_else(|| CliError::fail("illegal tunnel port specified"))?;
        }
        Key::TunNoCsum => st.set_option(Opt::TunNoCsum)?,
        Key::TunCsum => {
            st.set_option(Opt::TunCsum)?;
            st.tun_flags |= TunnelFlags::CSUM.bits();
        }
        Key::TunRemCsum => {
            st.set_option(Opt::TunRemCsum)?;
            st.tun_flags |= TunnelFlags::REMCSUM.bits();
        }
        Key::ClearFirst if st.cmd == Some(Cmd::Restore) => st.restore.clear_first = true,
        Key::ReplaceTable if st.cmd == Some(Cmd::Restore) => st.restore.replace_table = true,
        Key::DryRun if st.cmd == Some(Cmd::Restore) => st.restore.dry_run = true,
        // A second command, or -R's own options elsewhere.
        _ => return Err(CliError::fail(format!("invalid option `{spelled}'"))),
    }
    Ok(())
}

/// The checks ipvsadm makes once every option is read, then the command.
fn finish(program: &str, mut st: State) -> Result<Command, CliError> {
    let Some(cmd) = st.cmd else {
        return Err(CliError::try_help(program));
    };
    let mut words = std::mem::take(&mut st.words).into_iter();
    let mut timeouts = Timeouts::default();
    if cmd == Cmd::SetTimeout {
        let (Some(a), Some(b), Some(c)) = (words.next(), words.next(), words.next()) else {
            return Err(CliError::fail("--set option requires 3 timeout values"));
        };
        timeouts = Timeouts::new(
            parse_timeout(&a, 0)?,
            parse_timeout(&b, 0)?,
            parse_timeout(&c, 0)?,
        );
    }
    if let Some(extra) = words.next() {
        return Err(CliError::fail(format!("unexpected argument {extra}")));
    }
    if !st.sched_flags.is_empty() {
        st.flags &= !(ServiceFlags::SCHED1 | ServiceFlags::SCHED2 | ServiceFlags::SCHED3).bits();
        st.flags |= sched_flags(&st.sched, &st.sched_flags)?;
    }
    check_options(cmd, st.opts)?;

    if matches!(cmd, Cmd::Add | Cmd::Edit) {
        if st.fwmark == 0 && st.port == 0 && st.flags & ServiceFlags::PERSISTENT.bits() == 0 {
            return Err(CliError::fail(
                "Zero port specified for non-persistent service",
            ));
        }
        if st.flags & ServiceFlags::ONE_PACKET.bits() != 0
            && st.fwmark == 0
            && st.protocol != Protocol::Udp
        {
            return Err(CliError::fail(
                "One-Packet Scheduling is only for UDP virtual services",
            ));
        }
        if st.sched.is_empty() {
            st.sched = Scheduler::default().name().to_owned();
        }
    }
    if matches!(cmd, Cmd::AddDest | Cmd::EditDest) {
        if let Some((ip, port)) = st.dest.as_mut() {
            if st.fwmark == 0 && matches!(st.fwd, Fwd::Tunnel | Fwd::Route) {
                *port = st.port;
            }
            if AddressFamily::of(ip) != st.af && st.fwd != Fwd::Tunnel {
                return Err(CliError::fail(
                    "Different address family is allowed only for tunneling servers",
                ));
            }
        }
        let tunnel_opts = Opt::TunType.bit()
            | Opt::TunPort.bit()
            | Opt::TunNoCsum.bit()
            | Opt::TunCsum.bit()
            | Opt::TunRemCsum.bit();
        if st.opts & tunnel_opts != 0 && st.fwd != Fwd::Tunnel {
            return Err(CliError::fail(
                "Tunnel options conflict with forward method",
            ));
        }
        check_tunnel_options(st.tun_type, st.opts)?;
    }

    let key = st.key();
    Ok(match cmd {
        Cmd::List => {
            let conflicting =
                (st.opts & (Opt::Connection.bit() | Opt::Timeout.bit() | Opt::Daemon.bit()) != 0
                    && st.opts & (Opt::Stats.bit() | Opt::Rate.bit() | Opt::Thresholds.bit()) != 0)
                    || (st.opts & (Opt::Timeout.bit() | Opt::Daemon.bit()) != 0
                        && st.has(Opt::PersistentConn));
            if conflicting {
                return Err(CliError::fail("options conflicts in the list command"));
            }
            let what = if st.has(Opt::Connection) {
                ListWhat::Connections
            } else if st.has(Opt::Service) {
                ListWhat::Service(key)
            } else if st.has(Opt::Timeout) {
                ListWhat::Timeout
            } else if st.has(Opt::Daemon) {
                ListWhat::Daemon
            } else {
                ListWhat::All
            };
            Command::List(what, st.format)
        }
        Cmd::Restore => {
            if st.restore.clear_first && st.restore.replace_table {
                return Err(CliError::fail(
                    "--clear-first and --replace-table conflict: --replace-table never deletes what stays",
                ));
            }
            Command::Restore(st.restore)
        }
        Cmd::Save => {
            let mut f = st.format;
            f.rule = true;
            Command::Save(f)
        }
        Cmd::Flush => Command::Clear,
        Cmd::Add => Command::AddService(service(&st, key)),
        Cmd::Edit => Command::EditService(service(&st, key)),
        Cmd::Del => Command::DeleteService(key),
        Cmd::Zero => Command::Zero(st.has(Opt::Service).then_some(key)),
        Cmd::AddDest => Command::AddServer(key, server(&st)),
        Cmd::EditDest => Command::EditServer(key, server(&st)),
        Cmd::DelDest => Command::DeleteServer(key, server(&st).addr),
        Cmd::SetTimeout => Command::SetTimeouts(timeouts),
        Cmd::StartDaemon => {
            let interface = if st.ifname.is_empty() {
                "eth0"
            } else {
                &st.ifname
            };
            let mut daemon = SyncDaemon::new(st.role, interface).with_sync_id(st.syncid);
            daemon.max_len = st.maxlen;
            daemon.group = st.group;
            daemon.port = st.mport;
            daemon.ttl = st.ttl;
            Command::StartDaemon(daemon)
        }
        Cmd::StopDaemon => Command::StopDaemon(st.role),
    })
}

fn service(st: &State, key: ServiceKey) -> VirtualServer {
    let netmask = match (key.family(), st.netmask) {
        (AddressFamily::Inet, RawMask::V4(m)) => Netmask::V4(m),
        (AddressFamily::Inet6, RawMask::V6(p)) => Netmask::V6(u8::try_from(p).unwrap_or(u8::MAX)),
        (family, _) => Netmask::full(family),
    };
    let vs = VirtualServer::new(key)
        .with_scheduler(Scheduler::from_name(&st.sched))
        .with_flags(ServiceFlags::from_bits_retain(st.flags))
        .with_timeout(st.timeout)
        .with_netmask(netmask);
    if st.pe.is_empty() {
        vs
    } else {
        vs.with_persistence_engine(PersistenceEngine(st.pe.clone()))
    }
}

fn server(st: &State) -> RealServer {
    let (ip, port) = st
        .dest
        .unwrap_or((IpAddr::V4(Ipv4Addr::UNSPECIFIED), st.port));
    let forward = match st.fwd {
        Fwd::Masq => ForwardMethod::Masquerade,
        Fwd::Route => ForwardMethod::DirectRoute,
        Fwd::Tunnel => ForwardMethod::Tunnel(
            Tunnel::new(match st.tun_type {
                TunnelEncap::RAW_GUE => TunnelEncap::Gue { port: st.tun_port },
                TunnelEncap::RAW_GRE => TunnelEncap::Gre,
                _ => TunnelEncap::Ipip,
            })
            .with_flags(TunnelFlags::from_bits_retain(st.tun_flags)),
        ),
    };
    RealServer::new(SocketAddr::new(ip, port))
        .with_weight(st.weight)
        .with_forward(forward)
        .with_thresholds(st.u_threshold, st.l_threshold)
}

fn check_options(cmd: Cmd, opts: u64) -> Result<(), CliError> {
    let mut exclusive: Option<usize> = None;
    for (j, rule) in cmd.rules().iter().enumerate() {
        let set = opts & (1u64 << j) != 0;
        match (*rule, set) {
            (b'+', false) => {
                return Err(CliError::fail(format!(
                    "You need to supply the '{}' option for the '{}' command",
                    Opt::from_index(j),
                    cmd.name()
                )));
            }
            (b'x', true) => {
                return Err(CliError::fail(format!(
                    "Illegal '{}' option with the '{}' command",
                    Opt::from_index(j),
                    cmd.name()
                )));
            }
            (b'1', true) => match exclusive {
                None => exclusive = Some(j),
                Some(last) => {
                    return Err(CliError::fail(format!(
                        "The option '{}' conflicts with the '{}' option in the '{}' command",
                        Opt::from_index(j),
                        Opt::from_index(last),
                        cmd.name()
                    )));
                }
            },
            _ => {}
        }
    }
    Ok(())
}

fn check_tunnel_options(tun_type: u8, opts: u64) -> Result<(), CliError> {
    let (name, rules): (&str, &[u8; 4]) = match tun_type {
        TunnelEncap::RAW_GUE => ("gue", b"+111"),
        TunnelEncap::RAW_GRE => ("gre", b"x11x"),
        _ => ("ipip", b"xxxx"),
    };
    let checked = [Opt::TunPort, Opt::TunNoCsum, Opt::TunCsum, Opt::TunRemCsum];
    let mut exclusive: Option<Opt> = None;
    for (o, rule) in checked.iter().zip(rules) {
        match (*rule, opts & o.bit() != 0) {
            (b'+', false) => {
                return Err(CliError::fail(format!(
                    "You need to supply the '{}' option for the '{name}' tunnel type",
                    o.name()
                )));
            }
            (b'x', true) => {
                return Err(CliError::fail(format!(
                    "Illegal '{}' option with the '{name}' tunnel type",
                    o.name()
                )));
            }
            (b'1', true) => match exclusive {
                None => exclusive = Some(*o),
                Some(last) => {
                    return Err(CliError::fail(format!(
                        "The option '{}' conflicts with the '{}' option in the '{name}' tunnel type",
                        o.name(),
                        last.name()
                    )));
                }
            },
            _ => {}
        }
    }
    Ok(())
}

fn sched_flags(sched: &str, arg: &str) -> Result<u32, CliError> {
    let default = Scheduler::default();
    let sched = if sched.is_empty() {
        default.name()
    } else {
        sched
    };
    let mut flags = 0;
    for flag in arg.split(',').filter(|f| !f.is_empty()) {
        let (bit, only_for) = match flag {
            "flag-1" => (ServiceFlags::SCHED1, None),
            "flag-2" => (ServiceFlags::SCHED2, None),
            "flag-3" => (ServiceFlags::SCHED3, None),
            "sh-fallback" => (ServiceFlags::SH_FALLBACK, Some("sh")),
            "sh-port" => (ServiceFlags::SH_PORT, Some("sh")),
            "mh-fallback" => (ServiceFlags::MH_FALLBACK, Some("mh")),
            "mh-port" => (ServiceFlags::MH_PORT, Some("mh")),
            _ => {
                return Err(CliError::fail(format!("invalid scheduler flag `{flag}'")));
            }
        };
        if only_for.is_some_and(|s| s != sched) {
            return Err(CliError::fail(format!(
                "incompatible scheduler flag `{flag}'"
            )));
        }
        flags |= bit.bits();
    }
    Ok(flags)
}

fn parse_timeout(s: &str, min: i64) -> Result<u32, CliError> {
    number(s, min, i64::from(MAX_TIMEOUT))
        .ok_or_else(|| CliError::fail(format!("invalid timeout value `{s}' specified")))
}

// --- numbers and addresses, the C library's way ----------------------------------------

/// `strtol(s, &end, 10)` that must consume the whole string: leading
/// whitespace and a sign are allowed; `None` if nothing is parsed, anything
/// follows, or it overflows.
pub fn strtol(s: &str) -> Option<i64> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut n: i64 = 0;
    for b in digits.bytes() {
        n = n.checked_mul(10)?.checked_add(i64::from(b - b'0'))?;
    }
    Some(if neg { -n } else { n })
}

/// ipvsadm's `string_to_number`: a whole decimal number within `min..=max`.
fn number(s: &str, min: i64, max: i64) -> Option<u32> {
    strtol(s)
        .filter(|n| (min..=max).contains(n))
        .and_then(|n| u32::try_from(n).ok())
}

/// C's `atoi`: leading whitespace, a sign, digits, anything after ignored.
fn atoi(s: &str) -> i64 {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, rest) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let mut n: i64 = 0;
    for b in rest.bytes().take_while(|b| b.is_ascii_digit()) {
        n = n.saturating_mul(10).saturating_add(i64::from(b - b'0'));
    }
    if neg { -n } else { n }
}

/// `inet_aton`: one to four parts separated by dots, each decimal, octal
/// (leading 0) or hexadecimal (0x); the last part fills the remaining bytes.
/// Trailing whitespace and anything after it is ignored, as glibc does.
pub fn inet_aton(s: &str) -> Option<Ipv4Addr> {
    // The common case first: four decimal parts without leading zeros are
    // exactly what Rust's parser takes, and mean the same to inet_aton.
    if let Ok(a) = s.parse::<Ipv4Addr>() {
        return Some(a);
    }
    let s = match s.find([' ', '\t', '\n', '\r', '\x0b', '\x0c']) {
        Some(i) => &s[..i],
        None => s,
    };
    let mut parts: Vec<u64> = Vec::with_capacity(4);
    for part in s.split('.') {
        if parts.len() == 4 {
            return None;
        }
        parts.push(c_number(part)?);
    }
    let (last, head) = parts.split_last()?;
    let mut value: u64 = 0;
    for (i, p) in head.iter().enumerate() {
        if *p > 0xff {
            return None;
        }
        value |= p << (24 - 8 * i);
    }
    let room = 32 - 8 * head.len() as u32;
    if *last >= (1u64 << room) {
        return None;
    }
    Some(Ipv4Addr::from((value | last) as u32))
}

/// One part of an `inet_aton` address: 0x hexadecimal, leading-0 octal or
/// decimal; at least one digit.
fn c_number(part: &str) -> Option<u64> {
    let (radix, digits) =
        if let Some(h) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (16, h)
        } else if part.len() > 1 && part.starts_with('0') {
            (8, &part[1..])
        } else {
            (10, part)
        };
    if part.is_empty() || (radix != 16 && digits.is_empty()) {
        return None;
    }
    let mut n: u64 = 0;
    for c in digits.chars() {
        let d = u64::from(c.to_digit(radix)?);
        n = n.checked_mul(u64::from(radix))?.checked_add(d)?;
        if n > u64::from(u32::MAX) {
            return None;
        }
    }
    Some(n)
}

/// An address with an optional port, as `-t`, `-u`, `--sctp-service` and `-r`
/// take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrPort {
    /// The address.
    pub addr: IpAddr,
    /// The port, if one was given.
    pub port: Option<u16>,
}

/// ipvsadm's `host[:port]` / `[v6]:port` / bare IPv6 parsing. `None` for
/// anything ipvsadm calls "illegal ... address[:port]".
pub fn parse_service(s: &str, protocol: Protocol, resolver: &dyn Resolver) -> Option<AddrPort> {
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut host = s;
    let mut port: Option<&str> = None;
    if let Some(inner) = s.strip_prefix('[') {
        let (h, after) = inner.split_once(']')?;
        port = Some(after.strip_prefix(':')?);
        host = h;
    }
    // IPv6 text has at least two colons ("::"): skip the attempt otherwise.
    let v6 = if host.bytes().filter(|&b| b == b':').count() >= 2 {
        host.parse::<Ipv6Addr>().ok()
    } else {
        None
    };
    let addr = if let Some(v6) = v6 {
        IpAddr::V6(v6)
    } else {
        // Not IPv6: the port is whatever follows the last colon of the host
        // part (a bracketed IPv4 address thus loses its port, as in ipvsadm).
        match host.rsplit_once(':') {
            Some((h, p)) => {
                host = h;
                port = Some(p);
            }
            None => port = None,
        }
        IpAddr::V4(inet_aton(host).or_else(|| resolver.host(host))?)
    };
    let port = match port {
        None => None,
        Some(p) => Some(
            number(p, 0, 65535)
                .and_then(|n| u16::try_from(n).ok())
                .or_else(|| resolver.port(p, protocol))?,
        ),
    };
    Some(AddrPort { addr, port })
}
