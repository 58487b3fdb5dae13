//! What a relay's links are and what they share: the [`LinkClass`] a link is judged to be,
//! the switches (cut per class, latency), the per-class link counts, and the [`RelayStatus`]
//! that reports them.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rand::Rng;
use tokio::sync::watch;

use super::{MAX_LATENCY, RelayError};

/// What a link carries, judged from what its peer sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinkClass {
    Client,
    Replica,
    Sentinel,
}

impl LinkClass {
    pub const ALL: [LinkClass; 3] = [LinkClass::Client, LinkClass::Replica, LinkClass::Sentinel];

    /// The name the CLI and the control protocol use.
    pub fn name(self) -> &'static str {
        match self {
            LinkClass::Client => "clients",
            LinkClass::Replica => "replica",
            LinkClass::Sentinel => "sentinels",
        }
    }

    pub(super) fn index(self) -> usize {
        match self {
            LinkClass::Client => 0,
            LinkClass::Replica => 1,
            LinkClass::Sentinel => 2,
        }
    }
}

impl fmt::Display for LinkClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LinkClass {
    type Err = RelayError;

    /// Singular and plural both work, so `cut replicas` does not fail on a letter.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "clients" | "client" => Ok(LinkClass::Client),
            "replica" | "replicas" => Ok(LinkClass::Replica),
            "sentinels" | "sentinel" => Ok(LinkClass::Sentinel),
            _ => Err(RelayError::UnknownClass(text.to_string())),
        }
    }
}

/// A relay's switches and link counts at one moment, as `status` reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayStatus {
    pub port: u16,
    pub target: u16,
    pub cut: Vec<LinkClass>,
    pub latency: Duration,
    pub jitter: Duration,
    /// Open links per class; unclassified links count as clients.
    pub clients: usize,
    pub replicas: usize,
    pub sentinels: usize,
}

impl fmt::Display for RelayStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cut = if self.cut.is_empty() {
            "none".to_string()
        } else {
            let names: Vec<&str> = self.cut.iter().map(|class| class.name()).collect();
            names.join(",")
        };
        write!(
            f,
            "port={} target={} cut={} latency_ms={} jitter_ms={} clients={} replica={} sentinels={}",
            self.port,
            self.target,
            cut,
            self.latency.as_millis(),
            self.jitter.as_millis(),
            self.clients,
            self.replicas,
            self.sentinels
        )
    }
}

impl FromStr for RelayStatus {
    type Err = String;

    /// Reads back what [`fmt::Display`] writes (the answer to the `status` control command).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fields: std::collections::HashMap<&str, &str> = text
            .split_whitespace()
            .filter_map(|word| word.split_once('='))
            .collect();
        let field = |key: &str| {
            fields
                .get(key)
                .copied()
                .ok_or_else(|| format!("relay status `{text}` has no {key}"))
        };
        let number = |key: &str| {
            field(key)?
                .parse::<u64>()
                .map_err(|_| format!("relay status `{text}`: {key} is not a number"))
        };
        let count = |key: &str| number(key).map(|value| value as usize);
        let port = |key: &str| {
            u16::try_from(number(key)?)
                .map_err(|_| format!("relay status `{text}`: {key} is not a port"))
        };
        let cut = match field("cut")? {
            "none" => Vec::new(),
            names => names
                .split(',')
                .map(|name| name.parse::<LinkClass>().map_err(|error| error.to_string()))
                .collect::<Result<_, _>>()?,
        };
        Ok(RelayStatus {
            port: port("port")?,
            target: port("target")?,
            cut,
            latency: Duration::from_millis(number("latency_ms")?),
            jitter: Duration::from_millis(number("jitter_ms")?),
            clients: count("clients")?,
            replicas: count("replica")?,
            sentinels: count("sentinels")?,
        })
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Latency {
    pub(super) delay: Duration,
    pub(super) jitter: Duration,
}

impl Latency {
    pub(super) fn is_off(self) -> bool {
        self.delay.is_zero() && self.jitter.is_zero()
    }

    /// Uniform in delay ± jitter, never below zero.
    pub(super) fn sample(self) -> Duration {
        if self.jitter.is_zero() {
            return self.delay;
        }
        let jitter = u64::try_from(self.jitter.as_nanos()).unwrap_or(u64::MAX);
        let offset = rand::thread_rng().gen_range(0..=jitter.saturating_mul(2));
        (self.delay + Duration::from_nanos(offset)).saturating_sub(self.jitter)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Settings {
    pub(super) cut: [bool; 3],
    pub(super) latency: Latency,
}

impl Settings {
    pub(super) fn is_cut(&self, class: LinkClass) -> bool {
        self.cut[class.index()]
    }
}

/// What the connections of one relay share with its handle and control port.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) port: u16,
    pub(super) target: u16,
    pub(super) settings: watch::Sender<Settings>,
    pub(super) links: [AtomicUsize; 3],
}

impl Shared {
    pub(super) fn cut(&self, class: LinkClass) {
        self.settings
            .send_modify(|settings| settings.cut[class.index()] = true);
    }

    pub(super) fn heal(&self) {
        self.settings
            .send_modify(|settings| settings.cut = [false; 3]);
    }

    pub(super) fn set_latency(&self, delay: Duration, jitter: Duration) {
        let latency = Latency {
            delay: delay.min(MAX_LATENCY),
            jitter: jitter.min(MAX_LATENCY),
        };
        self.settings
            .send_modify(|settings| settings.latency = latency);
    }

    pub(super) fn status(&self) -> RelayStatus {
        let settings = *self.settings.borrow();
        let count = |class: LinkClass| self.links[class.index()].load(Ordering::Relaxed);
        RelayStatus {
            port: self.port,
            target: self.target,
            cut: LinkClass::ALL
                .into_iter()
                .filter(|class| settings.is_cut(*class))
                .collect(),
            latency: settings.latency.delay,
            jitter: settings.latency.jitter,
            clients: count(LinkClass::Client),
            replicas: count(LinkClass::Replica),
            sentinels: count(LinkClass::Sentinel),
        }
    }
}
