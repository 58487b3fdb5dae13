//! Just enough RESP2 to send one command and read one reply. The lab needs a handful of
//! commands with hard per-call deadlines on nodes that may be frozen, dead or half started;
//! a bare socket per call is the most predictable way to get that.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::certificates::tls_settings;
use super::{LabError, LabSpec};

/// How to reach the lab's nodes: the password they require and, for a TLS lab, the same
/// TLS client settings the lab writes into its topology.
#[derive(Clone)]
pub struct Control {
    password: Option<String>,
    tls: Option<TlsConnector>,
}

impl Control {
    pub fn new(spec: &LabSpec) -> Result<Self, LabError> {
        let tls = if spec.tls {
            Some(crate::group::security::tokio_connector(&tls_settings(
                &spec.dir,
            ))?)
        } else {
            None
        };
        Ok(Control {
            password: spec.password.clone(),
            tls,
        })
    }
}

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

/// Connects, sends one command and reads one reply, all within `timeout`. An error reply
/// comes back as `Err` with the server's message.
pub async fn call(
    control: &Control,
    port: u16,
    args: &[&str],
    timeout: Duration,
) -> Result<Reply, String> {
    match tokio::time::timeout(timeout, connect_and_exchange(control, port, args)).await {
        Ok(Ok(Reply::Error(message))) => Err(message),
        Ok(result) => result,
        Err(_) => Err(format!("no reply within {} ms", timeout.as_millis())),
    }
}

async fn connect_and_exchange(
    control: &Control,
    port: u16,
    args: &[&str],
) -> Result<Reply, String> {
    let stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|error| format!("cannot connect to 127.0.0.1:{port}: {error}"))?;
    let password = control.password.as_deref();
    match &control.tls {
        None => exchange(stream, port, password, args).await,
        Some(connector) => {
            let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
            let stream = connector
                .connect(name, stream)
                .await
                .map_err(|error| format!("TLS handshake with 127.0.0.1:{port}: {error}"))?;
            exchange(stream, port, password, args).await
        }
    }
}

/// Sends AUTH (when there is a password) and the command in one write, and answers the
/// command's reply once AUTH has been accepted.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    port: u16,
    password: Option<&str>,
    args: &[&str],
) -> Result<Reply, String> {
    let mut request = Vec::new();
    if let Some(password) = password {
        request.extend(encode(&["AUTH", password]));
    }
    request.extend(encode(args));
    stream
        .write_all(&request)
        .await
        .map_err(|error| format!("cannot send to 127.0.0.1:{port}: {error}"))?;
    let mut replies_left = if password.is_some() { 2 } else { 1 };
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Some((reply, used)) = parse(&buffer)? {
            replies_left -= 1;
            if replies_left == 0 {
                return Ok(reply);
            }
            if let Reply::Error(message) = reply {
                return Err(format!("AUTH refused by 127.0.0.1:{port}: {message}"));
            }
            buffer.drain(..used);
        }
        let read = stream
            .read(&mut chunk)
            .await
            .map_err(|error| format!("cannot read from 127.0.0.1:{port}: {error}"))?;
        if read == 0 {
            return Err(format!("127.0.0.1:{port} closed the connection mid-reply"));
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

pub(super) fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
    }
    out
}

/// Parses one reply from the start of `buffer`: `Ok(None)` means more bytes are needed,
/// `Ok(Some((reply, used)))` how many bytes it took.
pub(super) fn parse(buffer: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    let Some(line_end) = buffer.windows(2).position(|pair| pair == b"\r\n") else {
        return Ok(None);
    };
    let Some((&kind, rest)) = buffer[..line_end].split_first() else {
        return Err("empty reply line".into());
    };
    let line = String::from_utf8_lossy(rest).into_owned();
    let after = line_end + 2;
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

#[cfg(test)]
mod tests {
    use super::{Reply, encode, parse};
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
}
