//! A syncer's plan sent in parts, each made just before it is sent.
//!
//! A cold sync adds every real server of the table. Held as operations, the
//! plan of 50,000 services with ten real servers each is 500,000 adds of
//! 112 bytes (56 MB) on top of the desired state they are copied from, while
//! the syncer's memory fills with what they did. A plan made for a syncer
//! ([`Order::ClaimsApart`](super::plan::Order::ClaimsApart)) therefore names
//! each added service's real servers by the service alone (a [`Fill`]), and
//! [`Parts`] writes them out of the desired state part by part: at most one
//! part of operations is held at a time.

use std::collections::HashSet;

use super::key_hash::KeyHashing;
use super::state::DesiredState;
use crate::batch::Write;
use crate::model::{RealServer, ServiceKey};

/// The adds of every desired real server of a service the plan adds, to be
/// sent after the first `at` operations of [`Plan::writes`](super::Plan::writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fill {
    /// How many of the plan's writes go before these adds.
    pub(crate) at: usize,
    /// The service whose desired real servers are added.
    pub(crate) key: ServiceKey,
}

/// The operations of a plan's writes and fills, in order, in parts of at
/// most `size` operations, leaving out those of the services in `skip`.
pub(crate) struct Parts<'a> {
    writes: std::vec::IntoIter<Write>,
    /// The index in the plan's writes of the next of `writes`.
    next: usize,
    fills: std::iter::Peekable<std::vec::IntoIter<Fill>>,
    /// The fill being written out.
    filling: Option<(ServiceKey, std::slice::Iter<'a, RealServer>)>,
    desired: &'a DesiredState,
    skip: &'a HashSet<ServiceKey, KeyHashing>,
    size: usize,
    /// Operations not yet handed on (those skipped included).
    left: usize,
}

impl<'a> Parts<'a> {
    /// The parts of `writes` with `fills` written out of `desired`.
    pub(crate) fn new(
        writes: Vec<Write>,
        fills: Vec<Fill>,
        desired: &'a DesiredState,
        skip: &'a HashSet<ServiceKey, KeyHashing>,
        size: usize,
    ) -> Self {
        let size = size.max(1);
        let left = writes.len() + fill_count(&fills, desired);
        Parts {
            writes: writes.into_iter(),
            next: 0,
            fills: fills.into_iter().peekable(),
            filling: None,
            desired,
            skip,
            size,
            left,
        }
    }

    /// Starts the next fill due before the next of the plan's writes (or
    /// passes over it, its service skipped); whether there was one.
    fn start_fill(&mut self) -> bool {
        let Some(fill) = self.fills.next_if(|f| f.at <= self.next) else {
            return false;
        };
        let dests = self
            .desired
            .get(&fill.key)
            .map_or(&[][..], |ds| ds.destinations());
        if self.skip.contains(&fill.key) {
            self.left -= dests.len();
        } else {
            self.filling = Some((fill.key, dests.iter()));
        }
        true
    }
}

impl Iterator for Parts<'_> {
    type Item = Vec<Write>;

    fn next(&mut self) -> Option<Vec<Write>> {
        let mut part = Vec::with_capacity(self.size.min(self.left));
        while part.len() < self.size {
            if let Some((key, dests)) = &mut self.filling {
                // A fill's real servers go in one run: most of a cold
                // sync's operations are these.
                let before = part.len();
                let key = *key;
                part.extend(
                    dests
                        .by_ref()
                        .take(self.size - before)
                        .map(|rs| Write::AddDestination(key, *rs)),
                );
                self.left -= part.len() - before;
                if dests.as_slice().is_empty() {
                    self.filling = None;
                }
            } else if !self.start_fill() {
                let Some(op) = self.writes.next() else { break };
                self.next += 1;
                self.left -= 1;
                if self.skip.is_empty() || !self.skip.contains(&op.key()) {
                    part.push(op);
                }
            }
        }
        (!part.is_empty()).then_some(part)
    }
}

/// How many real-server adds `fills` stand for.
fn fill_count(fills: &[Fill], desired: &DesiredState) -> usize {
    fills
        .iter()
        .map(|f| desired.get(&f.key).map_or(0, |ds| ds.destinations().len()))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::VirtualServer;
    use proptest::prelude::*;

    fn key(i: usize) -> ServiceKey {
        ServiceKey::tcp(
            format!("10.96.{}.{}:80", i / 250, i % 250 + 1)
                .parse()
                .unwrap(),
        )
    }

    fn rs(j: usize) -> RealServer {
        RealServer::new(format!("10.244.0.{}:8080", j + 1).parse().unwrap())
    }

    /// The operations written out whole: fills expanded where they stand.
    fn expanded(writes: &[Write], fills: &[Fill], desired: &DesiredState) -> Vec<Write> {
        let mut out = Vec::new();
        let mut fills = fills.iter().peekable();
        for i in 0..=writes.len() {
            while let Some(f) = fills.next_if(|f| f.at <= i) {
                for rs in desired.get(&f.key).unwrap().destinations() {
                    out.push(Write::AddDestination(f.key, *rs));
                }
            }
            if let Some(op) = writes.get(i) {
                out.push(op.clone());
            }
        }
        out
    }

    proptest! {
        /// Whatever the part size, the parts hold every operation once, in
        /// the plan's order, none of a skipped service, each part full but
        /// the last; a plan of one part without fills is handed on as it is.
        #[test]
        fn parts_hold_every_operation_once_in_order(
            services in prop::collection::vec((0usize..4, 0u8..3), 0..12),
            size in 1usize..9,
            skipped in prop::collection::hash_set(0usize..12, 0..3),
        ) {
            let mut desired = DesiredState::new();
            let mut writes = Vec::new();
            let mut fills = Vec::new();
            for (i, &(dests, how)) in services.iter().enumerate() {
                let vs = VirtualServer::new(key(i));
                desired.insert(vs.clone(), (0..dests).map(rs)).unwrap();
                match how {
                    // Existing: its real servers among the writes.
                    0 => writes.extend((0..dests).map(|j| Write::UpdateDestination(key(i), rs(j)))),
                    // Added among the writes, its real servers as a fill.
                    1 => {
                        writes.push(Write::AddService(vs));
                        fills.push(Fill { at: writes.len(), key: key(i) });
                    }
                    // Claimed (added apart): only the fill.
                    _ => fills.push(Fill { at: writes.len(), key: key(i) }),
                }
            }
            let skip: HashSet<ServiceKey, KeyHashing> = skipped.iter().map(|&i| key(i)).collect();
            let mut want = expanded(&writes, &fills, &desired);
            want.retain(|op| !skip.contains(&op.key()));
            let parts: Vec<Vec<Write>> =
                Parts::new(writes.clone(), fills.clone(), &desired, &skip, size).collect();
            prop_assert!(parts.iter().all(|p| !p.is_empty()));
            if let Some((last, full)) = parts.split_last() {
                prop_assert!(last.len() <= size);
                prop_assert!(full.iter().all(|p| p.len() == size));
            }
            prop_assert_eq!(parts.concat(), want);
        }
    }

    #[test]
    fn fills_stand_for_the_desired_real_servers() {
        let mut desired = DesiredState::new();
        desired
            .insert(VirtualServer::new(key(1)), (0..3).map(rs))
            .unwrap();
        desired.insert(VirtualServer::new(key(2)), [rs(0)]).unwrap();
        let fills = [Fill { at: 0, key: key(1) }, Fill { at: 0, key: key(2) }];
        assert_eq!(fill_count(&fills, &desired), 4);
    }
}
