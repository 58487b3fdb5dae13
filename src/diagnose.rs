//! Why a group cannot be reached, in words that say what to change. fred reports every
//! failure of a Sentinel group as "failed to connect to all sentinel nodes", and a call to a
//! group that never connected just times out; so when a group's client is down, one
//! connection is made by hand, with the same credentials and TLS, to its Sentinels and then to
//! the master they name (or to its master directly), and the first failure is explained.

use std::time::Duration;

use fred::error::{Error as RedisError, ErrorKind};
use fred::prelude::*;
use fred::types::CustomCommand;

use crate::group::Reach;

/// How long one probe may take to connect and answer.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

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
