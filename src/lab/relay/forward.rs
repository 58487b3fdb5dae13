//! The forwarder: accepting a relay's connections and moving bytes between each link's two
//! sockets, with its class's cut (frozen or held) and the client links' latency applied.

use std::io;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep_until, timeout};

use super::classify::Classifier;
use super::link::{LinkClass, Settings, Shared};

/// A loopback node that is up accepts at once; one that is frozen still completes the
/// handshake from its kernel backlog. Waiting longer would only delay the close.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const CHUNK: usize = 16 * 1024;
/// Chunks queued per direction; with latency on, this bounds the bytes in flight.
const QUEUE: usize = 64;

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

pub(super) async fn run_link(mut inbound: TcpStream, shared: Arc<Shared>) {
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
