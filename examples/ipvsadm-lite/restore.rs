//! `-R`, pure part: the table a rule file describes (running its commands
//! on an empty table, with the errors the kernel would give), as the
//! desired state of `ipvsctl::sync`, which plans and applies it in one
//! pipelined pass: what stays is updated in place, never deleted and
//! re-created.

use std::collections::HashMap;
use std::fmt::Write as _;

use ipvsctl::Op;
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
        },
    }
}

/// Runs the rules on an empty table, in order, the way the kernel would
/// (the same errors ipvsadm would print for the same line), and returns the
/// table they leave.
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
    let mut services: Vec<Option<ServiceState>> = Vec::with_capacity(adds);
    let mut index: HashMap<ServiceKey, usize> = HashMap::with_capacity(adds);
    // The service the previous line named: a rule file lists a service's
    // real servers right after it, and comparing a key is much cheaper than
    // hashing it (100,000 lookups in a 10,000-service restore).
    let mut last: Option<(ServiceKey, usize)> = None;
    let mut timeouts = None;
    for rule in rules {
        let line = rule.line;
        let mut find = |index: &HashMap<ServiceKey, usize>, key: &ServiceKey| match last {
            Some((k, i)) if k == *key => Some(i),
            _ => {
                let i = index.get(key).copied()?;
                last = Some((*key, i));
                Some(i)
            }
        };
        match &rule.command {
            Command::AddService(vs) => {
                if find(&index, &vs.key).is_some() {
                    return Err(line_error(line, "Service already exists"));
                }
                index.insert(vs.key, services.len());
                services.push(Some(ServiceState {
                    service: vs.clone(),
                    servers: Vec::new(),
                }));
            }
            Command::EditService(vs) => {
                let slot = find(&index, &vs.key)
                    .and_then(|i| services.get_mut(i))
                    .and_then(Option::as_mut)
                    .ok_or_else(|| line_error(line, "No such service"))?;
                slot.service = vs.clone();
            }
            Command::DeleteService(key) => {
                last = None;
                let i = index
                    .remove(key)
                    .ok_or_else(|| line_error(line, "No such service"))?;
                if let Some(slot) = services.get_mut(i) {
                    *slot = None;
                }
            }
            Command::AddServer(key, rs) | Command::EditServer(key, rs) => {
                let adding = matches!(rule.command, Command::AddServer(..));
                let svc = find(&index, key)
                    .and_then(|i| services.get_mut(i))
                    .and_then(Option::as_mut)
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
                let svc = find(&index, key)
                    .and_then(|i| services.get_mut(i))
                    .and_then(Option::as_mut)
                    .ok_or_else(|| line_error(line, "Service not defined"))?;
                let at = svc
                    .servers
                    .iter()
                    .position(|s| s.addr == *addr)
                    .ok_or_else(|| line_error(line, "No such destination"))?;
                svc.servers.remove(at);
            }
            Command::Clear => {
                last = None;
                services.clear();
                index.clear();
            }
            Command::SetTimeouts(t) => timeouts = Some(*t),
            _ => {
                return Err(line_error(
                    line,
                    "only -A -E -D -a -e -d -C and --set can be restored",
                ));
            }
        }
    }
    Ok(Desired {
        services: services.into_iter().flatten().collect(),
        timeouts,
    })
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
pub fn op_line(op: &Op) -> String {
    let f = Format {
        numeric: true,
        rule: true,
        unsigned_marks: true,
        ..Format::default()
    };
    let mut out = String::new();
    match op {
        Op::AddService(vs) | Op::UpdateService(vs) => {
            let cmd = if matches!(op, Op::AddService(_)) {
                "-A"
            } else {
                "-E"
            };
            let mut e = super::format::Entry {
                service: ipvsctl::model::ServiceSnapshot {
                    service: vs.clone(),
                    stats: Default::default(),
                },
                dests: Vec::new(),
            };
            super::format::service_entry(&mut out, &mut e, &f, &Numeric);
            let line = out.trim_end().strip_prefix("-A").unwrap_or(&out).to_owned();
            return format!("{cmd}{line}");
        }
        Op::DeleteService(key) => {
            let vs = VirtualServer::new(*key);
            let _ = write!(out, "-D {}", service_name(&vs, &f, &Numeric));
        }
        Op::AddDestination(key, rs) | Op::UpdateDestination(key, rs) => {
            let cmd = if matches!(op, Op::AddDestination(..)) {
                "-a"
            } else {
                "-e"
            };
            let mut e = super::format::Entry {
                service: ipvsctl::model::ServiceSnapshot {
                    service: VirtualServer::new(*key),
                    stats: Default::default(),
                },
                dests: vec![ipvsctl::model::DestinationSnapshot {
                    server: *rs,
                    conns: Default::default(),
                    stats: Default::default(),
                }],
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
        Op::DeleteDestination(key, addr) => {
            let vs = VirtualServer::new(*key);
            let _ = write!(
                out,
                "-d {} -r {}",
                service_name(&vs, &f, &Numeric),
                super::format::addrport(*addr, ipvsctl::model::Protocol::Tcp, &f, &Numeric)
            );
        }
    }
    out
}
