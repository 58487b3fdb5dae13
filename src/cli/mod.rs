//! The `quorumlock` command line: argument parsing, topology lookup, exit codes, and one
//! module per command family. `main.rs` only calls [`main`].

mod admit;
mod bench;
mod chaos;
mod demo;
mod health;
pub mod lab;
mod locks;
mod output;
mod run;
pub mod serve;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::Error;
use crate::config::Topology;
use crate::lab::Lab;

/// Exit codes, documented in `--help` and the README.
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// The lock is held by someone else, or a token does not hold it.
    pub const DENIED: u8 = 1;
    /// Bad arguments or configuration.
    pub const USAGE: u8 = 2;
    /// Not enough groups answered.
    pub const UNAVAILABLE: u8 = 3;
    /// Anything else (I/O, lab processes, a failed safety check).
    pub const FAILURE: u8 = 4;
    /// `run`: the lease was lost while the command ran, and the command was stopped. Above
    /// the sysexits range (64..=78), below 124..=127 (timeout, env, shells) and the 128+N of
    /// a command killed by a signal.
    pub const LEASE_LOST: u8 = 121;
}

const AFTER_HELP: &str = "Examples:
  quorumlock demo                 # start a local lab, run contending workers, kill a master, check safety
  quorumlock lab up               # start a local lab and keep it running
  quorumlock --lab bench          # benchmark against the running lab
  quorumlock run db:migrations -- ./migrate.sh   # hold a lock while a command runs

Exit codes: 0 ok, 1 held or denied, 2 usage or configuration, 3 quorum unavailable, 4 other failure,
121 the lease was lost while `run`'s command ran (which was stopped); otherwise `run` exits with
its command's code.";

#[derive(Debug, Parser)]
#[command(
    name = "quorumlock",
    version,
    about = "Majority-backed distributed locks over independent Redis Sentinel groups",
    after_help = AFTER_HELP
)]
pub struct Cli {
    /// Topology file (TOML). Default: ./quorumlock.toml, else the running lab's config.
    #[arg(long, global = true, env = "QUORUMLOCK_CONFIG")]
    config: Option<PathBuf>,
    /// Use the config of the lab running in --lab-dir.
    #[arg(long, global = true, conflicts_with = "config")]
    lab: bool,
    /// Where `lab up` keeps its processes' files and config.
    #[arg(
        long,
        global = true,
        env = "QUORUMLOCK_LAB_DIR",
        default_value = ".quorumlock/lab"
    )]
    lab_dir: PathBuf,
    /// Override the per-call timeout of the topology, in milliseconds.
    #[arg(long, global = true)]
    call_timeout_ms: Option<u64>,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a local topology of real redis-server masters, replicas and Sentinels.
    #[command(subcommand)]
    Lab(lab::LabCommand),
    /// Start a lab, let workers contend while a master is killed, print a safety summary.
    Demo(demo::DemoArgs),
    /// Measure acquire latency and lock throughput against a topology.
    Bench(bench::BenchArgs),
    /// Kill, freeze and restart masters while workers contend; check that the lock held.
    Chaos(chaos::ChaosArgs),
    /// Show one lock as every group sees it, and the quorum's verdict (advisory).
    Status(locks::StatusArgs),
    /// List current locks, their owners and time left.
    List(locks::ListArgs),
    /// Acquire a lock; print its token, or hold it (renewed) until Ctrl-C with --hold.
    Acquire(locks::AcquireArgs),
    /// Hold a lock (renewed) while a command runs; release it when the command ends.
    Run(run::RunArgs),
    /// Release a lock you hold, by token.
    Release(locks::ReleaseArgs),
    /// Renew a lock you hold, by token.
    Extend(locks::ExtendArgs),
    /// Delete a lock whoever holds it (admins: clears a stuck lock).
    ForceRelease(locks::ForceReleaseArgs),
    /// Give the masters the lock policy and admit them to the vote (a new deployment, a
    /// raised policy, or masters that lost their data).
    Admit(admit::AdmitArgs),
    /// Each group's state: master, Sentinels, replicas and lag, latency, quarantine.
    Health,
    /// A live view of one lock, or of all locks, refreshed until Ctrl-C.
    Watch(locks::WatchArgs),
    /// Print a shell completion script.
    #[command(
        after_help = "Example:\n  quorumlock completions bash > /etc/bash_completion.d/quorumlock"
    )]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Serve the lock tools to AI agents over MCP (stdio, or streamable HTTP with --http).
    Serve(serve::ServeArgs),
}

/// Parses arguments, runs the command, and maps its outcome to an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(exit_code(&error))
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,fred=error"));
    // Logs go to stderr so that stdout stays machine-readable (tables, JSON, MCP on stdio).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

async fn run(cli: Cli) -> anyhow::Result<u8> {
    let json = cli.json;
    match &cli.command {
        Command::Lab(command) => lab::run(command.clone(), &cli.lab_dir, json)
            .await
            .map(|()| exit::OK),
        Command::Demo(args) => demo::run(args).await,
        Command::Bench(args) => bench::run(args, &cli).await,
        Command::Chaos(args) => chaos::run(args, cli.lab, &cli.lab_dir, json).await,
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(*shell, &mut command, "quorumlock", &mut std::io::stdout());
            Ok(exit::OK)
        }
        Command::Status(args) => {
            cli.with_locks(async |l| locks::status(l, args, json).await)
                .await
        }
        Command::List(args) => {
            cli.with_locks(async |l| locks::list(l, args, json).await)
                .await
        }
        Command::Acquire(args) => {
            cli.with_locks(async |l| locks::acquire(l, args, json).await)
                .await
        }
        Command::Run(args) => {
            cli.with_locks(async |l| run::run(l, args, json).await)
                .await
        }
        Command::Release(args) => {
            cli.with_locks(async |l| locks::release(l, args, json).await)
                .await
        }
        Command::Extend(args) => {
            cli.with_locks(async |l| locks::extend(l, args, json).await)
                .await
        }
        Command::ForceRelease(args) => {
            cli.with_locks(async |l| locks::force_release(l, args, json).await)
                .await
        }
        Command::Health => cli.with_locks(async |l| health::run(l, json).await).await,
        Command::Admit(args) => {
            cli.with_locks(async |l| admit::run(l, args, json).await)
                .await
        }
        Command::Watch(args) => {
            cli.with_locks(async |l| locks::watch(l, args, json).await)
                .await
        }
        Command::Serve(args) => serve::run(args, cli.topology()?.ok_or(NoTopology)?).await,
    }
}

/// No topology could be found; the message says where one can come from.
#[derive(Debug, thiserror::Error)]
#[error(
    "no topology configured: pass --config FILE, set QUORUMLOCK_CONFIG, put a quorumlock.toml here, or start a local lab with `quorumlock lab up`"
)]
struct NoTopology;

/// Maps an error to the documented exit code.
fn exit_code(error: &anyhow::Error) -> u8 {
    match error.downcast_ref::<Error>() {
        Some(Error::Held { .. } | Error::NotHeld { .. }) => exit::DENIED,
        Some(Error::Unavailable { .. } | Error::Expired { .. }) => exit::UNAVAILABLE,
        Some(Error::InvalidInput { .. } | Error::Config(_)) => exit::USAGE,
        Some(Error::Setup { .. }) => exit::FAILURE,
        Some(Error::LeaseLost { .. }) => exit::LEASE_LOST,
        None if error.downcast_ref::<crate::config::ConfigError>().is_some()
            || error.downcast_ref::<NoTopology>().is_some() =>
        {
            exit::USAGE
        }
        None => exit::FAILURE,
    }
}

impl Cli {
    /// Runs a command against the configured topology, then closes it: before the process
    /// exits, a grant the vote was decided without still lands on its group.
    async fn with_locks(
        &self,
        command: impl AsyncFnOnce(&crate::Locks) -> anyhow::Result<u8>,
    ) -> anyhow::Result<u8> {
        let locks = self.connect().await?;
        let outcome = command(&locks).await;
        locks.close().await;
        outcome
    }

    /// Connects to the configured topology.
    async fn connect(&self) -> anyhow::Result<crate::Locks> {
        let topology = self.topology()?.ok_or(NoTopology)?;
        Ok(crate::Locks::connect(topology).await?)
    }

    /// The topology for commands that talk to groups: --config, --lab, ./quorumlock.toml,
    /// or the running lab, in that order; then --call-timeout-ms.
    fn topology(&self) -> anyhow::Result<Option<Topology>> {
        let path = if let Some(path) = &self.config {
            Some(path.clone())
        } else if self.lab {
            Some(Lab::open(&self.lab_dir)?.config_path())
        } else if Path::new("quorumlock.toml").exists() {
            Some(PathBuf::from("quorumlock.toml"))
        } else {
            Lab::open(&self.lab_dir).ok().map(|lab| lab.config_path())
        };
        let Some(path) = path else { return Ok(None) };
        let mut topology = Topology::from_file(&path)?;
        if let Some(timeout) = self.call_timeout_ms {
            topology.call_timeout_ms = timeout;
            topology.validate()?;
        }
        Ok(Some(topology))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
