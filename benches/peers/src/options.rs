//! The command line: every flag, its default, and the checks on its value.

use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::libraries::LibraryKind;

/// quorumlock (both modes) vs rslock vs a bare Redlock (the floor) vs etcd, side by side on
/// one local lab.
#[derive(Debug, Clone, Parser)]
#[command(name = "quorumlock-peers")]
// A flag given twice keeps its last value, as the hand-written parser did.
#[command(args_override_self = true)]
pub struct Options {
    /// Rounds per lab shape; every figure is the median over them.
    #[arg(long, value_name = "N", default_value = "5", value_parser = positive_count)]
    pub rounds: usize,

    /// Lab shape to run on [default: both; sentinel with --profile].
    #[arg(long, value_name = "SHAPE")]
    pub shape: Option<ShapeChoice>,

    /// Sequential acquires timed per round and library.
    #[arg(long, value_name = "N", default_value = "2000", value_parser = positive_count)]
    pub samples: usize,

    /// Tokio runtime that every library shares (multi: one worker thread per core).
    #[arg(long, value_name = "RUNTIME", default_value = "multi")]
    pub runtime: RuntimeChoice,

    /// Seconds of lock+release cycles at concurrency 1.
    #[arg(long = "c1-secs", value_name = "S", default_value = "1", value_parser = seconds)]
    pub c1: Duration,

    /// Seconds of lock+release cycles at concurrency 64.
    #[arg(long = "c64-secs", value_name = "S", default_value = "2", value_parser = seconds)]
    pub c64: Duration,

    /// Seconds of the contended phase (16 workers, one resource).
    #[arg(long = "contend-secs", value_name = "S", default_value = "2", value_parser = seconds)]
    pub contend: Duration,

    /// Seconds of the failover phase (product shape only): quorumlock, then etcd, then
    /// quorumlock-acked, 16 tasks cycling; a third of the way in, one group's master or etcd's
    /// leader is killed.
    #[arg(long = "failover-secs", value_name = "S", default_value = "9", value_parser = seconds)]
    pub failover: Duration,

    /// Skip the failover phase.
    #[arg(long)]
    pub no_failover: bool,

    /// Run only this library's concurrency-64 phase and print the PIDs (for perf).
    #[arg(long, value_name = "LIBRARY")]
    pub profile: Option<LibraryKind>,

    /// Seconds of the --profile run.
    #[arg(long = "secs", value_name = "S", default_value = "10", value_parser = seconds)]
    pub profile_secs: Duration,

    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    pub bench: bool,
}

/// The lab shapes `--shape` can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShapeChoice {
    Sentinel,
    Plain,
    Both,
}

/// The runtimes `--runtime` can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RuntimeChoice {
    Multi,
    Current,
}

/// One lab shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The product's shape: 5 groups of master + 1 replica, 3 Sentinels.
    Sentinel,
    /// rslock's usual setup: 5 plain masters.
    Plain,
}

impl Shape {
    pub fn describe(self) -> &'static str {
        match self {
            Shape::Sentinel => "5 groups (master + 1 replica) under 3 Sentinels",
            Shape::Plain => "5 plain masters (no replicas, no Sentinels)",
        }
    }

    pub fn tag(self) -> &'static str {
        match self {
            Shape::Sentinel => "sentinel",
            Shape::Plain => "plain",
        }
    }
}

impl Options {
    /// The shapes a comparison runs on, in order.
    pub fn shapes(&self) -> Vec<Shape> {
        match self.shape {
            Some(ShapeChoice::Sentinel) => vec![Shape::Sentinel],
            Some(ShapeChoice::Plain) => vec![Shape::Plain],
            Some(ShapeChoice::Both) | None => vec![Shape::Sentinel, Shape::Plain],
        }
    }

    /// The one shape a profile runs on: the product's, unless `--shape plain` was given.
    pub fn profile_shape(&self) -> Shape {
        match self.shape {
            Some(ShapeChoice::Plain) => Shape::Plain,
            Some(ShapeChoice::Sentinel | ShapeChoice::Both) | None => Shape::Sentinel,
        }
    }

    pub fn current_thread(&self) -> bool {
        self.runtime == RuntimeChoice::Current
    }
}

/// A phase length: a number of seconds above 0 and below an hour.
fn seconds(value: &str) -> Result<Duration, String> {
    value
        .parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0 && *s < 3600.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("not a number of seconds: {value}"))
}

/// A count above 0.
fn positive_count(value: &str) -> Result<usize, String> {
    value
        .parse::<usize>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("not a positive count: {value}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        Options::try_parse_from(std::iter::once("quorumlock-peers").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_match_the_old_parser() -> Result<(), clap::Error> {
        let options = parse(&[])?;
        assert_eq!(options.rounds, 5);
        assert_eq!(options.samples, 2000);
        assert_eq!(options.shapes(), vec![Shape::Sentinel, Shape::Plain]);
        assert!(!options.current_thread());
        assert_eq!(options.c1, Duration::from_secs(1));
        assert_eq!(options.c64, Duration::from_secs(2));
        assert_eq!(options.contend, Duration::from_secs(2));
        assert_eq!(options.failover, Duration::from_secs(9));
        assert!(!options.no_failover);
        assert_eq!(options.profile, None);
        assert_eq!(options.profile_secs, Duration::from_secs(10));
        Ok(())
    }

    #[test]
    fn profile_runs_on_the_product_shape_unless_told() -> Result<(), clap::Error> {
        let options = parse(&["--profile", "rslock", "--secs", "0.5"])?;
        assert_eq!(options.profile, Some(LibraryKind::Rs));
        assert_eq!(options.profile_shape(), Shape::Sentinel);
        assert_eq!(options.profile_secs, Duration::from_millis(500));
        let plain = parse(&["--profile", "floor", "--shape", "plain"])?;
        assert_eq!(plain.profile_shape(), Shape::Plain);
        let acked = parse(&["--profile", "quorumlock-acked"])?;
        assert_eq!(acked.profile, Some(LibraryKind::QuorumAcked));
        Ok(())
    }

    #[test]
    fn bad_values_and_cargo_bench_flag() -> Result<(), clap::Error> {
        assert!(parse(&["--rounds", "0"]).is_err());
        assert!(parse(&["--c1-secs", "3600"]).is_err());
        assert!(parse(&["--shape", "ring"]).is_err());
        assert!(parse(&["--bogus"]).is_err());
        let options = parse(&["--bench", "--rounds", "2", "--rounds", "3"])?;
        assert_eq!(options.rounds, 3);
        Ok(())
    }
}
