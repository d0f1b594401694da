//! Who may do what on the client port: the authorization of the framework's client operations
//! (`docs/CLIENT-PROTOCOL.md`, section 7.1).
//!
//! Every framework operation a client sends (`CREATE` … `COUNTERS`, and the one-way actor send)
//! is decided here before the node does anything for it; session packets (keys below
//! `0xFFFF0000`) are the application's normal path and are not decided here — their handlers
//! are the application's own code.
//!
//! - A session that presented the node's **operator credential** (`AUTHENTICATE`) may do
//!   everything; the credential is compared in constant time ([`OperatorCredential::verify`]).
//! - Every other session is asked about with the node's [`ClientPolicy`]: the default,
//!   [`ClientPolicy::OperatorOnly`], refuses every framework operation (safe on a public port:
//!   a stranger can only send session packets); [`ClientPolicy::OwnActors`] lets a session
//!   create actors and use and destroy only the incarnations it created itself;
//!   [`ClientPolicy::Open`] allows everything (a trusted network); [`ClientPolicy::Custom`] is
//!   the application's hook ([`Authorizer`]), asked per operation and actor type.
//! - Each refusal is counted by operation and [`Refusal`] (a closed vocabulary): `NodeCounters`,
//!   `NODE_INFO`, the metrics endpoint and `zlink-node ctl counters` show them.
//! - Framework operations that wait (the store, a peer) are bounded per session
//!   ([`DEFAULT_OPERATIONS_IN_FLIGHT`]); one beyond the bound is refused (`Unavailable`) and
//!   counted as [`Refusal::Busy`].
//!
//! What the table keeps per session (operator flag, created incarnations, operations in
//! flight, failed credential attempts) is created only by the session's own records on the
//! inbound loop and removed when the session ends (`ClientAccessTable::forget`); a session
//! keeps at most [`MAX_OWNED_PER_SESSION`] created incarnations.

use std::collections::{HashMap, HashSet};
use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use zlink_wire::{ActorId, SessionRid};

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Mutex, MutexGuard};
use std::sync::Arc;

/// Framework operations that wait for the store or a peer that one session may have in flight
/// at once (`NodeOptions::max_operations_per_session`).
pub const DEFAULT_OPERATIONS_IN_FLIGHT: usize = 64;

/// Incarnations one session may own under [`ClientPolicy::OwnActors`]; a `CREATE` beyond it
/// is refused ([`Refusal::TooManyOwned`]).
pub const MAX_OWNED_PER_SESSION: usize = 1_024;

/// Wrong credentials one session may present; the one after closes the session
/// (Disconnect `Refused`).
pub const MAX_CREDENTIAL_FAILURES: u32 = 3;

/// The longest operator credential, in bytes.
pub const MAX_CREDENTIAL_LEN: usize = 1_024;

/// A framework client operation, as the authorization sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClientOperation {
    /// `CREATE`: a new incarnation of `actor_type`.
    Create,
    /// `GET_OR_CREATE`: the Ready incarnation of an id, created if absent.
    GetOrCreate,
    /// `GET`: the Ready ref of an id.
    Get,
    /// `CALL` as a request (144).
    Call,
    /// `CALL` as a one-way send (147).
    Send,
    /// `DESTROY` of an incarnation.
    Destroy,
    /// `NODE_INFO`.
    NodeInfo,
    /// `LIST_ACTORS`.
    ListActors,
    /// `LIST_SESSIONS`.
    ListSessions,
    /// `COUNTERS`.
    Counters,
    /// `AUTHENTICATE`: presenting the operator credential (never asked of a policy).
    Authenticate,
    /// `RELOCATE`: moving an actor to another node.
    Relocate,
    /// `LIST_RELOCATIONS`.
    ListRelocations,
    /// `RELOCATE_SPOT`: moving a whole Spot to another node.
    RelocateSpot,
}

impl ClientOperation {
    /// Every operation, in counter order.
    pub const ALL: [ClientOperation; 14] = [
        ClientOperation::Create,
        ClientOperation::GetOrCreate,
        ClientOperation::Get,
        ClientOperation::Call,
        ClientOperation::Send,
        ClientOperation::Destroy,
        ClientOperation::NodeInfo,
        ClientOperation::ListActors,
        ClientOperation::ListSessions,
        ClientOperation::Counters,
        ClientOperation::Authenticate,
        ClientOperation::Relocate,
        ClientOperation::ListRelocations,
        ClientOperation::RelocateSpot,
    ];

    /// The snake_case name used in counters (`create`, `get_or_create`, …).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ClientOperation::Create => "create",
            ClientOperation::GetOrCreate => "get_or_create",
            ClientOperation::Get => "get",
            ClientOperation::Call => "call",
            ClientOperation::Send => "send",
            ClientOperation::Destroy => "destroy",
            ClientOperation::NodeInfo => "node_info",
            ClientOperation::ListActors => "list_actors",
            ClientOperation::ListSessions => "list_sessions",
            ClientOperation::Counters => "counters",
            ClientOperation::Authenticate => "authenticate",
            ClientOperation::Relocate => "relocate",
            ClientOperation::ListRelocations => "list_relocations",
            ClientOperation::RelocateSpot => "relocate_spot",
        }
    }
}

/// Why a client operation was refused (the closed vocabulary of the refusal counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Refusal {
    /// The node's policy (or the application's [`Authorizer`]) refused it.
    Denied,
    /// `AUTHENTICATE` with a credential that is not the node's operator credential (or the
    /// node has none).
    BadCredential,
    /// The session already has [`DEFAULT_OPERATIONS_IN_FLIGHT`] (the configured bound)
    /// operations waiting.
    Busy,
    /// `CREATE` under [`ClientPolicy::OwnActors`] when the session owns
    /// [`MAX_OWNED_PER_SESSION`] incarnations.
    TooManyOwned,
}

impl Refusal {
    /// Every reason, in counter order.
    pub const ALL: [Refusal; 4] = [
        Refusal::Denied,
        Refusal::BadCredential,
        Refusal::Busy,
        Refusal::TooManyOwned,
    ];

    /// The snake_case name used in counters.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Denied => "denied",
            Refusal::BadCredential => "bad_credential",
            Refusal::Busy => "busy",
            Refusal::TooManyOwned => "too_many_owned",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::Denied => "not authorized",
            Refusal::BadCredential => "not authorized: wrong credential",
            Refusal::Busy => "too many operations in flight for this session",
            Refusal::TooManyOwned => "not authorized: the session owns too many actors",
        })
    }
}

/// One client operation to decide: who asks, what, on which actor.
#[derive(Clone, Copy, Debug)]
pub struct AccessRequest<'a> {
    /// The operation.
    pub operation: ClientOperation,
    /// The client session that asks (one connection).
    pub session: SessionRid,
    /// The actor type the operation names: `CREATE`/`GET_OR_CREATE`'s `actor_type`, the
    /// type in a `CALL`/`DESTROY` ref; `None` for the others.
    pub actor_type: Option<&'a str>,
    /// The actor id the operation names; `None` for the node-wide operations.
    pub actor_id: Option<&'a ActorId>,
    /// Whether this session created the incarnation the operation names (`CALL`, `Send`,
    /// `DESTROY`: that exact incarnation; `GET`: some incarnation of the id) through this
    /// node. Always `false` for the other operations.
    pub created_by_session: bool,
}

/// An application's authorization hook: asked for every framework operation of a session that
/// is not the operator's. It runs on the node's inbound loop: decide from the request alone,
/// without blocking.
pub trait Authorizer: Send + Sync + 'static {
    /// `true` to allow the operation, `false` to refuse it (`InvalidOperation`, "not
    /// authorized", counted as [`Refusal::Denied`]).
    fn authorize(&self, request: &AccessRequest<'_>) -> bool;
}

impl<F> Authorizer for F
where
    F: Fn(&AccessRequest<'_>) -> bool + Send + Sync + 'static,
{
    fn authorize(&self, request: &AccessRequest<'_>) -> bool {
        self(request)
    }
}

/// What a client that is not the operator may do with framework operations.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum ClientPolicy {
    /// Nothing: every framework operation needs the operator credential. Session packets
    /// are unaffected. The default, safe for a public port.
    #[default]
    OperatorOnly,
    /// `CREATE` of any hosted type; `GET`, `CALL`, sends and `DESTROY` only of the
    /// incarnations the session created itself (through this node, while the session lasts);
    /// `GET_OR_CREATE`, `NODE_INFO` and the listing operations are the operator's.
    OwnActors,
    /// Everything (a trusted network only).
    Open,
    /// The application decides ([`Authorizer`]).
    Custom(Arc<dyn Authorizer>),
}

impl fmt::Debug for ClientPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl ClientPolicy {
    /// The policy's configuration name (`operator_only`, `own_actors`, `open`; `custom`).
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            ClientPolicy::OperatorOnly => "operator_only",
            ClientPolicy::OwnActors => "own_actors",
            ClientPolicy::Open => "open",
            ClientPolicy::Custom(_) => "custom",
        }
    }

    /// The built-in policy of a configuration name.
    ///
    /// # Errors
    /// The name when it is none of `operator_only`, `own_actors`, `open`.
    pub fn from_name(name: &str) -> Result<Self, String> {
        match name {
            "operator_only" => Ok(ClientPolicy::OperatorOnly),
            "own_actors" => Ok(ClientPolicy::OwnActors),
            "open" => Ok(ClientPolicy::Open),
            other => Err(other.to_owned()),
        }
    }

    fn allows(&self, r: &AccessRequest<'_>) -> bool {
        use ClientOperation as Op;
        match self {
            ClientPolicy::OperatorOnly => false,
            ClientPolicy::Open => true,
            ClientPolicy::OwnActors => match r.operation {
                Op::Create => true,
                Op::Get | Op::Call | Op::Send | Op::Destroy => r.created_by_session,
                _ => false,
            },
            ClientPolicy::Custom(hook) => hook.authorize(r),
        }
    }
}

/// The node's operator credential, kept only as its keyed digest; compared in constant time.
#[derive(Clone)]
pub struct OperatorCredential {
    tag: [u8; 32],
}

impl fmt::Debug for OperatorCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OperatorCredential(..)")
    }
}

/// An operator credential that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum CredentialError {
    /// Empty (after trimming a trailing newline of a file).
    #[error("the operator credential is empty")]
    Empty,
    /// Longer than [`MAX_CREDENTIAL_LEN`] bytes.
    #[error("the operator credential is longer than {MAX_CREDENTIAL_LEN} bytes")]
    TooLong,
}

/// The fixed key of the digest: it only makes every comparison one of two 32-byte tags.
const DIGEST_KEY: &[u8] = b"zlink operator credential v1";

fn digest(bytes: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(DIGEST_KEY).expect("HMAC takes any key");
    mac.update(bytes);
    mac
}

impl OperatorCredential {
    /// The credential `bytes` (1..=[`MAX_CREDENTIAL_LEN`] bytes).
    ///
    /// # Errors
    /// [`CredentialError`] when it is empty or too long.
    pub fn new(bytes: &[u8]) -> Result<Self, CredentialError> {
        if bytes.is_empty() {
            return Err(CredentialError::Empty);
        }
        if bytes.len() > MAX_CREDENTIAL_LEN {
            return Err(CredentialError::TooLong);
        }
        Ok(Self {
            tag: digest(bytes).finalize().into_bytes().into(),
        })
    }

    /// Whether `presented` is this credential. The time taken does not depend on where
    /// `presented` first differs: both sides are reduced to a 32-byte HMAC-SHA256 tag and the
    /// tags are compared in constant time (`hmac`'s `verify_slice`).
    #[must_use]
    pub fn verify(&self, presented: &[u8]) -> bool {
        digest(presented).verify_slice(&self.tag).is_ok()
    }
}

/// The node's access settings (`NodeOptions::client_access`).
#[derive(Clone, Debug, Default)]
pub struct ClientAccess {
    /// What a non-operator session may do (default [`ClientPolicy::OperatorOnly`]).
    pub policy: ClientPolicy,
    /// The operator credential; `None`: no session can become the operator.
    pub operator: Option<OperatorCredential>,
    /// Framework operations that wait (store, peer) one session may have in flight (default
    /// [`DEFAULT_OPERATIONS_IN_FLIGHT`]).
    pub max_operations_per_session: usize,
}

impl ClientAccess {
    /// The safe default: [`ClientPolicy::OperatorOnly`], no operator credential.
    #[must_use]
    pub fn new() -> Self {
        Self {
            policy: ClientPolicy::OperatorOnly,
            operator: None,
            max_operations_per_session: DEFAULT_OPERATIONS_IN_FLIGHT,
        }
    }

    /// Every operation allowed to every session ([`ClientPolicy::Open`]): a trusted network.
    #[must_use]
    pub fn open() -> Self {
        Self {
            policy: ClientPolicy::Open,
            ..Self::new()
        }
    }
}

#[derive(Default)]
struct SessionRights {
    operator: bool,
    credential_failures: u32,
    in_flight: usize,
    owned: HashSet<(ActorId, u64)>,
}

/// What a decision said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    Allow,
    Refuse(Refusal),
}

/// What `AUTHENTICATE` said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Authenticated {
    /// The session is the operator now.
    Operator,
    /// Wrong credential (counted); the session goes on.
    Refused,
    /// Wrong credential once too often: close the session.
    Close,
}

/// The per-session rights and the refusal counters of one node.
pub(crate) struct ClientAccessTable {
    settings: ClientAccess,
    sessions: Mutex<HashMap<SessionRid, SessionRights>>,
    refusals: [[AtomicU64; Refusal::ALL.len()]; ClientOperation::ALL.len()],
}

impl ClientAccessTable {
    pub(crate) fn new(settings: ClientAccess) -> Arc<Self> {
        Arc::new(Self {
            settings,
            sessions: Mutex::new(HashMap::new()),
            refusals: Default::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<SessionRid, SessionRights>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one refusal.
    pub(crate) fn count(&self, op: ClientOperation, why: Refusal) {
        self.refusals[op as usize][why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Every `"<operation>/<reason>"` counter, zeros included.
    pub(crate) fn refusals(&self) -> std::collections::BTreeMap<String, u64> {
        let mut out = std::collections::BTreeMap::new();
        for op in ClientOperation::ALL {
            for why in Refusal::ALL {
                out.insert(
                    format!("{}/{}", op.as_str(), why.as_str()),
                    self.refusals[op as usize][why as usize].load(Ordering::Relaxed),
                );
            }
        }
        out
    }

    /// Sessions the table holds state for now.
    pub(crate) fn sessions(&self) -> usize {
        self.lock().len()
    }

    /// Decides `op` of `session` (counting a refusal): the operator may do everything, anyone
    /// else what the policy allows. `actor`: the id and, for an exact incarnation, its
    /// ObjectGeneration (`None` for any incarnation of the id).
    pub(crate) fn decide(
        &self,
        session: SessionRid,
        op: ClientOperation,
        actor_type: Option<&str>,
        actor: Option<(&ActorId, Option<u64>)>,
    ) -> Decision {
        // What the table knows, under its lock; the policy (an application's hook) outside it.
        let (created_by_session, owned) = {
            let mut sessions = self.lock();
            let rights = sessions.entry(session).or_default();
            if rights.operator {
                return Decision::Allow;
            }
            let created = match actor {
                Some((id, Some(generation))) => rights.owned.contains(&(id.clone(), generation)),
                Some((id, None)) => rights.owned.iter().any(|(o, _)| o == id),
                None => false,
            };
            (created, rights.owned.len())
        };
        let request = AccessRequest {
            operation: op,
            session,
            actor_type,
            actor_id: actor.map(|(id, _)| id),
            created_by_session,
        };
        let decision = if !self.settings.policy.allows(&request) {
            Decision::Refuse(Refusal::Denied)
        } else if op == ClientOperation::Create
            && matches!(self.settings.policy, ClientPolicy::OwnActors)
            && owned >= MAX_OWNED_PER_SESSION
        {
            Decision::Refuse(Refusal::TooManyOwned)
        } else {
            Decision::Allow
        };
        if let Decision::Refuse(why) = decision {
            self.count(op, why);
        }
        decision
    }

    /// `AUTHENTICATE` of `session` with `presented`.
    pub(crate) fn authenticate(&self, session: SessionRid, presented: &[u8]) -> Authenticated {
        // Compared before the lock: the comparison's time is the same for every input.
        let ok = self
            .settings
            .operator
            .as_ref()
            .is_some_and(|c| c.verify(presented));
        let mut sessions = self.lock();
        let rights = sessions.entry(session).or_default();
        if ok {
            rights.operator = true;
            return Authenticated::Operator;
        }
        drop(sessions);
        self.count(ClientOperation::Authenticate, Refusal::BadCredential);
        let mut sessions = self.lock();
        let Some(rights) = sessions.get_mut(&session) else {
            return Authenticated::Refused;
        };
        rights.credential_failures += 1;
        if rights.credential_failures > MAX_CREDENTIAL_FAILURES {
            Authenticated::Close
        } else {
            Authenticated::Refused
        }
    }

    /// One more operation that waits, for `session`: a permit that gives its place back when
    /// dropped, or `None` (counted as [`Refusal::Busy`]) when the session has the bound in
    /// flight.
    pub(crate) fn begin(
        self: &Arc<Self>,
        session: SessionRid,
        op: ClientOperation,
    ) -> Option<OperationPermit> {
        {
            let mut sessions = self.lock();
            let rights = sessions.entry(session).or_default();
            if rights.in_flight >= self.settings.max_operations_per_session {
                drop(sessions);
                self.count(op, Refusal::Busy);
                return None;
            }
            rights.in_flight += 1;
        }
        Some(OperationPermit {
            table: self.clone(),
            session,
        })
    }

    /// `session` created this incarnation (kept while the session lasts, under
    /// [`ClientPolicy::OwnActors`] only). Nothing is kept for a session that already ended.
    pub(crate) fn created(&self, session: SessionRid, id: &ActorId, generation: u64) {
        if !matches!(self.settings.policy, ClientPolicy::OwnActors) {
            return;
        }
        if let Some(rights) = self.lock().get_mut(&session)
            && rights.owned.len() < MAX_OWNED_PER_SESSION
        {
            rights.owned.insert((id.clone(), generation));
        }
    }

    /// `session`'s incarnation was destroyed.
    pub(crate) fn destroyed(&self, session: SessionRid, id: &ActorId, generation: u64) {
        if let Some(rights) = self.lock().get_mut(&session) {
            rights.owned.remove(&(id.clone(), generation));
        }
    }

    /// The session ended: everything kept for it goes.
    pub(crate) fn forget(&self, session: SessionRid) {
        self.lock().remove(&session);
    }
}

/// A session's place among its operations in flight ([`ClientAccessTable::begin`]).
pub(crate) struct OperationPermit {
    table: Arc<ClientAccessTable>,
    session: SessionRid,
}

impl Drop for OperationPermit {
    fn drop(&mut self) {
        if let Some(rights) = self.table.lock().get_mut(&self.session) {
            rights.in_flight = rights.in_flight.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rid(n: u64) -> SessionRid {
        SessionRid::new(n)
    }

    fn id(s: &str) -> ActorId {
        ActorId::new(s).unwrap()
    }

    #[test]
    fn operator_only_refuses_everything_and_counts() {
        let t = ClientAccessTable::new(ClientAccess::new());
        for op in ClientOperation::ALL {
            assert_eq!(
                t.decide(rid(1), op, None, None),
                Decision::Refuse(Refusal::Denied)
            );
        }
        assert_eq!(t.refusals()["destroy/denied"], 1);
        assert_eq!(t.refusals()["create/busy"], 0);
    }

    #[test]
    fn own_actors_allows_only_the_creators_incarnation() {
        let t = ClientAccessTable::new(ClientAccess {
            policy: ClientPolicy::OwnActors,
            ..ClientAccess::new()
        });
        let a = id("a");
        assert_eq!(
            t.decide(rid(1), ClientOperation::Create, Some("counter"), None),
            Decision::Allow
        );
        t.created(rid(1), &a, 7);
        let call = |s, g| t.decide(rid(s), ClientOperation::Call, None, Some((&a, Some(g))));
        assert_eq!(call(1, 7), Decision::Allow);
        assert_eq!(call(1, 8), Decision::Refuse(Refusal::Denied));
        assert_eq!(call(2, 7), Decision::Refuse(Refusal::Denied));
        assert_eq!(
            t.decide(rid(1), ClientOperation::Get, None, Some((&a, None))),
            Decision::Allow
        );
        t.destroyed(rid(1), &a, 7);
        assert_eq!(call(1, 7), Decision::Refuse(Refusal::Denied));
        assert_eq!(
            t.decide(rid(1), ClientOperation::ListActors, None, None),
            Decision::Refuse(Refusal::Denied)
        );
    }

    #[test]
    fn the_operator_may_do_everything_and_wrong_credentials_close_the_session() {
        let t = ClientAccessTable::new(ClientAccess {
            operator: Some(OperatorCredential::new(b"s3cret").unwrap()),
            ..ClientAccess::new()
        });
        for _ in 0..MAX_CREDENTIAL_FAILURES {
            assert_eq!(t.authenticate(rid(1), b"s3cre"), Authenticated::Refused);
        }
        assert_eq!(t.authenticate(rid(1), b"s3cre"), Authenticated::Close);
        assert_eq!(t.authenticate(rid(2), b"s3cret"), Authenticated::Operator);
        assert_eq!(
            t.decide(rid(2), ClientOperation::Destroy, None, None),
            Decision::Allow
        );
        assert_eq!(
            t.refusals()["authenticate/bad_credential"],
            u64::from(MAX_CREDENTIAL_FAILURES) + 1
        );
        t.forget(rid(1));
        t.forget(rid(2));
        assert_eq!(t.sessions(), 0);
    }

    #[test]
    fn no_credential_configured_refuses_every_credential() {
        let t = ClientAccessTable::new(ClientAccess::new());
        assert_eq!(t.authenticate(rid(1), b""), Authenticated::Refused);
        assert_eq!(t.authenticate(rid(1), b"x"), Authenticated::Refused);
    }

    #[test]
    fn operations_in_flight_are_bounded_per_session() {
        let t = ClientAccessTable::new(ClientAccess {
            max_operations_per_session: 2,
            ..ClientAccess::open()
        });
        let p1 = t.begin(rid(1), ClientOperation::Get).unwrap();
        let _p2 = t.begin(rid(1), ClientOperation::Get).unwrap();
        assert!(t.begin(rid(1), ClientOperation::Get).is_none());
        assert!(t.begin(rid(2), ClientOperation::Get).is_some());
        drop(p1);
        assert!(t.begin(rid(1), ClientOperation::Get).is_some());
        assert_eq!(t.refusals()["get/busy"], 1);
    }

    /// A wrong credential that differs from the operator's in its first byte and one that
    /// differs only in its last take the same time to refuse: the comparison does not stop at
    /// the first difference. Small batches of each alternate and the fastest batch of each is
    /// compared (load only ever slows a batch down). With a plain `==` on the bytes the second
    /// takes clearly longer (a memcmp of the whole credential).
    #[test]
    fn refusing_a_guess_takes_as_long_wherever_it_differs() {
        use std::time::{Duration, Instant};
        let secret = vec![b'k'; MAX_CREDENTIAL_LEN];
        let cred = OperatorCredential::new(&secret).unwrap();
        let mut early = secret.clone();
        early[0] = b'x';
        let mut late = secret.clone();
        *late.last_mut().unwrap() = b'x';
        let batch = |guess: &[u8]| {
            let t = Instant::now();
            for _ in 0..10 {
                assert!(!cred.verify(std::hint::black_box(guess)));
            }
            t.elapsed()
        };
        let (mut e, mut l) = (Duration::MAX, Duration::MAX);
        for _ in 0..2_000 {
            e = e.min(batch(&early));
            l = l.min(batch(&late));
        }
        let ratio = l.as_secs_f64() / e.as_secs_f64();
        assert!(
            (0.9..1.1).contains(&ratio),
            "late/early refusal time ratio {ratio} ({l:?} / {e:?})"
        );
    }

    /// The `AUTHENTICATE` payload of docs/CLIENT-PROTOCOL.md 7.1's worked example.
    #[test]
    fn authenticate_payload_is_the_documented_bytes() {
        let p = crate::node::protocol::Authenticate {
            credential: b"s3cret".to_vec(),
        };
        let hex: String = rmp_serde::to_vec_named(&p)
            .unwrap()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hex, "81aa63726564656e7469616cc406733363726574");
    }

    #[test]
    fn credentials_are_bounded() {
        assert_eq!(
            OperatorCredential::new(b"").unwrap_err(),
            CredentialError::Empty
        );
        assert_eq!(
            OperatorCredential::new(&[b'x'; MAX_CREDENTIAL_LEN + 1]).unwrap_err(),
            CredentialError::TooLong
        );
    }
}
