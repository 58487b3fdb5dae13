//! Topology configuration: which master groups vote, how to reach them, and the timing knobs
//! of the protocol (per-call timeout, clock-drift allowance, retry delay, key prefix).
//!
//! The file is TOML. Reading it never reads the process environment: [`Topology::with_env`]
//! does, on request, applying `QUORUMLOCK_*` overrides and reading passwords kept in files or
//! environment variables ([`secrets`]); command-line flags override both. [`discovery`] finds
//! the file; [`tls`] builds the TLS client of a `[tls]` table. Every error names the key that
//! is wrong and what was expected, because the person reading it is usually editing that file
//! right now.

mod discovery;
mod secrets;
mod tls;

pub use discovery::{ConfigLocation, ConfigSource};

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Default number of milliseconds one call to one group may take before its vote counts as
/// "timeout" (outcome unknown). Loopback round trips are ~0.03 ms; a WAN hop is ~1-50 ms.
pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 100;
/// Default share of the TTL set aside for clock drift between the client and the masters.
pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
/// Default base delay between two acquire attempts (jittered by ±50%).
pub const DEFAULT_RETRY_DELAY_MS: u64 = 50;
/// Default prefix of every key quorumlock writes.
pub const DEFAULT_KEY_PREFIX: &str = "ql";
/// Default longest TTL a lease may have; also how long a fresh master sits out of the vote.
pub const DEFAULT_MAX_TTL_MS: u64 = 60_000;
/// Default bound on waiting for replicas to acknowledge a grant.
pub const DEFAULT_REPLICA_ACK_TIMEOUT_MS: u64 = 50;
/// Default cap on how long a keepalive may keep renewing one lease.
pub const DEFAULT_MAX_HOLD_MS: u64 = 3_600_000;

/// The whole topology: N independent master groups plus the protocol's timing knobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Prefix of every key (`<prefix>:{<resource>}:lock`).
    #[serde(default = "default_key_prefix")]
    pub key_prefix: String,
    /// Bound on one call to one group, in milliseconds.
    #[serde(default = "default_call_timeout_ms")]
    pub call_timeout_ms: u64,
    /// Share of the TTL reserved for clock drift (validity = ttl − elapsed − ttl·drift − 2 ms).
    #[serde(default = "default_drift_factor")]
    pub drift_factor: f64,
    /// Base delay between acquire attempts, in milliseconds (jittered ±50%).
    #[serde(default = "default_retry_delay_ms")]
    pub retry_delay_ms: u64,
    /// Longest TTL of any lease, in milliseconds. A promoted replica or a master restarted
    /// empty stays out of the vote this long, so every grant it may have missed has expired.
    #[serde(default = "default_max_ttl_ms")]
    pub max_ttl_ms: u64,
    /// Cap on how long a keepalive renews one lease, in milliseconds.
    #[serde(default = "default_max_hold_ms")]
    pub max_hold_ms: u64,
    /// How long a vote waits for a master's replicas to acknowledge it in acknowledged mode,
    /// in milliseconds; at most half of `call_timeout_ms` is used.
    #[serde(default = "default_replica_ack_timeout_ms")]
    pub replica_ack_timeout_ms: u64,
    /// TLS for every connection (masters, replicas' masters after a failover, Sentinels);
    /// absent means plain TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSettings>,
    /// The master groups that vote. Use an odd number (3, 5, 7).
    pub groups: Vec<GroupConfig>,
}

/// The `[tls]` table: which CA to trust, and the client certificate for mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    /// PEM file of the CA (or CAs) that signed the servers' certificates; absent trusts the
    /// system's root certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// PEM certificate chain presented to servers that require client certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// Name every server certificate is checked against, instead of the host connected to.
    /// Sentinel reports masters by IP address, so a certificate issued for a DNS name needs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

/// One master group: watched by Sentinel (`sentinels` + `service`), a plain address, or a
/// Redis Cluster (`cluster`, its seed nodes).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    /// Name shown in votes, errors and status tables.
    pub name: String,
    /// `host:port` of a single master, for groups without Sentinel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// `host:port` of each Sentinel that watches this group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sentinels: Vec<String>,
    /// The Sentinel service (master) name of this group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// `host:port` of some nodes of a Redis Cluster that is this group: the engine learns the
    /// rest of the cluster, and its slot map, from them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster: Vec<String>,
    /// Redis ACL username for the master.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Redis password for the master, inline. Prefer `password_file` or `password_env`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// File whose contents (without a trailing newline) are the master's password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    /// Environment variable that holds the master's password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_env: Option<String>,
    /// ACL username for the Sentinels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinel_username: Option<String>,
    /// Password for the Sentinels, inline. Prefer `sentinel_password_file` or
    /// `sentinel_password_env`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinel_password: Option<String>,
    /// File whose contents (without a trailing newline) are the Sentinels' password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinel_password_file: Option<PathBuf>,
    /// Environment variable that holds the Sentinels' password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinel_password_env: Option<String>,
}

/// How to reach one group, once validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A single master at this host and port.
    Direct { host: String, port: u16 },
    /// Ask these Sentinels for the master of `service`.
    Sentinel {
        sentinels: Vec<(String, u16)>,
        service: String,
    },
    /// A Redis Cluster, learnt from these seed nodes.
    Cluster { seeds: Vec<(String, u16)> },
}

/// A configuration problem, with the key it concerns.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "cannot read config file {path}: {source}. Pass --config FILE, set QUORUMLOCK_CONFIG, or run `quorumlock lab up` to write one"
    )]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config key `{key}`: {message}")]
    Invalid { key: String, message: String },
}

pub(crate) fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}

fn default_key_prefix() -> String {
    DEFAULT_KEY_PREFIX.to_string()
}
fn default_call_timeout_ms() -> u64 {
    DEFAULT_CALL_TIMEOUT_MS
}
fn default_drift_factor() -> f64 {
    DEFAULT_DRIFT_FACTOR
}
fn default_retry_delay_ms() -> u64 {
    DEFAULT_RETRY_DELAY_MS
}
/// Why `replica_acks` is refused.
const REPLICA_ACKS_MOVED: &str = "is no longer a client setting: the masters' policy holds the acknowledged mode, so that no client can weaken it; remove it and run `quorumlock admit --acknowledged` (docs/safety.md, \"Acknowledged mode\")";

fn default_replica_ack_timeout_ms() -> u64 {
    DEFAULT_REPLICA_ACK_TIMEOUT_MS
}
fn default_max_ttl_ms() -> u64 {
    DEFAULT_MAX_TTL_MS
}
fn default_max_hold_ms() -> u64 {
    DEFAULT_MAX_HOLD_MS
}

impl Topology {
    /// A topology with default knobs over the given groups.
    pub fn new(groups: Vec<GroupConfig>) -> Self {
        Topology {
            key_prefix: default_key_prefix(),
            call_timeout_ms: DEFAULT_CALL_TIMEOUT_MS,
            drift_factor: DEFAULT_DRIFT_FACTOR,
            retry_delay_ms: DEFAULT_RETRY_DELAY_MS,
            max_ttl_ms: DEFAULT_MAX_TTL_MS,
            replica_ack_timeout_ms: DEFAULT_REPLICA_ACK_TIMEOUT_MS,
            max_hold_ms: DEFAULT_MAX_HOLD_MS,
            tls: None,
            groups,
        }
    }

    /// Reads and checks a TOML file. It does not read the environment: passwords named by
    /// `password_file`/`password_env` stay unread until [`Topology::resolve_secrets`] or
    /// [`Topology::with_env`], and `QUORUMLOCK_*` overrides apply only through those.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let topology = Self::from_toml(&text).map_err(|error| match error {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.to_path_buf(),
                message,
            },
            other => other,
        })?;
        Ok(topology)
    }

    /// Parses and checks TOML text (no environment overrides, no secrets read).
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let topology: Topology = toml::from_str(text).map_err(|error| ConfigError::Parse {
            path: PathBuf::from("<text>"),
            message: error.to_string(),
        })?;
        topology.check()?;
        Ok(topology)
    }

    /// What a command-line tool wants: reads every secret from its file or the process
    /// environment ([`Topology::resolve_secrets`]), then applies the `QUORUMLOCK_*`
    /// environment overrides ([`Topology::apply_overrides`]). The one call that reads the
    /// process environment.
    pub fn with_env(mut self) -> Result<Self, ConfigError> {
        let env = |name: &str| std::env::var(name).ok();
        self.resolve_secrets(env)?;
        self.apply_overrides(env)?;
        Ok(self)
    }

    /// Renders the topology as TOML (used by the lab to write its config file).
    pub fn to_toml(&self) -> String {
        // Serialising plain structs of strings and numbers cannot fail.
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// Applies overrides read through `lookup` (the environment, in production), then checks.
    pub fn apply_overrides(
        &mut self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        if let Some(prefix) = lookup("QUORUMLOCK_KEY_PREFIX") {
            self.key_prefix = prefix;
        }
        if let Some(raw) = lookup("QUORUMLOCK_CALL_TIMEOUT_MS") {
            self.call_timeout_ms = parse_override("QUORUMLOCK_CALL_TIMEOUT_MS", &raw)?;
        }
        if let Some(raw) = lookup("QUORUMLOCK_DRIFT_FACTOR") {
            self.drift_factor = parse_override("QUORUMLOCK_DRIFT_FACTOR", &raw)?;
        }
        if let Some(raw) = lookup("QUORUMLOCK_RETRY_DELAY_MS") {
            self.retry_delay_ms = parse_override("QUORUMLOCK_RETRY_DELAY_MS", &raw)?;
        }
        if let Some(raw) = lookup("QUORUMLOCK_MAX_TTL_MS") {
            self.max_ttl_ms = parse_override("QUORUMLOCK_MAX_TTL_MS", &raw)?;
        }
        if lookup("QUORUMLOCK_REPLICA_ACKS").is_some() {
            return Err(invalid("QUORUMLOCK_REPLICA_ACKS", REPLICA_ACKS_MOVED));
        }
        if let Some(raw) = lookup("QUORUMLOCK_MAX_HOLD_MS") {
            self.max_hold_ms = parse_override("QUORUMLOCK_MAX_HOLD_MS", &raw)?;
        }
        self.check()
    }

    /// Checks every key, and that every secret named by a `*_file` or `*_env` key has been
    /// read ([`Topology::resolve_secrets`]): a topology must pass this to connect. The first
    /// problem found is returned with its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check()?;
        self.check_secrets_resolved()
    }

    /// Checks every key; secrets may still be unread.
    fn check(&self) -> Result<(), ConfigError> {
        self.check_limits()?;
        if self.groups.is_empty() {
            return Err(invalid(
                "groups",
                "at least one [[groups]] entry is needed (five is the usual quorum setup)",
            ));
        }
        if let Some(tls) = &self.tls {
            // Reading the files now reports a wrong path when the file is loaded, not at the
            // first connection.
            tls.client_config()?;
        }
        self.check_groups()
    }

    /// The scalar keys: prefix, timeouts, drift, TTL and hold limits.
    fn check_limits(&self) -> Result<(), ConfigError> {
        if self.key_prefix.is_empty() || self.key_prefix.chars().any(char::is_control) {
            return Err(invalid(
                "key_prefix",
                "must be non-empty, without control characters",
            ));
        }
        if !(1..=60_000).contains(&self.call_timeout_ms) {
            return Err(invalid(
                "call_timeout_ms",
                format!(
                    "must be between 1 and 60000 milliseconds, got {}",
                    self.call_timeout_ms
                ),
            ));
        }
        if !(0.0..0.5).contains(&self.drift_factor) {
            return Err(invalid(
                "drift_factor",
                format!(
                    "must be at least 0 and below 0.5 (a share of the TTL), got {}",
                    self.drift_factor
                ),
            ));
        }
        // Zero would make every waiter's fallback timer fire at once: a busy loop.
        if !(1..=60_000).contains(&self.retry_delay_ms) {
            return Err(invalid(
                "retry_delay_ms",
                format!(
                    "must be between 1 and 60000 milliseconds, got {}",
                    self.retry_delay_ms
                ),
            ));
        }
        if !(100..=86_400_000).contains(&self.max_ttl_ms) {
            return Err(invalid(
                "max_ttl_ms",
                format!(
                    "must be between 100 ms and 24 h (86400000), got {}",
                    self.max_ttl_ms
                ),
            ));
        }
        // WAIT with a timeout of 0 blocks until the replicas answer, however long that takes.
        if self.replica_ack_timeout_ms == 0 {
            return Err(invalid(
                "replica_ack_timeout_ms",
                "must be at least 1 (0 would make WAIT block forever)",
            ));
        }
        if self.max_hold_ms == 0 {
            return Err(invalid("max_hold_ms", "must be above 0"));
        }
        Ok(())
    }

    /// Every group: its endpoint and secrets, a unique name, and a master no other group
    /// names.
    fn check_groups(&self) -> Result<(), ConfigError> {
        let mut names = std::collections::HashSet::new();
        // Two groups behind one master would give it two votes: the groups must be
        // independent. Sentinel services are told apart by (Sentinel, service name), since
        // a failover announced for a name moves every group watched under it.
        let mut masters = std::collections::HashMap::new();
        for (index, group) in self.groups.iter().enumerate() {
            let endpoint = group.endpoint_at(index)?;
            group.check_secret_sources(index)?;
            if !names.insert(group.name.as_str()) {
                return Err(invalid(
                    format!("groups[{index}].name"),
                    format!(
                        "`{}` is used by two groups; names must be unique",
                        group.name
                    ),
                ));
            }
            let (key, seen) = master_keys(&endpoint);
            for master in seen {
                if let Some(other) = masters.insert(master, group.name.as_str()) {
                    return Err(invalid(
                        format!("groups[{index}].{key}"),
                        format!(
                            "group `{}` names the same master as group `{other}`: each group must be an independent master (with Sentinel: its own service name)",
                            group.name
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Votes needed for a majority: N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.groups.len() / 2 + 1
    }

    /// Per-call timeout as a duration.
    pub fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.call_timeout_ms)
    }

    /// Base retry delay as a duration.
    pub fn retry_delay(&self) -> Duration {
        Duration::from_millis(self.retry_delay_ms)
    }

    /// Longest TTL as a duration (also the quarantine of a fresh master).
    pub fn max_ttl(&self) -> Duration {
        Duration::from_millis(self.max_ttl_ms)
    }

    /// Keepalive cap as a duration.
    pub fn max_hold(&self) -> Duration {
        Duration::from_millis(self.max_hold_ms)
    }
}

fn parse_override<T: std::str::FromStr>(name: &str, raw: &str) -> Result<T, ConfigError> {
    raw.trim()
        .parse()
        .map_err(|_| invalid(name, format!("`{raw}` is not a valid number")))
}

impl GroupConfig {
    /// A group reached through Sentinel.
    pub fn sentinel(name: &str, sentinels: Vec<String>, service: &str) -> Self {
        GroupConfig {
            name: name.to_string(),
            sentinels,
            service: Some(service.to_string()),
            ..Default::default()
        }
    }

    /// A group that is a Redis Cluster, learnt from `seeds`.
    pub fn cluster(name: &str, seeds: Vec<String>) -> Self {
        GroupConfig {
            name: name.to_string(),
            cluster: seeds,
            ..Default::default()
        }
    }

    /// A group that is one plain master.
    pub fn direct(name: &str, address: &str) -> Self {
        GroupConfig {
            name: name.to_string(),
            address: Some(address.to_string()),
            ..Default::default()
        }
    }

    /// The validated endpoint; `index` is this group's position, used to name keys in errors.
    pub fn endpoint_at(&self, index: usize) -> Result<Endpoint, ConfigError> {
        let key = |field: &str| format!("groups[{index}].{field}");
        if self.name.is_empty() || self.name.chars().any(char::is_control) {
            return Err(invalid(
                key("name"),
                "must be non-empty, without control characters",
            ));
        }
        if !self.cluster.is_empty() {
            if self.address.is_some() || !self.sentinels.is_empty() || self.service.is_some() {
                return Err(invalid(
                    key("cluster"),
                    "a Cluster group is given by its seed nodes alone: drop `address`, `sentinels` and `service`",
                ));
            }
            if self.sentinel_username.is_some()
                || self.sentinel_password.is_some()
                || self.sentinel_password_file.is_some()
                || self.sentinel_password_env.is_some()
            {
                return Err(invalid(
                    key("sentinel_password"),
                    "a Cluster group has no Sentinels: drop the Sentinel credentials",
                ));
            }
            let seeds = self
                .cluster
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    parse_address(s).map_err(|m| invalid(key(&format!("cluster[{i}]")), m))
                })
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Endpoint::Cluster { seeds });
        }
        match (&self.address, self.sentinels.is_empty(), &self.service) {
            (Some(address), true, None) => {
                let (host, port) =
                    parse_address(address).map_err(|m| invalid(key("address"), m))?;
                Ok(Endpoint::Direct { host, port })
            }
            (None, false, Some(service)) if !service.is_empty() => {
                let sentinels = self
                    .sentinels
                    .iter()
                    .enumerate()
                    .map(|(i, s)| {
                        parse_address(s).map_err(|m| invalid(key(&format!("sentinels[{i}]")), m))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Endpoint::Sentinel {
                    sentinels,
                    service: service.clone(),
                })
            }
            (Some(_), _, _) => Err(invalid(
                key("address"),
                "give either `address` (a plain master) or `sentinels` + `service`, not both",
            )),
            (None, true, _) => Err(invalid(
                key("sentinels"),
                "each group needs `address = \"host:port\"` or `sentinels = [\"host:port\", ...]` with `service`",
            )),
            (None, false, _) => Err(invalid(
                key("service"),
                "a Sentinel-watched group needs the `service` (master) name its Sentinels monitor",
            )),
        }
    }
}

/// Parses `host:port` (IPv6 as `[::1]:6379`).
fn parse_address(address: &str) -> Result<(String, u16), String> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| format!("`{address}` must be host:port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("`{address}` has no host; expected host:port"));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| format!("`{address}` has no valid port (1-65535); expected host:port"))?;
    if port == 0 {
        return Err(format!("`{address}` has port 0; expected 1-65535"));
    }
    Ok((host.to_string(), port))
}

/// How a group names its master for the independence check, and the key that names it: one
/// `host:port` (lower-cased) per address it may reach the master by.
fn master_keys(endpoint: &Endpoint) -> (&'static str, Vec<String>) {
    match endpoint {
        Endpoint::Direct { host, port } => (
            "address",
            vec![format!("{}:{port}", host.to_ascii_lowercase())],
        ),
        Endpoint::Sentinel { sentinels, service } => (
            "service",
            sentinels
                .iter()
                .map(|(host, port)| format!("{service}@{}:{port}", host.to_ascii_lowercase()))
                .collect(),
        ),
        Endpoint::Cluster { seeds } => (
            "cluster",
            seeds
                .iter()
                .map(|(host, port)| format!("{}:{port}", host.to_ascii_lowercase()))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIVE: &str = r#"
        call_timeout_ms = 50
        [[groups]]
        name = "g1"
        sentinels = ["127.0.0.1:26379", "127.0.0.1:26380"]
        service = "g1"
        [[groups]]
        name = "g2"
        address = "127.0.0.1:6380"
    "#;

    #[test]
    fn parses_both_kinds_of_group() {
        let topology = Topology::from_toml(FIVE).expect("valid");
        assert_eq!(topology.call_timeout_ms, 50);
        assert_eq!(topology.key_prefix, DEFAULT_KEY_PREFIX);
        assert_eq!(
            topology.groups[1].endpoint_at(1).expect("endpoint"),
            Endpoint::Direct {
                host: "127.0.0.1".into(),
                port: 6380
            }
        );
        assert!(matches!(
            topology.groups[0].endpoint_at(0),
            Ok(Endpoint::Sentinel { ref sentinels, .. }) if sentinels.len() == 2
        ));
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            ("call_timeout_ms = \"fast\"\ngroups = []", "call_timeout_ms"),
            ("typo_key = 1\ngroups = []", "typo_key"),
            ("groups = []", "groups"),
            (
                "[[groups]]\nname = \"a\"\naddress = \"nohost\"",
                "groups[0].address",
            ),
            (
                "[[groups]]\nname = \"a\"\nsentinels = [\"127.0.0.1:1\"]",
                "groups[0].service",
            ),
            (
                "[[groups]]\nname = \"a\"\naddress = \"h:1\"\n[[groups]]\nname = \"a\"\naddress = \"h:2\"",
                "groups[1].name",
            ),
            (
                "drift_factor = 0.9\n[[groups]]\nname = \"a\"\naddress = \"h:1\"",
                "drift_factor",
            ),
            (
                "retry_delay_ms = 0\n[[groups]]\nname = \"a\"\naddress = \"h:1\"",
                "retry_delay_ms",
            ),
            (
                "replica_ack_timeout_ms = 0\n[[groups]]\nname = \"a\"\naddress = \"h:1\"",
                "replica_ack_timeout_ms",
            ),
            (
                "[[groups]]\nname = \"a\"\naddress = \"h:1\"\n[[groups]]\nname = \"b\"\naddress = \"H:1\"",
                "groups[1].address",
            ),
            (
                "[[groups]]\nname = \"a\"\nsentinels = [\"s:1\", \"s:2\"]\nservice = \"m\"\n[[groups]]\nname = \"b\"\nsentinels = [\"s:2\"]\nservice = \"m\"",
                "groups[1].service",
            ),
        ];
        for (text, key) in cases {
            let message = Topology::from_toml(text).expect_err(text).to_string();
            assert!(message.contains(key), "{message:?} should name {key}");
        }
    }

    #[test]
    fn environment_overrides_the_file() {
        let mut topology = Topology::from_toml(FIVE).expect("valid");
        topology
            .apply_overrides(|name| (name == "QUORUMLOCK_CALL_TIMEOUT_MS").then(|| "75".into()))
            .expect("override");
        assert_eq!(topology.call_timeout_ms, 75);
        let error = topology
            .apply_overrides(|name| (name == "QUORUMLOCK_DRIFT_FACTOR").then(|| "x".into()))
            .expect_err("not a number");
        assert!(error.to_string().contains("QUORUMLOCK_DRIFT_FACTOR"));
    }

    #[test]
    fn toml_round_trip() {
        let topology = Topology::from_toml(FIVE).expect("valid");
        assert_eq!(
            Topology::from_toml(&topology.to_toml()).expect("again"),
            topology
        );
    }
}
