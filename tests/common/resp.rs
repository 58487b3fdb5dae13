//! Plain RESP over a socket, for tests that look at a node through its own port: one
//! command, one non-array reply, and what Cluster tests read from CLUSTER INFO and NODES.
//! Commands are encoded and replies parsed by the lab's RESP module.

use std::collections::BTreeMap;
use std::time::Duration;

use quorumlock::lab::resp as wire;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const CALL_WITHIN: Duration = Duration::from_millis(500);
/// A reply as the test needs it: simple and bulk strings as text, errors with their `-`.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Text(String),
    Error(String),
    Integer(i64),
    Nil,
}

/// Sends one command and reads one non-array reply, or `None` if the node does not answer.
pub async fn call(port: u16, args: &[&str]) -> Option<Reply> {
    call_on(port, &[args]).await
}

/// [`call`] on a Cluster replica, which answers reads of its own data after `READONLY`.
pub async fn call_replica(port: u16, args: &[&str]) -> Option<Reply> {
    call_on(port, &[&["READONLY"], args]).await
}

/// [`call`] after `ASKING`, which a node importing a slot needs to answer for its keys.
pub async fn call_asking(port: u16, args: &[&str]) -> Option<Reply> {
    call_on(port, &[&["ASKING"], args]).await
}

/// Sends `commands` on one connection, one after the other, and reads the last one's reply.
async fn call_on(port: u16, commands: &[&[&str]]) -> Option<Reply> {
    let attempt = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let mut reply = None;
        for args in commands {
            stream.write_all(&wire::encode(args)).await.ok()?;
            reply = Some(Reply::of(read_reply(&mut stream).await?));
        }
        reply
    };
    tokio::time::timeout(CALL_WITHIN, attempt)
        .await
        .ok()
        .flatten()
}

/// Sends one command and reads an array reply, nested arrays flattened, of strings and
/// integers (integers as text); `None` if the node does not answer or answers no array.
pub async fn array(port: u16, args: &[&str]) -> Option<Vec<String>> {
    let attempt = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        stream.write_all(&wire::encode(args)).await.ok()?;
        let reply = read_reply(&mut stream).await?;
        let mut items = Vec::new();
        flatten(reply.items()?, &mut items)?;
        Some(items)
    };
    tokio::time::timeout(CALL_WITHIN, attempt)
        .await
        .ok()
        .flatten()
}

/// The items of an array reply (bulk strings, integers, or arrays, whose items count in their
/// place) as text, onto `out`; `None` for an item that is none of those.
fn flatten(items: &[wire::Reply], out: &mut Vec<String>) -> Option<()> {
    for item in items {
        match item {
            wire::Reply::Array(Some(nested)) => flatten(nested, out)?,
            wire::Reply::Integer(integer) => out.push(integer.to_string()),
            wire::Reply::Bulk(Some(text)) => out.push(text.clone()),
            _ => return None,
        }
    }
    Some(())
}

/// Reads one whole reply, with the lab's RESP parser.
async fn read_reply(stream: &mut TcpStream) -> Option<wire::Reply> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match wire::parse(&buffer) {
            Ok(Some((reply, _))) => return Some(reply),
            Ok(None) => {}
            Err(message) => panic!("unexpected reply: {message}"),
        }
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

impl Reply {
    /// A non-array reply as the test needs it.
    fn of(reply: wire::Reply) -> Reply {
        match reply {
            wire::Reply::Status(text) | wire::Reply::Bulk(Some(text)) => Reply::Text(text),
            wire::Reply::Error(message) => Reply::Error(message),
            wire::Reply::Integer(value) => Reply::Integer(value),
            wire::Reply::Bulk(None) => Reply::Nil,
            wire::Reply::Array(_) => panic!("unexpected array reply"),
        }
    }
}

pub async fn text(port: u16, args: &[&str]) -> Option<String> {
    match call(port, args).await? {
        Reply::Text(text) => Some(text),
        _ => None,
    }
}

pub async fn integer(port: u16, args: &[&str]) -> Option<i64> {
    match call(port, args).await? {
        Reply::Integer(value) => Some(value),
        _ => None,
    }
}

pub async fn cluster_info(port: u16) -> BTreeMap<String, String> {
    text(port, &["CLUSTER", "INFO"])
        .await
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().split_once(':'))
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

/// One line of `CLUSTER NODES`, keyed by port: (flags, slot ranges).
pub async fn cluster_nodes(port: u16) -> BTreeMap<u16, (String, String)> {
    text(port, &["CLUSTER", "NODES"])
        .await
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port = fields.get(1)?.split('@').next()?.rsplit_once(':')?.1;
            let flags = fields.get(2)?.replace("myself,", "");
            let slots = fields.get(8..).unwrap_or_default().join(" ");
            Some((port.parse().ok()?, (flags, slots)))
        })
        .collect()
}

/// The hash slot of a key without a hash tag: CRC16 (XMODEM) modulo 16,384.
pub fn key_slot(key: &str) -> u16 {
    let mut crc: u16 = 0;
    for byte in key.bytes() {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16_384
}

/// The tag the engine puts in front of a key of `slot`: the first text of one to three
/// alphanumerics, in this order, that hashes to it.
pub fn tag_of(slot: u16) -> String {
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    for length in 1..=3u32 {
        for number in 0..ALPHABET.len().pow(length) {
            let mut digits = Vec::new();
            let mut rest = number;
            for _ in 0..length {
                digits.push(ALPHABET[rest % ALPHABET.len()]);
                rest /= ALPHABET.len();
            }
            digits.reverse();
            let tag = String::from_utf8(digits).expect("ascii");
            if key_slot(&tag) == slot {
                return tag;
            }
        }
    }
    panic!("no tag for slot {slot}")
}

/// Starts moving `slot` from the node at `source` to the node at `target`, as resharding does
/// before it moves keys: IMPORTING on the target, MIGRATING on the source.
pub async fn start_slot_move(source: u16, target: u16, slot: u16) {
    let id = |port: u16| async move { text(port, &["CLUSTER", "MYID"]).await.expect("node id") };
    let (source_id, target_id) = (id(source).await, id(target).await);
    let slot = slot.to_string();
    let ok = Some(Reply::Text("OK".into()));
    let importing = ["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id];
    assert_eq!(call(target, &importing).await, ok);
    let migrating = ["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id];
    assert_eq!(call(source, &migrating).await, ok);
}

/// Moves `keys` from the node at `source` to the node at `target` (MIGRATE).
pub async fn migrate_keys(source: u16, target: u16, keys: &[&str]) {
    let target = target.to_string();
    let mut migrate = vec!["MIGRATE", "127.0.0.1", &target, "", "0", "5000", "KEYS"];
    migrate.extend_from_slice(keys);
    assert_eq!(
        call(source, &migrate).await,
        Some(Reply::Text("OK".into())),
        "MIGRATE {keys:?}"
    );
}
