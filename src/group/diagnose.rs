//! Why a group cannot be reached, in words that say what to change. fred reports every
//! failure of a Sentinel group as "failed to connect to all sentinel nodes", and a call to a
//! group that never connected just times out; so when a group's client is down, one
//! connection is made by hand, with the same credentials and TLS, to its Sentinels and then to
//! the master they name (or to its master directly), and the first failure is explained.
//! [`Diagnosis`] keeps the answer per group, and probes at most once a second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::error::{Error as RedisError, ErrorKind};
use fred::prelude::*;
use fred::types::CustomCommand;

use crate::group::Reach;

/// How long one probe may take to connect and answer.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// How often a group that is down is probed again for the reason.
const DIAGNOSIS_INTERVAL: Duration = Duration::from_secs(1);

/// What is known of why one group's client is down, and the probes that find out.
#[derive(Default)]
pub(crate) struct Diagnosis {
    /// Found by the last probe; cleared when the client connects again.
    cause: Mutex<Option<String>>,
    /// A probe is running.
    running: AtomicBool,
    last_started: Mutex<Option<Instant>>,
}

impl Diagnosis {
    /// The probe that finds and keeps why `client` (of the group `name`, reached through
    /// `reach`) is down: `None` while another runs or within [`DIAGNOSIS_INTERVAL`] of the
    /// last one.
    pub fn probe(
        self: &Arc<Self>,
        reach: &Reach,
        client: &Client,
        name: &str,
    ) -> Option<impl Future<Output = ()> + Send + 'static> {
        let due = self.last_started.lock().is_ok_and(|mut last| {
            let due = last.is_none_or(|at| at.elapsed() >= DIAGNOSIS_INTERVAL);
            if due {
                *last = Some(Instant::now());
            }
            due
        });
        if !due || self.running.swap(true, Ordering::AcqRel) {
            return None;
        }
        let running = Running(self.clone());
        let (reach, client, name) = (reach.clone(), client.clone(), name.to_string());
        Some(async move {
            let cause = connection_failure(&reach).await;
            if let Ok(mut known) = running.0.cause.lock() {
                // A probe that ends after the client came back has nothing left to explain.
                let cause = cause.filter(|_| !client.is_connected());
                // Said once per cause, not at every probe while the group stays down.
                if let Some(new) = cause.as_ref().filter(|new| known.as_ref() != Some(*new)) {
                    tracing::warn!(group = %name, cause = %new, "why the group is unreachable");
                }
                *known = cause;
            }
        })
    }

    /// What the last probe found, if the client has not connected since.
    pub fn cause(&self) -> Option<String> {
        self.cause.lock().ok()?.clone()
    }

    /// The client is connected again: what was found no longer holds.
    pub fn forget(&self) {
        if let Ok(mut cause) = self.cause.lock() {
            *cause = None;
        }
    }
}

/// Marks a probe as running until it ends, however it ends (a panic in the client included).
struct Running(Arc<Diagnosis>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::Release);
    }
}

/// Asks the Sentinel behind `config` which master it names for `service` (`host:port`).
pub(crate) async fn ask_sentinel(config: Config, service: &str) -> Result<String, RedisError> {
    let asked = probe(config, |client| async move {
        let address = client
            .custom::<Vec<String>, _>(
                CustomCommand::new_static("SENTINEL", None, false),
                vec!["get-master-addr-by-name", service],
            )
            .await?;
        match address.as_slice() {
            [host, port] => Ok(format!("{host}:{port}")),
            _ => Err(RedisError::new(
                ErrorKind::Sentinel,
                format!("does not know the service `{service}`"),
            )),
        }
    });
    asked.await
}

/// Asks the Sentinel behind `config` how many replicas it knows for `service`, whatever
/// their state: one that is down now may be promoted once it is back.
pub(crate) async fn ask_sentinel_replicas(
    config: Config,
    service: &str,
) -> Result<usize, RedisError> {
    probe(config, |client| async move {
        let replicas = client
            .custom::<Vec<Value>, _>(
                CustomCommand::new_static("SENTINEL", None, false),
                vec!["replicas", service],
            )
            .await?;
        Ok(replicas.len())
    })
    .await
}

/// Connects a client of its own with `config`, runs `ask` on it within [`PROBE_TIMEOUT`]
/// (twice that with the connection), and closes it.
async fn probe<T, Fut>(config: Config, ask: impl FnOnce(Client) -> Fut) -> Result<T, RedisError>
where
    Fut: Future<Output = Result<T, RedisError>>,
{
    let client = Builder::from_config(config)
        .with_connection_config(|c| {
            c.connection_timeout = PROBE_TIMEOUT;
            c.internal_command_timeout = PROBE_TIMEOUT;
        })
        .with_performance_config(|p| p.default_command_timeout = PROBE_TIMEOUT)
        .build()?;
    let asked = async {
        client.init().await?;
        ask(client.clone()).await
    };
    let answer = tokio::time::timeout(PROBE_TIMEOUT * 2, asked).await;
    let _ = client.quit().await;
    answer.unwrap_or_else(|_| Err(RedisError::new(ErrorKind::Timeout, "no answer")))
}

/// Why `group` cannot be reached now, or `None` when a connection by hand works (the
/// engine's client is then between reconnects).
pub(crate) async fn connection_failure(group: &Reach) -> Option<String> {
    let master = match &group.watched {
        None => group.direct_address()?,
        Some(watched) => {
            let asks = watched.addresses.iter().map(|(host, port)| async move {
                let sentinel = format!("Sentinel {host}:{port}");
                match group.sentinel_config(host, *port) {
                    Some(config) => (sentinel, ask_sentinel(config, &watched.service).await),
                    None => (
                        sentinel,
                        Err(RedisError::new(ErrorKind::Config, "not a Sentinel")),
                    ),
                }
            });
            let answers = futures::future::join_all(asks).await;
            let named = answers.iter().find_map(|(_, answer)| answer.as_ref().ok());
            match named {
                Some(master) => master.clone(),
                None => {
                    let (sentinel, failure) = answers.into_iter().next()?;
                    return Some(format!(
                        "no Sentinel answers; {}",
                        explain(
                            &sentinel,
                            &failure.err()?,
                            "sentinel_username/sentinel_password"
                        )
                    ));
                }
            }
        }
    };
    let (host, port) = master.rsplit_once(':')?;
    let config = group.master_config(host, port.parse().ok()?);
    let pinged = probe(config, |client| async move {
        client.ping::<String>(None).await.map(|_| ())
    })
    .await;
    let failure = pinged.err()?;
    Some(explain(
        &format!("master {master}"),
        &failure,
        "username/password",
    ))
}

/// One failed connection to `node`, with what to check; `credentials` names the settings
/// that log in to it. rustls' failures reach fred as I/O errors, so TLS is told by its words.
fn explain(node: &str, failure: &RedisError, credentials: &str) -> String {
    let details = failure.details();
    let said = |words: &[&str]| words.iter().any(|word| details.contains(word));
    match failure.kind() {
        ErrorKind::Auth => {
            format!("{node} refuses the login ({details}): check {credentials}")
        }
        ErrorKind::Timeout => format!(
            "{node} does not answer within {} ms: is it frozen, or does it expect TLS?",
            PROBE_TIMEOUT.as_millis()
        ),
        _ if said(&["CertificateRequired"]) => format!(
            "{node} wants a client certificate ({details}): set tls.cert_file and tls.key_file"
        ),
        _ if said(&["NotValidForName"]) => format!(
            "{node}'s certificate does not carry the name checked ({details}): check tls.server_name"
        ),
        _ if said(&["UnknownIssuer", "BadSignature"]) => {
            format!("{node}'s certificate is not signed by the CA in tls.ca_file ({details})")
        }
        ErrorKind::Tls => format!("TLS with {node} fails ({details}): check the [tls] table"),
        _ if said(&[
            "InvalidCertificate",
            "AlertReceived",
            "InvalidMessage",
            "CorruptMessage",
        ]) =>
        {
            format!("TLS with {node} fails ({details}): check the [tls] table")
        }
        _ if said(&["refused"]) => {
            format!("nothing listens at {node} (connection refused): is it running?")
        }
        _ if said(&["reset", "closed"]) => format!(
            "{node} closes the connection at once ({details}): does it expect TLS (a [tls] table)?"
        ),
        _ => format!("{node}: {details}"),
    }
}
