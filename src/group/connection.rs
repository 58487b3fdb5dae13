//! Keeping a fred client connected, and closing it. fred gives up for good when a client's
//! first connection fails (and without `fail_fast` it would wait one reconnect delay before
//! even trying), so a small task starts the client again until its first connection succeeds;
//! from then on fred's reconnect policy keeps it connected. Closing a client stops that task,
//! so no reconnection loop outlives the engine.

use std::sync::Mutex;
use std::time::Duration;

use fred::error::Error as RedisError;
use fred::interfaces::{ClientLike, EventInterface};
use tokio_util::task::AbortOnDropHandle;

/// The task that keeps one client connected; [`shut`] stops it, and so does dropping it, so
/// an engine dropped without `close` leaves no connection behind.
pub(crate) type Connection = AbortOnDropHandle<()>;

/// Starts connecting `client`, again `retry` after each failed first connection, until one
/// succeeds (or the client is closed).
pub(crate) fn keep_connected<C: ClientLike + 'static>(client: &C, retry: Duration) -> Connection {
    let client = client.clone();
    AbortOnDropHandle::new(tokio::spawn(async move {
        loop {
            // Aborted with this task: fred's own task must not run on after `shut`.
            let running = AbortOnDropHandle::new(client.connect());
            match running.await {
                Ok(Err(_)) => tokio::time::sleep(retry).await,
                // Closed by QUIT, or out of reconnect attempts.
                _ => return,
            }
        }
    }))
}

/// [`keep_connected`], then waits at most `limit` for the first connection: `Ok(Ok)` once
/// connected, `Ok(Err)` with the first failure (tries go on in the background), `Err` when
/// nothing answered in time.
pub(crate) async fn connect<C: EventInterface + 'static>(
    client: &C,
    retry: Duration,
    limit: Duration,
) -> (
    Connection,
    Result<Result<(), RedisError>, tokio::time::error::Elapsed>,
) {
    // Subscribed before connecting, so the first failure cannot pass unseen.
    let mut errors = client.error_rx();
    let connection = keep_connected(client, retry);
    let first = tokio::time::timeout(limit, async {
        tokio::select! {
            connected = client.wait_for_connect() => connected,
            failed = errors.recv() => match failed {
                Ok((error, _)) => Err(error),
                Err(_) => client.wait_for_connect().await,
            },
        }
    })
    .await;
    (connection, first)
}

/// Closes `client` and stops the task keeping it connected. QUIT only when connected, and
/// within `limit`: a client that is reconnecting would hold it until the server is back.
pub(crate) async fn shut<C: ClientLike>(
    client: &C,
    connection: Option<Connection>,
    limit: Duration,
) {
    if client.is_connected() {
        let _ = tokio::time::timeout(limit, client.quit()).await;
    }
    if let Some(connection) = connection {
        connection.abort();
    }
}

/// [`shut`] for every client and the connection kept for it in `connections`, all at once.
/// The connections are taken, so a second call does nothing.
pub(crate) async fn shut_all<C: ClientLike>(
    clients: &[C],
    connections: &Mutex<Vec<Connection>>,
    limit: Duration,
) {
    let connections = connections
        .lock()
        .map(|mut connections| std::mem::take(&mut *connections))
        .unwrap_or_default();
    let shutting = clients
        .iter()
        .zip(connections)
        .map(|(client, connection)| shut(client, Some(connection), limit));
    futures::future::join_all(shutting).await;
}
