//! How a listing walks one group's keys: by SCAN on a master, by hash slot in a Cluster
//! group, a batch at a time, and what each key met is (a [`Candidate`]).

use fred::clients::WithOptions;
use fred::prelude::{Client, KeysInterface};

use super::cursor::Resume;
use crate::engine::vote::Vote;
use crate::group::Group;
use crate::group::reply::Reply;
use crate::group::slots::SLOTS;

/// Which key of a lock (or of a semaphore's slot) a walk met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Via {
    /// `…:lock` or `…:permit:<n>`: the grant itself.
    Lock,
    /// `…:fence` or `…:permit:<n>:fence`: the fence the grant left, which outlives it.
    Fence,
}

/// What a listing met a key of: a lock, or a slot of a semaphore, by one of its two keys.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Candidate {
    Lock { name: String, via: Via },
    Slot { name: String, slot: u32, via: Via },
}

/// Keys one SCAN call of a listing looks at (MATCH filters them after).
pub(super) const SCAN_COUNT: u32 = 1000;
/// Batches of a Cluster group's walk. Batch `k` is every slot `k + 16 n`: spread over the
/// whole slot space, so every primary reads its share of a batch at once (a few script calls
/// each), and which batch a slot is in does not depend on who serves it.
pub(super) const SLOT_BATCHES: u16 = 16;

/// How a group's keys are walked.
pub(super) enum Walker {
    /// A master's: with SCAN, on the client with the per-call timeout.
    Scan(WithOptions<Client>),
    /// A Cluster group's: slot by slot, each on the primary that serves it now.
    Slots,
}

impl Walker {
    /// Whether a walk of this kind resumes from `at`: a cursor of a group that was of the
    /// other kind when the page before was taken does not.
    pub(super) fn resumes(&self, at: &Resume) -> bool {
        matches!(
            (self, at),
            (_, Resume::Start)
                | (Walker::Scan(_), Resume::Scan(_))
                | (Walker::Slots, Resume::Slot(_))
        )
    }
}

/// One batch of a walk: the keys it met (without a Cluster slot tag), and where the next
/// batch starts (`None` after the last).
pub(super) struct Batch {
    pub(super) next: Option<Resume>,
    pub(super) keys: Vec<String>,
}

/// The SCAN batch of a master's walk at `at`, keys matching `pattern`.
pub(super) async fn scan_batch(
    client: &WithOptions<Client>,
    at: &Resume,
    pattern: &str,
) -> Result<Batch, Vote> {
    let cursor = match at {
        Resume::Scan(cursor) => cursor.clone(),
        _ => "0".to_string(),
    };
    let page = client
        .scan_page::<(String, Vec<String>), _, _>(cursor, pattern, Some(SCAN_COUNT), None)
        .await;
    match page {
        Ok((next, keys)) => Ok(Batch {
            next: (next != "0").then_some(Resume::Scan(next)),
            keys,
        }),
        Err(error) if matches!(error.kind(), fred::error::ErrorKind::Timeout) => Err(Vote::Timeout),
        Err(error) => Err(Vote::Error {
            message: error.to_string(),
        }),
    }
}

/// The batch of a Cluster group's walk at `at` (see [`SLOT_BATCHES`]): the keys of its
/// slots that start with `start`, each slot read on the primary that serves it when it is
/// read.
pub(super) async fn slots_batch(group: &Group, at: &Resume, start: &str) -> Result<Batch, Vote> {
    let first = match at {
        Resume::Slot(slot) => *slot,
        _ => 0,
    };
    let slots: Vec<u16> = (first..SLOTS).step_by(usize::from(SLOT_BATCHES)).collect();
    match group.slot_keys(&slots, start).await {
        Reply::Answer(mut keys) => {
            keys.retain(|key| key.starts_with(start));
            let next = first + 1;
            Ok(Batch {
                next: (next < SLOT_BATCHES).then_some(Resume::Slot(next)),
                keys,
            })
        }
        Reply::Timeout => Err(Vote::Timeout),
        Reply::Failed(message) => Err(Vote::Error { message }),
        Reply::NotSent(reason) => Err(Vote::Error {
            message: reason.to_string(),
        }),
    }
}

/// Escapes the glob characters of SCAN MATCH so a prefix matches literally.
pub(super) fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// What a key met while listing is (the key without `<prefix>:{`): a lock's or a slot's
/// lock or fence key, or neither (a semaphore's count, anything else).
pub(super) fn candidate_of(rest: &str) -> Option<Candidate> {
    if let Some(name) = rest.strip_suffix("}:lock") {
        return Some(Candidate::Lock {
            name: name.to_string(),
            via: Via::Lock,
        });
    }
    if let Some(name) = rest.strip_suffix("}:fence") {
        return Some(Candidate::Lock {
            name: name.to_string(),
            via: Via::Fence,
        });
    }
    let (slot_key, via) = match rest.strip_suffix(":fence") {
        Some(slot_key) => (slot_key, Via::Fence),
        None => (rest, Via::Lock),
    };
    let (name, slot) = slot_key.rsplit_once("}:permit:")?;
    if slot.is_empty() || !slot.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Candidate::Slot {
        name: name.to_string(),
        slot: slot.parse().ok()?,
        via,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_key_names_its_semaphore_and_a_count_key_names_none() {
        let slot = |name: &str, slot, via| {
            Some(Candidate::Slot {
                name: name.to_string(),
                slot,
                via,
            })
        };
        let lock = |name: &str, via| {
            Some(Candidate::Lock {
                name: name.to_string(),
                via,
            })
        };
        assert_eq!(candidate_of("api}:permit:3"), slot("api", 3, Via::Lock));
        assert_eq!(
            candidate_of("a}:permit:1}:permit:12"),
            slot("a}:permit:1", 12, Via::Lock)
        );
        assert_eq!(candidate_of("db}:lock"), lock("db", Via::Lock));
        assert_eq!(
            candidate_of("api}:permit:3:fence"),
            slot("api", 3, Via::Fence)
        );
        assert_eq!(candidate_of("db}:fence"), lock("db", Via::Fence));
        assert_eq!(
            candidate_of("a}:permit:1}:fence"),
            lock("a}:permit:1", Via::Fence)
        );
        assert_eq!(candidate_of("api}:permit:"), None);
        assert_eq!(candidate_of("api}:permits"), None);
        assert_eq!(candidate_of("api}:permits:released"), None);
    }
}
