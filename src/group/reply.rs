//! One group's answer to one call, and the parsing of script replies.
//!
//! A group reports what happened to a call: an answer, a timeout, a failure, or "never
//! sent". What the answer means for a lock is the engine's business (`engine::vote`).

use fred::types::Value;

/// One group's answer to one call.
#[derive(Debug, Clone)]
pub(crate) enum Reply<T> {
    /// The script ran and answered.
    Answer(T),
    /// No answer within the per-call timeout: the call may still have been applied.
    Timeout,
    /// The call failed (connection refused or closed, server error): outcome unknown.
    Failed(String),
    /// The call was never sent, for the reason given: it waited in the client's queue for its
    /// whole timeout, or the queue was full. Nothing was applied.
    NotSent(&'static str),
}

impl<T> Reply<T> {
    /// The same reply with its answer turned into another.
    pub fn map<U>(self, answer: impl FnOnce(T) -> U) -> Reply<U> {
        match self {
            Reply::Answer(value) => Reply::Answer(answer(value)),
            Reply::Timeout => Reply::Timeout,
            Reply::Failed(message) => Reply::Failed(message),
            Reply::NotSent(reason) => Reply::NotSent(reason),
        }
    }
}

/// A script reply's integer (Redis may answer an integer or its text).
pub(crate) fn integer(value: Option<&Value>) -> Option<u64> {
    match value? {
        Value::Integer(n) => u64::try_from(*n).ok(),
        Value::String(s) => s.parse().ok(),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// A script reply's text, empty when absent.
pub(crate) fn text(value: Option<&Value>) -> String {
    value.and_then(Value::as_string).unwrap_or_default()
}
