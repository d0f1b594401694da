//! The push channel of a `MeshClient`: pushes cross from the I/O thread to the application in
//! batches, the pushes not yet taken bounded by `ClientConfig::push_capacity`.

use super::*;

/// Most pushes handed to the application in one batch (one wake-up).
pub(super) const PUSH_BATCH: usize = 64;

/// I/O-thread side of the push channel: pushes cross in batches (one wake-up of the receiving
/// task per batch or read pass, as a node's inbound channel does), and the number of pushes
/// not yet taken by the application — in the channel or in the batch being filled — is
/// bounded by `ClientConfig::push_capacity`.
pub(super) struct PushSender {
    pub(super) tx: mpsc::UnboundedSender<Vec<Push>>,
    /// Pushes handed over and not yet taken (the receiver subtracts each one it returns).
    pub(super) queued: Arc<AtomicUsize>,
    /// Set when a push found no room: the receiver wakes the I/O thread once half the
    /// capacity is free again (hysteresis, as the outbound budget wakes its senders).
    pub(super) waiting: Arc<AtomicBool>,
    pub(super) capacity: usize,
    /// Pushes this side may still add before it must look at `queued` again.
    pub(super) room: usize,
    pub(super) batch: Vec<Push>,
}

impl PushSender {
    /// Adds a push to the current batch, or gives it back when the application holds
    /// `capacity` pushes it has not taken. With no receiver left the push is dropped.
    pub(super) fn try_push(&mut self, p: Push) -> Result<(), Push> {
        if self.tx.is_closed() {
            return Ok(());
        }
        if self.room == 0 {
            let queued = self.queued.load(Ordering::Acquire) + self.batch.len();
            self.room = self.capacity.saturating_sub(queued);
            if self.room == 0 {
                self.waiting.store(true, Ordering::SeqCst);
                return Err(p);
            }
        }
        self.room -= 1;
        self.batch.push(p);
        if self.batch.len() >= PUSH_BATCH {
            self.flush();
        }
        Ok(())
    }

    /// Hands the current batch over (one wake-up).
    pub(super) fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(PUSH_BATCH));
        self.queued.fetch_add(batch.len(), Ordering::AcqRel);
        let _ = self.tx.send(batch);
    }
}

/// Application side of the push channel (see [`PushSender`]).
pub(super) struct PushReceiver {
    pub(super) rx: mpsc::UnboundedReceiver<Vec<Push>>,
    pub(super) current: std::vec::IntoIter<Push>,
    pub(super) queued: Arc<AtomicUsize>,
    pub(super) waiting: Arc<AtomicBool>,
    pub(super) capacity: usize,
    pub(super) shared: Arc<ClientShared>,
}

impl PushReceiver {
    pub(super) async fn recv(&mut self) -> Option<Push> {
        loop {
            if let Some(p) = self.current.next() {
                return Some(self.taken(p));
            }
            self.current = self.rx.recv().await?.into_iter();
        }
    }

    /// A push already handed over, without waiting.
    pub(super) fn try_recv(&mut self) -> Option<Push> {
        loop {
            if let Some(p) = self.current.next() {
                return Some(self.taken(p));
            }
            self.current = self.rx.try_recv().ok()?.into_iter();
        }
    }

    /// `p` taken: room for one more push on the I/O thread; once half the capacity is free, a
    /// stalled I/O thread is woken (it also looks again every millisecond).
    fn taken(&self, p: Push) -> Push {
        let left = self.queued.fetch_sub(1, Ordering::AcqRel) - 1;
        if left <= self.capacity / 2
            && self.waiting.load(Ordering::Relaxed)
            && self.waiting.swap(false, Ordering::SeqCst)
        {
            let _ = self.shared.bell.submit(Cmd::Resume);
        }
        p
    }
}
