//! The deployment files agree with the server. The compose deployment has the topology the
//! server loads: the same groups, Sentinel service names, hosts and ports. The systemd unit
//! parses, runs a subcommand with options the binary has, hands it the token and config as
//! credentials under its hardening, and passes `systemd-analyze verify` where that exists. The
//! image runs as an unprivileged user, caches dependencies for every target the manifest
//! declares, and its health check passes against a real server's `/readyz` while a majority
//! votes and fails without one or where nothing listens. Every Redis and Sentinel has a
//! health check, and the README's steps through the `quorumlock-admin` service run, with that
//! service's arguments, against a lab. (No container engine runs here, so the image itself
//! is not built.)

use crate::common;
use crate::mcp_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use quorumlock::Endpoint;
use quorumlock::Topology;
use yaml_rust2::{Yaml, YamlLoader};

fn compose_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/compose"))
}

fn read(name: &str) -> String {
    std::fs::read_to_string(compose_dir().join(name))
        .unwrap_or_else(|e| panic!("read compose/{name}: {e}"))
}

fn strings(node: &Yaml) -> Vec<String> {
    node.as_vec()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn compose_file_matches_the_servers_topology() {
    let topology =
        Topology::from_toml(&read("quorumlock.toml")).expect("compose/quorumlock.toml is valid");
    let documents = YamlLoader::load_from_str(&read("docker-compose.yml")).expect("valid YAML");
    let services = &documents[0]["services"];
    let service_names: BTreeSet<String> = services
        .as_hash()
        .expect("services")
        .keys()
        .filter_map(|k| k.as_str().map(str::to_string))
        .collect();

    // Sentinel's own config: which services it monitors, where, on which port.
    let sentinel_conf = read("sentinel.conf");
    let sentinel_port = sentinel_conf
        .lines()
        .find_map(|l| l.strip_prefix("port "))
        .and_then(|p| p.trim().parse::<u16>().ok())
        .expect("sentinel.conf sets a port");
    let monitored: BTreeSet<(String, String, u16)> = sentinel_conf
        .lines()
        .filter_map(|l| l.strip_prefix("sentinel monitor "))
        .map(|rest| {
            let fields: Vec<&str> = rest.split_whitespace().collect();
            (
                fields[0].to_string(),
                fields[1].to_string(),
                fields[2].parse().expect("port"),
            )
        })
        .collect();

    assert_eq!(topology.groups.len(), 5);
    assert_eq!(
        monitored.len(),
        topology.groups.len(),
        "sentinel.conf monitors every group once"
    );
    for (index, group) in topology.groups.iter().enumerate() {
        let Endpoint::Sentinel { sentinels, service } = group.endpoint_at(index).expect("endpoint")
        else {
            panic!("{} should be Sentinel-watched", group.name);
        };
        let (_, master_host, master_port) = monitored
            .iter()
            .find(|(name, _, _)| *name == service)
            .unwrap_or_else(|| panic!("sentinel.conf does not monitor service {service}"));
        assert!(
            service_names.contains(master_host),
            "no compose service {master_host}"
        );
        assert_eq!(*master_port, 6379);
        let replica = format!("{}-replica", group.name);
        let command = strings(&services[replica.as_str()]["command"]).join(" ");
        assert!(
            command.contains(&format!("--replicaof {master_host} 6379")),
            "{replica}: {command}"
        );
        // docs/safety.md: no master evicts keys, and a master cut off from its replica stops
        // taking writes within the policy's write window.
        for node in [master_host.as_str(), replica.as_str()] {
            let command = strings(&services[node]["command"]).join(" ");
            for setting in [
                "--maxmemory-policy noeviction",
                "--min-replicas-to-write 1",
                "--min-replicas-max-lag 10",
            ] {
                assert!(
                    command.contains(setting),
                    "{node} lacks {setting}: {command}"
                );
            }
        }
        for (host, port) in sentinels {
            assert!(
                service_names.contains(&host),
                "topology names Sentinel {host}, compose has no such service"
            );
            assert_eq!(
                port, sentinel_port,
                "Sentinel port in topology and sentinel.conf"
            );
        }
    }

    // The MCP server loads exactly this file and gets its token from the env file.
    let mcp = &services["quorumlock-mcp"];
    let command = strings(&mcp["command"]);
    let config_at = command
        .iter()
        .position(|a| a == "--config")
        .map(|i| command[i + 1].clone())
        .expect("--config");
    assert!(strings(&mcp["volumes"]).contains(&format!("./quorumlock.toml:{config_at}:ro")));
    assert!(command.iter().any(|a| a == "--http"));
    assert_eq!(strings(&mcp["env_file"]), ["quorumlock.env"]);
    assert!(read("quorumlock.env.example").contains("QUORUMLOCK_MCP_TOKEN="));
}

// ---- The systemd unit and the container image.

const BIN: &str = env!("CARGO_BIN_EXE_quorumlock");

/// `quorumlock ARGS --help`.
fn help(args: &[&str]) -> String {
    let output = std::process::Command::new(BIN)
        .args(args)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("run quorumlock {args:?} --help: {e}"));
    assert!(output.status.success(), "quorumlock {args:?} --help");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Whether `help` lists the long option `--name`.
fn lists_option(help: &str, name: &str) -> bool {
    help.lines().any(|line| {
        line.trim_start().starts_with('-')
            && line
                .split_whitespace()
                .any(|word| word.trim_end_matches(',') == format!("--{name}"))
    })
}

/// A systemd unit: each section's keys, every value of a key in order.
type Unit = BTreeMap<String, BTreeMap<String, Vec<String>>>;

fn parse_unit(text: &str) -> Result<Unit, String> {
    let mut unit = Unit::new();
    let mut section: Option<String> = None;
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.to_string());
            unit.entry(name.to_string()).or_default();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!(
                "line {}: neither a section nor key=value: {line}",
                index + 1
            ));
        };
        let Some(section) = &section else {
            return Err(format!("line {}: a key before any section", index + 1));
        };
        unit.entry(section.clone())
            .or_default()
            .entry(key.trim().to_string())
            .or_default()
            .push(value.trim().to_string());
    }
    Ok(unit)
}

/// The one value of `key` in `section`.
fn one<'u>(unit: &'u Unit, section: &str, key: &str) -> &'u str {
    match unit
        .get(section)
        .and_then(|keys| keys.get(key))
        .map(Vec::as_slice)
    {
        Some([value]) => value,
        other => panic!("[{section}] {key}: expected one value, found {other:?}"),
    }
}

/// The port of an `--http HOST:PORT` argument.
fn http_port(args: &[String]) -> u16 {
    let listen = args
        .iter()
        .position(|a| a == "--http")
        .and_then(|i| args.get(i + 1))
        .expect("--http ADDR");
    listen
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in --http {listen}"))
}

#[test]
fn the_systemd_unit_runs_under_its_hardening() {
    let text = read("quorumlock-mcp.service");
    let unit = parse_unit(&text).expect("the unit parses");
    for section in ["Unit", "Service", "Install"] {
        assert!(unit.contains_key(section), "no [{section}]");
    }
    assert_eq!(one(&unit, "Install", "WantedBy"), "multi-user.target");

    // ExecStart: the installed binary, global options, then `serve` and its options.
    let exec: Vec<String> = one(&unit, "Service", "ExecStart")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert!(
        exec[0].starts_with('/') && exec[0].ends_with("/quorumlock"),
        "{}",
        exec[0]
    );
    let serve_at = exec
        .iter()
        .position(|a| a == "serve")
        .expect("ExecStart runs serve");
    assert!(
        help(&[])
            .lines()
            .any(|l| l.trim_start().starts_with("serve "))
    );
    let (global, serve) = (help(&[]), help(&["serve"]));
    for (options, listing) in [
        (&exec[1..serve_at], &global),
        (&exec[serve_at + 1..], &serve),
    ] {
        for option in options.iter().filter_map(|a| a.strip_prefix("--")) {
            assert!(
                lists_option(listing, option),
                "ExecStart: no option --{option}"
            );
        }
    }

    // The token and the config come as credentials: every %d/NAME is loaded, and nothing
    // loaded goes unused.
    let credentials: BTreeSet<String> = unit["Service"]["LoadCredential"]
        .iter()
        .map(|c| {
            c.split_once(':')
                .expect("LoadCredential=NAME:PATH")
                .0
                .to_string()
        })
        .collect();
    let used: BTreeSet<String> = exec
        .iter()
        .filter_map(|a| a.strip_prefix("%d/"))
        .map(str::to_string)
        .collect();
    assert_eq!(credentials, used);
    let token_file = exec
        .iter()
        .position(|a| a == "--token-file")
        .map(|i| exec[i + 1].as_str());
    assert!(
        token_file.is_some_and(|f| f.starts_with("%d/")),
        "{token_file:?}"
    );

    // Hardening.
    let user = unit["Service"].get("User").map(|u| u[0].as_str());
    assert!(
        one(&unit, "Service", "DynamicUser") == "yes"
            || user.is_some_and(|u| u != "root" && u != "0"),
        "runs as an unprivileged user"
    );
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("CapabilityBoundingSet", ""),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
        ("MemoryDenyWriteExecute", "yes"),
    ] {
        assert_eq!(one(&unit, "Service", key), value, "[Service] {key}");
    }

    // The files the install steps name are in the repository, and the port is the compose
    // deployment's and the image's.
    let root = compose_dir().parent().expect("repository root");
    for word in text.split_whitespace() {
        if word.starts_with("compose/") {
            assert!(
                root.join(word).exists(),
                "the unit names {word}, which is missing"
            );
        }
    }
    let documents = YamlLoader::load_from_str(&read("docker-compose.yml")).expect("valid YAML");
    let mcp = strings(&documents[0]["services"]["quorumlock-mcp"]["command"]);
    assert_eq!(http_port(&exec), http_port(&mcp));
    assert!(read("Dockerfile").contains(&format!("EXPOSE {}", http_port(&exec))));

    // systemd's own check, where systemd-analyze exists, with the binary built here.
    let scratch = tempfile::tempdir().expect("temp dir");
    let copy = scratch.path().join("quorumlock-mcp.service");
    std::fs::write(&copy, text.replace(&exec[0], BIN)).expect("write the unit");
    match std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&copy)
        .output()
    {
        Ok(output) => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                output.status.success() && stderr.trim().is_empty(),
                "{stderr}"
            );
        }
        Err(error) => eprintln!("systemd-analyze verify not run: {error}"),
    }
}

/// A Dockerfile's instructions, continuation lines joined: (instruction, arguments).
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut joined = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                joined.push(std::mem::take(&mut current));
            }
        }
    }
    joined
        .into_iter()
        .map(|line| match line.split_once(char::is_whitespace) {
            Some((word, rest)) => (word.to_uppercase(), rest.trim().to_string()),
            None => (line.to_uppercase(), String::new()),
        })
        .collect()
}

#[tokio::test]
async fn the_image_runs_unprivileged_with_a_health_check() {
    let dockerfile = read("Dockerfile");
    let all = instructions(&dockerfile);
    let last_from = all
        .iter()
        .rposition(|(word, _)| word == "FROM")
        .expect("FROM");
    let runtime = &all[last_from..];
    let of = |name: &str| -> Vec<&str> {
        runtime
            .iter()
            .filter(|(word, _)| word == name)
            .map(|(_, rest)| rest.as_str())
            .collect()
    };

    // Not root.
    let user = *of("USER").last().expect("the image sets USER");
    let name = user.split(':').next().unwrap_or(user);
    assert!(!["root", "0"].contains(&name), "USER {user}");

    // The builder's Rust is the crate's rust-version, and the dependency layer stubs every
    // target the manifest declares (cargo refuses a manifest whose targets are missing).
    let manifest: toml::Table = toml::from_str(&read_root("Cargo.toml")).expect("Cargo.toml");
    let rust_version = manifest["package"]["rust-version"]
        .as_str()
        .expect("rust-version");
    assert!(
        dockerfile.contains(&format!("FROM rust:{rust_version}-")),
        "the build stage's Rust is not {rust_version}"
    );
    for (kind, folder) in [("bench", "benches"), ("example", "examples")] {
        for target in manifest
            .get(kind)
            .and_then(toml::Value::as_array)
            .into_iter()
            .flatten()
        {
            let stub = format!("{folder}/{}.rs", target["name"].as_str().expect("name"));
            assert!(
                dockerfile.contains(&stub),
                "no stub for {stub} in the dependency layer"
            );
        }
    }

    // The health check probes readiness on the port the image exposes: run it against a
    // real server over a lab (200), one whose groups do not answer (503), and a port where
    // nothing listens.
    let exposed = *of("EXPOSE").first().expect("EXPOSE");
    let check = *of("HEALTHCHECK").last().expect("HEALTHCHECK");
    let command = check
        .split_once("CMD")
        .map(|(_, command)| command.trim())
        .expect("HEALTHCHECK ... CMD");
    let argv: Vec<String> = serde_json::from_str(command).expect("HEALTHCHECK CMD in exec form");
    assert!(
        help(&["serve"]).contains("/readyz") && command.contains("/readyz"),
        "the health check probes /readyz"
    );
    assert!(command.contains(&format!("/{exposed}")), "{command}");
    let probe = |port: &str| {
        let argv: Vec<String> = argv
            .iter()
            .map(|a| a.replace(&format!("/{exposed}"), &format!("/{port}")))
            .collect();
        std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .expect("run the health check")
    };
    let port_of = |server: &mcp_support::HttpServer| {
        server
            .addr
            .rsplit_once(':')
            .expect("HOST:PORT")
            .1
            .to_string()
    };
    let fx = common::plain_lab().await;
    let ready = mcp_support::http_server(&fx.lab.config_path(), None, &[]).await;
    let healthy = probe(&port_of(&ready));
    assert!(healthy.status.success(), "health check failed: {healthy:?}");
    drop(ready);
    // compose/quorumlock.toml names hosts that only exist inside the compose network.
    let config = compose_dir().join("quorumlock.toml");
    let unready = mcp_support::http_server(&config, None, &[]).await;
    assert!(
        !probe(&port_of(&unready)).status.success(),
        "healthy without a quorum"
    );
    drop(unready);
    let unused = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    assert!(!probe(&unused.to_string()).status.success());

    // The build context leaves out build output and history.
    let ignored: Vec<String> = std::fs::read_to_string(compose_dir().join("../.dockerignore"))
        .expect("read .dockerignore")
        .lines()
        .map(|l| l.trim().trim_matches('/').to_string())
        .collect();
    for path in ["target", ".git", "compose/quorumlock.env"] {
        assert!(
            ignored.iter().any(|l| l == path),
            ".dockerignore lacks {path}"
        );
    }
}

fn read_root(name: &str) -> String {
    std::fs::read_to_string(compose_dir().join("..").join(name))
        .unwrap_or_else(|e| panic!("read {name}: {e}"))
}

/// A key of a compose service, set on the service itself or through its `<<` merge.
fn service_key<'y>(service: &'y Yaml, key: &str) -> &'y Yaml {
    let own = &service[key];
    if own.is_badvalue() {
        &service["<<"][key]
    } else {
        own
    }
}

#[test]
fn every_node_has_a_health_check_on_its_port() {
    let documents = YamlLoader::load_from_str(&read("docker-compose.yml")).expect("compose YAML");
    let services = documents[0]["services"].as_hash().expect("services");
    let mut checked = 0;
    for (name, service) in services {
        let name = name.as_str().expect("service name");
        let image = service_key(service, "image").as_str().unwrap_or_default();
        if !image.starts_with("redis:") {
            continue;
        }
        let test = strings(&service_key(service, "healthcheck")["test"]);
        let port = if name.starts_with("sentinel-") {
            "26379"
        } else {
            "6379"
        };
        assert_eq!(
            test,
            ["CMD", "redis-cli", "-p", port, "ping"],
            "{name} has no health check on {port}"
        );
        checked += 1;
    }
    assert_eq!(checked, 13, "five masters, five replicas, three Sentinels");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_first_lock_steps_run() {
    let readme = read("README.md");
    let steps = readme
        .split("## Run it")
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .expect("a sh block under Run it");
    let lines: Vec<&str> = steps
        .lines()
        .map(|line| line.split(" #").next().unwrap_or(line).trim())
        .filter(|line| !line.is_empty())
        .collect();
    let position = |prefix: &str| {
        lines
            .iter()
            .position(|line| line.starts_with(prefix))
            .unwrap_or_else(|| panic!("the steps lack `{prefix}`: {lines:?}"))
    };
    let up = position("docker compose up -d");
    let admit = position("docker compose run --rm quorumlock-admin");
    let ready = position("curl -s localhost:8848/readyz");
    let first_lock = position("docker compose run --rm quorumlock-admin acquire");
    assert!(
        up < admit && admit < ready && ready < first_lock,
        "{lines:?}"
    );
    assert!(lines[0].starts_with("cp quorumlock.env.example quorumlock.env"));

    // The service: the CLI with the deployment's config, admitting by default, never
    // started by `up`.
    let documents = YamlLoader::load_from_str(&read("docker-compose.yml")).expect("compose YAML");
    let service = &documents[0]["services"]["quorumlock-admin"];
    assert_eq!(strings(&service["profiles"]), ["admin"]);
    let entrypoint = strings(&service["entrypoint"]);
    assert_eq!(
        entrypoint,
        ["quorumlock", "--config", "/etc/quorumlock/quorumlock.toml"]
    );
    assert!(
        strings(&service["volumes"])
            .contains(&"./quorumlock.toml:/etc/quorumlock/quorumlock.toml:ro".to_string())
    );
    let default_command = strings(&service["command"]);
    assert_eq!(default_command.first().map(String::as_str), Some("admit"));

    // Each `run` step, as the container would run it, against a lab in place of the
    // compose network: the same arguments, the lab's config in place of the mounted one.
    let fx = common::plain_lab().await;
    let config = fx.lab.config_path();
    for line in &lines {
        let Some(rest) = line.strip_prefix("docker compose run --rm quorumlock-admin") else {
            continue;
        };
        let given: Vec<String> = rest.split_whitespace().map(str::to_string).collect();
        let args = if given.is_empty() {
            default_command.clone()
        } else {
            given
        };
        let output = tokio::process::Command::new(mcp_support::BIN)
            .arg("--config")
            .arg(&config)
            .args(&args)
            .env_remove("QUORUMLOCK_CONFIG")
            .output()
            .await
            .expect("run quorumlock");
        assert!(
            output.status.success(),
            "`{line}` failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let listed = fx.locks.list("demo:", 10).await.expect("list");
    assert!(
        listed
            .locks
            .iter()
            .any(|lock| lock.resource == "demo:first"),
        "the README's first lock is not held"
    );
}
