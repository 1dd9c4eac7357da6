//! Keeps a generated table of services in the kernel from async code: a
//! tokio program whose sync runs on the async front's worker thread while
//! the runtime's single thread stays free (a ticker task shows it).
//!
//! ```text
//! cargo run --features tokio --example async_sync -- [--netns NAME] [--services N] [--rounds N]
//! ```
//!
//! The generated table has services `10.96.x.y:80` with three real servers
//! of weight 1 each. Each round gives weight 2 to the first real server of
//! the next service, and weight 1 back to the one before, and syncs; it prints each
//! round's report and how often the ticker ran meanwhile. `--netns` works
//! in `/run/netns/NAME` (create it with `ip netns add NAME` and bring its
//! `lo` up). The services are removed at the end.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ipvsctl::asynchronous::{AsyncHandle, AsyncSyncer};
use ipvsctl::model::{ForwardMethod, RealServer, ServiceKey, VirtualServer};
use ipvsctl::sync::{DesiredState, SyncOptions, Verify};
use ipvsctl::{HandleOptions, NetNs};

struct Args {
    netns: NetNs,
    services: u32,
    rounds: u32,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut out = Args {
        netns: NetNs::Current,
        services: 100,
        rounds: 3,
    };
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--netns" => out.netns = NetNs::named(value()?),
            "--services" => {
                out.services = value()?.parse().map_err(|e| format!("--services: {e}"))?
            }
            "--rounds" => out.rounds = value()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    if out.services == 0 || out.services > 65_536 {
        return Err("--services: between 1 and 65536".into());
    }
    Ok(out)
}

/// The table of round `round`: every service with three real servers of
/// weight 1, but the first of service `round` (modulo the table), weight 2.
fn table(services: u32, round: u32) -> DesiredState {
    let mut desired = DesiredState::new();
    for i in 0..services {
        let [_, _, b, c] = i.to_be_bytes();
        let key = ServiceKey::tcp(SocketAddr::from(([10, 96, b, c], 80)));
        let servers = (1..=3u8).map(|j| {
            let weight = if i == round % services && j == 1 {
                2
            } else {
                1
            };
            RealServer::new(SocketAddr::from(([10, b, c, j], 8080)))
                .with_forward(ForwardMethod::Masquerade)
                .with_weight(weight)
        });
        desired
            .insert(VirtualServer::new(key), servers)
            .expect("generated services are valid");
    }
    desired
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("async_sync: {e}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("async_sync: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> ipvsctl::Result<()> {
    let ipvs = AsyncHandle::open(args.netns, HandleOptions::new()).await?;
    let syncer = AsyncSyncer::new(&ipvs, SyncOptions::default())?;
    let ticks = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&ticks);
    let ticker = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });
    for round in 0..args.rounds {
        let before = ticks.load(Ordering::Relaxed);
        let started = Instant::now();
        let report = syncer
            .sync(Arc::new(table(args.services, round)), Verify::Services)
            .await?;
        println!(
            "round {round}: {:?}, {} writes, {} services added, {} real servers updated; \
             the runtime ticked {} times meanwhile",
            started.elapsed(),
            report.writes_sent,
            report.services.added,
            report.destinations.updated,
            ticks.load(Ordering::Relaxed) - before,
        );
        if !report.is_ok() {
            eprintln!("async_sync: round {round}: failures: {:?}", report.failed);
        }
    }
    ticker.abort();
    let removed = syncer
        .sync(Arc::new(DesiredState::new()), Verify::None)
        .await?;
    println!("removed {} services", removed.services.deleted);
    Ok(())
}
