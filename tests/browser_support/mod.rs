//! Headless Chromium for the dashboard test: Debian's `chromium`, installed with apt-get when
//! missing (as the lab installs redis-server), started with a fresh profile and driven over
//! the DevTools protocol with a small WebSocket client. The browser's whole process group is
//! killed by PID when the [`Browser`] drops, also when a test fails.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Serialises installs: parallel tests must not race for the dpkg lock.
static INSTALL: Mutex<()> = Mutex::new(());

/// The browser binary: `QUORUMLOCK_CHROMIUM`, else `chromium` on PATH, else Debian's
/// `chromium` package installed with apt-get (as root or through passwordless sudo).
pub fn chromium() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("QUORUMLOCK_CHROMIUM") {
        return Ok(PathBuf::from(path));
    }
    let _guard = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(path) = on_path("chromium") {
        return Ok(path);
    }
    let apt = apt_command()?;
    eprintln!("chromium is missing: installing Debian's package with apt-get ...");
    if let Err(first) = apt_get(&apt, &["install", "-y", "-q", "chromium"]) {
        // A fresh machine has no package lists yet.
        apt_get(&apt, &["update", "-q"]).map_err(|output| format!("{first}\n{output}"))?;
        apt_get(&apt, &["install", "-y", "-q", "chromium"])?;
    }
    on_path("chromium").ok_or_else(|| "chromium installed, but it is not on PATH".to_string())
}

fn on_path(binary: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(binary))
        .find(|candidate| {
            candidate
                .metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

fn apt_command() -> Result<Vec<String>, String> {
    if on_path("apt-get").is_none() {
        return Err("chromium is missing and apt-get is not available: install Debian's chromium package, or point QUORUMLOCK_CHROMIUM at a Chromium binary".into());
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return Ok(vec!["apt-get".into()]);
    }
    let sudo = Command::new("sudo")
        .args(["-n", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if sudo {
        return Ok(vec!["sudo".into(), "-n".into(), "apt-get".into()]);
    }
    Err("chromium is missing and installing it needs root or passwordless sudo: `sudo apt-get install chromium`".into())
}

fn apt_get(apt: &[String], args: &[&str]) -> Result<(), String> {
    let output = Command::new(&apt[0])
        .args(&apt[1..])
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .map_err(|error| format!("cannot run {}: {error}", apt.join(" ")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} {} exited with {}: {}",
            apt.join(" "),
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// A running headless Chromium and one page in it, driven over DevTools.
pub struct Browser {
    child: Child,
    socket: WebSocket,
    session: String,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The browser leads its own process group (renderers, zygote): kill all of it by the
        // browser's PID, then reap the browser.
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on the process group our own unreaped child leads.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

impl Browser {
    /// Starts Chromium with a fresh profile, a 1280×1000 window and no network of its own,
    /// and opens one blank page.
    pub async fn start() -> Browser {
        let binary = chromium().unwrap_or_else(|error| panic!("no Chromium: {error}"));
        let profile = tempfile::tempdir().expect("profile dir");
        let mut command = Command::new(&binary);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--window-size=1280,1000",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {}: {error}", binary.display()));
        let mut browser_guard = Some(child);
        let (port, path) = match active_port(profile.path()).await {
            Ok(found) => found,
            Err(error) => {
                if let Some(mut child) = browser_guard.take() {
                    // SAFETY: as in Drop.
                    unsafe {
                        libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
                    }
                    let _ = child.wait();
                }
                panic!("Chromium did not open its DevTools port: {error}");
            }
        };
        let child = browser_guard.take().expect("child");
        let socket = WebSocket::connect(port, &path).await;
        let mut browser = Browser {
            child,
            socket,
            session: String::new(),
            next_id: 0,
            _profile: profile,
        };
        let target = browser
            .send(None, "Target.createTarget", json!({"url": "about:blank"}))
            .await;
        let target_id = target["targetId"].as_str().expect("targetId").to_string();
        let attached = browser
            .send(
                None,
                "Target.attachToTarget",
                json!({"targetId": target_id, "flatten": true}),
            )
            .await;
        browser.session = attached["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_string();
        browser.call("Page.enable", json!({})).await;
        browser.call("Runtime.enable", json!({})).await;
        browser
            .call(
                "Emulation.setDeviceMetricsOverride",
                json!({"width": 1280, "height": 1000, "deviceScaleFactor": 1, "mobile": false}),
            )
            .await;
        browser
    }

    async fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        self.socket.send_text(&message.to_string()).await;
        loop {
            let text = tokio::time::timeout(Duration::from_secs(30), self.socket.receive_text())
                .await
                .unwrap_or_else(|_| panic!("no answer to {method} within 30 s"));
            let reply: Value = serde_json::from_str(&text).expect("DevTools JSON");
            if reply["id"] != json!(id) {
                continue; // an event
            }
            if let Some(error) = reply.get("error") {
                panic!("{method} failed: {error}");
            }
            return reply["result"].clone();
        }
    }

    /// A DevTools command on the page.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.send(Some(&session), method, params).await
    }

    pub async fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url})).await;
    }

    /// Evaluates `expression` in the page and returns its value.
    pub async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true}),
            )
            .await;
        if let Some(exception) = result.get("exceptionDetails") {
            return json!({"exception": exception.clone()});
        }
        result["result"]["value"].clone()
    }

    /// The text an element renders (`innerText`), or "" when it is not there.
    pub async fn text_of(&mut self, selector: &str) -> String {
        let expression = format!(
            "(() => {{ const e = document.querySelector({}); return e ? e.innerText : ''; }})()",
            json!(selector)
        );
        self.eval(&expression)
            .await
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// Polls what `selector` renders until `check` holds; panics with the last text after
    /// `limit`.
    pub async fn wait_for_text(
        &mut self,
        selector: &str,
        limit: Duration,
        what: &str,
        check: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let text = self.text_of(selector).await;
            if check(&text) {
                return text;
            }
            if Instant::now() > deadline {
                panic!("the page never showed {what} within {limit:?}; {selector} shows:\n{text}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Types `text` into the focused element, as a keyboard would.
    pub async fn type_text(&mut self, text: &str) {
        self.call("Input.insertText", json!({"text": text})).await;
    }

    /// A PNG of the whole page, written to `path`.
    pub async fn screenshot(&mut self, path: &Path) {
        let shot = self
            .call(
                "Page.captureScreenshot",
                json!({"format": "png", "captureBeyondViewport": true}),
            )
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("base64 PNG");
        std::fs::write(path, png).expect("write the screenshot");
    }
}

/// The DevTools port and browser path Chromium writes into its profile once it listens.
async fn active_port(profile: &Path) -> Result<(u16, String), String> {
    let file = profile.join("DevToolsActivePort");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(&file) {
            let mut lines = text.lines();
            if let (Some(port), Some(path)) = (lines.next(), lines.next())
                && let Ok(port) = port.trim().parse()
            {
                return Ok((port, path.trim().to_string()));
            }
        }
        if Instant::now() > deadline {
            return Err(format!("{} did not appear within 60 s", file.display()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The least of RFC 6455 a DevTools client needs: one text message at a time, masked frames
/// out, fragmented frames in, pings answered.
struct WebSocket {
    stream: BufReader<TcpStream>,
}

impl WebSocket {
    async fn connect(port: u16, path: &str) -> WebSocket {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect to DevTools");
        let mut stream = BufReader::new(stream);
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        stream
            .get_mut()
            .write_all(request.as_bytes())
            .await
            .expect("send the upgrade");
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let byte = stream.read_u8().await.expect("read the upgrade answer");
            head.push(byte);
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 101"), "DevTools refused: {head}");
        WebSocket { stream }
    }

    async fn send_text(&mut self, text: &str) {
        self.send_frame(0x1, text.as_bytes()).await;
    }

    async fn send_frame(&mut self, opcode: u8, payload: &[u8]) {
        let mut frame = vec![0x80 | opcode];
        match payload.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n if n <= 0xFFFF => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        let mask: [u8; 4] = rand::random();
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.stream
            .get_mut()
            .write_all(&frame)
            .await
            .expect("send a WebSocket frame");
    }

    async fn receive_text(&mut self) -> String {
        let mut message = Vec::new();
        loop {
            let first = self.stream.read_u8().await.expect("read a frame");
            let second = self.stream.read_u8().await.expect("read a frame");
            let (fin, opcode) = (first & 0x80 != 0, first & 0x0F);
            let length = match second & 0x7F {
                126 => u64::from(self.stream.read_u16().await.expect("length")),
                127 => self.stream.read_u64().await.expect("length"),
                n => u64::from(n),
            };
            let mask = if second & 0x80 != 0 {
                let mut mask = [0u8; 4];
                self.stream.read_exact(&mut mask).await.expect("mask");
                Some(mask)
            } else {
                None
            };
            let mut payload = vec![0u8; usize::try_from(length).expect("frame size")];
            self.stream
                .read_exact(&mut payload)
                .await
                .expect("read a payload");
            if let Some(mask) = mask {
                for (i, byte) in payload.iter_mut().enumerate() {
                    *byte ^= mask[i % 4];
                }
            }
            match opcode {
                0x9 => self.send_frame(0xA, &payload).await,
                0xA => {}
                0x8 => panic!("DevTools closed the connection"),
                _ => {
                    message.extend_from_slice(&payload);
                    if fin {
                        return String::from_utf8(message).expect("UTF-8 message");
                    }
                }
            }
        }
    }
}
