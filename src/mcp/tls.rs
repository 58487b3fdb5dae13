//! TLS on the HTTP listener (`serve --http --tls-cert --tls-key`): the rustls server
//! configuration from PEM files, and a listener that hands axum only connections whose
//! handshake completed. Handshakes run in their own tasks, under a deadline, so a slow or
//! silent client never holds up the others.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

use super::ServeError;

/// How long a client has to complete its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Completed handshakes waiting for axum to take them.
const READY_QUEUE: usize = 128;

/// The certificate chain and private key to serve, both PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn tls_error(path: &Path, message: impl std::fmt::Display) -> ServeError {
    ServeError::Tls(format!("{}: {message}", path.display()))
}

/// The rustls configuration for `files` (ring, TLS 1.2 and 1.3, HTTP/1.1).
pub fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, ServeError> {
    let chain = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|error| tls_error(&files.cert, error))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| tls_error(&files.cert, error))?;
    if chain.is_empty() {
        return Err(tls_error(&files.cert, "holds no PEM certificate"));
    }
    let key =
        PrivateKeyDer::from_pem_file(&files.key).map_err(|error| tls_error(&files.key, error))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| ServeError::Tls(error.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|error| tls_error(&files.key, format!("does not fit the certificate: {error}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A listener of completed TLS connections, for `axum::serve`.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `tcp` and runs each handshake in its own task until `stop`.
    pub fn new(
        tcp: TcpListener,
        config: Arc<ServerConfig>,
        stop: CancellationToken,
    ) -> Result<TlsListener, ServeError> {
        let local = tcp.local_addr().map_err(ServeError::Http)?;
        let (sender, ready) = mpsc::channel(READY_QUEUE);
        let acceptor = TlsAcceptor::from(config);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = stop.cancelled() => return,
                    accepted = tcp.accept() => accepted,
                };
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors, mostly: back off instead of spinning.
                        tracing::warn!(%error, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (acceptor, sender) = (acceptor.clone(), sender.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = sender.send((tls, peer)).await;
                        }
                        Ok(Err(error)) => {
                            tracing::debug!(%peer, %error, "TLS handshake failed");
                        }
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop stopped: the server is shutting down; wait for it to finish.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
