//! Where a listing stands between pages ([`Position`]), and its text form, the cursor a
//! page returns: `c2.<walks>.<group>.<resume>.<prefix tag>.<last candidate in hex>`.

use super::walk::{Candidate, SLOT_BATCHES, Via};
use crate::engine::error::Error;

/// The first field of every cursor; a cursor of another form is refused.
const VERSION: &str = "c2";

/// A stable 64-bit FNV-1a hash of the prefix, so a cursor is not used with another one.
pub(super) fn prefix_tag(prefix: &str) -> u64 {
    prefix.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A candidate as hex: `l<name>` (`f<name>` by its fence) for a lock, `s<slot>:<name>`
/// (`t<slot>:<name>`) for a slot.
fn encode(candidate: &Candidate) -> String {
    let text = match candidate {
        Candidate::Lock {
            name,
            via: Via::Lock,
        } => format!("l{name}"),
        Candidate::Lock {
            name,
            via: Via::Fence,
        } => format!("f{name}"),
        Candidate::Slot {
            name,
            slot,
            via: Via::Lock,
        } => format!("s{slot}:{name}"),
        Candidate::Slot {
            name,
            slot,
            via: Via::Fence,
        } => format!("t{slot}:{name}"),
    };
    text.bytes().map(|byte| format!("{byte:02x}")).collect()
}

fn decode(hex: &str) -> Option<Candidate> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    let text = String::from_utf8(bytes).ok()?;
    let mut chars = text.chars();
    let kind = chars.next()?;
    let rest = chars.as_str();
    let lock = |via| {
        Some(Candidate::Lock {
            name: rest.to_string(),
            via,
        })
    };
    let slot = |via| {
        let (slot, name) = rest.split_once(':')?;
        Some(Candidate::Slot {
            name: name.to_string(),
            slot: slot.parse().ok()?,
            via,
        })
    };
    match kind {
        'l' => lock(Via::Lock),
        'f' => lock(Via::Fence),
        's' => slot(Via::Lock),
        't' => slot(Via::Fence),
        _ => None,
    }
}

/// How the walk of one group ended, as far as a listing has gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Walk {
    /// Not reached yet (or being walked).
    Pending,
    /// Walked through to the end: it listed the locks it was the first to carry.
    Walked,
    /// Did not answer when its walk started: it listed nothing.
    PassedOver,
}

impl Walk {
    fn symbol(self) -> char {
        match self {
            Walk::Pending => '0',
            Walk::Walked => '1',
            Walk::PassedOver => 'x',
        }
    }

    fn from_symbol(symbol: char) -> Option<Walk> {
        match symbol {
            '0' => Some(Walk::Pending),
            '1' => Some(Walk::Walked),
            'x' => Some(Walk::PassedOver),
            _ => None,
        }
    }
}

/// Where the walk of the group being walked reads its next batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Resume {
    /// At the beginning.
    Start,
    /// A master's: at this SCAN cursor (never "0", which is the beginning).
    Scan(String),
    /// A Cluster group's: at the batch this hash slot starts (one of the first
    /// [`SLOT_BATCHES`]), whichever primaries serve its slots now.
    Slot(u16),
}

impl Resume {
    /// `0` for the beginning, a SCAN cursor as Redis gave it, `s<slot>` for a slot.
    pub(super) fn render(&self) -> String {
        match self {
            Resume::Start => "0".to_string(),
            Resume::Scan(cursor) => cursor.clone(),
            Resume::Slot(slot) => format!("s{slot}"),
        }
    }

    pub(super) fn parse(text: &str) -> Option<Resume> {
        let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
        if text == "0" {
            return Some(Resume::Start);
        }
        if digits(text) {
            return Some(Resume::Scan(text.to_string()));
        }
        let slot = text.strip_prefix('s').filter(|slot| digits(slot))?;
        let slot: u16 = slot.parse().ok()?;
        (slot < SLOT_BATCHES).then_some(Resume::Slot(slot))
    }
}

/// Where a listing stands: how each group's walk ended, the group being walked, where the
/// batch to read next starts in it, and what the page before took from that batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Position {
    pub(super) walked: Vec<Walk>,
    pub(super) group: usize,
    pub(super) scan: Resume,
    pub(super) after: Option<Candidate>,
}

impl Position {
    pub(super) fn start(groups: usize) -> Self {
        Position {
            walked: vec![Walk::Pending; groups],
            group: 0,
            scan: Resume::Start,
            after: None,
        }
    }

    pub(super) fn walked(&self) -> usize {
        self.walked
            .iter()
            .filter(|walk| **walk == Walk::Walked)
            .count()
    }

    pub(super) fn walked_groups(&self) -> Vec<usize> {
        (0..self.walked.len())
            .filter(|i| self.walked[*i] == Walk::Walked)
            .collect()
    }

    /// Moves on to the next group, the walk of this one ended as `walk`.
    pub(super) fn next_group(&mut self, walk: Walk) {
        if let Some(flag) = self.walked.get_mut(self.group) {
            *flag = walk;
        }
        self.group += 1;
        self.scan = Resume::Start;
        self.after = None;
    }

    pub(super) fn render(&self, tag: u64) -> String {
        let walked: String = self.walked.iter().map(|walk| walk.symbol()).collect();
        let after = self.after.as_ref().map(encode).unwrap_or_default();
        format!(
            "{}.{walked}.{}.{}.{tag:016x}.{after}",
            VERSION,
            self.group,
            self.scan.render()
        )
    }

    /// Reads a cursor [`Position::render`] wrote for a listing of `groups` groups and the
    /// prefix whose tag is `tag`.
    pub(super) fn parse(text: &str, groups: usize, tag: u64) -> Result<Self, Error> {
        let unknown = || {
            Error::invalid(
                "cursor",
                "is not a cursor a listing returned: pass the previous page's next_cursor unchanged, or no cursor to start from the beginning",
            )
        };
        let fields: Vec<&str> = text.split('.').collect();
        let [version, walked, group, scan, text_tag, after] = fields[..] else {
            return Err(unknown());
        };
        if version != VERSION {
            return Err(unknown());
        }
        let walked: Vec<Walk> = walked
            .chars()
            .map(|c| Walk::from_symbol(c).ok_or_else(unknown))
            .collect::<Result<_, _>>()?;
        if walked.len() != groups {
            return Err(Error::invalid(
                "cursor",
                format!(
                    "was returned by a listing over {} groups and this topology has {groups}: list again without a cursor",
                    walked.len()
                ),
            ));
        }
        if u64::from_str_radix(text_tag, 16).ok() != Some(tag) {
            return Err(Error::invalid(
                "cursor",
                "was returned for another prefix: pass the prefix of the page it came from",
            ));
        }
        let group: usize = group.parse().map_err(|_| unknown())?;
        // The walks end in group order: every group before the one being walked has ended,
        // none after it has.
        if group >= groups
            || walked[..group].contains(&Walk::Pending)
            || walked[group..].iter().any(|walk| *walk != Walk::Pending)
        {
            return Err(unknown());
        }
        let scan = Resume::parse(scan).ok_or_else(unknown)?;
        let after = match after {
            "" => None,
            text => Some(decode(text).ok_or_else(unknown)?),
        };
        Ok(Position {
            walked,
            group,
            scan,
            after,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_as_the_position_it_was_written_from() {
        let tag = prefix_tag("jobs:");
        for after in [
            Candidate::Slot {
                name: "api.v1:x".to_string(),
                slot: 7,
                via: Via::Fence,
            },
            Candidate::Lock {
                name: "db".to_string(),
                via: Via::Lock,
            },
        ] {
            for scan in [Resume::Scan("8192".to_string()), Resume::Slot(15)] {
                let position = Position {
                    walked: vec![Walk::Walked, Walk::PassedOver, Walk::Pending, Walk::Pending],
                    group: 2,
                    scan,
                    after: Some(after.clone()),
                };
                let text = position.render(tag);
                assert_eq!(Position::parse(&text, 4, tag).ok(), Some(position));
            }
        }
        let start = Position::start(3);
        assert_eq!(
            Position::parse(&start.render(tag), 3, tag).ok(),
            Some(start)
        );
    }

    #[test]
    fn a_cursor_of_another_prefix_or_topology_or_garbage_is_refused_naming_cursor() {
        let tag = prefix_tag("jobs:");
        let text = Position::start(5).render(tag);
        for (bad, groups, tag) in [
            (text.as_str(), 5, prefix_tag("other")),
            (text.as_str(), 3, tag),
            ("garbage", 5, tag),
            ("c2.00000.9.0.0.", 5, tag),
            ("c1.00000.0.0.0.", 5, tag),
            ("", 5, tag),
        ] {
            match Position::parse(bad, groups, tag) {
                Err(Error::InvalidInput { field, .. }) => assert_eq!(field, "cursor"),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
        // Walks end in group order.
        let tag_text = format!("{tag:016x}");
        for order in ["01000", "10100", "0x000"] {
            let bad = format!("c2.{order}.1.0.{tag_text}.");
            assert!(Position::parse(&bad, 5, tag).is_err(), "{bad}");
        }
        let good = format!("c2.x0000.1.0.{tag_text}.");
        assert!(Position::parse(&good, 5, tag).is_ok());
        // A Cluster group's walk resumes at the batch a hash slot starts, one of 0 to 15.
        for slot in ["s16", "s16384", "s", "s-1", "s1x", "x1"] {
            let bad = format!("c2.x0000.1.{slot}.{tag_text}.");
            assert!(Position::parse(&bad, 5, tag).is_err(), "{bad}");
        }
        let good = format!("c2.x0000.1.s15.{tag_text}.");
        assert!(Position::parse(&good, 5, tag).is_ok());
    }
}
