//! Running a program with a deadline: the loader may never return (a module
//! whose initialisation waits, uninterruptibly, for namespace cleanup that
//! waits for it), and a caller's start must not wait with it.

use std::io::{self, Read};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How long a killed program gets to be reaped and to close its output
/// before it is given up on.
const AFTER_KILL: Duration = Duration::from_millis(500);

/// The longest pause between two looks at whether the program has ended.
const MAX_POLL: Duration = Duration::from_millis(20);

/// How a program run with [`run_within`] ended.
pub(crate) struct Ended {
    /// Its exit status; `None` when it was killed and still not reaped
    /// [`AFTER_KILL`] later (a process in uninterruptible sleep in the
    /// kernel dies only when it leaves it).
    pub(crate) status: Option<ExitStatus>,
    /// Whether it was killed at the deadline.
    pub(crate) killed: bool,
    /// From the start to its end, or to the kill.
    pub(crate) elapsed: Duration,
    /// What it wrote to standard output (until its end, or the kill).
    pub(crate) stdout: Vec<u8>,
    /// What it wrote to standard error.
    pub(crate) stderr: Vec<u8>,
}

/// Starts `cmd` in a process group of its own, with standard output and
/// error collected, and waits for it until `timeout` has passed (on the
/// monotonic clock). At the deadline the whole group gets `SIGKILL` and is
/// reaped; a process that cannot be reaped then is left to a detached thread
/// that reaps it when it finally dies.
///
/// `Err` only when the program could not be started.
pub(crate) fn run_within(cmd: &mut Command, timeout: Duration) -> io::Result<Ended> {
    let start = Instant::now();
    let deadline = start + timeout;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let stdout = collect(child.stdout.take(), done_tx.clone());
    let stderr = collect(child.stderr.take(), done_tx);

    let (status, killed, elapsed) = match wait_until(&mut child, deadline) {
        Some(status) => (Some(status), false, start.elapsed()),
        None => {
            let elapsed = start.elapsed();
            kill_group(&mut child);
            let status = wait_until(&mut child, Instant::now() + AFTER_KILL);
            if status.is_none() {
                reap_later(child);
            }
            (status, true, elapsed)
        }
    };
    // The readers end when every holder of the pipes has closed them; a
    // process that left the group (or cannot die) may hold them for ever.
    let readers_until = if killed {
        Instant::now() + AFTER_KILL
    } else {
        deadline.max(Instant::now())
    };
    // Disconnected: both readers are done; Timeout: take what they have.
    let _ = done_rx.recv_timeout(readers_until.saturating_duration_since(Instant::now()));
    Ok(Ended {
        status,
        killed,
        elapsed,
        stdout: take(&stdout),
        stderr: take(&stderr),
    })
}

/// Polls `child` until it ends or `deadline` passes; `None` at the deadline.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            // ECHILD: nothing left to wait for; the caller kills and gives up.
            Err(_) => return None,
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(MAX_POLL);
    }
}

/// `SIGKILL` to the child's process group (its pid: it was started with
/// `process_group(0)`), so what it started dies with it; to the child alone
/// if that fails.
fn kill_group(child: &mut Child) {
    let pid = rustix::process::Pid::from_child(child);
    // kill(-1) would signal every process this one may signal; a child is
    // never pid 1 in this process's namespace, but that is not left to
    // chance.
    let group_killed = pid != rustix::process::Pid::INIT
        && rustix::process::kill_process_group(pid, rustix::process::Signal::KILL).is_ok();
    if !group_killed {
        let _ = child.kill();
    }
}

/// Leaves `child` to a detached thread that reaps it whenever it dies, so
/// no zombie is left behind.
fn reap_later(mut child: Child) {
    let spawned = thread::Builder::new()
        .name("ipvsctl-kmod-reap".into())
        .spawn(move || {
            let _ = child.wait();
        });
    // Without a thread the child stays a zombie once it dies: nothing else
    // can be done about it here.
    drop(spawned);
}

type Buffer = Arc<Mutex<Vec<u8>>>;

/// Reads `pipe` to its end on a thread of its own, into a buffer that can be
/// taken at any time; `done` is dropped at the end.
fn collect(pipe: Option<impl Read + Send + 'static>, done: mpsc::Sender<()>) -> Buffer {
    let buffer = Buffer::default();
    let Some(mut pipe) = pipe else {
        return buffer;
    };
    let sink = Arc::clone(&buffer);
    let spawned = thread::Builder::new()
        .name("ipvsctl-kmod-output".into())
        .spawn(move || {
            let _done = done;
            let mut chunk = [0u8; 4096];
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => sink
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        });
    // Without a reader the output is lost, and the wait ends at the deadline.
    drop(spawned);
    buffer
}

fn take(buffer: &Buffer) -> Vec<u8> {
    std::mem::take(&mut *buffer.lock().unwrap_or_else(|e| e.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(script).stdin(Stdio::null());
        cmd
    }

    #[test]
    fn a_program_that_ends_in_time_keeps_its_output_and_status() {
        let ended = run_within(
            &mut sh("echo out; echo err >&2; exit 3"),
            Duration::from_secs(20),
        )
        .unwrap();
        assert!(!ended.killed);
        assert_eq!(ended.status.and_then(|s| s.code()), Some(3));
        assert_eq!(ended.stdout, b"out\n");
        assert_eq!(ended.stderr, b"err\n");
    }

    #[test]
    fn the_group_is_killed_at_the_deadline_with_what_it_printed() {
        let timeout = Duration::from_millis(300);
        let start = Instant::now();
        // A background child of the program, in its group, holds the pipes.
        let ended = run_within(
            &mut sh("sleep 3600 & echo started; exec sleep 3600"),
            timeout,
        )
        .unwrap();
        let took = start.elapsed();
        assert!(ended.killed);
        assert!(ended.elapsed >= timeout, "{:?}", ended.elapsed);
        assert!(took < timeout + Duration::from_secs(3), "{took:?}");
        assert_eq!(ended.stdout, b"started\n");
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(ended.status.and_then(|s| s.signal()), Some(9));
    }
}
