//! ipvsadm-lite: ipvsadm's commands, options, output and exit codes, built
//! only on the public API of `ipvsctl`.
//!
//! ```text
//! ipvsadm-lite -A -t 10.0.0.1:80 -s rr
//! ipvsadm-lite -a -t 10.0.0.1:80 -r 192.168.1.10:8080 -m -w 3
//! ipvsadm-lite -Ln --stats
//! ipvsadm-lite -S -n > rules
//! ipvsadm-lite -R < rules                   # as ipvsadm -R: run the lines, delete nothing else
//! ipvsadm-lite -R --clear-first < rules     # flush, then run the lines
//! ipvsadm-lite -R --replace-table < rules   # the rules are the whole table (deletes the rest!)
//! ipvsadm-lite -R --dry-run < rules         # print what would be sent, change nothing
//! ```
//!
//! With `-n`, every listing is byte-identical to ipvsadm 1.31's for the same
//! kernel state (kernel tests check it side by side). Without `-n`, ports
//! are named from `/etc/services` and addresses stay numeric.
//!
//! `-R` runs the rule file's lines in order the way `ipvsadm -R` does: the
//! same messages and exit status when lines fail, and nothing is deleted
//! that a line does not delete (see `replay`). It differs in one way: the
//! whole file is parsed first, so a line ipvsadm exits on (a bad value)
//! changes nothing, where ipvsadm has run the lines before it; and `#`
//! starts a comment. `--replace-table` makes the table equal to the file
//! instead, in one pipelined pass that updates what stays in place and
//! deletes every service the file does not name, also those of other
//! programs (keepalived, Docker).

mod conns;
mod format;
mod names;
mod replay;
mod restore;
mod rules;

use std::io::{Read as _, Write as _};
use std::process::ExitCode;

use ipvsctl::model::{ServiceKey, ValidationError};
use ipvsctl::sync::{Scope, SyncOptions, Syncer, Verify};
use ipvsctl::{Error, Handle};

use format::{Entry, Namer, Numeric};
use names::Services;
use rules::{BadLines, Command, Format, ListWhat, RestoreOptions};

/// What a failed run prints and exits with.
struct Failure {
    message: String,
    status: u8,
}

impl Failure {
    fn new(message: impl Into<String>, status: u8) -> Self {
        Failure {
            message: message.into(),
            status,
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let program = args
        .first()
        .cloned()
        .unwrap_or_else(|| "ipvsadm-lite".to_owned());
    let services = Services::system();
    let words: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    let command = if words.is_empty() {
        Command::List(ListWhat::All, Format::default())
    } else {
        match rules::parse_args(&program, &words, &services) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("{}", e.message);
                return ExitCode::from(u8::try_from(e.status).unwrap_or(255));
            }
        }
    };
    let mut out = String::new();
    let result = run(&program, command, &services, &mut out);
    // Whatever was produced is printed, also before a failure.
    let mut stdout = std::io::stdout().lock();
    if stdout.write_all(out.as_bytes()).is_err() || stdout.flush().is_err() {
        return ExitCode::from(1);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            if !f.message.is_empty() {
                eprintln!("{}", f.message);
            }
            ExitCode::from(f.status)
        }
    }
}

fn open() -> Result<Handle, Failure> {
    Handle::new().map_err(|e| {
        Failure::new(
            format!(
                "Can't initialize ipvs: {e}\nAre you sure that IP Virtual Server is built in the kernel or as module?"
            ),
            2,
        )
    })
}

fn run(
    program: &str,
    command: Command,
    services: &Services,
    out: &mut String,
) -> Result<(), Failure> {
    match command {
        Command::Help => {
            out.push_str(&usage(program));
            return Ok(());
        }
        Command::Version => {
            out.push_str(&version());
            return Ok(());
        }
        _ => {}
    }
    let ipvs = open()?;
    execute(program, &ipvs, command, services, out)
}

/// Runs one command (`-R`'s lines too) on an open handle.
fn execute(
    program: &str,
    ipvs: &Handle,
    command: Command,
    services: &Services,
    out: &mut String,
) -> Result<(), Failure> {
    let namer: &dyn Namer = services;
    match command {
        Command::List(what, f) => list(
            ipvs,
            what,
            &f,
            if f.numeric { &Numeric } else { namer },
            out,
        ),
        Command::Save(f) => {
            let namer = if f.numeric { &Numeric } else { namer };
            let text =
                read_formatted(ipvs, &f, namer).map_err(|e| read_failure(KOp::GetServices, &e))?;
            let info = ipvs.info().map_err(|e| read_failure(KOp::GetInfo, &e))?;
            format::list_head(out, &info, &f);
            out.push_str(&text);
            Ok(())
        }
        Command::Restore(opts) => restore_from_stdin(program, ipvs, opts, services, out),
        Command::AddService(vs) => ipvs
            .add_service(&vs)
            .map_err(|e| kernel_failure(KOp::AddService, &e)),
        Command::EditService(vs) => ipvs
            .update_service(&vs)
            .map_err(|e| kernel_failure(KOp::EditService, &e)),
        Command::DeleteService(key) => ipvs
            .delete_service(&key)
            .map_err(|e| kernel_failure(KOp::DelService, &e)),
        Command::AddServer(key, rs) => ipvs
            .add_destination(&key, &rs)
            .map_err(|e| kernel_failure(KOp::AddDest, &e)),
        Command::EditServer(key, rs) => ipvs
            .update_destination(&key, &rs)
            .map_err(|e| kernel_failure(KOp::EditDest, &e)),
        Command::DeleteServer(key, addr) => ipvs
            .delete_destination(&key, addr)
            .map_err(|e| kernel_failure(KOp::DelDest, &e)),
        Command::Clear => ipvs.flush().map_err(|e| kernel_failure(KOp::Other, &e)),
        Command::Zero(key) => ipvs
            .zero(key.as_ref())
            .map_err(|e| kernel_failure(KOp::Zero, &e)),
        Command::SetTimeouts(t) => ipvs
            .set_timeouts(&t)
            .map_err(|e| kernel_failure(KOp::Other, &e)),
        Command::StartDaemon(d) => ipvs
            .start_daemon(&d)
            .map_err(|e| kernel_failure(KOp::StartDaemon, &e)),
        Command::StopDaemon(role) => ipvs
            .stop_daemon(role)
            .map_err(|e| kernel_failure(KOp::StopDaemon, &e)),
        Command::Help => {
            out.push_str(&usage(program));
            Ok(())
        }
        Command::Version => {
            out.push_str(&version());
            Ok(())
        }
    }
}

fn version() -> String {
    format!(
        "ipvsadm-lite {} (ipvsctl, ipvsadm v1.31 compatible)\n",
        env!("CARGO_PKG_VERSION")
    )
}

fn list(
    ipvs: &Handle,
    what: ListWhat,
    f: &Format,
    namer: &dyn Namer,
    out: &mut String,
) -> Result<(), Failure> {
    match what {
        ListWhat::All => {
            let info = ipvs.info().map_err(|e| read_failure(KOp::GetInfo, &e))?;
            let text =
                read_formatted(ipvs, f, namer).map_err(|e| read_failure(KOp::GetServices, &e))?;
            format::list_head(out, &info, f);
            out.push_str(&text);
            Ok(())
        }
        ListWhat::Service(key) => {
            let service = ipvs
                .get_service(&key)
                .map_err(|e| read_failure(KOp::GetService, &e))?;
            let dests = or_empty(ipvs.list_destinations(&key))
                .map_err(|e| read_failure(KOp::GetDests, &e))?;
            format::title(out, f);
            format::service_entry(out, &mut Entry { service, dests }, f, namer);
            Ok(())
        }
        ListWhat::Timeout => {
            let t = ipvs.timeouts().map_err(|e| read_failure(KOp::Other, &e))?;
            format::timeouts(out, &t);
            Ok(())
        }
        ListWhat::Daemon => {
            let d = ipvs
                .list_daemons()
                .map_err(|e| read_failure(KOp::Other, &e))?;
            format::daemons(out, &d);
            Ok(())
        }
        ListWhat::Connections => conns::list(out, f, namer).map_err(|m| Failure::new(m, 1)),
    }
}

/// A service's destinations; a service that vanished since the service dump
/// lists without any (ipvsadm's dump would come back empty too).
fn or_empty(
    dests: Result<Vec<ipvsctl::model::DestinationSnapshot>, Error>,
) -> Result<Vec<ipvsctl::model::DestinationSnapshot>, Error> {
    match dests {
        Err(Error::ServiceNotFound { .. }) => Ok(Vec::new()),
        other => other,
    }
}

/// The whole table's services with their real servers, formatted as `f`
/// asks, in listing order: one service dump, the services sorted, then every
/// service's real servers read with [`Handle::list_destinations_each`] (a
/// helper thread waits for the kernel while this one decodes and formats
/// each service as it arrives).
fn read_formatted(ipvs: &Handle, f: &Format, namer: &dyn Namer) -> Result<String, Error> {
    let mut entries: Vec<Entry> = ipvs
        .list_services()?
        .into_iter()
        .map(|service| Entry {
            service,
            dests: Vec::new(),
        })
        .collect();
    if !f.nosort {
        format::sort_services(&mut entries);
    }
    let keys: Vec<ServiceKey> = entries.iter().map(|e| e.service.service.key).collect();
    let mut text = String::with_capacity(entries.len() * 512);
    let mut failed = None;
    ipvs.list_destinations_each(&keys, |index, dests| {
        let dests = match or_empty(dests) {
            Err(e) => {
                failed.get_or_insert(e);
                return;
            }
            Ok(d) => d,
        };
        if failed.is_none()
            && let Some(e) = entries.get_mut(index)
        {
            e.dests = dests;
            format::service_entry(&mut text, e, f, namer);
            e.dests = Vec::new();
        }
    })?;
    match failed {
        Some(e) => Err(e),
        None => Ok(text),
    }
}

// --- -R ------------------------------------------------------------------------------

fn restore_from_stdin(
    program: &str,
    ipvs: &Handle,
    opts: RestoreOptions,
    services: &Services,
    out: &mut String,
) -> Result<(), Failure> {
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text).map_err(|e| {
        Failure::new(
            format!("{program}: cannot read the rules from stdin: {e}"),
            1,
        )
    })?;
    if opts.replace_table {
        return replace_table(program, ipvs, &text, opts, services, out);
    }
    // ipvsadm's way: the lines run in order. The whole file is parsed
    // first, so that a line ipvsadm would exit on changes nothing.
    let mut steps = Vec::with_capacity(text.len() / 40);
    rules::parse_each(
        &text,
        program,
        services,
        cpus(),
        BadLines::Skip,
        |rules, skipped| {
            replay::merge_into(&mut steps, rules, skipped);
            Ok(())
        },
    )
    .map_err(|e| Failure::new(e.error.message, u8::try_from(e.error.status).unwrap_or(255)))?;
    if opts.dry_run {
        if opts.clear_first {
            out.push_str("-C\n");
        }
        replay::plan(&steps, &text, out);
        return Ok(());
    }
    if opts.clear_first {
        ipvs.flush().map_err(|e| kernel_failure(KOp::Other, &e))?;
    }
    replay::run(
        ipvs,
        steps,
        |command, out| execute(program, ipvs, command, services, out),
        out,
    )
}

/// `-R --replace-table`: the rules are the whole table. The file is run on
/// an empty table first (a line that fails there, like a second `-A` of one
/// service, is an error naming the line, and nothing changes); then the
/// namespace is read in full and made equal to it in one pipelined pass:
/// what stays is updated in place, what the rules do not name is deleted.
fn replace_table(
    program: &str,
    ipvs: &Handle,
    text: &str,
    opts: RestoreOptions,
    services: &Services,
    out: &mut String,
) -> Result<(), Failure> {
    // The table is built part by part while later parts are parsed. About
    // 400 bytes of rules per service (a service and ten real servers) is a
    // guess that only sizes the table's first allocation.
    let mut table = restore::Table::with_capacity(text.len() / 400);
    rules::parse_each(
        text,
        program,
        services,
        cpus(),
        BadLines::Stop,
        |rules, _| rules.iter().try_for_each(|rule| table.run(rule)),
    )
    .map_err(|e| {
        Failure::new(
            format!("{program}: line {}: {}", e.line, e.error.message),
            2,
        )
    })?;
    let desired = table.finish();

    let state =
        restore::desired_state(&desired).map_err(|e| Failure::new(format!("{program}: {e}"), 2))?;
    // The whole namespace is the rules': read back in full first, real
    // servers over a few sockets in parallel.
    let options = SyncOptions::default()
        .with_scope(Scope::All)
        .with_read_sockets(cpus());
    let mut syncer = Syncer::with_options(ipvs, options);
    if opts.dry_run {
        let plan = syncer
            .plan(&state, Verify::Full)
            .map_err(|e| read_failure(KOp::GetServices, &e))?;
        for op in &plan.writes {
            out.push_str(&restore::op_line(op));
            out.push('\n');
        }
        if let Some(t) = desired.timeouts {
            out.push_str(&format!("--set {} {} {}\n", t.tcp, t.tcp_fin, t.udp));
        }
        return Ok(());
    }
    let report = syncer
        .sync(&state, Verify::Full)
        .map_err(|e| read_failure(KOp::GetServices, &e))?;
    let mut messages = Vec::new();
    for f in report.root_failures() {
        let failure = kernel_failure(replay::kop(&f.write), &f.error);
        messages.push(format!(
            "{}: {}",
            failure.message,
            restore::op_line(&f.write)
        ));
    }
    if let Some(e) = &report.aborted {
        let failure = kernel_failure(KOp::Other, e);
        messages.push(format!("{}: the rest of the batch", failure.message));
    }
    if let Some(t) = desired.timeouts
        && let Err(e) = ipvs.set_timeouts(&t)
    {
        messages.push(kernel_failure(KOp::Other, &e).message);
    }
    if messages.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(messages.join("\n"), 255))
    }
}

/// Threads for the work that splits (parsing a rule file, reading real
/// servers over several sockets): one per CPU, at most 4.
fn cpus() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4)
}

// --- errors the way ipvsadm words them ---------------------------------------------------

/// Which libipvs call failed: its messages depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KOp {
    AddService,
    EditService,
    DelService,
    Zero,
    AddDest,
    EditDest,
    DelDest,
    StartDaemon,
    StopDaemon,
    GetServices,
    GetService,
    GetDests,
    GetInfo,
    Other,
}

const EPERM: i32 = 1;
const ENOENT: i32 = 2;
const ESRCH: i32 = 3;
const ENOMEM: i32 = 12;
const EEXIST: i32 = 17;
const EINVAL: i32 = 22;
const ERANGE: i32 = 34;
const EMSGSIZE: i32 = 90;
const ENOPROTOOPT: i32 = 92;
const EOPNOTSUPP: i32 = 95;
const EAFNOSUPPORT: i32 = 97;

/// ipvsadm's message for a kernel error of an operation.
fn message(op: KOp, e: &Error) -> String {
    let Some(errno) = e.errno() else {
        // Not from the kernel (a value the model refuses, an I/O failure).
        return e.to_string();
    };
    let specific = match (op, errno) {
        (KOp::AddService, EEXIST) => Some("Service already exists"),
        (KOp::AddService | KOp::EditService, ENOENT) => {
            Some("Scheduler or persistence engine not found")
        }
        (
            KOp::EditService
            | KOp::DelService
            | KOp::Zero
            | KOp::GetServices
            | KOp::GetService
            | KOp::GetDests,
            ESRCH,
        ) => Some("No such service"),
        (KOp::AddDest | KOp::EditDest | KOp::DelDest, ESRCH) => Some("Service not defined"),
        (KOp::AddDest, EEXIST) => Some("Destination already exists"),
        (KOp::EditDest | KOp::DelDest, ENOENT) => Some("No such destination"),
        (KOp::StartDaemon, EEXIST) => Some("Daemon has already run"),
        (KOp::StopDaemon, ESRCH) => Some("No daemon is running"),
        (_, EPERM) => Some("Permission denied (you must be root)"),
        (_, EINVAL) => {
            Some("Invalid operation.  Possibly wrong module version, address not unicast, ...")
        }
        (_, ENOPROTOOPT) => Some("Protocol not available"),
        (_, ENOMEM) => Some("Memory allocation problem"),
        (_, EOPNOTSUPP) => Some("Operation not supported with IPv6"),
        (_, EAFNOSUPPORT) => Some("Operation not supported with specified address family"),
        (_, EMSGSIZE) => Some("Module is wrong version"),
        _ => None,
    };
    match specific {
        Some(m) => m.to_owned(),
        None => strerror(errno),
    }
}

/// `strerror(errno)`: the standard library's text without its
/// " (os error N)" suffix.
fn strerror(errno: i32) -> String {
    let s = std::io::Error::from_raw_os_error(errno).to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

/// A failed change: ipvsadm prints the message and exits 255; a value the
/// library refuses before sending is a bad command line (2).
fn kernel_failure(op: KOp, e: &Error) -> Failure {
    if let Error::Invalid(ValidationError::ThresholdsInverted { .. }) = e {
        // ipvsadm leaves this check to the kernel, which answers ERANGE.
        return Failure::new(strerror(ERANGE), 255);
    }
    let status = if matches!(e, Error::Invalid(_)) {
        2
    } else {
        255
    };
    Failure::new(message(op, e), status)
}

/// A failed read: ipvsadm exits 1.
fn read_failure(op: KOp, e: &Error) -> Failure {
    Failure::new(message(op, e), 1)
}

fn usage(program: &str) -> String {
    let mut s = format!(
        "ipvsadm-lite {} (ipvsctl): ipvsadm's commands on the ipvsctl library\n\
         Usage:\n",
        env!("CARGO_PKG_VERSION")
    );
    for line in [
        "-A|E virtual-service [-s scheduler] [-p [timeout]] [-M netmask] [--pe engine] [-b sched-flags] [-o]",
        "-D virtual-service",
        "-C",
        "-R [--clear-first | --replace-table] [--dry-run]",
        "-S [-n]",
        "-a|e virtual-service -r server-address [-g|-i|-m] [-w weight] [-x upper] [-y lower] [tunnel options]",
        "-d virtual-service -r server-address",
        "-L|l [virtual-service] [-n] [--stats|--rate|--thresholds|--persistent-conn|--tun-info] [--exact] [--nosort]",
        "-L|l --timeout | --daemon",
        "-Z [virtual-service]",
        "--set tcp tcpfin udp",
        "--start-daemon {master|backup} [--mcast-interface if] [--syncid id] [--sync-maxlen n] [--mcast-group addr] [--mcast-port port] [--mcast-ttl ttl]",
        "--stop-daemon {master|backup}",
        "-h | -v",
    ] {
        s.push_str(&format!("  {program} {line}\n"));
    }
    s.push_str(
        "\nvirtual-service: -t|--tcp-service, -u|--udp-service, --sctp-service host[:port] \
         ([v6]:port), or -f|--fwmark-service mark [-6]\n\
         -R runs the rules read from stdin (the -S format) line by line, as ipvsadm -R does;\n\
         \x20 it deletes only what a line deletes. The file is parsed whole first: a bad line \
         changes nothing.\n\
         \x20 --clear-first flushes the whole table first (`ipvsadm -C; ipvsadm -R`).\n\
         \x20 --replace-table makes the table equal to the rules in one pipelined pass: what \
         stays is updated\n\
         \x20   in place, never deleted and re-created. WARNING: it deletes every service \
         the rules do not\n\
         \x20   name, also those of other programs (keepalived, Docker, kube-proxy).\n\
         \x20 --dry-run prints what would be sent and changes nothing: the lines that would \
         run, or with\n\
         \x20   --replace-table the plan against the current table.\n",
    );
    s
}
