//! The RESP classifier: tells a link's class from the first commands its peer sends
//! (`REPLCONF`, `PSYNC` or `SYNC` for a replica, `CLIENT SETNAME sentinel-...` for a
//! Sentinel), holding back the command that reveals it.

use super::link::LinkClass;

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
    pub(super) fn finish(&mut self) -> Vec<u8> {
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
