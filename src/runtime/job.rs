//! One queued record's work: a `FnOnce(TurnEnv) -> Handled<()>` stored *inline* when it is small
//! (a typed message plus at most a reply sender: the common `tell`/`ask` record), boxed otherwise.
//!
//! Why: a `Box<dyn FnOnce>` per record cost a `malloc` in the sender and a `free` in the drain
//! (about 180 instructions per message, and a cache line handed from core to core per record;
//! with up to 1,024 records in flight per lane the allocator's thread cache cannot recycle them).
//! An inline [`Job`] lives in the lane's FIFO slot itself, so a record is stored exactly once, in
//! its actor's own queue (EG-2.1), and the FIFO's memory is reused.
//!
//! Safety argument (the only `unsafe` of the runtime's hot path):
//! * a closure is stored inline only if its size and alignment fit [`Inline`]; otherwise the
//!   inline storage holds a `Box<F>` (which always fits);
//! * the storage is written once in [`Job::new`] and read (moved out) at most once: either by
//!   [`Job::run`] (which forgets the `Job`, so its `Drop` does not run) or by `Drop`;
//! * the closure is `Send`, so the `Job` is `Send`; it is never shared: `Job` is `!Sync` (a
//!   `PhantomData<Cell<()>>` marker, since the plain `MaybeUninit` storage alone would be `Sync`
//!   whatever the closure is);
//! * a closure that panics while running was already moved out of the storage (`ptr::read`), so
//!   unwinding drops it once, and the `Job` itself is forgotten before the call.
//!
//! * a [`Capturable`] record (a queued send: the message is the work) is stored the same way and
//!   has a third exit, [`Job::into_captured`], which moves it out once and forgets the `Job`;
//!   its type is checked ([`Job::captures`]) before it is taken.
//!
//! Every drop path is exercised by the unit tests below, inline and boxed: dropped unrun, run to
//! completion, panicking while running, moved through a FIFO. They pass under Miri (no undefined
//! behaviour): `MIRIFLAGS="-Zmiri-disable-isolation -Zmiri-ignore-leaks" cargo +nightly miri test
//! -p zlink --lib runtime::job` (isolation off: the runtime the run test builds reads
//! `/proc`; leaks ignored: that runtime's worker threads outlive the test). Not in CI: it needs
//! a nightly toolchain with the `miri` component.

use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit};

use super::driver::TurnEnv;
use super::handled::Handled;
use super::lane::LaneHandle;

/// Inline storage: two words, word-aligned (a `u64` message plus a reply sender fits; a queued
/// record is then 32 bytes, two per cache line).
type Inline = [usize; 2];

/// Moves a captured record out of a job's storage.
type Take = unsafe fn(*mut Inline) -> Box<dyn std::any::Any + Send>;

struct VTable {
    /// Move the closure out of the storage and call it.
    call: unsafe fn(*mut Inline, TurnEnv, &LaneHandle) -> Handled<()>,
    /// Drop the closure in the storage without calling it.
    drop: unsafe fn(*mut Inline),
    /// Move a [`Capturable`] record out of the storage without running it (relocation's
    /// capture); `None` for closures.
    take: Option<Take>,
    /// The type of a [`Capturable`] record; `None` for closures.
    record: Option<fn() -> std::any::TypeId>,
}

/// A record whose work is data (a message), not a closure: it runs like any job, and a
/// relocation can take it back out unrun ([`Job::into_captured`]) to ship it elsewhere.
pub(crate) trait Capturable: Send + Sized + 'static {
    /// Run the record in a turn of `lane`.
    fn run(self, env: TurnEnv, lane: &LaneHandle) -> Handled<()>;
}

struct DirectCap<T>(PhantomData<T>);
struct BoxedCap<T>(PhantomData<T>);

impl<T: Capturable> DirectCap<T> {
    const VTABLE: VTable = VTable {
        call: Self::call,
        drop: Self::drop,
        take: Some(Self::take),
        record: Some(std::any::TypeId::of::<T>),
    };
    unsafe fn call(p: *mut Inline, env: TurnEnv, lane: &LaneHandle) -> Handled<()> {
        // SAFETY: `p` holds an initialised `T` (written by `Job::capturable`), read once.
        let t = unsafe { std::ptr::read(p.cast::<T>()) };
        t.run(env, lane)
    }
    unsafe fn drop(p: *mut Inline) {
        // SAFETY: as above; dropped exactly once, never read afterwards.
        unsafe { std::ptr::drop_in_place(p.cast::<T>()) }
    }
    unsafe fn take(p: *mut Inline) -> Box<dyn std::any::Any + Send> {
        // SAFETY: as above; read once, the `Job` is forgotten by the caller.
        Box::new(unsafe { std::ptr::read(p.cast::<T>()) })
    }
}

impl<T: Capturable> BoxedCap<T> {
    const VTABLE: VTable = VTable {
        call: Self::call,
        drop: Self::drop,
        take: Some(Self::take),
        record: Some(std::any::TypeId::of::<T>),
    };
    unsafe fn call(p: *mut Inline, env: TurnEnv, lane: &LaneHandle) -> Handled<()> {
        // SAFETY: `p` holds an initialised `Box<T>`, read exactly once.
        let t = unsafe { std::ptr::read(p.cast::<Box<T>>()) };
        (*t).run(env, lane)
    }
    unsafe fn drop(p: *mut Inline) {
        // SAFETY: as above.
        unsafe { std::ptr::drop_in_place(p.cast::<Box<T>>()) }
    }
    unsafe fn take(p: *mut Inline) -> Box<dyn std::any::Any + Send> {
        // SAFETY: as above.
        let t: Box<T> = unsafe { std::ptr::read(p.cast::<Box<T>>()) };
        t
    }
}

struct Direct<F>(PhantomData<F>);
struct Boxed<F>(PhantomData<F>);

impl<F: FnOnce(TurnEnv, &LaneHandle) -> Handled<()> + Send + 'static> Direct<F> {
    const VTABLE: VTable = VTable {
        call: Self::call,
        drop: Self::drop,
        take: None,
        record: None,
    };
    unsafe fn call(p: *mut Inline, env: TurnEnv, lane: &LaneHandle) -> Handled<()> {
        // SAFETY: `p` holds an initialised `F` (written by `Job::new`), read exactly once.
        let f = unsafe { std::ptr::read(p.cast::<F>()) };
        f(env, lane)
    }
    unsafe fn drop(p: *mut Inline) {
        // SAFETY: as above; dropped exactly once, never called afterwards.
        unsafe { std::ptr::drop_in_place(p.cast::<F>()) }
    }
}

impl<F: FnOnce(TurnEnv, &LaneHandle) -> Handled<()> + Send + 'static> Boxed<F> {
    const VTABLE: VTable = VTable {
        call: Self::call,
        drop: Self::drop,
        take: None,
        record: None,
    };
    unsafe fn call(p: *mut Inline, env: TurnEnv, lane: &LaneHandle) -> Handled<()> {
        // SAFETY: `p` holds an initialised `Box<F>`, read exactly once.
        let f = unsafe { std::ptr::read(p.cast::<Box<F>>()) };
        f(env, lane)
    }
    unsafe fn drop(p: *mut Inline) {
        // SAFETY: as above.
        unsafe { std::ptr::drop_in_place(p.cast::<Box<F>>()) }
    }
}

/// The work of one record, run once in its turn.
pub(crate) struct Job {
    storage: MaybeUninit<Inline>,
    vtable: &'static VTable,
    /// `!Sync`: the closure inside may be `!Sync`.
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

// SAFETY: a `Job` only ever holds an `F: Send` (inline or boxed) and gives no shared access to it.
unsafe impl Send for Job {}

impl Job {
    /// Store `f`: inline when it fits (no allocation), boxed otherwise.
    pub fn new<F>(f: F) -> Job
    where
        F: FnOnce(TurnEnv) -> Handled<()> + Send + 'static,
    {
        Job::with_lane(move |env, _lane: &LaneHandle| f(env))
    }

    /// Like [`Job::new`], for work that also borrows the lane running it (held by the drain for
    /// the whole call: an actor's handler is used in place, without a reference-count update).
    pub fn with_lane<F>(f: F) -> Job
    where
        F: FnOnce(TurnEnv, &LaneHandle) -> Handled<()> + Send + 'static,
    {
        // SAFETY: `Direct<F>` and `Boxed<F>` are the vtables of `F` inline and boxed.
        unsafe { Job::store(f, &Direct::<F>::VTABLE, &Boxed::<F>::VTABLE) }
    }

    /// Store the record `t`: inline when it fits, boxed otherwise; unlike a closure it can be
    /// taken back out unrun ([`Job::into_captured`]).
    pub fn capturable<T: Capturable>(t: T) -> Job {
        // SAFETY: `DirectCap<T>` and `BoxedCap<T>` are the vtables of `T` inline and boxed.
        unsafe { Job::store(t, &DirectCap::<T>::VTABLE, &BoxedCap::<T>::VTABLE) }
    }

    /// Store `t` inline with the vtable `direct` when it fits, else boxed with `boxed`.
    ///
    /// # Safety
    /// `direct` must read a `T` from the storage and `boxed` a `Box<T>` (`Direct`/`Boxed` of a
    /// closure, `DirectCap`/`BoxedCap` of a record).
    #[inline(always)]
    unsafe fn store<T>(t: T, direct: &'static VTable, boxed: &'static VTable) -> Job {
        let mut storage = MaybeUninit::<Inline>::uninit();
        let fits = size_of::<T>() <= size_of::<Inline>() && align_of::<T>() <= align_of::<Inline>();
        let vtable = if fits {
            // SAFETY: size and alignment checked just above.
            unsafe { storage.as_mut_ptr().cast::<T>().write(t) };
            direct
        } else {
            // SAFETY: a `Box<T>` is one pointer: it always fits the word-aligned storage.
            unsafe { storage.as_mut_ptr().cast::<Box<T>>().write(Box::new(t)) };
            boxed
        };
        Job {
            storage,
            vtable,
            _not_sync: PhantomData,
        }
    }

    /// The [`Capturable`] record inside, unrun (boxed as `Any`: downcast it to its type); a
    /// closure job is handed back.
    pub fn into_captured(self) -> Result<Box<dyn std::any::Any + Send>, Job> {
        let Some(take) = self.vtable.take else {
            return Err(self);
        };
        let mut this = ManuallyDrop::new(self);
        // SAFETY: the storage is initialised and `this` is never dropped, so it is read once.
        Ok(unsafe { take(this.storage.as_mut_ptr()) })
    }

    /// Whether this job is a [`Capturable`] record of type `T`.
    pub fn captures<T: 'static>(&self) -> bool {
        self.vtable
            .record
            .is_some_and(|id| id() == std::any::TypeId::of::<T>())
    }

    /// Run the work (consumes it) in a turn of `lane`.
    pub fn run(self, env: TurnEnv, lane: &LaneHandle) -> Handled<()> {
        let mut this = ManuallyDrop::new(self);
        let call = this.vtable.call;
        // SAFETY: the storage is initialised and `this` is never dropped, so it is read once.
        unsafe { call(this.storage.as_mut_ptr(), env, lane) }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // SAFETY: the storage is initialised (a `Job` that ran was forgotten, see `run`).
        unsafe { (self.vtable.drop)(self.storage.as_mut_ptr()) }
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Count(Arc<AtomicUsize>);
    impl Drop for Count {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    // An unrun job drops its captures exactly once, inline or boxed.
    #[test]
    fn dropped_job_drops_captures_once() {
        let n = Arc::new(AtomicUsize::new(0));
        let small = Count(n.clone());
        drop(Job::new(move |_env| {
            let _k = &small;
            Handled::ok(())
        }));
        let big = (Count(n.clone()), [0u64; 16]);
        drop(Job::new(move |_env| {
            let _k = &big;
            Handled::ok(())
        }));
        assert_eq!(n.load(Ordering::SeqCst), 2);
    }

    fn env() -> (TurnEnv, Arc<LaneHandle>) {
        let lane = crate::runtime::driver::test_lane();
        (
            TurnEnv {
                lane: lane.clone(),
                invocation: 1,
                class: crate::runtime::core::LaneClass::Application,
                stamp: crate::runtime::CycleStamp::NONE,
            },
            lane,
        )
    }

    // A job that runs drops its captures exactly once (inline and boxed), whether it returns or
    // panics; jobs moved through a FIFO keep their captures until run or dropped.
    #[test]
    fn run_and_panicking_jobs_drop_captures_once() {
        let n = Arc::new(AtomicUsize::new(0));
        let (e, lane) = env();
        let small = Count(n.clone());
        let r = Job::new(move |_env| {
            let _k = &small;
            Handled::ok(())
        })
        .run(e.clone(), &lane);
        assert!(matches!(r, Handled::Now(Ok(()))));
        assert_eq!(n.load(Ordering::SeqCst), 1);
        let big = (Count(n.clone()), [0u64; 16]);
        let _ = Job::new(move |_env| {
            let _k = &big;
            Handled::ok(())
        })
        .run(e.clone(), &lane);
        assert_eq!(n.load(Ordering::SeqCst), 2);
        for boxed in [false, true] {
            let c = Count(n.clone());
            let pad = [0u64; 16];
            let job = if boxed {
                Job::new(move |_env| {
                    let _k = (&c, &pad);
                    panic!("handler panicked")
                })
            } else {
                Job::new(move |_env| {
                    let _k = &c;
                    panic!("handler panicked")
                })
            };
            let (e, lane) = (e.clone(), lane.clone());
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                let _ = job.run(e, &lane);
            }));
            assert!(caught.is_err());
        }
        assert_eq!(n.load(Ordering::SeqCst), 4);
        let mut fifo = std::collections::VecDeque::new();
        for _ in 0..10 {
            let c = Count(n.clone());
            fifo.push_back(Job::new(move |_env| {
                let _k = &c;
                Handled::ok(())
            }));
        }
        let first = fifo.pop_front().unwrap();
        let _ = first.run(e, &lane);
        assert_eq!(n.load(Ordering::SeqCst), 5);
        drop(fifo);
        assert_eq!(n.load(Ordering::SeqCst), 14);
        lane.remove();
    }

    struct Rec<T>(T, Arc<AtomicUsize>);
    impl<T: Send + 'static> Capturable for Rec<T> {
        fn run(self, _env: TurnEnv, _lane: &LaneHandle) -> Handled<()> {
            self.1.fetch_add(100, Ordering::SeqCst);
            Handled::ok(())
        }
    }

    // A capturable record, inline or boxed: run once, dropped once, or taken back out unrun
    // exactly once (its value intact); a closure job is never taken.
    #[test]
    fn capturable_records_run_drop_or_come_back_once() {
        let n = Arc::new(AtomicUsize::new(0));
        let (e, lane) = env();
        // small (inline) and big (boxed)
        let _ = Job::capturable(Rec(Count(n.clone()), n.clone())).run(e.clone(), &lane);
        assert_eq!(n.load(Ordering::SeqCst), 101);
        let _ =
            Job::capturable(Rec((Count(n.clone()), [7u64; 16]), n.clone())).run(e.clone(), &lane);
        assert_eq!(n.load(Ordering::SeqCst), 202);
        drop(Job::capturable(Rec(Count(n.clone()), n.clone())));
        drop(Job::capturable(Rec(
            (Count(n.clone()), [7u64; 16]),
            n.clone(),
        )));
        assert_eq!(n.load(Ordering::SeqCst), 204);
        let small = Job::capturable(Rec(5u32, n.clone()))
            .into_captured()
            .ok()
            .unwrap();
        assert_eq!(small.downcast::<Rec<u32>>().ok().unwrap().0, 5);
        let big = Job::capturable(Rec([9u64; 16], n.clone()))
            .into_captured()
            .ok()
            .unwrap();
        assert_eq!(big.downcast::<Rec<[u64; 16]>>().ok().unwrap().0, [9u64; 16]);
        let taken = Job::capturable(Rec(Count(n.clone()), n.clone()))
            .into_captured()
            .ok()
            .unwrap();
        assert_eq!(n.load(Ordering::SeqCst), 204, "taken, not run, not dropped");
        drop(taken);
        assert_eq!(n.load(Ordering::SeqCst), 205);
        let closure = Job::new(|_env| Handled::ok(()));
        assert!(!closure.captures::<Rec<u32>>());
        assert!(closure.into_captured().is_err());
        let job = Job::capturable(Rec(5u32, n.clone()));
        assert!(job.captures::<Rec<u32>>() && !job.captures::<Rec<u64>>());
        lane.remove();
    }
}
