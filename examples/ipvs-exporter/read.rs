//! One reading of the IPVS table for a scrape: the services (one dump), their
//! real servers (dumps pipelined on the handle, not one round trip each)
//! and the namespace's totals.

use std::io::ErrorKind;
use std::time::Instant;

use ipvsctl::conns::{ConnError, ConnTable};
use ipvsctl::{Error, Handle};

use crate::metrics::{ScrapeOutcome, Snapshot};

/// Reads the table of the handle's namespace. A service deleted between the
/// dump of services and the dump of its real servers is left out (it is no
/// longer there); any other failure fails the scrape.
pub fn read(handle: &Handle, table: &ConnTable) -> (Snapshot, ScrapeOutcome, Option<String>) {
    let started = Instant::now();
    let result = read_all(handle, table);
    let seconds = started.elapsed().as_secs_f64();
    match result {
        Ok(snapshot) => (
            snapshot,
            ScrapeOutcome {
                seconds,
                success: true,
            },
            None,
        ),
        Err(why) => (
            Snapshot::default(),
            ScrapeOutcome {
                seconds,
                success: false,
            },
            Some(why),
        ),
    }
}

fn read_all(handle: &Handle, table: &ConnTable) -> Result<Snapshot, String> {
    let totals = match table.totals() {
        Ok(t) => Some(t),
        Err(ConnError::Io { source, .. }) if source.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(e.to_string()),
    };
    let services = handle.list_services().map_err(|e| e.to_string())?;
    let keys: Vec<_> = services.iter().map(|s| s.service.key).collect();
    let mut dests = vec![None; services.len()];
    let mut failure = None;
    handle
        .list_destinations_each(&keys, |i, r| match r {
            Ok(d) => dests[i] = Some(d),
            Err(Error::ServiceNotFound { .. }) => {}
            Err(e) => {
                failure.get_or_insert_with(|| format!("{}: {e}", keys[i]));
            }
        })
        .map_err(|e| e.to_string())?;
    if let Some(why) = failure {
        return Err(why);
    }
    let services = services
        .into_iter()
        .zip(dests)
        .filter_map(|(s, d)| d.map(|d| (s, d)))
        .collect();
    Ok(Snapshot { totals, services })
}
