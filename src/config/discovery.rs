//! Where the topology file is found when no path is given: `QUORUMLOCK_CONFIG`, then
//! `./quorumlock.toml`, then the user's `$XDG_CONFIG_HOME/quorumlock/quorumlock.toml` (or
//! `~/.config/...`), then `/etc/quorumlock/quorumlock.toml`. The environment is read through a
//! lookup the caller passes, so the search is explicit and testable.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::ConfigError;

/// How the topology file in use was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfigSource {
    /// `--config FILE`.
    Flag,
    /// `--lab`: the config of the lab running in the lab directory.
    Lab,
    /// The `QUORUMLOCK_CONFIG` environment variable.
    Env,
    /// `./quorumlock.toml` in the working directory.
    WorkingDir,
    /// `$XDG_CONFIG_HOME/quorumlock/quorumlock.toml`, or `~/.config/quorumlock/quorumlock.toml`.
    User,
    /// `/etc/quorumlock/quorumlock.toml`.
    System,
    /// No file anywhere above: the config of a lab running in the lab directory.
    RunningLab,
}

impl ConfigSource {
    /// How an operator names this source.
    pub fn describe(self) -> &'static str {
        match self {
            ConfigSource::Flag => "--config",
            ConfigSource::Lab => "--lab",
            ConfigSource::Env => "QUORUMLOCK_CONFIG",
            ConfigSource::WorkingDir => "./quorumlock.toml",
            ConfigSource::User => "the user's config directory",
            ConfigSource::System => "/etc/quorumlock",
            ConfigSource::RunningLab => "the running lab",
        }
    }
}

/// The topology file in use, and how it was found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigLocation {
    pub path: PathBuf,
    pub source: ConfigSource,
}

impl std::fmt::Display for ConfigLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (from {})",
            self.path.display(),
            self.source.describe()
        )
    }
}

/// The system-wide topology file.
pub const SYSTEM_CONFIG: &str = "/etc/quorumlock/quorumlock.toml";

impl ConfigLocation {
    /// The file named by `QUORUMLOCK_CONFIG` (which must exist), else the first of
    /// `./quorumlock.toml`, the user's and the system's file that exists, else `None`.
    /// `env` reads the environment (pass `|name| std::env::var(name).ok()`).
    pub fn discover(env: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, ConfigError> {
        if let Some(path) = env("QUORUMLOCK_CONFIG").filter(|path| !path.is_empty()) {
            let path = PathBuf::from(path);
            if !path.is_file() {
                return Err(ConfigError::Read {
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "QUORUMLOCK_CONFIG names a file that does not exist",
                    ),
                    path,
                });
            }
            return Ok(Some(ConfigLocation {
                path,
                source: ConfigSource::Env,
            }));
        }
        Ok(Self::search_paths(&env)
            .into_iter()
            .find(|location| location.path.is_file()))
    }

    /// The files searched without `QUORUMLOCK_CONFIG`, in order.
    pub fn search_paths(env: &impl Fn(&str) -> Option<String>) -> Vec<Self> {
        let mut paths = vec![ConfigLocation {
            path: PathBuf::from("quorumlock.toml"),
            source: ConfigSource::WorkingDir,
        }];
        // XDG: a relative XDG_CONFIG_HOME is invalid and ignored.
        let user_dir = env("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|dir| dir.is_absolute())
            .or_else(|| {
                env("HOME")
                    .filter(|home| !home.is_empty())
                    .map(|home| Path::new(&home).join(".config"))
            });
        if let Some(dir) = user_dir {
            paths.push(ConfigLocation {
                path: dir.join("quorumlock").join("quorumlock.toml"),
                source: ConfigSource::User,
            });
        }
        paths.push(ConfigLocation {
            path: PathBuf::from(SYSTEM_CONFIG),
            source: ConfigSource::System,
        });
        paths
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_directory_follows_xdg_then_home() {
        let with_xdg = |name: &str| match name {
            "XDG_CONFIG_HOME" => Some("/xdg".to_string()),
            "HOME" => Some("/home/u".to_string()),
            _ => None,
        };
        let paths = ConfigLocation::search_paths(&with_xdg);
        assert_eq!(
            paths[1].path,
            PathBuf::from("/xdg/quorumlock/quorumlock.toml")
        );
        let relative_xdg = |name: &str| match name {
            "XDG_CONFIG_HOME" => Some("xdg".to_string()),
            "HOME" => Some("/home/u".to_string()),
            _ => None,
        };
        let paths = ConfigLocation::search_paths(&relative_xdg);
        assert_eq!(
            paths[1].path,
            PathBuf::from("/home/u/.config/quorumlock/quorumlock.toml")
        );
        assert_eq!(paths.last().map(|l| l.source), Some(ConfigSource::System));
    }

    #[test]
    fn a_missing_file_named_by_quorumlock_config_is_an_error() {
        let env = |name: &str| (name == "QUORUMLOCK_CONFIG").then(|| "/no/such.toml".to_string());
        let error = ConfigLocation::discover(env).expect_err("missing");
        assert!(error.to_string().contains("/no/such.toml"), "{error}");
    }
}
