//! Authentication and TLS end to end: labs whose nodes and Sentinels require a password or
//! speak TLS only, and the engine reaching them through the topology the lab writes.

use crate::common;

use std::time::Duration;

use common::{connect, fixture};
use quorumlock::{Error, Health, Locks, TlsSettings, Topology};

/// A short per-call timeout keeps the failing connects below quick; the lab is on loopback.
fn quick(topology: Topology) -> Topology {
    Topology {
        call_timeout_ms: 200,
        ..topology
    }
}

/// Acquire, inspect, check health and release through `locks`.
async fn serves_locks(locks: &Locks, resource: &str) -> Health {
    let lease = locks
        .acquire(resource)
        .ttl(Duration::from_secs(5))
        .owner("security-test")
        .await
        .expect("acquire");
    let status = locks.status(resource).await.expect("status");
    assert!(status.held, "{status:?}");
    assert_eq!(status.fencing_token, Some(lease.fencing_token()));
    let health = locks.health().await;
    assert!(health.quorum_available, "{health:?}");
    for group in &health.groups {
        assert!(group.reachable, "{group:?}");
        assert!(
            group.sentinels.iter().all(|view| view.error.is_none()),
            "every Sentinel must answer the health probe: {group:?}"
        );
        assert_eq!(group.sentinels_agree, Some(true), "{group:?}");
    }
    lease.release().await.expect("release");
    assert!(!locks.status(resource).await.expect("status").held);
    health
}

/// Acquiring through `topology` must fail as unavailable, naming every group and saying
/// `why`, without panics; health must say `why` for every group too.
async fn refused(topology: Topology, why: &str) {
    let names: Vec<String> = topology.groups.iter().map(|g| g.name.clone()).collect();
    let locks = connect(topology).await;
    let error = locks
        .acquire("refused")
        .ttl(Duration::from_secs(5))
        .await
        .expect_err("the groups must refuse this client");
    assert!(matches!(error, Error::Unavailable { .. }), "{error:?}");
    // The vote ends as soon as a majority is out of reach, so the message names at least the
    // groups that made it so.
    let message = error.to_string();
    let named = names.iter().filter(|name| message.contains(*name)).count();
    assert!(
        named > names.len() / 2,
        "{message} should name the failed groups"
    );
    let health = locks.health().await;
    assert!(!health.quorum_available);
    assert!(health.groups.iter().all(|group| !group.reachable));
    // Both say why, in words that name what to change.
    assert!(message.contains(why), "{message} should say `{why}`");
    for group in &health.groups {
        let error = group.error.as_deref().unwrap_or_default();
        assert!(
            error.contains(why),
            "{}: {error} should say `{why}`",
            group.group
        );
    }
    locks.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_lab_serves_and_refuses_a_wrong_password() {
    let fx = fixture(
        |mut spec| {
            spec.groups = 3;
            spec.password = Some("lab-secret".into());
            spec
        },
        quick,
    )
    .await;
    let written = Topology::from_file(fx.lab.config_path()).expect("lab topology");
    assert!(
        written.groups.iter().all(|group| {
            group.password.as_deref() == Some("lab-secret")
                && group.sentinel_password.as_deref() == Some("lab-secret")
        }),
        "the lab writes its password into the topology"
    );
    serves_locks(&fx.locks, "auth-resource").await;
    assert!(
        fx.lab.status().await.iter().all(|node| node.role.is_some()),
        "the lab's own client authenticates too"
    );

    let mut wrong = fx.topology.clone();
    for group in &mut wrong.groups {
        group.password = Some("not-the-password".into());
        group.sentinel_password = Some("not-the-password".into());
    }
    refused(wrong, "refuses the login (WRONGPASS").await;

    let mut anonymous = fx.topology.clone();
    for group in &mut anonymous.groups {
        group.password = None;
        group.sentinel_password = None;
    }
    refused(anonymous, "refuses the login (NOAUTH").await;
    fx.locks.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_lab_serves_locks_and_refuses_plain_clients() {
    let fx = fixture(
        |mut spec| {
            spec.groups = 3;
            spec.tls = true;
            spec
        },
        quick,
    )
    .await;
    let tls = fx
        .topology
        .tls
        .clone()
        .expect("a TLS lab writes a [tls] table");
    assert!(
        Topology::from_file(fx.lab.config_path())
            .expect("lab topology")
            .tls
            .is_some()
    );
    serves_locks(&fx.locks, "tls-resource").await;
    assert!(
        fx.lab.status().await.iter().all(|node| node.role.is_some()),
        "the lab's own client speaks TLS too"
    );

    // The server names checked can be pinned: the lab's certificate also covers localhost.
    let pinned = Topology {
        tls: Some(TlsSettings {
            server_name: Some("localhost".into()),
            ..tls.clone()
        }),
        ..fx.topology.clone()
    };
    let locks = connect(pinned).await;
    serves_locks(&locks, "pinned-resource").await;
    locks.close().await;

    // Plain TCP against TLS-only ports, and TLS without the client certificate the nodes
    // require, are both refused.
    refused(
        Topology {
            tls: None,
            ..fx.topology.clone()
        },
        "does it expect TLS",
    )
    .await;
    refused(
        Topology {
            tls: Some(TlsSettings {
                cert_file: None,
                key_file: None,
                ..tls.clone()
            }),
            ..fx.topology.clone()
        },
        "set tls.cert_file and tls.key_file",
    )
    .await;
    // A certificate checked against a name it does not carry is refused as well.
    refused(
        Topology {
            tls: Some(TlsSettings {
                server_name: Some("elsewhere.example".into()),
                ..tls
            }),
            ..fx.topology.clone()
        },
        "check tls.server_name",
    )
    .await;
    fx.locks.close().await;
}

#[test]
fn tls_errors_name_the_key() {
    let text = "[tls]\nca_file = \"/nonexistent/ca.pem\"\n[[groups]]\nname = \"g1\"\naddress = \"127.0.0.1:6379\"\n";
    let message = Topology::from_toml(text)
        .expect_err("missing CA")
        .to_string();
    assert!(
        message.contains("tls.ca_file") && message.contains("cannot read"),
        "{message}"
    );
    let text = "[tls]\ncert_file = \"/tmp/client.pem\"\n[[groups]]\nname = \"g1\"\naddress = \"127.0.0.1:6379\"\n";
    let message = Topology::from_toml(text).expect_err("no key").to_string();
    assert!(message.contains("tls.key_file"), "{message}");
}
