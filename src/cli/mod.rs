//! The `quorumlock` command line: argument parsing, topology lookup, exit codes, and one
//! module per command family. `main.rs` only calls [`main`].

mod admit;
mod bench;
mod chaos;
mod demo;
mod health;
pub mod lab;
mod lease;
mod locks;
mod output;
mod quarantine;
mod run;
pub mod serve;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{ArgAction, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::Error;
use crate::lab::Lab;
use crate::{ConfigLocation, ConfigSource, Topology};
use output::LogFormat;

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
its command's code. With --json, errors are a JSON object on stdout (`error`, `kind`, `field`
when one is wrong) with the same exit codes.

Topology file, the first found: --config FILE, --lab (the lab in --lab-dir), QUORUMLOCK_CONFIG,
./quorumlock.toml, $XDG_CONFIG_HOME/quorumlock/quorumlock.toml (else ~/.config/quorumlock/...),
/etc/quorumlock/quorumlock.toml, and last the config of the lab running in --lab-dir.
Passwords can stay out of it: password_file or password_env (and sentinel_password_file,
sentinel_password_env) beside each group's password.";

#[derive(Debug, Parser)]
#[command(
    name = "quorumlock",
    version,
    about = "Majority-backed distributed locks over independent Redis Sentinel groups",
    after_help = AFTER_HELP
)]
pub struct Cli {
    /// Topology file (TOML). Without it, the search order below applies (QUORUMLOCK_CONFIG, then
    /// ./quorumlock.toml, the user's and the system's file, then the running lab).
    #[arg(long, global = true)]
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
    /// Print JSON instead of tables; errors too.
    #[arg(long, global = true)]
    json: bool,
    /// More log output on stderr: -v info, -vv debug, -vvv trace. RUST_LOG, when set, wins.
    #[arg(short, long, global = true, action = ArgAction::Count, conflicts_with = "quiet")]
    verbose: u8,
    /// Less log output on stderr: -q errors only, -qq none. RUST_LOG, when set, wins.
    #[arg(short, long, global = true, action = ArgAction::Count)]
    quiet: u8,
    /// Log format on stderr: text, or json (one object a line, for log collectors).
    #[arg(
        long,
        global = true,
        value_enum,
        env = "QUORUMLOCK_LOG_FORMAT",
        default_value_t = LogFormat::Text
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a local topology of real redis-server masters, replicas and Sentinels.
    #[command(
        subcommand,
        after_help = "Examples:
  quorumlock lab up               # 5 groups (master + replica) and 3 Sentinels on 127.0.0.1
  quorumlock lab status           # every process, its port, PID and role
  quorumlock --lab health         # what the lock engine sees of it
  quorumlock lab kill 2           # kill g2's master: Sentinel promotes its replica
  quorumlock lab restart 2        # bring it back, empty
  quorumlock lab down             # stop every process of the lab

Each subcommand's --help has its own examples. The lab lives in --lab-dir (.quorumlock/lab)."
    )]
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
    /// Put a master, or a Cluster slot, back in quarantine: after a reshard closed a slot
    /// back on its source, or keys were restored by hand.
    Quarantine(quarantine::QuarantineArgs),
    /// Each group's state: master, Sentinels, replicas and lag, latency, quarantine.
    #[command(after_help = "Examples:
  quorumlock --lab health                      # the running lab's groups
  quorumlock --config prod.toml health         # exits 3 when too few groups vote for a quorum
  quorumlock --json health | jq '.groups[] | select(.reachable | not) | .group'

It names the topology file in use, and prints UNSAFE lines for settings that break a safety
assumption, each with what to change.")]
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
    let cli = match parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    output::init_logs(cli.verbose, cli.quiet, cli.log_format);
    // ring as the process's rustls provider: the engine and the server pass it explicitly,
    // but an HTTP client built with TLS (the MCP bench's) asks for the process default.
    // An error only means one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let json = cli.json;
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            let error = anyhow::Error::new(error).context("cannot start the async runtime");
            output::error(&error, exit::FAILURE, json);
            return ExitCode::from(exit::FAILURE);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            let code = exit_code(&error);
            output::error(&error, code, json);
            ExitCode::from(code)
        }
    }
}

/// Parses the arguments; `--help` names the topology file in use. A usage error is JSON when
/// `--json` is among the arguments.
fn parse() -> Result<Cli, ExitCode> {
    let mut command = Cli::command();
    // Only help is worth the search (it reads the lab directory's state).
    // args_os: an argument that is not UTF-8 must reach clap's error, not panic here.
    let given = |flags: &[&str]| std::env::args_os().any(|arg| flags.iter().any(|f| arg == *f));
    if given(&["--help", "-h", "help"]) {
        let in_use = match Cli::default_location() {
            Ok(Some(location)) => location.to_string(),
            Ok(None) => "none found".to_string(),
            Err(error) => format!("none ({error:#})"),
        };
        command = command.after_help(format!(
            "{AFTER_HELP}\nIn use without --config or --lab: {in_use}."
        ));
    }
    let parsed = command
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches));
    match parsed {
        Ok(cli) => Ok(cli),
        Err(error) if error.use_stderr() && given(&["--json"]) => {
            let code = u8::try_from(error.exit_code()).unwrap_or(exit::USAGE);
            output::usage_error(&error.render().to_string(), code);
            Err(ExitCode::from(code))
        }
        Err(error) => error.exit(),
    }
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
        Command::Health => {
            let (topology, location) = cli.located()?.ok_or(NoTopology)?;
            let locks = crate::Locks::connect(topology).await?;
            let outcome = health::run(&locks, &location, json).await;
            locks.close().await;
            outcome
        }
        Command::Admit(args) => {
            cli.with_locks(async |l| admit::run(l, args, json).await)
                .await
        }
        Command::Quarantine(args) => {
            cli.with_locks(async |l| quarantine::run(l, args, json).await)
                .await
        }
        Command::Watch(args) => {
            cli.with_locks(async |l| locks::watch(l, args, json).await)
                .await
        }
        Command::Serve(args) => {
            let (topology, location) = cli.located()?.ok_or(NoTopology)?;
            // A server's log says which file it runs with; health and --help say it to people.
            tracing::info!(
                config = %location.path.display(),
                source = location.source.describe(),
                "topology file"
            );
            serve::run(args, topology, &cli.lab_dir).await
        }
    }
}

/// No topology could be found; the message says where one can come from.
#[derive(Debug, thiserror::Error)]
#[error(
    "no topology configured: pass --config FILE, set QUORUMLOCK_CONFIG, put a quorumlock.toml here, in ~/.config/quorumlock/ or /etc/quorumlock/, or start a local lab with `quorumlock lab up`"
)]
pub(crate) struct NoTopology;

/// Maps an error to the documented exit code.
fn exit_code(error: &anyhow::Error) -> u8 {
    match error.downcast_ref::<Error>() {
        Some(Error::Held { .. } | Error::NotHeld { .. }) => exit::DENIED,
        Some(
            Error::Unavailable { .. } | Error::ListingUnavailable { .. } | Error::Expired { .. },
        ) => exit::UNAVAILABLE,
        Some(Error::InvalidInput { .. } | Error::Config(_)) => exit::USAGE,
        Some(Error::Setup { .. }) => exit::FAILURE,
        Some(Error::LeaseLost { .. }) => exit::LEASE_LOST,
        None if error.downcast_ref::<crate::ConfigError>().is_some()
            || error.downcast_ref::<NoTopology>().is_some()
            || error.downcast_ref::<serve::TokenTwice>().is_some() =>
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

    /// The topology for commands that talk to groups.
    fn topology(&self) -> anyhow::Result<Option<Topology>> {
        Ok(self.located()?.map(|(topology, _)| topology))
    }

    /// The topology and where it was found: --config, --lab, then [`Cli::search`]. Secrets
    /// and `QUORUMLOCK_*` overrides are read from the environment, then --call-timeout-ms
    /// applies.
    fn located(&self) -> anyhow::Result<Option<(Topology, ConfigLocation)>> {
        let location = if let Some(path) = &self.config {
            Some(ConfigLocation {
                path: path.clone(),
                source: ConfigSource::Flag,
            })
        } else if self.lab {
            Some(ConfigLocation {
                path: Lab::open(&self.lab_dir)?.config_path(),
                source: ConfigSource::Lab,
            })
        } else {
            Self::search(&self.lab_dir)?
        };
        let Some(location) = location else {
            return Ok(None);
        };
        let mut topology = Topology::from_file(&location.path)?.with_env()?;
        if let Some(timeout) = self.call_timeout_ms {
            topology.call_timeout_ms = timeout;
        }
        topology.validate()?;
        Ok(Some((topology, location)))
    }

    /// QUORUMLOCK_CONFIG, ./quorumlock.toml, the user's file, the system's file, then the
    /// lab running in `lab_dir`.
    fn search(lab_dir: &Path) -> anyhow::Result<Option<ConfigLocation>> {
        if let Some(location) = ConfigLocation::discover(|name| std::env::var(name).ok())? {
            return Ok(Some(location));
        }
        Ok(Lab::open(lab_dir).ok().map(|lab| ConfigLocation {
            path: lab.config_path(),
            source: ConfigSource::RunningLab,
        }))
    }

    /// The file the search finds with the default lab directory (or QUORUMLOCK_LAB_DIR), for
    /// `--help`.
    fn default_location() -> anyhow::Result<Option<ConfigLocation>> {
        let lab_dir = std::env::var_os("QUORUMLOCK_LAB_DIR")
            .map_or_else(|| PathBuf::from(".quorumlock/lab"), PathBuf::from);
        Self::search(&lab_dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
