//! `-R --replace-table`, pure part: the table a rule file describes
//! (running its commands on an empty table, with the errors the kernel
//! would give), as the desired state of `ipvsctl::sync`, which plans and
//! applies it in one pipelined pass: what stays is updated in place, never
//! deleted and re-created. Also [`op_line`], an operation as a command line.

use std::collections::HashMap;
use std::fmt::Write as _;

use ipvsctl::batch::Write;
use ipvsctl::model::{RealServer, ServiceKey, Timeouts, VirtualServer};
use ipvsctl::sync::{DesiredError, DesiredState};

use super::format::{Numeric, service_name};
use super::rules::{CliError, Command, Format, ParseError, Rule};

/// A service and its real servers, in the order the rules gave them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceState {
    /// The service.
    pub service: VirtualServer,
    /// Its real servers.
    pub servers: Vec<RealServer>,
}

/// What the rules describe.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Desired {
    /// Services in the order they were first added.
    pub services: Vec<ServiceState>,
    /// `--set` values, if the rules set timeouts (the last one wins).
    pub timeouts: Option<Timeouts>,
}

fn line_error(line: usize, message: &str) -> ParseError {
    ParseError {
        line,
        error: CliError {
            message: message.to_owned(),
            status: 255,
            exits: true,
        },
    }
}

/// Runs the rules on an empty table, in order, the way the kernel would
/// (the same errors ipvsadm would print for the same line), and returns the
/// table they leave.
#[allow(dead_code)] // the tests' and the fuzz target's entry point
pub fn desired<'a, R>(rules: R) -> Result<Desired, ParseError>
where
    R: IntoIterator<Item = &'a Rule>,
    R::IntoIter: Clone,
{
    let rules = rules.into_iter();
    let adds = rules
        .clone()
        .filter(|r| matches!(r.command, Command::AddService(_)))
        .count();
    let mut table = Table::with_capacity(adds);
    for rule in rules {
        table.run(rule)?;
    }
    Ok(table.finish())
}

/// A table being built from rules, one at a time (see [`desired`]), so
/// that a restore can build it while later lines are still being parsed.
#[derive(Debug, Default)]
pub struct Table {
    /// Services in the order they were first added; `None` once deleted.
    services: Vec<Option<ServiceState>>,
    index: HashMap<ServiceKey, usize>,
    /// The service the previous rule named: a rule file lists a service's
    /// real servers right after it, and comparing a key is much cheaper
    /// than hashing it (100,000 lookups in a 10,000-service restore).
    last: Option<(ServiceKey, usize)>,
    timeouts: Option<Timeouts>,
}

impl Table {
    /// An empty table with room for `services` services.
    pub fn with_capacity(services: usize) -> Self {
        Table {
            services: Vec::with_capacity(services),
            index: HashMap::with_capacity(services),
            ..Table::default()
        }
    }

    /// The live service with this key.
    fn find(&mut self, key: &ServiceKey) -> Option<&mut ServiceState> {
        let i = match self.last {
            Some((k, i)) if k == *key => i,
            _ => {
                let i = self.index.get(key).copied()?;
                self.last = Some((*key, i));
                i
            }
        };
        self.services.get_mut(i).and_then(Option::as_mut)
    }

    /// Runs one rule.
    pub fn run(&mut self, rule: &Rule) -> Result<(), ParseError> {
        let line = rule.line;
        match &rule.command {
            Command::AddService(vs) => {
                if self.find(&vs.key).is_some() {
                    return Err(line_error(line, "Service already exists"));
                }
                self.index.insert(vs.key, self.services.len());
                self.services.push(Some(ServiceState {
                    service: vs.clone(),
                    servers: Vec::new(),
                }));
            }
            Command::EditService(vs) => {
                let slot = self
                    .find(&vs.key)
                    .ok_or_else(|| line_error(line, "No such service"))?;
                slot.service = vs.clone();
            }
            Command::DeleteService(key) => {
                self.last = None;
                let i = self
                    .index
                    .remove(key)
                    .ok_or_else(|| line_error(line, "No such service"))?;
                if let Some(slot) = self.services.get_mut(i) {
                    *slot = None;
                }
            }
            Command::AddServer(key, rs) | Command::EditServer(key, rs) => {
                let adding = matches!(rule.command, Command::AddServer(..));
                let svc = self
                    .find(key)
                    .ok_or_else(|| line_error(line, "Service not defined"))?;
                let at = svc.servers.iter().position(|s| s.addr == rs.addr);
                match (adding, at) {
                    (true, None) => svc.servers.push(*rs),
                    (true, Some(_)) => return Err(line_error(line, "Destination already exists")),
                    (false, Some(i)) => {
                        if let Some(s) = svc.servers.get_mut(i) {
                            *s = *rs;
                        }
                    }
                    (false, None) => return Err(line_error(line, "No such destination")),
                }
            }
            Command::DeleteServer(key, addr) => {
                let svc = self
                    .find(key)
                    .ok_or_else(|| line_error(line, "Service not defined"))?;
                let at = svc
                    .servers
                    .iter()
                    .position(|s| s.addr == *addr)
                    .ok_or_else(|| line_error(line, "No such destination"))?;
                svc.servers.remove(at);
            }
            Command::Clear => {
                self.last = None;
                self.services.clear();
                self.index.clear();
            }
            Command::SetTimeouts(t) => self.timeouts = Some(*t),
            _ => {
                return Err(line_error(
                    line,
                    "only -A -E -D -a -e -d -C and --set can be restored",
                ));
            }
        }
        Ok(())
    }

    /// The table the rules left.
    pub fn finish(self) -> Desired {
        Desired {
            services: self.services.into_iter().flatten().collect(),
            timeouts: self.timeouts,
        }
    }
}

/// The rules' table as the bulk-sync desired state (which validates every
/// service and server, and sorts servers by address).
pub fn desired_state(d: &Desired) -> Result<DesiredState, Box<DesiredError>> {
    let mut state = DesiredState::with_capacity(d.services.len());
    for s in &d.services {
        state
            .insert(s.service.clone(), s.servers.iter().copied())
            .map_err(Box::new)?;
    }
    Ok(state)
}

/// An operation as an ipvsadm command line (numeric), for `--dry-run` and
/// error messages. Unlike `-S` lines, real-server lines carry their
/// thresholds, and firewall marks above `i32::MAX` are written unsigned, so
/// that the line parses again.
pub fn op_line(op: &Write) -> String {
    let f = Format {
        numeric: true,
        rule: true,
        unsigned_marks: true,
        ..Format::default()
    };
    let mut out = String::new();
    match op {
        Write::AddService(vs) | Write::UpdateService(vs) => {
            let cmd = if matches!(op, Write::AddService(_)) {
                "-A"
            } else {
                "-E"
            };
            let mut e = super::format::Entry {
                service: ipvsctl::model::ServiceSnapshot::new(vs.clone()),
                dests: Vec::new(),
            };
            super::format::service_entry(&mut out, &mut e, &f, &Numeric);
            let line = out.trim_end().strip_prefix("-A").unwrap_or(&out).to_owned();
            return format!("{cmd}{line}");
        }
        Write::DeleteService(key) => {
            let vs = VirtualServer::new(*key);
            let _ = write!(out, "-D {}", service_name(&vs, &f, &Numeric));
        }
        Write::AddDestination(key, rs) | Write::UpdateDestination(key, rs) => {
            let cmd = if matches!(op, Write::AddDestination(..)) {
                "-a"
            } else {
                "-e"
            };
            let mut e = super::format::Entry {
                service: ipvsctl::model::ServiceSnapshot::new(VirtualServer::new(*key)),
                dests: vec![ipvsctl::model::DestinationSnapshot::new(*rs)],
            };
            let mut both = String::new();
            super::format::service_entry(&mut both, &mut e, &f, &Numeric);
            let dest = both.lines().nth(1).unwrap_or("");
            let _ = write!(out, "{cmd}{}", dest.strip_prefix("-a").unwrap_or(dest));
            if rs.upper_threshold != 0 {
                let _ = write!(out, " -x {}", rs.upper_threshold);
            }
            if rs.lower_threshold != 0 {
                let _ = write!(out, " -y {}", rs.lower_threshold);
            }
        }
        Write::DeleteDestination(key, addr) => {
            let vs = VirtualServer::new(*key);
            let _ = write!(
                out,
                "-d {} -r {}",
                service_name(&vs, &f, &Numeric),
                super::format::addrport(*addr, ipvsctl::model::Protocol::Tcp, &f, &Numeric)
            );
        }
        // A write ipvsadm has no rule for: named as a comment line.
        other => {
            let _ = write!(out, "# {}", other.operation());
        }
    }
    out
}
