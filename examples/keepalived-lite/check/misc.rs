//! `MISC_CHECK`: run a program (argv, no shell) in a process group of its
//! own and judge its exit status, as keepalived 2.2.7 does
//! (check/check_misc.c, lib/notify.c).
//!
//! - Exit 0: up (configured weight). With `misc_dynamic`, exit 2-255: up
//!   with weight status - 2. Any other status (1 always): down.
//! - Past `misc_timeout`: SIGTERM to the group, 2 s later SIGKILL; a script
//!   ended by those signals "timed out" (down), and the group is SIGKILLed
//!   so no child stays behind. A script that exits by itself after the
//!   SIGTERM is judged by its exit status, as keepalived does.
//! - A program that cannot be started counts as up: keepalived's child
//!   exits 0 when exec fails ("script errors aren't server errors").

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::{Attempt, Cancel, ScriptEnd};
use crate::config::model::MiscCheck;

/// SIGTERM.
pub const SIGTERM: i32 = libc::SIGTERM;
/// SIGKILL.
pub const SIGKILL: i32 = libc::SIGKILL;

/// keepalived's wait after each signal before the next.
const GRACE: Duration = Duration::from_secs(2);
/// How long to wait after SIGKILL before giving up on the reap (a process
/// stuck in the kernel); the waiter thread still reaps it later.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// Sends `sig` to process group `pgid`; errors (the group is gone) are
/// ignored since there is nothing left to do then.
pub fn kill_group(pgid: i32, sig: i32) {
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) takes only integers and touches no memory of ours;
    // `pgid` > 1 is a group we created (process_group(0) on our child), so
    // the negative pid never means "every process" (-1).
    unsafe {
        libc::kill(-pgid, sig);
    }
}

/// Resolves `user [group]` (names or numbers) from /etc/passwd and
/// /etc/group: (uid, gid), the group defaulting to the user's.
pub fn resolve_user(spec: &str) -> Result<(u32, u32), String> {
    let mut words = spec.split_whitespace();
    let user = words.next().ok_or("empty user")?;
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let (uid, mut gid) = match passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 3 && (f[0] == user || f[2] == user))
    {
        Some(f) => (
            f[2].parse().map_err(|_| "bad uid")?,
            f[3].parse().map_err(|_| "bad gid")?,
        ),
        None => {
            let uid = user.parse().map_err(|_| format!("unknown user {user}"))?;
            (uid, uid)
        }
    };
    if let Some(group) = words.next() {
        let groups = std::fs::read_to_string("/etc/group").unwrap_or_default();
        gid = match groups
            .lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .find(|f| f.len() > 2 && (f[0] == group || f[2] == group))
        {
            Some(f) => f[2].parse().map_err(|_| "bad gid")?,
            None => group
                .parse()
                .map_err(|_| format!("unknown group {group}"))?,
        };
    }
    Ok((uid, gid))
}

/// What an exit status means under keepalived's rule.
pub fn judge(status: ExitStatus, dynamic: bool, timed_out: bool) -> Attempt {
    if let Some(code) = status.code() {
        return match code {
            0 => Attempt::Up { weight: None },
            2..=255 if dynamic => Attempt::Up {
                weight: Some(code as u32 - 2),
            },
            _ => Attempt::Down {
                reason: format!("exited with status {code}"),
                script: Some(ScriptEnd::Exited(code)),
            },
        };
    }
    let sig = status.signal().unwrap_or(0);
    if timed_out && (sig == SIGTERM || sig == SIGKILL) {
        Attempt::Down {
            reason: "timed out".into(),
            script: Some(ScriptEnd::TimedOut),
        }
    } else {
        Attempt::Down {
            reason: format!("due to signal {sig}"),
            script: Some(ScriptEnd::Signalled(sig)),
        }
    }
}

/// One `MISC_CHECK` attempt: at most `misc_timeout` + 2 s + 2 s (+10 s
/// for a process the kernel will not let die).
pub fn attempt(check: &MiscCheck, cancel: &Cancel) -> Attempt {
    let Some((prog, args)) = check.argv.split_first() else {
        return Attempt::Up { weight: None };
    };
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own group, so that killing it kills what it started.
        .process_group(0);
    if let Some(user) = &check.user {
        match resolve_user(user) {
            Ok((uid, gid)) => {
                cmd.uid(uid).gid(gid);
            }
            Err(e) => return Attempt::Error { reason: e },
        }
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(_) => return Attempt::Up { weight: None },
    };
    let pgid = child.id() as i32;
    // A thread blocked in wait() reports the end over a channel, so the
    // timeouts are channel timeouts: no polling, and the child is always
    // reaped, even when we stop waiting for it.
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::Builder::new()
        .name("misc-wait".into())
        .spawn(move || {
            let _ = tx.send(child.wait());
        });
    if waiter.is_err() {
        kill_group(pgid, SIGKILL);
        return Attempt::Error {
            reason: "cannot start a waiter thread".into(),
        };
    }
    if !cancel.register(pgid) {
        kill_group(pgid, SIGKILL);
    }
    let result = wait(&rx, pgid, check);
    cancel.unregister(pgid);
    result
}

fn wait(rx: &mpsc::Receiver<std::io::Result<ExitStatus>>, pgid: i32, check: &MiscCheck) -> Attempt {
    let ended = |r: std::io::Result<ExitStatus>, timed_out: bool| match r {
        Ok(status) => judge(status, check.dynamic, timed_out),
        Err(e) => Attempt::Error {
            reason: format!("wait failed: {e}"),
        },
    };
    if let Ok(r) = rx.recv_timeout(check.timeout) {
        return ended(r, false);
    }
    for (sig, limit) in [(SIGTERM, GRACE), (SIGKILL, GRACE), (SIGKILL, KILL_WAIT)] {
        kill_group(pgid, sig);
        if let Ok(r) = rx.recv_timeout(limit) {
            // Whatever the leader did, its group goes with it.
            kill_group(pgid, SIGKILL);
            return ended(r, true);
        }
    }
    Attempt::Down {
        reason: "timed out".into(),
        script: Some(ScriptEnd::TimedOut),
    }
}
