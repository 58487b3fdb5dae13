//! The relay's one-line text protocol, both ends: the control port a relay answers on
//! (`cut <class>`, `heal`, `latency <ms> [<jitter_ms>]`, `status`, each answered `ok ...` or
//! `error ...`), and [`control`], the client another process uses to send one command.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::time::timeout;

use super::RelayError;
use super::link::{LinkClass, Shared};

/// How long the control client waits for the whole exchange with a relay's control port.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(2);
/// Control commands are a few words; a longer line is refused rather than buffered.
const MAX_CONTROL_LINE: u64 = 256;

impl Shared {
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

/// Answers commands one line at a time until the peer closes.
pub(super) async fn control_session(stream: TcpStream, shared: Arc<Shared>) {
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
