//! The session owner's replacements (SB-6.2 … SB-6.5): a 51 applied, the replaced-callback
//! and the non-blocking close timer on the injected clock.

use super::*;

impl SessionOwner {
    /// A 51 (or the same-node replacement) from `sender` (SB-6.2 … SB-6.5): retire the
    /// binding, enter *closing*, run the replaced-callback, close 100 ms after its terminal.
    pub(crate) fn handle_replaced(
        self: &Arc<Self>,
        sender: (&NodeRid, NodeGeneration),
        rec: &BoundSessionReplaced,
    ) {
        let Some(entry) = self.entry(rec.previous.session) else {
            self.flow
                .reject(FlowRecord::Replaced, FlowReject::UnknownSession, &rec.actor);
            return;
        };
        let now = self.cfg.clock.now();
        let outcome = entry.agg().handle_replaced(now, sender, rec);
        let seq = match outcome {
            Err(r) => {
                self.flow.reject(FlowRecord::Replaced, r, &rec.actor);
                return;
            }
            Ok(ReplacedOutcome::Closing { seq, .. }) => {
                tracing::info!(session = %entry.rid, actor = %rec.actor, "session replaced: closing");
                self.spawn_close_timer(&entry, seq);
                seq
            }
            // Closing already: this actor's replaced-callback runs too, and the close waits
            // for it (SB-6.2, SB-6.9).
            Ok(ReplacedOutcome::AlsoClosing { seq, .. }) => {
                tracing::info!(session = %entry.rid, actor = %rec.actor, seq, "closing session replaced again");
                entry.timer.notify_one();
                seq
            }
        };
        self.replacements.fetch_add(1, Ordering::Relaxed);
        let owner = self.clone();
        let session = self.session(&entry);
        let cb = self.callbacks.on_replaced.clone();
        let actor = rec.actor.clone();
        let entry2 = entry.clone();
        let finished = move |owner: &Arc<SessionOwner>| {
            let now = owner.cfg.clock.now();
            if entry2.agg().callback_finished(now, seq) {
                entry2.timer.notify_one();
            }
        };
        let submitted = entry.lane.submit_lifecycle(move |_ctx| {
            Handled::later(async move {
                if let Some(cb) = cb
                    && let Err(e) = cb(session, actor).await
                {
                    tracing::info!(error = %e, "replaced-callback failed");
                }
                finished(&owner);
                Ok(())
            })
        });
        if submitted.is_err() {
            let now = self.cfg.clock.now();
            if entry.agg().callback_finished(now, seq) {
                entry.timer.notify_one();
            }
        }
    }

    /// The non-blocking replacement close timer (SB-6.4): sleeps on the injected clock until
    /// the aggregate's deadline, re-reads it when woken, closes when the aggregate decides.
    fn spawn_close_timer(self: &Arc<Self>, entry: &Arc<SessionEntry>, seq: u64) {
        let owner = self.clone();
        let entry = entry.clone();
        tokio::spawn(async move {
            loop {
                let Some(deadline) = entry.agg().poll_timeout() else {
                    return;
                };
                let woken = entry.timer.notified();
                tokio::select! {
                    () = owner.cfg.clock.sleep_until(deadline) => {}
                    () = woken => continue,
                }
                let now = owner.cfg.clock.now();
                let decision = entry.agg().handle_timeout(now, seq);
                if let Some(d) = decision {
                    if d.forced {
                        tracing::warn!(session = %entry.rid, "replaced-callback timed out: closing");
                    }
                    owner.host.close(entry.rid, DisconnectReason::Replaced);
                    return;
                }
            }
        });
    }
}
