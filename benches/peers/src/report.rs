//! The report: each round's figures by row, and per lab shape a Markdown table of the medians
//! over the rounds, the ratios to rslock, the floor and etcd, the targets met or not, what
//! acknowledged mode costs over quorumlock's default mode, the calls that failed, and the
//! failover figures.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::libraries::LibraryKind;
use crate::options::{Options, Shape};
use crate::workloads::{Failover, Failures};

/// Every figure of one library's round, by row key.
pub type Figures = BTreeMap<&'static str, f64>;

/// Every round's figures of each library, in round order.
pub type Results = BTreeMap<LibraryKind, Vec<Figures>>;

/// The failover phase's result of each library that went through it.
pub type FailoverResults = BTreeMap<LibraryKind, Failover>;

/// The calls that failed in phases 1-2, over every round, of each library.
pub type FailedCalls = BTreeMap<LibraryKind, Failures>;

struct Row {
    key: &'static str,
    label: &'static str,
    better: &'static str,
    /// Summed over rounds instead of the median (counts that must stay 0).
    summed: bool,
    decimals: usize,
}

/// The table's rows, in order.
const ROWS: &[Row] = &[
    Row {
        key: "acq_p50",
        label: "acquire p50 (µs)",
        better: "lower",
        summed: false,
        decimals: 0,
    },
    Row {
        key: "acq_p99",
        label: "acquire p99 (µs)",
        better: "lower",
        summed: false,
        decimals: 0,
    },
    Row {
        key: "seq_cpu_client",
        label: "sequential: client CPU per acquire+release (µs)",
        better: "lower",
        summed: false,
        decimals: 0,
    },
    Row {
        key: "seq_cpu_masters",
        label: "sequential: server CPU per acquire+release (µs; redis masters, or etcd's 3 members)",
        better: "lower",
        summed: false,
        decimals: 0,
    },
    Row {
        key: "c1",
        label: "lock+release cycles/s, concurrency 1",
        better: "higher",
        summed: false,
        decimals: 0,
    },
    Row {
        key: "c64",
        label: "lock+release cycles/s, concurrency 64",
        better: "higher",
        summed: false,
        decimals: 0,
    },
    Row {
        key: "cont",
        label: "contended acquisitions/s (16 workers, 1 ms hold)",
        better: "higher",
        summed: false,
        decimals: 1,
    },
    Row {
        key: "cont_wait",
        label: "contended max wait (ms)",
        better: "lower",
        summed: false,
        decimals: 0,
    },
    Row {
        key: "cont_attempts",
        label: "contended: acquire attempts per acquisition (only quorumlock reports it)",
        better: "lower",
        summed: false,
        decimals: 1,
    },
    Row {
        key: "overlaps",
        label: "contended overlaps (sum of rounds)",
        better: "must be 0",
        summed: true,
        decimals: 0,
    },
    Row {
        key: "fence_regr",
        label: "fencing regressions (sum; quorumlock's tokens, etcd's key revisions)",
        better: "must be 0",
        summed: true,
        decimals: 0,
    },
    Row {
        key: "errors",
        label: "failed acquires/releases in phases 1-2 (sum)",
        better: "lower",
        summed: true,
        decimals: 0,
    },
    Row {
        key: "cpu_client",
        label: "c64: client CPU per cycle (µs)",
        better: "lower",
        summed: false,
        decimals: 1,
    },
    Row {
        key: "cpu_masters",
        label: "c64: server CPU per cycle (µs; 5 redis masters summed, or etcd's 3 members)",
        better: "lower",
        summed: false,
        decimals: 1,
    },
    Row {
        key: "cpu_others",
        label: "c64: replicas+Sentinels CPU per cycle (µs)",
        better: "lower",
        summed: false,
        decimals: 1,
    },
    Row {
        key: "client_util",
        label: "c64: client CPU utilisation (cores)",
        better: "-",
        summed: false,
        decimals: 2,
    },
    Row {
        key: "vcsw",
        label: "c64: client voluntary context switches per cycle",
        better: "lower",
        summed: false,
        decimals: 2,
    },
];

/// The median; NaN for no values, so that it prints as "-".
fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// One figure of one library over every round.
fn values(results: &Results, kind: LibraryKind, key: &str) -> Vec<f64> {
    results
        .get(&kind)
        .into_iter()
        .flatten()
        .filter_map(|figures| figures.get(key).copied())
        .collect()
}

fn median_of(results: &Results, kind: LibraryKind, key: &str) -> f64 {
    median(values(results, kind, key))
}

fn sum_of(results: &Results, kind: LibraryKind, key: &str) -> f64 {
    values(results, kind, key).iter().sum()
}

fn format_value(v: f64, decimals: usize) -> String {
    if v.is_nan() {
        "-".into()
    } else {
        format!("{v:.decimals$}")
    }
}

/// a / b with two decimals; "-" for a count or where either side has no figure.
fn ratio(a: f64, b: f64, summed: bool) -> String {
    if summed || b == 0.0 || b.is_nan() || a.is_nan() {
        "-".to_string()
    } else {
        format!("{:.2}", a / b)
    }
}

/// The table of one lab shape, followed by the targets. quorumlock in acknowledged mode has a
/// column and a ratio to quorumlock's default mode where it ran.
pub fn table(shape: Shape, rounds: usize, results: &Results) -> String {
    let mut out = String::new();
    let acked = results.contains_key(&LibraryKind::QuorumAcked);
    let _ = writeln!(
        out,
        "\n### {} — medians of {} rounds\n",
        shape.describe(),
        rounds
    );
    let (acked_head, acked_ratio_head, acked_rule) = if acked {
        (" quorumlock-acked |", " ratio acked/q |", "---:|---:|")
    } else {
        ("", "", "")
    };
    let _ = writeln!(
        out,
        "| figure | quorumlock |{acked_head} rslock | floor | etcd | ratio q/r | ratio floor/r | ratio q/floor | ratio q/etcd |{acked_ratio_head} better |"
    );
    let _ = writeln!(
        out,
        "|---|---:|{acked_rule}---:|---:|---:|---:|---:|---:|---:|---|"
    );
    for row in ROWS {
        let pick = |kind: LibraryKind| {
            if row.summed {
                sum_of(results, kind, row.key)
            } else {
                median_of(results, kind, row.key)
            }
        };
        let q = pick(LibraryKind::Quorum);
        let r = pick(LibraryKind::Rs);
        let f = pick(LibraryKind::Floor);
        let e = pick(LibraryKind::Etcd);
        let (acked_cell, acked_ratio) = if acked {
            let a = pick(LibraryKind::QuorumAcked);
            (
                format!(" {} |", format_value(a, row.decimals)),
                format!(" {} |", ratio(a, q, row.summed)),
            )
        } else {
            (String::new(), String::new())
        };
        // rslock and the floor have no fencing tokens.
        let without_tokens = |v: f64| {
            if row.key == "fence_regr" {
                "n/a".into()
            } else {
                format_value(v, row.decimals)
            }
        };
        // etcd has no replicas or Sentinels beside its members.
        let etcd_value = if row.key == "cpu_others" {
            "n/a".into()
        } else {
            format_value(e, row.decimals)
        };
        let _ = writeln!(
            out,
            "| {} | {} |{acked_cell} {} | {} | {} | {} | {} | {} | {} |{acked_ratio} {} |",
            row.label,
            format_value(q, row.decimals),
            without_tokens(r),
            without_tokens(f),
            etcd_value,
            ratio(q, r, row.summed),
            ratio(f, r, row.summed),
            ratio(q, f, row.summed),
            ratio(q, e, row.summed),
            row.better
        );
    }
    out.push_str(&targets(results));
    out
}

/// One target: quorumlock's median of `key` over another library's, within `bound`.
struct Target {
    label: &'static str,
    key: &'static str,
    against: LibraryKind,
    bound: f64,
    /// The ratio must be at most the bound (latency, waits) rather than at least it.
    at_most: bool,
}

/// The targets of the peer comparison: against etcd (both fenced), against the floor (what
/// the protocol costs on fred), and the longest contended wait against rslock.
const TARGETS: &[Target] = &[
    Target {
        label: "acquire p50 <= 0.25 x etcd's",
        key: "acq_p50",
        against: LibraryKind::Etcd,
        bound: 0.25,
        at_most: true,
    },
    Target {
        label: "cycles/s at concurrency 64 >= 5 x etcd's",
        key: "c64",
        against: LibraryKind::Etcd,
        bound: 5.0,
        at_most: false,
    },
    Target {
        label: "acquire p50 <= 1.2 x the floor's",
        key: "acq_p50",
        against: LibraryKind::Floor,
        bound: 1.2,
        at_most: true,
    },
    Target {
        label: "cycles/s at concurrency 64 >= 1.2 x the floor's",
        key: "c64",
        against: LibraryKind::Floor,
        bound: 1.2,
        at_most: false,
    },
    Target {
        label: "contended max wait <= 1 x etcd's, whose server queues the waiters",
        key: "cont_wait",
        against: LibraryKind::Etcd,
        bound: 1.0,
        at_most: true,
    },
    Target {
        label: "contended max wait <= 0.1 x rslock's, 0 overlaps",
        key: "cont_wait",
        against: LibraryKind::Rs,
        bound: 0.1,
        at_most: true,
    },
];

/// Each target, met or not; any overlap or fencing regression fails them all.
fn targets(results: &Results) -> String {
    let mut out = String::new();
    let faults = [LibraryKind::Quorum, LibraryKind::QuorumAcked]
        .iter()
        .map(|kind| sum_of(results, *kind, "overlaps") + sum_of(results, *kind, "fence_regr"))
        .sum::<f64>()
        + sum_of(results, LibraryKind::Etcd, "fence_regr");
    let _ = writeln!(
        out,
        "\nTargets (medians of the rounds; {faults} overlaps and fencing regressions in all):"
    );
    for target in TARGETS {
        let ratio = median_of(results, LibraryKind::Quorum, target.key)
            / median_of(results, target.against, target.key);
        let within = if target.at_most {
            ratio <= target.bound
        } else {
            ratio >= target.bound
        };
        let verdict = if within && faults == 0.0 {
            "MET"
        } else {
            "NOT MET"
        };
        let _ = writeln!(out, "- {}: {ratio:.2} x -> {verdict}", target.label);
    }
    // A fair hand-over wakes one waiter per release, and that waiter wins its first try.
    let attempts = median_of(results, LibraryKind::Quorum, "cont_attempts");
    let verdict = if attempts <= MAX_ATTEMPTS && faults == 0.0 {
        "MET"
    } else {
        "NOT MET"
    };
    let _ = writeln!(
        out,
        "- contended acquire attempts per acquisition <= {MAX_ATTEMPTS}: {attempts:.2} -> {verdict}"
    );
    out
}

/// The most acquire attempts per contended acquisition a fair hand-over may take.
const MAX_ATTEMPTS: f64 = 1.2;

/// The figures acknowledged mode is judged on, against quorumlock's default mode in the same
/// run: the ratio of the medians, and each round's ratio (both ran in every round, one close
/// after the other). In the plain shape, why it did not run.
pub fn acknowledged_cost(shape: Shape, results: &Results) -> String {
    let mut out = String::new();
    if !results.contains_key(&LibraryKind::QuorumAcked) {
        if shape == Shape::Plain {
            let _ = writeln!(
                out,
                "\nquorumlock-acked: not run on this shape; its masters have no replica to acknowledge a grant (admit --acknowledged refuses them)."
            );
        }
        return out;
    }
    let _ = writeln!(
        out,
        "\nAcknowledged mode against the default mode (quorumlock-acked / quorumlock, same run):"
    );
    let cases = [
        ("acquire p50", "acq_p50", " µs", 0),
        ("acquire p99", "acq_p99", " µs", 0),
        ("cycles/s at concurrency 1", "c1", "/s", 0),
        ("cycles/s at concurrency 64", "c64", "/s", 0),
        ("c64 server CPU per cycle", "cpu_masters", " µs", 1),
        (
            "c64 replicas+Sentinels CPU per cycle",
            "cpu_others",
            " µs",
            1,
        ),
    ];
    for (label, key, unit, decimals) in cases {
        let acked = values(results, LibraryKind::QuorumAcked, key);
        let default = values(results, LibraryKind::Quorum, key);
        let per_round: Vec<String> = acked
            .iter()
            .zip(&default)
            .map(|(a, q)| ratio(*a, *q, false))
            .collect();
        let (a, q) = (median(acked), median(default));
        let _ = writeln!(
            out,
            "- {label}: {}{unit} vs {}{unit} = {} x (rounds: {})",
            format_value(a, decimals),
            format_value(q, decimals),
            ratio(a, q, false),
            per_round.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "- failed acquires/releases in phases 1-2: {} vs {}",
        sum_of(results, LibraryKind::QuorumAcked, "errors"),
        sum_of(results, LibraryKind::Quorum, "errors")
    );
    out
}

/// The calls that failed in phases 1-2, with the first distinct messages; empty when none did.
pub fn failed_calls(failed: &FailedCalls) -> String {
    let mut out = String::new();
    let failing: Vec<_> = failed.iter().filter(|(_, f)| f.count > 0).collect();
    if failing.is_empty() {
        return out;
    }
    let _ = writeln!(out, "\nFailed calls in phases 1-2 (all rounds):");
    for (kind, failures) in failing {
        let _ = writeln!(out, "- {}: {} failed", kind.name(), failures.count);
        for message in &failures.messages {
            let _ = writeln!(out, "  - {message}");
        }
    }
    out
}

/// The failover phase, one column per library that went through it; empty when none did.
pub fn failover_table(options: &Options, results: &FailoverResults) -> String {
    let mut out = String::new();
    if results.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\n### Failover — one run of {:.0} s, 16 tasks cycling lock+release, a kill at {:.0} s\n",
        options.failover.as_secs_f64(),
        (options.failover / 3).as_secs_f64()
    );
    let kinds: Vec<LibraryKind> = results.keys().copied().collect();
    let header: Vec<String> = kinds.iter().map(|kind| killed(*kind)).collect();
    let _ = writeln!(out, "| figure | {} |", header.join(" | "));
    let _ = writeln!(out, "|---|{}", "---:|".repeat(kinds.len()));
    let row = |label: &str, value: &dyn Fn(&Failover) -> String| {
        let cells: Vec<String> = kinds
            .iter()
            .filter_map(|kind| results.get(kind))
            .map(value)
            .collect();
        format!("| {label} | {} |\n", cells.join(" | "))
    };
    out.push_str(&row("longest time with no successful acquire (ms)", &|f| {
        format!("{:.0}", f.longest_gap_ms)
    }));
    out.push_str(&row("  which began at (ms into the phase)", &|f| {
        format!("{:.0}", f.gap_started_ms)
    }));
    out.push_str(&row("failed calls (acquires and releases)", &|f| {
        f.failed.count.to_string()
    }));
    out.push_str(&row("successful acquires", &|f| f.acquired.to_string()));
    for (kind, failover) in results {
        for message in &failover.failed.messages {
            let _ = writeln!(out, "- {} failed: {message}", kind.name());
        }
    }
    out
}

/// The column heading of a library in the failover table: what was killed.
fn killed(kind: LibraryKind) -> String {
    match kind {
        LibraryKind::Etcd => "etcd (leader killed)".into(),
        LibraryKind::Quorum => "quorumlock (group 0's master killed)".into(),
        LibraryKind::QuorumAcked => "quorumlock-acked (group 1's master killed)".into(),
        other => other.name().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_none() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(Vec::new()).is_nan());
    }

    #[test]
    fn ratio_skips_counts_and_missing_figures() {
        assert_eq!(ratio(1.0, 2.0, false), "0.50");
        assert_eq!(ratio(1.0, 2.0, true), "-");
        assert_eq!(ratio(1.0, 0.0, false), "-");
        assert_eq!(ratio(f64::NAN, 2.0, false), "-");
    }

    fn round_of(p50: f64, c64: f64) -> Figures {
        Figures::from([("acq_p50", p50), ("c64", c64), ("errors", 0.0)])
    }

    #[test]
    fn acknowledged_mode_gets_a_column_and_its_ratio_where_it_ran() {
        let mut results = Results::new();
        results.insert(LibraryKind::Quorum, vec![round_of(800.0, 4000.0)]);
        results.insert(LibraryKind::QuorumAcked, vec![round_of(1000.0, 3000.0)]);
        let table = table(Shape::Sentinel, 1, &results);
        let lines: Vec<&str> = table.lines().filter(|l| l.starts_with('|')).collect();
        let cells = |line: &str| line.matches('|').count();
        assert!(lines[0].contains("quorumlock-acked") && lines[0].contains("ratio acked/q"));
        assert!(lines.iter().all(|line| cells(line) == cells(lines[0])));
        assert!(lines[2].starts_with("| acquire p50 (µs) | 800 | 1000 |"));
        assert!(lines[2].contains("| 1.25 | lower |"));
        let cost = acknowledged_cost(Shape::Sentinel, &results);
        assert!(cost.contains("acquire p50: 1000 µs vs 800 µs = 1.25 x (rounds: 1.25)"));
        assert!(cost.contains("cycles/s at concurrency 64: 3000/s vs 4000/s = 0.75 x"));
    }

    #[test]
    fn the_plain_shape_says_why_acknowledged_mode_did_not_run() {
        let mut results = Results::new();
        results.insert(LibraryKind::Quorum, vec![round_of(800.0, 4000.0)]);
        let table = table(Shape::Plain, 1, &results);
        assert!(!table.contains("acked"));
        assert!(acknowledged_cost(Shape::Plain, &results).contains("not run on this shape"));
    }
}
