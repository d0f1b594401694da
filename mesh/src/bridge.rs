//! Tokio ↔ I/O-thread bridge: a crossbeam command channel plus an inproc PAIR doorbell.
//!
//! Invariants: the I/O thread sets `asleep` before it checks the channel and blocks in
//! `zmq::poll`; a submitter pushes first, then rings only if it swapped `asleep` from true.
//! So a command is never left in the channel while the thread sleeps, and a busy thread is
//! never rung (one fence and one plain load per submit on the fast path).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static NEXT_BRIDGE: AtomicU64 = AtomicU64::new(1);

/// Sending half, shared by every tokio-side handle.
pub(crate) struct Bell<C> {
    tx: crossbeam_channel::Sender<C>,
    ring: Mutex<zmq::Socket>,
    asleep: AtomicBool,
}

/// Receiving half, owned by the I/O thread.
pub(crate) struct Door<C> {
    pub(crate) rx: crossbeam_channel::Receiver<C>,
    pub(crate) socket: zmq::Socket,
}

/// The channel was closed (the I/O thread exited).
#[derive(Debug)]
pub(crate) struct Closed;

pub(crate) fn pair<C>(ctx: &zmq::Context) -> Result<(Bell<C>, Door<C>), zmq::Error> {
    let ep = format!(
        "inproc://zlink-mesh-doorbell-{}",
        NEXT_BRIDGE.fetch_add(1, Ordering::Relaxed)
    );
    let door = ctx.socket(zmq::PAIR)?;
    door.set_linger(0)?;
    door.set_rcvhwm(0)?;
    door.bind(&ep)?;
    let ring = ctx.socket(zmq::PAIR)?;
    ring.set_linger(0)?;
    ring.set_sndhwm(16)?;
    ring.connect(&ep)?;
    let (tx, rx) = crossbeam_channel::unbounded();
    Ok((
        Bell {
            tx,
            ring: Mutex::new(ring),
            asleep: AtomicBool::new(false),
        },
        Door { rx, socket: door },
    ))
}

impl<C> Bell<C> {
    /// Submits one command and wakes the I/O thread if it sleeps.
    pub(crate) fn submit(&self, cmd: C) -> Result<(), Closed> {
        self.tx.send(cmd).map_err(|_| Closed)?;
        self.wake();
        Ok(())
    }

    fn wake(&self) {
        // Dekker pairing with `prepare_sleep`: (push; fence; load asleep) here against
        // (store asleep; fence; check channel) there — at least one side sees the other. The
        // plain load keeps the busy path free of a locked read-modify-write per submit.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.asleep.load(Ordering::Relaxed) && self.asleep.swap(false, Ordering::SeqCst) {
            let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
            // EAGAIN means rings are already pending: the thread will wake anyway.
            let _ = ring.send(&[][..], zmq::DONTWAIT);
        }
    }

    /// Called by the I/O thread before blocking. Returns false if commands are waiting (do not
    /// block then).
    pub(crate) fn prepare_sleep(&self) -> bool {
        self.asleep.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        if !self.tx.is_empty() {
            self.asleep.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Called by the I/O thread after waking.
    pub(crate) fn awake(&self) {
        self.asleep.store(false, Ordering::SeqCst);
    }
}

impl<C> Door<C> {
    /// Drains pending doorbell rings.
    pub(crate) fn drain_rings(&self) {
        while self.socket.recv_msg(zmq::DONTWAIT).is_ok() {}
    }
}
