//! `-R` the way ipvsadm 1.31 does it: the rule file's lines run in order,
//! each as its own command. A line the kernel refuses prints ipvsadm's message
//! (without a line number) and the next line runs; the exit status is the
//! last line's (0, or 255 when it failed); nothing the file does not say
//! is deleted.
//!
//! Unlike ipvsadm, the whole file is parsed before anything is sent: a line
//! ipvsadm exits on (a bad value, a missing command) changes nothing here,
//! where ipvsadm has already run the lines before it. Lines ipvsadm only
//! reports (an unknown option, a missing option value) are reported in
//! their place and skipped, as ipvsadm does.
//!
//! Runs of service and server changes (`-A -E -D -a -e -d`) go to the kernel
//! pipelined, many requests per datagram, with an answer for each failing
//! line, so the messages still come in line order; any other line (`-C`,
//! `--set`, `-Z`, a listing, the daemons) runs on its own, in its place.

use std::fmt::Write as _;

use ipvsctl::Handle;
use ipvsctl::batch::{BatchMode, Write};
use ipvsctl::model::DaemonRole;

use super::format::{Numeric, service_name};
use super::restore::op_line;
use super::rules::{CliError, Command, Format, ParseError, Rule};
use super::{Failure, KOp, kernel_failure};

/// One line of a rule file, in the order `-R` meets them.
#[derive(Debug)]
pub enum Step {
    /// A line to run.
    Run(Command),
    /// A line ipvsadm reports and skips.
    Skip(CliError),
}

/// A part's rules and skipped lines merged into `steps` by line number.
pub fn merge_into(steps: &mut Vec<(usize, Step)>, rules: Vec<Rule>, skipped: Vec<ParseError>) {
    steps.reserve(rules.len() + skipped.len());
    let mut skipped = skipped.into_iter().peekable();
    for rule in rules {
        while let Some(s) = skipped.next_if(|s| s.line < rule.line) {
            steps.push((s.line, Step::Skip(s.error)));
        }
        steps.push((rule.line, Step::Run(rule.command)));
    }
    steps.extend(skipped.map(|s| (s.line, Step::Skip(s.error))));
}

/// The change of a service or server a command is, if it is one (those go
/// to the kernel in pipelined batches); the command back otherwise.
fn as_op(command: Command) -> Result<Write, Command> {
    Ok(match command {
        Command::AddService(vs) => Write::AddService(vs),
        Command::EditService(vs) => Write::UpdateService(vs),
        Command::DeleteService(key) => Write::DeleteService(key),
        Command::AddServer(key, rs) => Write::AddDestination(key, rs),
        Command::EditServer(key, rs) => Write::UpdateDestination(key, rs),
        Command::DeleteServer(key, addr) => Write::DeleteDestination(key, addr),
        other => return Err(other),
    })
}

/// Which libipvs call an operation is, for its messages.
pub fn kop(op: &Write) -> KOp {
    match op {
        Write::AddService(_) => KOp::AddService,
        Write::UpdateService(_) => KOp::EditService,
        Write::DeleteService(_) => KOp::DelService,
        Write::AddDestination(..) => KOp::AddDest,
        Write::UpdateDestination(..) => KOp::EditDest,
        Write::DeleteDestination(..) => KOp::DelDest,
        _ => KOp::Other,
    }
}

/// How a run of lines ended: the failures by step index, and the index of
/// the last step that ran (its status is the exit status).
#[derive(Default)]
struct Outcome {
    failures: Vec<(usize, Failure)>,
    last: Option<usize>,
    /// A step after which ipvsadm exits (a listing that failed, `-h`).
    stopped: bool,
}

/// Sends the pending operations as one pipelined batch and records their
/// failures.
fn send(ipvs: &Handle, pending: &mut Vec<(usize, Write)>, outcome: &mut Outcome) {
    if pending.is_empty() {
        return;
    }
    let steps: Vec<usize> = pending.iter().map(|(i, _)| *i).collect();
    let kops: Vec<KOp> = pending.iter().map(|(_, op)| kop(op)).collect();
    let report = ipvs.apply_with(
        pending.drain(..).map(|(_, op)| op),
        BatchMode::Pipelined,
        |_, _| {},
    );
    for (index, error) in report.failed {
        if let (Some(&step), Some(&k)) = (steps.get(index), kops.get(index)) {
            outcome.failures.push((step, kernel_failure(k, &error)));
        }
    }
    if let Some(error) = report.aborted {
        // The socket failed: what was not answered is unknown, and the lines
        // after it are not run.
        let last = steps.last().copied().unwrap_or_default();
        outcome
            .failures
            .push((last, kernel_failure(KOp::Other, &error)));
        outcome.last = Some(last);
        outcome.stopped = true;
    }
}

/// Runs the steps against the kernel, line by line as ipvsadm does; the
/// output of listings (and `-h`, `-v`) goes to `out`.
pub fn run(
    ipvs: &Handle,
    steps: Vec<(usize, Step)>,
    mut single: impl FnMut(Command, &mut String) -> Result<(), Failure>,
    out: &mut String,
) -> Result<(), Failure> {
    let mut outcome = Outcome::default();
    let mut pending: Vec<(usize, Write)> = Vec::new();
    for (i, (_, step)) in steps.into_iter().enumerate() {
        outcome.last = Some(i);
        let command = match step {
            Step::Skip(e) => {
                let status = u8::try_from(e.status).unwrap_or(255);
                outcome.failures.push((i, Failure::new(e.message, status)));
                continue;
            }
            Step::Run(command) => command,
        };
        let command = match as_op(command) {
            Ok(op) => {
                pending.push((i, op));
                continue;
            }
            Err(command) => command,
        };
        send(ipvs, &mut pending, &mut outcome);
        if outcome.stopped {
            break;
        }
        // ipvsadm exits after a listing that failed and after -h or -v.
        let ends = matches!(
            command,
            Command::List(..) | Command::Save(_) | Command::Help | Command::Version
        );
        let stops_always = matches!(command, Command::Help | Command::Version);
        if let Err(f) = single(command, out) {
            outcome.failures.push((i, f));
            if ends {
                break;
            }
        }
        if stops_always {
            break;
        }
    }
    if !outcome.stopped {
        send(ipvs, &mut pending, &mut outcome);
    }
    // Batched failures arrive after the skipped lines recorded meanwhile.
    outcome.failures.sort_by_key(|(i, _)| *i);
    let status = match (outcome.failures.last(), outcome.last) {
        (Some((i, f)), Some(last)) if *i == last => f.status,
        _ => 0,
    };
    let message = outcome
        .failures
        .into_iter()
        .map(|(_, f)| f.message)
        .collect::<Vec<_>>()
        .join("\n");
    if message.is_empty() && status == 0 {
        Ok(())
    } else {
        // Status 0 with messages: earlier lines failed, the last did not.
        Err(Failure::new(message, status))
    }
}

/// `--dry-run` without `--replace-table`: every line that would run, as a
/// command line (service and server changes, `-C` and `--set` in the
/// numeric form `-S -n` writes, with thresholds; other lines as written),
/// and every line that would be skipped as a `#` comment with its message.
pub fn plan(steps: &[(usize, Step)], text: &str, out: &mut String) {
    let mut lines: Option<Vec<&str>> = None;
    for (line, step) in steps {
        match step {
            Step::Skip(e) => {
                let _ = writeln!(out, "# line {line} skipped: {}", e.message);
            }
            Step::Run(command) => match as_op(command.clone()) {
                Ok(op) => {
                    out.push_str(&op_line(&op));
                    out.push('\n');
                }
                Err(Command::Clear) => out.push_str("-C\n"),
                Err(Command::SetTimeouts(t)) => {
                    let _ = writeln!(out, "--set {} {} {}", t.tcp, t.tcp_fin, t.udp);
                }
                Err(Command::Zero(key)) => match key {
                    None => out.push_str("-Z\n"),
                    Some(key) => {
                        let f = Format {
                            numeric: true,
                            rule: true,
                            unsigned_marks: true,
                            ..Format::default()
                        };
                        let vs = ipvsctl::model::VirtualServer::new(key);
                        let _ = writeln!(out, "-Z {}", service_name(&vs, &f, &Numeric));
                    }
                },
                Err(Command::StopDaemon(role)) => {
                    let role = match role {
                        DaemonRole::Master => "master",
                        DaemonRole::Backup => "backup",
                    };
                    let _ = writeln!(out, "--stop-daemon {role}");
                }
                Err(_) => {
                    let lines = lines.get_or_insert_with(|| text.split('\n').collect());
                    let mut words = Vec::new();
                    super::rules::line_words(
                        lines.get(line.saturating_sub(1)).copied().unwrap_or(""),
                        &mut words,
                    );
                    let _ = writeln!(out, "{}", words.join(" "));
                }
            },
        }
    }
}
