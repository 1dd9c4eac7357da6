//! The health checkers of keepalived-lite and their scheduler.
//!
//! - [`run_attempt`]: one attempt of a checker (`TCP_CHECK`, `HTTP_GET`,
//!   `MISC_CHECK`, `UDP_CHECK`), bounded by its timeouts.
//! - [`machine::Machine`]: keepalived 2.2.7's per-checker state machine
//!   (retries, `delay_loop`, `warmup`, `alpha`), pure: it is fed instants
//!   and attempt results and says when the next attempt is due and what
//!   changed, as values ([`machine::Report`]) apart from their log text
//!   ([`log::Event`]).
//! - [`pool::Pool`]: N worker threads running due attempts from one due-time
//!   queue, reporting changes over an `mpsc` channel.
//!
//! How this module reaches the model: as `crate::config::model`. The example
//! binary declares `mod config; mod check;` in main.rs, and config/mod.rs
//! declares `pub mod model;`. A test crate compiling these files declares
//! the model with a `#[path]` and re-exports it under the same name:
//!
//! ```ignore
//! #[allow(dead_code)]
//! #[path = "../examples/keepalived-lite/config/model.rs"]
//! mod model;
//! mod config { pub(crate) use super::model; }
//! #[allow(dead_code)]
//! #[path = "../examples/keepalived-lite/check/mod.rs"]
//! mod check;
//! ```

pub mod http;
pub mod log;
pub mod machine;
pub mod misc;
mod net;
pub mod pool;
pub mod tcp;
pub mod udp;

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::model::{CheckKind, CheckerConf};

/// The result of one attempt of a checker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// The service answered as required.
    Up {
        /// `MISC_CHECK` with `misc_dynamic` and an exit status of 2-255:
        /// the weight it asks for (status - 2). None: the configured weight.
        weight: Option<u32>,
    },
    /// The check failed.
    Down {
        /// Why, in words (not a keepalived log line: keepalived logs these
        /// only with `log_all_failures`).
        reason: String,
        /// For `MISC_CHECK`, how the script ended (its log line says it).
        script: Option<ScriptEnd>,
    },
    /// The check could not be run at all (keepalived: a socket or bind
    /// error, "Rescheduling."): no state change, next try after `delay_loop`.
    Error {
        /// Why, in words.
        reason: String,
    },
}

impl Attempt {
    /// A failure with a reason and no script status.
    pub fn down(reason: impl Into<String>) -> Attempt {
        Attempt::Down {
            reason: reason.into(),
            script: None,
        }
    }

    /// Whether the attempt succeeded.
    pub fn is_up(&self) -> bool {
        matches!(self, Attempt::Up { .. })
    }
}

/// How a `MISC_CHECK` script that counts as a failure ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptEnd {
    /// It exited with this status (1, or 2-255 without `misc_dynamic`).
    Exited(i32),
    /// A signal we did not send ended it.
    Signalled(i32),
    /// It ran past `misc_timeout` and was terminated.
    TimedOut,
}

/// Lets a pool's shutdown cut running attempts short: scripts still
/// running are killed (their process groups), and attempts not yet started
/// return at once.
#[derive(Debug, Default)]
pub struct Cancel {
    cancelled: AtomicBool,
    /// Process groups of running scripts, so that cancelling can kill them.
    groups: Mutex<HashSet<i32>>,
}

impl Cancel {
    /// A token not cancelled.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Whether [`Cancel::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Marks cancelled and kills every running script's process group.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        for &pgid in groups.iter() {
            misc::kill_group(pgid, misc::SIGKILL);
        }
    }

    /// Registers a running script's group; false (and nothing registered)
    /// if already cancelled, so the caller kills it itself.
    fn register(&self, pgid: i32) -> bool {
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        // Checked under the lock so that `cancel` cannot miss the group.
        if self.is_cancelled() {
            return false;
        }
        groups.insert(pgid);
        true
    }

    fn unregister(&self, pgid: i32) {
        self.groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&pgid);
    }
}

/// Runs one attempt of `conf`. For `HTTP_GET`, `url` is the index of the
/// `url` block to fetch (keepalived checks one url per attempt; the state
/// machine says which, [`machine::Machine::url`]); other kinds ignore it.
pub fn run_attempt(conf: &CheckerConf, url: usize, cancel: &Cancel) -> Attempt {
    if cancel.is_cancelled() {
        return Attempt::Error {
            reason: "cancelled".into(),
        };
    }
    match &conf.kind {
        CheckKind::Tcp => tcp::attempt(conf),
        CheckKind::Http(h) => match h.urls.get(url) {
            Some(u) => http::attempt(conf, h, u),
            // No url at all: keepalived counts the server as up.
            None => Attempt::Up { weight: None },
        },
        CheckKind::Misc(m) => misc::attempt(m, cancel),
        CheckKind::Udp(u) => udp::attempt(conf, u),
    }
}
