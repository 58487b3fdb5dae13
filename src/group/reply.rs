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
    /// The call was never sent, or a Cluster node refused to run it there, for the reason
    /// given: it waited in the client's queue for its whole timeout, the queue was full, no
    /// primary owns its slot, its resources span slots, or the node answered `MOVED`, `ASK`
    /// or `TRYAGAIN`. Nothing was applied.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_read_from_integers_and_from_text() {
        assert_eq!(integer(Some(&Value::Integer(7))), Some(7));
        assert_eq!(integer(Some(&Value::from("42"))), Some(42));
        assert_eq!(integer(Some(&Value::Bytes("9".into()))), Some(9));
    }

    #[test]
    fn negative_missing_or_non_numeric_values_are_no_integer() {
        assert_eq!(integer(Some(&Value::Integer(-2))), None);
        assert_eq!(integer(None), None);
        assert_eq!(integer(Some(&Value::from("x1"))), None);
        assert_eq!(integer(Some(&Value::Null)), None);
    }

    #[test]
    fn text_is_empty_when_absent() {
        assert_eq!(text(Some(&Value::from("abc"))), "abc");
        assert_eq!(text(None), "");
    }

    #[test]
    fn a_mapped_reply_keeps_its_kind() {
        assert!(matches!(Reply::Answer(2).map(|n| n * 2), Reply::Answer(4)));
        assert!(matches!(
            Reply::<u8>::Timeout.map(|n| n * 2),
            Reply::Timeout
        ));
        assert!(matches!(
            Reply::<u8>::NotSent("full").map(|n| n * 2),
            Reply::NotSent("full")
        ));
    }
}
