//! What a caller holds: the acquire builder, a [`Lease`] (released in the background when
//! dropped), and a [`KeptLease`] that a keepalive task renews until it is dropped, released,
//! capped by `max_hold`, or lost, and that tells its owner at once when it is lost.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{oneshot, watch};

use crate::engine::clock::Clock;
use crate::engine::error::Error;
use crate::engine::locks::{AcquireOptions, Acquired, Engine, Locks, Released, lifetime};
use crate::engine::resource::{LeaseKeys, permit_handle};
use crate::engine::vote::GroupVote;

/// An acquire being built: `locks.acquire("x").ttl(..).wait(..).owner(..).await`.
#[must_use = "an acquire does nothing until it is awaited"]
pub struct Acquire {
    locks: Locks,
    target: Target,
    options: AcquireOptions,
}

/// What an acquire asks for.
enum Target {
    One(String),
    /// Several resources, all or nothing.
    Set(Vec<String>),
    /// One permit of a semaphore.
    Permit {
        name: String,
        permits: u32,
    },
}

impl Acquire {
    pub(crate) fn new(locks: Locks, resource: String) -> Self {
        Acquire::with_target(locks, Target::One(resource))
    }

    pub(crate) fn set(locks: Locks, resources: Vec<String>) -> Self {
        Acquire::with_target(locks, Target::Set(resources))
    }

    pub(crate) fn permit(locks: Locks, name: String, permits: u32) -> Self {
        Acquire::with_target(locks, Target::Permit { name, permits })
    }

    fn with_target(locks: Locks, target: Target) -> Self {
        let mut options = AcquireOptions::default();
        options.ttl = options.ttl.min(locks.topology().max_ttl());
        Acquire {
            locks,
            target,
            options,
        }
    }

    /// How long the lock lives unless extended (default 15 s, or max_ttl_ms when lower).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.options.ttl = ttl;
        self
    }

    /// How long to keep retrying while it is held or the quorum is down (default: one try).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = wait;
        self
    }

    /// Who holds it (shown to others).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.options.owner = Some(owner.into());
        self
    }

    /// Why (shown to others).
    pub fn purpose(mut self, purpose: impl Into<String>) -> Self {
        self.options.purpose = Some(purpose.into());
        self
    }

    /// Acquire, then keep the lease renewed in the background until it is dropped.
    pub async fn keepalive(self) -> Result<KeptLease, Error> {
        Ok(self.await?.keepalive())
    }
}

impl IntoFuture for Acquire {
    type Output = Result<Lease, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            match &self.target {
                Target::One(resource) => self.locks.acquire_with(resource, &self.options).await,
                Target::Set(resources) => {
                    self.locks.acquire_all_with(resources, &self.options).await
                }
                Target::Permit { name, permits } => {
                    self.locks
                        .acquire_permit_with(name, *permits, &self.options)
                        .await
                }
            }
        })
    }
}

/// A held lock. Pass [`Lease::fencing_token`] with every write to the protected resource.
/// Dropping a lease that was not released releases it in the background.
pub struct Lease {
    engine: Arc<Engine>,
    keys: Arc<LeaseKeys>,
    /// The token the groups hold.
    held_as: String,
    /// The token the holder is given: the same, or for a permit the token and its slot.
    token: String,
    fence: u64,
    ttl: Duration,
    attempts: u32,
    started: Instant,
    valid_until: Instant,
    votes: Vec<GroupVote>,
    open: bool,
}

/// A lease whose holder no longer releases it: what is needed to extend or release it by
/// token, and to write with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detached {
    /// The resource; for a set, the first of [`Detached::resources`].
    pub resource: String,
    /// Every resource the lease holds, in canonical order (one, unless it is a set).
    pub resources: Vec<String>,
    /// The secret that proves ownership to release and extend.
    pub token: String,
    pub fencing_token: u64,
}

impl Lease {
    pub(crate) fn new(
        engine: Arc<Engine>,
        keys: Arc<LeaseKeys>,
        ttl: Duration,
        acquired: Acquired,
        permit: bool,
    ) -> Self {
        let token = if permit {
            permit_handle(&acquired.token, acquired.slot)
        } else {
            acquired.token.clone()
        };
        Lease {
            engine,
            keys,
            token,
            held_as: acquired.token,
            fence: acquired.fence,
            ttl,
            attempts: acquired.attempts,
            started: acquired.started,
            valid_until: acquired.valid_until,
            votes: acquired.votes,
            open: true,
        }
    }

    /// The resource this lease holds; for a set, the first of [`Lease::resources`].
    pub fn resource(&self) -> &str {
        &self.keys.names[0]
    }

    /// Every resource this lease holds, in canonical (sorted) order: one, unless it came
    /// from [`crate::Locks::acquire_all`].
    pub fn resources(&self) -> &[String] {
        &self.keys.names
    }

    /// The secret that proves ownership to release and extend (for a permit, it names the
    /// permit's slot too).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Strictly larger than the fencing token of every earlier holder of this resource. A set
    /// carries the same fencing token for each of its resources, and it is above every
    /// earlier holder's of each of them.
    pub fn fencing_token(&self) -> u64 {
        self.fence
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Time left before the lease may no longer be relied on (zero once it ran out).
    pub fn validity(&self) -> Duration {
        self.valid_until
            .saturating_duration_since(self.engine.clock.now())
    }

    /// The monotonic instant the lease stops being valid, on the engine's clock
    /// ([`crate::Locks::clock`]).
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// The wall-clock time the lease stops being valid (an estimate from this host's clock).
    pub fn expires_at(&self) -> SystemTime {
        SystemTime::now() + self.validity()
    }

    /// How many attempts the acquire made (above 1 when it had to wait for another holder).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// When the acquire round that produced this lease started.
    pub fn acquired_at(&self) -> Instant {
        self.started
    }

    /// Each group's vote in the round that granted the lease.
    pub fn votes(&self) -> &[GroupVote] {
        &self.votes
    }

    /// Renews the lease for `ttl` on a majority; returns the new validity. When it fails, the
    /// validity is cut to what `ttl` would give, should that be shorter: a try that timed out
    /// may have applied it.
    pub async fn extend(&mut self, ttl: Duration) -> Result<Duration, Error> {
        let started = self.engine.clock.now();
        let extended = match self.engine.extend(&self.keys, &self.held_as, ttl).await {
            Ok(extended) => extended,
            Err(error) => {
                // A try that timed out may still have set the shorter TTL on a majority: the
                // lease may not be relied on past it.
                let shortened = started + lifetime(ttl, self.engine.topology.drift_factor);
                self.valid_until = self.valid_until.min(shortened);
                return Err(error);
            }
        };
        self.ttl = ttl;
        self.valid_until = extended.valid_until;
        self.votes = extended.votes;
        Ok(self.validity())
    }

    /// Releases the lease on every group.
    pub async fn release(mut self) -> Result<Released, Error> {
        self.open = false;
        self.engine
            .release(&self.keys, &self.held_as, Some(self.valid_until))
            .await
    }

    /// Gives up responsibility for releasing: the lock stays until its TTL or an explicit
    /// release by token (used when the token is handed to someone else).
    pub fn detach(mut self) -> Detached {
        self.open = false;
        Detached {
            resource: self.resource().to_string(),
            resources: self.keys.names.clone(),
            token: std::mem::take(&mut self.token),
            fencing_token: self.fence,
        }
    }

    /// Starts a keepalive task that renews at about ttl/3.
    pub fn keepalive(mut self) -> KeptLease {
        self.open = false;
        let lease = Lease {
            engine: self.engine.clone(),
            keys: self.keys.clone(),
            held_as: self.held_as.clone(),
            token: self.token.clone(),
            fence: self.fence,
            ttl: self.ttl,
            attempts: self.attempts,
            started: self.started,
            valid_until: self.valid_until,
            votes: std::mem::take(&mut self.votes),
            open: true,
        };
        KeptLease::start(lease)
    }
}

impl std::fmt::Debug for Lease {
    // The token is left out: it is the secret that releases the lock.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("resources", &self.keys.names)
            .field("fencing_token", &self.fence)
            .field("validity", &self.validity())
            .finish_non_exhaustive()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        // Without a runtime there is nothing to release with; the TTL frees the lock.
        if tokio::runtime::Handle::try_current().is_ok() {
            let engine = self.engine.clone();
            let (keys, token) = (self.keys.clone(), std::mem::take(&mut self.held_as));
            let valid_until = Some(self.valid_until);
            // Tracked with the engine's other background deletes: `Locks::close` waits for it.
            let cleanup = engine.cleanup.clone();
            cleanup.spawn(async move {
                if let Err(error) = engine.release(&keys, &token, valid_until).await {
                    let resource = keys.label();
                    tracing::warn!(%resource, %error, "background release of a dropped lease failed; the TTL will free it");
                }
            });
        }
    }
}

/// Why a kept lease ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseEnd {
    /// A renewal found the lock no longer ours, or the validity ran out before a renewal
    /// succeeded. The lock may already be someone else's: stop at once.
    Lost(String),
    /// The keepalive reached `max_hold` and stopped renewing. The lease still holds the lock
    /// until [`KeptLease::valid_until`], so the owner can stop its work first and then
    /// release; nobody else can take the lock before that release or that instant.
    MaxHold,
    /// The owner released it.
    Released,
}

#[derive(Debug, Clone)]
struct KeepaliveState {
    valid_until: Instant,
    ended: Option<LeaseEnd>,
    /// A renewal failed since the last one that succeeded.
    failing: bool,
}

/// Where a kept lease stands, as its keepalive task last published it: a cheap view for the
/// owner and for every clone of a [`crate::LeaseScope`].
#[derive(Debug, Clone)]
pub(crate) struct LeaseWatch {
    state: watch::Receiver<KeepaliveState>,
    /// The engine's clock, which the lease's validity is measured on.
    clock: Clock,
}

impl LeaseWatch {
    /// The end of the validity the last renewal established, on the engine's clock. After
    /// a loss the lock may be gone before it.
    pub(crate) fn valid_until(&self) -> Instant {
        self.state.borrow().valid_until
    }

    /// Time left before the lease may no longer be relied on: zero once it ran out, was
    /// lost or was released. It keeps running down after [`LeaseEnd::MaxHold`].
    pub(crate) fn validity(&self) -> Duration {
        let state = self.state.borrow();
        match state.ended {
            None | Some(LeaseEnd::MaxHold) => state
                .valid_until
                .saturating_duration_since(self.clock.now()),
            Some(LeaseEnd::Lost(_) | LeaseEnd::Released) => Duration::ZERO,
        }
    }

    pub(crate) fn ended(&self) -> Option<LeaseEnd> {
        self.state.borrow().ended.clone()
    }

    /// True while the last renewal failed and none has succeeded since.
    pub(crate) fn failing(&self) -> bool {
        self.state.borrow().failing
    }

    /// Resolves at the next change of the lease's state: a renewal, a failed one, an end.
    /// Cancel-safe; each change is seen once by this view.
    #[cfg_attr(not(feature = "cli"), allow(dead_code))]
    pub(crate) async fn changed(&mut self) {
        if self.state.changed().await.is_err() {
            // The keepalive task is gone: nothing will change any more.
            std::future::pending::<()>().await;
        }
    }

    /// Resolves as soon as the lease ends (lost, capped or released).
    pub(crate) async fn ended_now(&self) -> LeaseEnd {
        let mut state = self.state.clone();
        match state.wait_for(|s| s.ended.is_some()).await {
            Ok(s) => s.ended.clone().unwrap_or(LeaseEnd::Released),
            Err(_) => LeaseEnd::Released,
        }
    }
}

/// A lease that a background task keeps renewing. Dropping it stops renewal and releases it.
pub struct KeptLease {
    resources: Vec<String>,
    token: String,
    fence: u64,
    ttl: Duration,
    watch: LeaseWatch,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Option<Result<Released, Error>>>>,
}

impl KeptLease {
    fn start(lease: Lease) -> Self {
        let (state_tx, state) = watch::channel(KeepaliveState {
            valid_until: lease.valid_until,
            ended: None,
            failing: false,
        });
        let (stop, stopped) = oneshot::channel();
        let (resources, token, fence, ttl) = (
            lease.keys.names.clone(),
            lease.token.clone(),
            lease.fence,
            lease.ttl,
        );
        let clock = lease.engine.clock.clone();
        let task = tokio::spawn(renew(lease, state_tx, stopped));
        KeptLease {
            resources,
            token,
            fence,
            ttl,
            watch: LeaseWatch { state, clock },
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// The resource this lease holds; for a set, the first of [`KeptLease::resources`].
    pub fn resource(&self) -> &str {
        &self.resources[0]
    }

    /// Every resource this lease holds, in canonical order.
    pub fn resources(&self) -> &[String] {
        &self.resources
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    pub fn fencing_token(&self) -> u64 {
        self.fence
    }

    /// The TTL each renewal asks for.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Time left before the lease may no longer be relied on. It grows with each renewal,
    /// keeps running down after [`LeaseEnd::MaxHold`], and is zero once the lease was lost
    /// or released.
    pub fn validity(&self) -> Duration {
        self.watch.validity()
    }

    /// The end of the validity the last renewal established, on the engine's clock
    /// ([`crate::Locks::clock`]); it moves with each renewal. Work under the lease must have
    /// stopped by then, and after a loss the lock may be gone before it.
    pub fn valid_until(&self) -> Instant {
        self.watch.valid_until()
    }

    /// How the lease ended, if it has.
    pub fn ended(&self) -> Option<LeaseEnd> {
        self.watch.ended()
    }

    /// Resolves as soon as the lease ends: lost (at the latest when its validity runs out
    /// without a renewal), capped by `max_hold`, or released.
    pub async fn lost(&self) -> LeaseEnd {
        self.watch.ended_now().await
    }

    /// [`KeptLease::lost`] as a future that does not borrow the lease: for a caller that
    /// waits for the end in another task while it keeps the lease (and may release it).
    pub fn lost_signal(&self) -> impl Future<Output = LeaseEnd> + Send + use<> {
        let watch = self.watch.clone();
        async move { watch.ended_now().await }
    }

    /// A view of the lease's state that follows its renewals (see [`LeaseWatch`]).
    pub(crate) fn watch(&self) -> LeaseWatch {
        self.watch.clone()
    }

    /// True while the last renewal failed and none has succeeded since.
    pub fn renewals_failing(&self) -> bool {
        self.watch.failing()
    }

    /// Stops renewing and releases the lock on every group.
    pub async fn release(mut self) -> Result<Released, Error> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Some(task) = self.task.take() else {
            return Err(Error::invalid("lease", "already released"));
        };
        match task.await {
            Ok(Some(result)) => result,
            Ok(None) | Err(_) => Ok(Released {
                released: false,
                groups_released: 0,
                votes: Vec::new(),
            }),
        }
    }
}

impl std::fmt::Debug for KeptLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptLease")
            .field("resources", &self.resources)
            .field("fencing_token", &self.fence)
            .field("validity", &self.validity())
            .field("ended", &self.ended())
            .finish_non_exhaustive()
    }
}

impl Drop for KeptLease {
    fn drop(&mut self) {
        // The task releases the lease when told to stop (or when this sender goes away).
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Renewals by every keepalive task of this process, for load reports.
static RENEWED: AtomicU64 = AtomicU64::new(0);
static LATE: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);
static LOST: AtomicU64 = AtomicU64::new(0);

/// What every keepalive task of this process has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenewalCounts {
    /// Renewals that succeeded.
    pub renewed: u64,
    /// Of those, renewals that finished more than one interval (ttl/3) after they were due.
    pub late: u64,
    /// Renewals that failed and were retried.
    pub failed: u64,
    /// Leases given up as lost.
    pub lost: u64,
}

/// The renewal counts of every keepalive task of this process since it started.
pub(crate) fn renewal_counts() -> RenewalCounts {
    RenewalCounts {
        renewed: RENEWED.load(Ordering::Relaxed),
        late: LATE.load(Ordering::Relaxed),
        failed: FAILED.load(Ordering::Relaxed),
        lost: LOST.load(Ordering::Relaxed),
    }
}

/// The keepalive loop. Returns the release result when it released the lease itself.
///
/// The owner always hears of an end before the lock can go to anyone else: at `max_hold` it
/// stops renewing and waits for the owner's release (the lock lapses at the end of its
/// validity if that never comes), and when
/// renewals fail it declares the lease lost no later than the end of its validity, by a
/// timer, even while a renewal is still in flight.
async fn renew(
    mut lease: Lease,
    state: watch::Sender<KeepaliveState>,
    mut stopped: oneshot::Receiver<()>,
) -> Option<Result<Released, Error>> {
    let ttl = lease.ttl;
    let interval = (ttl / 3).max(Duration::from_millis(1));
    let hold_until = lease.started + lease.engine.topology.max_hold();
    let clock = lease.engine.clock.clone();
    let end = |reason: LeaseEnd| state.send_modify(|s| s.ended = Some(reason));
    let lost = |reason: String| {
        LOST.fetch_add(1, Ordering::Relaxed);
        end(LeaseEnd::Lost(reason));
    };
    // The timer that ends the lease when its validity runs out without a renewal.
    let expiry = |lease: &Lease| tokio::time::sleep_until(clock.to_real(lease.valid_until).into());
    let mut next = Instant::now() + interval;
    let mut last_error: Option<Error> = None;
    loop {
        tokio::select! {
            _ = &mut stopped => {
                let released = lease.release().await;
                end(LeaseEnd::Released);
                return Some(released);
            }
            _ = expiry(&lease) => {
                lost(expired(last_error.as_ref()));
                return None;
            }
            _ = tokio::time::sleep_until(next.into()) => {}
        }
        if clock.now() + ttl > hold_until {
            // Told first, released after: the owner stops its work, then releases (or drops
            // the lease); until then the lock is still ours, up to the end of its validity.
            end(LeaseEnd::MaxHold);
            let _ = (&mut stopped).await;
            return Some(lease.release().await);
        }
        let due = next;
        let deadline = expiry(&lease);
        let renewed = tokio::select! {
            renewed = lease.extend(ttl) => renewed,
            _ = deadline => {
                lost(expired(last_error.as_ref()));
                return None;
            }
        };
        match renewed {
            Ok(_) => {
                RENEWED.fetch_add(1, Ordering::Relaxed);
                if Instant::now() > due + interval {
                    LATE.fetch_add(1, Ordering::Relaxed);
                }
                state.send_modify(|s| {
                    s.valid_until = lease.valid_until;
                    s.failing = false;
                });
                next = Instant::now() + interval;
                last_error = None;
            }
            // Given up: the lease is dropped still open, so its grants are released by token
            // in the background (a token is never granted again, so this can only take what
            // is ours), instead of standing until their TTL on the groups that renewed them.
            Err(Error::NotHeld { .. }) => {
                lost("another holder or an expiry took the lock".into());
                return None;
            }
            Err(error) => {
                // Keep trying while the current validity lasts: the quorum may come back.
                FAILED.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(resource = %lease.keys.label(), %error, "keepalive renewal failed; retrying");
                last_error = Some(error);
                state.send_if_modified(|s| !std::mem::replace(&mut s.failing, true));
                next = Instant::now() + (interval / 4).max(Duration::from_millis(1));
            }
        }
    }
}

/// Why a lease whose validity ran out without a renewal was lost.
fn expired(last_error: Option<&Error>) -> String {
    match last_error {
        Some(error) => format!("renewals failed until the validity ran out: {error}"),
        None => "the validity ran out before a renewal answered".to_string(),
    }
}
