//! The native half of the `quorumlock` Python package: the engine behind a few plain calls.
//!
//! Every call that talks to the groups runs on one tokio runtime owned by the module. A sync
//! call gives up the GIL while it waits (and still answers Ctrl-C); an async call returns an
//! asyncio future that the runtime completes through the loop's `Bridge`, so the event loop
//! never blocks and the runtime's threads never wait for the GIL. The Python half
//! (`quorumlock/__init__.py`) builds the context managers, the dataclasses and the
//! exceptions on top.

mod bridge;
mod failure;

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use quorumlock::{
    AcquireOptions, ConfigLocation, DEFAULT_TTL, Error, KeptLease, LeaseEnd, Locks, Topology,
};
use serde_json::json;

use bridge::{Bridge, Completion, Queue, Target, make};
use failure::{Failure, invalid};

/// How often a sync call that waits looks for a signal (Ctrl-C) to deliver.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// The module's tokio runtime: the engine's calls, keepalives and subscriptions run there.
fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name("quorumlock")
                .build()
                .map_err(|error| error.to_string())
        })
        .as_ref()
        .map_err(|error| PyRuntimeError::new_err(format!("cannot start the runtime: {error}")))
}

/// Runs `work` on the module's runtime while this thread gives up the GIL; a signal that
/// arrives meanwhile (Ctrl-C) drops the work and raises.
fn block<T: Send>(
    py: Python<'_>,
    work: impl Future<Output = Result<T, Failure>> + Send,
) -> PyResult<T> {
    let runtime = runtime()?;
    let outcome = py.detach(|| {
        runtime.block_on(async {
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

/// Runs `work` and returns its value (no bridge: blocking without the GIL), or an asyncio
/// future of it that `bridge` completes on its event loop.
fn run<T>(
    py: Python<'_>,
    bridge: Option<&Bound<'_, Bridge>>,
    work: impl Future<Output = Result<T, Failure>> + Send + 'static,
) -> PyResult<Py<PyAny>>
where
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    match bridge {
        Some(bridge) => bridge.get().spawn(py, work),
        None => block(py, work)?.into_py_any(py),
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
#[pyo3(signature = (config_path, bridge))]
fn connect(
    py: Python<'_>,
    config_path: Option<PathBuf>,
    bridge: Option<Bound<'_, Bridge>>,
) -> PyResult<Py<PyAny>> {
    run(py, bridge.as_ref(), connect_to(config_path))
}

/// A connection to every group; shared by all the leases it hands out.
#[pyclass(frozen, module = "quorumlock._native")]
struct NativeLocks {
    locks: Locks,
    config_path: String,
}

/// What an acquire asks for.
enum Claim {
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
    /// all or nothing) or "permit" (one of `permits` permits of names[0]). With a bridge,
    /// `on_end(("lost" | "max_hold", why))` is called on its event loop if the lease ends
    /// before it is released; `stop_watching` (or the release) cancels that.
    #[pyo3(signature = (kind, names, permits, ttl, wait, owner, purpose, bridge, on_end=None))]
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
        bridge: Option<Bound<'_, Bridge>>,
        on_end: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let locks = self.locks.clone();
        let kind = kind.to_string();
        // The watch starts on the runtime as soon as the lease is held: a second spawn from
        // the event loop's thread cost 14 us there.
        let watch = bridge
            .as_ref()
            .zip(on_end)
            .map(|(bridge, callback)| (bridge.get().queue.clone(), callback));
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
            let claim = match kind.as_str() {
                "one" => Claim::One(first()),
                "all" => Claim::All(names.clone()),
                _ => Claim::Permit {
                    name: first(),
                    permits: u32::try_from(permits).map_err(|_| {
                        invalid("permits", format!("{permits} is not a count of permits"))
                    })?,
                },
            };
            let lease = match &claim {
                Claim::One(name) => locks.acquire_with(name, &options).await?,
                Claim::All(names) => locks.acquire_all_with(names, &options).await?,
                Claim::Permit { name, permits } => {
                    locks.acquire_permit_with(name, *permits, &options).await?
                }
            };
            let kept = lease.keepalive();
            let watcher = watch.map(|(queue, callback)| {
                tokio::spawn(tell_end(kept.lost_signal(), queue, callback)).abort_handle()
            });
            Ok(NativeLease {
                resources: kept.resources().to_vec(),
                token: kept.token().to_string(),
                fencing_token: kept.fencing_token(),
                ttl: kept.ttl(),
                kept: Mutex::new(Some(kept)),
                watcher: Mutex::new(watcher),
            })
        };
        run(py, bridge.as_ref(), work)
    }

    /// The lock as every group sees it, as JSON.
    fn status(
        &self,
        py: Python<'_>,
        resource: String,
        bridge: Option<Bound<'_, Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        let locks = self.locks.clone();
        run(py, bridge.as_ref(), async move {
            let status = locks.status(&resource).await?;
            Ok(to_json(&status))
        })
    }

    /// One page of the current locks and semaphores, as JSON.
    #[pyo3(signature = (prefix, limit, cursor, bridge))]
    fn list(
        &self,
        py: Python<'_>,
        prefix: String,
        limit: i64,
        cursor: Option<String>,
        bridge: Option<Bound<'_, Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        let locks = self.locks.clone();
        run(py, bridge.as_ref(), async move {
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
        bridge: Option<Bound<'_, Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        let locks = self.locks.clone();
        run(py, bridge.as_ref(), async move {
            let status = locks.semaphore_status(&name).await?;
            Ok(to_json(&status))
        })
    }

    /// Every group's health, as JSON.
    fn health(&self, py: Python<'_>, bridge: Option<Bound<'_, Bridge>>) -> PyResult<Py<PyAny>> {
        let locks = self.locks.clone();
        run(py, bridge.as_ref(), async move {
            let health = locks.health().await;
            Ok(to_json(&health))
        })
    }

    /// Deletes the lock whoever holds it; returns whether this call deleted it.
    fn force_release(
        &self,
        py: Python<'_>,
        resource: String,
        bridge: Option<Bound<'_, Bridge>>,
    ) -> PyResult<Py<PyAny>> {
        let locks = self.locks.clone();
        run(py, bridge.as_ref(), async move {
            Ok(locks.force_release(&resource).await?.released)
        })
    }

    /// Lets the calls in flight land, then closes every connection.
    fn close(&self, py: Python<'_>, bridge: Option<Bound<'_, Bridge>>) -> PyResult<Py<PyAny>> {
        let locks = self.locks.clone();
        run(py, bridge.as_ref(), async move {
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
    /// The task that tells the event loop of the lease's end (see `acquire`).
    watcher: Mutex<Option<tokio::task::AbortHandle>>,
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

    fn watcher(&self) -> std::sync::MutexGuard<'_, Option<tokio::task::AbortHandle>> {
        self.watcher
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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

    /// Stops telling the event loop of the lease's end.
    fn stop_watching(&self) {
        if let Some(handle) = self.watcher().take() {
            handle.abort();
        }
    }

    /// Stops the keepalive and releases the lease on every group; returns whether this call
    /// deleted the lock (false when it was gone already, or released before).
    fn release(&self, py: Python<'_>, bridge: Option<Bound<'_, Bridge>>) -> PyResult<Py<PyAny>> {
        // Taken out now: should the call be dropped before it runs, dropping the lease still
        // releases it in the background.
        let kept = self.take();
        self.stop_watching();
        run(py, bridge.as_ref(), async move {
            match kept {
                Some(kept) => Ok(kept.release().await?.released),
                None => Ok(false),
            }
        })
    }
}

/// Calls `callback(("lost" | "max_hold", why))` on the event loop of `queue` once the lease
/// ends, unless its holder released it.
async fn tell_end(signal: impl Future<Output = LeaseEnd>, queue: Arc<Queue>, callback: Py<PyAny>) {
    let end = signal.await;
    // Released by its holder (or dropped): nobody needs telling.
    if end != LeaseEnd::Released {
        queue.complete(Completion {
            target: Target::Callback(callback),
            outcome: Ok(make(end_tuple(&end))),
        });
    }
}

/// Sequential acquire+release cycles of `resource` on the engine alone, with no Python in
/// the loop: each acquire's time in microseconds. python/bench.py compares the package's
/// acquire with it, in the same process against the same groups.
#[pyfunction]
#[pyo3(signature = (locks, resource, samples, ttl, keepalive=false))]
fn _engine_acquire_micros(
    py: Python<'_>,
    locks: &NativeLocks,
    resource: String,
    samples: usize,
    ttl: f64,
    keepalive: bool,
) -> PyResult<Vec<f64>> {
    let locks = locks.locks.clone();
    block(py, async move {
        let ttl = seconds("ttl", ttl)?;
        let mut micros = Vec::with_capacity(samples);
        for _ in 0..samples {
            let started = std::time::Instant::now();
            let lease = locks.acquire(resource.as_str()).ttl(ttl).await?;
            if keepalive {
                // What a `with` block does before its body runs.
                let kept = lease.keepalive();
                micros.push(started.elapsed().as_secs_f64() * 1e6);
                kept.release().await?;
            } else {
                micros.push(started.elapsed().as_secs_f64() * 1e6);
                lease.release().await?;
            }
        }
        Ok(micros)
    })
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(connect, module)?)?;
    module.add_function(wrap_pyfunction!(_engine_acquire_micros, module)?)?;
    module.add_class::<NativeLocks>()?;
    module.add_class::<NativeLease>()?;
    module.add_class::<Bridge>()?;
    module.add("MAX_PERMITS", quorumlock::MAX_PERMITS)?;
    module.add("MAX_SET_RESOURCES", quorumlock::MAX_SET_RESOURCES)?;
    module.add("MAX_LIST_LIMIT", quorumlock::MAX_LIST_LIMIT)?;
    Ok(())
}
