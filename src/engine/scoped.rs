//! Work done under a lock: [`Locks::with_lock`] acquires, keeps the lease renewed while a
//! caller's future runs, drops the work the moment the lease is lost or capped, and releases
//! the lease only once the work is gone. It owns the [`LeaseScope`] the work is handed (who
//! it runs for, until when, and how it notices that the lease ended) and the choice between
//! the work's output and [`Error::LeaseLost`].

use std::future::Future;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::engine::error::Error;
use crate::engine::lease::{LeaseEnd, LeaseWatch};
use crate::engine::locks::{AcquireOptions, Locks};

/// What the work of [`Locks::with_lock`] runs under: the lease's resource, token and
/// fencing token, and a signal that fires when the lease no longer protects the work.
///
/// Cheap to clone: hand a clone to a task or thread the work starts. Such a task outlives
/// the work when `with_lock` drops it, so it should watch [`LeaseScope::lost`] or check
/// [`LeaseScope::is_lost`] before each write.
#[derive(Debug, Clone)]
pub struct LeaseScope {
    resource: String,
    token: String,
    fencing_token: u64,
    lost: CancellationToken,
    lease: LeaseWatch,
}

impl LeaseScope {
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The secret that proves ownership (to extend or release by token elsewhere).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Pass it with every write to the protected resource: it is larger than the fencing
    /// token of every earlier holder.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// True once the lease no longer protects the work: the keepalive found it lost (or
    /// capped by `max_hold_ms`), or `with_lock` returned or was dropped.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// The instant, on the engine's clock ([`crate::Locks::clock`]), until which the lease
    /// protects the work; it moves with each renewal. A task the work started should not
    /// begin a write it cannot finish by then. After a loss the lock may be gone before it.
    pub fn valid_until(&self) -> Instant {
        self.lease.valid_until()
    }

    /// Time left before the lease may no longer be relied on (zero once it is lost).
    pub fn validity(&self) -> Duration {
        if self.is_lost() {
            return Duration::ZERO;
        }
        self.lease.validity()
    }

    /// Resolves when [`LeaseScope::is_lost`] becomes true (at once if it already is).
    /// Cancel-safe: `select!` on it beside the work's own steps.
    pub async fn lost(&self) {
        self.lost.cancelled().await
    }
}

impl Locks {
    /// Acquires `resource` with `options`, runs `work` while a keepalive renews the lease
    /// (at ttl/3), then releases it and returns the work's output.
    ///
    /// - The acquire fails as [`Locks::acquire_with`] does (`Held`, `Unavailable`, ...); then
    ///   `work` is never called.
    /// - If the keepalive finds the lease lost while the work runs (another holder or an
    ///   expiry took it, or it was force-released; or it reached `max_hold_ms`),
    ///   [`LeaseScope::lost`] fires, the work future is dropped at its current await point,
    ///   and `with_lock` returns [`Error::LeaseLost`]. The work may be partly done: writes
    ///   fenced with [`LeaseScope::fencing_token`] are rejected once a later holder wrote.
    ///   The keepalive declares the loss at the end of the lease's validity, even while a
    ///   renewal hangs, and at `max_hold_ms` the work is dropped before the lease is
    ///   released. The drift allowance (the keys outlive the validity) covers the time to
    ///   drop the work, on a runtime that is not starved.
    /// - When the work finishes first, the scope is marked lost (the lease is about to end),
    ///   the lease is released, and the output is returned. A release that fails is logged;
    ///   the lock then frees itself within its TTL. `Ok` means the lease was still valid
    ///   when the work finished.
    ///
    /// Drop semantics: dropping the future `with_lock` returns drops the work future, marks
    /// the scope lost and stops the keepalive, which releases the lease in the background
    /// ([`crate::Locks::close`] waits for that release). A task the work spawned is not
    /// stopped by any of this; it learns of the end through its clone of the scope.
    ///
    /// ```no_run
    /// # async fn example(locks: quorumlock::Locks) -> Result<(), quorumlock::Error> {
    /// use quorumlock::AcquireOptions;
    /// let rows = locks
    ///     .with_lock("db:migrations", &AcquireOptions::default(), |scope| async move {
    ///         // write with scope.fencing_token(); check scope.is_lost() before a write
    ///         scope.fencing_token()
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn with_lock<T, F, Fut>(
        &self,
        resource: &str,
        options: &AcquireOptions,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(LeaseScope) -> Fut,
        Fut: Future<Output = T>,
    {
        let kept = self.acquire_with(resource, options).await?.keepalive();
        let lost = CancellationToken::new();
        // Whatever way this function ends (returned, dropped, unwound), the scope says so.
        let _ended = lost.clone().drop_guard();
        let scope = LeaseScope {
            resource: kept.resource().to_string(),
            token: kept.token().to_string(),
            fencing_token: kept.fencing_token(),
            lost: lost.clone(),
            lease: kept.watch(),
        };
        let outcome = {
            // Pinned in this block, so a lost lease drops the work here, before returning.
            let work = std::pin::pin!(work(scope));
            tokio::select! {
                // A loss seen together with the end of the work is reported: `Ok` promises
                // that no renewal failed while the work ran.
                biased;
                end = kept.lost() => {
                    lost.cancel();
                    Err(end)
                }
                // Finished after the validity ran out, before the keepalive's timer said so:
                // the lease did not cover all of it.
                output = work => match kept.ended() {
                    None if kept.validity().is_zero() => Err(LeaseEnd::Lost(
                        "the validity ran out before the work finished".into(),
                    )),
                    Some(end @ LeaseEnd::Lost(_)) => Err(end),
                    _ => Ok(output),
                },
            }
        };
        lost.cancel();
        // The work future is gone by now: only then may the lock go to someone else.
        let released = kept.release().await;
        match outcome {
            Ok(output) => {
                match released {
                    Ok(released) if !released.released && released.groups_maybe_released() > 0 => {
                        tracing::warn!(%resource, groups = released.groups_maybe_released(), "the lock was gone when the work finished, and whether the release or the lease's end removed it cannot be told");
                    }
                    Ok(released) if !released.released => {
                        tracing::warn!(%resource, "the lease was no longer held when the work finished (expired or force-released since the last renewal)");
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::warn!(%resource, %error, "releasing after the work failed; the TTL will free the lock");
                    }
                }
                Ok(output)
            }
            Err(end) => Err(Error::LeaseLost {
                resource: resource.to_string(),
                reason: match end {
                    LeaseEnd::Lost(reason) => reason,
                    LeaseEnd::MaxHold => format!(
                        "held for max_hold_ms ({} ms): the work was stopped and the lock released",
                        self.topology().max_hold().as_millis()
                    ),
                    LeaseEnd::Released => "released while the work ran".to_string(),
                },
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compiles only while `with_lock` around `Send` work is itself `Send`, so that it can
    /// be spawned.
    #[allow(dead_code)]
    fn with_lock_can_be_spawned(locks: Locks) {
        tokio::spawn(async move {
            let options = AcquireOptions::default();
            locks
                .with_lock("x", &options, |scope| async move { scope.fencing_token() })
                .await
        });
    }
}
