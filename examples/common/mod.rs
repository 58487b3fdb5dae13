//! How the examples find the topology, the way the `quorumlock` command does: a file named
//! as the first argument, else `QUORUMLOCK_CONFIG`, else `./quorumlock.toml`, else the lab
//! that `quorumlock lab up` keeps running in `QUORUMLOCK_LAB_DIR` (default `.quorumlock/lab`).

use std::path::{Path, PathBuf};

use quorumlock::Topology;
use quorumlock::lab::Lab;

pub fn topology() -> Result<Topology, Box<dyn std::error::Error>> {
    let named = std::env::args_os()
        .nth(1)
        .or_else(|| std::env::var_os("QUORUMLOCK_CONFIG"));
    let path = match named {
        Some(path) => PathBuf::from(path),
        None if Path::new("quorumlock.toml").exists() => PathBuf::from("quorumlock.toml"),
        None => {
            let dir = std::env::var_os("QUORUMLOCK_LAB_DIR").unwrap_or(".quorumlock/lab".into());
            // Fails with "no lab in ...; start one with `quorumlock lab up`" when none runs.
            Lab::open(Path::new(&dir))?.config_path()
        }
    };
    // Secrets from files or variables, and the QUORUMLOCK_* overrides, as the command reads them.
    Ok(Topology::from_file(&path)?.with_env()?)
}
