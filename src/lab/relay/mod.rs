//! A TCP relay in front of one lab node. The lab gives every `redis-server` a relay on the
//! node's public port and moves the server itself to a private port, so tests and the chaos
//! harness can cut links and slow them down on 127.0.0.1 without root tools (iptables, tc) or
//! Docker. This folder owns the relay, one job a file: the [`Relay`] handle and [`serve`]
//! here; `link` the link classes, switches and status; `forward` accepting and forwarding
//! connections; `classify` telling their kinds apart; `control` the one-line text protocol
//! that lets another process (the CLI of a lab started earlier) flip those switches.
//!
//! Classification. Clients, replicas and Sentinels all connect to the same port from
//! 127.0.0.1, so a link is told apart by what its peer sends. The relay reads the first
//! [`CLASSIFY_WINDOW`] bytes of each connection as RESP commands: a `REPLCONF`, `PSYNC` or
//! `SYNC` command makes it a [`LinkClass::Replica`] link, `CLIENT SETNAME sentinel-...` a
//! [`LinkClass::Sentinel`] link (Sentinel names its connections `sentinel-<id>-cmd` and
//! `sentinel-<id>-pubsub`). Until then the link is unclassified and treated as a
//! [`LinkClass::Client`]; once the window has passed, or on bytes that are not RESP, it is a
//! client for good. Whole commands are parsed, so a marker split across reads is still found,
//! and a value that merely contains the word `REPLCONF` does not make a replica.
//!
//! While the link is unclassified only whole commands are forwarded, so the command that
//! reveals a cut class is never forwarded. Bytes of earlier commands (a replica's opening
//! `PING`) pass if clients are not cut: until its `REPLCONF` such a link is indistinguishable
//! from a client.
//!
//! Cut. [`Relay::cut`] freezes every link of that class, existing and new: the relay stops
//! reading from and writing to both of its sockets, but keeps them open, as a dropped network
//! would (the peer's reads hang, its writes fill the socket buffers). While clients are cut, an
//! unclassified link is held the same way, except that the relay keeps reading what its peer
//! sends (without forwarding it) to classify it; if it turns out to be a replica or Sentinel
//! link whose class is not cut, the held bytes are forwarded and the link carries on.
//! Consequence: while clients are cut, a replica that *reconnects* waits too, because its
//! opening `PING` looks like a client's; established replication links are not affected.
//! The lab's own control connections are clients too, so it should use the node's real port.
//!
//! Heal. [`Relay::heal`] lifts every cut. The links that were held are then closed with a
//! reset on both sides, not resumed: a real partition loses bytes, but dropping bytes from the
//! middle of a TCP stream would corrupt RESP framing, and delivering them late would pretend
//! nothing happened. Closed, the peers notice and reconnect cleanly, as they would after a
//! long partition.
//!
//! Latency. [`Relay::set_latency`] delays every chunk a client link forwards, in both
//! directions, by the delay plus or minus a uniform jitter; a chunk is never sent before the
//! one read before it, so bytes are never reordered. Replica and Sentinel links are not
//! slowed. A delay of zero with zero jitter turns it off.
//!
//! A relay whose node is down (its real port refuses) closes each accepted connection at once,
//! so peers see what they would see without the relay. Stopping or dropping the [`Relay`]
//! closes its listeners and every connection; each connection is one task in a set owned by
//! the accepting task, so none outlives the relay.

mod classify;
mod control;
mod forward;
mod link;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::io;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::sleep;
use tokio_util::sync::CancellationToken;

pub use classify::CLASSIFY_WINDOW;
pub use control::{CONTROL_TIMEOUT, control};
pub use link::{LinkClass, RelayStatus};

use control::control_session;
use forward::run_link;
use link::{Settings, Shared};

/// Latency and jitter are capped so that a typo cannot stall a link for days (or overflow a
/// deadline).
pub const MAX_LATENCY: Duration = Duration::from_secs(600);
/// After a failed accept (out of file descriptors), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("cannot listen on 127.0.0.1:{port} for the relay to port {target}: {source}")]
    Listen {
        port: u16,
        target: u16,
        source: io::Error,
    },
    #[error(
        "cannot listen on 127.0.0.1:{port} for the control commands of relay port {relay}: {source}"
    )]
    ControlListen {
        port: u16,
        relay: u16,
        source: io::Error,
    },
    #[error("relay port {relay} already has a control port ({port})")]
    ControlRunning { relay: u16, port: u16 },
    #[error("unknown link class `{0}` (expected clients, replica or sentinels)")]
    UnknownClass(String),
    #[error("relay control commands are one line; {command:?} has a line break")]
    MultiLineCommand { command: String },
    #[error("cannot reach the relay control port 127.0.0.1:{port}: {source}")]
    ControlConnect { port: u16, source: io::Error },
    #[error("relay control port {port} failed during `{command}`: {source}")]
    ControlIo {
        port: u16,
        command: String,
        source: io::Error,
    },
    #[error("relay control port {port} did not answer `{command}` within {timeout:?}")]
    ControlTimeout {
        port: u16,
        command: String,
        timeout: Duration,
    },
    #[error("relay control port {port} closed the connection without answering `{command}`")]
    ControlClosed { port: u16, command: String },
    #[error("relay control port {port} refused `{command}`: {answer}")]
    Refused {
        port: u16,
        command: String,
        answer: String,
    },
}

/// A running relay. Dropping it stops it as [`Relay::stop`] does, without waiting.
#[derive(Debug)]
pub struct Relay {
    shared: Arc<Shared>,
    token: CancellationToken,
    accept: Option<JoinHandle<()>>,
    control: Option<(u16, JoinHandle<()>)>,
}

impl Relay {
    /// Listens on 127.0.0.1:`listen` (0 picks a free port) and forwards every connection to
    /// 127.0.0.1:`target`.
    pub async fn start(listen: u16, target: u16) -> Result<Relay, RelayError> {
        let listen_error = |source| RelayError::Listen {
            port: listen,
            target,
            source,
        };
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, listen))
            .await
            .map_err(listen_error)?;
        let port = listener.local_addr().map_err(listen_error)?.port();
        let shared = Arc::new(Shared {
            port,
            target,
            settings: watch::Sender::new(Settings::default()),
            links: Default::default(),
        });
        let token = CancellationToken::new();
        let links = shared.clone();
        let accept = tokio::spawn(accept_each(
            listener,
            token.clone(),
            port,
            "accept",
            move |stream| run_link(stream, links.clone()),
        ));
        Ok(Relay {
            shared,
            token,
            accept: Some(accept),
            control: None,
        })
    }

    /// The port peers connect to.
    pub fn port(&self) -> u16 {
        self.shared.port
    }

    /// The node's real port.
    pub fn target(&self) -> u16 {
        self.shared.target
    }

    /// Freezes every link of this class, existing and new, until [`Relay::heal`].
    pub fn cut(&self, class: LinkClass) {
        self.shared.cut(class);
    }

    /// Lifts every cut and closes the links that were frozen, so their peers reconnect.
    pub fn heal(&self) {
        self.shared.heal();
    }

    /// Delays each chunk of a client link by `delay` ± `jitter` (each capped at
    /// [`MAX_LATENCY`]); zero and zero turn it off.
    pub fn set_latency(&self, delay: Duration, jitter: Duration) {
        self.shared.set_latency(delay, jitter);
    }

    pub fn status(&self) -> RelayStatus {
        self.shared.status()
    }

    /// Accepts one-line control commands on 127.0.0.1:`port` (0 picks a free port) for as
    /// long as the relay runs, and returns the port.
    pub async fn listen_control(&mut self, port: u16) -> Result<u16, RelayError> {
        if let Some((running, _)) = &self.control {
            return Err(RelayError::ControlRunning {
                relay: self.port(),
                port: *running,
            });
        }
        let listen_error = |source| RelayError::ControlListen {
            port,
            relay: self.shared.port,
            source,
        };
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .await
            .map_err(listen_error)?;
        let bound = listener.local_addr().map_err(listen_error)?.port();
        let shared = self.shared.clone();
        let task = tokio::spawn(accept_each(
            listener,
            self.token.clone(),
            shared.port,
            "control accept",
            move |stream| control_session(stream, shared.clone()),
        ));
        self.control = Some((bound, task));
        Ok(bound)
    }

    /// The control port, once [`Relay::listen_control`] has started it.
    pub fn control_port(&self) -> Option<u16> {
        self.control.as_ref().map(|(port, _)| *port)
    }

    /// Closes the listeners and every connection, and returns once they are closed.
    pub async fn stop(mut self) {
        self.token.cancel();
        let control = self.control.take().map(|(_, task)| task);
        for task in self.accept.take().into_iter().chain(control) {
            if let Err(error) = task.await {
                tracing::warn!(%error, port = self.shared.port, "relay: a task ended abnormally");
            }
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.token.cancel();
        // Aborting also drops the task sets inside, which aborts every connection, in case
        // the runtime never polls the cancelled tasks again.
        if let Some(task) = &self.accept {
            task.abort();
        }
        if let Some((_, task)) = &self.control {
            task.abort();
        }
    }
}

/// Runs a relay as the main loop of a process until the process is killed: listens on
/// `listen`, forwards to `target` and takes control commands on `control` (0 for any of the
/// ports picks a free one, logged at start).
pub async fn serve(listen: u16, target: u16, control: u16) -> Result<(), RelayError> {
    let mut relay = Relay::start(listen, target).await?;
    let control = relay.listen_control(control).await?;
    tracing::info!(
        port = relay.port(),
        target,
        control,
        "relay: forwarding; control commands: cut clients|replica|sentinels, heal, latency <ms> <jitter_ms>, status"
    );
    // Nothing cancels this token but the relay's own drop, so this waits until killed.
    relay.token.clone().cancelled().await;
    Ok(())
}

/// Accepts connections on `listener` until `token` is cancelled, each handled by `serve` in a
/// task of a set this loop owns, so none outlives it; `what` names the accept in logs.
async fn accept_each<F, Fut>(
    listener: TcpListener,
    token: CancellationToken,
    port: u16,
    what: &str,
    serve: F,
) where
    F: Fn(TcpStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            () = token.cancelled() => break,
            // Reaps finished tasks so the set does not grow with every connection ever made.
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tasks.spawn(serve(stream));
                }
                Err(error) => {
                    tracing::warn!(%error, port, "relay: {what} failed");
                    tokio::select! {
                        () = token.cancelled() => break,
                        () = sleep(ACCEPT_BACKOFF) => {}
                    }
                }
            },
        }
    }
    // Closes the listener before the connections, so nothing new arrives while they close.
    drop(listener);
    tasks.shutdown().await;
}
