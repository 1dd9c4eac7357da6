//! Rolling verification ([`Verify::Rolling`](super::Verify::Rolling)):
//! which managed services a sync reads in full, so that each is read in
//! full at least once in any `syncs` consecutive rolling syncs, however
//! services come and go.
//!
//! Every managed service has the number of the rolling sync in which it was
//! last verified in full (read whole, or created). A rolling sync takes the
//! `ceil(n / syncs)` stalest of the `n` managed services (ties in key
//! order), and every service `syncs` or more rolling syncs old whatever
//! their number. The share alone spreads the reads evenly while the table
//! holds still, but does not bound a service's age when services leave: of
//! ten services and `syncs = 2`, five are read in the first sync; if four
//! of those five leave, the second sync's share is three of the five left
//! unread. The services that are due close that gap.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroU32;

use super::key_hash::KeyHashing;
use crate::model::ServiceKey;

/// The rolling verification record of a syncer.
#[derive(Debug, Default)]
pub(crate) struct Rolling {
    /// Rolling syncs started so far (the number of the one under way).
    round: u64,
    /// The round in which each managed service was last verified in full.
    /// Kept from the first rolling sync on (before it, nothing is recorded
    /// and the map takes no memory); a managed service without an entry
    /// counts as verified in round 0.
    verified: HashMap<ServiceKey, u64, KeyHashing>,
    /// The services the sync under way reads in full, whatever the service
    /// table shows.
    slice: HashSet<ServiceKey, KeyHashing>,
}

impl Rolling {
    /// Starts a sync: chooses the slice of a rolling sync (`syncs`, and the
    /// managed services `managed`), or none for any other sync. `advance`:
    /// the sync counts as a rolling sync (not a plan shown without writing).
    pub(crate) fn start<'a>(
        &mut self,
        syncs: Option<NonZeroU32>,
        managed: impl Iterator<Item = &'a ServiceKey>,
        advance: bool,
    ) {
        self.slice.clear();
        let Some(syncs) = syncs else {
            return;
        };
        let round = self.round + 1;
        if advance {
            self.round = round;
        }
        let ages = managed
            .map(|k| (self.verified.get(k).copied().unwrap_or(0), *k))
            .collect();
        self.slice.extend(choose(ages, round, syncs));
    }

    /// The number of rolling syncs started so far (0: none, and nothing is
    /// recorded).
    #[cfg(test)]
    pub(crate) fn round(&self) -> u64 {
        self.round
    }

    /// The slice of the sync under way.
    pub(crate) fn slice(&self) -> &HashSet<ServiceKey, KeyHashing> {
        &self.slice
    }

    /// Whether the sync under way reads `key` in full whatever the service
    /// table shows.
    pub(crate) fn in_slice(&self, key: &ServiceKey) -> bool {
        !self.slice.is_empty() && self.slice.contains(key)
    }

    /// Records that `key` was verified in full now (read whole, or
    /// created): in the rolling sync under way, or, in any other sync, in
    /// the last one (never later than the truth, so a drift after this
    /// read is still found within `syncs` rolling syncs).
    pub(crate) fn verified(&mut self, key: ServiceKey) {
        if self.round > 0 {
            self.verified.insert(key, self.round);
        }
    }

    /// Ends a sync: the slice is dropped and the record loses services no
    /// longer managed once it holds many of them (so that this costs
    /// nothing on most syncs). Returns, after a rolling sync, the most
    /// rolling syncs any managed service has now gone without a full
    /// verification.
    pub(crate) fn finish<'a>(
        &mut self,
        rolling: bool,
        managed: impl Iterator<Item = &'a ServiceKey>,
        is_managed: impl Fn(&ServiceKey) -> bool,
        count: usize,
    ) -> Option<u64> {
        // Its room given back: syncs in between need none.
        self.slice = HashSet::default();
        if self.verified.len() > count.saturating_mul(2).saturating_add(64) {
            self.verified.retain(|k, _| is_managed(k));
            self.verified.shrink_to_fit();
        }
        rolling.then(|| {
            managed
                .map(|k| {
                    self.round
                        .saturating_sub(self.verified.get(k).copied().unwrap_or(0))
                })
                .max()
                .unwrap_or(0)
        })
    }

    /// Ends a plan shown without writing: its slice is dropped.
    pub(crate) fn end_plan(&mut self) {
        self.slice.clear();
    }

    /// Forgets what was recorded (the syncer forgot its memory: its next
    /// sync reads everything).
    pub(crate) fn forget(&mut self) {
        self.verified = HashMap::default();
        self.slice.clear();
    }
}

/// The services a rolling sync numbered `round` reads in full, of `ages`
/// (each managed service with the round in which it was last verified in
/// full): the `ceil(n / syncs)` stalest, ties in key order, and at least
/// every one verified `syncs` or more rounds ago.
pub(crate) fn choose(
    mut ages: Vec<(u64, ServiceKey)>,
    round: u64,
    syncs: NonZeroU32,
) -> Vec<ServiceKey> {
    let n = ages.len();
    let k = usize::try_from(syncs.get()).unwrap_or(usize::MAX);
    let share = n.div_ceil(k);
    let due = ages
        .iter()
        .filter(|(at, _)| round.saturating_sub(*at) >= u64::from(syncs.get()))
        .count();
    // The due services are the stalest: taking the `take` stalest takes
    // them all.
    let take = share.max(due).min(n);
    if take == 0 {
        return Vec::new();
    }
    if take < n {
        ages.select_nth_unstable(take - 1);
        ages.truncate(take);
    }
    ages.sort_unstable();
    ages.into_iter().map(|(_, key)| key).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::net::SocketAddr;

    use proptest::prelude::*;

    fn key(i: u16) -> ServiceKey {
        ServiceKey::tcp(SocketAddr::from(([10, 96, (i >> 8) as u8, i as u8], 80)))
    }

    fn k(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    /// Runs the record over rounds: `managed` at each, and what it chose.
    fn round(r: &mut Rolling, managed: &[ServiceKey], syncs: u32) -> Vec<ServiceKey> {
        r.start(Some(k(syncs)), managed.iter(), true);
        let mut chosen: Vec<ServiceKey> = r.slice().iter().copied().collect();
        chosen.sort_unstable();
        for key in &chosen {
            r.verified(*key);
        }
        chosen
    }

    #[test]
    fn a_steady_table_is_read_in_even_slices_each_service_once_per_cycle() {
        let keys: Vec<ServiceKey> = (0..10).map(key).collect();
        for syncs in 1..=12u32 {
            let mut r = Rolling::default();
            let share = 10usize.div_ceil(syncs as usize);
            let mut last = BTreeMap::new();
            for n in 1..=3 * u64::from(syncs) {
                let chosen = round(&mut r, &keys, syncs);
                assert_eq!(chosen.len(), share, "syncs {syncs}, round {n}");
                for key in chosen {
                    last.insert(key, n);
                }
                // No service goes `syncs` rounds without a read.
                for key in &keys {
                    let at = last.get(key).copied().unwrap_or(0);
                    assert!(n - at < u64::from(syncs), "syncs {syncs}, round {n}: {key}");
                }
            }
        }
    }

    #[test]
    fn ties_go_in_key_order() {
        let keys: Vec<ServiceKey> = (0..6).rev().map(key).collect();
        let mut r = Rolling::default();
        assert_eq!(round(&mut r, &keys, 3), vec![key(0), key(1)]);
        assert_eq!(round(&mut r, &keys, 3), vec![key(2), key(3)]);
        assert_eq!(round(&mut r, &keys, 3), vec![key(4), key(5)]);
        assert_eq!(round(&mut r, &keys, 3), vec![key(0), key(1)]);
    }

    #[test]
    fn services_that_leave_do_not_delay_the_others() {
        // Ten services, two syncs: five read in the first. Four of those
        // leave; the share of the second sync is three, but all five
        // unread are due and read.
        let keys: Vec<ServiceKey> = (0..10).map(key).collect();
        let mut r = Rolling::default();
        let first = round(&mut r, &keys, 2);
        assert_eq!(first, keys[..5].to_vec());
        let left: Vec<ServiceKey> = keys[4..].to_vec();
        // Round 2: the ones verified in round 0 (never) are 2 old: due.
        let second = round(&mut r, &left, 2);
        assert_eq!(second, keys[5..].to_vec());
    }

    #[test]
    fn a_new_service_verified_when_made_waits_its_turn() {
        let mut keys: Vec<ServiceKey> = (0..4).map(key).collect();
        let mut r = Rolling::default();
        assert_eq!(round(&mut r, &keys, 2), vec![key(0), key(1)]);
        keys.push(key(9));
        // Made (and so verified) outside the slice in round 1.
        r.verified(key(9));
        // Three of five: the two never read, then the stalest by key.
        assert_eq!(round(&mut r, &keys, 2), vec![key(0), key(2), key(3)]);
    }

    #[test]
    fn a_sync_that_is_not_rolling_chooses_nothing_and_a_preview_does_not_advance() {
        let keys: Vec<ServiceKey> = (0..4).map(key).collect();
        let mut r = Rolling::default();
        r.start(None, keys.iter(), true);
        assert!(r.slice().is_empty());
        assert_eq!(r.round(), 0);
        // Nothing recorded before the first rolling sync.
        r.verified(key(0));
        assert!(r.verified.is_empty());
        r.start(Some(k(2)), keys.iter(), false);
        assert_eq!(r.slice().len(), 2);
        assert_eq!(r.round(), 0);
    }

    #[test]
    fn finish_reports_the_oldest_and_drops_what_left() {
        let keys: Vec<ServiceKey> = (0..200).map(key).collect();
        let mut r = Rolling::default();
        for _ in 0..3 {
            round(&mut r, &keys, 4);
        }
        let longest = r.finish(true, keys.iter(), |_| true, keys.len());
        // 150 read, in rounds 1 to 3; the last 50 never: 3 old.
        assert_eq!(longest, Some(3));
        assert_eq!(r.verified.len(), 150);
        let few = &keys[..10];
        assert_eq!(r.finish(false, few.iter(), |k| few.contains(k), 10), None);
        assert_eq!(r.verified.len(), 10);
    }

    proptest! {
        /// Services come and go at random between rounds (some made, and so
        /// verified, outside the slice); whatever `syncs` is, every service
        /// present at a round is read in it or was read within the
        /// `syncs - 1` rounds before, and each round reads at least its
        /// share.
        #[test]
        fn no_service_goes_syncs_rounds_unread(
            syncs in 1..8u32,
            steps in proptest::collection::vec(
                (proptest::collection::vec(0..40u16, 0..6), proptest::collection::vec(0..40u16, 0..6), any::<bool>()),
                1..40,
            ),
        ) {
            let mut r = Rolling::default();
            let mut present: BTreeMap<ServiceKey, u64> = (0..20).map(|i| (key(i), 0)).collect();
            for (n, (gone, new, made_verified)) in steps.into_iter().enumerate() {
                let n = n as u64 + 1;
                for i in gone {
                    present.remove(&key(i));
                }
                for i in new {
                    if let std::collections::btree_map::Entry::Vacant(e) = present.entry(key(i)) {
                        // Made in the last round (verified then), or found
                        // with an unknown past.
                        if made_verified && n > 1 {
                            e.insert(n - 1);
                            r.verified(key(i));
                        } else {
                            e.insert(0);
                            r.verified.remove(&key(i));
                        }
                    }
                }
                let keys: Vec<ServiceKey> = present.keys().copied().collect();
                let chosen = round(&mut r, &keys, syncs);
                prop_assert!(chosen.len() >= keys.len().div_ceil(syncs as usize));
                for key in chosen {
                    present.insert(key, n);
                }
                for (key, at) in &present {
                    prop_assert!(n - at < u64::from(syncs), "round {}: {} read in {}", n, key, at);
                }
            }
        }
    }
}
