//! Where the reference keepalived is, for the kernel test that runs
//! keepalived-lite beside it and for the bench that measures both.

use std::path::PathBuf;

/// The reference: `IPVSCTL_KEEPALIVED`, else Debian's keepalived.
pub fn reference_program() -> PathBuf {
    let p = match std::env::var_os("IPVSCTL_KEEPALIVED") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from("/usr/sbin/keepalived"),
    };
    assert!(
        p.is_file(),
        "{} is missing: install the Debian package keepalived (scripts/test does)",
        p.display()
    );
    p
}
