//! The README's quick start: adds one virtual server with one real server,
//! checks that the kernel reports exactly what was added, prints the table
//! as `ipvsadm -Ln` does, and deletes the service again.
//!
//! ```text
//! cargo run --example quick_start                # as root, on a host with IPVS
//! IPVSCTL_VM=1 cargo run --example quick_start   # anywhere, in a throw-away QEMU guest
//! ```
//!
//! On a real host it changes the IPVS table of the current network
//! namespace for a moment: it adds `TCP 192.0.2.10:80` and deletes it
//! before it exits. If that service exists already, it is someone else's:
//! the example says so and changes nothing. Exit status 0 on success, 1 on
//! any error (a kernel without IPVS gets the module diagnosis).
//!
//! The code between the two marker lines below is the README's quick-start
//! block, character for character (`tests/readme_quick_start.rs` checks it).

// quick-start: begin
use std::error::Error;
use std::process::ExitCode;

use ipvsctl::Handle;
use ipvsctl::model::{ForwardMethod, RealServer, Scheduler, ServiceKey, VirtualServer};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quick_start: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    // Error::Unavailable, with the kernel-module diagnosis, when the kernel
    // has no IPVS: never a silent no-op.
    let ipvs = Handle::new()?;
    let key = ServiceKey::tcp("192.0.2.10:80".parse()?);
    let vs = VirtualServer::new(key).with_scheduler(Scheduler::RoundRobin);
    match ipvs.add_service(&vs) {
        Err(e) if e.is_exists() => {
            return Err(format!("{key} exists already and is not ours; nothing changed").into());
        }
        added => added?,
    }
    // The service is ours now: delete it (its real servers go with it)
    // whatever happens next.
    let shown = add_server_and_show(&ipvs, &vs);
    ipvs.delete_service(&key)?;
    println!("deleted {key}");
    shown
}

fn add_server_and_show(ipvs: &Handle, vs: &VirtualServer) -> Result<(), Box<dyn Error>> {
    let rs = RealServer::new("198.51.100.7:8080".parse()?)
        .with_forward(ForwardMethod::Masquerade)
        .with_weight(2);
    ipvs.add_destination(&vs.key, &rs)?;
    // What the kernel reports equals what was added.
    let reported = ipvs.get_service(&vs.key)?.service;
    let servers = ipvs.list_destinations(&vs.key)?;
    if reported != *vs || servers.len() != 1 || servers[0].server != rs {
        return Err(format!("the kernel reports {reported:?} with {servers:?}").into());
    }
    print_table(ipvs)
}

/// The whole table of this namespace, laid out as `ipvsadm -Ln` prints it.
fn print_table(ipvs: &Handle) -> Result<(), Box<dyn Error>> {
    let info = ipvs.info()?;
    println!(
        "IP Virtual Server version {} (size={})",
        info.version, info.conn_tab_size
    );
    println!("Prot LocalAddress:Port Scheduler Flags");
    println!("  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn");
    for snapshot in ipvs.list_services()? {
        let service = &snapshot.service;
        match service.key {
            ServiceKey::Addr { protocol, addr } => {
                println!("{:<4} {addr} {}", protocol.to_string(), service.scheduler)
            }
            ServiceKey::FwMark { mark, .. } => println!("FWM  {mark} {}", service.scheduler),
        }
        for dest in ipvs.list_destinations(&service.key)? {
            let rs = &dest.server;
            println!(
                "  -> {:<28} {:<7} {:<6} {:<10} {:<10}",
                rs.addr.to_string(),
                rs.forward.to_string(),
                rs.weight,
                dest.conns.active,
                dest.conns.inactive
            );
        }
    }
    Ok(())
}
// quick-start: end
