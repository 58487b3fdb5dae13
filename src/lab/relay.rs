//! A TCP relay in front of one lab node. The lab gives every `redis-server` a relay on the
//! node's public port and moves the server itself to a private port, so tests and the chaos
//! harness can cut links and slow them down on 127.0.0.1 without root tools (iptables, tc) or
//! Docker. This file owns the relay: accepting and forwarding connections, telling their kinds
//! apart, the cut and latency switches, and the one-line text protocol that lets another
//! process (the CLI of a lab started earlier) flip those switches.
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

use std::fmt;
use std::io;
use std::net::Ipv4Addr;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rand::Rng;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, sleep, sleep_until, timeout};
use tokio_util::sync::CancellationToken;

/// How many bytes of a connection are read as commands to find its class. A replica sends
/// `REPLCONF` and a Sentinel `CLIENT SETNAME` within their first few hundred bytes.
pub const CLASSIFY_WINDOW: usize = 4096;
/// How long the control client waits for the whole exchange with a relay's control port.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(2);
/// Latency and jitter are capped so that a typo cannot stall a link for days (or overflow a
/// deadline).
pub const MAX_LATENCY: Duration = Duration::from_secs(600);

/// A loopback node that is up accepts at once; one that is frozen still completes the
/// handshake from its kernel backlog. Waiting longer would only delay the close.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const CHUNK: usize = 16 * 1024;
/// Chunks queued per direction; with latency on, this bounds the bytes in flight.
const QUEUE: usize = 64;
/// Control commands are a few words; a longer line is refused rather than buffered.
const MAX_CONTROL_LINE: u64 = 256;
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

/// What a link carries, judged from what its peer sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinkClass {
    Client,
    Replica,
    Sentinel,
}

impl LinkClass {
    pub const ALL: [LinkClass; 3] = [LinkClass::Client, LinkClass::Replica, LinkClass::Sentinel];

    /// The name the CLI and the control protocol use.
    pub fn name(self) -> &'static str {
        match self {
            LinkClass::Client => "clients",
            LinkClass::Replica => "replica",
            LinkClass::Sentinel => "sentinels",
        }
    }

    fn index(self) -> usize {
        match self {
            LinkClass::Client => 0,
            LinkClass::Replica => 1,
            LinkClass::Sentinel => 2,
        }
    }
}

impl fmt::Display for LinkClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LinkClass {
    type Err = RelayError;

    /// Singular and plural both work, so `cut replicas` does not fail on a letter.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "clients" | "client" => Ok(LinkClass::Client),
            "replica" | "replicas" => Ok(LinkClass::Replica),
            "sentinels" | "sentinel" => Ok(LinkClass::Sentinel),
            _ => Err(RelayError::UnknownClass(text.to_string())),
        }
    }
}

/// A relay's switches and link counts at one moment, as `status` reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayStatus {
    pub port: u16,
    pub target: u16,
    pub cut: Vec<LinkClass>,
    pub latency: Duration,
    pub jitter: Duration,
    /// Open links per class; unclassified links count as clients.
    pub clients: usize,
    pub replicas: usize,
    pub sentinels: usize,
}

impl fmt::Display for RelayStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cut = if self.cut.is_empty() {
            "none".to_string()
        } else {
            let names: Vec<&str> = self.cut.iter().map(|class| class.name()).collect();
            names.join(",")
        };
        write!(
            f,
            "port={} target={} cut={} latency_ms={} jitter_ms={} clients={} replica={} sentinels={}",
            self.port,
            self.target,
            cut,
            self.latency.as_millis(),
            self.jitter.as_millis(),
            self.clients,
            self.replicas,
            self.sentinels
        )
    }
}

impl FromStr for RelayStatus {
    type Err = String;

    /// Reads back what [`fmt::Display`] writes (the answer to the `status` control command).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fields: std::collections::HashMap<&str, &str> = text
            .split_whitespace()
            .filter_map(|word| word.split_once('='))
            .collect();
        let field = |key: &str| {
            fields
                .get(key)
                .copied()
                .ok_or_else(|| format!("relay status `{text}` has no {key}"))
        };
        let number = |key: &str| {
            field(key)?
                .parse::<u64>()
                .map_err(|_| format!("relay status `{text}`: {key} is not a number"))
        };
        let count = |key: &str| number(key).map(|value| value as usize);
        let port = |key: &str| {
            u16::try_from(number(key)?)
                .map_err(|_| format!("relay status `{text}`: {key} is not a port"))
        };
        let cut = match field("cut")? {
            "none" => Vec::new(),
            names => names
                .split(',')
                .map(|name| name.parse::<LinkClass>().map_err(|error| error.to_string()))
                .collect::<Result<_, _>>()?,
        };
        Ok(RelayStatus {
            port: port("port")?,
            target: port("target")?,
            cut,
            latency: Duration::from_millis(number("latency_ms")?),
            jitter: Duration::from_millis(number("jitter_ms")?),
            clients: count("clients")?,
            replicas: count("replica")?,
            sentinels: count("sentinels")?,
        })
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Latency {
    delay: Duration,
    jitter: Duration,
}

impl Latency {
    fn is_off(self) -> bool {
        self.delay.is_zero() && self.jitter.is_zero()
    }

    /// Uniform in delay ± jitter, never below zero.
    fn sample(self) -> Duration {
        if self.jitter.is_zero() {
            return self.delay;
        }
        let jitter = u64::try_from(self.jitter.as_nanos()).unwrap_or(u64::MAX);
        let offset = rand::thread_rng().gen_range(0..=jitter.saturating_mul(2));
        (self.delay + Duration::from_nanos(offset)).saturating_sub(self.jitter)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Settings {
    cut: [bool; 3],
    latency: Latency,
}

impl Settings {
    fn is_cut(&self, class: LinkClass) -> bool {
        self.cut[class.index()]
    }
}

/// What the connections of one relay share with its handle and control port.
#[derive(Debug)]
struct Shared {
    port: u16,
    target: u16,
    settings: watch::Sender<Settings>,
    links: [AtomicUsize; 3],
}

impl Shared {
    fn cut(&self, class: LinkClass) {
        self.settings
            .send_modify(|settings| settings.cut[class.index()] = true);
    }

    fn heal(&self) {
        self.settings
            .send_modify(|settings| settings.cut = [false; 3]);
    }

    fn set_latency(&self, delay: Duration, jitter: Duration) {
        let latency = Latency {
            delay: delay.min(MAX_LATENCY),
            jitter: jitter.min(MAX_LATENCY),
        };
        self.settings
            .send_modify(|settings| settings.latency = latency);
    }

    fn status(&self) -> RelayStatus {
        let settings = *self.settings.borrow();
        let count = |class: LinkClass| self.links[class.index()].load(Ordering::Relaxed);
        RelayStatus {
            port: self.port,
            target: self.target,
            cut: LinkClass::ALL
                .into_iter()
                .filter(|class| settings.is_cut(*class))
                .collect(),
            latency: settings.latency.delay,
            jitter: settings.latency.jitter,
            clients: count(LinkClass::Client),
            replicas: count(LinkClass::Replica),
            sentinels: count(LinkClass::Sentinel),
        }
    }

    /// Runs one control command and returns its one-line answer.
    fn command(&self, line: &str) -> String {
        match self.try_command(line) {
            Ok(answer) => format!("ok {answer}"),
            Err(message) => format!("error {message}"),
        }
    }

    fn try_command(&self, line: &str) -> Result<String, String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["cut", class] => {
                let class: LinkClass = class.parse().map_err(|error| format!("{error}"))?;
                self.cut(class);
                Ok(format!("cut {class}"))
            }
            ["heal"] => {
                self.heal();
                Ok("healed".to_string())
            }
            ["latency", delay] => self.latency_command(delay, "0"),
            ["latency", delay, jitter] => self.latency_command(delay, jitter),
            ["status"] => Ok(self.status().to_string()),
            [] => Err("empty command (expected cut, heal, latency or status)".to_string()),
            _ => Err(format!(
                "unknown command `{line}` (expected `cut clients|replica|sentinels`, `heal`, `latency <ms> <jitter_ms>` or `status`)"
            )),
        }
    }

    fn latency_command(&self, delay: &str, jitter: &str) -> Result<String, String> {
        let millis = |text: &str, what: &str| {
            text.parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| format!("{what} `{text}` is not a whole number of milliseconds"))
        };
        self.set_latency(millis(delay, "latency")?, millis(jitter, "jitter")?);
        let latency = self.settings.borrow().latency;
        Ok(format!(
            "latency_ms={} jitter_ms={}",
            latency.delay.as_millis(),
            latency.jitter.as_millis()
        ))
    }
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
        let accept = tokio::spawn(accept_links(listener, shared.clone(), token.clone()));
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
        let task = tokio::spawn(accept_control(
            listener,
            self.shared.clone(),
            self.token.clone(),
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

/// Sends one command to a relay's control port and returns the answer after `ok`; an
/// `error ...` answer becomes [`RelayError::Refused`].
pub async fn control(port: u16, command: &str) -> Result<String, RelayError> {
    let command = command.trim();
    if command.contains(['\n', '\r']) {
        return Err(RelayError::MultiLineCommand {
            command: command.to_string(),
        });
    }
    let answer = timeout(CONTROL_TIMEOUT, exchange(port, command))
        .await
        .map_err(|_| RelayError::ControlTimeout {
            port,
            command: command.to_string(),
            timeout: CONTROL_TIMEOUT,
        })??;
    match answer.split_once(' ').unwrap_or((answer.as_str(), "")) {
        ("ok", rest) => Ok(rest.to_string()),
        _ => Err(RelayError::Refused {
            port,
            command: command.to_string(),
            answer: answer
                .strip_prefix("error ")
                .unwrap_or(answer.as_str())
                .to_string(),
        }),
    }
}

async fn exchange(port: u16, command: &str) -> Result<String, RelayError> {
    let io_error = |source| RelayError::ControlIo {
        port,
        command: command.to_string(),
        source,
    };
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .await
        .map_err(|source| RelayError::ControlConnect { port, source })?;
    stream
        .write_all(format!("{command}\n").as_bytes())
        .await
        .map_err(io_error)?;
    let mut answer = String::new();
    BufReader::new(stream)
        .take(MAX_CONTROL_LINE * 4)
        .read_line(&mut answer)
        .await
        .map_err(io_error)?;
    if !answer.ends_with('\n') {
        return Err(RelayError::ControlClosed {
            port,
            command: command.to_string(),
        });
    }
    Ok(answer.trim_end().to_string())
}

async fn accept_links(listener: TcpListener, shared: Arc<Shared>, token: CancellationToken) {
    let mut links = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            () = token.cancelled() => break,
            // Reaps finished links so the set does not grow with every connection ever made.
            Some(_) = links.join_next(), if !links.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    links.spawn(run_link(stream, shared.clone()));
                }
                Err(error) => {
                    tracing::warn!(%error, port = shared.port, "relay: accept failed");
                    tokio::select! {
                        () = token.cancelled() => break,
                        () = sleep(ACCEPT_BACKOFF) => {}
                    }
                }
            },
        }
    }
    // Closes the listener before the links, so nothing new arrives while they close.
    drop(listener);
    links.shutdown().await;
}

async fn accept_control(listener: TcpListener, shared: Arc<Shared>, token: CancellationToken) {
    let mut sessions = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            () = token.cancelled() => break,
            Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    sessions.spawn(control_session(stream, shared.clone()));
                }
                Err(error) => {
                    tracing::warn!(%error, port = shared.port, "relay: control accept failed");
                    tokio::select! {
                        () = token.cancelled() => break,
                        () = sleep(ACCEPT_BACKOFF) => {}
                    }
                }
            },
        }
    }
    drop(listener);
    sessions.shutdown().await;
}

/// Answers commands one line at a time until the peer closes.
async fn control_session(stream: TcpStream, shared: Arc<Shared>) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let mut line = String::new();
        match (&mut reader)
            .take(MAX_CONTROL_LINE)
            .read_line(&mut line)
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let too_long = !line.ends_with('\n') && line.len() as u64 >= MAX_CONTROL_LINE;
        let answer = if too_long {
            format!("error command longer than {MAX_CONTROL_LINE} bytes")
        } else {
            shared.command(line.trim())
        };
        if write
            .write_all(format!("{answer}\n").as_bytes())
            .await
            .is_err()
            || too_long
        {
            return;
        }
    }
}

/// What is known of a link's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    /// Still inside the classification window: treated as a client.
    Unclassified,
    Class(LinkClass),
}

impl Known {
    fn effective(self) -> LinkClass {
        match self {
            Known::Unclassified => LinkClass::Client,
            Known::Class(class) => class,
        }
    }
}

/// Whether a link may pass bytes now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    Open,
    /// Unclassified while clients are cut: read to classify, nothing forwarded.
    Held,
    /// Its class is cut: nothing read, nothing forwarded.
    Frozen,
}

impl Gate {
    fn of(settings: &Settings, known: Known) -> Gate {
        match known {
            Known::Unclassified if settings.is_cut(LinkClass::Client) => Gate::Held,
            Known::Class(class) if settings.is_cut(class) => Gate::Frozen,
            _ => Gate::Open,
        }
    }
}

/// One forwarded piece of a direction, in the order it was read.
enum Piece {
    Bytes { due: Instant, bytes: Vec<u8> },
    End,
}

/// Keeps the relay's per-class link counts in step with one link's class.
struct Counted<'a> {
    links: &'a [AtomicUsize; 3],
    class: LinkClass,
}

impl<'a> Counted<'a> {
    fn new(links: &'a [AtomicUsize; 3]) -> Self {
        links[LinkClass::Client.index()].fetch_add(1, Ordering::Relaxed);
        Counted {
            links,
            class: LinkClass::Client,
        }
    }

    fn set(&mut self, class: LinkClass) {
        if class != self.class {
            self.links[self.class.index()].fetch_sub(1, Ordering::Relaxed);
            self.links[class.index()].fetch_add(1, Ordering::Relaxed);
            self.class = class;
        }
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.links[self.class.index()].fetch_sub(1, Ordering::Relaxed);
    }
}

/// How a link's task ended.
enum Ending {
    /// Both directions closed, one side failed, or the relay's settings are gone.
    Done,
    /// A cut on it was lifted: reset both sides so the peers reconnect.
    Healed,
}

async fn run_link(mut inbound: TcpStream, shared: Arc<Shared>) {
    let connect = TcpStream::connect((Ipv4Addr::LOCALHOST, shared.target));
    let mut outbound = match timeout(CONNECT_TIMEOUT, connect).await {
        Ok(Ok(stream)) => stream,
        // The node is down: a reset is what the peer would get from a closed port.
        Ok(Err(_)) | Err(_) => {
            let _ = inbound.set_zero_linger();
            return;
        }
    };
    // Chunks are forwarded as they come; Nagle would add its own latency on top of ours.
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let ending = forward(&mut inbound, &mut outbound, &shared).await;
    if let Ending::Healed = ending {
        let _ = inbound.set_zero_linger();
        let _ = outbound.set_zero_linger();
    }
}

async fn forward(inbound: &mut TcpStream, outbound: &mut TcpStream, shared: &Shared) -> Ending {
    let (client_read, client_write) = inbound.split();
    let (server_read, server_write) = outbound.split();
    let initial = Gate::of(&shared.settings.borrow(), Known::Unclassified);
    let (gate_tx, gate_rx) = watch::channel(initial);
    let (known_tx, known_rx) = watch::channel(Known::Unclassified);
    let (up_tx, up_rx) = mpsc::channel(QUEUE);
    let (down_tx, down_rx) = mpsc::channel(QUEUE);
    let view = View {
        gate: gate_rx,
        settings: shared.settings.subscribe(),
        known: known_rx,
    };
    let mut counted = Counted::new(&shared.links);
    let pipes = async {
        tokio::try_join!(
            read_client(client_read, &known_tx, view.clone(), up_tx),
            write_side(server_write, up_rx, view.clone()),
            read_server(server_read, view.clone(), down_tx),
            write_side(client_write, down_rx, view.clone()),
        )
    };
    // The supervisor goes first on every wake-up, so a new cut is applied before the pipes
    // move another byte.
    tokio::select! {
        biased;
        ending = supervise(view.clone(), gate_tx, &mut counted) => ending,
        _ = pipes => Ending::Done,
    }
}

/// Watches the settings and the link's class: updates the gate and the counts, and ends the
/// link when a cut on it is lifted.
async fn supervise(mut view: View, gate: watch::Sender<Gate>, counted: &mut Counted<'_>) -> Ending {
    loop {
        let known = *view.known.borrow_and_update();
        let settings = *view.settings.borrow_and_update();
        counted.set(known.effective());
        let current = *gate.borrow();
        let next = Gate::of(&settings, known);
        if current != Gate::Open && next == Gate::Open {
            // A held link whose class turned out not to be cut was never part of the
            // partition; every other way back to open is a heal.
            let released = current == Gate::Held
                && matches!(known, Known::Class(class) if class != LinkClass::Client);
            if !released {
                return Ending::Healed;
            }
        }
        // Always notifies, so pipes that saw a stale gate look again.
        gate.send_replace(next);
        let changed = tokio::select! {
            changed = view.settings.changed() => changed,
            changed = view.known.changed() => changed,
        };
        if changed.is_err() {
            return Ending::Done;
        }
    }
}

/// A pipe's view of its link: the supervisor's gate plus the facts it is computed from.
#[derive(Clone)]
struct View {
    gate: watch::Receiver<Gate>,
    settings: watch::Receiver<Settings>,
    known: watch::Receiver<Known>,
}

impl View {
    /// Waits until bytes may pass. Both the supervisor's gate and the current settings must
    /// say so: the settings may be newer than the gate (a cut not yet applied) and the gate
    /// newer than the settings (a heal that is about to close the link).
    async fn open(&mut self) -> io::Result<()> {
        loop {
            let gate = *self.gate.borrow_and_update();
            let settings = *self.settings.borrow_and_update();
            let now = Gate::of(&settings, *self.known.borrow());
            if gate == Gate::Open && now == Gate::Open {
                return Ok(());
            }
            let changed = tokio::select! {
                changed = self.gate.changed() => changed,
                changed = self.settings.changed() => changed,
            };
            changed.map_err(|_| io::Error::other("relay link closed"))?;
        }
    }

    /// When a chunk read now may be forwarded: client links get the latency, and no chunk
    /// is due before the one read before it, so jitter never reorders bytes.
    fn due(&self, last: &mut Instant) -> Instant {
        let now = Instant::now();
        let latency = self.settings.borrow().latency;
        let wanted = if self.known.borrow().effective() == LinkClass::Client && !latency.is_off() {
            now + latency.sample()
        } else {
            now
        };
        let due = wanted.max(*last);
        *last = due;
        due
    }
}

fn closed_queue<T>(_: T) -> io::Error {
    io::Error::other("relay link queue closed")
}

/// Client to server: classifies while the window lasts, then forwards raw.
async fn read_client(
    mut from: ReadHalf<'_>,
    known: &watch::Sender<Known>,
    mut view: View,
    to: mpsc::Sender<Piece>,
) -> io::Result<()> {
    let mut classifier = Some(Classifier::default());
    let mut buffer = vec![0; CHUNK];
    let mut last = Instant::now();
    loop {
        // An unclassified link keeps being read even while held, to learn its class.
        if classifier.is_none() {
            view.open().await?;
        }
        let read = from.read(&mut buffer).await?;
        let bytes = match classifier.as_mut() {
            Some(pending) if read == 0 => pending.finish(),
            Some(pending) => {
                let (bytes, class) = pending.feed(&buffer[..read]);
                if let Some(class) = class {
                    classifier = None;
                    // Published before the bytes are queued, so the writer gates them by it.
                    known.send_replace(Known::Class(class));
                }
                bytes
            }
            None => buffer[..read].to_vec(),
        };
        if !bytes.is_empty() {
            let due = view.due(&mut last);
            to.send(Piece::Bytes { due, bytes })
                .await
                .map_err(closed_queue)?;
        }
        if read == 0 {
            return to.send(Piece::End).await.map_err(closed_queue);
        }
    }
}

/// Server to client.
async fn read_server(
    mut from: ReadHalf<'_>,
    mut view: View,
    to: mpsc::Sender<Piece>,
) -> io::Result<()> {
    let mut buffer = vec![0; CHUNK];
    let mut last = Instant::now();
    loop {
        view.open().await?;
        let read = from.read(&mut buffer).await?;
        if read == 0 {
            return to.send(Piece::End).await.map_err(closed_queue);
        }
        let due = view.due(&mut last);
        let bytes = buffer[..read].to_vec();
        to.send(Piece::Bytes { due, bytes })
            .await
            .map_err(closed_queue)?;
    }
}

async fn write_side(
    mut to: WriteHalf<'_>,
    mut from: mpsc::Receiver<Piece>,
    mut view: View,
) -> io::Result<()> {
    while let Some(piece) = from.recv().await {
        match piece {
            Piece::Bytes { due, bytes } => {
                sleep_until(due).await;
                view.open().await?;
                to.write_all(&bytes).await?;
            }
            Piece::End => {
                // The peer's close is held by a cut like its bytes.
                view.open().await?;
                return to.shutdown().await;
            }
        }
    }
    Ok(())
}

/// Reads the start of a client-to-server stream as RESP commands to find the link's class,
/// holding back an incomplete command so that a command revealing a cut class is never
/// forwarded in part.
#[derive(Debug, Default)]
struct Classifier {
    pending: Vec<u8>,
    seen: usize,
}

impl Classifier {
    /// Takes bytes read from the peer; returns the bytes that may be forwarded now and, once
    /// known, the class. After a class is returned the classifier is no longer needed.
    fn feed(&mut self, bytes: &[u8]) -> (Vec<u8>, Option<LinkClass>) {
        self.pending.extend_from_slice(bytes);
        self.seen += bytes.len();
        let mut complete = 0;
        loop {
            match parse_command(&self.pending[complete..]) {
                Parsed::Incomplete => break,
                // Not RESP (or not a request): nothing more to learn from it.
                Parsed::Malformed => return (self.finish(), Some(LinkClass::Client)),
                Parsed::Command { length, class } => {
                    complete += length;
                    if let Some(class) = class {
                        return (self.finish(), Some(class));
                    }
                }
            }
        }
        if self.seen >= CLASSIFY_WINDOW {
            return (self.finish(), Some(LinkClass::Client));
        }
        (self.pending.drain(..complete).collect(), None)
    }

    /// Everything still held back.
    fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    Incomplete,
    Malformed,
    Command {
        length: usize,
        class: Option<LinkClass>,
    },
}

/// Parses one command at the start of `bytes`: a RESP array of bulk strings, or an inline
/// command line as `redis-cli` and telnet send.
fn parse_command(bytes: &[u8]) -> Parsed {
    let Some(&first) = bytes.first() else {
        return Parsed::Incomplete;
    };
    if first != b'*' {
        let end = bytes.iter().position(|&byte| byte == b'\n');
        let line = &bytes[..end.unwrap_or(bytes.len())];
        // An inline command is text; anything else (a TLS handshake) is not a request we
        // can read, and waiting for a newline in it could hold the link for good.
        if !line
            .iter()
            .all(|&byte| byte.is_ascii_graphic() || byte.is_ascii_whitespace())
        {
            return Parsed::Malformed;
        }
        let Some(end) = end else {
            return Parsed::Incomplete;
        };
        let words: Vec<&[u8]> = bytes[..end]
            .split(|byte| byte.is_ascii_whitespace())
            .filter(|word| !word.is_empty())
            .collect();
        return Parsed::Command {
            length: end + 1,
            class: classify(&words),
        };
    }
    let Some((count, mut at)) = header(bytes, 0, b'*') else {
        return incomplete_or_malformed(bytes);
    };
    let Ok(count) = usize::try_from(count) else {
        // `*-1` and `*0` are empty requests Redis ignores.
        return Parsed::Command {
            length: at,
            class: None,
        };
    };
    let mut words = Vec::with_capacity(count.min(3));
    for _ in 0..count {
        let Some((length, data)) = header(bytes, at, b'$') else {
            return incomplete_or_malformed(&bytes[at..]);
        };
        let Ok(length) = usize::try_from(length) else {
            return Parsed::Malformed;
        };
        let end = data + length;
        if bytes.len() < end + 2 {
            return Parsed::Incomplete;
        }
        if &bytes[end..end + 2] != b"\r\n" {
            return Parsed::Malformed;
        }
        if words.len() < 3 {
            words.push(&bytes[data..end]);
        }
        at = end + 2;
    }
    Parsed::Command {
        length: at,
        class: classify(&words),
    }
}

/// Reads `<prefix><integer>\r\n` at `at`; returns the integer and where the next part starts.
fn header(bytes: &[u8], at: usize, prefix: u8) -> Option<(i64, usize)> {
    let rest = bytes.get(at..)?;
    if rest.first() != Some(&prefix) {
        return None;
    }
    let end = rest.windows(2).position(|pair| pair == b"\r\n")?;
    let number = std::str::from_utf8(&rest[1..end]).ok()?.parse().ok()?;
    Some((number, at + end + 2))
}

/// Tells a header that has not fully arrived from one that never will parse.
fn incomplete_or_malformed(rest: &[u8]) -> Parsed {
    let Some(&prefix) = rest.first() else {
        return Parsed::Incomplete;
    };
    match rest.windows(2).position(|pair| pair == b"\r\n") {
        // A header line is a prefix and a number; 24 bytes are plenty for any length.
        None if rest.len() < 24 && (prefix == b'*' || prefix == b'$') => Parsed::Incomplete,
        _ => Parsed::Malformed,
    }
}

fn classify(words: &[&[u8]]) -> Option<LinkClass> {
    let word = |index: usize, expected: &[u8]| {
        words
            .get(index)
            .is_some_and(|word| word.eq_ignore_ascii_case(expected))
    };
    if word(0, b"REPLCONF") || word(0, b"PSYNC") || word(0, b"SYNC") {
        return Some(LinkClass::Replica);
    }
    let sentinel_name = words
        .get(2)
        .is_some_and(|name| name.len() > 9 && name[..9].eq_ignore_ascii_case(b"sentinel-"));
    if word(0, b"CLIENT") && word(1, b"SETNAME") && sentinel_name {
        return Some(LinkClass::Sentinel);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Long enough for a forwarded chunk to come back on loopback; used only to prove that
    /// nothing arrives.
    const SILENCE: Duration = Duration::from_millis(300);
    const PATIENCE: Duration = Duration::from_secs(5);

    fn command(words: &[&str]) -> Vec<u8> {
        let mut bytes = format!("*{}\r\n", words.len()).into_bytes();
        for word in words {
            bytes.extend_from_slice(format!("${}\r\n{}\r\n", word.len(), word).as_bytes());
        }
        bytes
    }

    /// Nothing listens on it once the probe listener is dropped.
    fn free_port() -> u16 {
        std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .map(|address| address.port())
            .expect("a free port")
    }

    /// A server that sends back whatever it receives, on every connection.
    async fn echo_server() -> (u16, JoinHandle<()>) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("bind the echo server");
        let port = listener.local_addr().expect("echo server address").port();
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((mut stream, _)) = listener.accept().await {
                connections.spawn(async move {
                    let (mut read, mut write) = stream.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        (port, task)
    }

    async fn relay_to_echo() -> (Relay, JoinHandle<()>) {
        let (echo, task) = echo_server().await;
        let relay = Relay::start(0, echo).await.expect("start the relay");
        (relay, task)
    }

    async fn connect(port: u16) -> TcpStream {
        let stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .await
            .expect("connect to the relay");
        stream.set_nodelay(true).expect("nodelay");
        stream
    }

    /// Sends `bytes` and expects them back.
    async fn round_trip(stream: &mut TcpStream, bytes: &[u8]) {
        stream.write_all(bytes).await.expect("write");
        let mut back = vec![0; bytes.len()];
        timeout(PATIENCE, stream.read_exact(&mut back))
            .await
            .expect("the echo came back in time")
            .expect("read the echo");
        assert_eq!(back, bytes);
    }

    /// Sends `bytes` and expects no answer, and no close, within [`SILENCE`].
    async fn swallowed(stream: &mut TcpStream, bytes: &[u8]) {
        stream.write_all(bytes).await.expect("write");
        assert_silent(stream).await;
    }

    async fn assert_silent(stream: &mut TcpStream) {
        let mut byte = [0; 1];
        match timeout(SILENCE, stream.read(&mut byte)).await {
            Err(_) => {}
            Ok(result) => panic!("expected silence, got {result:?}"),
        }
    }

    /// Expects the relay to close the connection (a reset or an end of stream).
    async fn assert_closed(stream: &mut TcpStream) {
        let mut rest = Vec::new();
        match timeout(PATIENCE, stream.read_to_end(&mut rest)).await {
            Ok(Ok(_)) | Ok(Err(_)) => {}
            Err(_) => panic!("the relay did not close the connection"),
        }
    }

    #[test]
    fn link_class_names_round_trip() {
        for class in LinkClass::ALL {
            assert_eq!(class.to_string().parse::<LinkClass>().ok(), Some(class));
        }
        assert_eq!(
            "Replicas".parse::<LinkClass>().ok(),
            Some(LinkClass::Replica)
        );
        assert!(matches!(
            "masters".parse::<LinkClass>(),
            Err(RelayError::UnknownClass(_))
        ));
    }

    #[test]
    fn the_classifier_finds_a_replconf_fed_one_byte_at_a_time() {
        let mut stream = command(&["PING"]);
        stream.extend(command(&["REPLCONF", "listening-port", "7001"]));
        let mut classifier = Classifier::default();
        let mut before = Vec::new();
        let mut decision = None;
        for byte in &stream {
            match classifier.feed(std::slice::from_ref(byte)) {
                (bytes, None) => before.extend(bytes),
                (bytes, Some(class)) => {
                    decision = Some((class, bytes));
                    break;
                }
            }
        }
        // The PING passed before the class was known; the REPLCONF is released only with
        // its class, so a cut replica link never forwards a byte of it.
        let replconf = command(&["REPLCONF", "listening-port", "7001"]);
        assert_eq!(decision, Some((LinkClass::Replica, replconf)));
        assert_eq!(before, command(&["PING"]));
    }

    #[test]
    fn a_status_line_reads_back_as_the_status() {
        let status = RelayStatus {
            port: 7000,
            target: 7013,
            cut: vec![LinkClass::Replica, LinkClass::Sentinel],
            latency: Duration::from_millis(120),
            jitter: Duration::from_millis(15),
            clients: 3,
            replicas: 1,
            sentinels: 6,
        };
        assert_eq!(
            status.to_string().parse::<RelayStatus>(),
            Ok(status.clone())
        );
        let healed = RelayStatus {
            cut: Vec::new(),
            ..status
        };
        assert_eq!(healed.to_string().parse::<RelayStatus>(), Ok(healed));
        assert!("port=1".parse::<RelayStatus>().is_err());
    }

    #[test]
    fn the_classifier_matches_command_names_in_any_case() {
        let mut classifier = Classifier::default();
        let (_, class) = classifier.feed(&command(&["psync", "?", "-1"]));
        assert_eq!(class, Some(LinkClass::Replica));
        let mut classifier = Classifier::default();
        let (_, class) = classifier.feed(&command(&["client", "setname", "Sentinel-ab12-cmd"]));
        assert_eq!(class, Some(LinkClass::Sentinel));
        let mut classifier = Classifier::default();
        let (_, class) = classifier.feed(b"sync\r\n");
        assert_eq!(class, Some(LinkClass::Replica));
    }

    #[test]
    fn a_value_that_mentions_replconf_does_not_make_a_replica() {
        let mut classifier = Classifier::default();
        let bytes = command(&["SET", "key", "\r\nREPLCONF\r\n"]);
        assert_eq!(classifier.feed(&bytes), (bytes.clone(), None));
        let other_name = command(&["CLIENT", "SETNAME", "worker-7"]);
        assert_eq!(classifier.feed(&other_name), (other_name.clone(), None));
    }

    #[test]
    fn a_link_is_a_client_for_good_after_the_window_or_on_garbage() {
        let mut classifier = Classifier::default();
        let big = command(&["SET", "key", &"x".repeat(CLASSIFY_WINDOW)]);
        let (bytes, class) = classifier.feed(&big[..CLASSIFY_WINDOW]);
        assert_eq!(
            (bytes.len(), class),
            (CLASSIFY_WINDOW, Some(LinkClass::Client))
        );
        let mut classifier = Classifier::default();
        let (bytes, class) = classifier.feed(b"*2\r\n+not a bulk\r\n");
        assert_eq!((bytes.len(), class), (17, Some(LinkClass::Client)));
    }

    #[tokio::test]
    async fn a_client_link_is_forwarded_both_ways() {
        let (relay, _echo) = relay_to_echo().await;
        let mut stream = connect(relay.port()).await;
        round_trip(&mut stream, &command(&["PING"])).await;
        round_trip(&mut stream, &command(&["SET", "k", "v"])).await;
        assert_eq!(relay.status().clients, 1);
    }

    #[tokio::test]
    async fn a_cut_client_link_forwards_nothing_until_healed() {
        let (relay, _echo) = relay_to_echo().await;
        let mut stream = connect(relay.port()).await;
        round_trip(&mut stream, &command(&["PING"])).await;
        relay.cut(LinkClass::Client);
        swallowed(&mut stream, &command(&["PING"])).await;
        let mut late = connect(relay.port()).await;
        swallowed(&mut late, &command(&["GET", "k"])).await;
        relay.heal();
        let mut fresh = connect(relay.port()).await;
        round_trip(&mut fresh, &command(&["PING"])).await;
    }

    #[tokio::test]
    async fn a_heal_closes_the_links_that_were_cut() {
        let (relay, _echo) = relay_to_echo().await;
        let mut replica = connect(relay.port()).await;
        round_trip(&mut replica, &command(&["REPLCONF", "capa", "psync2"])).await;
        let mut client = connect(relay.port()).await;
        round_trip(&mut client, &command(&["PING"])).await;
        relay.cut(LinkClass::Replica);
        swallowed(&mut replica, &command(&["REPLCONF", "ACK", "0"])).await;
        relay.heal();
        assert_closed(&mut replica).await;
        // The client link was never cut, so it carries on.
        round_trip(&mut client, &command(&["PING"])).await;
    }

    #[tokio::test]
    async fn a_replica_link_is_recognised_by_replconf() {
        let (relay, _echo) = relay_to_echo().await;
        relay.cut(LinkClass::Replica);
        let mut replica = connect(relay.port()).await;
        // A replica opens with PING, indistinguishable from a client, so it passes.
        round_trip(&mut replica, &command(&["PING"])).await;
        let mut handshake = command(&["AUTH", "secret"]);
        handshake.extend(command(&["REPLCONF", "listening-port", "7001"]));
        swallowed(&mut replica, &handshake).await;
        assert_eq!(relay.status().replicas, 1);
        let mut client = connect(relay.port()).await;
        round_trip(&mut client, &command(&["PING"])).await;
    }

    #[tokio::test]
    async fn a_sentinel_link_is_recognised_by_its_client_name() {
        let (relay, _echo) = relay_to_echo().await;
        relay.cut(LinkClass::Sentinel);
        let mut sentinel = connect(relay.port()).await;
        let mut hello = command(&["CLIENT", "SETNAME", "sentinel-3f2a9c1b-cmd"]);
        hello.extend(command(&["PING"]));
        swallowed(&mut sentinel, &hello).await;
        assert_eq!(relay.status().sentinels, 1);
        let mut client = connect(relay.port()).await;
        round_trip(&mut client, &command(&["CLIENT", "SETNAME", "worker-1"])).await;
    }

    #[tokio::test]
    async fn while_clients_are_cut_a_new_sentinel_link_is_released_once_recognised() {
        let (relay, _echo) = relay_to_echo().await;
        relay.cut(LinkClass::Client);
        let mut sentinel = connect(relay.port()).await;
        let mut hello = command(&["AUTH", "secret"]);
        hello.extend(command(&["CLIENT", "SETNAME", "sentinel-3f2a9c1b-pubsub"]));
        round_trip(&mut sentinel, &hello).await;
        let mut client = connect(relay.port()).await;
        swallowed(&mut client, &command(&["PING"])).await;
        relay.heal();
        assert_closed(&mut client).await;
        round_trip(&mut sentinel, &command(&["PING"])).await;
    }

    #[tokio::test]
    async fn latency_delays_but_never_reorders() {
        let (relay, _echo) = relay_to_echo().await;
        let delay = Duration::from_millis(40);
        relay.set_latency(delay, Duration::from_millis(35));
        let mut stream = connect(relay.port()).await;
        let started = std::time::Instant::now();
        let mut sent = Vec::new();
        for number in 0..50 {
            let bytes = command(&["INCR", &format!("counter-{number}")]);
            stream.write_all(&bytes).await.expect("write");
            sent.extend(bytes);
        }
        let mut back = vec![0; sent.len()];
        timeout(PATIENCE, stream.read_exact(&mut back))
            .await
            .expect("the echo came back in time")
            .expect("read the echo");
        assert_eq!(back, sent);
        // Each direction waits at least delay - jitter.
        assert!(started.elapsed() >= Duration::from_millis(10));

        relay.set_latency(Duration::from_millis(150), Duration::ZERO);
        let started = std::time::Instant::now();
        round_trip(&mut stream, &command(&["PING"])).await;
        assert!(started.elapsed() >= Duration::from_millis(300));
    }

    #[tokio::test]
    async fn latency_zero_turns_it_off_and_spares_replica_links() {
        let (relay, _echo) = relay_to_echo().await;
        relay.set_latency(Duration::from_secs(2), Duration::ZERO);
        let mut replica = connect(relay.port()).await;
        let started = std::time::Instant::now();
        round_trip(&mut replica, &command(&["REPLCONF", "capa", "eof"])).await;
        round_trip(&mut replica, &command(&["REPLCONF", "ACK", "0"])).await;
        assert!(started.elapsed() < Duration::from_secs(1));

        relay.set_latency(Duration::ZERO, Duration::ZERO);
        assert_eq!(relay.status().latency, Duration::ZERO);
        let mut client = connect(relay.port()).await;
        let started = std::time::Instant::now();
        round_trip(&mut client, &command(&["PING"])).await;
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn the_control_port_cuts_and_heals() {
        let (mut relay, _echo) = relay_to_echo().await;
        let port = relay.listen_control(0).await.expect("control port");
        let mut stream = connect(relay.port()).await;
        round_trip(&mut stream, &command(&["PING"])).await;

        assert_eq!(
            control(port, "cut clients").await.expect("cut"),
            "cut clients"
        );
        swallowed(&mut stream, &command(&["PING"])).await;
        let status = control(port, "status").await.expect("status");
        assert!(status.contains("cut=clients "), "{status}");
        assert!(
            status.contains(&format!("port={} ", relay.port())),
            "{status}"
        );

        assert_eq!(control(port, "heal").await.expect("heal"), "healed");
        assert_closed(&mut stream).await;
        let mut fresh = connect(relay.port()).await;
        round_trip(&mut fresh, &command(&["PING"])).await;

        let answer = control(port, "latency 25 5").await.expect("latency");
        assert_eq!(answer, "latency_ms=25 jitter_ms=5");
        assert_eq!(relay.status().latency, Duration::from_millis(25));
        assert!(matches!(
            control(port, "cut masters").await,
            Err(RelayError::Refused { .. })
        ));
        assert!(matches!(
            control(port, "latency soon").await,
            Err(RelayError::Refused { .. })
        ));
        assert!(matches!(
            control(port, "cut\nheal").await,
            Err(RelayError::MultiLineCommand { .. })
        ));
        assert!(matches!(
            relay.listen_control(0).await,
            Err(RelayError::ControlRunning { .. })
        ));
    }

    #[tokio::test]
    async fn serve_runs_a_relay_that_another_process_controls() {
        let (echo, _echo) = echo_server().await;
        let (listen, control_port) = (free_port(), free_port());
        let server = tokio::spawn(serve(listen, echo, control_port));
        // The relay binds asynchronously; its control port answering means it is up.
        let deadline = Instant::now() + PATIENCE;
        while control(control_port, "status").await.is_err() {
            assert!(Instant::now() < deadline, "serve did not come up");
            sleep(Duration::from_millis(10)).await;
        }
        let mut stream = connect(listen).await;
        round_trip(&mut stream, &command(&["PING"])).await;
        control(control_port, "cut clients").await.expect("cut");
        swallowed(&mut stream, &command(&["PING"])).await;
        server.abort();
        assert!(server.await.is_err_and(|error| error.is_cancelled()));
        assert_closed(&mut stream).await;
    }

    #[tokio::test]
    async fn an_unreachable_target_closes_the_accepted_connection_at_once() {
        let relay = Relay::start(0, free_port()).await.expect("start the relay");
        let mut stream = connect(relay.port()).await;
        assert_closed(&mut stream).await;
    }

    #[tokio::test]
    async fn stopping_the_relay_closes_its_listener_and_links() {
        let (relay, _echo) = relay_to_echo().await;
        let port = relay.port();
        let mut stream = connect(port).await;
        round_trip(&mut stream, &command(&["PING"])).await;
        relay.stop().await;
        assert_closed(&mut stream).await;
        assert!(
            TcpStream::connect((Ipv4Addr::LOCALHOST, port))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn dropping_the_relay_closes_its_links() {
        let (relay, _echo) = relay_to_echo().await;
        let mut stream = connect(relay.port()).await;
        round_trip(&mut stream, &command(&["PING"])).await;
        drop(relay);
        assert_closed(&mut stream).await;
    }

    /// A `redis-server` this test started, killed by PID when the test ends.
    struct RedisGuard {
        child: std::process::Child,
        _dir: tempfile::TempDir,
    }

    impl Drop for RedisGuard {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    #[tokio::test]
    async fn a_real_redis_answers_through_the_relay_until_clients_are_cut() {
        let Ok(found) = std::process::Command::new("which")
            .arg("redis-server")
            .output()
        else {
            return;
        };
        if !found.status.success() {
            eprintln!("redis-server not found; skipping");
            return;
        }
        let binary = String::from_utf8_lossy(&found.stdout).trim().to_string();
        let port = free_port();
        let dir = tempfile::tempdir().expect("a scratch dir");
        let child = std::process::Command::new(binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start redis-server");
        let _redis = RedisGuard { child, _dir: dir };
        let relay = Relay::start(0, port).await.expect("start the relay");

        let ping = command(&["PING"]);
        let deadline = Instant::now() + PATIENCE;
        let mut stream = loop {
            // redis-server takes a moment to listen; until then the relay closes at once.
            let mut stream = connect(relay.port()).await;
            let mut answer = [0; 7];
            let answered = async {
                stream.write_all(&ping).await?;
                stream.read_exact(&mut answer).await
            };
            if timeout(SILENCE, answered)
                .await
                .is_ok_and(|read| read.is_ok())
            {
                assert_eq!(&answer, b"+PONG\r\n");
                break stream;
            }
            assert!(Instant::now() < deadline, "redis-server did not answer");
            sleep(Duration::from_millis(20)).await;
        };

        relay.cut(LinkClass::Client);
        swallowed(&mut stream, &ping).await;
        let mut late = connect(relay.port()).await;
        swallowed(&mut late, &ping).await;
        relay.heal();
        assert_closed(&mut stream).await;
        let mut fresh = connect(relay.port()).await;
        fresh.write_all(&ping).await.expect("write");
        let mut answer = [0; 7];
        timeout(PATIENCE, fresh.read_exact(&mut answer))
            .await
            .expect("redis answered in time")
            .expect("read the answer");
        assert_eq!(&answer, b"+PONG\r\n");
    }
}
