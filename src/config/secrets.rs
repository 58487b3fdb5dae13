//! Passwords kept out of the topology file. Each secret of a group (the master's password,
//! the Sentinels' password) comes from exactly one of three keys: inline (`password`), a file
//! (`password_file`) or an environment variable (`password_env`). Files and variables are
//! read by one explicit call, [`Topology::resolve_secrets`], never while parsing.

use std::path::{Path, PathBuf};

use super::{ConfigError, GroupConfig, Topology, invalid};

/// One secret's three possible sources, as the keys of a group hold them.
struct SecretKeys<'g> {
    /// The inline key's name (`password` or `sentinel_password`); the others add `_file`
    /// and `_env`.
    name: &'static str,
    inline: &'g Option<String>,
    file: &'g Option<PathBuf>,
    env: &'g Option<String>,
}

impl GroupConfig {
    fn secret_keys(&self) -> [SecretKeys<'_>; 2] {
        [
            SecretKeys {
                name: "password",
                inline: &self.password,
                file: &self.password_file,
                env: &self.password_env,
            },
            SecretKeys {
                name: "sentinel_password",
                inline: &self.sentinel_password,
                file: &self.sentinel_password_file,
                env: &self.sentinel_password_env,
            },
        ]
    }

    /// At most one source per secret, and no empty file path or variable name.
    pub(super) fn check_secret_sources(&self, index: usize) -> Result<(), ConfigError> {
        for keys in self.secret_keys() {
            let given = [
                keys.inline.is_some(),
                keys.file.is_some(),
                keys.env.is_some(),
            ];
            if given.iter().filter(|set| **set).count() > 1 {
                let named = [
                    keys.name.to_string(),
                    format!("{}_file", keys.name),
                    format!("{}_env", keys.name),
                ]
                .into_iter()
                .zip(given)
                .filter_map(|(key, set)| set.then_some(format!("`{key}`")))
                .collect::<Vec<_>>()
                .join(" and ");
                return Err(invalid(
                    format!("groups[{index}].{}", keys.name),
                    format!(
                        "{named} are set together: give the secret one way (inline, from a file, or from an environment variable)"
                    ),
                ));
            }
            if keys
                .file
                .as_ref()
                .is_some_and(|path| path.as_os_str().is_empty())
            {
                return Err(invalid(
                    format!("groups[{index}].{}_file", keys.name),
                    "must be the path of a file holding the secret",
                ));
            }
            if keys.env.as_ref().is_some_and(|name| !valid_env_name(name)) {
                return Err(invalid(
                    format!("groups[{index}].{}_env", keys.name),
                    "must be the name of an environment variable (letters, digits, underscores)",
                ));
            }
        }
        Ok(())
    }
}

fn valid_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Reads a secret file; a trailing newline (as editors and `echo` write) is not part of it.
fn read_secret_file(path: &Path, key: &str) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| {
        invalid(
            key,
            format!(
                "cannot read {}: {error}; check the path and that this user may read it",
                path.display()
            ),
        )
    })?;
    let secret = text.strip_suffix('\n').unwrap_or(&text);
    let secret = secret.strip_suffix('\r').unwrap_or(secret);
    if secret.is_empty() {
        return Err(invalid(key, format!("{} is empty", path.display())));
    }
    Ok(secret.to_string())
}

/// Reads one secret from its file or variable; `None` when it is inline or absent.
fn resolve(
    keys: &SecretKeys<'_>,
    index: usize,
    lookup: &impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, ConfigError> {
    if let Some(path) = keys.file {
        let key = format!("groups[{index}].{}_file", keys.name);
        return read_secret_file(path, &key).map(Some);
    }
    if let Some(name) = keys.env {
        let key = format!("groups[{index}].{}_env", keys.name);
        return match lookup(name) {
            Some(secret) if !secret.is_empty() => Ok(Some(secret)),
            Some(_) => Err(invalid(key, format!("the variable {name} is empty"))),
            None => Err(invalid(
                key,
                format!("the variable {name} is not set in this process's environment"),
            )),
        };
    }
    Ok(None)
}

impl Topology {
    /// Reads every secret named by a `*_file` key from its file and every `*_env` key through
    /// `lookup` (pass `|name| std::env::var(name).ok()` for the process environment), and puts
    /// it where an inline one would be. Errors name the key whose file or variable is
    /// missing or empty. Until this runs, [`Topology::validate`] (and so connecting) refuses a
    /// topology that names such a secret.
    pub fn resolve_secrets(
        &mut self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        self.check()?;
        for (index, group) in self.groups.iter_mut().enumerate() {
            let [master, sentinel] = group.secret_keys();
            let master = resolve(&master, index, &lookup)?;
            let sentinel = resolve(&sentinel, index, &lookup)?;
            if let Some(secret) = master {
                group.password = Some(secret);
                group.password_file = None;
                group.password_env = None;
            }
            if let Some(secret) = sentinel {
                group.sentinel_password = Some(secret);
                group.sentinel_password_file = None;
                group.sentinel_password_env = None;
            }
        }
        Ok(())
    }

    /// True while a `*_file` or `*_env` secret has not been read.
    pub(super) fn check_secrets_resolved(&self) -> Result<(), ConfigError> {
        for (index, group) in self.groups.iter().enumerate() {
            for keys in group.secret_keys() {
                let unread = match (keys.file, keys.env) {
                    (Some(_), _) => "_file",
                    (None, Some(_)) => "_env",
                    (None, None) => continue,
                };
                return Err(invalid(
                    format!("groups[{index}].{}{unread}", keys.name),
                    "names a secret that was not read: call Topology::resolve_secrets or Topology::with_env before connecting (the quorumlock command does)",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(extra: &str) -> String {
        format!("[[groups]]\nname = \"g1\"\naddress = \"127.0.0.1:6379\"\n{extra}")
    }

    #[test]
    fn a_password_from_the_environment_is_read_only_when_asked() {
        let mut topology =
            Topology::from_toml(&group("password_env = \"G1_PASSWORD\"")).expect("valid");
        assert_eq!(topology.groups[0].password, None);
        let unread = topology.validate().expect_err("unread secret");
        assert!(
            unread.to_string().contains("groups[0].password_env"),
            "{unread}"
        );
        topology
            .resolve_secrets(|name| (name == "G1_PASSWORD").then(|| "s3cret".into()))
            .expect("resolved");
        assert_eq!(topology.groups[0].password.as_deref(), Some("s3cret"));
        topology.validate().expect("resolved topology is valid");
    }

    #[test]
    fn a_password_file_loses_its_trailing_newline() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("sentinel.secret");
        std::fs::write(&path, "pa ss\n").expect("write");
        let text = group(&format!(
            "sentinel_password_file = {:?}",
            path.display().to_string()
        ));
        let mut topology = Topology::from_toml(&text).expect("valid");
        topology.resolve_secrets(|_| None).expect("resolved");
        assert_eq!(
            topology.groups[0].sentinel_password.as_deref(),
            Some("pa ss")
        );
    }

    #[test]
    fn secret_errors_name_the_key() {
        let cases = [
            (
                "password = \"x\"\npassword_env = \"P\"",
                "groups[0].password",
            ),
            (
                "sentinel_password_file = \"/x\"\nsentinel_password_env = \"P\"",
                "groups[0].sentinel_password",
            ),
            ("password_env = \"1BAD\"", "groups[0].password_env"),
            ("password_file = \"\"", "groups[0].password_file"),
        ];
        for (extra, key) in cases {
            let message = Topology::from_toml(&group(extra))
                .expect_err(extra)
                .to_string();
            assert!(message.contains(key), "{message:?} should name {key}");
        }
        let mut missing =
            Topology::from_toml(&group("password_env = \"UNSET_VAR\"")).expect("valid");
        let message = missing
            .resolve_secrets(|_| None)
            .expect_err("unset")
            .to_string();
        assert!(
            message.contains("groups[0].password_env") && message.contains("UNSET_VAR"),
            "{message}"
        );
        let mut absent =
            Topology::from_toml(&group("password_file = \"/no/such/secret\"")).expect("valid");
        let message = absent
            .resolve_secrets(|_| None)
            .expect_err("no file")
            .to_string();
        assert!(message.contains("groups[0].password_file"), "{message}");
    }
}
