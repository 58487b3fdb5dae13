//! The native half of the `quorumlock` Python package: the engine behind a few plain calls.
//!
//! Every call that talks to the groups runs on one tokio runtime owned by the module. A sync
//! call gives up the GIL while it waits (and still answers Ctrl-C); an async call returns an
//! asyncio future that the runtime completes, so the event loop never blocks. The Python half
//! (`quorumlock/__init__.py`) builds the context managers, the dataclasses and the
//! exceptions on top.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use quorumlock::{
    AcquireOptions, ConfigLocation, DEFAULT_TTL, Error, KeptLease, LeaseEnd, Locks, Topology,
};
use serde_json::{Value, json};

/// How often a sync call that waits looks for a signal (Ctrl-C) to deliver.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

fn runtime() -> &'static tokio::runtime::Runtime {
    pyo3_async_runtimes::tokio::get_runtime()
}

/// A failure on its way to Python: the engine's error, or one this module finds itself.
enum Failure {
    Engine(Error),
    Own {
        kind: &'static str,
        message: String,
        facts: Value,
    },
    Python(PyErr),
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure::Engine(error)
    }
}

fn invalid(field: &'static str, reason: impl Into<String>) -> Failure {
    let reason = reason.into();
    Failure::Own {
        kind: "invalid_input",
        message: format!("invalid {field}: {reason}"),
        facts: json!({ "field": field, "reason": reason }),
    }
}

/// The names of the groups whose vote says they failed (timeout, error, sitting out).
fn failed_groups(votes: &[quorumlock::GroupVote]) -> Vec<String> {
    votes
        .iter()
        .filter(|vote| vote.vote.is_failure())
        .map(|vote| vote.group.clone())
        .collect()
}

/// The facts an engine error carries, as the Python exception's attributes.
fn facts(error: &Error) -> (&'static str, Value) {
    match error {
        Error::InvalidInput { field, reason } => {
            ("invalid_input", json!({ "field": field, "reason": reason }))
        }
        Error::Held {
            resource,
            holder,
            votes,
        } => (
            "held",
            json!({ "resource": resource, "holder": holder, "votes": votes }),
        ),
        Error::Unavailable {
            resource,
            needed,
            total,
            votes,
        } => (
            "unavailable",
            json!({
                "resource": resource,
                "needed": needed,
                "total": total,
                "failed_groups": failed_groups(votes),
                "votes": votes,
            }),
        ),
        Error::ListingUnavailable {
            locks,
            needed,
            total,
            votes,
        } => (
            "listing_unavailable",
            json!({
                "resource": locks,
                "needed": needed,
                "total": total,
                "failed_groups": failed_groups(votes),
                "votes": votes,
            }),
        ),
        Error::Expired {
            resource,
            elapsed_ms,
            votes,
        } => (
            "expired",
            json!({ "resource": resource, "elapsed_ms": elapsed_ms, "votes": votes }),
        ),
        Error::NotHeld { resource, votes } => {
            ("not_held", json!({ "resource": resource, "votes": votes }))
        }
        Error::LeaseLost { resource, reason } => (
            "lease_lost",
            json!({ "resource": resource, "reason": reason }),
        ),
        Error::Config(config) => {
            let key = match config {
                quorumlock::ConfigError::Invalid { key, .. } => Some(key.clone()),
                _ => None,
            };
            ("config", json!({ "key": key }))
        }
        // Setup failures, and whatever the engine learns to report later.
        other => ("other", json!({ "votes": other.votes() })),
    }
}

impl Failure {
    /// The Python exception, built by `quorumlock._errors` so that it carries the facts as
    /// attributes of the class Python code catches.
    fn into_py(self) -> PyErr {
        let (kind, message, facts) = match self {
            Failure::Python(error) => return error,
            Failure::Engine(error) => {
                let (kind, facts) = facts(&error);
                (kind, error.to_string(), facts)
            }
            Failure::Own {
                kind,
                message,
                facts,
            } => (kind, message, facts),
        };
        Python::attach(|py| {
            let built = py
                .import("quorumlock._errors")
                .and_then(|module| module.getattr("_from_native"))
                .and_then(|make| make.call1((kind, message.as_str(), facts.to_string())));
            match built {
                Ok(exception) => PyErr::from_value(exception),
                Err(error) => error,
            }
        })
    }
}

/// Runs `work` on the module's runtime while this thread gives up the GIL; a signal that
/// arrives meanwhile (Ctrl-C) drops the work and raises.
fn block<T: Send>(
    py: Python<'_>,
    work: impl Future<Output = Result<T, Failure>> + Send,
) -> PyResult<T> {
    let outcome = py.detach(|| {
        runtime().block_on(async {
            let mut work = std::pin::pin!(work);
            loop {
                tokio::select! {
                    outcome = &mut work => return outcome,
                    _ = tokio::time::sleep(SIGNAL_CHECK) => {
                        Python::attach(|py| py.check_signals()).map_err(Failure::Python)?;
                    }
                }
            }
        })
    });
    outcome.map_err(Failure::into_py)
}

/// Runs `work` and returns its value (`asynchronous` false, blocking without the GIL), or an
/// asyncio future of it (`asynchronous` true).
fn run<T>(
    py: Python<'_>,
    asynchronous: bool,
    work: impl Future<Output = Result<T, Failure>> + Send + 'static,
) -> PyResult<Py<PyAny>>
where
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    if asynchronous {
        let future = pyo3_async_runtimes::tokio::future_into_py(py, async move {
            work.await.map_err(Failure::into_py)
        })?;
        Ok(future.unbind())
    } else {
        block(py, work)?.into_py_any(py)
    }
}

/// A number of seconds from Python, as a duration; negative, infinite and NaN are refused
/// naming the field.
fn seconds(field: &'static str, value: f64) -> Result<Duration, Failure> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        invalid(
            field,
            format!("{value} is not a number of seconds from 0 up"),
        )
    })
}

/// Where the topology comes from: `config_path`, else the CLI's search (QUORUMLOCK_CONFIG,
/// ./quorumlock.toml, the user's file, the system's file). Secrets and `QUORUMLOCK_*`
/// overrides are read from the environment, as the CLI does.
fn topology(config_path: Option<PathBuf>) -> Result<(Topology, PathBuf), Failure> {
    let env = |name: &str| std::env::var(name).ok();
    let path = match config_path {
        Some(path) => path,
        None => match ConfigLocation::discover(env).map_err(Error::from)? {
            Some(location) => location.path,
            None => {
                let searched: Vec<String> = ConfigLocation::search_paths(&env)
                    .iter()
                    .map(|location| location.path.display().to_string())
                    .collect();
                return Err(Failure::Own {
                    kind: "config",
                    message: format!(
                        "no topology file found (searched QUORUMLOCK_CONFIG, then {}): pass config_path, set QUORUMLOCK_CONFIG, or run `quorumlock lab up` and pass the config it writes",
                        searched.join(", ")
                    ),
                    facts: json!({ "key": null }),
                });
            }
        },
    };
    let topology = Topology::from_file(&path)
        .and_then(Topology::with_env)
        .map_err(Error::from)?;
    topology.validate().map_err(Error::from)?;
    Ok((topology, path))
}

async fn connect_to(config_path: Option<PathBuf>) -> Result<NativeLocks, Failure> {
    let (topology, path) = topology(config_path)?;
    let locks = Locks::connect(topology).await?;
    Ok(NativeLocks {
        locks,
        config_path: path.display().to_string(),
    })
}

/// Connects to every group of the topology (see [`topology`] for where it is found).
#[pyfunction]
#[pyo3(signature = (config_path, asynchronous))]
fn connect(
    py: Python<'_>,
    config_path: Option<PathBuf>,
    asynchronous: bool,
) -> PyResult<Py<PyAny>> {
    run(py, asynchronous, connect_to(config_path))
}

/// A connection to every group; shared by all the leases it hands out.
#[pyclass(frozen, module = "quorumlock._native")]
struct NativeLocks {
    locks: Locks,
    config_path: String,
}

/// What an acquire asks for.
enum Target {
    One(String),
    All(Vec<String>),
    Permit { name: String, permits: u32 },
}

#[pymethods]
impl NativeLocks {
    #[getter]
    fn config_path(&self) -> &str {
        &self.config_path
    }

    #[getter]
    fn quorum(&self) -> usize {
        self.locks.quorum()
    }

    #[getter]
    fn groups(&self) -> Vec<String> {
        self.locks
            .topology()
            .groups
            .iter()
            .map(|group| group.name.clone())
            .collect()
    }

    /// Acquires and starts the keepalive. `kind` is "one" (names[0]), "all" (every name,
    /// all or nothing) or "permit" (one of `permits` permits of names[0]).
    #[pyo3(signature = (kind, names, permits, ttl, wait, owner, purpose, asynchronous))]
    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &self,
        py: Python<'_>,
        kind: &str,
        names: Vec<String>,
        permits: i64,
        ttl: Option<f64>,
        wait: f64,
        owner: Option<String>,
        purpose: Option<String>,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let locks = self.locks.clone();
        let kind = kind.to_string();
        let work = async move {
            let options = AcquireOptions {
                ttl: match ttl {
                    Some(ttl) => seconds("ttl", ttl)?,
                    None => DEFAULT_TTL.min(locks.topology().max_ttl()),
                },
                wait: seconds("wait", wait)?,
                owner,
                purpose,
            };
            let first = || names.first().cloned().unwrap_or_default();
            let target = match kind.as_str() {
                "one" => Target::One(first()),
                "all" => Target::All(names.clone()),
                _ => Target::Permit {
                    name: first(),
                    permits: u32::try_from(permits).map_err(|_| {
                        invalid("permits", format!("{permits} is not a count of permits"))
                    })?,
                },
            };
            let lease = match &target {
                Target::One(name) => locks.acquire_with(name, &options).await?,
                Target::All(names) => locks.acquire_all_with(names, &options).await?,
                Target::Permit { name, permits } => {
                    locks.acquire_permit_with(name, *permits, &options).await?
                }
            };
            let kept = lease.keepalive();
            Ok(NativeLease {
                resources: kept.resources().to_vec(),
                token: kept.token().to_string(),
                fencing_token: kept.fencing_token(),
                ttl: kept.ttl(),
                kept: Mutex::new(Some(kept)),
            })
        };
        run(py, asynchronous, work)
    }

    /// The lock as every group sees it, as JSON.
    fn status(&self, py: Python<'_>, resource: String, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let locks = self.locks.clone();
        run(py, asynchronous, async move {
            let status = locks.status(&resource).await?;
            Ok(to_json(&status))
        })
    }

    /// One page of the current locks and semaphores, as JSON.
    #[pyo3(signature = (prefix, limit, cursor, asynchronous))]
    fn list(
        &self,
        py: Python<'_>,
        prefix: String,
        limit: i64,
        cursor: Option<String>,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let locks = self.locks.clone();
        run(py, asynchronous, async move {
            let limit = usize::try_from(limit)
                .map_err(|_| invalid("limit", format!("{limit} is not a count")))?;
            let list = locks.list_page(&prefix, limit, cursor.as_deref()).await?;
            Ok(to_json(&list))
        })
    }

    /// A semaphore's permit count and holders, as JSON.
    fn semaphore_status(
        &self,
        py: Python<'_>,
        name: String,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let locks = self.locks.clone();
        run(py, asynchronous, async move {
            let status = locks.semaphore_status(&name).await?;
            Ok(to_json(&status))
        })
    }

    /// Every group's health, as JSON.
    fn health(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let locks = self.locks.clone();
        run(py, asynchronous, async move {
            let health = locks.health().await;
            Ok(to_json(&health))
        })
    }

    /// Deletes the lock whoever holds it; returns whether this call deleted it.
    fn force_release(
        &self,
        py: Python<'_>,
        resource: String,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let locks = self.locks.clone();
        run(py, asynchronous, async move {
            Ok(locks.force_release(&resource).await?.released)
        })
    }

    /// Lets the calls in flight land, then closes every connection.
    fn close(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let locks = self.locks.clone();
        run(py, asynchronous, async move {
            locks.close().await;
            Ok(())
        })
    }
}

fn to_json(value: &impl serde::Serialize) -> String {
    // The views are plain structs of strings and numbers: serialising them cannot fail.
    serde_json::to_string(value).unwrap_or_default()
}

/// A held lease that the engine's keepalive renews until it is released (or this object is
/// dropped, which releases it in the background).
#[pyclass(frozen, module = "quorumlock._native")]
struct NativeLease {
    resources: Vec<String>,
    token: String,
    fencing_token: u64,
    ttl: Duration,
    kept: Mutex<Option<KeptLease>>,
}

/// How a lease ended, as Python reads it: ("lost" | "max_hold" | "released", why).
fn end_tuple(end: &LeaseEnd) -> (&'static str, String) {
    match end {
        LeaseEnd::Lost(reason) => ("lost", reason.clone()),
        LeaseEnd::MaxHold => (
            "max_hold",
            "held for max_hold_ms: the keepalive stopped renewing".to_string(),
        ),
        LeaseEnd::Released => ("released", "released".to_string()),
    }
}

impl NativeLease {
    fn with_kept<T>(&self, read: impl FnOnce(Option<&KeptLease>) -> T) -> T {
        let kept = self
            .kept
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        read(kept.as_ref())
    }

    fn take(&self) -> Option<KeptLease> {
        self.kept
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }
}

#[pymethods]
impl NativeLease {
    #[getter]
    fn resources(&self) -> Vec<String> {
        self.resources.clone()
    }

    #[getter]
    fn token(&self) -> &str {
        &self.token
    }

    #[getter]
    fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    #[getter]
    fn ttl(&self) -> f64 {
        self.ttl.as_secs_f64()
    }

    /// Seconds before the lease may no longer be relied on (0 once lost or released).
    fn validity(&self) -> f64 {
        self.with_kept(|kept| kept.map_or(0.0, |kept| kept.validity().as_secs_f64()))
    }

    /// How the lease ended, if it has: ("lost" | "max_hold" | "released", why).
    fn ended(&self) -> Option<(&'static str, String)> {
        self.with_kept(|kept| match kept {
            None => Some(end_tuple(&LeaseEnd::Released)),
            Some(kept) => kept.ended().as_ref().map(end_tuple),
        })
    }

    /// Why the work under the lease may not be relied on, if it may not: the lease was lost,
    /// or its validity ran out before the keepalive's timer said so. The decision
    /// `Locks::with_lock` makes when its work finishes.
    fn lost_reason(&self) -> Option<String> {
        self.with_kept(|kept| {
            let kept = kept?;
            match kept.ended() {
                Some(LeaseEnd::Lost(reason)) => Some(reason),
                None if kept.validity().is_zero() => {
                    Some("the validity ran out before the work finished".to_string())
                }
                _ => None,
            }
        })
    }

    /// An asyncio future that resolves when the lease ends, to ("lost" | "max_hold" |
    /// "released", why).
    fn wait_end(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let signal = self.with_kept(|kept| kept.map(KeptLease::lost_signal));
        let future = pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let end = match signal {
                Some(signal) => signal.await,
                None => LeaseEnd::Released,
            };
            Ok(end_tuple(&end))
        })?;
        Ok(future.unbind())
    }

    /// Stops the keepalive and releases the lease on every group; returns whether this call
    /// deleted the lock (false when it was gone already, or released before).
    fn release(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        // Taken out now: should the call be dropped before it runs, dropping the lease still
        // releases it in the background.
        let kept = self.take();
        run(py, asynchronous, async move {
            match kept {
                Some(kept) => Ok(kept.release().await?.released),
                None => Ok(false),
            }
        })
    }
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(connect, module)?)?;
    module.add_class::<NativeLocks>()?;
    module.add_class::<NativeLease>()?;
    module.add("MAX_PERMITS", quorumlock::MAX_PERMITS)?;
    module.add("MAX_SET_RESOURCES", quorumlock::MAX_SET_RESOURCES)?;
    module.add("MAX_LIST_LIMIT", quorumlock::MAX_LIST_LIMIT)?;
    Ok(())
}
