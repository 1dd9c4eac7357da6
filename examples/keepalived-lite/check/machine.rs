//! keepalived 2.2.7's checker state machine, without a clock: fed the
//! instants an attempt started and ended and its result, it says when the
//! next attempt is due, which url it fetches, and what changed.
//!
//! The rules differ per kind, as in keepalived (each checker has its own
//! epilog): `tcp_epilog` (check_tcp.c), `udp_epilog` (check_udp.c),
//! `epilog`/`timeout_epilog` (check_http.c) and `misc_check_child_thread`
//! (check_misc.c). Common start (check_data.c): the checker is up unless
//! `alpha`, has not run, and its retry counter starts at `retry`, so the
//! very first failure counts at once. The first attempt is due 1 s
//! (keepalived's bootstrap delay) plus a random part of `warmup` after
//! start.

use std::time::{Duration, Instant};

use super::log::Event;
use super::{Attempt, ScriptEnd};
use crate::config::model::{CheckKind, CheckerConf};

/// keepalived's delay before a checker's first attempt (BOOTSTRAP_DELAY).
pub const BOOTSTRAP_DELAY: Duration = Duration::from_secs(1);

/// A change of a checker's up/down state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Went up.
    Up,
    /// Went down.
    Down,
}

/// What one recorded attempt changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    /// The checker's state changed.
    pub transition: Option<Transition>,
    /// `MISC_CHECK` `misc_dynamic`: the weight this checker now asks for
    /// changed (`Some(None)`: back to the configured weight).
    pub weight: Option<Option<u32>>,
    /// The log lines keepalived writes here, as values.
    pub events: Vec<Event>,
}

impl Report {
    /// Nothing to tell.
    pub fn is_empty(&self) -> bool {
        self.transition.is_none() && self.weight.is_none() && self.events.is_empty()
    }
}

#[derive(Debug, Clone)]
enum Flavour {
    Tcp,
    Udp,
    Http {
        /// Per url: has a digest, and its path (for the log line).
        urls: Vec<(bool, String)>,
        /// The url the next attempt fetches (keepalived's url_it); None
        /// only transiently.
        url_it: Option<usize>,
        /// The url that failed and is being retried (failed_url).
        failed_url: Option<usize>,
    },
    Misc {
        script: String,
        /// The weight last reported; None after a failure, so that the
        /// next success reports its weight again (keepalived compares exit
        /// statuses, and a failing status differs from every success).
        last_weight: Option<Option<u32>>,
    },
}

/// One checker's state.
#[derive(Debug, Clone)]
pub struct Machine {
    flavour: Flavour,
    retry: u32,
    delay_loop: Duration,
    delay_before_retry: Duration,
    is_up: bool,
    has_run: bool,
    retry_it: u32,
    due: Instant,
}

impl Machine {
    /// A checker started at `now`; `jitter` in [0, 1] picks the part of
    /// `warmup` to wait (the caller's randomness keeps this pure).
    pub fn new(conf: &CheckerConf, now: Instant, jitter: f64) -> Machine {
        let flavour = match &conf.kind {
            CheckKind::Tcp => Flavour::Tcp,
            CheckKind::Udp(_) => Flavour::Udp,
            CheckKind::Http(h) => Flavour::Http {
                urls: h
                    .urls
                    .iter()
                    .map(|u| (u.digest.is_some(), u.path.clone()))
                    .collect(),
                url_it: Some(0),
                failed_url: None,
            },
            CheckKind::Misc(m) => Flavour::Misc {
                script: m.argv.first().cloned().unwrap_or_default(),
                last_weight: Some(None),
            },
        };
        let warmup = conf
            .warmup
            .unwrap_or_default()
            .mul_f64(jitter.clamp(0.0, 1.0));
        Machine {
            flavour,
            retry: conf.retry,
            delay_loop: conf.delay_loop,
            delay_before_retry: conf.delay_before_retry,
            is_up: !conf.alpha,
            has_run: false,
            retry_it: conf.retry,
            due: now + BOOTSTRAP_DELAY + warmup,
        }
    }

    /// When the next attempt is due.
    pub fn due(&self) -> Instant {
        self.due
    }

    /// The url index the next attempt fetches (`HTTP_GET`; 0 otherwise).
    pub fn url(&self) -> usize {
        match &self.flavour {
            Flavour::Http { url_it, .. } => url_it.unwrap_or(0),
            _ => 0,
        }
    }

    /// Whether the checker is up.
    pub fn is_up(&self) -> bool {
        self.is_up
    }

    /// Records an attempt that started at `started` and ended at `now`.
    pub fn record(&mut self, started: Instant, now: Instant, attempt: &Attempt) -> Report {
        let mut r = Report::default();
        match self.flavour {
            Flavour::Tcp => self.tcp(now, attempt, &mut r),
            Flavour::Udp => self.udp(now, attempt, &mut r),
            Flavour::Http { .. } => self.http(now, attempt, &mut r),
            Flavour::Misc { .. } => self.misc(started, now, attempt, &mut r),
        }
        r
    }

    /// keepalived's update_svr_checker_state, for this checker.
    fn set_state(&mut self, up: bool, r: &mut Report) {
        if self.is_up != up {
            self.is_up = up;
            r.transition = Some(if up { Transition::Up } else { Transition::Down });
        }
        self.has_run = true;
    }

    /// "failed after N retries." once it has run and retries are on.
    fn retries(&self, n: u32) -> Option<u32> {
        (self.has_run && self.retry > 0).then_some(n)
    }

    fn tcp(&mut self, now: Instant, a: &Attempt, r: &mut Report) {
        if let Attempt::Error { .. } = a {
            r.events.push(Event::Rescheduling { http: false });
            self.due = now + self.delay_loop;
            return;
        }
        let ok = a.is_up();
        let delay = if ok || self.retry_it >= self.retry {
            self.retry_it = 0;
            if ok && (!self.is_up || !self.has_run) {
                r.events.push(Event::TcpSuccess);
                self.set_state(true, r);
            } else if !ok && (self.is_up || !self.has_run) {
                r.events.push(Event::TcpFailed {
                    retries: self.retries(self.retry),
                });
                self.set_state(false, r);
            }
            self.delay_loop
        } else {
            // Counted even while down: a down TCP checker also retries.
            self.retry_it += 1;
            self.delay_before_retry
        };
        self.has_run = true;
        self.due = now + delay;
    }

    fn udp(&mut self, now: Instant, a: &Attempt, r: &mut Report) {
        let ok = a.is_up();
        let mut delay = self.delay_loop;
        if ok || ((self.is_up || !self.has_run) && self.retry_it >= self.retry) {
            self.retry_it = 0;
            if ok && (!self.is_up || !self.has_run) {
                r.events.push(Event::UdpSuccess);
                self.set_state(true, r);
            } else if !ok && (self.is_up || !self.has_run) {
                r.events.push(Event::UdpFailed {
                    retries: self.retries(self.retry),
                });
                self.set_state(false, r);
            }
        } else if self.is_up {
            // Unlike TCP, only an up UDP checker retries.
            self.retry_it += 1;
            delay = self.delay_before_retry;
        }
        self.has_run = true;
        self.due = now + delay;
    }

    fn http(&mut self, now: Instant, a: &Attempt, r: &mut Report) {
        #[derive(PartialEq)]
        enum Method {
            New,
            Retry,
            Failed,
        }
        let Flavour::Http { urls, url_it, .. } = &self.flavour else {
            return;
        };
        let method = match a {
            Attempt::Error { .. } => {
                r.events.push(Event::Rescheduling { http: true });
                self.due = now + self.delay_loop;
                return;
            }
            Attempt::Up { .. } => {
                if !self.is_up
                    && let Some((digest, path)) = url_it.and_then(|i| urls.get(i))
                {
                    r.events.push(Event::HttpUrlSuccess {
                        digest: *digest,
                        path: path.clone(),
                    });
                }
                Method::New
            }
            // timeout_epilog: retried while up or before the first report.
            Attempt::Down { .. } if self.is_up || !self.has_run => {
                self.has_run = true;
                Method::Retry
            }
            Attempt::Down { .. } => Method::Failed,
        };
        let n = urls.len();
        let mut url_it = *url_it;
        let mut failed_url = match &self.flavour {
            Flavour::Http { failed_url, .. } => *failed_url,
            _ => None,
        };
        match method {
            Method::New => {
                url_it = url_it.map(|i| i + 1).filter(|&i| i < n);
                self.retry_it = 0;
            }
            Method::Retry => self.retry_it += 1,
            Method::Failed => {}
        }
        if method == Method::New && url_it.is_none() && failed_url.is_none() {
            // A whole round of urls passed.
            if !self.is_up || !self.has_run {
                r.events.push(Event::HttpSuccess);
                self.set_state(true, r);
            }
            url_it = Some(0);
            self.retry_it = 0;
        } else if method == Method::Retry && self.retry_it > self.retry {
            if self.is_up || !self.has_run {
                r.events.push(Event::HttpFailed {
                    retries: self.retries(self.retry_it - 1),
                });
                self.set_state(false, r);
            }
            failed_url = url_it;
        } else if method == Method::New && failed_url.is_some() {
            // The failing url passes again: start a clean round.
            failed_url = None;
            url_it = Some(0);
            self.retry_it = 0;
        }
        let delay = if method == Method::New {
            if !self.has_run {
                self.retry_it = self.retry;
            }
            self.delay_loop
        } else if failed_url.is_some() {
            self.delay_before_retry.max(self.delay_loop)
        } else {
            self.delay_before_retry
        };
        if let Flavour::Http {
            url_it: u,
            failed_url: f,
            ..
        } = &mut self.flavour
        {
            *u = url_it;
            *f = failed_url;
        }
        self.due = now + delay;
    }

    fn misc(&mut self, started: Instant, now: Instant, a: &Attempt, r: &mut Report) {
        let Flavour::Misc {
            script,
            last_weight,
        } = &mut self.flavour
        else {
            return;
        };
        let script = script.clone();
        match a {
            Attempt::Up { weight } => {
                if *last_weight != Some(*weight) {
                    *last_weight = Some(*weight);
                    r.weight = Some(*weight);
                }
                if !self.is_up || !self.has_run {
                    r.events.push(Event::MiscSuccess { script });
                    self.set_state(true, r);
                }
                self.retry_it = 0;
            }
            Attempt::Down { script: end, .. } if self.is_up || !self.has_run => {
                if self.retry_it < self.retry {
                    self.retry_it += 1;
                } else {
                    self.retry_it = 0;
                    *last_weight = None;
                    let end = end.unwrap_or(ScriptEnd::Exited(1));
                    r.events.push(Event::MiscFailed {
                        script,
                        retry: self.retry,
                        end,
                    });
                    self.set_state(false, r);
                }
            }
            // Down while already down, or the script could not be set up.
            Attempt::Down { .. } | Attempt::Error { .. } => {}
        }
        // keepalived times the next run from this run's start.
        let delay = if self.retry_it > 0 {
            self.delay_before_retry
        } else {
            self.delay_loop
        };
        self.due = (started + delay).max(now + Duration::from_micros(1));
        self.has_run = true;
    }
}
