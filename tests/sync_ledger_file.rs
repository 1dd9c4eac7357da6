//! `FileLedger` on the host's file system, through the public API: what is
//! saved reads back equal, every unreadable file is a typed error naming
//! the file (and the line), a failed save leaves the old file, and the file
//! is private to its owner. No kernel.

mod strategies;

use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use ipvsctl::model::{
    AddressFamily, MAX_TIMEOUT, Netmask, PersistenceEngine, Protocol, Scheduler, ServiceFlags,
    ServiceKey, VirtualServer,
};
use ipvsctl::sync::{FileLedger, Ledger, LedgerFileError, LedgerStore, Ownership};
use proptest::prelude::*;

/// A directory of its own under the system's temp directory, removed on
/// drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ipvsctl-ledger-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The names in the directory, sorted.
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::set_permissions(&self.0, fs::Permissions::from_mode(0o700));
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Every entry kind with every key kind, and settings other than the
/// defaults in every field.
fn ledger_of_every_kind() -> Ledger {
    let mut l = Ledger::new();
    l.insert_owned(ServiceKey::tcp(addr("10.96.0.1:80")));
    l.insert_owned(ServiceKey::udp(addr("[2001:db8::53]:53")));
    l.insert_owned(ServiceKey::fwmark(7, AddressFamily::Inet6));
    l.insert_owned(ServiceKey::Addr {
        protocol: Protocol::Other(47),
        addr: addr("10.96.0.9:0"),
    });
    l.insert_claiming(VirtualServer::new(ServiceKey::tcp(addr("10.0.0.1:443"))));
    l.insert_claiming(
        VirtualServer::new(ServiceKey::udp(addr("[2001:db8::1]:53")))
            .with_scheduler(Scheduler::MaglevHashing)
            .with_flags(ServiceFlags::MH_PORT | ServiceFlags::MH_FALLBACK)
            .with_persistence(600)
            .with_netmask(Netmask::V6(64)),
    );
    l.insert_claiming(
        VirtualServer::new(ServiceKey::fwmark(1, AddressFamily::Inet))
            .with_scheduler(Scheduler::RoundRobin)
            .with_flags(ServiceFlags::ONE_PACKET),
    );
    l.insert_releasing(
        VirtualServer::new(ServiceKey::sctp(addr("10.0.0.1:3868")))
            .with_scheduler(Scheduler::SourceHashing)
            .with_persistence(3600)
            .with_netmask(Netmask::from_prefix(AddressFamily::Inet, 24))
            .with_persistence_engine(PersistenceEngine::sip()),
    );
    l.insert_releasing(
        VirtualServer::new(ServiceKey::sctp(addr("[2001:db8::7]:5060")))
            .with_scheduler(Scheduler::Other("ovf2".into()))
            .with_timeout(42)
            .with_persistence_engine(PersistenceEngine::sip()),
    );
    l.insert_releasing(
        VirtualServer::new(ServiceKey::fwmark(u32::MAX, AddressFamily::Inet6))
            .with_flags(ServiceFlags::from_bits_retain(0x8000_0001)),
    );
    l
}

fn file_mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn every_entry_kind_and_key_kind_reads_back_equal() {
    let dir = TempDir::new("every-kind");
    let path = dir.join("ledger");
    let mut store = FileLedger::create(&path).unwrap();
    assert_eq!(store.path(), path);
    let ledger = ledger_of_every_kind();
    store.save(&ledger, &[]).unwrap();

    let (store, loaded) = FileLedger::open(&path).unwrap();
    assert_eq!(store.path(), path);
    assert_eq!(loaded, ledger);
    assert_eq!(loaded.len(), 10);
    for (key, state) in ledger.iter() {
        assert_eq!(loaded.get(key), Some(state), "{key}");
    }

    let text = fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.first(), Some(&"ipvsctl-ledger 1"));
    assert_eq!(lines.last(), Some(&"end 10"));
    for line in [
        "owned tcp 10.96.0.1:80",
        "owned udp [2001:db8::53]:53",
        "owned fwmark 7 inet6",
        "owned proto-47 10.96.0.9:0",
    ] {
        assert!(lines.contains(&line), "{line} in\n{text}");
    }
    for prefix in [
        "claiming tcp 10.0.0.1:443 ",
        "claiming udp [2001:db8::1]:53 ",
        "claiming fwmark 1 inet ",
        "releasing sctp 10.0.0.1:3868 ",
        "releasing sctp [2001:db8::7]:5060 ",
        "releasing fwmark 4294967295 inet6 ",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(prefix)),
            "{prefix} in\n{text}"
        );
    }

    // Saved again: the same bytes (sorted, whatever the ledger's order).
    let mut store = store;
    store.save(&loaded, &[]).unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), text);
}

#[test]
fn a_save_is_private_and_leaves_no_temp_file() {
    let dir = TempDir::new("private");
    let path = dir.join("ledger");
    let mut store = FileLedger::create(&path).unwrap();
    assert_eq!(dir.names(), ["ledger"]);
    assert_eq!(file_mode(&path), 0o600);

    // A temp file a crash left behind, readable by all, is replaced.
    fs::write(dir.join("ledger.tmp"), "left over").unwrap();
    fs::set_permissions(dir.join("ledger.tmp"), fs::Permissions::from_mode(0o644)).unwrap();
    // So is a file at the ledger's path with a wider mode.
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    store.save(&ledger_of_every_kind(), &[]).unwrap();
    assert_eq!(dir.names(), ["ledger"]);
    assert_eq!(file_mode(&path), 0o600);
    assert_eq!(FileLedger::open(&path).unwrap().1, ledger_of_every_kind());
}

#[test]
fn a_missing_file_is_an_error_not_an_empty_ledger() {
    let dir = TempDir::new("missing");
    let path = dir.join("ledger");
    let err = FileLedger::open(&path).unwrap_err();
    assert!(
        matches!(&err, LedgerFileError::Missing { path: p } if *p == path),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert_eq!(err.path(), path);
    assert!(dir.names().is_empty());

    // A directory there is not a ledger either.
    fs::create_dir(&path).unwrap();
    let err = FileLedger::open(&path).unwrap_err();
    assert!(
        matches!(&err, LedgerFileError::Io { path: p, source } if *p == path && source.kind() == std::io::ErrorKind::InvalidInput),
        "{err:?}"
    );
}

#[test]
fn an_empty_file_is_an_error() {
    let dir = TempDir::new("empty");
    let path = dir.join("ledger");
    fs::write(&path, "").unwrap();
    let err = FileLedger::open(&path).unwrap_err();
    assert!(
        matches!(&err, LedgerFileError::Empty { path: p } if *p == path),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("FileLedger::start_over"), "{text}");
}

#[test]
fn another_version_is_an_error_naming_it() {
    let dir = TempDir::new("version");
    let path = dir.join("ledger");
    fs::write(
        &path,
        "ipvsctl-ledger 2\nowned tcp 10.0.0.1:80 with more\nend 1\n",
    )
    .unwrap();
    let err = FileLedger::open(&path).unwrap_err();
    assert!(
        matches!(&err, LedgerFileError::Version { path: p, found } if *p == path && found == "2"),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("FileLedger::start_over"), "{text}");
}

/// The line and reason of a `Corrupt` error for a file holding `text`.
fn corrupt(dir: &TempDir, text: &str) -> (usize, String) {
    let path = dir.join("ledger");
    fs::write(&path, text).unwrap();
    match FileLedger::open(&path) {
        Err(e @ LedgerFileError::Corrupt { .. }) => {
            let message = e.to_string();
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(message.contains("FileLedger::start_over"), "{message}");
            let LedgerFileError::Corrupt {
                path: p,
                line,
                reason,
            } = e
            else {
                unreachable!()
            };
            assert_eq!(p, path);
            assert!(message.contains(&format!("line {line}: ")), "{message}");
            (line, reason)
        }
        other => panic!("{text:?}: {other:?}"),
    }
}

#[test]
fn corrupt_files_are_errors_naming_the_line() {
    let dir = TempDir::new("corrupt");
    let path = dir.join("ledger");
    let mut store = FileLedger::create(&path).unwrap();
    store.save(&ledger_of_every_kind(), &[]).unwrap();
    let good = fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = good.lines().collect();
    let end = lines.len(); // the end line's number
    let claim = lines
        .iter()
        .position(|l| l.starts_with("claiming"))
        .unwrap();
    let hex = lines[claim].rsplit(' ').next().unwrap();

    // Cut within the last entry, at a line's end, and within the end line.
    let cut_mid = &good[..good.len() - "end 10\n".len() - 5];
    assert_eq!(corrupt(&dir, cut_mid).0, end - 1);
    let cut_line = &good[..good.len() - "end 10\n".len()];
    assert_eq!(
        corrupt(&dir, cut_line),
        (end, "no end line: the file is cut short".into())
    );
    let cut_end = &good[..good.len() - 2];
    assert_eq!(corrupt(&dir, cut_end).0, end);

    let bad_hex = good.replacen(hex, &format!("{}zz", &hex[..hex.len() - 2]), 1);
    let (line, reason) = corrupt(&dir, &bad_hex);
    assert_eq!(
        (line, reason.contains("hex")),
        (claim + 1, true),
        "{reason}"
    );

    let short_hex = good.replacen(hex, &hex[..hex.len() - 8], 1);
    let (line, reason) = corrupt(&dir, &short_hex);
    assert_eq!(
        (line, reason.starts_with("settings")),
        (claim + 1, true),
        "{reason}"
    );

    let (line, reason) = corrupt(&dir, &good.replace("end 10", "end 9"));
    assert_eq!((line, reason.contains("counts 9")), (end, true), "{reason}");

    let duplicate = good.replace("end 10\n", "owned fwmark 7 inet6\nend 11\n");
    let (line, reason) = corrupt(&dir, &duplicate);
    assert_eq!(
        (line, reason.contains("second entry")),
        (end, true),
        "{reason}"
    );

    let garbage = good.replace("end 10\n", "rm -rf /\nend 11\n");
    let (line, reason) = corrupt(&dir, &garbage);
    assert_eq!(
        (line, reason.contains("unknown entry")),
        (end, true),
        "{reason}"
    );

    let (line, _) = corrupt(&dir, "not a ledger\n");
    assert_eq!(line, 1);
    let (line, reason) = corrupt(&dir, "\0\0\0\0\0\0\0\0");
    assert_eq!(line, 1, "{reason}");

    // The file was only read.
    fs::write(&path, &good).unwrap();
    assert_eq!(FileLedger::open(&path).unwrap().1, ledger_of_every_kind());
}

#[test]
fn create_refuses_an_existing_file_and_keeps_it() {
    let dir = TempDir::new("create");
    let path = dir.join("ledger");
    let mut store = FileLedger::create(&path).unwrap();
    assert_eq!(FileLedger::open(&path).unwrap().1, Ledger::new());
    store.save(&ledger_of_every_kind(), &[]).unwrap();
    let before = fs::read(&path).unwrap();

    let err = FileLedger::create(&path).unwrap_err();
    assert!(
        matches!(&err, LedgerFileError::Exists { path: p } if *p == path),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert_eq!(fs::read(&path).unwrap(), before);
    assert_eq!(dir.names(), ["ledger"]);

    // Any file, even an empty one.
    fs::write(&path, "").unwrap();
    assert!(matches!(
        FileLedger::create(&path),
        Err(LedgerFileError::Exists { .. })
    ));
}

#[test]
fn start_over_moves_the_bad_file_aside_and_starts_empty() {
    let dir = TempDir::new("start-over");
    let path = dir.join("ledger");
    let bad = "ipvsctl-ledger 1\nowned tcp 10.0.0.1:80\n";
    fs::write(&path, bad).unwrap();
    assert!(matches!(
        FileLedger::open(&path),
        Err(LedgerFileError::Corrupt { line: 3, .. })
    ));

    let store = FileLedger::start_over(&path).unwrap();
    assert_eq!(store.path(), path);
    let (_, ledger) = FileLedger::open(&path).unwrap();
    assert!(ledger.is_empty());
    assert_eq!(file_mode(&path), 0o600);
    let names = dir.names();
    assert_eq!(names.len(), 2, "{names:?}");
    let aside = names.iter().find(|n| *n != "ledger").unwrap();
    let secs = aside.strip_prefix("ledger.bad-").unwrap();
    assert!(secs.bytes().all(|b| b.is_ascii_digit()), "{aside}");
    assert_eq!(fs::read_to_string(dir.join(aside)).unwrap(), bad);

    // Again at once (within the same second): both old files are kept.
    fs::write(&path, "second\n").unwrap();
    FileLedger::start_over(&path).unwrap();
    let names = dir.names();
    assert_eq!(names.len(), 3, "{names:?}");
    let mut kept: Vec<String> = names
        .iter()
        .filter(|n| *n != "ledger")
        .map(|n| fs::read_to_string(dir.join(n)).unwrap())
        .collect();
    kept.sort();
    assert_eq!(kept, [bad, "second\n"]);

    // Without a file: just the empty ledger.
    let fresh = dir.join("fresh");
    FileLedger::start_over(&fresh).unwrap();
    assert!(FileLedger::open(&fresh).unwrap().1.is_empty());
}

/// Checks that a failed save left the old file and no temp file, and that
/// the error names `failing`.
fn check_failed_save(
    err: std::io::Error,
    path: &Path,
    before: &[u8],
    failing: &Path,
    temp_left: bool,
) {
    let inner = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<LedgerFileError>())
        .unwrap_or_else(|| panic!("{err:?}"));
    assert!(
        matches!(inner, LedgerFileError::Io { path: p, .. } if p == failing),
        "{inner:?}"
    );
    assert!(
        err.to_string().contains(&failing.display().to_string()),
        "{err}"
    );
    assert_eq!(fs::read(path).unwrap(), before);
    let tmp = path.with_file_name("ledger.tmp");
    assert_eq!(tmp.exists(), temp_left);
}

#[test]
fn a_failed_save_leaves_the_old_file() {
    let dir = TempDir::new("failed-save");
    let path = dir.join("ledger");
    let tmp = dir.join("ledger.tmp");
    let mut store = FileLedger::create(&path).unwrap();
    let mut small = Ledger::new();
    small.insert_owned(ServiceKey::tcp(addr("10.0.0.1:80")));
    store.save(&small, &[]).unwrap();
    let before = fs::read(&path).unwrap();

    // The temp file's name is taken by a directory: no temp file can be
    // made (whoever runs this, root included).
    fs::create_dir(&tmp).unwrap();
    fs::write(tmp.join("x"), "").unwrap();
    let err = store.save(&ledger_of_every_kind(), &[]).unwrap_err();
    check_failed_save(err, &path, &before, &tmp, true);
    fs::remove_dir_all(&tmp).unwrap();

    // A directory that is not writable (root may write it anyway).
    fs::set_permissions(&dir.0, fs::Permissions::from_mode(0o500)).unwrap();
    let writable = fs::write(dir.join("probe"), "").is_ok();
    if writable {
        fs::remove_file(dir.join("probe")).unwrap();
        eprintln!("running with the right to write any directory: skipped the read-only case");
    } else {
        let err = store.save(&ledger_of_every_kind(), &[]).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
        check_failed_save(err, &path, &before, &tmp, false);
    }
    fs::set_permissions(&dir.0, fs::Permissions::from_mode(0o700)).unwrap();

    // The directory was moved away: its path has no parent any more.
    let moved = TempDir::new("failed-save-moved");
    fs::remove_dir(&moved.0).unwrap();
    fs::rename(&dir.0, &moved.0).unwrap();
    let err = store.save(&ledger_of_every_kind(), &[]).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    assert_eq!(moved.names(), ["ledger"]);
    assert_eq!(fs::read(moved.join("ledger")).unwrap(), before);
    assert!(!dir.0.exists());

    // Creating a ledger there fails the same way.
    assert!(matches!(
        FileLedger::create(&path),
        Err(LedgerFileError::Io { .. })
    ));
    assert!(matches!(
        FileLedger::start_over(&path),
        Err(LedgerFileError::Io { .. })
    ));
    assert!(!dir.0.exists());
}

#[test]
fn settings_that_would_read_back_different_are_refused_unwritten() {
    let dir = TempDir::new("unrecordable");
    let path = dir.join("ledger");
    let mut store = FileLedger::create(&path).unwrap();
    let before = fs::read(&path).unwrap();
    // Scheduler "rr" spelt as `Other`: the file (like the kernel) would
    // give back `RoundRobin`.
    let vs = VirtualServer::new(ServiceKey::tcp(addr("10.0.0.1:80")))
        .with_scheduler(Scheduler::Other("rr".into()));
    let mut ledger = Ledger::new();
    ledger.insert_claiming(vs.clone());
    let err = store.save(&ledger, &[]).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    let inner = err.get_ref().unwrap().downcast_ref::<LedgerFileError>();
    assert!(
        matches!(inner, Some(LedgerFileError::Unrecordable { path: p, key, .. }) if *p == path && *key == vs.key),
        "{inner:?}"
    );
    assert_eq!(fs::read(&path).unwrap(), before);
    assert_eq!(dir.names(), ["ledger"]);
}

/// Canonical scheduler names, built in or not.
fn scheduler() -> impl Strategy<Value = Scheduler> {
    prop_oneof![
        proptest::sample::select(Scheduler::BUILT_IN.to_vec()),
        Just(Scheduler::None),
        "[a-z0-9_]{1,15}".prop_map(|n| Scheduler::from_name(&n)),
    ]
}

/// Keys of every protocol number and address.
fn key() -> impl Strategy<Value = ServiceKey> {
    let ip = prop_oneof![
        any::<Ipv4Addr>().prop_map(IpAddr::V4),
        any::<Ipv6Addr>().prop_map(IpAddr::V6),
    ];
    prop_oneof![
        strategies::key(),
        (any::<u16>(), ip, any::<u16>()).prop_map(|(p, ip, port)| ServiceKey::Addr {
            protocol: Protocol::from_raw(p),
            addr: SocketAddr::new(ip, port),
        }),
    ]
}

/// Valid services with every field drawn widely: any flag bit but the
/// kernel's own, any timeout, any scheduler and engine name.
fn virtual_server() -> impl Strategy<Value = VirtualServer> {
    key().prop_flat_map(|key| {
        (
            scheduler(),
            any::<u32>(),
            0..=MAX_TIMEOUT,
            strategies::netmask(key.family()),
            proptest::option::of("[a-z0-9_]{1,15}"),
        )
            .prop_map(move |(scheduler, flags, timeout, netmask, pe)| {
                let mut vs = VirtualServer::new(key)
                    .with_scheduler(scheduler)
                    .with_flags(ServiceFlags::from_kernel(flags))
                    .with_timeout(timeout)
                    .with_netmask(netmask);
                vs.persistence_engine = pe.map(PersistenceEngine);
                vs
            })
    })
}

/// Up to 12 entries of every kind.
fn ledger() -> impl Strategy<Value = Ledger> {
    let entry = prop_oneof![strategies::virtual_server(true), virtual_server(),];
    proptest::collection::vec((entry, 0u8..3), 0..12).prop_map(|entries| {
        let mut l = Ledger::new();
        for (vs, kind) in entries {
            match kind {
                0 => l.insert_owned(vs.key),
                1 => l.insert_claiming(vs),
                _ => l.insert_releasing(vs),
            }
        }
        l
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any valid service's settings, claimed or releasing, and any key,
    /// read back exactly.
    #[test]
    fn any_valid_ledger_reads_back_equal(ledger in ledger()) {
        for (_, state) in ledger.iter() {
            if let Ownership::Claiming(vs) | Ownership::Releasing(vs) = state {
                prop_assume!(vs.validate().is_ok());
            }
        }
        let dir = TempDir::new("prop");
        let path = dir.join("ledger");
        let mut store = FileLedger::create(&path).unwrap();
        store.save(&ledger, &[]).unwrap();
        let (_, loaded) = FileLedger::open(&path).unwrap();
        prop_assert_eq!(&loaded, &ledger);
        for (key, state) in ledger.iter() {
            prop_assert_eq!(loaded.get(key), Some(state));
        }
    }
}

#[cfg(feature = "arbitrary")]
mod arbitrary_services {
    use super::*;
    use arbitrary::{Arbitrary, Unstructured};

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any service at all, valid or not: saved, it reads back equal;
        /// or the save is refused and the file keeps the old ledger.
        /// Never a different service.
        #[test]
        fn any_service_reads_back_equal_or_is_refused(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let Ok(vs) = VirtualServer::arbitrary(&mut Unstructured::new(&bytes)) else {
                return Ok(());
            };
            let dir = TempDir::new("arbitrary");
            let path = dir.join("ledger");
            let mut store = FileLedger::create(&path).unwrap();
            let mut ledger = Ledger::new();
            ledger.insert_releasing(vs.clone());
            match store.save(&ledger, &[]) {
                Ok(()) => {
                    let (_, loaded) = FileLedger::open(&path).unwrap();
                    prop_assert_eq!(loaded.get(&vs.key), Some(Ownership::Releasing(&vs)));
                }
                Err(e) => {
                    prop_assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
                    prop_assert!(vs.validate().is_err(), "{:?} refused: {}", vs, e);
                    prop_assert!(FileLedger::open(&path).unwrap().1.is_empty());
                }
            }
        }
    }
}
