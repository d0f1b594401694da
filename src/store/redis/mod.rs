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

mod ops;
mod rows;
mod url;

use rows::{CountersRow, LeaseRow, decode_actor, encode_actor, encode_counters, encode_lease};
use url::{invalid_url, split_options, without_credentials};

const BACKEND: &str = "redis";

/// Default key prefix.
pub const DEFAULT_PREFIX: &str = "zlink";

/// Tuning of a [`RedisStore`] handle.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RedisOptions {
    /// Every key starts with `PREFIX:`; meshes (or test runs) sharing one Redis use distinct
    /// prefixes. Default `zlink` (`DEFAULT_PREFIX`); the URL's `?prefix=NAME` sets it.
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

#[cfg(test)]
mod tests;
