//! Status subscribers (EG-13, EG-16.24): bounded buffers that coalesce to the latest status per
//! source when full. Publishing never waits and never slows message processing; a slow subscriber
//! is never cut off.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::sync::Mutex;
use crate::sync::atomic::{AtomicU64, Ordering};

/// One status change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusEvent {
    /// Where the status comes from (an actor, a Spot, a peer, "shutdown", ...).
    pub source: String,
    /// The latest status of that source.
    pub status: String,
}

struct SubBuf {
    fifo: VecDeque<StatusEvent>,
    coalesced: HashMap<String, String>,
    order: VecDeque<String>,
}

struct SubShared {
    capacity: usize,
    buf: Mutex<SubBuf>,
    notify: tokio::sync::Notify,
    coalesced_total: AtomicU64,
}

/// The publishing side, shared by the runtime's domains.
#[derive(Default)]
pub struct StatusBus {
    subs: Mutex<Vec<Arc<SubShared>>>,
}

impl StatusBus {
    /// A bus with no subscribers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Subscribe with a bounded buffer of `capacity` events (at least 1).
    pub fn subscribe(&self, capacity: usize) -> StatusSubscriber {
        let shared = Arc::new(SubShared {
            capacity: capacity.max(1),
            buf: Mutex::new(SubBuf {
                fifo: VecDeque::new(),
                coalesced: HashMap::new(),
                order: VecDeque::new(),
            }),
            notify: tokio::sync::Notify::new(),
            coalesced_total: AtomicU64::new(0),
        });
        self.subs.lock().unwrap().push(shared.clone());
        StatusSubscriber { shared }
    }

    /// Publish a status; never waits on a subscriber. When a subscriber's buffer is full the event
    /// replaces that source's pending status (latest wins) instead of growing the buffer.
    pub fn publish(&self, source: &str, status: &str) {
        let subs = self.subs.lock().unwrap().clone();
        for s in subs {
            {
                let mut b = s.buf.lock().unwrap();
                if b.fifo.len() < s.capacity && b.coalesced.is_empty() {
                    b.fifo.push_back(StatusEvent {
                        source: source.to_owned(),
                        status: status.to_owned(),
                    });
                } else {
                    // full: latest wins per source; the reader sees these after the buffered
                    // (older) events, so each source's last event read is its latest status
                    s.coalesced_total.fetch_add(1, Ordering::Relaxed);
                    if b.coalesced
                        .insert(source.to_owned(), status.to_owned())
                        .is_none()
                    {
                        b.order.push_back(source.to_owned());
                    }
                }
            }
            s.notify.notify_one();
        }
    }
}

/// A subscriber: reads at its own pace.
pub struct StatusSubscriber {
    shared: Arc<SubShared>,
}

impl StatusSubscriber {
    /// Take the next pending event without waiting.
    pub fn try_recv(&self) -> Option<StatusEvent> {
        let mut b = self.shared.buf.lock().unwrap();
        if let Some(e) = b.fifo.pop_front() {
            return Some(e);
        }
        let source = b.order.pop_front()?;
        let status = b.coalesced.remove(&source)?;
        Some(StatusEvent { source, status })
    }

    /// Wait for the next event.
    pub async fn recv(&self) -> StatusEvent {
        loop {
            let notified = self.shared.notify.notified();
            if let Some(e) = self.try_recv() {
                return e;
            }
            notified.await;
        }
    }

    /// Events merged into an already pending status of their source because the buffer was full.
    pub fn coalesced(&self) -> u64 {
        self.shared.coalesced_total.load(Ordering::Relaxed)
    }

    /// Pending events (buffered plus coalesced sources).
    pub fn pending(&self) -> usize {
        let b = self.shared.buf.lock().unwrap();
        b.fifo.len() + b.order.len()
    }
}
