//! Failures on their way to Python: the engine's errors and the module's own, turned into
//! the exceptions of `quorumlock._errors` with their facts.

use pyo3::prelude::*;
use quorumlock::Error;
use serde_json::{Value, json};

/// A failure on its way to Python: the engine's error, or one this module finds itself.
pub(crate) enum Failure {
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

pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Failure {
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
    pub(crate) fn into_py(self) -> PyErr {
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
