//! A packet turn that may finish on the thread that wakes it.
//!
//! A session packet handler typically awaits one thing — the reply of the relay it sent to the
//! bound actor — and then answers the client. Woken the usual way, the 145 reply crosses from
//! the mesh I/O thread to the lane's task and the answer back to the I/O thread: two thread
//! hand-offs on the latency path of every request. [`InlineTurn`] instead polls the turn once,
//! right where its first wake-up happens when that is a thread outside any tokio runtime (the
//! mesh I/O thread that completed the relay; the poll runs inside the lane runtime's context),
//! so the answer leaves from there; the lane task only learns that the
//! turn ended. The turn still holds the session's lane until it ends (SB-10.1: two callbacks of
//! one session never overlap), and only that first wake-up is taken inline: after it, a turn
//! that waits again is polled by the lane's task as any other.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use crate::runtime::{BoxFuture, HandlerError};
use crate::sync::{Mutex, MutexGuard};

type Out = Result<(), HandlerError>;

struct State {
    /// The turn; `None` while somebody polls it, and after it ended.
    fut: Option<BoxFuture<Out>>,
    /// Its result, until the lane's task takes it.
    out: Option<Out>,
    /// The lane task's waker, once it polled [`Proxy`].
    runtime: Option<Waker>,
    /// The first wake-up may still be taken inline.
    inline: bool,
    /// Woken while somebody polled it.
    woken: bool,
}

/// A turn shared between its inline waker and the lane task's [`Proxy`].
pub(crate) struct InlineTurn {
    state: Mutex<State>,
    rt: tokio::runtime::Handle,
}

impl InlineTurn {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Polls `fut` (a turn found pending) again with the inline waker, on the calling thread
    /// (the lane's, whose runtime is `rt`): `Ok` when it finished, else the future for the turn
    /// to await ([`Proxy`]).
    pub(crate) fn start(mut fut: BoxFuture<Out>, rt: tokio::runtime::Handle) -> Result<Out, Proxy> {
        let turn = Arc::new(InlineTurn {
            state: Mutex::new(State {
                fut: None,
                out: None,
                runtime: None,
                inline: true,
                woken: false,
            }),
            rt,
        });
        let waker = Waker::from(turn.clone());
        if let Poll::Ready(out) = fut.as_mut().poll(&mut Context::from_waker(&waker)) {
            return Ok(out);
        }
        let mut st = turn.lock();
        st.fut = Some(fut);
        if st.woken {
            // Woken during this first poll: the lane's task polls it next.
            st.woken = false;
            st.inline = false;
        }
        drop(st);
        Err(Proxy(turn))
    }
}

impl Wake for InlineTurn {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut st = self.lock();
        if st.out.is_some() {
            return;
        }
        let Some(mut fut) = st.fut.take() else {
            // Being polled: the poller looks again.
            st.woken = true;
            return;
        };
        // Only a plain thread (the mesh I/O thread) polls inline: a tokio worker may be waking
        // us from inside its scheduler, which must not be re-entered.
        if !st.inline || tokio::runtime::Handle::try_current().is_ok() {
            st.inline = false;
            st.fut = Some(fut);
            if let Some(w) = st.runtime.clone() {
                drop(st);
                w.wake();
            }
            return;
        }
        st.inline = false;
        drop(st);
        let polled = {
            let _rt = self.rt.enter();
            let waker = Waker::from(self.clone());
            // A panicking handler must not unwind into the thread that woke it (the mesh I/O
            // thread): it ends the turn as the runtime would (`Panicked`).
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                fut.as_mut().poll(&mut Context::from_waker(&waker))
            }))
        };
        let (fut, out) = match polled {
            Ok(Poll::Ready(out)) => (None, Some(out)),
            Ok(Poll::Pending) => (Some(fut), None),
            Err(_) => {
                drop(fut);
                (None, Some(Err(HandlerError::Panicked)))
            }
        };
        let mut st = self.lock();
        st.fut = fut;
        st.out = out;
        // The lane's task takes over: the result, or polling from now on.
        let w = st.runtime.clone();
        drop(st);
        if let Some(w) = w {
            w.wake();
        }
    }
}

/// The lane task's side of an [`InlineTurn`]: ready once the turn ended, wherever it did.
pub(crate) struct Proxy(Arc<InlineTurn>);

impl Future for Proxy {
    type Output = Out;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Out> {
        let turn = &self.0;
        let mut st = turn.lock();
        if let Some(out) = st.out.take() {
            return Poll::Ready(out);
        }
        st.runtime = Some(cx.waker().clone());
        if st.inline {
            // Not woken yet: its first wake-up polls it inline, then wakes us.
            return Poll::Pending;
        }
        let Some(mut fut) = st.fut.take() else {
            // Polled inline right now: that poll wakes us when done.
            return Poll::Pending;
        };
        st.woken = false;
        drop(st);
        let polled = fut.as_mut().poll(cx);
        let mut st = turn.lock();
        match polled {
            Poll::Ready(out) => Poll::Ready(out),
            Poll::Pending => {
                st.fut = Some(fut);
                if std::mem::take(&mut st.woken) {
                    cx.waker().wake_by_ref();
                }
                Poll::Pending
            }
        }
    }
}

/// The rest of a forwarded relay request ([`crate::session::PacketTurn::Forward`]), after the
/// session's turn ended: waits for the actor's reply and answers the client. It is no session
/// callback (it runs no application code but the forward's reply conversion, a plain `fn`), so
/// it holds no lane: it is polled where it is woken when that is a plain thread (the mesh I/O
/// thread that received the actor's reply: the answer leaves from there), and by a task of
/// its runtime otherwise.
pub(crate) struct Detached {
    fut: Mutex<DetachedState>,
    rt: tokio::runtime::Handle,
}

enum DetachedState {
    /// Waiting for a wake-up.
    Idle(BoxFuture<()>),
    /// Being polled; `true` when woken meanwhile.
    Polling(bool),
    /// Finished, or handed to a task.
    Gone,
}

impl Detached {
    fn lock(&self) -> MutexGuard<'_, DetachedState> {
        self.fut.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Polls `fut` once now, on the calling thread; if it waits, it goes on as described on
    /// [`Detached`]. Returns whether it finished in that first poll.
    pub(crate) fn start(fut: BoxFuture<()>, rt: tokio::runtime::Handle) -> bool {
        let d = Arc::new(Detached {
            fut: Mutex::new(DetachedState::Polling(false)),
            rt,
        });
        d.poll_here(fut)
    }

    /// Polls `fut` on this thread (the state is `Polling`); `true` when it finished.
    fn poll_here(self: &Arc<Self>, mut fut: BoxFuture<()>) -> bool {
        let waker = Waker::from(self.clone());
        // A panic must not unwind into the thread that woke it (the mesh I/O thread); the
        // future's own guards answer the client as it drops.
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            fut.as_mut().poll(&mut Context::from_waker(&waker))
        }));
        let pending = matches!(polled, Ok(Poll::Pending));
        let mut st = self.lock();
        if !pending {
            *st = DetachedState::Gone;
            return true;
        }
        if matches!(*st, DetachedState::Polling(true)) {
            // Woken while polled: its runtime's task goes on with it (never polled in a loop
            // here).
            *st = DetachedState::Gone;
            drop(st);
            self.rt.spawn(fut);
        } else {
            *st = DetachedState::Idle(fut);
        }
        false
    }
}

impl Wake for Detached {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut st = self.lock();
        let fut = match std::mem::replace(&mut *st, DetachedState::Gone) {
            DetachedState::Idle(fut) => fut,
            DetachedState::Polling(_) => {
                *st = DetachedState::Polling(true);
                return;
            }
            DetachedState::Gone => return,
        };
        // Only a plain thread (the mesh I/O thread) polls here: a tokio worker may be waking
        // us from inside its scheduler, which must not be re-entered.
        if tokio::runtime::Handle::try_current().is_ok() {
            drop(st);
            self.rt.spawn(fut);
            return;
        }
        *st = DetachedState::Polling(false);
        drop(st);
        let _rt = self.rt.enter();
        self.poll_here(fut);
    }
}
