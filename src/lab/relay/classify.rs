//! The RESP classifier: tells a link's class from the first commands its peer sends
//! (`REPLCONF`, `PSYNC` or `SYNC` for a replica, `CLIENT SETNAME sentinel-...` for a
//! Sentinel), holding back the command that reveals it. The commands are read with the lab's
//! RESP module.

use super::link::LinkClass;
use crate::lab::resp::{Request, parse_request};

/// How many bytes of a connection are read as commands to find its class. A replica sends
/// `REPLCONF` and a Sentinel `CLIENT SETNAME` within their first few hundred bytes.
pub const CLASSIFY_WINDOW: usize = 4096;

/// Reads the start of a client-to-server stream as RESP commands to find the link's class,
/// holding back an incomplete command so that a command revealing a cut class is never
/// forwarded in part.
#[derive(Debug, Default)]
pub(super) struct Classifier {
    pending: Vec<u8>,
    seen: usize,
}

impl Classifier {
    /// Takes bytes read from the peer; returns the bytes that may be forwarded now and, once
    /// known, the class. After a class is returned the classifier is no longer needed.
    pub(super) fn feed(&mut self, bytes: &[u8]) -> (Vec<u8>, Option<LinkClass>) {
        self.pending.extend_from_slice(bytes);
        self.seen += bytes.len();
        let mut complete = 0;
        loop {
            match parse_request(&self.pending[complete..]) {
                Request::Incomplete => break,
                // Not RESP (or not a request): nothing more to learn from it.
                Request::Malformed => return (self.finish(), Some(LinkClass::Client)),
                Request::Command { length, words } => {
                    complete += length;
                    if let Some(class) = classify(&words) {
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
    pub(super) fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }
}

/// The class a command reveals, if any.
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
