//! The MCP server on Cluster groups: the real `quorumlock serve` binary over stdio, rmcp's
//! real client, and a lab whose groups are Redis Clusters. The lock tools work as on
//! Sentinel groups; a set of several resources is refused naming `resources`, and a listing
//! lists the locks held on Cluster groups.

use crate::common;
use crate::mcp_support;

use common::{start_lab, temp_dir};
use mcp_support::*;
use quorumlock::lab::{ClusterShape, LabSpec};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_tools_work_on_cluster_groups() {
    let dir = temp_dir();
    let lab = start_lab(LabSpec {
        groups: 3,
        sentinels: 0,
        replicas: 0,
        cluster: Some(ClusterShape { shards: 2 }),
        ..LabSpec::new(dir.path())
    })
    .await;
    let server = stdio_server(&lab.config_path(), &[]).await;
    let client = &server.client;

    let granted = ok(
        client,
        "acquire_lock",
        json!({"resource": "mcp:}x", "ttl_ms": 20000, "owner": "agent-1", "purpose": "cluster test"}),
    )
    .await;
    assert_eq!(granted["acquired"], json!(true), "{granted}");
    let token = str_of(&granted, "token").to_string();
    let fence = u64_of(&granted, "fencing_token");
    assert!(held(client, "mcp:}x").await);
    let status = ok(client, "lock_status", json!({"resource": "mcp:}x"})).await;
    assert_eq!(status["holder"]["owner"], json!("agent-1"), "{status}");

    let renewed = ok(
        client,
        "extend_lock",
        json!({"resource": "mcp:}x", "token": token, "ttl_ms": 20000}),
    )
    .await;
    assert_eq!(renewed["extended"], json!(true), "{renewed}");
    let released = release(client, "mcp:}x", &token).await;
    assert_eq!(released["released"], json!(true), "{released}");
    assert!(!held(client, "mcp:}x").await);
    let again = ok(
        client,
        "acquire_lock",
        json!({"resource": "mcp:}x", "ttl_ms": 20000}),
    )
    .await;
    assert!(u64_of(&again, "fencing_token") > fence, "{again}");
    release(client, "mcp:}x", str_of(&again, "token")).await;

    let (set, error) = tool_error_of(
        client,
        "acquire_lock",
        json!({"resources": ["mcp:a", "mcp:b"], "ttl_ms": 20000}),
    )
    .await;
    assert_eq!(
        error,
        json!({"kind": "invalid_input", "field": "resources"}),
        "{set}"
    );
    assert!(
        set.contains("resources") && set.contains("Redis Cluster"),
        "{set}"
    );
    let listed = ok(
        client,
        "acquire_lock",
        json!({"resource": "mcp:listed", "ttl_ms": 20000, "owner": "agent-2"}),
    )
    .await;
    let listing = ok(client, "list_locks", json!({"prefix": "mcp:"})).await;
    let locks = listing["locks"].as_array().expect("locks");
    assert_eq!(locks.len(), 1, "{listing}");
    assert_eq!(locks[0]["resource"], json!("mcp:listed"), "{listing}");
    assert_eq!(locks[0]["owner"], json!("agent-2"), "{listing}");
    release(client, "mcp:listed", str_of(&listed, "token")).await;

    server.close().await;
    drop(lab);
}
