//! The way back from the runtime to an asyncio event loop: a finished call queues its
//! completion (a future to complete, or a callback to call) and wakes the loop with one byte
//! on a socket the loop watches; the loop then builds the Python values and hands them over.
//! Cancelling a call's asyncio future aborts the call's task.

use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, OnceLock};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyWeakrefReference;
use pyo3::{IntoPyObjectExt, intern};

use crate::failure::Failure;
use crate::runtime;

/// Builds a result's Python value, on the event loop's thread.
pub(crate) type Make = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

pub(crate) fn make<T>(value: T) -> Make
where
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    Box::new(move |py| value.into_py_any(py))
}

/// What a finished call hands to the event loop: an asyncio future to complete, or a
/// callback to call with the value.
pub(crate) enum Target {
    /// The future, and the canceller it calls if it is cancelled first.
    Future {
        future: Py<PyAny>,
        canceller: Py<Canceller>,
    },
    Callback(Py<PyAny>),
}

pub(crate) struct Completion {
    pub(crate) target: Target,
    pub(crate) outcome: Result<Make, Failure>,
}

/// Completions waiting for their event loop, and the socket that wakes it.
pub(crate) struct Queue {
    done: Mutex<Vec<Completion>>,
    wake: UnixStream,
}

impl Queue {
    /// Called on the runtime's threads, which never take the GIL: the loop is woken by one
    /// byte when the queue stops being empty, and builds the Python values itself.
    pub(crate) fn complete(&self, completion: Completion) {
        let first = {
            let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
            done.push(completion);
            done.len() == 1
        };
        if first {
            // A full socket means a wake is pending already.
            let _ = (&self.wake).write(&[1]);
        }
    }
}

/// One event loop's way back from the runtime: `loop.add_reader(bridge.fileno(),
/// bridge.drain)` runs `drain` when calls finished, which completes their futures.
#[pyclass(frozen, module = "quorumlock._native")]
pub(crate) struct Bridge {
    /// A weak reference: the loop holds the bridge (its reader), not the other way round.
    event_loop: Py<PyWeakrefReference>,
    pub(crate) queue: Arc<Queue>,
    woken: UnixStream,
}

/// Cancels the engine's work when its asyncio future is cancelled.
#[pyclass(frozen, module = "quorumlock._native")]
pub(crate) struct Canceller {
    /// Set once the call's task is spawned, before the future can be cancelled.
    abort: OnceLock<tokio::task::AbortHandle>,
}

#[pymethods]
impl Canceller {
    fn __call__(&self, future: &Bound<'_, PyAny>) -> PyResult<()> {
        if future
            .call_method0(intern!(future.py(), "cancelled"))?
            .is_truthy()?
            && let Some(abort) = self.abort.get()
        {
            abort.abort();
        }
        Ok(())
    }
}

impl Bridge {
    /// Runs `work` on the runtime; returns an asyncio future of its value. Cancelling the
    /// future drops the work.
    pub(crate) fn spawn<T>(
        &self,
        py: Python<'_>,
        work: impl Future<Output = Result<T, Failure>> + Send + 'static,
    ) -> PyResult<Py<PyAny>>
    where
        T: for<'py> IntoPyObject<'py> + Send + 'static,
    {
        let event_loop = self
            .event_loop
            .bind(py)
            .upgrade()
            .ok_or_else(|| PyRuntimeError::new_err("the event loop is gone"))?;
        let future = event_loop.call_method0(intern!(py, "create_future"))?;
        let canceller = Py::new(
            py,
            Canceller {
                abort: OnceLock::new(),
            },
        )?;
        let target = Target::Future {
            future: future.clone().unbind(),
            canceller: canceller.clone_ref(py),
        };
        let queue = self.queue.clone();
        let task = runtime()?.spawn(async move {
            let outcome = work.await.map(make);
            queue.complete(Completion { target, outcome });
        });
        let _ = canceller.get().abort.set(task.abort_handle());
        future.call_method1(intern!(py, "add_done_callback"), (canceller,))?;
        Ok(future.unbind())
    }
}

fn hand_over(py: Python<'_>, completion: Completion) -> PyResult<()> {
    match completion.target {
        Target::Future { future, canceller } => {
            let future = future.bind(py);
            // Cancelled meanwhile: the value is dropped (a lease in it is released).
            if future.call_method0(intern!(py, "done"))?.is_truthy()? {
                return Ok(());
            }
            // The call is over, so nothing is left to cancel; the future's result then wakes
            // its task with no callback queued before it.
            future.call_method1(intern!(py, "remove_done_callback"), (canceller,))?;
            match completion
                .outcome
                .and_then(|make| make(py).map_err(Failure::Python))
            {
                Ok(value) => future.call_method1(intern!(py, "set_result"), (value,))?,
                Err(failure) => future.call_method1(
                    intern!(py, "set_exception"),
                    (failure.into_py().value(py).clone(),),
                )?,
            };
        }
        Target::Callback(callback) => {
            let value = completion
                .outcome
                .and_then(|make| make(py).map_err(Failure::Python))
                .map_err(Failure::into_py)?;
            callback.bind(py).call1((value,))?;
        }
    }
    Ok(())
}

#[pymethods]
impl Bridge {
    #[new]
    fn new(event_loop: &Bound<'_, PyAny>) -> PyResult<Self> {
        let event_loop = PyWeakrefReference::new(event_loop)?.unbind();
        let (woken, wake) = UnixStream::pair()?;
        woken.set_nonblocking(true)?;
        wake.set_nonblocking(true)?;
        Ok(Bridge {
            event_loop,
            queue: Arc::new(Queue {
                done: Mutex::new(Vec::new()),
                wake,
            }),
            woken,
        })
    }

    /// The descriptor the event loop watches.
    fn fileno(&self) -> i32 {
        self.woken.as_raw_fd()
    }

    /// Completes every call that finished since the last drain.
    fn drain(&self, py: Python<'_>) -> PyResult<()> {
        let mut bytes = [0u8; 64];
        while let Ok(read) = (&self.woken).read(&mut bytes) {
            if read < bytes.len() {
                break;
            }
        }
        let done = std::mem::take(&mut *self.queue.done.lock().unwrap_or_else(|p| p.into_inner()));
        let mut first_error = None;
        for completion in done {
            if let Err(error) = hand_over(py, completion) {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
