//! The compose deployment agrees with the topology the server loads: the same groups, Sentinel
//! service names, hosts and ports. (No container engine runs here, so this reads the files.)

use std::collections::BTreeSet;
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
