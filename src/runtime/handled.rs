//! What a handler returns: a result now or a future that keeps the turn ([`Handled`]).

use std::future::Future;
use std::pin::Pin;

use super::error::HandlerError;

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a handler returns (runtime handlers and actor handlers alike): a result now (no
/// allocation), or a future the turn awaits. A `Later` keeps the turn (and a SpotWide Spot's
/// gate) until it completes (EG-2.6).
pub enum Handled<R> {
    /// The handler finished synchronously.
    Now(Result<R, HandlerError>),
    /// The handler continues asynchronously.
    Later(BoxFuture<Result<R, HandlerError>>),
}

impl<R> Handled<R> {
    /// Finished with `value`.
    pub fn ok(value: R) -> Self {
        Handled::Now(Ok(value))
    }

    /// Finished with an error.
    pub fn err(e: HandlerError) -> Self {
        Handled::Now(Err(e))
    }

    /// Continues as `fut`.
    pub fn later<F>(fut: F) -> Self
    where
        F: Future<Output = Result<R, HandlerError>> + Send + 'static,
    {
        Handled::Later(Box::pin(fut))
    }
}
