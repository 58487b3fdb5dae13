//! Security of every connection the engine opens: Redis ACL credentials and TLS. One place
//! builds the fred `Config` for masters, Sentinels, subscribers and health probes alike, so no
//! client can be forgotten when a topology turns authentication or TLS on. The rustls
//! configuration itself comes from the topology (`config::tls`).

use fred::prelude::{Config, ServerConfig};
use fred::types::config::{TlsConfig, TlsConnector};

use crate::config::{ConfigError, Topology};

/// A username and password for one kind of node (masters, or Sentinels).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub username: Option<String>,
    pub password: Option<String>,
}

/// The TLS every client of one engine uses, built once from the topology (the files are read
/// once, not at every reconnect or health probe).
#[derive(Clone, Default)]
pub(crate) struct Transport {
    tls: Option<TlsConfig>,
}

impl Transport {
    pub fn from_topology(topology: &Topology) -> Result<Self, ConfigError> {
        let tls = match &topology.tls {
            Some(settings) => Some(TlsConnector::from(settings.client_config()?).into()),
            None => None,
        };
        Ok(Transport { tls })
    }

    /// The fred configuration of a client to `server`, logging in with `credentials`.
    pub fn config(&self, server: ServerConfig, credentials: &Credentials) -> Config {
        Config {
            server,
            username: credentials.username.clone(),
            password: credentials.password.clone(),
            tls: self.tls.clone(),
            ..Default::default()
        }
    }
}
