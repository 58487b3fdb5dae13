//! The RESP2 wire format, both ways: [`encode`] a command, [`parse`] a reply (for clients of a
//! node), and [`parse_request`] a command as a node reads it (for the relay's classifier).
//! Whatever parses RESP in the lab, its tests included, parses it here.

/// A reply as RESP2 sends it.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Status(String),
    Error(String),
    Integer(i64),
    Bulk(Option<String>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    pub fn text(&self) -> Option<&str> {
        match self {
            Reply::Status(text) | Reply::Bulk(Some(text)) => Some(text),
            _ => None,
        }
    }

    pub fn items(&self) -> Option<&[Reply]> {
        match self {
            Reply::Array(Some(items)) => Some(items),
            _ => None,
        }
    }

    /// Integers arrive as `:n` or, from Sentinel, as bulk strings.
    pub fn integer(&self) -> Option<i64> {
        match self {
            Reply::Integer(value) => Some(*value),
            other => other.text()?.parse().ok(),
        }
    }
}

/// A command as a RESP array of bulk strings.
pub fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
    }
    out
}

/// Parses one reply from the start of `buffer`: `Ok(None)` means more bytes are needed,
/// `Ok(Some((reply, used)))` how many bytes it took.
pub fn parse(buffer: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    let Some((line, after)) = line(buffer) else {
        return Ok(None);
    };
    let Some((&kind, rest)) = line.split_first() else {
        return Err("empty reply line".into());
    };
    let line = String::from_utf8_lossy(rest).into_owned();
    let number = || {
        line.parse::<i64>()
            .map_err(|_| format!("`{line}` is not a RESP length or integer"))
    };
    let reply = match kind {
        b'+' => (Reply::Status(line.clone()), after),
        b'-' => (Reply::Error(line.clone()), after),
        b':' => (Reply::Integer(number()?), after),
        // A negative length is RESP2's nil.
        b'$' => match usize::try_from(number()?) {
            Err(_) => (Reply::Bulk(None), after),
            Ok(length) => {
                let end = after + length;
                if buffer.len() < end + 2 {
                    return Ok(None);
                }
                let text = String::from_utf8_lossy(&buffer[after..end]).into_owned();
                (Reply::Bulk(Some(text)), end + 2)
            }
        },
        b'*' => match usize::try_from(number()?) {
            Err(_) => (Reply::Array(None), after),
            Ok(count) => {
                let mut items = Vec::new();
                let mut offset = after;
                for _ in 0..count {
                    let Some((item, used)) = parse(&buffer[offset..])? else {
                        return Ok(None);
                    };
                    items.push(item);
                    offset += used;
                }
                (Reply::Array(Some(items)), offset)
            }
        },
        other => return Err(format!("unexpected RESP type byte {other:#04x}")),
    };
    Ok(Some(reply))
}

/// One command read from the start of a client's stream.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Request<'a> {
    /// More bytes are needed.
    Incomplete,
    /// Not a request this parser can read (not RESP, or not text), and never will be.
    Malformed,
    /// A whole command, `length` bytes long.
    Command { length: usize, words: Vec<&'a [u8]> },
}

/// Parses one command at the start of `bytes`: a RESP array of bulk strings, or an inline
/// command line as `redis-cli` and telnet send.
pub(crate) fn parse_request(bytes: &[u8]) -> Request<'_> {
    let Some(&first) = bytes.first() else {
        return Request::Incomplete;
    };
    if first != b'*' {
        return parse_inline(bytes);
    }
    let Some((count, mut at)) = header(bytes, 0, b'*') else {
        return incomplete_or_malformed(bytes);
    };
    let Ok(count) = usize::try_from(count) else {
        // `*-1` and `*0` are empty requests Redis ignores.
        return Request::Command {
            length: at,
            words: Vec::new(),
        };
    };
    let mut words = Vec::new();
    for _ in 0..count {
        let Some((length, data)) = header(bytes, at, b'$') else {
            return incomplete_or_malformed(&bytes[at..]);
        };
        let Ok(length) = usize::try_from(length) else {
            return Request::Malformed;
        };
        let end = data + length;
        if bytes.len() < end + 2 {
            return Request::Incomplete;
        }
        if &bytes[end..end + 2] != b"\r\n" {
            return Request::Malformed;
        }
        words.push(&bytes[data..end]);
        at = end + 2;
    }
    Request::Command { length: at, words }
}

/// An inline command: words separated by spaces, up to a newline.
fn parse_inline(bytes: &[u8]) -> Request<'_> {
    let end = bytes.iter().position(|&byte| byte == b'\n');
    let line = &bytes[..end.unwrap_or(bytes.len())];
    // An inline command is text; anything else (a TLS handshake) is not a request we
    // can read, and waiting for a newline in it could hold the link for good.
    if !line
        .iter()
        .all(|&byte| byte.is_ascii_graphic() || byte.is_ascii_whitespace())
    {
        return Request::Malformed;
    }
    let Some(end) = end else {
        return Request::Incomplete;
    };
    let words: Vec<&[u8]> = bytes[..end]
        .split(|byte| byte.is_ascii_whitespace())
        .filter(|word| !word.is_empty())
        .collect();
    Request::Command {
        length: end + 1,
        words,
    }
}

/// The first line of `bytes` without its `\r\n`, and where what follows starts; `None` until
/// the `\r\n` has arrived.
fn line(bytes: &[u8]) -> Option<(&[u8], usize)> {
    let end = bytes.windows(2).position(|pair| pair == b"\r\n")?;
    Some((&bytes[..end], end + 2))
}

/// Reads `<prefix><integer>\r\n` at `at`; returns the integer and where the next part starts.
fn header(bytes: &[u8], at: usize, prefix: u8) -> Option<(i64, usize)> {
    let rest = bytes.get(at..)?;
    if rest.first() != Some(&prefix) {
        return None;
    }
    let (line, used) = line(rest)?;
    let number = std::str::from_utf8(&line[1..]).ok()?.parse().ok()?;
    Some((number, at + used))
}

/// Tells a header that has not fully arrived from one that never will parse.
fn incomplete_or_malformed(rest: &[u8]) -> Request<'static> {
    let Some(&prefix) = rest.first() else {
        return Request::Incomplete;
    };
    match line(rest) {
        // A header line is a prefix and a number; 24 bytes are plenty for any length.
        None if rest.len() < 24 && (prefix == b'*' || prefix == b'$') => Request::Incomplete,
        _ => Request::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::{Reply, Request, encode, parse, parse_request};
    use crate::lab::probe::parse_role;

    #[test]
    fn resp_parses_nested_replies_and_waits_for_more_bytes() {
        let role = b"*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:7000\r\n$9\r\nconnected\r\n:42\r\n";
        let (reply, used) = parse(role).expect("valid RESP").expect("complete reply");
        assert_eq!(used, role.len());
        assert_eq!(parse_role(&reply), Some(("replica".into(), Some(7000))));
        for cut in 0..role.len() {
            assert_eq!(parse(&role[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(parse(b"$-1\r\n"), Ok(Some((Reply::Bulk(None), 5))));
        assert_eq!(parse(b"*-1\r\n"), Ok(Some((Reply::Array(None), 5))));
        assert!(parse(b"?what\r\n").is_err());
        assert_eq!(encode(&["PING"]), b"*1\r\n$4\r\nPING\r\n");
    }

    #[test]
    fn a_request_is_read_whole_as_resp_or_inline_and_garbage_is_told_apart() {
        let set = encode(&["SET", "key", "\r\nvalue"]);
        let words: Vec<&[u8]> = vec![b"SET", b"key", b"\r\nvalue"];
        let whole = Request::Command {
            length: set.len(),
            words,
        };
        assert_eq!(parse_request(&set), whole);
        for cut in 0..set.len() {
            assert_eq!(
                parse_request(&set[..cut]),
                Request::Incomplete,
                "cut at {cut}"
            );
        }
        let inline: Vec<&[u8]> = vec![b"PING", b"hello"];
        let ping = Request::Command {
            length: 12,
            words: inline,
        };
        assert_eq!(parse_request(b"PING  hello\nGET"), ping);
        assert_eq!(parse_request(b"PING"), Request::Incomplete);
        let empty = Request::Command {
            length: 4,
            words: Vec::new(),
        };
        assert_eq!(parse_request(b"*0\r\n"), empty);
        assert_eq!(parse_request(b"*1\r\n:5\r\n"), Request::Malformed);
        assert_eq!(parse_request(b"*1\r\n$-1\r\n"), Request::Malformed);
        assert_eq!(parse_request(b"*1\r\n$1\r\nxy\r\n"), Request::Malformed);
        assert_eq!(parse_request(b"\x16\x03\x01"), Request::Malformed);
        assert_eq!(parse_request(&[b'*'; 30]), Request::Malformed);
    }
}
