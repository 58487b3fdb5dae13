//! The MCP server end to end: the real `quorumlock serve` binary, rmcp's real clients over
//! stdio and streamable HTTP, and a lab of real redis-server groups started by each test.

use crate::common;
use crate::mcp_support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{eventually, plain_lab, released_channel, released_within, sentinel_lab};
use mcp_support::*;
use serde_json::{Value, json};

const TOKEN: &str = "test-token-0123456789abcdef";
/// Lets tests use TTLs short enough to watch a keepalive renew several times.
const LOW_MIN_TTL: [&str; 2] = ["--min-ttl-ms", "100"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_lock_grants_a_fence_or_names_the_holder() {
    tool_contract("acquire_lock", async |client, tool| {
        let description = tool.description.as_deref().unwrap_or_default();
        assert!(description.contains("fencing_token") && description.contains("retry_after_ms"));
        let schema = serde_json::to_value(&tool.input_schema).expect("schema");
        // `resource` or `resources`, exactly one: neither is required by the schema itself.
        assert!(schema.get("required").is_none(), "{schema}");
        assert_eq!(schema["properties"]["resource"]["type"], json!("string"));
        assert_eq!(schema["properties"]["resources"]["maxItems"], json!(64));
        assert_eq!(
            schema["properties"]["ttl_ms"]["default"],
            json!(15000),
            "{schema}"
        );

        // Granted.
        let started = chrono::Utc::now();
        let granted = acquire_contract_lock(client).await;
        assert_eq!(granted["acquired"], json!(true));
        assert_eq!(granted["resource"], json!("contract:a"));
        assert_eq!(granted["resources"], json!(["contract:a"]));
        let token = str_of(&granted, "token").to_string();
        assert!(
            token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit()),
            "{token}"
        );
        let fence = u64_of(&granted, "fencing_token");
        assert!(fence > 0);
        let validity = u64_of(&granted, "validity_ms");
        assert!(validity > 15_000 && validity <= 20_000, "{validity}");
        let expires =
            chrono::DateTime::parse_from_rfc3339(str_of(&granted, "expires_at")).expect("RFC 3339");
        let until = (expires.with_timezone(&chrono::Utc) - started).num_milliseconds();
        assert!(
            (15_000..=21_000).contains(&until),
            "expires_at is {until} ms away"
        );
        assert_eq!(granted["keepalive"], json!(false));
        let quorum = &granted["quorum"];
        assert_eq!(quorum["needed"], json!(3));
        assert!(u64_of(quorum, "granted") >= 3, "{quorum}");
        assert_eq!(quorum["groups"].as_array().map(Vec::len), Some(5));
        assert!(
            quorum["groups"][0]["group"].is_string() && quorum["groups"][0]["vote"].is_string()
        );
        assert!(granted.get("holder").is_none() && granted.get("retry_after_ms").is_none());

        // Held by someone else: a normal result, not an error.
        let denied = call(client, "acquire_lock", json!({"resource": "contract:a"})).await;
        assert_eq!(denied.is_error, Some(false), "{}", text(&denied));
        assert!(text(&denied).contains("agent-1"), "{}", text(&denied));
        let denied = denied.structured_content.expect("structured");
        assert_eq!(denied["acquired"], json!(false));
        assert_eq!(denied["resource"], json!("contract:a"));
        assert_eq!(denied["held_resource"], json!("contract:a"));
        assert_eq!(denied["holder"]["owner"], json!("agent-1"));
        assert_eq!(denied["holder"]["purpose"], json!("contract test"));
        let remaining = u64_of(&denied["holder"], "remaining_ms");
        assert!(remaining > 0 && remaining <= 20_000);
        assert!(u64_of(&denied, "retry_after_ms") >= remaining.min(50));
        assert!(denied.get("token").is_none() && denied.get("fencing_token").is_none());

        // The next holder carries a larger fencing token.
        release(client, "contract:a", &token).await;
        let next = ok(client, "acquire_lock", json!({"resource": "contract:a"})).await;
        assert!(u64_of(&next, "fencing_token") > fence);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_lock_needs_the_token_and_a_second_is_a_no_op() {
    tool_contract("release_lock", async |client, _| {
        let token = str_of(&acquire_contract_lock(client).await, "token").to_string();

        // A wrong token releases nothing and leaves the lock alone.
        let wrong = release(client, "contract:a", "0123456789abcdef0123456789abcdef").await;
        assert_eq!(
            wrong,
            json!({"released": false, "resource": "contract:a", "resources": ["contract:a"], "groups_released": 0, "groups_maybe_released": 0})
        );
        assert!(held(client, "contract:a").await);

        // The right token releases it; a second release is a harmless no-op.
        let released = release(client, "contract:a", &token).await;
        assert_eq!(released["released"], json!(true));
        assert!(u64_of(&released, "groups_released") >= 3);
        assert!(!held(client, "contract:a").await);
        let again = release(client, "contract:a", &token).await;
        assert_eq!(again["released"], json!(false));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_lock_renews_held_and_refuses_released() {
    tool_contract("extend_lock", async |client, _| {
        let token = str_of(&acquire_contract_lock(client).await, "token").to_string();

        let extended = ok(
            client,
            "extend_lock",
            json!({"resource": "contract:a", "token": token, "ttl_ms": 30000}),
        )
        .await;
        assert_eq!(extended["extended"], json!(true));
        assert_eq!(extended["resource"], json!("contract:a"));
        assert!(u64_of(&extended, "validity_ms") > 25_000);
        chrono::DateTime::parse_from_rfc3339(str_of(&extended, "expires_at")).expect("RFC 3339");

        // Once released, the token extends nothing.
        release(client, "contract:a", &token).await;
        let stale = ok(
            client,
            "extend_lock",
            json!({"resource": "contract:a", "token": token, "ttl_ms": 10000}),
        )
        .await;
        assert_eq!(stale["extended"], json!(false));
        assert!(stale.get("validity_ms").is_none());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_status_shows_holder_fence_and_groups() {
    tool_contract("lock_status", async |client, tool| {
        assert!(
            tool.description
                .as_deref()
                .unwrap_or_default()
                .contains("Advisory")
        );
        let fence = u64_of(&acquire_contract_lock(client).await, "fencing_token");

        let status = ok(client, "lock_status", json!({"resource": "contract:a"})).await;
        assert_eq!(status["resource"], json!("contract:a"));
        assert_eq!(status["held"], json!(true));
        assert_eq!(status["holder"]["owner"], json!("agent-1"));
        assert_eq!(u64_of(&status, "fencing_token"), fence);
        let groups = status["groups"].as_array().expect("groups");
        assert_eq!(groups.len(), 5);
        assert!(
            groups
                .iter()
                .filter(|g| g["state"] == json!("held"))
                .count()
                >= 3,
            "{status}"
        );
        assert!(
            groups
                .iter()
                .all(|g| g["group"].is_string() && g["state"].is_string())
        );
        assert!(status.get("keepalive").is_none());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_locks_lists_by_prefix_and_pages() {
    tool_contract("list_locks", async |client, _| {
        acquire_contract_lock(client).await;
        let second = ok(
            client,
            "acquire_lock",
            json!({"resource": "contract:b", "owner": "agent-2"}),
        )
        .await;
        assert!(u64_of(&second, "fencing_token") > 0);

        let list = ok(client, "list_locks", json!({"prefix": "contract:"})).await;
        assert_eq!(list["truncated"], json!(false));
        let locks = list["locks"].as_array().expect("locks");
        assert_eq!(
            locks
                .iter()
                .map(|l| l["resource"].clone())
                .collect::<Vec<_>>(),
            vec![json!("contract:a"), json!("contract:b")]
        );
        assert_eq!(locks[0]["owner"], json!("agent-1"));
        assert_eq!(locks[0]["purpose"], json!("contract test"));
        assert!(u64_of(&locks[0], "remaining_ms") > 0);
        let limited = ok(
            client,
            "list_locks",
            json!({"prefix": "contract:", "limit": 1}),
        )
        .await;
        assert_eq!(limited["locks"].as_array().map(Vec::len), Some(1));
        assert_eq!(limited["truncated"], json!(true));
        assert!(list.get("next_cursor").is_none(), "the last page has none");
        // Following next_cursor gives the other lock, then the end.
        let cursor = limited["next_cursor"].clone();
        assert!(cursor.is_string(), "{limited}");
        let next = ok(
            client,
            "list_locks",
            json!({"prefix": "contract:", "limit": 1, "cursor": cursor}),
        )
        .await;
        let both = [&limited, &next].map(|page| page["locks"][0]["resource"].clone());
        assert_eq!(both, [json!("contract:a"), json!("contract:b")], "{next}");
        assert_eq!(next["truncated"], json!(false));
        assert!(next.get("next_cursor").is_none(), "{next}");
        // A cursor is tied to its prefix.
        let message = tool_error(
            client,
            "list_locks",
            json!({"prefix": "other:", "limit": 1, "cursor": cursor}),
        )
        .await;
        assert!(message.contains("`cursor`"), "{message}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_locks_shows_a_semaphore_as_one_entry() {
    tool_contract("list_locks", async |client, tool| {
        let description = tool.description.as_deref().unwrap_or_default();
        assert!(description.contains("semaphores"), "{description}");
        let schema = serde_json::to_value(tool.output_schema.as_ref().expect("output schema"))
            .expect("schema");
        assert!(
            schema["properties"]["semaphores"].is_object(),
            "list_locks declares semaphores: {schema}"
        );
        // The server's instructions tell the model where to start and how errors read.
        let instructions = client
            .peer_info()
            .and_then(|info| info.instructions.clone())
            .unwrap_or_default();
        for word in ["acquire_lock", "kind", "no_quorum"] {
            assert!(instructions.contains(word), "{word}: {instructions}");
        }

        acquire_contract_lock(client).await;
        let mut tokens = Vec::new();
        for owner in ["agent-2", "agent-3"] {
            let granted = ok(
                client,
                "acquire_lock",
                json!({"resource": "contract:api", "permits": 3, "owner": owner, "purpose": "search"}),
            )
            .await;
            tokens.push(str_of(&granted, "token").to_string());
        }

        let result = call(client, "list_locks", json!({"prefix": "contract:"})).await;
        let summary = text(&result);
        assert!(
            summary.contains("1 lock held")
                && summary.contains("1 semaphore in use (contract:api: 2 of 3 permits held)"),
            "{summary}"
        );
        let list = result.structured_content.expect("structured");
        // The lock alone under locks: no row for the semaphore's permits.
        let locks: Vec<&Value> = list["locks"].as_array().expect("locks").iter().collect();
        assert_eq!(locks.len(), 1, "{list}");
        assert_eq!(locks[0]["resource"], json!("contract:a"));
        let semaphores = list["semaphores"].as_array().expect("semaphores");
        assert_eq!(semaphores.len(), 1, "{list}");
        assert_eq!(semaphores[0]["name"], json!("contract:api"));
        assert_eq!(semaphores[0]["permits"], json!(3));
        let holders = semaphores[0]["holders"].as_array().expect("holders");
        let mut owners: Vec<&str> = holders
            .iter()
            .map(|h| h["owner"].as_str().expect("owner"))
            .collect();
        owners.sort_unstable();
        assert_eq!(owners, ["agent-2", "agent-3"]);
        assert!(
            holders.iter().all(|h| h["purpose"] == json!("search")
                && u64_of(h, "remaining_ms") > 0
                && u64_of(h, "fencing_token") > 0
                && h["permit"].as_u64().is_some_and(|p| p < 3)),
            "{holders:?}"
        );
        // The limit counts a semaphore as one entry.
        let limited = ok(client, "list_locks", json!({"prefix": "contract:", "limit": 1})).await;
        assert_eq!(limited["truncated"], json!(true), "{limited}");

        for token in &tokens {
            let released = release(client, "contract:api", token).await;
            assert_eq!(released["released"], json!(true), "{released}");
        }
        let after = ok(client, "list_locks", json!({"prefix": "contract:"})).await;
        assert_eq!(after["semaphores"], json!([]), "{after}");
        assert_eq!(after["locks"].as_array().map(Vec::len), Some(1));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_health_reports_quorum_and_latencies() {
    tool_contract("cluster_health", async |client, _| {
        let health = ok(client, "cluster_health", json!({})).await;
        assert_eq!(health["quorum_available"], json!(true));
        assert_eq!(health["needed"], json!(3));
        assert_eq!(health["reachable"], json!(5));
        let groups = health["groups"].as_array().expect("groups");
        assert_eq!(groups.len(), 5);
        assert!(
            groups
                .iter()
                .all(|g| g["reachable"] == json!(true) && g["latency_ms"].is_number())
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_errors_name_the_field_and_serving_goes_on() {
    let fx = sentinel_lab().await;
    within(Duration::from_secs(60), async {
        let server = stdio_server(&fx.lab.config_path(), &[]).await;
        let client = &server.client;
        let megabyte = "x".repeat(1024 * 1024);
        let cases = [
            ("acquire_lock", json!({"resource": ""}), "resource"),
            (
                "acquire_lock",
                json!({"resource": "x".repeat(600)}),
                "resource",
            ),
            ("acquire_lock", json!({"resource": "bad\nname"}), "resource"),
            (
                "acquire_lock",
                json!({"resource": "bad\u{7}name"}),
                "resource",
            ),
            ("acquire_lock", json!({"resource": megabyte}), "resource"),
            (
                "acquire_lock",
                json!({"resource": "r", "ttl_ms": 0}),
                "ttl_ms",
            ),
            (
                "acquire_lock",
                json!({"resource": "r", "ttl_ms": -5}),
                "ttl_ms",
            ),
            (
                "acquire_lock",
                json!({"resource": "r", "ttl_ms": 1000}),
                "min_ttl_ms",
            ),
            (
                "acquire_lock",
                json!({"resource": "r", "ttl_ms": 1e30}),
                "ttl_ms",
            ),
            (
                "acquire_lock",
                json!({"resource": "r", "ttl_ms": "15000"}),
                "ttl_ms",
            ),
            ("acquire_lock", json!({"resource": 42}), "resource"),
            (
                "acquire_lock",
                json!({"resource": "r", "wait_ms": -1}),
                "wait_ms",
            ),
            (
                "acquire_lock",
                json!({"resource": "r", "keepalive": "yes"}),
                "keepalive",
            ),
            (
                "acquire_lock",
                json!({"resource": "r", "owner": "a\u{0}b"}),
                "owner",
            ),
            ("acquire_lock", json!({"resource": "r", "ttl": 5000}), "ttl"),
            ("acquire_lock", json!({}), "resource"),
            ("release_lock", json!({"resource": "r"}), "token"),
            (
                "release_lock",
                json!({"resource": "r", "token": ""}),
                "token",
            ),
            (
                "extend_lock",
                json!({"resource": "r", "token": "abc"}),
                "ttl_ms",
            ),
            ("lock_status", json!({"resource": ["r"]}), "resource"),
            ("list_locks", json!({"limit": 0}), "limit"),
            ("list_locks", json!({"limit": 20000}), "limit"),
            ("list_locks", json!({"prefix": "a\tb"}), "prefix"),
            ("list_locks", json!({"cursor": "nonsense"}), "cursor"),
            ("list_locks", json!({"cursor": ""}), "cursor"),
            ("cluster_health", json!({"verbose": true}), "verbose"),
        ];
        for (tool, arguments, field) in cases {
            let shown = arguments.to_string().chars().take(80).collect::<String>();
            let (message, error) = tool_error_of(client, tool, arguments).await;
            assert_eq!(
                error["kind"],
                json!("invalid_input"),
                "{tool}({shown}): {message}"
            );
            // The field to fix, as the agent spelled it (`min_ttl_ms` is the bound `ttl_ms`
            // fell below).
            let fixed = if field == "min_ttl_ms" {
                "ttl_ms"
            } else {
                field
            };
            assert_eq!(error["field"], json!(fixed), "{tool}({shown}): {message}");
            assert!(
                message.contains(&format!("`{field}`")) || message.contains(field),
                "{tool}({shown}): {message}"
            );
            assert!(
                message.len() < 1000,
                "{tool}({shown}): the error echoes too much: {} bytes",
                message.len()
            );
        }
        // A TTL above the server's maximum is held_too_long, naming the maximum.
        let (message, error) = tool_error_of(
            client,
            "acquire_lock",
            json!({"resource": "r", "ttl_ms": 1_000_000_000_000_i64}),
        )
        .await;
        assert_eq!(
            error,
            json!({"kind": "held_too_long", "field": "ttl_ms", "max": 60000}),
            "{message}"
        );
        assert!(message.contains("max_ttl_ms"), "{message}");
        // An unknown tool is a JSON-RPC error whose data names its kind.
        let unknown = protocol_error(client, "steal_lock").await;
        assert!(
            unknown.message.contains("steal_lock") && unknown.message.contains("acquire_lock"),
            "{}",
            unknown.message
        );
        assert_eq!(
            unknown.data,
            Some(json!({"kind": "not_found", "field": "name"}))
        );

        // Still serving.
        let health = ok(client, "cluster_health", json!({})).await;
        assert_eq!(health["quorum_available"], json!(true));
        let granted = ok(
            client,
            "acquire_lock",
            json!({"resource": "after-bad-input"}),
        )
        .await;
        assert_eq!(granted["acquired"], json!(true));
        server.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_http_sessions_contend_for_one_resource() {
    let fx = sentinel_lab().await;
    within(Duration::from_secs(60), async {
        let server = http_server(&fx.lab.config_path(), Some(TOKEN), &[]).await;
        let (alice, _) = server.connect(Some(TOKEN)).await.expect("alice connects");
        let (bob, _) = server.connect(Some(TOKEN)).await.expect("bob connects");

        let first = ok(
            &alice,
            "acquire_lock",
            json!({"resource": "shared:doc", "owner": "alice", "purpose": "editing"}),
        )
        .await;
        assert_eq!(first["acquired"], json!(true));
        let refused = ok(
            &bob,
            "acquire_lock",
            json!({"resource": "shared:doc", "owner": "bob"}),
        )
        .await;
        assert_eq!(refused["acquired"], json!(false));
        assert_eq!(refused["holder"]["owner"], json!("alice"));
        assert_eq!(refused["holder"]["purpose"], json!("editing"));

        // Bob waits; Alice releases a moment later; Bob gets it with a larger fencing token.
        let token = str_of(&first, "token").to_string();
        let bob_waits = ok(
            &bob,
            "acquire_lock",
            json!({"resource": "shared:doc", "owner": "bob", "wait_ms": 10000}),
        );
        let alice_releases = async {
            // Bob is waiting once his waiter has subscribed to the lock's release channel.
            fx.subscribed(0, &released_channel("shared:doc"), Duration::from_secs(5))
                .await;
            release(&alice, "shared:doc", &token).await
        };
        let (second, released) = tokio::join!(bob_waits, alice_releases);
        assert_eq!(released["released"], json!(true));
        assert_eq!(second["acquired"], json!(true), "{second}");
        assert!(u64_of(&second, "fencing_token") > u64_of(&first, "fencing_token"));
        let status = ok(&alice, "lock_status", json!({"resource": "shared:doc"})).await;
        assert_eq!(status["holder"]["owner"], json!("bob"));
        let _ = alice.cancel().await;
        let _ = bob.cancel().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_acquires_give_one_winner_per_resource() {
    let fx = sentinel_lab().await;
    within(Duration::from_secs(90), async {
        // A hundred contenders retrying at once load a debug build on a busy machine: a longer
        // retry delay keeps the retries from piling up.
        let overrides = [("QUORUMLOCK_RETRY_DELAY_MS", "150")];
        let server = stdio_server_with_env(&fx.lab.config_path(), &[], &overrides).await;
        let client = &server.client;
        // A short wait lets contenders whose votes split retry, so every resource ends with a
        // holder; the long TTL keeps the winner's lock for the whole test.
        let calls = (0..100).map(|i| {
            let resource = format!("crowd:{}", i % 10);
            async move {
                let result = ok(client, "acquire_lock", json!({"resource": resource, "ttl_ms": 60000, "wait_ms": 3000, "owner": format!("caller-{i}")})).await;
                (resource, result)
            }
        });
        let results = futures::future::join_all(calls).await;
        let mut winners: HashMap<String, Vec<Value>> = HashMap::new();
        for (resource, result) in &results {
            if result["acquired"] == json!(true) {
                winners.entry(resource.clone()).or_default().push(result.clone());
            } else {
                assert_eq!(result["acquired"], json!(false));
                assert!(result["holder"].is_object(), "{result}");
            }
        }
        assert_eq!(winners.len(), 10, "every resource has a winner: {winners:?}");
        for (resource, won) in &winners {
            assert_eq!(won.len(), 1, "{resource} has {} winners", won.len());
            let status = ok(client, "lock_status", json!({"resource": resource})).await;
            assert_eq!(status["fencing_token"], won[0]["fencing_token"], "{resource}");
        }
        server.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keepalive_lease_outlives_three_ttls() {
    let fx = sentinel_lab().await;
    within(Duration::from_secs(60), async {
        let server = stdio_server(&fx.lab.config_path(), &LOW_MIN_TTL).await;
        let client = &server.client;
        let ttl_ms = 400;
        let granted = ok(
            client,
            "acquire_lock",
            json!({"resource": "long:job", "ttl_ms": ttl_ms, "keepalive": true}),
        )
        .await;
        assert_eq!(granted["keepalive"], json!(true));
        let fence = u64_of(&granted, "fencing_token");
        let started = Instant::now();
        // Held the whole time, by the same lease, well past three TTLs.
        while started.elapsed() < Duration::from_millis(4 * ttl_ms) {
            let status = ok(client, "lock_status", json!({"resource": "long:job"})).await;
            assert_eq!(
                status["held"],
                json!(true),
                "lost after {:?}: {status}",
                started.elapsed()
            );
            assert_eq!(u64_of(&status, "fencing_token"), fence);
            assert_eq!(status["keepalive"]["state"], json!("renewing"));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let released = release(client, "long:job", str_of(&granted, "token")).await;
        assert_eq!(released["released"], json!(true));
        assert!(!held(client, "long:job").await);
        // Released on request: the renewal stopped, the lock stays free.
        tokio::time::sleep(Duration::from_millis(2 * ttl_ms)).await;
        let status = ok(client, "lock_status", json!({"resource": "long:job"})).await;
        assert_eq!(status["held"], json!(false));
        assert!(status.get("keepalive").is_none(), "{status}");
        server.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_ends_with_the_deleted_http_session() {
    let fx = sentinel_lab().await;
    within(Duration::from_secs(60), async {
        let server = http_server(&fx.lab.config_path(), Some(TOKEN), &LOW_MIN_TTL).await;
        let (client, _) = server.connect(Some(TOKEN)).await.expect("connect");
        let (observer, _) = server
            .connect(Some(TOKEN))
            .await
            .expect("observer connects");
        // A long TTL: if the lock is free soon after the session ends, it was released, not expired.
        for resource in ["session:a", "session:b"] {
            let granted = ok(
                &client,
                "acquire_lock",
                json!({"resource": resource, "ttl_ms": 30000, "keepalive": true}),
            )
            .await;
            assert_eq!(granted["keepalive"], json!(true));
        }
        // A short one, to see the lease renewed past three TTLs over HTTP too.
        ok(
            &client,
            "acquire_lock",
            json!({"resource": "session:c", "ttl_ms": 300, "keepalive": true}),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(
            held(&observer, "session:c").await,
            "the HTTP keepalive lease stopped renewing"
        );
        let (status, body) = raw_http(
            &server.addr,
            "GET",
            "/metrics",
            &[("Authorization", &format!("Bearer {TOKEN}"))],
            b"",
        )
        .await;
        assert_eq!(status, 200);
        assert!(body.contains("quorumlock_mcp_keepalive_leases 3"), "{body}");

        client.cancel().await.expect("DELETE the session");
        for resource in ["session:a", "session:b", "session:c"] {
            assert!(
                released_within(&fx.locks, resource, Duration::from_secs(3)).await,
                "{resource} was not released when its session was deleted"
            );
        }
        let _ = observer.cancel().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_session_is_answered_204() {
    let fx = plain_lab().await;
    within(Duration::from_secs(60), async {
        let server = http_server(&fx.lab.config_path(), Some(TOKEN), &[]).await;
        let bearer = format!("Bearer {TOKEN}");
        let [content_type, accept] = MCP_POST_HEADERS;
        let headers = [content_type, accept, ("Authorization", bearer.as_str())];
        let (status, head, body) =
            raw_http_response(&server.addr, "POST", "/mcp", &headers, RAW_INITIALIZE).await;
        assert_eq!(status, 200, "{body}");
        let session = session_of(&head);
        // The official Python SDK accepts 200 or 204 and warns on anything else.
        let delete = [
            ("Authorization", bearer.as_str()),
            ("Mcp-Session-Id", session.as_str()),
        ];
        let (status, head, _) =
            raw_http_response(&server.addr, "DELETE", "/mcp", &delete, b"").await;
        assert_eq!(status, 204, "{head}");
        // The session is gone: a request naming it gets 404.
        let (status, _) = raw_http(
            &server.addr,
            "POST",
            "/mcp",
            &[content_type, accept, delete[0], delete[1]],
            br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        )
        .await;
        assert_eq!(status, 404);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_ends_when_the_http_session_expires() {
    let fx = sentinel_lab().await;
    within(Duration::from_secs(60), async {
        let server = http_server(
            &fx.lab.config_path(),
            Some(TOKEN),
            &["--session-idle-secs", "1"],
        )
        .await;
        let (client, _) = server.connect(Some(TOKEN)).await.expect("connect");
        ok(
            &client,
            "acquire_lock",
            json!({"resource": "idle:job", "ttl_ms": 30000, "keepalive": true}),
        )
        .await;
        assert!(fx.locks.status("idle:job").await.expect("status").held);
        // The client stays silent past the idle timeout, as a vanished agent would.
        let released = released_within(&fx.locks, "idle:job", Duration::from_secs(6)).await;
        assert!(
            released,
            "the lease (TTL 30 s) outlived its expired session"
        );
        drop(client);
    })
    .await;
}

/// The helper's name as the test harness lists it: its module path without the crate's
/// name, since `--exact` matches the whole name.
fn helper_test_name() -> String {
    let module = module_path!();
    let module = module.split_once("::").map_or("", |(_, rest)| rest);
    if module.is_empty() {
        "stdio_client_helper".to_string()
    } else {
        format!("{module}::stdio_client_helper")
    }
}

/// The helper for the next test: an MCP client in its own process, so that the test can kill
/// it like a crashed agent. It runs only when started by that test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as a child process of keepalive_ends_when_the_stdio_client_dies"]
async fn stdio_client_helper() {
    let Ok(config) = std::env::var("QL_MCP_HELPER_CONFIG") else {
        return;
    };
    let server = stdio_server(std::path::Path::new(&config), &[]).await;
    let granted = ok(
        &server.client,
        "acquire_lock",
        json!({"resource": "crash:job", "ttl_ms": 30000, "keepalive": true}),
    )
    .await;
    println!(
        "QL_HELPER server_pid={} fence={}",
        server.guard.pid(),
        u64_of(&granted, "fencing_token")
    );
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_ends_when_the_stdio_client_dies() {
    let fx = sentinel_lab().await;
    within(Duration::from_secs(60), async {
        let mut helper =
            tokio::process::Command::new(std::env::current_exe().expect("test binary"))
                .args([
                    &helper_test_name(),
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("QL_MCP_HELPER_CONFIG", fx.lab.config_path())
                .stdout(std::process::Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("start the helper client");
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(
            helper.stdout.take().expect("stdout"),
        ));
        // The test harness may print its own text on the same line first.
        let line = loop {
            let line = lines
                .next_line()
                .await
                .expect("read helper")
                .expect("the helper reports its lease");
            if let Some(start) = line.find("QL_HELPER ") {
                break line[start..].to_string();
            }
        };
        let field = |name: &str| -> u64 {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {line}"))
        };
        let server = PidGuard::new(u32::try_from(field("server_pid")).expect("pid"));
        let fence = field("fence");
        let status = fx.locks.status("crash:job").await.expect("status");
        assert!(
            status.held && status.fencing_token == Some(fence),
            "{status:?}"
        );

        // The client dies without a word; the kernel closes its end of the server's stdin.
        helper.start_kill().expect("SIGKILL the helper");
        helper.wait().await.expect("reap the helper");
        let released = released_within(&fx.locks, "crash:job", Duration::from_secs(5)).await;
        assert!(
            released,
            "the lease (TTL 30 s) was not released within 5 s of the client's death"
        );
        assert!(
            eventually(Duration::from_secs(5), || async {
                has_exited(server.pid())
            })
            .await,
            "the server did not exit after its client was gone"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_keepalive_lease_is_shown_and_notified() {
    let fx = sentinel_lab().await;
    within(Duration::from_secs(60), async {
        let mut server = stdio_server(&fx.lab.config_path(), &LOW_MIN_TTL).await;
        let granted = ok(
            &server.client,
            "acquire_lock",
            json!({"resource": "stolen", "ttl_ms": 900, "keepalive": true}),
        )
        .await;
        let fence = u64_of(&granted, "fencing_token");
        // Someone wipes the lock behind the lease's back (an operator, a data loss).
        fx.delete_everywhere(&common::lock_key("stolen")).await;
        let note = tokio::time::timeout(Duration::from_secs(5), server.logs.recv())
            .await
            .expect("a logging notification within 5 s")
            .expect("notification channel open");
        assert_eq!(note["event"], json!("keepalive_lease_ended"));
        assert_eq!(note["state"], json!("lost"));
        assert_eq!(note["resource"], json!("stolen"));
        assert_eq!(note["fencing_token"], json!(fence));
        let status = ok(&server.client, "lock_status", json!({"resource": "stolen"})).await;
        assert_eq!(status["keepalive"]["state"], json!("lost"), "{status}");
        assert!(status["keepalive"]["reason"].is_string());
        let text = text(&call(&server.client, "lock_status", json!({"resource": "stolen"})).await);
        assert!(text.contains("lost"), "{text}");
        server.close().await;
    })
    .await;
}

/// The `Mcp-Session-Id` a raw response's head carries.
fn session_of(head: &str) -> String {
    head.lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no Mcp-Session-Id in {head}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_http_keepalive_is_notified_on_the_session_stream() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fx = sentinel_lab().await;
    within(Duration::from_secs(60), async {
        let server = http_server(&fx.lab.config_path(), Some(TOKEN), &LOW_MIN_TTL).await;
        let bearer = format!("Bearer {TOKEN}");
        let [content_type, accept] = MCP_POST_HEADERS;
        let headers = [content_type, accept, ("Authorization", bearer.as_str())];
        let (status, head, body) =
            raw_http_response(&server.addr, "POST", "/mcp", &headers, RAW_INITIALIZE).await;
        assert_eq!(status, 200, "{body}");
        let session = session_of(&head);
        // The session's stream of server messages, read as it comes.
        let mut stream = tokio::net::TcpStream::connect(&server.addr)
            .await
            .expect("connect");
        let get = format!(
            "GET /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: {bearer}\r\nMcp-Session-Id: {session}\r\nAccept: text/event-stream\r\n\r\n",
            server.addr
        );
        stream.write_all(get.as_bytes()).await.expect("GET");
        let mut seen = String::new();
        let mut read_until = async |stream: &mut tokio::net::TcpStream, needle: &str| {
            let mut buffer = [0u8; 4096];
            while !seen.contains(needle) {
                let got = stream.read(&mut buffer).await.expect("read the stream");
                assert!(got > 0, "the stream closed before {needle:?}: {seen}");
                seen.push_str(&String::from_utf8_lossy(&buffer[..got]));
            }
        };
        read_until(&mut stream, "\r\n\r\n").await;
        let session_headers = [
            content_type,
            accept,
            ("Authorization", bearer.as_str()),
            ("Mcp-Session-Id", session.as_str()),
        ];
        let acquire = json!({
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "acquire_lock", "arguments": {"resource": "wiped", "ttl_ms": 900, "keepalive": true}},
        });
        let body = serde_json::to_vec(&acquire).expect("request");
        let (status, _, answer) =
            raw_http_response(&server.addr, "POST", "/mcp", &session_headers, &body).await;
        assert_eq!(status, 200, "{answer}");
        assert!(answer.contains("\"keepalive\":true"), "{answer}");
        // Someone wipes the lock behind the lease's back.
        fx.delete_everywhere(&common::lock_key("wiped")).await;
        tokio::time::timeout(
            Duration::from_secs(5),
            read_until(&mut stream, "keepalive_lease_ended"),
        )
        .await
        .expect("the notice on the session's stream within 5 s");
        assert!(seen.contains("notifications/message"), "{seen}");
        assert!(seen.contains("\"resource\":\"wiped\""), "{seen}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_max_hold_the_session_is_told_first() {
    let fx = plain_lab().await;
    within(Duration::from_secs(60), async {
        let extra = [LOW_MIN_TTL[0], LOW_MIN_TTL[1], "--max-hold-ms", "1500"];
        let mut server = stdio_server(&fx.lab.config_path(), &extra).await;
        ok(
            &server.client,
            "acquire_lock",
            json!({"resource": "capped", "ttl_ms": 900, "keepalive": true}),
        )
        .await;
        // The server hands the notice to the session's transport before it releases; the
        // next holder gets the lock after that release.
        let next = fx.client().await;
        let lease = next
            .acquire("capped")
            .wait(Duration::from_secs(20))
            .await
            .expect("the lock is released at max_hold");
        let notice = tokio::time::timeout(Duration::from_secs(5), server.logs.recv())
            .await
            .expect("the session is told within 5 s")
            .expect("notification channel open");
        assert_eq!(notice["event"], json!("keepalive_lease_ended"));
        assert_eq!(notice["state"], json!("max_hold_reached"), "{notice}");
        lease.release().await.expect("release");
        server.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_without_a_majority_and_200_with_one() {
    // A short policy, so the restarted (empty) masters sit out only 3 s.
    let mut fx = common::fixture(
        |spec| quorumlock::lab::LabSpec {
            max_ttl_ms: 3_000,
            ..common::plain(spec)
        },
        |topology| topology,
    )
    .await;
    let server = http_server(&fx.lab.config_path(), Some(TOKEN), &LOW_MIN_TTL).await;
    let addr = server.addr.clone();
    let ready = || {
        let addr = addr.clone();
        async move { raw_http(&addr, "GET", "/readyz", &[], b"").await }
    };
    let (status, body) = ready().await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"ready\""), "{body}");
    for group in 0..3 {
        fx.lab.kill(group).await.expect("kill a master");
    }
    let limit = Duration::from_secs(30);
    assert!(
        eventually(limit, || async { ready().await.0 == 503 }).await,
        "still ready with three of five masters dead"
    );
    let (_, body) = ready().await;
    assert!(
        body.contains("2 of 5 groups vote; a grant needs 3"),
        "{body}"
    );
    // The liveness probe is not the readiness probe.
    assert_eq!(raw_http(&addr, "GET", "/healthz", &[], b"").await.0, 200);
    // Back empty, and too few groups hold the policy for them to adopt it: admitted by hand,
    // after the quarantine their lost grants need.
    let mut admit = Vec::new();
    for group in 0..3 {
        fx.lab.restart(group).await.expect("restart a master");
        admit.push(fx.topology.groups[group].name.clone());
    }
    let policy = fx.lab.spec().policy();
    fx.locks
        .admit(&quorumlock::AdmitOptions {
            groups: admit,
            delay: Duration::from_millis(policy.max_ttl_ms + policy.write_window_ms),
            force: true,
            ..quorumlock::AdmitOptions::new(policy.max_ttl_ms)
        })
        .await
        .expect("admit the restarted masters");
    assert!(
        eventually(limit, || async { ready().await.0 == 200 }).await,
        "not ready again once the masters were back and past their quarantine"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_max_ttl_topology_starts_without_flags() {
    let fx = common::fixture(
        |spec| quorumlock::lab::LabSpec {
            max_ttl_ms: 3_000,
            ..common::plain(spec)
        },
        |topology| topology,
    )
    .await;
    within(Duration::from_secs(60), async {
        let server = stdio_server(&fx.lab.config_path(), &[]).await;
        let granted = ok(
            &server.client,
            "acquire_lock",
            json!({"resource": "short", "ttl_ms": 3000}),
        )
        .await;
        assert_eq!(granted["acquired"], json!(true), "{granted}");
        server.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_requires_the_bearer_token() {
    let fx = sentinel_lab().await;
    within(Duration::from_secs(60), async {
        let server = http_server(&fx.lab.config_path(), Some(TOKEN), &[]).await;
        let initialize = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
        let mcp_headers = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];
        let (status, _) = raw_http(&server.addr, "POST", "/mcp", &mcp_headers, initialize).await;
        assert_eq!(status, 401, "no token");
        let wrong = [mcp_headers[0], mcp_headers[1], ("Authorization", "Bearer test-token-0123456789abcdeX")];
        assert_eq!(raw_http(&server.addr, "POST", "/mcp", &wrong, initialize).await.0, 401, "wrong token");
        let prefix = [mcp_headers[0], mcp_headers[1], ("Authorization", "Bearer test-token")];
        assert_eq!(raw_http(&server.addr, "POST", "/mcp", &prefix, initialize).await.0, 401, "a prefix of the token");
        let right = format!("Bearer {TOKEN}");
        let good = [mcp_headers[0], mcp_headers[1], ("Authorization", right.as_str())];
        assert_eq!(raw_http(&server.addr, "POST", "/mcp", &good, initialize).await.0, 200, "right token");
        assert_eq!(raw_http(&server.addr, "GET", "/metrics", &[], b"").await.0, 401, "metrics need the token");
        let (status, body) = raw_http(&server.addr, "GET", "/healthz", &[], b"").await;
        assert_eq!((status, body.trim()), (200, r#"{"status":"ok"}"#));

        // rmcp's client: refused without or with a wrong token, served with the right one.
        let refused = server.connect(None).await.err().expect("no token is refused");
        assert!(refused.contains("401") || refused.to_lowercase().contains("auth"), "{refused}");
        assert!(server.connect(Some("wrong")).await.is_err());
        let (client, _) = server.connect(Some(TOKEN)).await.expect("the right token is accepted");
        let granted = ok(&client, "acquire_lock", json!({"resource": "auth:ok"})).await;
        assert_eq!(granted["acquired"], json!(true));

        // Oversized bodies are refused, a 1 MB argument is named, and the server keeps serving.
        let huge = vec![b' '; 3 * 1024 * 1024];
        assert_eq!(raw_http(&server.addr, "POST", "/mcp", &good, &huge).await.0, 413);
        let message = tool_error(&client, "acquire_lock", json!({"resource": "y".repeat(1024 * 1024)})).await;
        assert!(message.contains("`resource`") || message.contains("resource"), "{message}");
        let (status, metrics) = raw_http(&server.addr, "GET", "/metrics", &[("Authorization", &right)], b"").await;
        assert_eq!(status, 200);
        for name in ["quorumlock_mcp_acquisitions_total 1", "quorumlock_mcp_tool_calls_total{tool=\"acquire_lock\",outcome=\"error\"} 1", "quorumlock_mcp_tool_call_duration_seconds_bucket"] {
            assert!(metrics.contains(name), "missing {name} in\n{metrics}");
        }
        let _ = client.cancel().await;

        // Off loopback, a token is mandatory.
        let refused = tokio::process::Command::new(BIN)
            .arg("--config")
            .arg(fx.lab.config_path())
            .args(["serve", "--http", "0.0.0.0:0"])
            .env_remove("QUORUMLOCK_MCP_TOKEN")
            .output()
            .await
            .expect("run serve");
        assert!(!refused.status.success());
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains("QUORUMLOCK_MCP_TOKEN"), "{stderr}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_keepalives_and_exits_zero() {
    let fx = sentinel_lab().await;
    within(Duration::from_secs(60), async {
        let mut server = http_server(&fx.lab.config_path(), Some(TOKEN), &[]).await;
        let (client, _) = server.connect(Some(TOKEN)).await.expect("connect");
        ok(
            &client,
            "acquire_lock",
            json!({"resource": "shutdown:job", "ttl_ms": 30000, "keepalive": true}),
        )
        .await;
        assert!(fx.locks.status("shutdown:job").await.expect("status").held);
        let status = server.terminate().await;
        assert_eq!(status.code(), Some(0), "exit status after SIGTERM");
        // Released before exit, not left to its 30 s TTL.
        assert!(!fx.locks.status("shutdown:job").await.expect("status").held);
        drop(client);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_a_stdio_server_with_a_client() {
    let fx = sentinel_lab().await;
    within(Duration::from_secs(60), async {
        // stdout goes to a file, so stdin is read on a blocking thread: the case where a
        // server that only waits for its runtime would never exit.
        let out_path = fx.path("stdout.jsonl");
        let out = std::fs::File::create(&out_path).expect("stdout file");
        let mut server = tokio::process::Command::new(BIN)
            .arg("--config")
            .arg(fx.lab.config_path())
            .arg("serve")
            .envs(TEST_ENV)
            .stdin(std::process::Stdio::piped())
            .stdout(out)
            .kill_on_drop(true)
            .spawn()
            .expect("start the server");
        let mut stdin = server.stdin.take().expect("stdin");
        let lines = [
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"acquire_lock","arguments":{"resource":"stdio:term","ttl_ms":30000,"keepalive":true}}}"#,
        ];
        for line in lines {
            tokio::io::AsyncWriteExt::write_all(&mut stdin, format!("{line}\n").as_bytes())
                .await
                .expect("write a request");
        }
        let answered = eventually(Duration::from_secs(10), || async {
            let out = std::fs::read_to_string(&out_path).unwrap_or_default();
            out.lines().any(|line| line.contains(r#""id":2"#) && line.contains(r#""acquired":true"#))
        })
        .await;
        assert!(answered, "no grant in {:?}", std::fs::read_to_string(&out_path));
        assert!(fx.locks.status("stdio:term").await.expect("status").held);

        let pid = server.id().expect("pid");
        // SAFETY: kill(2) on our own child, which has not been reaped (we still hold it).
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGTERM);
        }
        let status = tokio::time::timeout(Duration::from_secs(15), server.wait())
            .await
            .expect("the server exits within 15 s of SIGTERM, stdin still open")
            .expect("wait");
        assert_eq!(status.code(), Some(0));
        assert!(!fx.locks.status("stdio:term").await.expect("status").held, "released before exit");
        drop(stdin);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_mid_session_does_not_break_it() {
    let mut fx = sentinel_lab().await;
    within(Duration::from_secs(90), async {
        let server = stdio_server(&fx.lab.config_path(), &LOW_MIN_TTL).await;
        let client = &server.client;
        let kept = ok(
            client,
            "acquire_lock",
            json!({"resource": "survivor", "ttl_ms": 3000, "keepalive": true}),
        )
        .await;
        let fence = u64_of(&kept, "fencing_token");
        // A lease may be held on a bare majority (the engine stops at the third grant), and
        // losing one of those groups can legitimately lose it; kill a group outside it.
        let victim = kept["quorum"]["groups"]
            .as_array()
            .and_then(|votes| votes.iter().position(|v| v["vote"] != json!("granted")))
            .unwrap_or(0);
        fx.lab.kill(victim).await.expect("kill a master");
        let started = Instant::now();
        let mut round = 0;
        while started.elapsed() < Duration::from_secs(3) {
            let resource = format!("during-failover:{round}");
            let granted = ok(client, "acquire_lock", json!({"resource": resource})).await;
            assert_eq!(granted["acquired"], json!(true), "round {round}: {granted}");
            let released = release(client, &resource, str_of(&granted, "token")).await;
            assert_eq!(released["released"], json!(true));
            round += 1;
        }
        let status = ok(client, "lock_status", json!({"resource": "survivor"})).await;
        assert_eq!(status["held"], json!(true), "{status}");
        assert_eq!(u64_of(&status, "fencing_token"), fence);
        assert_eq!(status["keepalive"]["state"], json!("renewing"));
        // Sentinel promotes the replica and the session sees the group again.
        assert!(
            eventually(Duration::from_secs(20), || async {
                ok(client, "cluster_health", json!({})).await["reachable"] == json!(5)
            })
            .await,
            "g1 did not come back after failover"
        );
        server.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_groups_down_give_the_quorum_error() {
    // Plain masters without Sentinel: a killed group stays down.
    let mut fx = plain_lab().await;
    within(Duration::from_secs(60), async {
        let server = stdio_server(&fx.lab.config_path(), &[]).await;
        let client = &server.client;
        for group in 0..3 {
            fx.lab.kill(group).await.expect("kill a master");
        }
        let (message, error) =
            tool_error_of(client, "acquire_lock", json!({"resource": "no-quorum"})).await;
        assert_eq!(error, json!({"kind": "no_quorum"}), "{message}");
        assert!(message.contains("no quorum"), "{message}");
        for group in ["g1", "g2", "g3"] {
            assert!(message.contains(group), "{group} is not named: {message}");
        }
        assert!(
            !message.contains("g4 (") && !message.contains("g5 ("),
            "{message}"
        );
        assert!(
            message.contains("cluster_health"),
            "says what to do: {message}"
        );

        // The session still answers, and health says why.
        let health = call(client, "cluster_health", json!({})).await;
        assert!(text(&health).contains("NO quorum"), "{}", text(&health));
        let health = health.structured_content.expect("structured");
        assert_eq!(health["quorum_available"], json!(false));
        assert_eq!(health["reachable"], json!(2));
        server.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_refuses_a_foreign_host_header() {
    let fx = plain_lab().await;
    within(Duration::from_secs(60), async {
        let server = http_server(&fx.lab.config_path(), Some(TOKEN), &[]).await;
        let bearer = format!("Bearer {TOKEN}");
        let auth = ("Authorization", bearer.as_str());
        let [content_type, accept] = MCP_POST_HEADERS;

        // A page on a rebinding domain reaches the loopback server with its own Host header.
        for host in ["evil.example", "evil.example:80", "localhost.evil.example"] {
            let (status, body) = raw_http(
                &server.addr,
                "POST",
                "/mcp",
                &[content_type, accept, auth, ("Host", host)],
                RAW_INITIALIZE,
            )
            .await;
            assert_eq!(status, 403, "/mcp with Host {host}: {body}");
            let (status, body) = raw_http(
                &server.addr,
                "GET",
                "/metrics",
                &[auth, ("Host", host)],
                b"",
            )
            .await;
            assert_eq!(status, 403, "/metrics with Host {host}: {body}");
            assert!(!body.contains("quorumlock_mcp_"), "{body}");
        }
        // The token is still checked first, as on /mcp.
        let (status, _) = raw_http(
            &server.addr,
            "GET",
            "/metrics",
            &[("Host", "evil.example")],
            b"",
        )
        .await;
        assert_eq!(status, 401);
        // Loopback names are allowed, with any port.
        let port = server.addr.rsplit(':').next().expect("port");
        for host in [
            server.addr.clone(),
            format!("localhost:{port}"),
            "localhost".to_string(),
        ] {
            let (status, body) = raw_http(
                &server.addr,
                "GET",
                "/metrics",
                &[auth, ("Host", &host)],
                b"",
            )
            .await;
            assert_eq!(status, 200, "/metrics with Host {host}: {body}");
            assert!(body.contains("quorumlock_mcp_acquisitions_total"), "{body}");
        }
        // /healthz stays open to load balancers, whatever the Host.
        let (status, _) = raw_http(
            &server.addr,
            "GET",
            "/healthz",
            &[("Host", "evil.example")],
            b"",
        )
        .await;
        assert_eq!(status, 200);

        // --allowed-host replaces the loopback names on both routes.
        let named = http_server(
            &fx.lab.config_path(),
            Some(TOKEN),
            &["--allowed-host", "locks.internal"],
        )
        .await;
        for (host, expected) in [("locks.internal:8848", 200), ("127.0.0.1", 403)] {
            let (status, body) =
                raw_http(&named.addr, "GET", "/metrics", &[auth, ("Host", host)], b"").await;
            assert_eq!(status, expected, "/metrics with Host {host}: {body}");
            let (status, body) = raw_http(
                &named.addr,
                "POST",
                "/mcp",
                &[content_type, accept, auth, ("Host", host)],
                RAW_INITIALIZE,
            )
            .await;
            assert_eq!(status, expected, "/mcp with Host {host}: {body}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_status_shows_a_keepalive_to_its_session_only() {
    let fx = plain_lab().await;
    within(Duration::from_secs(60), async {
        let server = http_server(&fx.lab.config_path(), Some(TOKEN), &LOW_MIN_TTL).await;
        let (alice, mut alice_logs) = server.connect(Some(TOKEN)).await.expect("alice connects");
        let (bob, _) = server.connect(Some(TOKEN)).await.expect("bob connects");
        let granted = ok(
            &alice,
            "acquire_lock",
            json!({"resource": "private:job", "ttl_ms": 900, "keepalive": true, "owner": "alice"}),
        )
        .await;
        let fence = u64_of(&granted, "fencing_token");

        let mine = ok(&alice, "lock_status", json!({"resource": "private:job"})).await;
        assert_eq!(mine["keepalive"]["state"], json!("renewing"), "{mine}");
        assert_eq!(u64_of(&mine["keepalive"], "fencing_token"), fence);
        // Bob sees the lock, as everyone may, but not Alice's lease.
        let theirs = call(&bob, "lock_status", json!({"resource": "private:job"})).await;
        let summary = text(&theirs);
        let theirs = theirs.structured_content.expect("structured");
        assert_eq!(theirs["held"], json!(true), "{theirs}");
        assert_eq!(theirs["holder"]["owner"], json!("alice"));
        assert!(theirs.get("keepalive").is_none(), "{theirs}");
        assert!(!summary.contains("keepalive"), "{summary}");

        // How it ended is Alice's record too.
        fx.delete_everywhere(&common::lock_key("private:job")).await;
        let note = tokio::time::timeout(Duration::from_secs(5), alice_logs.recv())
            .await
            .expect("a logging notification within 5 s")
            .expect("notification channel open");
        assert_eq!(note["state"], json!("lost"));
        let mine = ok(&alice, "lock_status", json!({"resource": "private:job"})).await;
        assert_eq!(mine["keepalive"]["state"], json!("lost"), "{mine}");
        let theirs = ok(&bob, "lock_status", json!({"resource": "private:job"})).await;
        assert!(theirs.get("keepalive").is_none(), "{theirs}");
        let _ = alice.cancel().await;
        let _ = bob.cancel().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalives_over_the_session_cap_are_refused() {
    let fx = plain_lab().await;
    within(Duration::from_secs(60), async {
        let cap = [("QUORUMLOCK_MCP_MAX_KEEPALIVE_PER_SESSION", "2")];
        let server = stdio_server_with_env(&fx.lab.config_path(), &[], &cap).await;
        let client = &server.client;
        let keep =
            |resource: &str| json!({"resource": resource, "ttl_ms": 30000, "keepalive": true});
        let first = ok(client, "acquire_lock", keep("cap:1")).await;
        assert_eq!(first["keepalive"], json!(true));

        // Two at once for the last slot: exactly one gets it, and the other's lock, even if it
        // was granted before the cap was seen, is released before the answer.
        let (a, b) = tokio::join!(
            call(client, "acquire_lock", keep("cap:race-a")),
            call(client, "acquire_lock", keep("cap:race-b"))
        );
        let outcomes = [("cap:race-a", a), ("cap:race-b", b)];
        let refused: Vec<_> = outcomes
            .iter()
            .filter(|(_, result)| result.is_error == Some(true))
            .collect();
        assert_eq!(refused.len(), 1, "one of the two is refused");
        let (lost_race, refusal) = refused[0];
        assert!(
            text(refusal).contains("max_keepalive_per_session"),
            "{}",
            text(refusal)
        );
        assert_eq!(
            refusal.structured_content,
            Some(json!({"error": {"kind": "over_limit", "limit": "max_keepalive_per_session", "max": 2}}))
        );
        assert!(
            !fx.locks.status(lost_race).await.expect("status").held,
            "{lost_race} was left locked"
        );

        // The session is at its cap: a third keepalive lease is refused naming the limit and
        // its knob, and no lock is taken.
        let (message, error) = tool_error_of(client, "acquire_lock", keep("cap:3")).await;
        assert_eq!(
            error,
            json!({"kind": "over_limit", "limit": "max_keepalive_per_session", "max": 2})
        );
        assert!(
            message.contains("max_keepalive_per_session (2")
                && message.contains("QUORUMLOCK_MCP_MAX_KEEPALIVE_PER_SESSION"),
            "{message}"
        );
        assert!(
            !held(client, "cap:3").await,
            "the refused acquire left a lock"
        );
        assert!(!fx.locks.status("cap:3").await.expect("status").held);
        // Locks without keepalive are not capped; releasing a kept lease frees a slot.
        let plain = ok(client, "acquire_lock", json!({"resource": "cap:3"})).await;
        assert_eq!(plain["acquired"], json!(true));
        release(client, "cap:1", str_of(&first, "token")).await;
        let again = ok(client, "acquire_lock", keep("cap:4")).await;
        assert_eq!(again["keepalive"], json!(true));
        server.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalives_over_the_server_cap_are_refused() {
    let fx = plain_lab().await;
    within(Duration::from_secs(60), async {
        let cap = [("QUORUMLOCK_MCP_MAX_KEEPALIVE", "2")];
        let server = http_server_with_env(&fx.lab.config_path(), Some(TOKEN), &[], &cap).await;
        let (alice, _) = server.connect(Some(TOKEN)).await.expect("alice connects");
        let (bob, _) = server.connect(Some(TOKEN)).await.expect("bob connects");
        let keep =
            |resource: &str| json!({"resource": resource, "ttl_ms": 30000, "keepalive": true});
        let alices = ok(&alice, "acquire_lock", keep("fleet:a")).await;
        ok(&bob, "acquire_lock", keep("fleet:b")).await;
        let (message, error) = tool_error_of(&bob, "acquire_lock", keep("fleet:c")).await;
        assert_eq!(
            error,
            json!({"kind": "over_limit", "limit": "max_keepalive", "max": 2})
        );
        assert!(
            message.contains("max_keepalive (2")
                && message.contains("QUORUMLOCK_MCP_MAX_KEEPALIVE"),
            "{message}"
        );
        assert!(!fx.locks.status("fleet:c").await.expect("status").held);
        let (status, metrics) = raw_http(
            &server.addr,
            "GET",
            "/metrics",
            &[("Authorization", &format!("Bearer {TOKEN}"))],
            b"",
        )
        .await;
        assert_eq!(status, 200);
        assert!(
            metrics.contains("quorumlock_mcp_refusals_total{limit=\"max_keepalive\"} 1"),
            "{metrics}"
        );
        // Alice's release frees a slot for Bob.
        release(&alice, "fleet:a", str_of(&alices, "token")).await;
        ok(&bob, "acquire_lock", keep("fleet:c")).await;
        let _ = alice.cancel().await;
        let _ = bob.cancel().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_beyond_the_cap_is_refused_until_one_ends() {
    let fx = plain_lab().await;
    within(Duration::from_secs(60), async {
        let cap = [("QUORUMLOCK_MCP_MAX_SESSIONS", "2")];
        let server = http_server_with_env(&fx.lab.config_path(), Some(TOKEN), &[], &cap).await;
        let (first, _) = server.connect(Some(TOKEN)).await.expect("first session");
        let (second, _) = server.connect(Some(TOKEN)).await.expect("second session");

        let refused = server
            .connect(Some(TOKEN))
            .await
            .err()
            .expect("a third session is refused");
        assert!(
            refused.contains("503") || refused.contains("max_sessions"),
            "{refused}"
        );
        let bearer = format!("Bearer {TOKEN}");
        let [content_type, accept] = MCP_POST_HEADERS;
        let headers = [content_type, accept, ("Authorization", bearer.as_str())];
        let (status, body) = raw_http(&server.addr, "POST", "/mcp", &headers, RAW_INITIALIZE).await;
        assert_eq!(status, 503, "{body}");
        assert!(
            body.contains("max_sessions") && body.contains("QUORUMLOCK_MCP_MAX_SESSIONS"),
            "{body}"
        );
        // Open sessions keep working at the cap.
        let granted = ok(&second, "acquire_lock", json!({"resource": "sessions:ok"})).await;
        assert_eq!(granted["acquired"], json!(true));

        // Ending one frees its slot.
        first.cancel().await.expect("DELETE the first session");
        let (third, _) = server
            .connect(Some(TOKEN))
            .await
            .expect("a slot is free again");
        ok(&third, "cluster_health", json!({})).await;
        let (_, metrics) = raw_http(
            &server.addr,
            "GET",
            "/metrics",
            &[("Authorization", &bearer)],
            b"",
        )
        .await;
        assert!(metrics.contains("quorumlock_mcp_sessions 2"), "{metrics}");
        assert!(
            metrics.contains("quorumlock_mcp_refusals_total{limit=\"max_sessions\"}"),
            "{metrics}"
        );
        let _ = second.cancel().await;
        let _ = third.cancel().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_over_the_limit_are_refused_naming_it() {
    let fx = plain_lab().await;
    within(Duration::from_secs(60), async {
        let cap = [("QUORUMLOCK_MCP_MAX_CONCURRENT_CALLS", "1")];
        let server = stdio_server_with_env(&fx.lab.config_path(), &[], &cap).await;
        let client = &server.client;
        let held_lock = ok(
            client,
            "acquire_lock",
            json!({"resource": "busy:doc", "ttl_ms": 30000}),
        )
        .await;
        let token = str_of(&held_lock, "token").to_string();

        // One call waits for the lock and takes the only slot; another call meanwhile waits
        // briefly for a slot and is refused.
        let waiter = call(
            client,
            "acquire_lock",
            json!({"resource": "busy:doc", "wait_ms": 20000}),
        );
        let other = async {
            assert!(
                fx.subscribed(0, &released_channel("busy:doc"), Duration::from_secs(5))
                    .await,
                "the waiter did not start waiting"
            );
            let started = Instant::now();
            let refused = call(client, "cluster_health", json!({})).await;
            let waited = started.elapsed();
            // Then the lock is freed behind the server's back, and the waiter gets it.
            let released = fx.locks.release("busy:doc", &token).await.expect("release");
            assert!(released.released);
            (refused, waited)
        };
        let (waited_for_lock, (refused, waited)) = tokio::join!(waiter, other);
        assert_eq!(
            refused.is_error,
            Some(true),
            "{:?}",
            refused.structured_content
        );
        let message = text(&refused);
        assert_eq!(
            refused.structured_content,
            Some(
                json!({"error": {"kind": "over_limit", "limit": "max_concurrent_calls", "max": 1}})
            ),
            "{message}"
        );
        assert!(message.starts_with("over_limit: "), "{message}");
        assert!(
            message.contains("max_concurrent_calls")
                && message.contains("QUORUMLOCK_MCP_MAX_CONCURRENT_CALLS"),
            "{message}"
        );
        assert!(
            waited >= Duration::from_millis(900),
            "refused after only {waited:?}"
        );
        let waited_for_lock = waited_for_lock.structured_content.expect("structured");
        assert_eq!(
            waited_for_lock["acquired"],
            json!(true),
            "{waited_for_lock}"
        );
        // With the slot free again, calls run.
        let health = ok(client, "cluster_health", json!({})).await;
        assert_eq!(health["quorum_available"], json!(true));
        server.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_taken_kept_and_released_as_one() {
    let fx = plain_lab().await;
    within(Duration::from_secs(60), async {
        let server = stdio_server(&fx.lab.config_path(), &LOW_MIN_TTL).await;
        let client = &server.client;
        let set = ["edit:c", "edit:a", "edit:b"];
        let sorted = json!(["edit:a", "edit:b", "edit:c"]);
        let other = ok(
            client,
            "acquire_lock",
            json!({"resource": "edit:b", "ttl_ms": 30000, "owner": "agent-2", "purpose": "review"}),
        )
        .await;

        // One member held: refused, the member and its holder named, nothing of the set taken.
        let denied = call(
            client,
            "acquire_lock",
            json!({"resources": set, "owner": "agent-1"}),
        )
        .await;
        assert_eq!(denied.is_error, Some(false), "{}", text(&denied));
        let summary = text(&denied);
        assert!(
            summary.contains("`edit:b`")
                && summary.contains("agent-2")
                && summary.contains("none of them"),
            "{summary}"
        );
        let denied = denied.structured_content.expect("structured");
        assert_eq!(denied["acquired"], json!(false));
        assert_eq!(denied["resources"], sorted);
        assert_eq!(denied["held_resource"], json!("edit:b"));
        assert_eq!(denied["holder"]["owner"], json!("agent-2"));
        assert!(denied.get("token").is_none() && denied.get("fencing_token").is_none());
        for resource in ["edit:a", "edit:c"] {
            assert_eq!(
                fx.values_of(&common::lock_key(resource)).await,
                vec![None; 5],
                "{resource} was left locked"
            );
        }
        release(client, "edit:b", str_of(&other, "token")).await;

        // Granted as one keepalive lease: one token, one fencing token, every member shows it.
        let ttl_ms = 400;
        let granted = ok(
            client,
            "acquire_lock",
            json!({"resources": set, "ttl_ms": ttl_ms, "keepalive": true, "owner": "agent-1"}),
        )
        .await;
        assert_eq!(granted["acquired"], json!(true));
        assert_eq!(granted["resources"], sorted);
        assert_eq!(granted["resource"], json!("edit:a"));
        assert_eq!(granted["keepalive"], json!(true));
        let fence = u64_of(&granted, "fencing_token");
        assert!(
            fence > u64_of(&other, "fencing_token"),
            "edit:b's fencing token went back"
        );
        let token = str_of(&granted, "token").to_string();
        let started = Instant::now();
        // Held the whole time, by the same lease, well past three TTLs.
        while started.elapsed() < Duration::from_millis(4 * ttl_ms) {
            for resource in ["edit:a", "edit:b", "edit:c"] {
                let status = ok(client, "lock_status", json!({"resource": resource})).await;
                assert_eq!(
                    status["held"],
                    json!(true),
                    "{resource} lost after {:?}: {status}",
                    started.elapsed()
                );
                assert_eq!(u64_of(&status, "fencing_token"), fence, "{resource}");
                assert_eq!(
                    status["keepalive"]["state"],
                    json!("renewing"),
                    "{resource}"
                );
                assert_eq!(status["keepalive"]["resources"], sorted, "{resource}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        // Part of the set does not release it: the keepalive would go on renewing the rest.
        let partial = tool_error(
            client,
            "release_lock",
            json!({"resource": "edit:a", "token": token}),
        )
        .await;
        assert!(
            partial.contains("`resource`") && partial.contains("`edit:a`, `edit:b`, `edit:c`"),
            "{partial}"
        );
        assert!(
            held(client, "edit:a").await,
            "a partial release released something"
        );

        let released = ok(
            client,
            "release_lock",
            json!({"resources": ["edit:b", "edit:c", "edit:a"], "token": token}),
        )
        .await;
        assert_eq!(released["released"], json!(true));
        assert_eq!(released["resources"], sorted);
        for resource in ["edit:a", "edit:b", "edit:c"] {
            let status = ok(client, "lock_status", json!({"resource": resource})).await;
            assert_eq!(status["held"], json!(false), "{resource}: {status}");
            assert!(status.get("keepalive").is_none(), "{status}");
        }

        // Without keepalive, extend_lock and release_lock take the set by token too.
        let plain = ok(
            client,
            "acquire_lock",
            json!({"resources": ["files:y", "files:x"]}),
        )
        .await;
        let token = str_of(&plain, "token").to_string();
        let extended = ok(
            client,
            "extend_lock",
            json!({"resources": ["files:x", "files:y"], "token": token, "ttl_ms": 30000}),
        )
        .await;
        assert_eq!(extended["extended"], json!(true));
        assert_eq!(extended["resources"], json!(["files:x", "files:y"]));
        assert!(u64_of(&extended, "validity_ms") > 25_000);
        let released = ok(
            client,
            "release_lock",
            json!({"resources": ["files:y", "files:x"], "token": token}),
        )
        .await;
        assert_eq!(released["released"], json!(true));
        assert!(!held(client, "files:x").await && !held(client, "files:y").await);
        server.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_and_resources_are_exclusive() {
    let fx = plain_lab().await;
    within(Duration::from_secs(60), async {
        let server = stdio_server(&fx.lab.config_path(), &[]).await;
        let client = &server.client;
        let token = "0123456789abcdef0123456789abcdef";
        let too_many: Vec<String> = (0..65).map(|i| format!("many:{i}")).collect();
        let cases = [
            (
                json!({"resource": "both:a", "resources": ["both:b"]}),
                "`resource` and `resources`",
            ),
            (json!({}), "`resource` or `resources`"),
            (json!({"resources": []}), "`resources`"),
            (
                json!({"resources": ["dup:a", "dup:b", "dup:a"]}),
                "`dup:a` twice",
            ),
            (json!({"resources": ["ok", ""]}), "`resources[1]`"),
            (json!({"resources": ["ok", "bad\nname"]}), "`resources[1]`"),
            (json!({"resources": "one:name"}), "`resources`"),
            (json!({"resources": too_many}), "at most 64"),
        ];
        for (target, expected) in cases {
            for (tool, mut arguments) in [
                ("acquire_lock", json!({})),
                ("release_lock", json!({"token": token})),
                ("extend_lock", json!({"token": token, "ttl_ms": 10000})),
            ] {
                for (field, value) in target.as_object().expect("object") {
                    arguments[field] = value.clone();
                }
                let shown = arguments.to_string().chars().take(80).collect::<String>();
                let (message, error) = tool_error_of(client, tool, arguments).await;
                assert!(message.contains(expected), "{tool}({shown}): {message}");
                assert!(
                    message.starts_with("invalid_input: invalid argument"),
                    "{tool}({shown}): {message}"
                );
                let field = error["field"].as_str().unwrap_or_default();
                assert!(field.starts_with("resource"), "{tool}({shown}): {error}");
            }
        }
        // Refused before anything was asked of the groups: nothing is locked.
        for resource in ["both:a", "both:b", "dup:a", "dup:b", "ok", "many:0"] {
            assert!(
                !fx.locks.status(resource).await.expect("status").held,
                "{resource}"
            );
        }
        let one = ok(client, "acquire_lock", json!({"resources": ["alone"]})).await;
        assert_eq!(one["acquired"], json!(true));
        assert_eq!(one["resources"], json!(["alone"]));
        server.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_taken_shown_released_and_kept_alive() {
    let fx = plain_lab().await;
    within(Duration::from_secs(60), async {
        let server = stdio_server(&fx.lab.config_path(), &LOW_MIN_TTL).await;
        let client = &server.client;
        let mut tokens = Vec::new();
        let mut slots = Vec::new();
        for owner in ["agent-1", "agent-2"] {
            let granted = ok(
                client,
                "acquire_lock",
                json!({"resource": "api:search", "permits": 2, "ttl_ms": 30000, "owner": owner}),
            )
            .await;
            assert_eq!(granted["acquired"], json!(true), "{granted}");
            assert_eq!(granted["permits"], json!(2));
            let slot = u64_of(&granted, "permit");
            let token = str_of(&granted, "token").to_string();
            assert!(token.ends_with(&format!("-{slot}")), "{token}");
            slots.push(slot);
            tokens.push(token);
        }
        slots.sort_unstable();
        assert_eq!(slots, [0, 1]);

        // Every permit is taken: the next caller is refused, the semaphore named.
        let denied = call(
            client,
            "acquire_lock",
            json!({"resource": "api:search", "permits": 2, "owner": "agent-3"}),
        )
        .await;
        assert_eq!(denied.is_error, Some(false), "{}", text(&denied));
        let summary = text(&denied);
        assert!(
            summary.contains("permits of semaphore `api:search` is taken"),
            "{summary}"
        );
        let denied = denied.structured_content.expect("structured");
        assert_eq!(denied["acquired"], json!(false));
        assert!(denied.get("token").is_none(), "{denied}");
        assert!(denied["holder"]["owner"].is_string(), "{denied}");

        let status = ok(client, "lock_status", json!({"resource": "api:search"})).await;
        assert_eq!(status["semaphore"]["permits"], json!(2), "{status}");
        let mut owners: Vec<&str> = status["semaphore"]["holders"]
            .as_array()
            .expect("holders")
            .iter()
            .map(|h| h["owner"].as_str().expect("owner"))
            .collect();
        owners.sort_unstable();
        assert_eq!(owners, ["agent-1", "agent-2"]);
        let plain = ok(client, "lock_status", json!({"resource": "not:a:semaphore"})).await;
        assert!(plain.get("semaphore").is_none(), "{plain}");

        // Another count is refused naming `permits`; so is `permits` with `resources`.
        let differs = tool_error(
            client,
            "acquire_lock",
            json!({"resource": "api:search", "permits": 3}),
        )
        .await;
        assert!(
            differs.contains("`permits`") && differs.contains("2 permits"),
            "{differs}"
        );
        let with_set = tool_error(
            client,
            "acquire_lock",
            json!({"resources": ["a", "b"], "permits": 2}),
        )
        .await;
        assert!(with_set.contains("`permits`"), "{with_set}");

        // The permit's token extends and releases it; then one permit is free again.
        let extended = ok(
            client,
            "extend_lock",
            json!({"resource": "api:search", "token": tokens[0], "ttl_ms": 20000}),
        )
        .await;
        assert_eq!(extended["extended"], json!(true));
        let released = release(client, "api:search", &tokens[0]).await;
        assert_eq!(released["released"], json!(true));
        let status = ok(client, "lock_status", json!({"resource": "api:search"})).await;
        assert_eq!(
            status["semaphore"]["holders"].as_array().map(Vec::len),
            Some(1),
            "{status}"
        );

        // A keepalive permit survives several TTLs, then its token releases it.
        let ttl_ms = 400;
        let kept = ok(
            client,
            "acquire_lock",
            json!({"resource": "api:search", "permits": 2, "ttl_ms": ttl_ms, "keepalive": true, "owner": "agent-4"}),
        )
        .await;
        assert_eq!(kept["keepalive"], json!(true));
        let slot = u64_of(&kept, "permit");
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(4 * ttl_ms) {
            let status = ok(client, "lock_status", json!({"resource": "api:search"})).await;
            let holders = status["semaphore"]["holders"].as_array().expect("holders");
            assert!(
                holders
                    .iter()
                    .any(|h| h["permit"] == json!(slot) && h["owner"] == json!("agent-4")),
                "lost after {:?}: {status}",
                started.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let released = release(client, "api:search", str_of(&kept, "token")).await;
        assert_eq!(released["released"], json!(true));
        let status = ok(client, "lock_status", json!({"resource": "api:search"})).await;
        assert_eq!(
            status["semaphore"]["holders"].as_array().map(Vec::len),
            Some(1),
            "{status}"
        );
        server.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_origin_is_refused_and_csp_is_strict() {
    let fx = plain_lab().await;
    let server = http_server(&fx.lab.config_path(), Some(TOKEN), &[]).await;
    let bearer = format!("Bearer {TOKEN}");
    let post = |origin: Option<&'static str>| {
        let (addr, bearer) = (server.addr.clone(), bearer.clone());
        async move {
            let mut headers = vec![
                MCP_POST_HEADERS[0],
                MCP_POST_HEADERS[1],
                ("Authorization", bearer.as_str()),
            ];
            if let Some(origin) = origin {
                headers.push(("Origin", origin));
            }
            raw_http(&addr, "POST", "/mcp", &headers, RAW_INITIALIZE)
                .await
                .0
        }
    };
    // DNS rebinding: a page on evil.example that resolves to this server, with a stolen or
    // guessed token, still gets nothing.
    assert_eq!(post(Some("http://evil.example")).await, 403);
    assert_eq!(post(Some("null")).await, 403);
    assert_eq!(post(None).await, 200, "no Origin: not a browser");
    let own = format!("http://{}", server.addr);
    let own: &'static str = Box::leak(own.into_boxed_str());
    assert_eq!(post(Some(own)).await, 200, "the server's own pages");
    let metrics = [
        ("Authorization", bearer.as_str()),
        ("Origin", "http://evil.example"),
    ];
    assert_eq!(
        raw_http(&server.addr, "GET", "/metrics", &metrics, b"")
            .await
            .0,
        403
    );

    // The page needs no token, carries no data, and forbids everything but its own files.
    let (status, head, body) = raw_http_response(&server.addr, "GET", "/", &[], b"").await;
    assert_eq!(status, 200, "{head}");
    let head = head.to_ascii_lowercase();
    assert!(
        head.contains("content-security-policy: default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
        "{head}"
    );
    assert!(head.contains("x-content-type-options: nosniff"), "{head}");
    assert!(
        body.contains("/dashboard/app.js") && !body.contains("<script>"),
        "{body}"
    );
    let (status, _, script) =
        raw_http_response(&server.addr, "GET", "/dashboard/app.js", &[], b"").await;
    assert_eq!(status, 200);
    assert!(script.contains("sessionStorage") && !script.contains("innerHTML"));
    let foreign = [("Host", "evil.example")];
    assert_eq!(
        raw_http(&server.addr, "GET", "/", &foreign, b"").await.0,
        403
    );
    // The data behind it needs the token, and the same Host and Origin checks.
    let snapshot = "/dashboard/api/snapshot";
    assert_eq!(
        raw_http(&server.addr, "GET", snapshot, &[], b"").await.0,
        401
    );
    let with_token = [("Authorization", bearer.as_str())];
    let (status, body) = raw_http(&server.addr, "GET", snapshot, &with_token, b"").await;
    assert_eq!(status, 200, "{body}");
    let snapshot_json: Value = serde_json::from_str(&body).expect("snapshot JSON");
    assert_eq!(
        snapshot_json["health"]["groups"].as_array().map(Vec::len),
        Some(5)
    );
    assert_eq!(
        raw_http(
            &server.addr,
            "GET",
            "/dashboard/api/snapshot",
            &metrics,
            b""
        )
        .await
        .0,
        403
    );
}

/// An HTTP client that trusts only `ca_pem`.
fn client_trusting(ca_pem: &[u8]) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca_pem).expect("a PEM CA")])
        .build()
        .expect("an HTTP client")
}

async fn connect_https(url: &str, http: reqwest::Client) -> Result<Client, String> {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_string()).auth_header(TOKEN);
    rmcp::ServiceExt::serve(
        mcp_support::recorder().0,
        StreamableHttpClientTransport::with_client(http, config),
    )
    .await
    .map_err(|error| error.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_serves_only_clients_that_trust_the_ca() {
    // A TLS lab: its CA signed a certificate for 127.0.0.1 that the server presents.
    let fx = common::fixture(
        |spec| quorumlock::lab::LabSpec {
            tls: true,
            ..common::plain(spec)
        },
        |topology| topology,
    )
    .await;
    let tls = fx.lab.dir().join("tls");
    let (cert, key) = (tls.join("node.crt"), tls.join("node.key"));
    let tls_args = [
        "--tls-cert",
        cert.to_str().expect("UTF-8 path"),
        "--tls-key",
        key.to_str().expect("UTF-8 path"),
    ];
    let server = http_server(&fx.lab.config_path(), Some(TOKEN), &tls_args).await;
    assert!(
        server.url.starts_with("https://127.0.0.1:"),
        "{}",
        server.url
    );

    let ca = std::fs::read(tls.join("ca.crt")).expect("the lab's CA");
    let client = connect_https(&server.url, client_trusting(&ca))
        .await
        .expect("a client trusting the lab's CA connects over https");
    let granted = ok(&client, "acquire_lock", json!({"resource": "tls:a"})).await;
    assert_eq!(granted["acquired"], json!(true));
    release(&client, "tls:a", str_of(&granted, "token")).await;
    let _ = client.cancel().await;

    // Another CA: the handshake fails, and nothing is served.
    let other = rcgen::CertificateParams::new(Vec::<String>::new())
        .and_then(|mut params| {
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params.self_signed(&rcgen::KeyPair::generate()?)
        })
        .expect("another CA");
    let refused = connect_https(&server.url, client_trusting(other.pem().as_bytes()))
        .await
        .err()
        .expect("a client trusting another CA is refused");
    assert!(!refused.is_empty());
    // Plain HTTP to the TLS port gets no HTTP answer.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut plain = tokio::net::TcpStream::connect(&server.addr)
        .await
        .expect("connect");
    let request = format!(
        "GET /healthz HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        server.addr
    );
    plain.write_all(request.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer).await;
    assert!(
        !answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}

/// One tools/call by raw HTTP with no session and a client on an older protocol version;
/// returns the structured answer, or the error text as `{"error": …}`.
async fn stateless_call(addr: &str, tool: &str, arguments: Value) -> Value {
    let bearer = format!("Bearer {TOKEN}");
    let [content_type, accept] = MCP_POST_HEADERS;
    let headers = [
        content_type,
        accept,
        ("Authorization", bearer.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let request = json!({
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    });
    let body = serde_json::to_vec(&request).expect("request");
    let (status, head, body) = raw_http_response(addr, "POST", "/mcp", &headers, &body).await;
    assert_eq!(status, 200, "{head}\n{body}");
    assert!(
        !head.to_lowercase().contains("mcp-session-id"),
        "a stateless call got a session: {head}"
    );
    // The answer comes as JSON or as one server-sent event.
    let message = body
        .lines()
        .map(|line| line.strip_prefix("data:").unwrap_or(line).trim())
        .find_map(|line| {
            serde_json::from_str::<Value>(line)
                .ok()
                .filter(|v| v["id"] == json!(2))
        })
        .unwrap_or_else(|| panic!("no answer to the call in {body}"));
    let result = &message["result"];
    if result["isError"] == json!(true) {
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        return json!({ "error": text });
    }
    result["structuredContent"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_servers_open_no_session_and_serve_any_call() {
    let fx = sentinel_lab().await;
    within(Duration::from_secs(60), async {
        let config = fx.lab.config_path();
        let first = http_server(&config, Some(TOKEN), &["--stateless"]).await;
        let second = http_server(&config, Some(TOKEN), &["--stateless"]).await;
        // An older client's initialize opens no session.
        let bearer = format!("Bearer {TOKEN}");
        let [content_type, accept] = MCP_POST_HEADERS;
        let headers = [content_type, accept, ("Authorization", bearer.as_str())];
        let (status, head, body) =
            raw_http_response(&first.addr, "POST", "/mcp", &headers, RAW_INITIALIZE).await;
        assert_eq!(status, 200, "{body}");
        assert!(!head.to_lowercase().contains("mcp-session-id"), "{head}");

        // A lock taken through one server is held for the other, which can release it.
        let granted = stateless_call(
            &first.addr,
            "acquire_lock",
            json!({"resource": "stateless:job", "ttl_ms": 10000}),
        )
        .await;
        assert_eq!(granted["acquired"], json!(true), "{granted}");
        assert_eq!(granted["keepalive"], json!(false), "{granted}");
        let token = str_of(&granted, "token").to_string();
        let refused = stateless_call(
            &second.addr,
            "acquire_lock",
            json!({"resource": "stateless:job"}),
        )
        .await;
        assert_eq!(refused["acquired"], json!(false), "{refused}");
        let released = stateless_call(
            &second.addr,
            "release_lock",
            json!({"resource": "stateless:job", "token": token}),
        )
        .await;
        assert_eq!(released["released"], json!(true), "{released}");
        assert!(!fx.locks.status("stateless:job").await.expect("status").held);

        // Keepalive needs a session, so it is refused by name and nothing is left held.
        let keepalive = stateless_call(
            &first.addr,
            "acquire_lock",
            json!({"resource": "stateless:kept", "keepalive": true}),
        )
        .await;
        let error = keepalive["error"].as_str().unwrap_or_default();
        assert!(error.contains("`keepalive`"), "{keepalive}");
        assert!(
            !fx.locks
                .status("stateless:kept")
                .await
                .expect("status")
                .held
        );

        // Neither server keeps a session.
        for server in [&first, &second] {
            let (status, metrics) = raw_http(
                &server.addr,
                "GET",
                "/metrics",
                &[("Authorization", &bearer)],
                b"",
            )
            .await;
            assert_eq!(status, 200);
            assert!(metrics.contains("quorumlock_mcp_sessions 0"), "{metrics}");
        }
    })
    .await;
}

/// One agent's turns on a contended resource: it takes the lock `turns` times through its
/// own session, holds it briefly, and returns each hold's span with its fencing token.
async fn take_turns(client: Client, resource: &'static str, turns: usize) -> Vec<Hold> {
    let mut holds = Vec::new();
    for _ in 0..turns {
        let granted = ok(
            &client,
            "acquire_lock",
            json!({"resource": resource, "ttl_ms": 10000, "wait_ms": 30000}),
        )
        .await;
        assert_eq!(granted["acquired"], json!(true), "{granted}");
        let start = Instant::now();
        tokio::time::sleep(Duration::from_millis(2)).await;
        let end = Instant::now();
        holds.push(Hold {
            fence: u64_of(&granted, "fencing_token"),
            start,
            end,
        });
        release(&client, resource, str_of(&granted, "token")).await;
    }
    let _ = client.cancel().await;
    holds
}

struct Hold {
    fence: u64,
    start: Instant,
    end: Instant,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_locks_and_a_dead_ones_expire() {
    let fx = sentinel_lab().await;
    within(Duration::from_secs(120), async {
        // Retries 20 s apart: a waiter that gets the lock sooner was woken by the release.
        let mut topology = fx.topology.clone();
        topology.retry_delay_ms = 20_000;
        let config = fx.file("slow-retries.toml", &topology.to_toml());
        let mut first = http_server(&config, Some(TOKEN), &[]).await;
        let second = http_server(&config, Some(TOKEN), &[]).await;

        // Agents on both servers contend for one resource: no two holds overlap, and the
        // fencing tokens grow in the order of the holds.
        let mut agents = Vec::new();
        for server in [&first, &second, &first, &second] {
            let (client, _) = server.connect(Some(TOKEN)).await.expect("connect");
            agents.push(tokio::spawn(take_turns(client, "shared:job", 5)));
        }
        let mut holds = Vec::new();
        for agent in agents {
            holds.extend(agent.await.expect("agent"));
        }
        assert_eq!(holds.len(), 20);
        holds.sort_by_key(|hold| hold.start);
        for pair in holds.windows(2) {
            assert!(pair[0].end <= pair[1].start, "two holds overlap");
            assert!(pair[0].fence < pair[1].fence, "fencing tokens went back");
        }

        // A server that dies takes its sessions with it: their keepalive leases stop being
        // renewed and expire within their TTL, and an agent on the other server gets the lock.
        let (holder, _) = first.connect(Some(TOKEN)).await.expect("connect");
        let kept = ok(
            &holder,
            "acquire_lock",
            json!({"resource": "shared:kept", "ttl_ms": 5000, "keepalive": true}),
        )
        .await;
        assert_eq!(kept["keepalive"], json!(true), "{kept}");
        let (agent, _) = second.connect(Some(TOKEN)).await.expect("connect");
        first.kill().await;
        let killed = Instant::now();
        // The expiry is not announced, so the agent asks again now and then. The last
        // renewal came before the kill, so the lease ends within its TTL of it.
        let taken = loop {
            let answer = ok(
                &agent,
                "acquire_lock",
                json!({"resource": "shared:kept", "ttl_ms": 5000}),
            )
            .await;
            if answer["acquired"] == json!(true) {
                break answer;
            }
            assert!(
                killed.elapsed() < Duration::from_secs(15),
                "the killed server's keepalive lease (TTL 5 s) still held: {answer}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert!(u64_of(&taken, "fencing_token") > u64_of(&kept, "fencing_token"));
        drop(holder);
        let _ = agent.cancel().await;
    })
    .await;
}
