//! The networked Location Store: one Redis server shared by every node of a mesh, on any number
//! of machines (`redis://HOST[:PORT][/DB][?prefix=NAME&lease_timeout_ms=N]`).
//!
//! Invariants:
//! - Every rule is the shared core's (`core.rs`). Each operation is *load → core → write*, like
//!   the SQLite backend: the rows are read in one `MULTI`/`EXEC` snapshot (plus a second read for
//!   the recorded owner's lease where needed), the core decides in Rust, and the result is written
//!   by one Lua script that only *compares and sets*: it checks that every row read is still
//!   byte-for-byte what was read (and the store instance marker), and only then writes the rows
//!   the core computed. A changed row aborts the write; the operation starts again from the read
//!   (optimistic concurrency, at most [`RedisOptions::max_attempts`] attempts). The script makes
//!   no decision of its own.
//! - A decision that writes nothing (a `Held` reservation, a refusal) is returned without a write
//!   when it was made from one snapshot; when it needed a second read it is validated by the same
//!   script with an empty write set.
//! - Time: by default the Redis server's `TIME`, read inside the read snapshot, so every node of
//!   a multi-machine mesh judges leases by one clock. Tests inject a [`Clock`] instead. A lease
//!   whose liveness flips between the decision and the write (`decided_at < expires_at <=
//!   write time`) aborts the write (checked with `TIME` inside the script, or with the injected
//!   clock before it), so a lease that ended is never extended and an owner is never confirmed
//!   after its lease ended.
//! - Connection loss, a timeout or a restarted server fail the call with
//!   [`StoreError::Unavailable`] (public kind `Unavailable`); nothing is guessed. The connection
//!   reconnects by itself on the next call. A write whose answer was lost may have been applied
//!   (callers re-`lookup`; every write is fenced, so a repetition never applies twice).
//! - A store whose data vanished (a server restarted without persistence, `FLUSHALL`) is
//!   detected through the instance marker every handle records on its first call: such a handle
//!   answers `Unavailable` from then on instead of re-creating counters that would hand out an
//!   `ObjectGeneration` a second time (SB-4.1).
//!
//! Key layout (all under the prefix, default `zlink`): see [`RedisStore`] and `docs/STORE.md`.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{Client, Script};
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;

use super::core::{self, ActorCounters, ActorWrite, ReserveDecision};
use super::time::StoreTime;
use super::types::{
    ActivationRequest, ActivationState, ActorLocation, ActorOwner, AuthorityFence, LeaseHolder,
    OwnerFence, OwnerLease, Reservation, StoreVersion,
};
use super::{
    ActorId, AuthorityOwnerGeneration, LocationStore, MeshName, NodeGeneration, NodeRid,
    ObjectGeneration, OwnerLeaseGeneration, StoreError, StoreFuture,
};
use crate::clock::Clock;

const BACKEND: &str = "redis";

/// Default key prefix.
pub const DEFAULT_PREFIX: &str = "zlink";

/// Tuning of a [`RedisStore`] handle.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RedisOptions {
    /// Every key starts with `PREFIX:`; meshes (or test runs) sharing one Redis use distinct
    /// prefixes. Default [`DEFAULT_PREFIX`]; the URL's `?prefix=NAME` sets it.
    pub prefix: String,
    /// How long one command waits for its answer before the call fails `Unavailable`.
    /// Default 2 s.
    pub response_timeout: Duration,
    /// How long one connection attempt may take. Default 1 s.
    pub connection_timeout: Duration,
    /// Read → decide → compare-and-set attempts before a contended call fails `Unavailable`.
    /// Default 64.
    pub max_attempts: u32,
    /// The longest one owner lease operation (`register_owner`, `renew_owner`,
    /// `release_owner`) may take, connecting and conflict retries included, before it fails
    /// `Unavailable`; also each command's response and connection timeout on the lease's own
    /// connection. It is the store's [`LocationStore::write_wait_limit`], so it bounds how short
    /// an owner lease TTL can be (a 1.5 s lease leaves a renewal 850 ms). Default 500 ms
    /// ([`RedisOptions::DEFAULT_LEASE_TIMEOUT`]); the URL's `?lease_timeout_ms=N` sets it.
    pub lease_timeout: Duration,
}

impl RedisOptions {
    /// The default [`RedisOptions::lease_timeout`].
    pub const DEFAULT_LEASE_TIMEOUT: Duration = Duration::from_millis(500);
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_PREFIX.to_owned(),
            response_timeout: Duration::from_secs(2),
            connection_timeout: Duration::from_secs(1),
            max_attempts: 64,
            lease_timeout: Self::DEFAULT_LEASE_TIMEOUT,
        }
    }
}

/// Where store time comes from.
#[derive(Clone)]
enum TimeSource {
    /// The server's `TIME` (default): one clock for every node of the mesh.
    Server,
    /// An injected clock (tests: [`super::ManualClock`]).
    Local(Arc<dyn Clock>),
}

/// The keys of one store (one prefix).
#[derive(Clone, Debug)]
struct Keys {
    prefix: String,
}

impl Keys {
    fn instance(&self) -> String {
        format!("{}:instance", self.prefix)
    }
    fn last_lease_generation(&self) -> String {
        format!("{}:last_lease_generation", self.prefix)
    }
    fn lease(&self, node: &NodeRid) -> String {
        format!("{}:lease:{}", self.prefix, node.as_str())
    }
    fn counters(&self, id: &ActorId) -> String {
        format!("{}:counters:{}", self.prefix, id.as_str())
    }
    fn actor(&self, id: &ActorId) -> String {
        format!("{}:actor:{}", self.prefix, id.as_str())
    }
}

/// Which of a handle's two connections a call uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    /// Actor operations.
    Actors,
    /// The owner lease (register, renew, release).
    Lease,
}

impl Lane {
    /// The connection's name on the server (`CLIENT LIST`).
    fn client_name(self) -> &'static str {
        match self {
            Lane::Actors => "zlink-store",
            Lane::Lease => "zlink-store-lease",
        }
    }
}

/// An established handle: the auto-reconnecting connection and the instance marker seen first.
struct Conn {
    manager: ConnectionManager,
    instance: Vec<u8>,
}

struct Shared {
    client: Client,
    /// The URL without credentials, for `Debug`.
    shown_url: String,
    options: RedisOptions,
    keys: Keys,
    time: TimeSource,
    /// The connection of the actor operations (reservations, lookups, moves, destroys).
    conn: OnceCell<Conn>,
    /// The owner lease's own connection (register, renew, release): a renewal never waits
    /// behind actor operations queued on the other (one `ConnectionManager` is one multiplexed
    /// TCP connection, answered in order).
    lease_conn: OnceCell<Conn>,
    commit: Script,
}

/// A handle on a Redis Location Store. Cloning shares the connection; another
/// [`RedisStore::open`] is an independent handle with its own connection, like another node.
///
/// The connection is made on the first call, on the tokio runtime of that call, whose tasks
/// then drive it: use one handle from one long-lived runtime (the node's).
///
/// Key layout (`P` = prefix), every value a string:
///
/// | key | value |
/// |---|---|
/// | `P:instance` | random marker written once by the first handle (`SET NX`) |
/// | `P:last_lease_generation` | global `OwnerLeaseGeneration` counter (decimal) |
/// | `P:lease:{node}` | JSON `{node_generation, lease_generation, expires_at_ms}` |
/// | `P:counters:{actor}` | JSON `{object_generation, authority, version}` (survives destroy) |
/// | `P:actor:{actor}` | JSON location record; deleted by destroy |
#[derive(Clone)]
pub struct RedisStore {
    shared: Arc<Shared>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let clock: &dyn fmt::Debug = match &self.shared.time {
            TimeSource::Server => &"server TIME",
            TimeSource::Local(clock) => clock,
        };
        f.debug_struct("RedisStore")
            .field("url", &self.shared.shown_url)
            .field("prefix", &self.shared.keys.prefix)
            .field("clock", clock)
            .finish_non_exhaustive()
    }
}

fn redis_err(e: redis::RedisError) -> StoreError {
    StoreError::backend(BACKEND, e)
}

fn corrupt(what: &str) -> StoreError {
    StoreError::backend(BACKEND, format!("corrupt store data: {what}"))
}

fn invalid_url(url: &str, reason: &'static str) -> StoreError {
    StoreError::InvalidUrl {
        url: url.to_owned(),
        reason,
    }
}

/// Our own query parameters of a Redis URL (`prefix=`, `lease_timeout_ms=`); other
/// parameters stay for the driver.
#[derive(Debug, Default, PartialEq, Eq)]
struct UrlOptions {
    prefix: Option<String>,
    lease_timeout: Option<Duration>,
}

/// Splits our own query parameters ([`UrlOptions`]) off a Redis URL.
fn split_options(url: &str) -> Result<(String, UrlOptions), StoreError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), UrlOptions::default()));
    };
    let mut prefix = None;
    let mut lease_timeout = None;
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("prefix", value)) => {
                if value.is_empty() || value.contains(char::is_whitespace) {
                    return Err(invalid_url(
                        url,
                        "the key prefix must be non-empty, no spaces",
                    ));
                }
                prefix = Some(value.to_owned());
            }
            Some(("lease_timeout_ms", value)) => {
                let ms = value
                    .parse::<u64>()
                    .ok()
                    .filter(|ms| (1..=3_600_000).contains(ms))
                    .ok_or_else(|| {
                        invalid_url(
                            url,
                            "lease_timeout_ms must be a whole number of milliseconds, 1..=3600000",
                        )
                    })?;
                lease_timeout = Some(Duration::from_millis(ms));
            }
            _ => rest.push(pair),
        }
    }
    let base = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    Ok((
        base,
        UrlOptions {
            prefix,
            lease_timeout,
        },
    ))
}

/// `url` without `user:password@`.
fn without_credentials(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((_, host)) => format!("{scheme}://***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

impl RedisStore {
    /// A handle on the Redis store at `url` (`redis://HOST[:PORT][/DB][?prefix=NAME&lease_timeout_ms=N]`), on the
    /// server's `TIME`. Connects lazily: the first call connects (and fails `Unavailable` if the
    /// server cannot be reached; the next call tries again). `options.prefix` applies unless the
    /// URL names one.
    ///
    /// # Errors
    /// [`StoreError::InvalidUrl`] when the driver cannot parse the URL;
    /// [`StoreError::UnsupportedBackend`] for `rediss://` (TLS is not built in).
    pub fn open(url: &str, options: RedisOptions) -> Result<Self, StoreError> {
        Self::build(url, options, TimeSource::Server)
    }

    /// As [`RedisStore::open`], on an injected clock instead of the server's `TIME` (tests).
    ///
    /// # Errors
    /// As [`RedisStore::open`].
    pub fn open_with_clock(
        url: &str,
        options: RedisOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StoreError> {
        Self::build(url, options, TimeSource::Local(clock))
    }

    fn build(url: &str, mut options: RedisOptions, time: TimeSource) -> Result<Self, StoreError> {
        if url.starts_with("rediss:") {
            return Err(StoreError::UnsupportedBackend {
                scheme: "rediss".to_owned(),
            });
        }
        let (base, url_options) = split_options(url)?;
        if let Some(prefix) = url_options.prefix {
            options.prefix = prefix;
        }
        if let Some(t) = url_options.lease_timeout {
            options.lease_timeout = t;
        }
        if options.prefix.is_empty() {
            return Err(invalid_url(url, "the key prefix must be non-empty"));
        }
        let client = Client::open(base.as_str()).map_err(|e| {
            tracing::debug!(error = %e, "redis URL refused by the driver");
            invalid_url(
                url,
                "not a Redis URL the driver accepts (redis://HOST[:PORT][/DB])",
            )
        })?;
        Ok(Self {
            shared: Arc::new(Shared {
                client,
                shown_url: without_credentials(&base),
                keys: Keys {
                    prefix: options.prefix.clone(),
                },
                options,
                time,
                conn: OnceCell::new(),
                lease_conn: OnceCell::new(),
                commit: Script::new(COMMIT_SCRIPT),
            }),
        })
    }

    /// The key prefix of this store.
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.shared.keys.prefix
    }

    /// The longest an owner lease operation (a renewal) waits for the server before it fails
    /// `Unavailable`: [`RedisOptions::lease_timeout`], which bounds the whole call (connecting,
    /// the read snapshot, the write script, conflict retries). A lease TTL must leave more slack
    /// than this between a renewal and the expiry.
    #[must_use]
    pub fn longest_wait(&self) -> Duration {
        self.shared.options.lease_timeout
    }

    /// The established connection of the actor operations, connecting on first use.
    async fn conn(&self) -> Result<&Conn, StoreError> {
        self.connect(Lane::Actors).await
    }

    /// The established connection of `lane`, connecting on first use. Each connection is named
    /// (`CLIENT SETNAME`, [`Lane::client_name`]) so an operator's `CLIENT LIST` tells them apart.
    async fn connect(&self, lane: Lane) -> Result<&Conn, StoreError> {
        let cell = match lane {
            Lane::Actors => &self.shared.conn,
            Lane::Lease => &self.shared.lease_conn,
        };
        cell.get_or_try_init(|| async {
            let o = &self.shared.options;
            // The lease's connection waits at most the lease timeout for anything.
            let (response, connection) = match lane {
                Lane::Actors => (o.response_timeout, o.connection_timeout),
                Lane::Lease => (o.lease_timeout, o.lease_timeout),
            };
            // No reconnect retries inside one call: a call fails fast while the server is
            // away, and the next call starts a new attempt.
            let config = redis::aio::ConnectionManagerConfig::new()
                .set_number_of_retries(0)
                .set_response_timeout(Some(response))
                .set_connection_timeout(Some(connection));
            let mut manager =
                ConnectionManager::new_with_config(self.shared.client.clone(), config)
                    .await
                    .map_err(redis_err)?;
            let key = self.shared.keys.instance();
            let marker = format!("{:016x}{:016x}", rand_u64(), rand_u64());
            let (instance,): (Option<Vec<u8>>,) = redis::pipe()
                .cmd("CLIENT")
                .arg("SETNAME")
                .arg(lane.client_name())
                .ignore()
                .cmd("SET")
                .arg(&key)
                .arg(&marker)
                .arg("NX")
                .ignore()
                .cmd("GET")
                .arg(&key)
                .query_async(&mut manager)
                .await
                .map_err(redis_err)?;
            let instance = instance.ok_or_else(|| corrupt("instance marker vanished"))?;
            // One marker per handle: the other connection, if made first, saw the marker
            // this one must see, else the server lost its data in between.
            let other = match lane {
                Lane::Actors => &self.shared.lease_conn,
                Lane::Lease => &self.shared.conn,
            };
            if other.get().is_some_and(|o| o.instance != instance) {
                return Err(StoreError::backend(
                    BACKEND,
                    "the Redis store lost its data since this handle connected",
                ));
            }
            Ok(Conn { manager, instance })
        })
        .await
    }

    /// One write of `actor_id`'s record decided by a store-core rule that needs the owner
    /// `node`'s lease (`cas_owner`, `relocation_fence`): the record, its counters and that lease
    /// read in one transaction, then `decide`'s write applied (or its refusal returned).
    fn owner_fenced_write<D>(
        &self,
        actor_id: ActorId,
        node: NodeRid,
        decide: D,
    ) -> StoreFuture<'_, ActorLocation>
    where
        D: Fn(
                Option<&ActorLocation>,
                ActorCounters,
                Option<&OwnerLease>,
                &ActorId,
                StoreTime,
            ) -> Result<ActorWrite, StoreError>
            + Send
            + Sync
            + 'static,
    {
        let decide = Arc::new(decide);
        Box::pin(self.retry(move |mut tx| {
            let (actor_id, node, decide) = (actor_id.clone(), node.clone(), Arc::clone(&decide));
            async move {
                let keys = [
                    tx.keys().actor(&actor_id),
                    tx.keys().counters(&actor_id),
                    tx.keys().lease(&node),
                ];
                tx.begin(&keys).await?;
                let record = tx.actor(&actor_id).await?;
                let counters = tx.counters(&actor_id).await?;
                let lease = tx.lease(&node).await?;
                let outcome = decide(record.as_ref(), counters, lease.as_ref(), &actor_id, tx.now)
                    .and_then(|write| Ok((write.location.clone(), tx.actor_writes(&write)?)));
                tx.finish(outcome).await
            }
        }))
    }

    /// Runs one attempt after another until one is not a write conflict, on the actor
    /// operations' connection.
    async fn retry<T, F, Fut>(&self, attempt: F) -> Result<T, StoreError>
    where
        F: FnMut(Tx) -> Fut,
        Fut: Future<Output = Result<Option<T>, StoreError>>,
    {
        self.retry_on(Lane::Actors, attempt).await
    }

    /// [`RedisStore::retry`] on `lane`'s connection; on the lease's, the whole call is bounded
    /// by [`RedisOptions::lease_timeout`] (a renewal never waits longer than the lease allows).
    async fn retry_on<T, F, Fut>(&self, lane: Lane, attempt: F) -> Result<T, StoreError>
    where
        F: FnMut(Tx) -> Fut,
        Fut: Future<Output = Result<Option<T>, StoreError>>,
    {
        match lane {
            Lane::Actors => self.attempts(lane, attempt).await,
            Lane::Lease => {
                let limit = self.shared.options.lease_timeout;
                // Cancel-safe: every request is one pipeline or one script call on a multiplexed
                // connection (a dropped one leaves no transaction open); a write whose answer is
                // dropped may have landed, as with any lost answer (callers re-read).
                tokio::time::timeout(limit, self.attempts(lane, attempt))
                    .await
                    .unwrap_or_else(|_| {
                        Err(StoreError::backend(
                            BACKEND,
                            format!(
                                "owner lease operation took longer than its lease timeout ({} ms)",
                                limit.as_millis()
                            ),
                        ))
                    })
            }
        }
    }

    /// The attempts of [`RedisStore::retry_on`].
    async fn attempts<T, F, Fut>(&self, lane: Lane, mut attempt: F) -> Result<T, StoreError>
    where
        F: FnMut(Tx) -> Fut,
        Fut: Future<Output = Result<Option<T>, StoreError>>,
    {
        let conn = self.connect(lane).await?;
        for n in 0..self.shared.options.max_attempts {
            if let Some(out) = attempt(Tx::new(&self.shared, conn)).await? {
                return Ok(out);
            }
            // Contended: let the others finish; after a few rounds, back off a little (random,
            // up to `n` ms) so that racing handles spread out.
            if n < 4 {
                tokio::task::yield_now().await;
            } else {
                let ms = rand_u64() % u64::from(n);
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
        }
        Err(StoreError::backend(
            BACKEND,
            format!(
                "gave up after {} conflicting attempts",
                self.shared.options.max_attempts
            ),
        ))
    }
}

/// A per-process random value for the instance marker (no cryptographic need: it only has to
/// differ between two formattings of one store).
fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// The compare-and-set script. It decides nothing: it checks the values read and writes the
/// values computed by the core.
///
/// KEYS: the `n` keys read, then the `m` keys written.
/// ARGV: `n`, `m`, decision time in ms (or '' when the clock is not the server's), `l`, then `n`
/// expected values, `l` lease expiries (ms), `m` new values. A value is `'0'` for "absent" or
/// `'1' .. bytes`; writing `'0'` deletes the key.
/// Returns 1 when written, 0 on a conflict (a value changed, or a lease read live at the decision
/// time has expired since by the server's clock).
const COMMIT_SCRIPT: &str = r"
local n = tonumber(ARGV[1])
local m = tonumber(ARGV[2])
local l = tonumber(ARGV[4])
local a = 5
for i = 1, n do
  local have = redis.call('GET', KEYS[i])
  if have then have = '1' .. have else have = '0' end
  if have ~= ARGV[a] then return 0 end
  a = a + 1
end
if ARGV[3] ~= '' then
  local decided = tonumber(ARGV[3])
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  for i = 1, l do
    local e = tonumber(ARGV[a + i - 1])
    if decided < e and e <= now then return 0 end
  end
end
a = a + l
for i = 1, m do
  local v = ARGV[a]
  if string.sub(v, 1, 1) == '1' then
    redis.call('SET', KEYS[n + i], string.sub(v, 2))
  else
    redis.call('DEL', KEYS[n + i])
  end
  a = a + 1
end
return 1
";

fn tagged(value: Option<&[u8]>) -> Vec<u8> {
    match value {
        None => b"0".to_vec(),
        Some(v) => {
            let mut out = Vec::with_capacity(v.len() + 1);
            out.push(b'1');
            out.extend_from_slice(v);
            out
        }
    }
}

/// One attempt of one operation: the rows read, the decision time, the rows to write.
struct Tx {
    store: Arc<Shared>,
    manager: ConnectionManager,
    instance: Vec<u8>,
    now: StoreTime,
    /// Every key read and the value read (`None`: absent), in read order.
    reads: Vec<(String, Option<Vec<u8>>)>,
    /// Expiries of the lease rows read (the only rows whose meaning depends on time).
    leases: Vec<StoreTime>,
    batches: u32,
}

/// A value read: `None` when the key is absent.
type Value = Option<Vec<u8>>;

/// A row to write.
enum Write {
    Set(String, Vec<u8>),
    Delete(String),
}

impl Tx {
    fn new(store: &Arc<Shared>, conn: &Conn) -> Self {
        Self {
            store: Arc::clone(store),
            manager: conn.manager.clone(),
            instance: conn.instance.clone(),
            now: StoreTime::ZERO,
            reads: Vec::new(),
            leases: Vec::new(),
            batches: 0,
        }
    }

    fn keys(&self) -> &Keys {
        &self.store.keys
    }

    /// The first read: the instance marker, `keys` and (server clock) `TIME`, in one
    /// `MULTI`/`EXEC` snapshot. Sets the decision time.
    async fn begin(&mut self, keys: &[String]) -> Result<(), StoreError> {
        let instance_key = self.keys().instance();
        let mut pipe = redis::pipe();
        pipe.atomic().cmd("GET").arg(&instance_key);
        pipe.cmd("MGET").arg(keys);
        let server_time = matches!(self.store.time, TimeSource::Server);
        if server_time {
            pipe.cmd("TIME");
        }
        let (instance, values, time) = if server_time {
            let (i, v, t): (Value, Vec<Value>, (u64, u64)) = pipe
                .query_async(&mut self.manager)
                .await
                .map_err(redis_err)?;
            (i, v, Some(t))
        } else {
            let (i, v): (Value, Vec<Value>) = pipe
                .query_async(&mut self.manager)
                .await
                .map_err(redis_err)?;
            (i, v, None)
        };
        self.now = match (time, &self.store.time) {
            (Some((secs, micros)), _) => {
                StoreTime::from_millis(secs.saturating_mul(1_000).saturating_add(micros / 1_000))
            }
            (None, TimeSource::Local(clock)) => StoreTime::now(clock.as_ref()),
            (None, TimeSource::Server) => return Err(corrupt("no server TIME")),
        };
        self.check_instance(instance.as_deref())?;
        self.reads.push((instance_key, instance));
        self.record(keys, values)?;
        self.batches = 1;
        Ok(())
    }

    fn check_instance(&self, seen: Option<&[u8]>) -> Result<(), StoreError> {
        if seen == Some(self.instance.as_slice()) {
            Ok(())
        } else {
            Err(StoreError::backend(
                BACKEND,
                "the Redis store lost its data since this handle connected (a restart without \
                 persistence, or a flush); restart the node to register anew",
            ))
        }
    }

    fn record(&mut self, keys: &[String], values: Vec<Option<Vec<u8>>>) -> Result<(), StoreError> {
        if values.len() != keys.len() {
            return Err(corrupt("MGET answered a different number of values"));
        }
        self.reads.extend(keys.iter().cloned().zip(values));
        Ok(())
    }

    /// The value read for `key`, reading it (a second, separate read) if it was not read yet.
    async fn value(&mut self, key: String) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some((_, v)) = self.reads.iter().find(|(k, _)| *k == key) {
            return Ok(v.clone());
        }
        let value: Option<Vec<u8>> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut self.manager)
            .await
            .map_err(redis_err)?;
        self.reads.push((key, value.clone()));
        self.batches += 1;
        Ok(value)
    }

    async fn lease(&mut self, node: &NodeRid) -> Result<Option<OwnerLease>, StoreError> {
        let key = self.keys().lease(node);
        let Some(raw) = self.value(key).await? else {
            return Ok(None);
        };
        let row: LeaseRow = serde_json::from_slice(&raw).map_err(|_| corrupt("lease row"))?;
        let lease = OwnerLease {
            holder: LeaseHolder {
                node: node.clone(),
                node_generation: NodeGeneration::new(row.node_generation),
                lease_generation: OwnerLeaseGeneration::new(row.lease_generation),
            },
            expires_at: StoreTime::from_millis(row.expires_at_ms),
        };
        self.leases.push(lease.expires_at);
        Ok(Some(lease))
    }

    async fn counters(&mut self, id: &ActorId) -> Result<ActorCounters, StoreError> {
        let key = self.keys().counters(id);
        match self.value(key).await? {
            None => Ok(ActorCounters::default()),
            Some(raw) => {
                let row: CountersRow =
                    serde_json::from_slice(&raw).map_err(|_| corrupt("counters row"))?;
                Ok(ActorCounters {
                    object_generation: row.object_generation,
                    authority: row.authority,
                    version: row.version,
                })
            }
        }
    }

    async fn actor(&mut self, id: &ActorId) -> Result<Option<ActorLocation>, StoreError> {
        let key = self.keys().actor(id);
        self.value(key)
            .await?
            .map(|raw| decode_actor(id, &raw))
            .transpose()
    }

    async fn last_lease_generation(&mut self) -> Result<u64, StoreError> {
        let key = self.keys().last_lease_generation();
        match self.value(key).await? {
            None => Ok(0),
            Some(raw) => std::str::from_utf8(&raw)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| corrupt("lease generation counter")),
        }
    }

    /// The lease and counter writes of an actor decision.
    fn actor_writes(&self, write: &ActorWrite) -> Result<Vec<Write>, StoreError> {
        let id = &write.location.actor_id;
        Ok(vec![
            Write::Set(self.keys().counters(id), encode_counters(write.counters)?),
            Write::Set(self.keys().actor(id), encode_actor(&write.location)?),
        ])
    }

    fn lease_write(&self, lease: &OwnerLease) -> Result<Write, StoreError> {
        Ok(Write::Set(
            self.keys().lease(&lease.holder.node),
            encode_lease(lease)?,
        ))
    }

    /// Whether the liveness of a lease read changed between the decision time and `now`.
    fn lease_flipped(&self, now: StoreTime) -> bool {
        self.leases
            .iter()
            .any(|&expires| self.now < expires && expires <= now)
    }

    /// Ends the attempt with `outcome`: `Ok(Some(_))` when it stands, `Ok(None)` on a conflict
    /// (try again). A decision that writes nothing and was made from one snapshot stands as is;
    /// everything else goes through the compare-and-set script.
    async fn finish<T>(
        mut self,
        outcome: Result<(T, Vec<Write>), StoreError>,
    ) -> Result<Option<T>, StoreError> {
        let (value, writes) = match outcome {
            Ok((value, writes)) => (Ok(value), writes),
            Err(e) => (Err(e), Vec::new()),
        };
        if writes.is_empty() && self.batches <= 1 {
            return value.map(Some);
        }
        let decided = match &self.store.time {
            TimeSource::Server => self.now.as_millis().to_string(),
            TimeSource::Local(clock) => {
                if self.lease_flipped(StoreTime::now(clock.as_ref())) {
                    return Ok(None);
                }
                String::new()
            }
        };
        let mut invocation = self.store.commit.prepare_invoke();
        for (key, _) in &self.reads {
            invocation.key(key);
        }
        for write in &writes {
            match write {
                Write::Set(key, _) | Write::Delete(key) => invocation.key(key),
            };
        }
        invocation
            .arg(self.reads.len())
            .arg(writes.len())
            .arg(decided)
            .arg(self.leases.len());
        for (_, value) in &self.reads {
            invocation.arg(tagged(value.as_deref()));
        }
        for expires in &self.leases {
            invocation.arg(expires.as_millis());
        }
        for write in &writes {
            match write {
                Write::Set(_, v) => invocation.arg(tagged(Some(v))),
                Write::Delete(_) => invocation.arg(tagged(None)),
            };
        }
        let done: i64 = invocation
            .invoke_async(&mut self.manager)
            .await
            .map_err(redis_err)?;
        if done == 1 { value.map(Some) } else { Ok(None) }
    }
}

#[derive(Serialize, Deserialize)]
struct LeaseRow {
    node_generation: u64,
    lease_generation: u64,
    expires_at_ms: u64,
}

#[derive(Serialize, Deserialize)]
struct CountersRow {
    object_generation: u64,
    authority: u64,
    version: u64,
}

#[derive(Serialize, Deserialize)]
struct ActorRow {
    actor_type: String,
    object_generation: u64,
    mesh: String,
    owner_node: String,
    node_generation: u64,
    authority_owner_generation: u64,
    owner_lease_generation: u64,
    state: RowState,
    version: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum RowState {
    Activating,
    Ready,
}

fn json<T: Serialize>(row: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(row).map_err(|e| StoreError::backend(BACKEND, e))
}

fn encode_lease(lease: &OwnerLease) -> Result<Vec<u8>, StoreError> {
    json(&LeaseRow {
        node_generation: lease.holder.node_generation.get(),
        lease_generation: lease.holder.lease_generation.get(),
        expires_at_ms: lease.expires_at.as_millis(),
    })
}

fn encode_counters(c: ActorCounters) -> Result<Vec<u8>, StoreError> {
    json(&CountersRow {
        object_generation: c.object_generation,
        authority: c.authority,
        version: c.version,
    })
}

fn encode_actor(l: &ActorLocation) -> Result<Vec<u8>, StoreError> {
    json(&ActorRow {
        actor_type: l.actor_type.clone(),
        object_generation: l.object_generation.get(),
        mesh: l.mesh.as_str().to_owned(),
        owner_node: l.owner_node.as_str().to_owned(),
        node_generation: l.node_generation.get(),
        authority_owner_generation: l.authority_owner_generation.get(),
        owner_lease_generation: l.owner_lease_generation.get(),
        state: match l.state {
            ActivationState::Activating => RowState::Activating,
            ActivationState::Ready => RowState::Ready,
        },
        version: l.version.get(),
    })
}

fn decode_actor(id: &ActorId, raw: &[u8]) -> Result<ActorLocation, StoreError> {
    let row: ActorRow = serde_json::from_slice(raw).map_err(|_| corrupt("actor row"))?;
    Ok(ActorLocation {
        actor_id: id.clone(),
        actor_type: row.actor_type,
        object_generation: ObjectGeneration::new(row.object_generation),
        mesh: MeshName::new(row.mesh).map_err(|_| corrupt("mesh name"))?,
        owner_node: NodeRid::new(row.owner_node).map_err(|_| corrupt("owner node rid"))?,
        node_generation: NodeGeneration::new(row.node_generation),
        authority_owner_generation: AuthorityOwnerGeneration::new(row.authority_owner_generation),
        owner_lease_generation: OwnerLeaseGeneration::new(row.owner_lease_generation),
        state: match row.state {
            RowState::Activating => ActivationState::Activating,
            RowState::Ready => ActivationState::Ready,
        },
        version: StoreVersion::new(row.version),
    })
}

impl LocationStore for RedisStore {
    fn write_wait_limit(&self) -> Option<Duration> {
        Some(self.longest_wait())
    }

    fn register_owner(
        &self,
        node: NodeRid,
        node_generation: NodeGeneration,
        ttl: Duration,
    ) -> StoreFuture<'_, OwnerLease> {
        Box::pin(self.retry_on(Lane::Lease, move |mut tx| {
            let node = node.clone();
            async move {
                let keys = [tx.keys().lease(&node), tx.keys().last_lease_generation()];
                tx.begin(&keys).await?;
                let row = tx.lease(&node).await?;
                let last = tx.last_lease_generation().await?;
                let outcome =
                    core::register(row.as_ref(), node, node_generation, ttl, tx.now, last)
                        .and_then(|r| {
                            let mut writes = vec![tx.lease_write(&r.lease)?];
                            if r.last_lease_generation != last {
                                writes.push(Write::Set(
                                    tx.keys().last_lease_generation(),
                                    r.last_lease_generation.to_string().into_bytes(),
                                ));
                            }
                            Ok((r.lease, writes))
                        });
                tx.finish(outcome).await
            }
        }))
    }

    fn renew_owner(&self, holder: LeaseHolder, ttl: Duration) -> StoreFuture<'_, OwnerLease> {
        Box::pin(self.retry_on(Lane::Lease, move |mut tx| {
            let holder = holder.clone();
            async move {
                tx.begin(&[tx.keys().lease(&holder.node)]).await?;
                let row = tx.lease(&holder.node).await?;
                let outcome = core::renew(row.as_ref(), &holder, ttl, tx.now)
                    .and_then(|lease| Ok((lease.clone(), vec![tx.lease_write(&lease)?])));
                tx.finish(outcome).await
            }
        }))
    }

    fn release_owner(&self, holder: LeaseHolder) -> StoreFuture<'_, ()> {
        Box::pin(self.retry_on(Lane::Lease, move |mut tx| {
            let holder = holder.clone();
            async move {
                tx.begin(&[tx.keys().lease(&holder.node)]).await?;
                let row = tx.lease(&holder.node).await?;
                let writes = match core::release(row.as_ref(), &holder, tx.now) {
                    Some(lease) => vec![tx.lease_write(&lease)?],
                    None => Vec::new(),
                };
                tx.finish(Ok(((), writes))).await
            }
        }))
    }

    fn reserve_activation(&self, request: ActivationRequest) -> StoreFuture<'_, Reservation> {
        Box::pin(self.retry(move |mut tx| {
            let request = request.clone();
            async move {
                let id = &request.actor_id;
                let candidate_node = &request.owner.holder.node;
                let keys = [
                    tx.keys().actor(id),
                    tx.keys().counters(id),
                    tx.keys().lease(candidate_node),
                ];
                tx.begin(&keys).await?;
                let record = tx.actor(id).await?;
                let counters = tx.counters(id).await?;
                let candidate = tx.lease(candidate_node).await?;
                let owner = match &record {
                    Some(r) if r.owner_node == *candidate_node => candidate.clone(),
                    Some(r) => tx.lease(&r.owner_node).await?,
                    None => None,
                };
                let outcome = core::reserve(
                    record.as_ref(),
                    counters,
                    candidate.as_ref(),
                    owner.as_ref(),
                    &request,
                    tx.now,
                )
                .and_then(|decision| match decision {
                    ReserveDecision::Held(location) => Ok((Reservation::Held(location), vec![])),
                    ReserveDecision::Won(write) => {
                        let writes = tx.actor_writes(&write)?;
                        Ok((Reservation::Won(write.location), writes))
                    }
                });
                tx.finish(outcome).await
            }
        }))
    }

    fn mark_ready(
        &self,
        actor_id: ActorId,
        fence: AuthorityFence,
    ) -> StoreFuture<'_, ActorLocation> {
        Box::pin(self.retry(move |mut tx| {
            let actor_id = actor_id.clone();
            async move {
                let keys = [tx.keys().actor(&actor_id), tx.keys().counters(&actor_id)];
                tx.begin(&keys).await?;
                let record = tx.actor(&actor_id).await?;
                let counters = tx.counters(&actor_id).await?;
                let owner = match &record {
                    Some(r) => tx.lease(&r.owner_node).await?,
                    None => None,
                };
                let outcome = core::mark_ready(
                    record.as_ref(),
                    counters,
                    owner.as_ref(),
                    &actor_id,
                    fence,
                    tx.now,
                )
                .and_then(|decision| match decision {
                    Some(write) => Ok((write.location.clone(), tx.actor_writes(&write)?)),
                    None => record
                        .clone()
                        .map(|r| (r, vec![]))
                        .ok_or(StoreError::NotFound {
                            actor_id: actor_id.clone(),
                        }),
                });
                tx.finish(outcome).await
            }
        }))
    }

    fn lookup(&self, actor_id: ActorId) -> StoreFuture<'_, Option<ActorLocation>> {
        Box::pin(async move {
            let conn = self.conn().await?;
            let keys = &self.shared.keys;
            let (instance, record): (Option<Vec<u8>>, Option<Vec<u8>>) = redis::cmd("MGET")
                .arg(keys.instance())
                .arg(keys.actor(&actor_id))
                .query_async(&mut conn.manager.clone())
                .await
                .map_err(redis_err)?;
            if instance.as_deref() != Some(conn.instance.as_slice()) {
                return Err(StoreError::backend(
                    BACKEND,
                    "the Redis store lost its data since this handle connected",
                ));
            }
            record.map(|raw| decode_actor(&actor_id, &raw)).transpose()
        })
    }

    fn cas_owner(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        new_owner: ActorOwner,
    ) -> StoreFuture<'_, ActorLocation> {
        let node = new_owner.holder.node.clone();
        self.owner_fenced_write(actor_id, node, move |record, counters, lease, id, now| {
            core::cas_owner(record, counters, lease, id, expected, &new_owner, now)
        })
    }

    fn relocation_fence(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        owner: OwnerFence,
    ) -> StoreFuture<'_, ActorLocation> {
        let node = owner.holder.node.clone();
        self.owner_fenced_write(actor_id, node, move |record, counters, lease, id, now| {
            core::relocation_fence(record, counters, lease, id, expected, &owner, now)
        })
    }

    fn destroy(&self, actor_id: ActorId, fence: OwnerFence) -> StoreFuture<'_, ()> {
        Box::pin(self.retry(move |mut tx| {
            let (actor_id, fence) = (actor_id.clone(), fence.clone());
            async move {
                let keys = [
                    tx.keys().actor(&actor_id),
                    tx.keys().lease(&fence.holder.node),
                ];
                tx.begin(&keys).await?;
                let record = tx.actor(&actor_id).await?;
                let lease = tx.lease(&fence.holder.node).await?;
                let outcome =
                    core::destroy(record.as_ref(), lease.as_ref(), &actor_id, &fence, tx.now)
                        .map(|()| ((), vec![Write::Delete(tx.keys().actor(&actor_id))]));
                tx.finish(outcome).await
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_parameter_is_ours_and_other_parameters_stay() {
        assert_eq!(
            split_options("redis://h:1/2").unwrap(),
            ("redis://h:1/2".to_owned(), UrlOptions::default())
        );
        assert_eq!(
            split_options("redis://h/0?prefix=mesh-a").unwrap(),
            (
                "redis://h/0".to_owned(),
                UrlOptions {
                    prefix: Some("mesh-a".to_owned()),
                    lease_timeout: None
                }
            )
        );
        assert_eq!(
            split_options("redis://h?protocol=resp3&prefix=x").unwrap(),
            (
                "redis://h?protocol=resp3".to_owned(),
                UrlOptions {
                    prefix: Some("x".to_owned()),
                    lease_timeout: None
                }
            )
        );
        assert!(matches!(
            split_options("redis://h?prefix="),
            Err(StoreError::InvalidUrl { .. })
        ));
    }

    #[test]
    fn debug_never_shows_credentials() {
        let store = RedisStore::open("redis://user:secret@h:1/0", RedisOptions::default()).unwrap();
        let shown = format!("{store:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("h:1/0"), "{shown}");
    }

    /// With the server's clock, the script itself checks that no lease read live at the decision
    /// time has ended by the time of the write (the server's `TIME` inside the script).
    #[tokio::test]
    async fn the_commit_script_refuses_a_write_after_a_lease_read_live_has_ended() {
        let Some(url) = crate::store::contract::redis_test_url("commit_script_lease_flip") else {
            return;
        };
        let url = crate::store::contract::with_unique_prefix(&url, "script");
        let store = RedisStore::open(&url, RedisOptions::default()).unwrap();
        let conn = store.conn().await.unwrap();
        let mut manager = conn.manager.clone();
        let (secs, micros): (u64, u64) =
            redis::cmd("TIME").query_async(&mut manager).await.unwrap();
        let server_now = secs * 1_000 + micros / 1_000;
        let probe = format!("{}:probe", store.prefix());
        let attempt = |decided: u64, expires: u64| {
            let mut tx = Tx::new(&store.shared, conn);
            tx.reads
                .push((store.shared.keys.instance(), Some(conn.instance.clone())));
            tx.batches = 1;
            tx.now = StoreTime::from_millis(decided);
            tx.leases.push(StoreTime::from_millis(expires));
            let write = vec![Write::Set(probe.clone(), b"written".to_vec())];
            tx.finish(Ok(((), write)))
        };
        let read = |mut m: ConnectionManager| {
            let probe = probe.clone();
            async move {
                redis::cmd("GET")
                    .arg(probe)
                    .query_async::<Option<Vec<u8>>>(&mut m)
                    .await
                    .unwrap()
            }
        };
        // Decided 10 s ago while the lease was live; it ended 5 s ago: refused, nothing written.
        let outcome = attempt(server_now - 10_000, server_now - 5_000).await;
        assert!(outcome.unwrap().is_none(), "a conflict: decide again");
        assert_eq!(read(manager.clone()).await, None);
        // Already ended at the decision (the core judged it dead): liveness did not change.
        let outcome = attempt(server_now - 10_000, server_now - 20_000).await;
        assert!(outcome.unwrap().is_some());
        // Still live now: written.
        let outcome = attempt(server_now - 10_000, server_now + 60_000).await;
        assert!(outcome.unwrap().is_some());
        assert_eq!(read(manager).await, Some(b"written".to_vec()));
    }

    #[test]
    fn the_longest_wait_is_the_lease_timeout() {
        let store = RedisStore::open("redis://h:1", RedisOptions::default()).unwrap();
        assert_eq!(store.longest_wait(), Duration::from_millis(500));
        // a 1.5 s lease's renewal slack (850 ms) is longer: the configuration accepts it
        assert!(crate::store::renewal_slack(Duration::from_millis(1_500)) > store.longest_wait());
        let store = RedisStore::open(
            "redis://h:1?lease_timeout_ms=200&prefix=p",
            RedisOptions::default(),
        )
        .unwrap();
        assert_eq!(store.longest_wait(), Duration::from_millis(200));
        assert_eq!(store.prefix(), "p");
        for bad in [
            "redis://h:1?lease_timeout_ms=0",
            "redis://h:1?lease_timeout_ms=x",
        ] {
            assert!(matches!(
                RedisStore::open(bad, RedisOptions::default()),
                Err(StoreError::InvalidUrl { .. })
            ));
        }
    }

    #[test]
    fn values_are_tagged_absent_or_present() {
        assert_eq!(tagged(None), b"0");
        assert_eq!(tagged(Some(b"")), b"1");
        assert_eq!(tagged(Some(b"{}")), b"1{}");
    }

    #[test]
    fn rows_round_trip() {
        let location = ActorLocation {
            actor_id: ActorId::new("a").unwrap(),
            actor_type: "T".into(),
            object_generation: ObjectGeneration::new(u64::MAX),
            mesh: MeshName::new("m").unwrap(),
            owner_node: NodeRid::new("n").unwrap(),
            node_generation: NodeGeneration::new(2),
            authority_owner_generation: AuthorityOwnerGeneration::new(3),
            owner_lease_generation: OwnerLeaseGeneration::new(4),
            state: ActivationState::Ready,
            version: StoreVersion::new(5),
        };
        let raw = encode_actor(&location).unwrap();
        assert_eq!(decode_actor(&location.actor_id, &raw).unwrap(), location);
        assert!(matches!(
            decode_actor(&location.actor_id, b"{"),
            Err(StoreError::Unavailable { .. })
        ));
    }
}
