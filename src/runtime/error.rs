//! Errors of the lane runtime, one enum per boundary, mapped to the public kinds of the spec.
//!
//! The kinds are [`zlink_wire::ErrorKind`], re-exported as [`ErrorKind`]: one vocabulary from
//! the wire to the application.
//!
//! Limits of different kinds keep distinct types (EG-1.2): [`ApplicationLaneFull`] and
//! [`LifecycleLaneFull`] share no type, arithmetic or meaning with each other or with transport
//! limits.

/// The public error kinds: the one vocabulary of the crate, the wire's (SPEC "Error kinds";
/// they travel in records as one `u8`). The runtime's own conditions keep their detail in the
/// error types below ([`Unavailable`], [`InvalidOperation`], the lane-full types, [`HandlerError`])
/// and map to one of these kinds ([`RuntimeError::kind`]); `Internal` is the framework error
/// reply of a failed request handler (EG-15).
pub use zlink_wire::ErrorKind;

/// Which limit of a lane was hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LaneLimitKind {
    /// The item count limit (EG-16.19: empty payloads still count).
    Count,
    /// The byte limit (payload + fixed cost per work).
    Bytes,
}

/// The application lane of one serial execution object is full (EG-7.1). Never merged with
/// [`LifecycleLaneFull`] (EG-1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("application lane full ({limit:?} limit)")]
pub struct ApplicationLaneFull {
    /// The limit that was hit.
    pub limit: LaneLimitKind,
}

/// The lifecycle lane of one serial execution object is full (EG-7.1). Never merged with
/// [`ApplicationLaneFull`] (EG-1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("lifecycle lane full ({limit:?} limit)")]
pub struct LifecycleLaneFull {
    /// The limit that was hit.
    pub limit: LaneLimitKind,
}

/// An admission refusal of one of the two lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdmissionError {
    /// The application lane refused.
    #[error(transparent)]
    Application(ApplicationLaneFull),
    /// The lifecycle lane refused.
    #[error(transparent)]
    Lifecycle(LifecycleLaneFull),
}

/// Why an operation is invalid here (kind `InvalidOperation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidOperation {
    /// Yield used outside the owner turn that holds the gate (EG-16.5).
    #[error("yield outside an owner turn")]
    YieldOutsideTurn,
    /// Yield used where the execution mode does not allow it (EG-4.2).
    #[error("yield is allowed only in SpotWide User and Instance Spot turns")]
    YieldNotAllowed,
    /// A request to one's own actor awaited (EG-6.5, even with Yield).
    #[error("awaiting a request to one's own actor")]
    AwaitOwnActor,
    /// A turn-holding terminal awaiting a target behind the same gate (EG-6.5).
    #[error("awaiting a same-gate target while holding the turn")]
    AwaitSameGate,
    /// A context used after its handler's turn ended.
    #[error("context used outside its handler turn")]
    OutsideTurn,
    /// `defer()` after the registration scope closed (EG-5.5).
    #[error("defer() outside the handler's registration scope")]
    DeferOutsideScope,
    /// `defer()` registrations exceeded the per-handler limit (EG-5.6).
    #[error("too many defer() registrations in one handler")]
    DeferLimitExceeded,
    /// A call into the other progress domain (EG-13): fails instead of waiting.
    #[error("cross-domain call")]
    CrossDomain,
}

/// Why a target is unavailable (kind `Unavailable`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unavailable {
    /// The Spot, actor or lane ended.
    #[error("target ended")]
    Ended,
    /// The unit is sealed for relocation (EG-4.1).
    #[error("unit sealed for relocation")]
    Sealed,
    /// The runtime is shutting down.
    #[error("runtime shut down")]
    ShutDown,
    /// The work was dropped before its terminal (cancelled, failed resume).
    #[error("work dropped before its terminal")]
    Dropped,
}

/// How a handler ended abnormally. `Cancelled` is a documented implementation kind (SB-12 names
/// cancellation only as a condition).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandlerError {
    /// The handler returned an error.
    #[error("handler failed: {0}")]
    Failed(String),
    /// The handler was cancelled.
    #[error("handler cancelled")]
    Cancelled,
    /// Encoding the reply failed (EG-5.3).
    #[error("reply encoding failed: {0}")]
    ReplyEncoding(String),
    /// The handler panicked (treated as a handler exception).
    #[error("handler panicked")]
    Panicked,
    /// The handler refused the work with a public kind of its own — typically the error of a
    /// framework operation it called, passed on (a push without a bound session:
    /// `InvalidOperation`, SB-12) — instead of failing (`Internal`).
    #[error("{message}")]
    Refused {
        /// The public kind the request's error reply carries.
        kind: ErrorKind,
        /// Detail for the caller.
        message: String,
    },
}

impl HandlerError {
    /// A handler's own failure with a message ([`HandlerError::Failed`]): for a request it
    /// becomes an error reply of kind `Internal`, for a send it is logged and counted (EG-15).
    pub fn new(message: impl Into<String>) -> Self {
        HandlerError::Failed(message.into())
    }

    /// A refusal of public kind `kind` ([`HandlerError::Refused`]); `Internal` is a failure
    /// ([`HandlerError::Failed`]).
    pub fn refused(kind: ErrorKind, message: impl Into<String>) -> Self {
        match kind {
            ErrorKind::Internal => HandlerError::Failed(message.into()),
            kind => HandlerError::Refused {
                kind,
                message: message.into(),
            },
        }
    }
}

/// Errors of the lane runtime's public operations.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// Kind `InvalidOperation`.
    #[error("invalid operation: {0}")]
    InvalidOperation(#[from] InvalidOperation),
    /// Kind `Unavailable`.
    #[error("unavailable: {0}")]
    Unavailable(#[from] Unavailable),
    /// Kind `NotFound`.
    #[error("not found")]
    NotFound,
    /// Kind `DeadlineExceeded`.
    #[error("deadline exceeded")]
    DeadlineExceeded,
    /// The application lane refused the work (kind `Unavailable`, own type: EG-1.2).
    #[error(transparent)]
    ApplicationLaneFull(#[from] ApplicationLaneFull),
    /// The lifecycle lane refused the work (kind `Unavailable`, own type: EG-1.2).
    #[error(transparent)]
    LifecycleLaneFull(#[from] LifecycleLaneFull),
    /// Framework error reply of a failed request handler (EG-15, kind `Internal`).
    #[error("request handler failed: {0}")]
    Handler(HandlerError),
}

impl RuntimeError {
    /// The public kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            RuntimeError::InvalidOperation(_) => ErrorKind::InvalidOperation,
            RuntimeError::Unavailable(_)
            | RuntimeError::ApplicationLaneFull(_)
            | RuntimeError::LifecycleLaneFull(_) => ErrorKind::Unavailable,
            RuntimeError::NotFound => ErrorKind::NotFound,
            RuntimeError::DeadlineExceeded => ErrorKind::DeadlineExceeded,
            RuntimeError::Handler(HandlerError::Refused { kind, .. }) => *kind,
            RuntimeError::Handler(_) => ErrorKind::Internal,
        }
    }
}

impl From<AdmissionError> for RuntimeError {
    fn from(e: AdmissionError) -> Self {
        match e {
            AdmissionError::Application(a) => RuntimeError::ApplicationLaneFull(a),
            AdmissionError::Lifecycle(l) => RuntimeError::LifecycleLaneFull(l),
        }
    }
}
