//! What an operator asks `admit` for, and the write window and acknowledged mode each group
//! gets from it and from what the group's masters run.

use std::time::Duration;

use crate::engine::error::AdmitRefusal;
use crate::engine::health::GroupSettings;

/// What to admit, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmitOptions {
    /// Group names; empty: every group.
    pub groups: Vec<String>,
    /// The longest TTL the masters grant (a larger one already in force stays).
    pub max_ttl_ms: u64,
    /// The write window of an old master cut off from its replicas or its cluster. `None`:
    /// computed for each group from what its masters run (`min-replicas-to-write`,
    /// `min-replicas-max-lag`, `cluster-node-timeout`; the largest any Cluster primary
    /// needs).
    /// A window below what a group's masters need is refused unless `allow_short_window`.
    pub write_window_ms: Option<u64>,
    /// How long the masters sit out before they vote: zero for a brand-new deployment; the
    /// policy's quarantine for masters that may have missed grants.
    pub delay: Duration,
    /// Admit at once even a master that holds lock or fence keys.
    pub force: bool,
    /// Accept a `write_window_ms` below what a group's masters need: an old master cut off
    /// from its replicas may grant after the promoted one's quarantine ended.
    pub allow_short_window: bool,
    /// Admit a master with replicas and `min-replicas-to-write 0` (or
    /// `min-replicas-max-lag 0`): cut off from its replicas it grants with no end.
    pub allow_unreplicated_writes: bool,
    /// Admit a group whose settings cannot be read (on any one of its masters), under the
    /// `write_window_ms` given (required then): with nothing read, both the unreplicated
    /// check and the window check are skipped for the whole group.
    pub allow_unread_settings: bool,
    /// The acknowledged mode: `Some(true)` turns it on, each master's policy naming the
    /// replicas it has now; `Some(false)` turns it off; `None` keeps what each master runs.
    pub acknowledged: Option<bool>,
}

impl AdmitOptions {
    /// Every group, under `max_ttl_ms` and the write window their masters need, at once, with
    /// no escape taken.
    pub fn new(max_ttl_ms: u64) -> Self {
        AdmitOptions {
            groups: Vec::new(),
            max_ttl_ms,
            write_window_ms: None,
            delay: Duration::ZERO,
            force: false,
            allow_short_window: false,
            allow_unreplicated_writes: false,
            allow_unread_settings: false,
            acknowledged: None,
        }
    }

    /// The acknowledged mode to admit `group` under, as admit.lua takes it: the replicas its
    /// master has now (on), 0 (off), or `None` (kept as it is).
    pub(super) fn acked_for(
        &self,
        group: &str,
        settings: &Result<GroupSettings, String>,
    ) -> Result<Option<u32>, AdmitRefusal> {
        match (self.acknowledged, settings) {
            (None, _) => Ok(None),
            (Some(false), _) => Ok(Some(0)),
            (Some(true), Err(reason)) => Err(AdmitRefusal::SettingsUnread {
                group: group.to_string(),
                reason: reason.clone(),
            }),
            (Some(true), Ok(settings)) => match settings.primaries.as_slice() {
                [primary] if primary.settings.is_cluster() => {
                    Err(AdmitRefusal::AcknowledgedCluster {
                        group: group.to_string(),
                    })
                }
                [primary] if primary.settings.replica_count > 0 => Ok(Some(
                    u32::try_from(primary.settings.replica_count).unwrap_or(u32::MAX),
                )),
                [_] => Err(AdmitRefusal::NoReplicas {
                    group: group.to_string(),
                }),
                _ => Err(AdmitRefusal::AcknowledgedCluster {
                    group: group.to_string(),
                }),
            },
        }
    }

    /// The write window to admit `group` under, from what its masters run (or why they
    /// cannot be read), or the refusal. In acknowledged mode an old master cut off from its
    /// replicas gets no vote counted, so writes it takes without them are no risk.
    pub(super) fn window_for(
        &self,
        group: &str,
        settings: Result<GroupSettings, String>,
    ) -> Result<u64, AdmitRefusal> {
        let settings = match (settings, self.write_window_ms) {
            (Ok(settings), _) => settings,
            (Err(_), Some(window)) if self.allow_unread_settings => return Ok(window),
            (Err(reason), _) => {
                return Err(AdmitRefusal::SettingsUnread {
                    group: group.to_string(),
                    reason,
                });
            }
        };
        if let Some((primary, setting)) = settings.unreplicated()
            && !self.allow_unreplicated_writes
            && self.acknowledged != Some(true)
        {
            return Err(AdmitRefusal::UnreplicatedWrites {
                group: group.to_string(),
                primary: primary.to_string(),
                setting,
            });
        }
        let Some(window) = self.write_window_ms else {
            return Ok(settings.needed_window_ms());
        };
        let short = settings
            .bounds()
            .into_iter()
            .filter(|(_, bound)| bound.needed_ms > window)
            .max_by_key(|(_, bound)| bound.needed_ms);
        match short {
            Some((primary, bound)) if !self.allow_short_window => Err(AdmitRefusal::ShortWindow {
                group: group.to_string(),
                primary: primary.to_string(),
                setting: bound.setting,
                value: bound.value,
                needed_ms: bound.needed_ms,
                window_ms: window,
            }),
            _ => Ok(window),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::health::{PrimarySettings, ReplicaSetting, WriteSettings};

    /// One master at `m:1` running `pairs`.
    fn settings(pairs: &[(&str, &str)], replicas: bool) -> Result<GroupSettings, String> {
        let config: Vec<(String, String)> = pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect();
        Ok(GroupSettings {
            primaries: vec![PrimarySettings {
                primary: "m:1".to_string(),
                settings: WriteSettings::read(&config, usize::from(replicas)),
            }],
        })
    }

    const LAG_10: &[(&str, &str)] = &[
        ("min-replicas-to-write", "1"),
        ("min-replicas-max-lag", "10"),
        ("cluster-enabled", "no"),
    ];

    #[test]
    fn a_window_left_out_is_computed_from_the_weakest_setting_of_the_masters() {
        let options = AdmitOptions::new(60_000);
        assert_eq!(options.window_for("g1", settings(LAG_10, true)), Ok(12_000));
        // Without replicas the lag bounds nothing.
        assert_eq!(options.window_for("g1", settings(LAG_10, false)), Ok(0));
        let cluster = [
            ("min-replicas-to-write", "1"),
            ("min-replicas-max-lag", "1"),
            ("cluster-enabled", "yes"),
            ("cluster-node-timeout", "15000"),
        ];
        assert_eq!(
            options.window_for("g1", settings(&cluster, true)),
            Ok(16_000)
        );
    }

    #[test]
    fn a_short_window_is_refused_naming_the_setting_unless_its_own_escape_is_taken() {
        let short = AdmitOptions {
            write_window_ms: Some(5_000),
            ..AdmitOptions::new(60_000)
        };
        let refused = short.window_for("g2", settings(LAG_10, true));
        assert_eq!(
            refused,
            Err(AdmitRefusal::ShortWindow {
                group: "g2".into(),
                primary: "m:1".into(),
                setting: crate::engine::health::WindowSetting::MinReplicasMaxLag,
                value: 10,
                needed_ms: 12_000,
                window_ms: 5_000,
            })
        );
        let text = refused
            .err()
            .map(|refusal| refusal.to_string())
            .unwrap_or_default();
        assert!(text.starts_with("g2: min-replicas-max-lag 10 s"), "{text}");
        let other_escapes = AdmitOptions {
            allow_unreplicated_writes: true,
            allow_unread_settings: true,
            ..short.clone()
        };
        assert!(
            other_escapes
                .window_for("g2", settings(LAG_10, true))
                .is_err()
        );
        let allowed = AdmitOptions {
            allow_short_window: true,
            ..short
        };
        assert_eq!(allowed.window_for("g2", settings(LAG_10, true)), Ok(5_000));
    }

    #[test]
    fn replicas_that_writes_do_not_wait_for_are_refused_unless_their_own_escape_is_taken() {
        let off = [
            ("min-replicas-to-write", "0"),
            ("min-replicas-max-lag", "10"),
        ];
        // A lag of 0 turns min-replicas-to-write off too.
        let no_lag = [
            ("min-replicas-to-write", "1"),
            ("min-replicas-max-lag", "0"),
        ];
        for (pairs, setting) in [
            (&off[..], ReplicaSetting::MinReplicasToWrite),
            (&no_lag[..], ReplicaSetting::MinReplicasMaxLag),
        ] {
            let options = AdmitOptions {
                write_window_ms: Some(60_000),
                allow_short_window: true,
                allow_unread_settings: true,
                ..AdmitOptions::new(60_000)
            };
            assert_eq!(
                options.window_for("g3", settings(pairs, true)),
                Err(AdmitRefusal::UnreplicatedWrites {
                    group: "g3".into(),
                    primary: "m:1".into(),
                    setting
                })
            );
            let allowed = AdmitOptions {
                allow_unreplicated_writes: true,
                ..options
            };
            assert_eq!(allowed.window_for("g3", settings(pairs, true)), Ok(60_000));
        }
    }

    #[test]
    fn unread_settings_are_refused_unless_allowed_with_a_window_of_the_operators() {
        let unread = || Err("CONFIG GET: NOPERM".to_string());
        let options = AdmitOptions::new(60_000);
        assert!(matches!(
            options.window_for("g4", unread()),
            Err(AdmitRefusal::SettingsUnread { .. })
        ));
        let no_window = AdmitOptions {
            allow_unread_settings: true,
            ..options.clone()
        };
        assert!(no_window.window_for("g4", unread()).is_err());
        let allowed = AdmitOptions {
            write_window_ms: Some(12_000),
            ..no_window
        };
        assert_eq!(allowed.window_for("g4", unread()), Ok(12_000));
    }
}
