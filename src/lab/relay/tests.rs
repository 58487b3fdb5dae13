//! The relay end to end, against an echo server and a real `redis-server`, and its
//! classifier and status line on their own.

use std::net::Ipv4Addr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, sleep, timeout};

use super::classify::Classifier;
use super::{CLASSIFY_WINDOW, LinkClass, Relay, RelayError, RelayStatus, control, serve};
use crate::lab::resp::encode;

/// Long enough for a forwarded chunk to come back on loopback; used only to prove that
/// nothing arrives.
const SILENCE: Duration = Duration::from_millis(300);
const PATIENCE: Duration = Duration::from_secs(5);

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
    let mut stream = encode(&["PING"]);
    stream.extend(encode(&["REPLCONF", "listening-port", "7001"]));
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
    let replconf = encode(&["REPLCONF", "listening-port", "7001"]);
    assert_eq!(decision, Some((LinkClass::Replica, replconf)));
    assert_eq!(before, encode(&["PING"]));
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
    let (_, class) = classifier.feed(&encode(&["psync", "?", "-1"]));
    assert_eq!(class, Some(LinkClass::Replica));
    let mut classifier = Classifier::default();
    let (_, class) = classifier.feed(&encode(&["client", "setname", "Sentinel-ab12-cmd"]));
    assert_eq!(class, Some(LinkClass::Sentinel));
    let mut classifier = Classifier::default();
    let (_, class) = classifier.feed(b"sync\r\n");
    assert_eq!(class, Some(LinkClass::Replica));
}

#[test]
fn a_value_that_mentions_replconf_does_not_make_a_replica() {
    let mut classifier = Classifier::default();
    let bytes = encode(&["SET", "key", "\r\nREPLCONF\r\n"]);
    assert_eq!(classifier.feed(&bytes), (bytes.clone(), None));
    let other_name = encode(&["CLIENT", "SETNAME", "worker-7"]);
    assert_eq!(classifier.feed(&other_name), (other_name.clone(), None));
}

#[test]
fn a_link_is_a_client_for_good_after_the_window_or_on_garbage() {
    let mut classifier = Classifier::default();
    let big = encode(&["SET", "key", &"x".repeat(CLASSIFY_WINDOW)]);
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
    round_trip(&mut stream, &encode(&["PING"])).await;
    round_trip(&mut stream, &encode(&["SET", "k", "v"])).await;
    assert_eq!(relay.status().clients, 1);
}

#[tokio::test]
async fn a_cut_client_link_forwards_nothing_until_healed() {
    let (relay, _echo) = relay_to_echo().await;
    let mut stream = connect(relay.port()).await;
    round_trip(&mut stream, &encode(&["PING"])).await;
    relay.cut(LinkClass::Client);
    swallowed(&mut stream, &encode(&["PING"])).await;
    let mut late = connect(relay.port()).await;
    swallowed(&mut late, &encode(&["GET", "k"])).await;
    relay.heal();
    let mut fresh = connect(relay.port()).await;
    round_trip(&mut fresh, &encode(&["PING"])).await;
}

#[tokio::test]
async fn a_heal_closes_the_links_that_were_cut() {
    let (relay, _echo) = relay_to_echo().await;
    let mut replica = connect(relay.port()).await;
    round_trip(&mut replica, &encode(&["REPLCONF", "capa", "psync2"])).await;
    let mut client = connect(relay.port()).await;
    round_trip(&mut client, &encode(&["PING"])).await;
    relay.cut(LinkClass::Replica);
    swallowed(&mut replica, &encode(&["REPLCONF", "ACK", "0"])).await;
    relay.heal();
    assert_closed(&mut replica).await;
    // The client link was never cut, so it carries on.
    round_trip(&mut client, &encode(&["PING"])).await;
}

#[tokio::test]
async fn a_replica_link_is_recognised_by_replconf() {
    let (relay, _echo) = relay_to_echo().await;
    relay.cut(LinkClass::Replica);
    let mut replica = connect(relay.port()).await;
    // A replica opens with PING, indistinguishable from a client, so it passes.
    round_trip(&mut replica, &encode(&["PING"])).await;
    let mut handshake = encode(&["AUTH", "secret"]);
    handshake.extend(encode(&["REPLCONF", "listening-port", "7001"]));
    swallowed(&mut replica, &handshake).await;
    assert_eq!(relay.status().replicas, 1);
    let mut client = connect(relay.port()).await;
    round_trip(&mut client, &encode(&["PING"])).await;
}

#[tokio::test]
async fn a_sentinel_link_is_recognised_by_its_client_name() {
    let (relay, _echo) = relay_to_echo().await;
    relay.cut(LinkClass::Sentinel);
    let mut sentinel = connect(relay.port()).await;
    let mut hello = encode(&["CLIENT", "SETNAME", "sentinel-3f2a9c1b-cmd"]);
    hello.extend(encode(&["PING"]));
    swallowed(&mut sentinel, &hello).await;
    assert_eq!(relay.status().sentinels, 1);
    let mut client = connect(relay.port()).await;
    round_trip(&mut client, &encode(&["CLIENT", "SETNAME", "worker-1"])).await;
}

#[tokio::test]
async fn while_clients_are_cut_a_new_sentinel_link_is_released_once_recognised() {
    let (relay, _echo) = relay_to_echo().await;
    relay.cut(LinkClass::Client);
    let mut sentinel = connect(relay.port()).await;
    let mut hello = encode(&["AUTH", "secret"]);
    hello.extend(encode(&["CLIENT", "SETNAME", "sentinel-3f2a9c1b-pubsub"]));
    round_trip(&mut sentinel, &hello).await;
    let mut client = connect(relay.port()).await;
    swallowed(&mut client, &encode(&["PING"])).await;
    relay.heal();
    assert_closed(&mut client).await;
    round_trip(&mut sentinel, &encode(&["PING"])).await;
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
        let bytes = encode(&["INCR", &format!("counter-{number}")]);
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
    round_trip(&mut stream, &encode(&["PING"])).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn latency_zero_turns_it_off_and_spares_replica_links() {
    let (relay, _echo) = relay_to_echo().await;
    relay.set_latency(Duration::from_secs(2), Duration::ZERO);
    let mut replica = connect(relay.port()).await;
    let started = std::time::Instant::now();
    round_trip(&mut replica, &encode(&["REPLCONF", "capa", "eof"])).await;
    round_trip(&mut replica, &encode(&["REPLCONF", "ACK", "0"])).await;
    assert!(started.elapsed() < Duration::from_secs(1));

    relay.set_latency(Duration::ZERO, Duration::ZERO);
    assert_eq!(relay.status().latency, Duration::ZERO);
    let mut client = connect(relay.port()).await;
    let started = std::time::Instant::now();
    round_trip(&mut client, &encode(&["PING"])).await;
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn the_control_port_cuts_and_heals() {
    let (mut relay, _echo) = relay_to_echo().await;
    let port = relay.listen_control(0).await.expect("control port");
    let mut stream = connect(relay.port()).await;
    round_trip(&mut stream, &encode(&["PING"])).await;

    assert_eq!(
        control(port, "cut clients").await.expect("cut"),
        "cut clients"
    );
    swallowed(&mut stream, &encode(&["PING"])).await;
    let status = control(port, "status").await.expect("status");
    assert!(status.contains("cut=clients "), "{status}");
    assert!(
        status.contains(&format!("port={} ", relay.port())),
        "{status}"
    );

    assert_eq!(control(port, "heal").await.expect("heal"), "healed");
    assert_closed(&mut stream).await;
    let mut fresh = connect(relay.port()).await;
    round_trip(&mut fresh, &encode(&["PING"])).await;

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
    round_trip(&mut stream, &encode(&["PING"])).await;
    control(control_port, "cut clients").await.expect("cut");
    swallowed(&mut stream, &encode(&["PING"])).await;
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
    round_trip(&mut stream, &encode(&["PING"])).await;
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
    round_trip(&mut stream, &encode(&["PING"])).await;
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

    let ping = encode(&["PING"]);
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
