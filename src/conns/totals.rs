//! The namespace's IPVS totals, `/proc/net/ip_vs_stats`: the connections,
//! packets and bytes IPVS has handled since it was loaded in the namespace,
//! and their rate estimates. No netlink command returns them; they keep
//! counting what services since deleted handled, so they are not the sum
//! of the services' counters.
//!
//! The kernel adds its per-CPU counters into these (and into the services'
//! counters netlink returns) at each tick of the rate estimator, every 2 s:
//! traffic shows up to 2 s late.
//!
//! The kernel writes five hexadecimal counters on the third line and five
//! rates on the sixth (`ip_vs_stats_show` in `net/netfilter/ipvs/ip_vs_ctl.c`):
//!
//! ```text
//!    Total Incoming Outgoing         Incoming         Outgoing
//!    Conns  Packets  Packets            Bytes            Bytes
//!        5        B        8              22C              1A2
//!
//!  Conns/s   Pkts/s   Pkts/s          Bytes/s          Bytes/s
//!        1        1        1               45               34
//! ```

use crate::model::{Stats, StatsSource};

/// A line of `/proc/net/ip_vs_stats` that does not have the kernel's format.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("ip_vs_stats line {line}: {reason}")]
#[non_exhaustive]
pub struct TotalsParseError {
    /// The line number (1 is the first header line).
    pub line: u64,
    /// What is wrong with it.
    pub reason: String,
}

/// The counters (line 3) and the rates (line 6) of the file's text.
pub(super) fn parse(text: &str) -> Result<Stats, TotalsParseError> {
    let lines: Vec<&str> = text.lines().collect();
    let [conns, in_pkts, out_pkts, in_bytes, out_bytes] = five(&lines, 3)?;
    let [cps, in_pps, out_pps, in_bps, out_bps] = five(&lines, 6)?;
    Ok(Stats {
        conns,
        in_pkts,
        out_pkts,
        in_bytes,
        out_bytes,
        cps,
        in_pps,
        out_pps,
        in_bps,
        out_bps,
        source: StatsSource::Procfs,
    })
}

/// The five hexadecimal numbers of line `line` (1-based).
fn five(lines: &[&str], line: u64) -> Result<[u64; 5], TotalsParseError> {
    let fail = |reason: String| TotalsParseError { line, reason };
    let text = lines
        .get(line as usize - 1)
        .ok_or_else(|| fail(format!("missing (the file has {} lines)", lines.len())))?;
    let mut out = [0; 5];
    let mut words = text.split_ascii_whitespace();
    for (i, slot) in out.iter_mut().enumerate() {
        let word = words
            .next()
            .ok_or_else(|| fail(format!("{i} numbers where 5 were expected")))?;
        *slot = u64::from_str_radix(word, 16)
            .map_err(|e| fail(format!("{word:?} is not a hexadecimal counter: {e}")))?;
    }
    if let Some(extra) = words.next() {
        return Err(fail(format!("more than 5 numbers ({extra:?} after them)")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Read off 6.1.0-57-amd64 (tests/kernel_conns.rs, three TCP
    /// connections and two UDP exchanges through two services).
    const CAPTURED: &str = "   Total Incoming Outgoing         Incoming         Outgoing
   Conns  Packets  Packets            Bytes            Bytes
       5        B        8              22C              1A2

 Conns/s   Pkts/s   Pkts/s          Bytes/s          Bytes/s
       1        1        1               45               34
";

    #[test]
    fn reads_the_counters_and_the_rates() {
        let s = parse(CAPTURED).expect("parse");
        assert_eq!(
            (s.conns, s.in_pkts, s.out_pkts, s.in_bytes, s.out_bytes),
            (5, 0xb, 8, 0x22c, 0x1a2)
        );
        assert_eq!(
            (s.cps, s.in_pps, s.out_pps, s.in_bps, s.out_bps),
            (1, 1, 1, 0x45, 0x34)
        );
        assert_eq!(s.source, StatsSource::Procfs);
    }

    #[test]
    fn full_64_bit_counters() {
        let text = CAPTURED.replace("             22C", "FFFFFFFFFFFFFFFF");
        assert_eq!(parse(&text).expect("parse").in_bytes, u64::MAX);
    }

    #[test]
    fn a_malformed_file_names_its_line() {
        let cut: String = CAPTURED.lines().take(4).map(|l| format!("{l}\n")).collect();
        let e = parse(&cut).expect_err("rates missing");
        assert_eq!(e.line, 6);
        let e = parse(&CAPTURED.replace("22C", "22G")).expect_err("not hex");
        assert_eq!(e.line, 3);
        assert!(e.reason.contains("\"22G\""), "{e}");
        let e = parse(&CAPTURED.replace("1A2\n", "1A2 7\n")).expect_err("six numbers");
        assert!(e.reason.contains("more than 5"), "{e}");
        assert!(parse("").is_err());
    }
}
