//! The Python package (python/) as a user gets it: `pip install` of the folder builds the
//! wheel, then its pytest suite runs against real labs that the `quorumlock` binary starts
//! (`quorumlock lab up`) and stops by PID (`quorumlock lab down`), and `mypy --strict` checks
//! the package and the example that uses it.
//!
//! A virtualenv under target/tmp gets maturin, pytest and mypy from PyPI once, and again
//! when python/requirements-test.txt changes. The wheel is built once per run, by that
//! maturin without build isolation (nothing else is downloaded), in the dev profile and in
//! this build's target directory, so the engine's dependencies compiled for the tests are
//! not compiled again where their features agree. Only a machine without python3 skips.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_quorumlock");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const TMP: &str = env!("CARGO_TARGET_TMPDIR");
/// A pytest or mypy run that has not finished by then is killed and the test fails.
const RUN_LIMIT: Duration = Duration::from_secs(900);

struct Venv {
    dir: PathBuf,
    python: PathBuf,
}

impl Venv {
    /// PATH with the virtualenv's scripts first: the build backend calls `maturin` by name.
    fn path_var(&self) -> std::ffi::OsString {
        let mut paths = vec![self.dir.join("bin")];
        if let Some(path) = std::env::var_os("PATH") {
            paths.extend(std::env::split_paths(&path));
        }
        std::env::join_paths(paths).expect("PATH entries join")
    }
}

/// The virtualenv with the package installed, prepared once for every test of this binary;
/// None (with the reason printed) when python3 is absent.
fn installed() -> Option<&'static Venv> {
    static VENV: OnceLock<Option<Venv>> = OnceLock::new();
    VENV.get_or_init(prepare).as_ref()
}

fn run(command: &mut Command, what: &str) {
    let started = Instant::now();
    let output = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("{what}: {:.1} s", started.elapsed().as_secs_f64());
}

fn prepare() -> Option<Venv> {
    match Command::new("python3").arg("--version").output() {
        Ok(output) if output.status.success() => {}
        Ok(output) => panic!("python3 --version failed: {output:?}"),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("SKIPPED: python3 is not installed, so the Python package is not tested");
            return None;
        }
        Err(error) => panic!("cannot run python3: {error}"),
    }
    let requirements = Path::new(ROOT).join("python/requirements-test.txt");
    let wanted = std::fs::read_to_string(&requirements).expect("read requirements-test.txt");
    let dir = Path::new(TMP).join("python-package");
    let venv = Venv {
        python: dir.join("bin/python"),
        dir,
    };
    let stamp = venv.dir.join("requirements-test.txt");
    if !venv.python.exists() || std::fs::read_to_string(&stamp).ok().as_deref() != Some(&wanted) {
        if venv.dir.exists() {
            std::fs::remove_dir_all(&venv.dir).expect("remove the outdated virtualenv");
        }
        run(
            Command::new("python3").args(["-m", "venv"]).arg(&venv.dir),
            "python3 -m venv",
        );
        run(
            Command::new(&venv.python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                ])
                .arg("-r")
                .arg(&requirements),
            "pip install -r python/requirements-test.txt",
        );
        std::fs::write(&stamp, wanted).expect("write the requirements stamp");
    }
    // This build's target directory (target/tmp's parent), so the build lands beside the
    // tests' own and reuses what it can.
    let target = Path::new(TMP)
        .parent()
        .expect("CARGO_TARGET_TMPDIR is inside the target directory");
    run(
        Command::new(&venv.python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-build-isolation",
                "--no-deps",
                "--force-reinstall",
            ])
            .arg(Path::new(ROOT).join("python"))
            .env("PATH", venv.path_var())
            .env("CARGO_TARGET_DIR", target)
            .env("MATURIN_PEP517_ARGS", "--profile dev"),
        "pip install ./python (builds the wheel)",
    );
    Some(venv)
}

/// Runs the virtualenv's python with `args` from target/tmp (so that python/ itself is not
/// on the import path: the installed package is tested); prints its output and returns
/// whether it succeeded.
async fn python(venv: &Venv, args: &[&str], what: &str) -> bool {
    let started = Instant::now();
    let mut command = tokio::process::Command::new(&venv.python);
    command
        .args(args)
        .current_dir(TMP)
        .env("PATH", venv.path_var())
        .env("QUORUMLOCK_BIN", BIN)
        // No bytecode caches in the source tree.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(RUN_LIMIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("{what} still ran after {RUN_LIMIT:?}; killed"))
        .unwrap_or_else(|e| panic!("run {what}: {e}"));
    eprintln!(
        "{what} {} in {:.1} s\n--- stdout\n{}--- stderr\n{}",
        output.status,
        started.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output.status.success()
}

#[tokio::test]
async fn the_package_installs_and_pytest_passes_on_real_labs() {
    let Some(venv) = installed() else {
        return;
    };
    let tests = format!("{ROOT}/python/tests");
    assert!(
        python(
            venv,
            &["-m", "pytest", "-p", "no:cacheprovider", "-q", &tests],
            "pytest python/tests",
        )
        .await,
        "the Python package's tests failed (output above)"
    );
}

#[tokio::test]
async fn mypy_strict_passes_on_the_package() {
    let Some(venv) = installed() else {
        return;
    };
    let cache = format!("{TMP}/mypy-cache");
    let example = format!("{ROOT}/examples/python/fenced_write.py");
    let tests = format!("{ROOT}/python/tests");
    for (target, what) in [
        (vec!["-p", "quorumlock"], "mypy --strict -p quorumlock"),
        (vec![example.as_str()], "mypy --strict fenced_write.py"),
        (vec![tests.as_str()], "mypy --strict python/tests"),
    ] {
        let mut args = vec!["-m", "mypy", "--strict", "--cache-dir", &cache];
        args.extend(target);
        assert!(
            python(venv, &args, what).await,
            "{what} found problems (output above)"
        );
    }
}
