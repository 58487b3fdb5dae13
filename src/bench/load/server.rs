//! The server under load: the `serve --http` child, its renewal counts, its open-file limit,
//! and what `/proc` says of a process's memory and CPU.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;

use crate::RenewalCounts;
use crate::mcp::{BearerToken, LISTENING_PREFIX, RENEWALS_PREFIX};

use super::{LoadError, LoadOptions, OPEN_CONCURRENCY};

/// The server child, its URL and token, and its latest renewal counts.
pub(super) struct Server {
    child: tokio::process::Child,
    pub(super) pid: u32,
    pub(super) url: String,
    pub(super) token: String,
    renewals: watch::Receiver<RenewalCounts>,
}

/// Starts `serve --http` with room for every session and lease, and waits until it listens.
pub(super) async fn start(options: &LoadOptions) -> Result<Server, LoadError> {
    let token = uuid::Uuid::new_v4().simple().to_string();
    let sessions = options.sessions + options.churn_sessions + 16;
    let idle = options.hold.as_secs() * 2 + 600;
    let mut child = tokio::process::Command::new(&options.binary)
        .arg("--config")
        .arg(&options.config)
        .args(["serve", "--http", "127.0.0.1:0", "--report-renewals"])
        .arg(format!("--max-sessions={sessions}"))
        .arg(format!("--max-keepalive={sessions}"))
        .args(if options.stateless {
            vec!["--stateless".to_string()]
        } else {
            vec![format!("--session-idle-secs={idle}")]
        })
        .arg(format!(
            "--min-ttl-ms={}",
            options.ttl.min(Duration::from_secs(5)).as_millis()
        ))
        .env("RUST_LOG", "warn")
        .env(BearerToken::ENV, &token)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| LoadError::Spawn {
            binary: options.binary.clone(),
            source,
        })?;
    let pid = child
        .id()
        .ok_or_else(|| LoadError::Start("the server exited at once".into()))?;
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| LoadError::Start("no stderr pipe".into()))?;
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        match tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await {
            Ok(Ok(Some(line))) => {
                if let Some(url) = line.strip_prefix(LISTENING_PREFIX) {
                    break url.trim().to_string();
                }
                eprintln!("{line}");
            }
            Ok(Ok(None)) => {
                return Err(LoadError::Start(
                    "the server exited before listening".into(),
                ));
            }
            Ok(Err(error)) => return Err(LoadError::Start(error.to_string())),
            Err(_) => return Err(LoadError::Start("no listening line within 60 s".into())),
        }
    };
    let (report, renewals) = watch::channel(RenewalCounts::default());
    // Keeps draining stderr so the server never blocks on a full pipe, and keeps the latest
    // renewal counts.
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            match line.strip_prefix(RENEWALS_PREFIX).and_then(parse_counts) {
                Some(counts) => {
                    report.send_replace(counts);
                }
                None => eprintln!("{line}"),
            }
        }
    });
    Ok(Server {
        child,
        pid,
        url,
        token,
        renewals,
    })
}

/// The latest renewal counts the server reported (it reports every 100 ms).
pub(super) fn counts(server: &Server) -> RenewalCounts {
    *server.renewals.borrow()
}

/// Parses `renewed late failed lost`.
pub(super) fn parse_counts(text: &str) -> Option<RenewalCounts> {
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    let mut next = || fields.next().and_then(Result::ok);
    Some(RenewalCounts {
        renewed: next()?,
        late: next()?,
        failed: next()?,
        lost: next()?,
    })
}

/// Stops the server with SIGTERM (it releases every lease), then by PID if it lingers.
pub(super) async fn stop(server: &mut Server) {
    if let Ok(pid) = libc::pid_t::try_from(server.pid) {
        // SAFETY: kill(2) on the PID of a child this process started and has not reaped.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
    if tokio::time::timeout(Duration::from_secs(30), server.child.wait())
        .await
        .is_err()
    {
        let _ = server.child.kill().await;
    }
}

/// Open files a load of `sessions` holders and `churn` more sessions needs in this process,
/// and again in the server: one per holder's event stream, two per churn session (its event
/// stream and its request connection), the holders' request connections while they open,
/// and room for Redis connections and the rest.
pub(super) fn open_files_needed(sessions: usize, churn: usize) -> u64 {
    (sessions + 2 * churn + 2 * OPEN_CONCURRENCY + 1024) as u64
}

/// Raises this process's open-file limit (which the server inherits) to what the load needs,
/// as far as the system allows; returns the limit in effect, or says what to raise when it
/// stays too low.
pub(super) fn raise_open_files(sessions: usize, churn: usize) -> Result<libc::rlim_t, LoadError> {
    let needed: libc::rlim_t = open_files_needed(sessions, churn);
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let mut refused = None;
    // SAFETY: getrlimit and setrlimit read and write the one struct passed by pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(LoadError::ReadLimit(std::io::Error::last_os_error()));
        }
        if limit.rlim_cur >= needed {
            return Ok(limit.rlim_cur);
        }
        // Root with CAP_SYS_RESOURCE may raise the hard limit too; anyone may raise the soft
        // one up to it.
        let raised = libc::rlimit {
            rlim_cur: needed,
            rlim_max: needed.max(limit.rlim_max),
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
            refused = Some(std::io::Error::last_os_error());
            let soft = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &soft);
        }
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(LoadError::ReadLimit(std::io::Error::last_os_error()));
        }
    }
    if limit.rlim_cur >= needed {
        return Ok(limit.rlim_cur);
    }
    let fits = limit.rlim_cur.saturating_sub(open_files_needed(0, churn));
    Err(LoadError::OpenFiles {
        sessions,
        needed,
        limit: limit.rlim_cur,
        why: refused.map_or_else(String::new, |error| format!(" ({error})")),
        fits,
    })
}

/// The resident memory of process `pid`, in kB (`VmRSS` in `/proc/PID/status`).
pub(super) fn rss_kb(pid: u32) -> Result<u64, LoadError> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path)
        .map_err(|error| LoadError::Proc(format!("{path}: {error}")))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next())
        .and_then(|kb| kb.parse().ok())
        .ok_or_else(|| LoadError::Proc(format!("{path} has no VmRSS line")))
}

/// The user plus system CPU time of process `pid`, in seconds (`/proc/PID/stat`).
pub(super) fn cpu_seconds(pid: u32) -> Result<f64, LoadError> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path)
        .map_err(|error| LoadError::Proc(format!("{path}: {error}")))?;
    // The command name (field 2) may hold spaces; the fields after its ')' are plain.
    let after_name = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| LoadError::Proc(format!("{path} is not a stat line")))?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks = |index: usize| -> Result<u64, LoadError> {
        fields
            .get(index)
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| LoadError::Proc(format!("{path} has no CPU time fields")))
    };
    // SAFETY: sysconf only reads a configuration value.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok((ticks(11)? + ticks(12)?) as f64 / per_second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renewal_report_line_reads_back_as_the_counts_it_was_made_from() {
        let counts = RenewalCounts {
            renewed: 12,
            late: 1,
            failed: 2,
            lost: 0,
        };
        let line = crate::mcp::renewals_line(counts);
        let parsed = line.strip_prefix(RENEWALS_PREFIX).and_then(parse_counts);
        assert_eq!(parsed, Some(counts));
        assert_eq!(parse_counts("12 1 two 0"), None);
    }

    #[test]
    fn an_open_file_limit_too_low_says_what_to_raise_and_how_many_sessions_fit() {
        let needed = open_files_needed(10_000, 64);
        assert!(needed > 10_000, "{needed}");
        let error = LoadError::OpenFiles {
            sessions: 10_000,
            needed,
            limit: 8_192,
            why: " (Operation not permitted)".into(),
            fits: 8_192 - open_files_needed(0, 64),
        };
        let message = error.to_string();
        assert!(
            message.contains(&format!("ulimit -Hn {needed}")),
            "{message}"
        );
        assert!(message.contains("the open-file limit is 8192"), "{message}");
        assert!(message.contains("Operation not permitted"), "{message}");
        assert!(message.contains("at most about 6976 sessions"), "{message}");
    }
}
