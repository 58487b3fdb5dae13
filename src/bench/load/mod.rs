//! The agent-swarm load: many streamable-HTTP sessions, each holding a keepalive lease (or,
//! with `--bench-stateless`, agents renewing plain leases with `extend_lock`), while a few
//! more sessions acquire and release, all from real MCP clients in this one process against
//! a `quorumlock serve --http` child.
//!
//! `quorumlock serve --bench-sessions N --bench-seconds S` runs it against the configured
//! topology and prints what the server did: renewals on time, leases lost, its memory growth
//! per session, CPU per renewal (its own, and the masters' when the lab is known), and
//! `acquire_lock` latency under that background. The child reports its renewal counts on
//! stderr (`serve --report-renewals`), so the figures are the server's own, not estimates.
//!
//! `agents` holds the clients, `server` the child and `/proc`, `report` the figures.

mod agents;
mod report;
mod server;

pub use report::{LoadReport, Percentiles, summary};

use agents::{
    AgentRenewals, Churned, Client, Holder, churn_for, count_still_renewing, open_churn,
    open_holders, release_paced,
};
use server::{Server, counts, cpu_seconds, raise_open_files, rss_kb, start, stop};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::RenewalCounts;

/// Sessions that acquire and release under the keepalive background.
pub const DEFAULT_CHURN_SESSIONS: usize = 64;
/// Sessions opened at once while the holders connect.
const OPEN_CONCURRENCY: usize = 32;
/// Holders asked per second at the end whether their lease still renews.
const CHECKS_PER_SECOND: u32 = 500;

/// What to run, and with which binary and topology file.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The `quorumlock` binary to start as the server.
    pub binary: PathBuf,
    /// The topology file the server reads.
    pub config: PathBuf,
    /// Sessions that each hold one keepalive lease.
    pub sessions: usize,
    /// How long the leases are held while the churn sessions run.
    pub hold: Duration,
    /// Sessions that acquire and release (no keepalive) during the hold.
    pub churn_sessions: usize,
    /// The leases' TTL.
    pub ttl: Duration,
    /// Serve with `--stateless`: agents take plain leases and renew them with `extend_lock`.
    pub stateless: bool,
    /// The masters' PIDs, for their CPU per renewal; empty when unknown.
    pub master_pids: Vec<u32>,
}

/// Why the load could not run.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot start the server {binary}: {source}")]
    Spawn {
        binary: PathBuf,
        source: std::io::Error,
    },
    #[error("the server did not come up: {0}")]
    Start(String),
    #[error(
        "session {index} could not open or take its keepalive lease: {message} (check the open-file limit, `ulimit -n`, and the server's stderr above)"
    )]
    Session { index: usize, message: String },
    #[error(
        "{sessions} sessions need about {needed} open files, in this process and again in the server (one per session's event stream, plus the churn sessions' connections and Redis'), but the open-file limit is {limit} and could not be raised{why}. Raise the hard limit as root before running (`ulimit -Hn {needed}` in the shell, `prlimit --nofile={needed}`, a container's `--ulimit nofile={needed}`, systemd's LimitNOFILE; the kernel allows up to /proc/sys/fs/nr_open), or run at most about {fits} sessions"
    )]
    OpenFiles {
        sessions: usize,
        needed: u64,
        limit: u64,
        why: String,
        fits: u64,
    },
    #[error("cannot read the open-file limit (getrlimit): {0}")]
    ReadLimit(std::io::Error),
    #[error("cannot read the server's /proc entry: {0}")]
    Proc(String),
    #[error("{0}")]
    Histogram(String),
}

/// Runs the load and reports what the server did.
pub async fn run(options: &LoadOptions) -> Result<LoadReport, LoadError> {
    let open_files_limit = raise_open_files(options.sessions, options.churn_sessions)?;
    let mut server = start(options).await?;
    let report = drive(options, &server, open_files_limit).await;
    stop(&mut server).await;
    report
}

/// The run's renewal counts: the server's for keepalive, the agents' own when stateless.
struct Renewals<'a> {
    server: &'a Server,
    agents: Arc<AgentRenewals>,
    stateless: bool,
}

impl Renewals<'_> {
    fn counts(&self) -> RenewalCounts {
        if self.stateless {
            self.agents.counts()
        } else {
            counts(self.server)
        }
    }
}

/// What a run measured, before it is made into the report.
struct Measured {
    ttl_ms: u64,
    open_files_limit: libc::rlim_t,
    open_seconds: f64,
    /// The server's RSS before the holders opened, once they held, and at the end.
    rss_kb: [u64; 3],
    /// The start and end of the quiet stretch; its end starts the hold.
    quiet: [CpuMark; 2],
    hold_end: CpuMark,
    renewals_end: RenewalCounts,
    still_renewing: usize,
    churned: Churned,
}

/// CPU time of the server and of the masters, and the renewals made, at one moment.
struct CpuMark {
    at: Instant,
    server: f64,
    masters: Option<f64>,
    renewals: RenewalCounts,
}

impl CpuMark {
    fn take(
        server: &Server,
        masters: &[u32],
        renewals: &Renewals<'_>,
    ) -> Result<CpuMark, LoadError> {
        Ok(CpuMark {
            at: Instant::now(),
            server: cpu_seconds(server.pid)?,
            // A master that restarted mid-run has a new PID; its figure is then left out.
            masters: (!masters.is_empty())
                .then(|| {
                    masters
                        .iter()
                        .map(|&pid| cpu_seconds(pid))
                        .sum::<Result<f64, _>>()
                        .ok()
                })
                .flatten(),
            renewals: renewals.counts(),
        })
    }
}

async fn drive(
    options: &LoadOptions,
    server: &Server,
    open_files_limit: libc::rlim_t,
) -> Result<LoadReport, LoadError> {
    let ttl_ms = u64::try_from(options.ttl.as_millis()).unwrap_or(u64::MAX);
    let renewals = Renewals {
        server,
        agents: Arc::new(AgentRenewals::default()),
        stateless: options.stateless,
    };
    let churn = open_churn(options, server, ttl_ms).await?;
    let rss_before_kb = rss_kb(server.pid)?;

    let stop_renewing = CancellationToken::new();
    let opened = Instant::now();
    let holders = open_holders(options, server, ttl_ms, &renewals, &stop_renewing).await?;
    let open_seconds = opened.elapsed().as_secs_f64();
    eprintln!(
        "{} agents hold leases ({open_seconds:.1} s to open)",
        holders.len()
    );
    let rss_held_kb = rss_kb(server.pid)?;

    // A quiet stretch first: the server's CPU per renewal with nothing else to do.
    let quiet = options.hold.div_f64(5.0).clamp(
        options.ttl.min(Duration::from_secs(5)),
        Duration::from_secs(30),
    );
    let quiet_start = CpuMark::take(server, &options.master_pids, &renewals)?;
    tokio::time::sleep(quiet).await;
    let hold_start = CpuMark::take(server, &options.master_pids, &renewals)?;

    eprintln!(
        "holding for {} s while {} sessions acquire and release",
        options.hold.as_secs(),
        churn.len()
    );
    let churned = churn_for(options.hold, &churn, ttl_ms).await?;
    let hold_end = CpuMark::take(server, &options.master_pids, &renewals)?;
    stop_renewing.cancel();
    let rss_end_kb = rss_kb(server.pid)?;
    let renewals_end = renewals.counts();
    let still_renewing = finish(options, holders, churn, renewals_end).await;
    Ok(LoadReport::new(
        options,
        Measured {
            ttl_ms,
            open_files_limit,
            open_seconds,
            rss_kb: [rss_before_kb, rss_held_kb, rss_end_kb],
            quiet: [quiet_start, hold_start],
            hold_end,
            renewals_end,
            still_renewing,
            churned,
        },
    ))
}

/// Counts the holders still renewing, releases what a stateless run holds, and ends every
/// session.
async fn finish(
    options: &LoadOptions,
    holders: Vec<Holder>,
    churn: Vec<Arc<Client>>,
    renewals_end: RenewalCounts,
) -> usize {
    let still_renewing = if options.stateless {
        release_paced(&holders).await;
        holders
            .len()
            .saturating_sub(usize::try_from(renewals_end.lost).unwrap_or(usize::MAX))
    } else {
        count_still_renewing(&holders).await
    };
    for client in holders.into_iter().map(|holder| holder.client).chain(churn) {
        if let Ok(client) = Arc::try_unwrap(client) {
            let _ = client.cancel().await;
        }
    }
    still_renewing
}
