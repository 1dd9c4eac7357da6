//! A [`LedgerStore`] in a file: [`FileLedger`] (whose documentation
//! describes the format).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::ledger::{Ledger, LedgerStore, Ownership};
use crate::codec::attr::{begin_nest, end_nest};
use crate::codec::consts::{FAMILY_VERSION, cmd_attr};
use crate::codec::{IpvsCmd, reply, request};
use crate::model::{AddressFamily, Protocol, ServiceKey, VirtualServer};

/// The first word of the file.
const MAGIC: &str = "ipvsctl-ledger";
/// The format version this module writes and reads.
const VERSION: &str = "1";
/// The mode of the file (and of its temp file): read and write for the
/// owner only.
const MODE: u32 = 0o600;
/// What every message about a file that cannot be read suggests.
const START_OVER: &str = "FileLedger::start_over moves it aside and starts with an empty ledger";

/// Why a [`FileLedger`] could not read, create or write its file. Every
/// message names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerFileError {
    /// There is no file: a first start ([`FileLedger::create`]), or the
    /// file was lost, and with it the record of what the agent owns.
    #[error(
        "ledger file {} does not exist; FileLedger::create makes a new one on a first start",
        path.display()
    )]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The file is there and has no byte in it.
    #[error("ledger file {} is empty; {START_OVER}", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The file is not a complete ledger: a line that is not an entry, a
    /// bad key or settings, a key twice, an `end` count that does not
    /// match, or no `end` line (a file cut short).
    #[error("ledger file {}, line {line}: {reason}; {START_OVER}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The line (counted from 1).
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The file is a ledger of a format version this library does not read
    /// (written by another version of it).
    #[error(
        "ledger file {} has format version {found:?}, and this library reads version {VERSION}; {START_OVER}",
        path.display()
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// The version its header names.
        found: String,
    },
    /// [`FileLedger::create`] found a file there already.
    #[error("ledger file {} already exists; FileLedger::open reads it", path.display())]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// An entry that the file could not give back equal: a key with an IPv6
    /// scope id or flow label, or settings the codec does not read back
    /// the same (see [`VirtualServer::validate`]). The kernel reports no
    /// such value, and a syncer records no other. Nothing was written.
    #[error("ledger file {}: cannot record {key}: {reason}", path.display())]
    Unrecordable {
        /// The file.
        path: PathBuf,
        /// The entry's key.
        key: ServiceKey,
        /// Why.
        reason: String,
    },
    /// Reading or writing failed. `path` is the file, its temp file or its
    /// directory, whichever the failing call was about.
    #[error("ledger file {}: {source}", path.display())]
    Io {
        /// The path of the failing call.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}

impl LedgerFileError {
    /// The file (or, for [`LedgerFileError::Io`], the path) the error is
    /// about.
    pub fn path(&self) -> &Path {
        match self {
            Self::Missing { path }
            | Self::Empty { path }
            | Self::Corrupt { path, .. }
            | Self::Version { path, .. }
            | Self::Exists { path }
            | Self::Unrecordable { path, .. }
            | Self::Io { path, .. } => path,
        }
    }

    /// As an [`io::Error`] for [`LedgerStore::save`]: the kind of the
    /// underlying error ([`io::ErrorKind::InvalidInput`] for an
    /// unrecordable entry), this error inside.
    fn into_io(self) -> io::Error {
        let kind = match &self {
            Self::Io { source, .. } => source.kind(),
            Self::Unrecordable { .. } => io::ErrorKind::InvalidInput,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, self)
    }
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> LedgerFileError + '_ {
    move |source| LedgerFileError::Io {
        path: path.to_owned(),
        source,
    }
}

/// A [`Ledger`] kept in a file, for an agent that must know after a
/// restart, a crash or a power loss which IPVS services it made.
///
/// [`LedgerStore::save`] writes the whole ledger to `<name>.tmp` in the
/// same directory (created new with mode 0600, never through an existing
/// file or link), syncs it to disk, renames it over the file and syncs the
/// directory, so the file always holds either the old ledger or the new
/// one, and the new one survives a power loss once `save` returned `Ok`.
///
/// A file that is missing, empty, cut short, corrupt or of another version
/// is never taken for "owns nothing": [`FileLedger::open`] fails with a
/// [`LedgerFileError`] naming the file (and the line), and the agent should
/// stop there. Starting without the record is an operator's decision:
///
/// * on a node's first start, [`FileLedger::create`] writes an empty
///   ledger (and refuses if a file is there);
/// * after an unreadable file, [`FileLedger::start_over`] moves it aside
///   to `<path>.bad-<unix seconds>` and writes an empty ledger. The
///   services the lost ledger recorded are then not the agent's: a sync in
///   [`Scope::Owned`](super::Scope::Owned) reports them as conflicts until
///   they are adopted ([`Syncer::adopt`](super::Syncer::adopt)) or
///   deleted.
///
/// One file serves one ledger: two agents (or two `FileLedger`s) writing
/// the same path replace each other's records.
///
/// # Format
///
/// Text, one entry per line, sorted by key, between a versioned header and
/// a trailer that counts the entries:
///
/// ```text
/// ipvsctl-ledger 1
/// owned tcp 10.96.0.1:80
/// owned fwmark 7 inet6
/// claiming udp [2001:db8::1]:53 <hex>
/// releasing sctp 10.0.0.1:3868 <hex>
/// end 4
/// ```
///
/// A key is a protocol (`tcp`, `udp`, `sctp`, or `proto-<number>` for any
/// other) and a socket address (IPv6 in brackets), or `fwmark <mark>` and
/// the family (`inet` or `inet6`). A claim or a release carries the
/// service's complete settings as lowercase hex: the generic-netlink body
/// of the `NEW_SERVICE` request that would add it (header and `SERVICE`
/// nest, in the host's byte order, as the codec writes it), which the
/// codec's service decoder reads back to an equal
/// [`VirtualServer`](crate::model::VirtualServer). The key inside must be
/// the key of the line. The `end` line says how many entries there are, so
/// a file cut short never reads as a smaller ledger. Every number is
/// decimal without a sign or leading zeros, every address in the form
/// Rust's `SocketAddr` prints, fields are separated by one space, and every
/// line ends with a newline: anything else is refused as
/// [`LedgerFileError::Corrupt`].
///
/// # Example
///
/// ```
/// use ipvsctl::model::{ServiceKey, VirtualServer};
/// use ipvsctl::sync::{FileLedger, Ledger, LedgerFileError, LedgerStore, Ownership};
///
/// let dir = std::env::temp_dir().join(format!("ipvsctl-ledger-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let path = dir.join("ledger");
/// # let _ = std::fs::remove_file(&path);
///
/// // On every start: the ledger the previous run left.
/// let (mut store, mut ledger) = match FileLedger::open(&path) {
///     Ok(found) => found,
///     // A first start. (A real agent knows that it is one, from its own
///     // configuration or a state directory it just made: a lost file is
///     // missing too.)
///     Err(LedgerFileError::Missing { .. }) => (FileLedger::create(&path)?, Ledger::new()),
///     Err(e) => return Err(e.into()),
/// };
/// let vs = VirtualServer::new(ServiceKey::udp("10.96.0.10:53".parse()?));
/// ledger.insert_owned(ServiceKey::tcp("10.96.0.1:80".parse()?));
/// ledger.insert_claiming(vs.clone());
/// store.save(&ledger, &[])?;
///
/// let (_, again) = FileLedger::open(store.path())?;
/// assert_eq!(again, ledger);
/// assert_eq!(again.get(&vs.key), Some(Ownership::Claiming(&vs)));
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct FileLedger {
    /// The file.
    path: PathBuf,
    /// `<name>.tmp` next to it.
    tmp: PathBuf,
    /// Its directory (`.` for a bare file name).
    dir: PathBuf,
    /// The text of the last save, its room kept.
    buf: Vec<u8>,
}

impl FileLedger {
    /// Reads the ledger in `path`, and the store that keeps writing it
    /// there. The ledger's entries all count as changed, so a syncer saves
    /// it once.
    ///
    /// # Errors
    ///
    /// [`LedgerFileError::Missing`] when there is no file (never an empty
    /// ledger), [`LedgerFileError::Empty`], [`LedgerFileError::Corrupt`]
    /// with the first bad line, [`LedgerFileError::Version`] for another
    /// format version, [`LedgerFileError::Io`] when it cannot be read or is
    /// not a regular file.
    pub fn open(path: impl AsRef<Path>) -> Result<(FileLedger, Ledger), LedgerFileError> {
        let store = FileLedger::at(path.as_ref())?;
        // Not a FIFO or a device, which could block or never end.
        match fs::metadata(&store.path) {
            Ok(meta) if !meta.is_file() => {
                return Err(LedgerFileError::Io {
                    path: store.path,
                    source: io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
                });
            }
            _ => {}
        }
        let bytes = match fs::read(&store.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(LedgerFileError::Missing { path: store.path });
            }
            Err(e) => return Err(io_error(&store.path)(e)),
        };
        let ledger = parse(&bytes).map_err(|p| p.at(&store.path))?;
        Ok((store, ledger))
    }

    /// Writes an empty ledger to `path`, for an agent's first start on a
    /// node, durably (file and directory synced), and returns the store.
    ///
    /// # Errors
    ///
    /// [`LedgerFileError::Exists`] if there is a file (or anything else)
    /// at `path`, whatever it holds: a ledger is never replaced by an
    /// empty one unless asked with [`FileLedger::start_over`].
    /// [`LedgerFileError::Io`] if it cannot be written.
    pub fn create(path: impl AsRef<Path>) -> Result<FileLedger, LedgerFileError> {
        let mut store = FileLedger::at(path.as_ref())?;
        store.render_empty();
        store.write_temp()?;
        // A link, unlike a rename, never replaces what is there.
        if let Err(e) = fs::hard_link(&store.tmp, &store.path) {
            let _ = fs::remove_file(&store.tmp);
            return Err(if e.kind() == io::ErrorKind::AlreadyExists {
                LedgerFileError::Exists { path: store.path }
            } else {
                io_error(&store.path)(e)
            });
        }
        fs::remove_file(&store.tmp).map_err(io_error(&store.tmp))?;
        store.sync_dir()?;
        Ok(store)
    }

    /// Starts over with an empty ledger: moves the file at `path`, if any,
    /// aside to `<path>.bad-<unix seconds>` (`<path>.bad-<unix
    /// seconds>-<n>` if that name is taken), where it stays for
    /// inspection, and writes an empty ledger durably. For an operator's
    /// decision after [`FileLedger::open`] failed with
    /// [`LedgerFileError::Empty`], [`LedgerFileError::Corrupt`] or
    /// [`LedgerFileError::Version`]: whatever the old file recorded is no
    /// longer owned.
    ///
    /// # Errors
    ///
    /// [`LedgerFileError::Io`] if the file cannot be moved aside or the new
    /// one written; the file at `path` is then either the old one or the
    /// empty ledger.
    pub fn start_over(path: impl AsRef<Path>) -> Result<FileLedger, LedgerFileError> {
        let mut store = FileLedger::at(path.as_ref())?;
        match fs::symlink_metadata(&store.path) {
            Ok(_) => store.keep_aside()?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(&store.path)(e)),
        }
        store.render_empty();
        store.replace()?;
        Ok(store)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The store for `path`, nothing read or written.
    fn at(path: &Path) -> Result<FileLedger, LedgerFileError> {
        let Some(name) = path.file_name() else {
            return Err(LedgerFileError::Io {
                path: path.to_owned(),
                source: io::Error::new(io::ErrorKind::InvalidInput, "not a file name"),
            });
        };
        let mut tmp_name = name.to_owned();
        tmp_name.push(".tmp");
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
            _ => PathBuf::from("."),
        };
        Ok(FileLedger {
            path: path.to_owned(),
            tmp: path.with_file_name(tmp_name),
            dir,
            buf: Vec::new(),
        })
    }

    /// Links the file to a `.bad-<seconds>` name no file has; the rename of
    /// the empty ledger over it then completes the move.
    fn keep_aside(&self) -> Result<(), LedgerFileError> {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut base = self.path.clone().into_os_string();
        base.push(format!(".bad-{secs}"));
        for n in 0..1000u32 {
            let mut bad = base.clone();
            if n > 0 {
                bad.push(format!("-{n}"));
            }
            match fs::hard_link(&self.path, &bad) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io_error(Path::new(&bad))(e)),
            }
        }
        Err(LedgerFileError::Io {
            path: base.into(),
            source: io::Error::new(
                io::ErrorKind::AlreadyExists,
                "1000 files of this name and second exist",
            ),
        })
    }

    /// The text of an empty ledger in `buf`.
    fn render_empty(&mut self) {
        self.buf.clear();
        self.buf
            .extend_from_slice(format!("{MAGIC} {VERSION}\nend 0\n").as_bytes());
    }

    /// Writes `buf` to the temp file, created new with [`MODE`], and syncs
    /// it. The temp file is gone again if this fails.
    fn write_temp(&self) -> Result<(), LedgerFileError> {
        // A temp file left by a crash (or a link of that name) goes first:
        // the new one is created, never opened through a link.
        let _ = fs::remove_file(&self.tmp);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(MODE)
            .open(&self.tmp)
            .map_err(io_error(&self.tmp))?;
        if let Err(e) = fill(&mut file, &self.buf) {
            drop(file);
            let _ = fs::remove_file(&self.tmp);
            return Err(io_error(&self.tmp)(e));
        }
        Ok(())
    }

    /// Replaces the file with `buf` atomically and durably.
    fn replace(&self) -> Result<(), LedgerFileError> {
        self.write_temp()?;
        if let Err(e) = fs::rename(&self.tmp, &self.path) {
            let _ = fs::remove_file(&self.tmp);
            return Err(io_error(&self.path)(e));
        }
        self.sync_dir()
    }

    /// Syncs the directory, so that a rename or link in it survives a power
    /// loss.
    fn sync_dir(&self) -> Result<(), LedgerFileError> {
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io_error(&self.dir))
    }
}

/// Writes `buf` to the new temp file and syncs it.
fn fill(file: &mut File, buf: &[u8]) -> io::Result<()> {
    // The umask may have taken bits away.
    file.set_permissions(fs::Permissions::from_mode(MODE))?;
    file.write_all(buf)?;
    file.sync_all()
}

impl LedgerStore for FileLedger {
    /// Writes the whole ledger (`changed` is not needed) by atomic replace:
    /// temp file, sync, rename over the file, sync of the directory.
    ///
    /// On `Err` nothing was replaced and the file holds the previous
    /// ledger, except when syncing the directory failed after the rename:
    /// the file then holds the new ledger, which may not survive a power
    /// loss. The error's [`get_ref`](io::Error::get_ref) is a
    /// [`LedgerFileError`] naming the path ([`LedgerFileError::Io`], or
    /// [`LedgerFileError::Unrecordable`] with kind
    /// [`io::ErrorKind::InvalidInput`] for an entry that could not be read
    /// back equal).
    fn save(&mut self, ledger: &Ledger, _changed: &[ServiceKey]) -> io::Result<()> {
        if let Err((key, reason)) = render(ledger, &mut self.buf) {
            return Err(LedgerFileError::Unrecordable {
                path: self.path.clone(),
                key,
                reason,
            }
            .into_io());
        }
        self.replace().map_err(LedgerFileError::into_io)
    }
}

/// Appends the generic-netlink body of a `NEW_SERVICE` request for `vs`
/// (header and `SERVICE` nest, exactly as the codec's request writers make
/// it), validating nothing.
fn push_settings(out: &mut Vec<u8>, vs: &VirtualServer) {
    out.extend_from_slice(&[IpvsCmd::NewService.to_raw(), FAMILY_VERSION, 0, 0]);
    let nest = begin_nest(out, cmd_attr::SERVICE);
    request::write_service_attrs(out, vs);
    end_nest(out, nest);
}

/// Writes `ledger` as the file's text into `out` (cleared first). Every
/// entry is checked to read back equal; the first that would not is
/// returned with the reason, and `out` is then incomplete.
fn render(ledger: &Ledger, out: &mut Vec<u8>) -> Result<(), (ServiceKey, String)> {
    let mut entries: Vec<(&ServiceKey, Ownership<'_>)> = ledger.iter().collect();
    entries.sort_unstable_by_key(|(k, _)| **k);
    let mut text = String::with_capacity(32 + entries.len() * 48);
    let mut body = Vec::with_capacity(128);
    let _ = writeln!(text, "{MAGIC} {VERSION}");
    for (key, state) in &entries {
        check_key(key).map_err(|reason| (**key, reason))?;
        let (word, vs) = match state {
            Ownership::Owned => ("owned", None),
            Ownership::Claiming(vs) => ("claiming", Some(*vs)),
            Ownership::Releasing(vs) => ("releasing", Some(*vs)),
        };
        text.push_str(word);
        text.push(' ');
        push_key(&mut text, key);
        if let Some(vs) = vs {
            body.clear();
            push_settings(&mut body, vs);
            match reply::service_from_body(&body) {
                Ok(s) if s.service == *vs => {}
                Ok(s) => {
                    return Err((
                        **key,
                        format!("its settings {vs:?} would read back as {:?}", s.service),
                    ));
                }
                Err(e) => {
                    return Err((
                        **key,
                        format!("its settings {vs:?} would not read back: {e}"),
                    ));
                }
            }
            text.push(' ');
            push_hex(&mut text, &body);
        }
        text.push('\n');
    }
    let _ = writeln!(text, "end {}", entries.len());
    out.clear();
    out.extend_from_slice(text.as_bytes());
    Ok(())
}

/// Refuses a key whose text would not read back equal: an IPv6 address
/// with a scope id or flow label (which the kernel never reports).
fn check_key(key: &ServiceKey) -> Result<(), String> {
    if let ServiceKey::Addr {
        addr: SocketAddr::V6(a),
        ..
    } = key
        && (a.scope_id() != 0 || a.flowinfo() != 0)
    {
        return Err(format!(
            "an IPv6 address with scope id {} and flow label {:#x}",
            a.scope_id(),
            a.flowinfo()
        ));
    }
    Ok(())
}

fn push_key(text: &mut String, key: &ServiceKey) {
    let _ = match key {
        ServiceKey::Addr { protocol, addr } => match protocol {
            Protocol::Tcp => write!(text, "tcp {addr}"),
            Protocol::Udp => write!(text, "udp {addr}"),
            Protocol::Sctp => write!(text, "sctp {addr}"),
            other => write!(text, "proto-{} {addr}", other.to_raw()),
        },
        ServiceKey::FwMark { mark, family } => write!(
            text,
            "fwmark {mark} {}",
            match family {
                AddressFamily::Inet => "inet",
                AddressFamily::Inet6 => "inet6",
            }
        ),
    };
}

fn push_hex(text: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    text.reserve(bytes.len() * 2);
    for b in bytes {
        text.push(char::from(DIGITS[usize::from(b >> 4)]));
        text.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
}

/// What is wrong with a file's content, before the path is known.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Problem {
    Empty,
    Version(String),
    Corrupt(usize, String),
}

impl Problem {
    fn at(self, path: &Path) -> LedgerFileError {
        let path = path.to_owned();
        match self {
            Problem::Empty => LedgerFileError::Empty { path },
            Problem::Version(found) => LedgerFileError::Version { path, found },
            Problem::Corrupt(line, reason) => LedgerFileError::Corrupt { path, line, reason },
        }
    }
}

/// At most the first 40 characters of `s`, quoted, for a message.
fn excerpt(s: &str) -> String {
    match s.char_indices().nth(40) {
        Some((at, _)) => format!("{:?}...", &s[..at]),
        None => format!("{s:?}"),
    }
}

/// The fields of one line, separated by single spaces.
struct Fields<'a>(std::str::Split<'a, char>);

impl<'a> Fields<'a> {
    fn next(&mut self, what: &str) -> Result<&'a str, String> {
        match self.0.next() {
            None => Err(format!("{what} missing")),
            Some("") => Err(format!("{what} missing (an extra space?)")),
            Some(field) => Ok(field),
        }
    }

    fn end(mut self) -> Result<(), String> {
        match self.0.next() {
            None => Ok(()),
            Some(extra) => Err(format!("unexpected {} after the entry", excerpt(extra))),
        }
    }
}

/// A decimal number as this module writes it: digits only, no leading
/// zero.
fn decimal<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, String> {
    let plain =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    match s.parse() {
        Ok(n) if plain => Ok(n),
        _ => Err(format!("{what} {} is not a number in range", excerpt(s))),
    }
}

fn parse_key(f: &mut Fields<'_>) -> Result<ServiceKey, String> {
    let word = f.next("key")?;
    let protocol = match word {
        "fwmark" => {
            let mark = decimal(f.next("firewall mark")?, "firewall mark")?;
            let family = match f.next("address family")? {
                "inet" => AddressFamily::Inet,
                "inet6" => AddressFamily::Inet6,
                other => return Err(format!("unknown address family {}", excerpt(other))),
            };
            return Ok(ServiceKey::FwMark { mark, family });
        }
        "tcp" => Protocol::Tcp,
        "udp" => Protocol::Udp,
        "sctp" => Protocol::Sctp,
        other => match other.strip_prefix("proto-") {
            Some(n) => Protocol::Other(decimal(n, "protocol")?),
            None => return Err(format!("unknown protocol {}", excerpt(other))),
        },
    };
    let text = f.next("address")?;
    let addr: SocketAddr = text
        .parse()
        .map_err(|_| format!("{} is not a socket address", excerpt(text)))?;
    // The form written, and so no scope id or flow label.
    if addr.to_string() != text || check_key(&ServiceKey::tcp(addr)).is_err() {
        return Err(format!(
            "address {} is not written as this library writes one",
            excerpt(text)
        ));
    }
    Ok(ServiceKey::Addr { protocol, addr })
}

fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    fn digit(b: u8) -> Option<u8> {
        match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            _ => None,
        }
    }
    if !s.len().is_multiple_of(2) {
        return Err(format!("settings: odd number of hex digits ({})", s.len()));
    }
    s.as_bytes()
        .chunks_exact(2)
        .map(|pair| Some((digit(pair[0])? << 4) | digit(pair[1])?))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| "settings: not lowercase hex".to_owned())
}

/// The settings of a claim or release of `key`: the hex of exactly what
/// [`push_settings`] writes for a service with that key.
fn parse_settings(text: &str, key: &ServiceKey) -> Result<VirtualServer, String> {
    let body = parse_hex(text)?;
    let vs = reply::service_from_body(&body)
        .map_err(|e| format!("settings: {e}"))?
        .service;
    if vs.key != *key {
        return Err(format!("settings of {} on the line of {key}", vs.key));
    }
    let mut again = Vec::with_capacity(body.len());
    push_settings(&mut again, &vs);
    if again != body {
        return Err("settings: not in the form this library writes".to_owned());
    }
    Ok(vs)
}

/// Reads the file's content.
fn parse(bytes: &[u8]) -> Result<Ledger, Problem> {
    if bytes.is_empty() {
        return Err(Problem::Empty);
    }
    let (text, cut) = match bytes.strip_suffix(b"\n") {
        Some(text) => (text, false),
        None => (bytes, true),
    };
    let count = text.split(|&b| b == b'\n').count();
    let mut ledger = Ledger::new();
    let mut first_line: HashMap<ServiceKey, usize> = HashMap::new();
    let mut ended = false;
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        let n = i + 1;
        let corrupt = |reason: String| Problem::Corrupt(n, reason);
        if cut && n == count {
            return Err(corrupt(
                "no newline at the end of the line: the file is cut short".to_owned(),
            ));
        }
        let line = std::str::from_utf8(line).map_err(|_| corrupt("not UTF-8 text".to_owned()))?;
        if n == 1 {
            match line.split(' ').collect::<Vec<_>>()[..] {
                [MAGIC, VERSION] => continue,
                [MAGIC, found]
                    if !found.is_empty()
                        && found
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'.') =>
                {
                    return Err(Problem::Version(found.chars().take(40).collect()));
                }
                _ => {
                    return Err(corrupt(format!(
                        "not an ipvsctl ledger (the first line is not \"{MAGIC} {VERSION}\")"
                    )));
                }
            }
        }
        if ended {
            return Err(corrupt("a line after the end line".to_owned()));
        }
        let mut f = Fields(line.split(' '));
        match f.next("entry").map_err(corrupt)? {
            "end" => {
                let said: usize =
                    decimal(f.next("count").map_err(corrupt)?, "count").map_err(corrupt)?;
                f.end().map_err(corrupt)?;
                if said != ledger.len() {
                    return Err(corrupt(format!(
                        "the end line counts {said} entries, and the file has {}",
                        ledger.len()
                    )));
                }
                ended = true;
            }
            word @ ("owned" | "claiming" | "releasing") => {
                let key = parse_key(&mut f).map_err(corrupt)?;
                if let Some(first) = first_line.insert(key, n) {
                    return Err(corrupt(format!(
                        "a second entry for {key} (the first is on line {first})"
                    )));
                }
                match word {
                    "owned" => ledger.insert_owned(key),
                    claim => {
                        let text = f.next("settings").map_err(corrupt)?;
                        let vs = parse_settings(text, &key).map_err(corrupt)?;
                        if claim == "claiming" {
                            ledger.insert_claiming(vs);
                        } else {
                            ledger.insert_releasing(vs);
                        }
                    }
                }
                f.end().map_err(corrupt)?;
            }
            other => return Err(corrupt(format!("unknown entry {}", excerpt(other)))),
        }
    }
    if !ended {
        return Err(Problem::Corrupt(
            count + 1,
            "no end line: the file is cut short".to_owned(),
        ));
    }
    Ok(ledger)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::frame;
    use crate::model::{Netmask, PersistenceEngine, Scheduler, ServiceFlags};

    fn key(s: &str) -> ServiceKey {
        ServiceKey::tcp(s.parse().unwrap())
    }

    fn vs(s: &str) -> VirtualServer {
        VirtualServer::new(key(s))
    }

    fn services() -> Vec<VirtualServer> {
        vec![
            vs("10.0.0.1:80"),
            VirtualServer::new(ServiceKey::udp("[2001:db8::1]:53".parse().unwrap()))
                .with_scheduler(Scheduler::SourceHashing)
                .with_flags(ServiceFlags::SH_PORT | ServiceFlags::SH_FALLBACK)
                .with_persistence(600)
                .with_netmask(Netmask::V6(64)),
            VirtualServer::new(ServiceKey::sctp("10.0.0.1:3868".parse().unwrap()))
                .with_scheduler(Scheduler::Other("mine".into()))
                .with_persistence(3600)
                .with_netmask(Netmask::from_prefix(AddressFamily::Inet, 24))
                .with_persistence_engine(PersistenceEngine::sip()),
            VirtualServer::new(ServiceKey::fwmark(7, AddressFamily::Inet6))
                .with_flags(ServiceFlags::ONE_PACKET | ServiceFlags::from_bits_retain(1 << 30))
                .with_timeout(17),
            VirtualServer::new(ServiceKey::fwmark(u32::MAX, AddressFamily::Inet)),
        ]
    }

    /// The genl body of `request::new_service(vs)` as `frame` encodes it.
    fn request_body(vs: &VirtualServer) -> Vec<u8> {
        let mut out = Vec::new();
        let msg = request::new_service(vs).unwrap();
        frame::encode_request(&mut out, &msg, 0x20, 1, 0).unwrap();
        out.split_off(frame::NLMSG_HDRLEN)
    }

    #[test]
    fn settings_are_a_new_service_request_body_and_read_back_equal() {
        for vs in services() {
            let mut body = Vec::new();
            push_settings(&mut body, &vs);
            assert_eq!(body, request_body(&vs), "{vs:?}");
            assert_eq!(reply::service_from_body(&body).unwrap().service, vs);
            let mut hex = String::new();
            push_hex(&mut hex, &body);
            assert_eq!(parse_settings(&hex, &vs.key).unwrap(), vs);
        }
    }

    fn ledger_of_every_kind() -> Ledger {
        let s = services();
        let mut l = Ledger::new();
        l.insert_owned(key("10.96.0.1:80"));
        l.insert_owned(ServiceKey::Addr {
            protocol: Protocol::Other(47),
            addr: "[2001:db8::2]:0".parse().unwrap(),
        });
        l.insert_owned(ServiceKey::fwmark(7, AddressFamily::Inet));
        l.insert_claiming(s[0].clone());
        l.insert_claiming(s[1].clone());
        l.insert_releasing(s[2].clone());
        l.insert_releasing(s[3].clone());
        l.insert_claiming(s[4].clone());
        l
    }

    fn text_of(l: &Ledger) -> String {
        let mut out = Vec::new();
        render(l, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_ledger_reads_back_equal_sorted_by_key() {
        let l = ledger_of_every_kind();
        let text = text_of(&l);
        assert_eq!(parse(text.as_bytes()).unwrap(), l);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "ipvsctl-ledger 1");
        assert!(lines[1].starts_with("claiming tcp 10.0.0.1:80 01010000"));
        assert_eq!(lines[2], "owned tcp 10.96.0.1:80");
        assert_eq!(lines[lines.len() - 1], "end 8");
        let keys: Vec<ServiceKey> = lines[1..lines.len() - 1]
            .iter()
            .map(|line| parse_key(&mut Fields(line.split_once(' ').unwrap().1.split(' '))))
            .map(Result::unwrap)
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        assert!(
            text.contains("\nowned proto-47 [2001:db8::2]:0\n"),
            "{text}"
        );
        assert!(text.contains("\nowned fwmark 7 inet\n"), "{text}");
        assert_eq!(text_of(&Ledger::new()), "ipvsctl-ledger 1\nend 0\n");
    }

    fn corrupt_at(text: &str) -> (usize, String) {
        match parse(text.as_bytes()) {
            Err(Problem::Corrupt(line, reason)) => (line, reason),
            other => panic!("{text:?}: {other:?}"),
        }
    }

    #[test]
    fn every_malformed_line_is_refused_with_its_number() {
        let mut one = Ledger::new();
        one.insert_claiming(vs("10.0.0.1:80"));
        let good = text_of(&one);
        let claim = good.lines().nth(1).unwrap();
        let hex = claim.rsplit(' ').next().unwrap();
        let other_hex = {
            let mut h = String::new();
            let mut b = Vec::new();
            push_settings(&mut b, &vs("10.0.0.2:80"));
            push_hex(&mut h, &b);
            h
        };
        let cases: &[(String, usize, &str)] = &[
            (good.replace("end 1\n", ""), 3, "no end line"),
            (good.replace("end 1\n", "end 1"), 3, "no newline"),
            (good[..good.len() - 20].to_owned(), 2, "no newline"),
            (good.replace("end 1", "end 2"), 3, "counts 2 entries"),
            (good.replace("end 1", "end 01"), 3, "not a number"),
            (good.replace("end 1", "end 1 2"), 3, "unexpected"),
            (format!("{good}owned tcp 10.0.0.3:80\n"), 4, "after the end"),
            (good.replace(hex, &hex[..hex.len() - 1]), 2, "odd number"),
            (good.replace(hex, &hex.to_uppercase()), 2, "lowercase"),
            (good.replace(hex, &hex[..hex.len() - 2]), 2, "settings"),
            (
                good.replace(hex, &other_hex),
                2,
                "settings of TCP 10.0.0.2:80",
            ),
            (good.replace(&format!(" {hex}"), ""), 2, "settings missing"),
            (good.replace("claiming", "owned"), 2, "unexpected"),
            (good.replace("claiming", "claimed"), 2, "unknown entry"),
            (good.replace("tcp 10", "tcp  10"), 2, "extra space"),
            (good.replace("tcp", "icmp"), 2, "unknown protocol"),
            (good.replace("tcp", "proto-x"), 2, "protocol"),
            (good.replace("10.0.0.1:80", "10.0.0.1"), 2, "socket address"),
            (good.replace("\n", "\r\n"), 1, "not an ipvsctl ledger"),
            (
                good.replace("claiming tcp", "owned tcp 10.0.0.1:80\nclaiming tcp"),
                3,
                "second entry for TCP 10.0.0.1:80 (the first is on line 2)",
            ),
            (
                good.replace("end 1", "owned fwmark 1 inet\nowned fwmark 1 inet\nend 3"),
                4,
                "second entry",
            ),
            (
                good.replace("end 1", "owned fwmark 1 ipx\nend 2"),
                3,
                "family",
            ),
            (
                good.replace("end 1", "owned fwmark 4294967296 inet\nend 2"),
                3,
                "mark",
            ),
            (good.replace("end 1", "\nend 1"), 3, "entry missing"),
            (
                good.replace("end 1", "hello world\nend 1"),
                3,
                "unknown entry",
            ),
            (
                good.replace("end 1", "owned udp [2001:DB8::1]:53\nend 2"),
                3,
                "not written",
            ),
            ("ipvsctl-ledger 1".to_owned(), 1, "no newline"),
            ("ipvsctl-ledger 1\n".to_owned(), 2, "no end line"),
            ("\n".to_owned(), 1, "not an ipvsctl ledger"),
            ("{\"owned\": []}\n".to_owned(), 1, "not an ipvsctl ledger"),
            (
                "ipvsctl-ledger\nend 0\n".to_owned(),
                1,
                "not an ipvsctl ledger",
            ),
        ];
        for (text, line, reason) in cases {
            let (at, why) = corrupt_at(text);
            assert_eq!((at, why.contains(reason)), (*line, true), "{text:?}: {why}");
        }
        let mut bytes = good.into_bytes();
        bytes[5] = 0xff;
        assert!(matches!(parse(&bytes), Err(Problem::Corrupt(1, r)) if r.contains("UTF-8")));
    }

    #[test]
    fn an_empty_file_and_another_version_have_their_own_errors() {
        assert_eq!(parse(b""), Err(Problem::Empty));
        assert_eq!(
            parse(b"ipvsctl-ledger 2\nwhatever comes next\n"),
            Err(Problem::Version("2".into()))
        );
        assert_eq!(parse(b"ipvsctl-ledger 1\nend 0\n"), Ok(Ledger::new()));
    }

    #[test]
    fn settings_not_in_the_written_form_are_refused() {
        // The settings of 10.0.0.1:80 with one more attribute in the nest
        // (an unknown type 99, 4 bytes): they decode, and are not what this
        // module writes.
        let vs = vs("10.0.0.1:80");
        let mut body = Vec::new();
        push_settings(&mut body, &vs);
        body.extend_from_slice(&[8, 0, 99, 0, 0, 0, 0, 0]);
        let nest_len = u16::from_ne_bytes([body[4], body[5]]) + 8;
        body[4..6].copy_from_slice(&nest_len.to_ne_bytes());
        assert_eq!(reply::service_from_body(&body).unwrap().service, vs);
        let mut hex = String::new();
        push_hex(&mut hex, &body);
        let err = parse_settings(&hex, &vs.key).unwrap_err();
        assert!(err.contains("not in the form"), "{err}");
    }

    #[test]
    fn entries_that_would_not_read_back_equal_are_not_written() {
        let scoped: SocketAddr = "[fe80::1%2]:80".parse().unwrap();
        let mut l = Ledger::new();
        l.insert_owned(ServiceKey::tcp(scoped));
        let err = render(&l, &mut Vec::new()).unwrap_err();
        assert_eq!(err.0, ServiceKey::tcp(scoped));
        assert!(err.1.contains("scope id 2"), "{}", err.1);

        let mut hashed = vs("10.0.0.1:80");
        hashed.flags = ServiceFlags::from_bits_retain(ServiceFlags::KERNEL_HASHED);
        let mut empty_pe = vs("10.0.0.2:80");
        empty_pe.persistence_engine = Some(PersistenceEngine(String::new()));
        let wrong_mask = vs("10.0.0.3:80").with_netmask(Netmask::V6(64));
        let long_name = vs("10.0.0.4:80").with_scheduler(Scheduler::Other("x".repeat(70_000)));
        for bad in [hashed, empty_pe, wrong_mask, long_name] {
            let mut l = Ledger::new();
            l.insert_owned(key("10.9.9.9:1"));
            l.insert_releasing(bad.clone());
            let err = render(&l, &mut Vec::new()).unwrap_err();
            assert_eq!(err.0, bad.key);
            assert!(err.1.contains("read back"), "{}", err.1);
        }
    }

    #[test]
    fn messages_name_the_file_and_how_to_start_over() {
        let path = Path::new("/var/lib/agent/ledger");
        for p in [
            Problem::Empty,
            Problem::Version("2".into()),
            Problem::Corrupt(3, "why".into()),
        ] {
            let e = p.at(path);
            let text = e.to_string();
            assert!(text.contains("/var/lib/agent/ledger"), "{text}");
            assert!(text.contains("FileLedger::start_over"), "{text}");
            assert_eq!(e.path(), path);
        }
        let text = Problem::Corrupt(3, "why".into()).at(path).to_string();
        assert!(text.contains("line 3: why"), "{text}");
        let io = LedgerFileError::Io {
            path: path.into(),
            source: io::Error::from(io::ErrorKind::PermissionDenied),
        }
        .into_io();
        assert_eq!(io.kind(), io::ErrorKind::PermissionDenied);
        assert!(io.to_string().contains("/var/lib/agent/ledger"), "{io}");
    }
}
