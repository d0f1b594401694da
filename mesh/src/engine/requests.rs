//! The request-ending bookkeeping of every mesh driver (the node's engine and the
//! `MeshClient`): a request's waiter is told its terminal exactly once, and a queued request
//! that already ended is never transmitted. The decisions are the correlation table's
//! ([`crate::correlation`]); this tells the waiters and counts the drops.

use super::*;

/// A queued request at the moment of its transmission (SB-12, EG-16.26), for every driver's
/// [`Transport::ended`]: true (and counted as `RequestEnded`) when it already reached its
/// terminal (timeout, cancel, peer lost) or its deadline is at or before `now` — it is never
/// sent; every request due at `now` is ended here, with `DeadlineExceeded`, before the timer
/// would. `who` is the other end, as the detail of the drop. `corr` is a request's (not 0).
pub(crate) fn ended_before_transmission<P: PartialEq + Clone>(
    table: &mut Correlations<P, Waiter>,
    corr: u64,
    now: Instant,
    counters: &Counters,
    who: &dyn std::fmt::Display,
) -> bool {
    let Some(expired) = table.handle_transmit(corr, now) else {
        return false;
    };
    fail(expired, &RequestError::DeadlineExceeded);
    counters.drop(
        DropReason::RequestEnded,
        &format_args!("{who}: corr {corr} ended before transmission"),
    );
    true
}

/// Ends every request whose deadline is at or before `now`, with `DeadlineExceeded`.
pub(crate) fn expire<P: PartialEq + Clone>(table: &mut Correlations<P, Waiter>, now: Instant) {
    fail(table.handle_timeout(now), &RequestError::DeadlineExceeded);
}

/// The driver stops: every request still pending ends with `error`.
pub(crate) fn close_all<P: PartialEq + Clone>(
    table: &mut Correlations<P, Waiter>,
    error: &RequestError,
) {
    fail(table.handle_close(), error);
}

/// Tells each of `ended`'s waiters its terminal `error`.
pub(crate) fn fail(ended: impl IntoIterator<Item = (u64, Waiter)>, error: &RequestError) {
    for (_, w) in ended {
        let _ = w.send(Err(error.clone()));
    }
}
