//! Finding `redis-server`, and installing Debian's package when it is missing, so that the
//! demo and the test suite work on a fresh machine with one command each.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Serialises installs: parallel tests must not race for the dpkg lock.
static INSTALL: Mutex<()> = Mutex::new(());

/// Why no `redis-server` could be found or installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error(
        "redis-server not found on PATH and not installed ({reason}). Install it with `sudo apt-get install redis-server`, or point QUORUMLOCK_REDIS_SERVER at the binary"
    )]
    Missing { reason: String },
    #[error("`apt-get install redis-server` failed: {output}")]
    Failed { output: String },
}

/// The `redis-server` binary to run: `QUORUMLOCK_REDIS_SERVER`, else the one on PATH, else
/// Debian's package is installed with apt-get (as root, or through passwordless sudo) unless
/// `QUORUMLOCK_NO_INSTALL` is set.
pub fn redis_server() -> Result<PathBuf, InstallError> {
    if let Some(path) = std::env::var_os("QUORUMLOCK_REDIS_SERVER") {
        return Ok(PathBuf::from(path));
    }
    let _guard = INSTALL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(path) = on_path("redis-server") {
        return Ok(path);
    }
    if std::env::var_os("QUORUMLOCK_NO_INSTALL").is_some() {
        return Err(InstallError::Missing {
            reason: "QUORUMLOCK_NO_INSTALL is set".into(),
        });
    }
    let apt = apt_command()?;
    eprintln!("redis-server is missing: installing Debian's package with apt-get ...");
    if let Err(first) = apt_get(&apt, &["install", "-y", "-q", "redis-server"]) {
        // A fresh machine has no package lists yet.
        apt_get(&apt, &["update", "-q"]).map_err(|output| InstallError::Failed {
            output: format!("{first}\n{output}"),
        })?;
        apt_get(&apt, &["install", "-y", "-q", "redis-server"])
            .map_err(|output| InstallError::Failed { output })?;
    }
    on_path("redis-server").ok_or_else(|| InstallError::Missing {
        reason: "the package installed, but redis-server is still not on PATH".into(),
    })
}

fn on_path(binary: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join(binary))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// `apt-get` as root, or through sudo when that needs no password.
fn apt_command() -> Result<Vec<String>, InstallError> {
    if on_path("apt-get").is_none() {
        return Err(InstallError::Missing {
            reason: "apt-get is not available on this system".into(),
        });
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return Ok(vec!["apt-get".into()]);
    }
    let sudo_works = Command::new("sudo")
        .args(["-n", "true"])
        .output()
        .is_ok_and(|output| output.status.success());
    if sudo_works {
        return Ok(vec!["sudo".into(), "-n".into(), "apt-get".into()]);
    }
    Err(InstallError::Missing {
        reason: "installing needs root or passwordless sudo".into(),
    })
}

fn apt_get(apt: &[String], args: &[&str]) -> Result<(), String> {
    let output = Command::new(&apt[0])
        .args(&apt[1..])
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .map_err(|error| format!("cannot run {}: {error}", apt.join(" ")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} {} exited with {}: {}",
            apt.join(" "),
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}
