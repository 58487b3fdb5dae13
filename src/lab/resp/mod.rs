//! The lab's one RESP module. `frame` is the wire format, both ways (commands and replies
//! encoded and parsed; the relay's classifier and the tests read RESP with it too); this file
//! is the lab's control client: just enough to send one command and read one reply. The lab
//! needs a handful of commands with hard per-call deadlines on nodes that may be frozen, dead
//! or half started; a bare socket per call is the most predictable way to get that.

mod frame;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::certificates::tls_settings;
use super::{LabError, LabSpec};

pub use frame::{Reply, encode, parse};
pub(crate) use frame::{Request, parse_request};

/// How to reach the lab's nodes: the password they require and, for a TLS lab, the same
/// TLS client settings the lab writes into its topology.
#[derive(Clone)]
pub(crate) struct Control {
    password: Option<String>,
    tls: Option<TlsConnector>,
}

impl Control {
    pub(crate) fn new(spec: &LabSpec) -> Result<Self, LabError> {
        let tls = if spec.tls {
            let config = tls_settings(&spec.dir).client_config()?;
            Some(TlsConnector::from(std::sync::Arc::new(config)))
        } else {
            None
        };
        Ok(Control {
            password: spec.password.clone(),
            tls,
        })
    }
}

/// Connects, sends one command and reads one reply, all within `timeout`. An error reply
/// comes back as `Err` with the server's message.
pub(crate) async fn call(
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
