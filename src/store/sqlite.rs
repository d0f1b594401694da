//! The embedded default Location Store: one SQLite file that every node process of a machine
//! opens (`sqlite:///path/store.db`).
//!
//! Invariants:
//! - Every mutating operation is one `BEGIN IMMEDIATE` transaction: it takes SQLite's write lock
//!   *before* reading, then reads the rows, runs the shared core (`core.rs`) and writes. Two
//!   handles or two processes therefore serialise on the file lock and never both win a CAS.
//!   Store time is read after the lock is taken, so decisions are ordered like the commits.
//! - A failed decision (fence mismatch, lease not live …) rolls back; nothing is half-written.
//! - The file is in WAL mode (readers never block the writer), `synchronous=NORMAL` (durable
//!   across process crashes, which is what a node restart needs), with a busy timeout: a writer
//!   waits for the lock up to [`SqliteOptions::busy_timeout`], then the call fails with
//!   [`StoreError::Unavailable`].
//! - SQLite calls block; they run on dedicated threads per handle, fed through channels, and
//!   answer through a oneshot. No tokio worker ever blocks on the file.
//! - Owner lease operations (register, renew, release) have their **own connection and
//!   thread**: a renewal never queues behind activations or lookups of the same handle; it
//!   waits only for SQLite's write lock (one short transaction at a time), at most the lease
//!   connection's own, short busy timeout ([`SqliteOptions::lease_busy_timeout`],
//!   [`LocationStore::write_wait_limit`]), never the 5 s other writes may wait.
//!
//! Schema (version 1, `PRAGMA user_version`): see [`SCHEMA`] and `docs/STORE.md`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use tokio::sync::oneshot;

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
use crate::clock::{Clock, SystemClock};

const BACKEND: &str = "sqlite";

/// Schema version written to `PRAGMA user_version`.
pub const SCHEMA_VERSION: i64 = 1;

/// The schema, created on first open of a file. Integers are `u64` values stored bit-for-bit in
/// SQLite's signed 64-bit `INTEGER`.
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS zlink_meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS owner_leases (
    node_rid         TEXT PRIMARY KEY NOT NULL,
    node_generation  INTEGER NOT NULL,
    lease_generation INTEGER NOT NULL,
    expires_at_ms    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS actor_counters (
    actor_id                   TEXT PRIMARY KEY NOT NULL,
    last_object_generation     INTEGER NOT NULL,
    last_authority_generation  INTEGER NOT NULL,
    last_version               INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS actor_locations (
    actor_id                   TEXT PRIMARY KEY NOT NULL,
    actor_type                 TEXT NOT NULL,
    object_generation          INTEGER NOT NULL,
    mesh                       TEXT NOT NULL,
    owner_node                 TEXT NOT NULL,
    node_generation            INTEGER NOT NULL,
    authority_owner_generation INTEGER NOT NULL,
    owner_lease_generation     INTEGER NOT NULL,
    state                      INTEGER NOT NULL CHECK (state IN (0, 1)),
    version                    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS actor_locations_by_owner ON actor_locations (owner_node);
";

const META_LAST_LEASE_GENERATION: &str = "last_lease_generation";

/// Tuning of a [`SqliteStore`] handle. In a store URL: `sqlite:///PATH?busy_timeout_ms=N&lease_busy_timeout_ms=M`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// How long an activation, `mark_ready`, `cas_owner` or `destroy` waits for another
    /// handle's or process's write lock before failing with [`StoreError::Unavailable`].
    /// Default 5 s ([`SqliteOptions::DEFAULT_BUSY_TIMEOUT`]).
    pub busy_timeout: Duration,
    /// The same wait for the owner lease operations (register, renew, release), which run on
    /// their own connection: the longest a renewal can wait ([`LocationStore::write_wait_limit`]),
    /// so it bounds how short an owner lease TTL can be (a 1.5 s lease leaves a renewal
    /// 850 ms). A renewal that fails on it is retried after a tenth of the TTL. Default 250 ms
    /// ([`SqliteOptions::DEFAULT_LEASE_BUSY_TIMEOUT`]).
    pub lease_busy_timeout: Duration,
}

impl SqliteOptions {
    /// The default [`SqliteOptions::busy_timeout`].
    pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);
    /// The default [`SqliteOptions::lease_busy_timeout`].
    pub const DEFAULT_LEASE_BUSY_TIMEOUT: Duration = Duration::from_millis(250);
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            busy_timeout: Self::DEFAULT_BUSY_TIMEOUT,
            lease_busy_timeout: Self::DEFAULT_LEASE_BUSY_TIMEOUT,
        }
    }
}

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

struct Shared {
    jobs: mpsc::Sender<Job>,
    /// The lease connection's queue: owner lease operations only.
    lease_jobs: mpsc::Sender<Job>,
    /// The lease connection's busy timeout: the longest a renewal waits for the lock.
    lease_busy_timeout: Duration,
    clock: Arc<dyn Clock>,
    path: PathBuf,
}

/// A handle on a SQLite store file. Cloning shares the handle (and its thread); calling
/// [`SqliteStore::open`] again on the same file gives an independent handle with its own
/// connection, exactly like another process would.
#[derive(Clone)]
pub struct SqliteStore {
    shared: Arc<Shared>,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.shared.path)
            .field("clock", &self.shared.clock)
            .finish()
    }
}

fn sql(e: rusqlite::Error) -> StoreError {
    StoreError::backend(BACKEND, e)
}

fn corrupt(what: &'static str) -> StoreError {
    StoreError::backend(BACKEND, format!("corrupt store data: {what}"))
}

fn closed() -> StoreError {
    StoreError::backend(BACKEND, "the store thread has stopped")
}

// u64 values are stored bit-for-bit in SQLite's i64.
#[allow(clippy::cast_possible_wrap)]
const fn to_sql(v: u64) -> i64 {
    v as i64
}

#[allow(clippy::cast_sign_loss)]
const fn from_sql(v: i64) -> u64 {
    v as u64
}

impl SqliteStore {
    /// Opens (creating it and its directory if needed) the store file at `path` on the system
    /// clock.
    ///
    /// Blocks on file I/O and, if another process holds the write lock, for up to the busy
    /// timeout: call it at startup.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the file cannot be opened, switched to WAL, or has an
    /// unknown schema version.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, SqliteOptions::default(), Arc::new(SystemClock))
    }

    /// As [`SqliteStore::open`], with options and an injected clock.
    ///
    /// # Errors
    /// As [`SqliteStore::open`].
    pub fn open_with(
        path: impl AsRef<Path>,
        options: SqliteOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::backend(BACKEND, e))?;
        }
        let mut conn = Connection::open(&path).map_err(sql)?;
        // Several node processes may open a fresh file at the same moment. SQLite answers some
        // lock conflicts of the WAL switch and schema creation with SQLITE_BUSY without calling
        // the busy handler (it would deadlock), so those are retried here up to the busy
        // timeout; every other error ends the open at once.
        let deadline = Instant::now() + options.busy_timeout;
        loop {
            match initialise(&mut conn, &options) {
                Ok(()) => break,
                Err(InitError::Sql(e)) if is_busy(&e) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(InitError::Sql(e)) => return Err(sql(e)),
                Err(InitError::Store(e)) => return Err(e),
            }
        }
        // The schema exists now: the lease connection only needs its (short) busy timeout.
        let lease_conn = Connection::open(&path).map_err(sql)?;
        lease_conn
            .busy_timeout(options.lease_busy_timeout)
            .map_err(sql)?;
        let jobs = spawn_store_thread("zlink-store-sqlite", conn)?;
        let lease_jobs = spawn_store_thread("zlink-store-lease", lease_conn)?;
        Ok(Self {
            shared: Arc::new(Shared {
                jobs,
                lease_jobs,
                lease_busy_timeout: options.lease_busy_timeout,
                clock,
                path,
            }),
        })
    }

    /// The store file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Runs `f` on the store thread and answers with its result.
    fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection, &dyn Clock) -> Result<T, StoreError> + Send + 'static,
    ) -> StoreFuture<'_, T> {
        self.call_on(&self.shared.jobs, f)
    }

    /// Runs `f` on the thread behind `queue` and answers with its result.
    fn call_on<'a, T: Send + 'static>(
        &'a self,
        queue: &'a mpsc::Sender<Job>,
        f: impl FnOnce(&mut Connection, &dyn Clock) -> Result<T, StoreError> + Send + 'static,
    ) -> StoreFuture<'a, T> {
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            let clock = Arc::clone(&self.shared.clock);
            let job: Job = Box::new(move |conn| {
                // The caller may have gone away; then nobody needs the answer.
                let _ = reply.send(f(conn, clock.as_ref()));
            });
            queue.send(job).map_err(|_| closed())?;
            answer.await.map_err(|_| closed())?
        })
    }

    /// Runs `f` inside one `BEGIN IMMEDIATE` transaction on the store thread; commits when `f`
    /// succeeds, rolls back otherwise. `now` is read after the write lock is held.
    fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Transaction<'_>, StoreTime) -> Result<T, StoreError> + Send + 'static,
    ) -> StoreFuture<'_, T> {
        self.write_on(&self.shared.jobs, f)
    }

    /// As [`SqliteStore::write`], on the lease connection.
    fn write_lease<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Transaction<'_>, StoreTime) -> Result<T, StoreError> + Send + 'static,
    ) -> StoreFuture<'_, T> {
        self.write_on(&self.shared.lease_jobs, f)
    }

    fn write_on<'a, T: Send + 'static>(
        &'a self,
        queue: &'a mpsc::Sender<Job>,
        f: impl FnOnce(&Transaction<'_>, StoreTime) -> Result<T, StoreError> + Send + 'static,
    ) -> StoreFuture<'a, T> {
        self.call_on(queue, move |conn, clock| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql)?;
            let now = StoreTime::now(clock);
            let out = f(&tx, now)?;
            tx.commit().map_err(sql)?;
            Ok(out)
        })
    }
}

/// Starts a thread that runs the jobs of one connection until every sender is gone.
fn spawn_store_thread(name: &str, conn: Connection) -> Result<mpsc::Sender<Job>, StoreError> {
    let (jobs, queue) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let mut conn = conn;
            while let Ok(job) = queue.recv() {
                job(&mut conn);
            }
        })
        .map_err(|e| StoreError::backend(BACKEND, e))?;
    Ok(jobs)
}

/// Why [`initialise`] failed: an SQLite error (maybe a retryable lock conflict) or a verdict.
enum InitError {
    Sql(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for InitError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Sql(e)
    }
}

/// A lock conflict with another connection: worth another attempt.
fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

fn initialise(conn: &mut Connection, options: &SqliteOptions) -> Result<(), InitError> {
    conn.busy_timeout(options.busy_timeout)?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(InitError::Store(StoreError::backend(
            BACKEND,
            format!("cannot switch the store file to WAL (journal_mode = {mode})"),
        )));
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    match version {
        0 => {
            tx.execute_batch(SCHEMA)?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        }
        SCHEMA_VERSION => {}
        other => {
            return Err(InitError::Store(StoreError::backend(
                BACKEND,
                format!(
                    "store schema version {other} is not supported (expected {SCHEMA_VERSION})"
                ),
            )));
        }
    }
    Ok(tx.commit()?)
}

fn load_meta(tx: &Transaction<'_>, key: &str) -> Result<u64, StoreError> {
    let v: Option<i64> = tx
        .query_row("SELECT value FROM zlink_meta WHERE key = ?1", [key], |r| {
            r.get(0)
        })
        .optional()
        .map_err(sql)?;
    Ok(v.map_or(0, from_sql))
}

fn store_meta(tx: &Transaction<'_>, key: &str, value: u64) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO zlink_meta (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        params![key, to_sql(value)],
    )
    .map_err(sql)?;
    Ok(())
}

fn load_lease(tx: &Transaction<'_>, node: &NodeRid) -> Result<Option<OwnerLease>, StoreError> {
    let row: Option<(i64, i64, i64)> = tx
        .query_row(
            "SELECT node_generation, lease_generation, expires_at_ms
             FROM owner_leases WHERE node_rid = ?1",
            [node.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()
        .map_err(sql)?;
    Ok(row.map(|(g, l, e)| OwnerLease {
        holder: LeaseHolder {
            node: node.clone(),
            node_generation: NodeGeneration::new(from_sql(g)),
            lease_generation: OwnerLeaseGeneration::new(from_sql(l)),
        },
        expires_at: StoreTime::from_millis(from_sql(e)),
    }))
}

fn store_lease(tx: &Transaction<'_>, lease: &OwnerLease) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO owner_leases (node_rid, node_generation, lease_generation, expires_at_ms)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (node_rid) DO UPDATE SET
             node_generation = excluded.node_generation,
             lease_generation = excluded.lease_generation,
             expires_at_ms = excluded.expires_at_ms",
        params![
            lease.holder.node.as_str(),
            to_sql(lease.holder.node_generation.get()),
            to_sql(lease.holder.lease_generation.get()),
            to_sql(lease.expires_at.as_millis()),
        ],
    )
    .map_err(sql)?;
    Ok(())
}

fn load_counters(tx: &Transaction<'_>, id: &ActorId) -> Result<ActorCounters, StoreError> {
    let row: Option<(i64, i64, i64)> = tx
        .query_row(
            "SELECT last_object_generation, last_authority_generation, last_version
             FROM actor_counters WHERE actor_id = ?1",
            [id.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()
        .map_err(sql)?;
    Ok(
        row.map_or_else(ActorCounters::default, |(o, a, v)| ActorCounters {
            object_generation: from_sql(o),
            authority: from_sql(a),
            version: from_sql(v),
        }),
    )
}

const SELECT_ACTOR: &str = "SELECT actor_type, object_generation, mesh, owner_node,
    node_generation, authority_owner_generation, owner_lease_generation, state, version
    FROM actor_locations WHERE actor_id = ?1";

struct RawActor {
    actor_type: String,
    object_generation: i64,
    mesh: String,
    owner_node: String,
    node_generation: i64,
    authority: i64,
    lease: i64,
    state: i64,
    version: i64,
}

fn raw_actor(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawActor> {
    Ok(RawActor {
        actor_type: r.get(0)?,
        object_generation: r.get(1)?,
        mesh: r.get(2)?,
        owner_node: r.get(3)?,
        node_generation: r.get(4)?,
        authority: r.get(5)?,
        lease: r.get(6)?,
        state: r.get(7)?,
        version: r.get(8)?,
    })
}

fn actor_from_raw(actor_id: &ActorId, raw: RawActor) -> Result<ActorLocation, StoreError> {
    Ok(ActorLocation {
        actor_id: actor_id.clone(),
        actor_type: raw.actor_type,
        object_generation: ObjectGeneration::new(from_sql(raw.object_generation)),
        mesh: MeshName::new(raw.mesh).map_err(|_| corrupt("mesh name"))?,
        owner_node: NodeRid::new(raw.owner_node).map_err(|_| corrupt("owner node rid"))?,
        node_generation: NodeGeneration::new(from_sql(raw.node_generation)),
        authority_owner_generation: AuthorityOwnerGeneration::new(from_sql(raw.authority)),
        owner_lease_generation: OwnerLeaseGeneration::new(from_sql(raw.lease)),
        state: match raw.state {
            0 => ActivationState::Activating,
            1 => ActivationState::Ready,
            _ => return Err(corrupt("activation state")),
        },
        version: StoreVersion::new(from_sql(raw.version)),
    })
}

fn load_actor(conn: &Connection, id: &ActorId) -> Result<Option<ActorLocation>, StoreError> {
    let raw = conn
        .query_row(SELECT_ACTOR, [id.as_str()], raw_actor)
        .optional()
        .map_err(sql)?;
    raw.map(|raw| actor_from_raw(id, raw)).transpose()
}

fn store_actor(tx: &Transaction<'_>, write: &ActorWrite) -> Result<(), StoreError> {
    let l = &write.location;
    let c = &write.counters;
    tx.execute(
        "INSERT INTO actor_counters
             (actor_id, last_object_generation, last_authority_generation, last_version)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (actor_id) DO UPDATE SET
             last_object_generation = excluded.last_object_generation,
             last_authority_generation = excluded.last_authority_generation,
             last_version = excluded.last_version",
        params![
            l.actor_id.as_str(),
            to_sql(c.object_generation),
            to_sql(c.authority),
            to_sql(c.version),
        ],
    )
    .map_err(sql)?;
    tx.execute(
        "INSERT INTO actor_locations (actor_id, actor_type, object_generation, mesh, owner_node,
             node_generation, authority_owner_generation, owner_lease_generation, state, version)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT (actor_id) DO UPDATE SET
             actor_type = excluded.actor_type,
             object_generation = excluded.object_generation,
             mesh = excluded.mesh,
             owner_node = excluded.owner_node,
             node_generation = excluded.node_generation,
             authority_owner_generation = excluded.authority_owner_generation,
             owner_lease_generation = excluded.owner_lease_generation,
             state = excluded.state,
             version = excluded.version",
        params![
            l.actor_id.as_str(),
            l.actor_type,
            to_sql(l.object_generation.get()),
            l.mesh.as_str(),
            l.owner_node.as_str(),
            to_sql(l.node_generation.get()),
            to_sql(l.authority_owner_generation.get()),
            to_sql(l.owner_lease_generation.get()),
            match l.state {
                ActivationState::Activating => 0_i64,
                ActivationState::Ready => 1_i64,
            },
            to_sql(l.version.get()),
        ],
    )
    .map_err(sql)?;
    Ok(())
}

/// The lease row of the recorded owner of `record`, if any.
fn owner_lease_of(
    tx: &Transaction<'_>,
    record: Option<&ActorLocation>,
) -> Result<Option<OwnerLease>, StoreError> {
    match record {
        Some(r) => load_lease(tx, &r.owner_node),
        None => Ok(None),
    }
}

impl LocationStore for SqliteStore {
    fn register_owner(
        &self,
        node: NodeRid,
        node_generation: NodeGeneration,
        ttl: Duration,
    ) -> StoreFuture<'_, OwnerLease> {
        self.write_lease(move |tx, now| {
            let row = load_lease(tx, &node)?;
            let last = load_meta(tx, META_LAST_LEASE_GENERATION)?;
            let r = core::register(row.as_ref(), node, node_generation, ttl, now, last)?;
            if r.last_lease_generation != last {
                store_meta(tx, META_LAST_LEASE_GENERATION, r.last_lease_generation)?;
            }
            store_lease(tx, &r.lease)?;
            Ok(r.lease)
        })
    }

    fn renew_owner(&self, holder: LeaseHolder, ttl: Duration) -> StoreFuture<'_, OwnerLease> {
        self.write_lease(move |tx, now| {
            let row = load_lease(tx, &holder.node)?;
            let lease = core::renew(row.as_ref(), &holder, ttl, now)?;
            store_lease(tx, &lease)?;
            Ok(lease)
        })
    }

    fn release_owner(&self, holder: LeaseHolder) -> StoreFuture<'_, ()> {
        self.write_lease(move |tx, now| {
            let row = load_lease(tx, &holder.node)?;
            if let Some(lease) = core::release(row.as_ref(), &holder, now) {
                store_lease(tx, &lease)?;
            }
            Ok(())
        })
    }

    fn reserve_activation(&self, request: ActivationRequest) -> StoreFuture<'_, Reservation> {
        self.write(move |tx, now| {
            let record = load_actor(tx, &request.actor_id)?;
            let counters = load_counters(tx, &request.actor_id)?;
            let candidate = load_lease(tx, &request.owner.holder.node)?;
            let owner = owner_lease_of(tx, record.as_ref())?;
            match core::reserve(
                record.as_ref(),
                counters,
                candidate.as_ref(),
                owner.as_ref(),
                &request,
                now,
            )? {
                ReserveDecision::Held(location) => Ok(Reservation::Held(location)),
                ReserveDecision::Won(write) => {
                    store_actor(tx, &write)?;
                    Ok(Reservation::Won(write.location))
                }
            }
        })
    }

    fn mark_ready(
        &self,
        actor_id: ActorId,
        fence: AuthorityFence,
    ) -> StoreFuture<'_, ActorLocation> {
        self.write(move |tx, now| {
            let record = load_actor(tx, &actor_id)?;
            let counters = load_counters(tx, &actor_id)?;
            let owner = owner_lease_of(tx, record.as_ref())?;
            match core::mark_ready(
                record.as_ref(),
                counters,
                owner.as_ref(),
                &actor_id,
                fence,
                now,
            )? {
                Some(write) => {
                    store_actor(tx, &write)?;
                    Ok(write.location)
                }
                None => record.ok_or(StoreError::NotFound { actor_id }),
            }
        })
    }

    fn lookup(&self, actor_id: ActorId) -> StoreFuture<'_, Option<ActorLocation>> {
        // A single autocommit read: WAL gives it a consistent snapshot without the write lock.
        self.call(move |conn, _| load_actor(conn, &actor_id))
    }

    fn cas_owner(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        new_owner: ActorOwner,
    ) -> StoreFuture<'_, ActorLocation> {
        self.write(move |tx, now| {
            let record = load_actor(tx, &actor_id)?;
            let counters = load_counters(tx, &actor_id)?;
            let lease = load_lease(tx, &new_owner.holder.node)?;
            let write = core::cas_owner(
                record.as_ref(),
                counters,
                lease.as_ref(),
                &actor_id,
                expected,
                &new_owner,
                now,
            )?;
            store_actor(tx, &write)?;
            Ok(write.location)
        })
    }

    fn relocation_fence(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        owner: OwnerFence,
    ) -> StoreFuture<'_, ActorLocation> {
        self.write(move |tx, now| {
            let record = load_actor(tx, &actor_id)?;
            let counters = load_counters(tx, &actor_id)?;
            let lease = load_lease(tx, &owner.holder.node)?;
            let write = core::relocation_fence(
                record.as_ref(),
                counters,
                lease.as_ref(),
                &actor_id,
                expected,
                &owner,
                now,
            )?;
            store_actor(tx, &write)?;
            Ok(write.location)
        })
    }

    fn reincarnate(&self, actor_id: ActorId, owner: OwnerFence) -> StoreFuture<'_, ActorLocation> {
        self.write(move |tx, now| {
            let record = load_actor(tx, &actor_id)?;
            let counters = load_counters(tx, &actor_id)?;
            let lease = load_lease(tx, &owner.holder.node)?;
            let write = core::reincarnate(
                record.as_ref(),
                counters,
                lease.as_ref(),
                &actor_id,
                &owner,
                now,
            )?;
            store_actor(tx, &write)?;
            Ok(write.location)
        })
    }

    fn destroy(&self, actor_id: ActorId, fence: OwnerFence) -> StoreFuture<'_, ()> {
        self.write(move |tx, now| {
            let record = load_actor(tx, &actor_id)?;
            let lease = load_lease(tx, &fence.holder.node)?;
            core::destroy(record.as_ref(), lease.as_ref(), &actor_id, &fence, now)?;
            tx.execute(
                "DELETE FROM actor_locations WHERE actor_id = ?1",
                [actor_id.as_str()],
            )
            .map_err(sql)?;
            Ok(())
        })
    }

    fn write_wait_limit(&self) -> Option<Duration> {
        Some(self.shared.lease_busy_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Node processes of a mesh open the same fresh store file at once (scripts/mesh-up): every
    /// open must succeed, whichever connection switches the file to WAL and creates the schema.
    #[test]
    fn concurrent_first_opens_of_one_fresh_file_all_succeed() {
        for round in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(format!("store-{round}.db"));
            let barrier = Arc::new(std::sync::Barrier::new(4));
            let openers: Vec<_> = (0..4)
                .map(|_| {
                    let (path, barrier) = (path.clone(), Arc::clone(&barrier));
                    std::thread::spawn(move || {
                        barrier.wait();
                        SqliteStore::open(&path).map(drop)
                    })
                })
                .collect();
            for opener in openers {
                opener.join().unwrap().unwrap();
            }
        }
    }

    #[test]
    fn opens_in_wal_mode_with_schema_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        drop(SqliteStore::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
    }

    #[test]
    fn creates_missing_directories() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/node-a/store.db");
        drop(SqliteStore::open(&path).unwrap());
        assert!(path.exists());
    }

    #[test]
    fn refuses_an_unknown_schema_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", 99)
            .unwrap();
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    }

    // spec: SB-5.11 — a renewal never waits behind other work queued on the same handle: the
    // store thread is held by a job here, and the renewal still answers.
    #[tokio::test]
    async fn a_renewal_does_not_queue_behind_other_store_work() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("store.db")).unwrap();
        let lease = store
            .register_owner(
                NodeRid::new("n").unwrap(),
                NodeGeneration::new(1),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        let (release, held) = std::sync::mpsc::channel::<()>();
        let blocked = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .call(move |_, _| {
                        let _ = held.recv();
                        Ok(())
                    })
                    .await
            }
        });
        tokio::task::yield_now().await;
        // The store thread is busy (or about to be) with the job above; work queued behind it
        // cannot answer until it is released, the renewal can.
        let renewed = tokio::time::timeout(
            Duration::from_secs(20),
            store.renew_owner(lease.holder.clone(), Duration::from_secs(10)),
        )
        .await
        .expect("the renewal answered while the store thread was busy")
        .unwrap();
        assert_eq!(renewed.holder, lease.holder);
        release.send(()).unwrap();
        blocked.await.unwrap().unwrap();
    }

    #[test]
    fn u64_values_round_trip_bit_for_bit() {
        for v in [0, 1, u64::MAX, u64::MAX / 2 + 1] {
            assert_eq!(from_sql(to_sql(v)), v);
        }
    }
}
