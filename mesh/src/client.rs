//! ClientServer client: one DEALER connection to a node's client ROUTER carrying requests,
//! one-way DATA, replies and server pushes, on its own I/O thread.
//!
//! Order on the connection is kept: a reply that arrives after pushes the application has not
//! taken yet waits behind them (EG-4; the push channel is bounded and the I/O thread stops
//! reading while it is full). If the request's deadline passes first, the request ends with
//! `DeadlineExceeded` and the late reply is counted, never a second terminal (EG-16.26).
//! Liveness: the client sends Ping every `ping_interval` and reports `server_alive` from the
//! node's answers; TCP keepalive closes dead TCP connections. No ZMTP heartbeats on this
//! connection: a backpressured connection (a full application queue on the node, untaken
//! pushes here) is not read by libzmq, and a heartbeat timeout would cut it and lose what
//! libzmq had buffered.
//!
//! Session end: when the node ends the session (timeout, `MeshNode::close_client`, node
//! shutdown) it sends a 149 Disconnect with a reason. The client then stops its I/O thread
//! (it sends nothing more, not even a Disconnect), records the reason
//! ([`MeshClient::close_reason`], [`MeshClient::closed`]), ends the requests in flight with
//! [`RequestError::SessionClosed`] and fails later requests and sends at once with it
//! ([`SendError::SessionClosed`]); the pushes received before the Disconnect stay readable,
//! then `recv_push` returns `None`. A new session needs a new `MeshClient`.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, watch};

use crate::bridge::{Bell, Door};
use crate::budget::{Budget, OutboundBudget};
use zlink_wire::{Disconnect, DisconnectReason, Limits};

use crate::codec::{self, Class, Parts, Record};
use crate::config::{Batching, Liveness, MeshConfig, TransportLimits};
use crate::conn::{self, Conn, Lane, Out, SendOutcome, Transport, Verdict};
use crate::correlation::{Correlations, ReplyOutcome};
use crate::counters::{Counters, DropReason, TransportEvent};
use crate::engine::{
    Waiter, close_all, configure_network_socket, ended_before_transmission, expire, recv_multipart,
};
use crate::error::{ConfigError, RequestError, SendError};
use crate::memo::DecodeMemo;
use crate::node::Response;
use crate::tap::{TapDirection, WireTap};
use crate::types::{Deadline, DispatchKey, LinkKind, MeshName, NodeRid};

/// Client configuration.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The node's client endpoint (`tcp://127.0.0.1:port`).
    pub endpoint: String,
    /// libzmq limits.
    pub transport: TransportLimits,
    /// Heartbeat/ping timing.
    pub liveness: Liveness,
    /// Outbound admission budget.
    pub budget: OutboundBudget,
    /// Admission wait before `DeadlineExceeded`.
    pub send_timeout: Duration,
    /// Capacity of the push channel.
    pub push_capacity: usize,
    /// Optional wire tap.
    pub tap: Option<WireTap>,
    /// Natural batching of requests and one-way DATA (as `MeshConfig::batching` for a node):
    /// records queued in one pass of the client's I/O thread go out as one 139 batch frame
    /// (a lone record alone; nothing waits for a batch to fill). `max_records` ≤ 1 = off.
    pub batching: Batching,
    /// How many times the client's I/O thread yields the CPU, watching for work, before it
    /// sleeps in `zmq::poll` (as `MeshConfig::io_spin_yields`), at most 200 µs. Default 0
    /// (never spin): measured, spinning took ≈ 5–10 µs off a request's p50 on an idle 2-core
    /// VM, but under CPU contention one yield can last a whole time slice, during which a
    /// submitted command does not ring the (spinning) thread awake — p99 rose to ≈ 12 ms with
    /// two CPU hogs. For clients on dedicated cores.
    pub io_spin_yields: usize,
}

impl ClientConfig {
    /// Defaults for `endpoint`.
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            transport: TransportLimits::default(),
            liveness: Liveness::default(),
            budget: OutboundBudget::default(),
            send_timeout: Duration::from_secs(5),
            push_capacity: 1024,
            tap: None,
            batching: Batching::default(),
            io_spin_yields: 0,
        }
    }
}

/// A server push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Push {
    /// Dispatch key.
    pub key: DispatchKey,
    /// Payload.
    pub payload: Option<Bytes>,
}

/// Most pushes handed to the application in one batch (one wake-up).
const PUSH_BATCH: usize = 64;

/// I/O-thread side of the push channel: pushes cross in batches (one wake-up of the receiving
/// task per batch or read pass, as a node's inbound channel does), and the number of pushes
/// not yet taken by the application — in the channel or in the batch being filled — is
/// bounded by `ClientConfig::push_capacity`.
struct PushSender {
    tx: mpsc::UnboundedSender<Vec<Push>>,
    /// Pushes handed over and not yet taken (the receiver subtracts each one it returns).
    queued: Arc<AtomicUsize>,
    /// Set when a push found no room: the receiver wakes the I/O thread once half the
    /// capacity is free again (hysteresis, as the outbound budget wakes its senders).
    waiting: Arc<AtomicBool>,
    capacity: usize,
    /// Pushes this side may still add before it must look at `queued` again.
    room: usize,
    batch: Vec<Push>,
}

impl PushSender {
    /// Adds a push to the current batch, or gives it back when the application holds
    /// `capacity` pushes it has not taken. With no receiver left the push is dropped.
    fn try_push(&mut self, p: Push) -> Result<(), Push> {
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
    fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(PUSH_BATCH));
        self.queued.fetch_add(batch.len(), Ordering::AcqRel);
        let _ = self.tx.send(batch);
    }
}

/// Application side of the push channel (see [`PushSender`]).
struct PushReceiver {
    rx: mpsc::UnboundedReceiver<Vec<Push>>,
    current: std::vec::IntoIter<Push>,
    queued: Arc<AtomicUsize>,
    waiting: Arc<AtomicBool>,
    capacity: usize,
    shared: Arc<ClientShared>,
}

impl PushReceiver {
    async fn recv(&mut self) -> Option<Push> {
        loop {
            if let Some(p) = self.current.next() {
                // Taken: room for one more push on the I/O thread; once half the capacity is
                // free, a stalled I/O thread is woken (it also looks again every millisecond).
                let left = self.queued.fetch_sub(1, Ordering::AcqRel) - 1;
                if left <= self.capacity / 2
                    && self.waiting.load(Ordering::Relaxed)
                    && self.waiting.swap(false, Ordering::SeqCst)
                {
                    let _ = self.shared.bell.submit(Cmd::Resume);
                }
                return Some(p);
            }
            self.current = self.rx.recv().await?.into_iter();
        }
    }
}

/// Most records [`MeshClient::send_many`] admits and hands over at once.
pub const SEND_MANY_CHUNK: usize = 256;

/// [`MeshClient::send_many`] failed after `sent` records were handed over (they go out); the
/// record that failed and those after it were not sent.
#[derive(Debug, thiserror::Error)]
#[error("send_many: {error} (after {sent} records sent)")]
pub struct SendManyError {
    /// Records handed over before the failure, in order (the first `sent` payloads).
    pub sent: usize,
    /// Why the next record could not be sent (as [`MeshClient::send`] fails).
    pub error: SendError,
}

/// Longest the client's I/O thread spins (yields) watching for work before it sleeps.
const SPIN_LIMIT: Duration = Duration::from_micros(200);

/// What the tokio side rings the I/O thread for. Records and cancels do not travel here: they
/// go through the [`Outbox`], and only the first one put into an empty outbox rings.
enum Cmd {
    /// The outbox went from empty to non-empty: take it.
    Outbox,
    /// Room in the push channel again (see `PushReceiver::recv`): only wakes the I/O thread.
    Resume,
    Close,
}

/// A request among the records of the [`Outbox`]: registered in the correlation table when the
/// outbox is taken, before anything of that take is transmitted.
struct NewRequest {
    corr: u64,
    deadline: Instant,
    waiter: Waiter,
}

/// The hand-off from the senders (tokio side) to the client's I/O thread: the admitted
/// records in submission order, the requests among them and the cancels, taken once per
/// pass of the I/O thread (one lock per pass, however many records; the records only while
/// the send queue is short, see [`ClientIo::take_outbox`]). A sender locks it once
/// per record and rings the I/O thread only when it found the outbox empty (the I/O thread
/// takes it on every pass, so a non-empty outbox always has a ring on its way, see
/// [`MeshClient::hand_over`]).
#[derive(Default)]
struct Outbox {
    /// Requests and one-way DATA, in order, each with its reservation of the budget.
    queue: std::collections::VecDeque<Out>,
    /// The requests among `queue`, in order.
    requests: Vec<NewRequest>,
    /// Cancelled requests (each behind its request: a request is in the outbox, or taken
    /// already, before its cancel can exist).
    cancels: Vec<u64>,
    /// The I/O thread is gone: nothing is accepted any more.
    closed: bool,
}

impl Outbox {
    /// Nothing waits: a record put in now must ring.
    fn is_empty(&self) -> bool {
        self.queue.is_empty() && !self.registers()
    }

    /// Requests or cancels wait (taken on every pass; a new one rings unless one already
    /// waits, so none waits behind records the I/O thread leaves here, see
    /// [`ClientIo::take_outbox`]).
    fn registers(&self) -> bool {
        !self.requests.is_empty() || !self.cancels.is_empty()
    }
}

struct ClientShared {
    bell: Bell<Cmd>,
    /// Records, requests and cancels on their way to the I/O thread (see [`Outbox`]).
    outbox: Mutex<Outbox>,
    /// The outbox holds something: set under its lock by whoever leaves it non-empty, read
    /// without the lock by the I/O thread, which skips the lock while it is false (a record
    /// put into an outbox seen empty rings, so the thread looks again).
    outbox_full: AtomicBool,
    /// The outbound admission budget (also the connection core's, [`Conn::budget`]).
    budget: Arc<Budget>,
    counters: Counters,
    next_corr: AtomicU64,
    send_timeout: Duration,
    max_message_size: usize,
    /// When the client started (base of `last_rx_ms`).
    epoch: Instant,
    /// Milliseconds since `epoch` of the last record received from the node (0 = never).
    last_rx_ms: AtomicU64,
    peer_timeout: Duration,
    /// Code of the reason the node closed the session with (0 = open); set before `close_tx`.
    close_code: AtomicU8,
    /// The same reason, for [`MeshClient::closed`] to wait on.
    close_tx: watch::Sender<Option<DisconnectReason>>,
}

impl ClientShared {
    fn close_reason(&self) -> Option<DisconnectReason> {
        match self.close_code.load(Ordering::Acquire) {
            0 => None,
            c => DisconnectReason::from_code(c),
        }
    }

    /// The error of a request whose I/O thread is gone: the session's close, if the node
    /// closed it, else the client's own close.
    fn request_gone(&self) -> RequestError {
        match self.close_reason() {
            Some(r) => RequestError::SessionClosed(r),
            None => RequestError::Closed,
        }
    }

    fn send_gone(&self) -> SendError {
        match self.close_reason() {
            Some(r) => SendError::SessionClosed(r),
            None => SendError::Closed,
        }
    }

    fn outbox(&self) -> MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands an admitted record (and, for a request, its registration) to the I/O thread,
    /// ringing it if the outbox was empty. False when the I/O thread is gone: nothing was
    /// queued and the record's reservation is released.
    ///
    /// No hand-over is lost: the I/O thread takes the outbox's requests and cancels on every
    /// pass, and its records behind what its send queue holds (all of them while that holds
    /// less than a batch frame, else those that complete its last run, the rest once it
    /// drained); the sender that finds the outbox empty (for a request: without requests and
    /// cancels) rings after putting its record in; the I/O thread does not sleep with a ring
    /// pending ([`Bell`]), nor while records wait in its send queue.
    fn hand_over(&self, out: Out, request: Option<NewRequest>) -> bool {
        let mut outbox = self.outbox();
        if outbox.closed {
            drop(outbox);
            conn::release(&self.budget, &out);
            return false;
        }
        let ring = match request {
            Some(_) => !outbox.registers(),
            None => outbox.is_empty(),
        };
        outbox.queue.push_back(out);
        if let Some(r) = request {
            outbox.requests.push(r);
        }
        self.outbox_full.store(true, Ordering::Release);
        drop(outbox);
        if ring {
            // Err: the I/O thread just ended; it closes the outbox on its way out and ends
            // what it finds there.
            let _ = self.bell.submit(Cmd::Outbox);
        }
        true
    }

    /// [`ClientShared::hand_over`] for admitted one-way records, in order, under one lock (the
    /// vector is left empty). False when the I/O thread is gone: nothing was queued and the
    /// reservations are released.
    fn hand_over_all(&self, chunk: &mut Vec<Out>) -> bool {
        let mut outbox = self.outbox();
        if outbox.closed {
            drop(outbox);
            for out in chunk.drain(..) {
                conn::release(&self.budget, &out);
            }
            return false;
        }
        let ring = outbox.is_empty();
        outbox.queue.extend(chunk.drain(..));
        self.outbox_full.store(true, Ordering::Release);
        drop(outbox);
        if ring {
            let _ = self.bell.submit(Cmd::Outbox);
        }
        true
    }

    /// Cancels request `corr` (its future was dropped before the terminal), behind the
    /// request in the outbox: a cancelled request is never transmitted (SB-12).
    fn cancel(&self, corr: u64) {
        let mut outbox = self.outbox();
        if outbox.closed {
            return;
        }
        let ring = !outbox.registers();
        outbox.cancels.push(corr);
        self.outbox_full.store(true, Ordering::Release);
        drop(outbox);
        if ring {
            let _ = self.bell.submit(Cmd::Outbox);
        }
    }
}

/// A ClientServer client.
pub struct MeshClient {
    shared: Arc<ClientShared>,
    pushes: tokio::sync::Mutex<PushReceiver>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for MeshClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MeshClient")
    }
}

impl MeshClient {
    /// Connects (libzmq connects in the background and reconnects with bounded backoff).
    /// `ConfigError::InvalidLimit` if `batching.max_records` exceeds
    /// `zlink_wire::MAX_BATCH_RECORDS`.
    pub fn connect(cfg: ClientConfig) -> Result<MeshClient, ConfigError> {
        if cfg.batching.max_records > zlink_wire::MAX_BATCH_RECORDS as usize {
            return Err(ConfigError::InvalidLimit("batching.max_records"));
        }
        let ctx = zmq::Context::new();
        let terr = |what: &str| {
            let what = what.to_string();
            move |source| ConfigError::Transport { what, source }
        };
        let dealer = ctx.socket(zmq::DEALER).map_err(terr("dealer"))?;
        // Reuse the node's socket option set (limits, reconnect backoff; no ZMTP heartbeats).
        let mut mc = MeshConfig::new(
            MeshName::new("client").expect("valid"),
            NodeRid::new("client").expect("valid"),
        );
        mc.transport = cfg.transport;
        mc.liveness = cfg.liveness;
        configure_network_socket(&dealer, &mc, false).map_err(terr("dealer options"))?;
        let mon = crate::engine::monitor(&ctx, &dealer, "client")?;
        dealer.connect(&cfg.endpoint).map_err(terr("connect"))?;
        let (bell, door) = crate::bridge::pair(&ctx).map_err(terr("doorbell"))?;
        let shared = Arc::new(ClientShared {
            bell,
            outbox: Mutex::new(Outbox::default()),
            outbox_full: AtomicBool::new(false),
            budget: Arc::new(Budget::new(cfg.budget)),
            counters: Counters::default(),
            next_corr: AtomicU64::new(1),
            send_timeout: cfg.send_timeout,
            max_message_size: cfg.transport.max_message_size,
            epoch: Instant::now(),
            last_rx_ms: AtomicU64::new(0),
            peer_timeout: cfg.liveness.peer_timeout,
            close_code: AtomicU8::new(0),
            close_tx: watch::Sender::new(None),
        });
        let (push_tx, push_rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let waiting = Arc::new(AtomicBool::new(false));
        let capacity = cfg.push_capacity.max(1);
        let push_tx = PushSender {
            tx: push_tx,
            queued: queued.clone(),
            waiting: waiting.clone(),
            capacity,
            room: 0,
            batch: Vec::with_capacity(PUSH_BATCH),
        };
        let push_rx = PushReceiver {
            rx: push_rx,
            current: Vec::new().into_iter(),
            queued,
            waiting,
            capacity,
            shared: shared.clone(),
        };
        let fds = [
            door.socket.get_fd().map_err(terr("doorbell fd"))?,
            mon.get_fd().map_err(terr("monitor fd"))?,
            dealer.get_fd().map_err(terr("dealer fd"))?,
        ];
        let io = ClientIo {
            dealer,
            mon,
            door,
            fds,
            door_drained: false,
            shared: shared.clone(),
            corr: Correlations::new(),
            pushes: push_tx,
            stalled: None,
            conn: Conn::to_client_port(
                crate::config::InboundWindow::default(),
                shared.budget.clone(),
                Instant::now(),
            ),
            now: Instant::now(),
            ping_interval: cfg.liveness.ping_interval,
            limits: codec::limits(cfg.transport.max_message_size),
            tap: cfg.tap,
            batching: cfg.batching,
            spin: cfg.io_spin_yields,
            spare: std::collections::VecDeque::new(),
            taken_requests: Vec::new(),
            taken_cancels: Vec::new(),
            rest: None,
            memo: DecodeMemo::for_commands(&[zlink_wire::Command::Push]),
            heard: false,
            server_closed: None,
            _ctx: ctx,
        };
        let thread = std::thread::Builder::new()
            .name("zlink-mesh-client".into())
            .spawn(move || io.run())
            .map_err(ConfigError::Thread)?;
        Ok(MeshClient {
            shared,
            pushes: tokio::sync::Mutex::new(push_rx),
            thread: Some(thread),
        })
    }

    /// True while the node answered within the peer timeout (the client pings every
    /// `ping_interval`; any record from the node counts). False before the first answer.
    pub fn server_alive(&self) -> bool {
        let last = self.shared.last_rx_ms.load(Ordering::Acquire);
        if last == 0 {
            return false;
        }
        let now = self.shared.epoch.elapsed().as_millis() as u64;
        now.saturating_sub(last) <= self.shared.peer_timeout.as_millis() as u64
    }

    /// The reason the node closed this client's session with (its 149 Disconnect), or `None`
    /// while the session is open (or the client closed it itself).
    pub fn close_reason(&self) -> Option<DisconnectReason> {
        self.shared.close_reason()
    }

    /// Waits until the node closes this client's session and returns the reason (at once if
    /// it already did). Waits for ever if the node never does.
    pub async fn closed(&self) -> DisconnectReason {
        let mut rx = self.shared.close_tx.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(r) => r.expect("waited for Some"),
            // The sender lives in `self.shared`: not dropped while `self` is borrowed.
            Err(_) => std::future::pending().await,
        }
    }

    /// Counters (late replies, malformed frames …).
    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    fn frames(&self, corr: u64, record: Record, payload: Bytes) -> Result<(Parts, u64), SendError> {
        let frames = codec::encode(&record, corr, Some(payload))
            .map_err(|e| SendError::Encode(e.to_string()))?;
        let total = self.check_size(&frames)?;
        Ok((frames, total))
    }

    /// Bytes of `frames`, or `TooLarge` if a part exceeds the message size limit.
    fn check_size(&self, frames: &Parts) -> Result<u64, SendError> {
        let mut total = 0;
        for f in frames.iter() {
            if f.len() > self.shared.max_message_size {
                return Err(SendError::TooLarge {
                    size: f.len(),
                    max: self.shared.max_message_size,
                });
            }
            total += f.len() as u64;
        }
        Ok(total)
    }

    /// Sends one-way DATA. Fails [`SendError::SessionClosed`] once the node closed the session.
    pub async fn send(&self, key: DispatchKey, payload: Bytes) -> Result<(), SendError> {
        if let Some(r) = self.shared.close_reason() {
            return Err(SendError::SessionClosed(r));
        }
        // The envelope of a one-way record depends only on its key: shared, not encoded again.
        let frames = crate::envelope::one_way_parts(key, payload)?;
        let bytes = self.check_size(&frames)?;
        // The fast path of `reserve`, written out: an async call is not inlined. A send that
        // must wait takes its record into a future on the heap, so this future holds nothing
        // but that across its one await (it is moved whole into the caller's future on every
        // call: a send per packet moved ≈ 200 bytes).
        if !self.shared.budget.try_reserve(bytes) {
            return self.send_waiting(frames, bytes).await;
        }
        self.hand_over_one_way(frames, bytes)
    }

    /// [`MeshClient::send`] when the budget had no room: waits for it (at most the send
    /// timeout), then hands the record over.
    #[inline(never)]
    fn send_waiting(
        &self,
        frames: Parts,
        bytes: u64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), SendError>> + Send + '_>>
    {
        Box::pin(async move {
            self.shared
                .budget
                .reserve_n(1, bytes, self.shared.send_timeout)
                .await
                .map_err(|e| SendError::DeadlineExceeded(e.waited))?;
            self.hand_over_one_way(frames, bytes)
        })
    }

    /// Hands an admitted one-way record to the I/O thread.
    #[inline]
    fn hand_over_one_way(&self, frames: Parts, bytes: u64) -> Result<(), SendError> {
        let out = Out::parts(frames, Some(bytes), 0);
        if self.shared.hand_over(out, None) {
            Ok(())
        } else {
            Err(self.shared.send_gone())
        }
    }

    /// Reserves `n` records of `bytes` in all in the outbound budget, waiting at most the send
    /// timeout. Room in the budget (the common case) is taken without building the waiting
    /// future, which lives on the heap only while a sender waits (the caller's future stays
    /// small: it is moved on every poll chain that awaits it).
    async fn reserve(&self, n: u64, bytes: u64) -> Result<(), SendError> {
        if self.shared.budget.try_reserve_n(n, bytes) {
            return Ok(());
        }
        self.reserve_waiting(n, bytes).await
    }

    /// [`MeshClient::reserve`] when the budget had no room: the waiting future on the heap.
    #[inline(never)]
    async fn reserve_waiting(&self, n: u64, bytes: u64) -> Result<(), SendError> {
        Box::pin(
            self.shared
                .budget
                .reserve_n(n, bytes, self.shared.send_timeout),
        )
        .await
        .map_err(|e| SendError::DeadlineExceeded(e.waited))
    }

    /// Sends one-way DATA records with `key`, one per payload, in order: the same records, on
    /// the same connection and under the same budget, credit and close rules as
    /// [`MeshClient::send`] called once per payload, for a fraction of the cost per record —
    /// the records are admitted to the budget and handed to the I/O thread in chunks of at
    /// most [`SEND_MANY_CHUNK`] (and at most half the budget's message limit): one
    /// reservation, one lock and at most one wake-up of the I/O thread per chunk. For a client
    /// that has many packets at hand at once (a burst, a tick's worth of input, a flood).
    ///
    /// A chunk waits (at most the send timeout) until the budget has room for the whole chunk,
    /// where single sends would trickle in one by one.
    ///
    /// # Errors
    /// As [`MeshClient::send`], with the number of records sent before the failing one
    /// ([`SendManyError::sent`]): those are handed over and go out; the failing one and the
    /// rest of `payloads` are not sent.
    pub async fn send_many<I>(&self, key: DispatchKey, payloads: I) -> Result<(), SendManyError>
    where
        I: IntoIterator<Item = Bytes>,
    {
        let mut sent = 0;
        let fail = |sent, error| SendManyError { sent, error };
        if let Some(r) = self.shared.close_reason() {
            return Err(fail(sent, SendError::SessionClosed(r)));
        }
        // The envelope of a one-way record depends only on its key: encoded once.
        let envelope = crate::envelope::one_way_parts(key, Bytes::new())
            .map_err(|e| fail(sent, e))?[0]
            .clone();
        let limit = self.shared.budget.limit().messages;
        let chunk_len =
            SEND_MANY_CHUNK.min(usize::try_from(limit / 2).unwrap_or(usize::MAX).max(1));
        let mut payloads = payloads.into_iter();
        let mut chunk: Vec<Out> = Vec::new();
        loop {
            // Up to a chunk of records; a payload over the message size ends the chunk and,
            // once the records before it are handed over, the call.
            let (mut bytes, mut error, mut more) = (0, None, false);
            for p in payloads.by_ref() {
                let frames = Parts::new(envelope.clone(), Some(p));
                let b = match self.check_size(&frames) {
                    Ok(b) => b,
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                };
                bytes += b;
                chunk.push(Out::parts(frames, Some(b), 0));
                if chunk.len() >= chunk_len {
                    more = true;
                    break;
                }
            }
            if !chunk.is_empty() {
                let n = chunk.len();
                self.reserve(n as u64, bytes)
                    .await
                    .map_err(|e| fail(sent, e))?;
                if !self.shared.hand_over_all(&mut chunk) {
                    return Err(fail(sent, self.shared.send_gone()));
                }
                sent += n;
            }
            if let Some(e) = error {
                return Err(fail(sent, e));
            }
            if !more {
                return Ok(());
            }
        }
    }

    /// Sends a request with a deadline; exactly one terminal. Fails
    /// [`RequestError::SessionClosed`] once the node closed the session (also a request in
    /// flight at that moment).
    pub async fn request(
        &self,
        key: DispatchKey,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Response, RequestError> {
        if let Some(r) = self.shared.close_reason() {
            return Err(RequestError::SessionClosed(r));
        }
        let deadline = Instant::now() + timeout;
        let corr = self.shared.next_corr.fetch_add(1, Ordering::Relaxed);
        let (frames, bytes) = self.frames(
            corr,
            Record::Request(zlink_wire::Request {
                key,
                deadline: Deadline::from_remaining(timeout),
            }),
            payload,
        )?;
        self.shared
            .budget
            .reserve(bytes, self.shared.send_timeout.min(timeout))
            .await
            .map_err(|e| SendError::DeadlineExceeded(e.waited))?;
        let (tx, rx) = oneshot::channel();
        let out = Out::parts(frames, Some(bytes), corr);
        let request = NewRequest {
            corr,
            deadline,
            waiter: tx,
        };
        if !self.shared.hand_over(out, Some(request)) {
            return Err(self.shared.request_gone());
        }
        struct Guard<'a>(&'a ClientShared, u64, bool);
        impl Drop for Guard<'_> {
            fn drop(&mut self) {
                if self.2 {
                    self.0.cancel(self.1);
                }
            }
        }
        let mut g = Guard(&self.shared, corr, true);
        let r = rx.await;
        g.2 = false;
        r.unwrap_or_else(|_| Err(self.shared.request_gone()))
    }

    /// Receives the next server push (`None` after close, or once the node closed the session
    /// and the pushes received before its Disconnect were taken).
    pub async fn recv_push(&self) -> Option<Push> {
        self.pushes.lock().await.recv().await
    }

    /// Receives a push, waiting at most `timeout`.
    pub async fn recv_push_timeout(&self, timeout: Duration) -> Option<Push> {
        tokio::time::timeout(timeout, self.recv_push())
            .await
            .ok()
            .flatten()
    }

    /// Says Disconnect to the node and stops the I/O thread.
    pub async fn close(mut self) {
        let _ = self.shared.bell.submit(Cmd::Close);
        if let Some(t) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }
}

impl Drop for MeshClient {
    fn drop(&mut self) {
        let _ = self.shared.bell.submit(Cmd::Close);
    }
}

struct ClientIo {
    dealer: zmq::Socket,
    /// Connection events of the DEALER: a lost connection ends the node's session, and with
    /// it the credit it granted.
    mon: zmq::Socket,
    door: Door<Cmd>,
    /// The `ZMQ_FD`s of the doorbell, the monitor and the dealer ([`ClientIo::sleep`]).
    fds: [std::os::fd::RawFd; 3],
    /// The doorbell was last read until EAGAIN (nothing else is done with it): a ring after
    /// that signals its FD.
    door_drained: bool,
    shared: Arc<ClientShared>,
    corr: Correlations<(), Waiter>,
    pushes: PushSender,
    stalled: Option<Push>,
    /// The connection core ([`crate::conn`]), the node's as seen from here: the send queue
    /// (requests and DATA, PAUSED or waiting for the end of the pass to share a batch frame)
    /// with the admission budget, and the credit the node granted (FlowCredit: requests and
    /// DATA go out only within it; none before the node's first grant, which answers the
    /// first Ping). No receive window: what the node sends is bounded by the push channel.
    conn: Conn,
    /// The time of the current pass of the loop: read once per pass (at its start, and again
    /// after a sleep) and used by everything the pass does — ingress, liveness, Pings, request
    /// deadlines at transmission.
    now: Instant,
    /// Mesh Ping interval (the Pings themselves: [`Conn::poll_ping`]).
    ping_interval: Duration,
    tap: Option<WireTap>,
    limits: Limits,
    batching: Batching,
    /// Yields before sleeping (`ClientConfig::io_spin_yields`).
    spin: usize,
    /// Reused buffers of [`ClientIo::take_outbox`]: the outbox's next record queue (empty),
    /// its requests and its cancels.
    spare: std::collections::VecDeque<Out>,
    taken_requests: Vec<NewRequest>,
    taken_cancels: Vec<u64>,
    /// The records of a received batch frame behind a push that found the push channel full
    /// (`stalled`): the frame and the index of the first record not handled yet. Handled, in
    /// order, once the stalled push was taken; nothing is read from the socket before that.
    rest: Option<(zlink_wire::BatchFrame, usize)>,
    /// Decode memo of the last push envelope (see `memo::DecodeMemo`).
    memo: DecodeMemo,
    /// A record from the node was handled in this read pass (liveness, see `read`).
    heard: bool,
    /// The node closed the session (its 149 Disconnect): the I/O thread stops.
    server_closed: Option<DisconnectReason>,
    _ctx: zmq::Context,
}

impl ClientIo {
    fn run(mut self) {
        loop {
            // The pass's one clock read.
            self.now = Instant::now();
            let mut close = false;
            while let Ok(cmd) = self.door.rx.try_recv() {
                match cmd {
                    Cmd::Outbox | Cmd::Resume => {}
                    Cmd::Close => close = true,
                }
            }
            // After the rings: a Close comes behind every record handed over before it.
            self.take_outbox();
            if close {
                // What was admitted before the Close goes out as far as credit and libzmq
                // allow, as it would have in a pass without the Close.
                self.flush();
                break;
            }
            self.read_monitor();
            self.flush();
            if self.stalled.is_some() {
                self.resume();
            }
            let now = self.now;
            if self.stalled.is_some() {
                // Not reading (pushes not taken): silence proves nothing about the node.
                self.heard_now();
            }
            expire(&mut self.corr, now);
            // Until a Ping got through (the first creates the session on the node, which
            // grants the window on it), it is retried on every pass, not once per interval.
            if let Some(ping) = self.conn.poll_ping(now, self.ping_interval) {
                let f = codec::encode_control(Record::Ping(ping));
                if !self.raw_send(&f) {
                    self.conn.ping_again(now);
                }
            }
            let pinged = self.conn.next_ping() > now;
            let mut t = self.conn.next_ping().saturating_duration_since(now);
            if let Some(d) = self.corr.poll_timeout() {
                t = t.min(d.saturating_duration_since(now));
            }
            if self.stalled.is_some() || !self.conn.queue.is_empty() || !pinged {
                t = t.min(Duration::from_millis(1));
            }
            self.pushes.flush();
            // Idle: yield a little before sleeping (a wake-up costs 20-25 µs on small VMs; a
            // reply usually follows a request within that). Work found: poll without sleeping.
            let ms = if self.spin_for_work(t) {
                0
            } else if self.shared.bell.prepare_sleep() {
                t.as_millis().max(1) as i64
            } else {
                0
            };
            // Not sleeping: read the dealer straight away (one receive that ends in EAGAIN
            // if nothing came) instead of a `zmq_poll`, which costs a `poll()` plus one inside
            // libzmq per socket (`ZMQ_EVENTS`). The doorbell rings only a sleeping thread; a
            // ring that lands after a sleep ended is drained by the next sleeping poll.
            let (rd, rs) = if ms == 0 {
                (false, true)
            } else {
                let woke = self.sleep(ms);
                // Slept: what it reads now is a new pass.
                self.now = Instant::now();
                woke
            };
            self.shared.bell.awake();
            if rd {
                self.door.drain_rings();
                self.door_drained = true;
            }
            if rs {
                self.read();
                if self.server_closed.is_some() {
                    break;
                }
            }
        }
        self.pushes.flush();
        let error = match self.server_closed {
            Some(reason) => {
                // The node ended the session: nothing more is sent. The reason is visible
                // before any request fails with it; the pushes received before the
                // Disconnect are in the channel, which ends when this thread does.
                self.shared
                    .close_code
                    .store(reason.code(), Ordering::Release);
                self.shared.close_tx.send_replace(Some(reason));
                RequestError::SessionClosed(reason)
            }
            None => {
                let f = codec::encode_control(Record::Disconnect(Disconnect {
                    reason: DisconnectReason::Shutdown,
                }));
                let _ = self.raw_send(&f);
                RequestError::Closed
            }
        };
        close_all(&mut self.corr, &error);
        for out in self.conn.queue.drain(..) {
            conn::release(&self.conn.budget, &out);
        }
        // What was handed over since the last take is never transmitted: closed out here.
        let mut outbox = self.shared.outbox();
        outbox.closed = true;
        let queue = std::mem::take(&mut outbox.queue);
        let requests = std::mem::take(&mut outbox.requests);
        drop(outbox);
        for out in &queue {
            conn::release(&self.conn.budget, out);
        }
        for r in requests {
            let _ = r.waiter.send(Err(error.clone()));
        }
    }

    /// Takes what the senders handed over ([`Outbox`]): its requests are registered (before
    /// any of them can be transmitted), then its cancels applied (each behind its request).
    /// Its records are taken out under the lock without a copy (the outbox keeps a spare
    /// buffer) when the send queue holds less than a batch frame's `max_records`: they become
    /// the send queue, the few records it held moved in front of them. A longer send queue
    /// (waiting for credit or libzmq) only has its last run topped up to a whole batch frame
    /// from the front of the outbox (at most `max_records` − 1 records moved); the rest stay
    /// in the outbox until the send queue drained ([`ClientIo::flush`]). So a run of small
    /// records is not cut where one take ended and the next began, and an outbox that filled
    /// during a credit stall is never copied record by record. True if records were taken.
    fn take_outbox(&mut self) -> bool {
        if !self.shared.outbox_full.load(Ordering::Acquire) {
            return false;
        }
        let mut requests = std::mem::take(&mut self.taken_requests);
        let mut cancels = std::mem::take(&mut self.taken_cancels);
        let max = self.batching.max_records.max(1);
        let queued = self.conn.queue.len();
        let (taken, topped) = {
            let mut outbox = self.shared.outbox();
            let mut taken = None;
            let mut topped = false;
            if queued < max {
                taken = (!outbox.queue.is_empty())
                    .then(|| std::mem::replace(&mut outbox.queue, std::mem::take(&mut self.spare)));
            } else {
                for _ in 0..(max - queued % max) % max {
                    let Some(out) = outbox.queue.pop_front() else {
                        break;
                    };
                    self.conn.queue.push_back(out);
                    topped = true;
                }
            }
            std::mem::swap(&mut requests, &mut outbox.requests);
            std::mem::swap(&mut cancels, &mut outbox.cancels);
            self.shared
                .outbox_full
                .store(!outbox.queue.is_empty(), Ordering::Release);
            (taken, topped)
        };
        let took = topped || taken.is_some();
        if let Some(mut taken) = taken {
            // The send queue's few records go in front of the taken ones (order kept).
            while let Some(out) = self.conn.queue.pop_back() {
                taken.push_front(out);
            }
            std::mem::swap(&mut self.conn.queue, &mut taken);
            self.spare = taken;
        }
        for r in requests.drain(..) {
            if let Err(w) = self.corr.register(r.corr, (), r.deadline, r.waiter) {
                // Never transmitted: out of the queues again, its reservation released.
                self.unqueue(r.corr);
                let _ = w.send(Err(RequestError::Closed));
            }
        }
        for c in cancels.drain(..) {
            drop(self.corr.handle_cancel(c));
        }
        self.taken_requests = requests;
        self.taken_cancels = cancels;
        took
    }

    /// Removes the last queued record of request `corr` (send queue or outbox) and releases
    /// its reservation.
    fn unqueue(&mut self, corr: u64) {
        let mut outbox = self.shared.outbox();
        let out = match outbox.queue.iter().rposition(|o| o.corr == corr) {
            Some(i) => outbox.queue.remove(i),
            None => {
                drop(outbox);
                let i = self.conn.queue.iter().rposition(|o| o.corr == corr);
                i.and_then(|i| self.conn.queue.remove(i))
            }
        };
        if let Some(out) = out {
            conn::release(&self.conn.budget, &out);
        }
    }

    /// Yields the CPU up to `spin` times while watching for commands or a readable socket
    /// (not while a full push channel keeps the socket unread), for at most [`SPIN_LIMIT`] and
    /// never past `timer` (the next ping or deadline): on a busy machine one yield can last a
    /// whole time slice, and a late Ping would make the node look dead.
    /// Sleeps at most `ms` until the doorbell rings, the monitor has an event (read at the
    /// top of the next pass) or, unless a push is stalled, the dealer is readable: (rang,
    /// readable).
    ///
    /// Level check first: `ZMQ_EVENTS` of the dealer (sent on in this pass) and of a doorbell
    /// not drained. Then every socket is drained (the monitor was read until EAGAIN at the top
    /// of this pass and nothing else is done with it): a later message makes its writer send
    /// `activate_read`, which signals the socket's `ZMQ_FD`, so one `poll()` over the three
    /// FDs sleeps, where `zmq_poll` made a `poll()` and a `ZMQ_EVENTS` per socket before and
    /// after the sleep.
    fn sleep(&mut self, ms: i64) -> (bool, bool) {
        let dealer = self.stalled.is_none();
        let readable = |s: &zmq::Socket| s.get_events().map_or(true, |e| e.contains(zmq::POLLIN));
        let mut rang = false;
        if !self.door_drained {
            rang = readable(&self.door.socket);
            self.door_drained = !rang;
        }
        let ready = dealer && readable(&self.dealer);
        if rang || ready {
            return (rang, ready);
        }
        let events = if dealer {
            zmq::POLLIN
        } else {
            zmq::PollEvents::empty()
        };
        let mut items = [
            zmq::PollItem::from_fd(self.fds[0], zmq::POLLIN),
            zmq::PollItem::from_fd(self.fds[1], zmq::POLLIN),
            zmq::PollItem::from_fd(self.fds[2], events),
        ];
        match zmq::poll(&mut items, ms) {
            Ok(_) => (items[0].is_readable(), dealer && items[2].is_readable()),
            // Interrupted: look at everything.
            Err(_) => (true, dealer),
        }
    }

    fn spin_for_work(&self, timer: Duration) -> bool {
        if self.stalled.is_some() || self.spin == 0 {
            return false;
        }
        let end = Instant::now() + timer.min(SPIN_LIMIT);
        for _ in 0..self.spin {
            if Instant::now() >= end {
                return false;
            }
            if !self.door.rx.is_empty() {
                return true;
            }
            if self
                .dealer
                .get_events()
                .is_ok_and(|e| e.contains(zmq::POLLIN))
            {
                return true;
            }
            std::thread::yield_now();
        }
        false
    }

    /// A lost connection ends the node's session: the credit it granted is void (the next
    /// connection is a new session with a fresh grant, which the first Ping on it obtains).
    fn read_monitor(&mut self) {
        while let Some((first, _)) = recv_multipart(&self.mon) {
            if first.len() >= 2
                && zmq::SocketEvent::from_raw(u16::from_le_bytes([first[0], first[1]]))
                    == zmq::SocketEvent::DISCONNECTED
            {
                // A new connection is a new session: Ping at once (it grants the window).
                self.conn.reset();
                self.conn.ping_again(self.now);
                self.shared.counters.event(TransportEvent::Disconnected);
            }
        }
    }

    fn raw_send(&self, frames: &[Bytes]) -> bool {
        dealer_send(&self.dealer, self.tap.as_ref(), frames)
    }

    /// Sends queued records in order while libzmq takes them and the node's window allows
    /// ([`conn::flush`], the loop a node runs for its peers): a run of small records as one
    /// 139 batch frame, a lone or large record alone, each record of a run charged to the
    /// credit on its own; a request that already ended is never put in a run (it is
    /// discarded at the front, `RequestEnded`). Once the queue drained, records handed over
    /// since the last take follow ([`ClientIo::take_outbox`]).
    fn flush(&mut self) {
        loop {
            let mut wire = DealerWire {
                dealer: &self.dealer,
                tap: self.tap.as_ref(),
                corr: &mut self.corr,
                counters: &self.shared.counters,
                now: self.now,
            };
            conn::flush(
                &mut self.conn.queue,
                &mut self.conn.credit,
                &self.conn.budget,
                &self.batching,
                &mut wire,
            );
            if !self.conn.queue.is_empty() || !self.take_outbox() {
                return;
            }
        }
    }

    fn read(&mut self) {
        if !self.resume() {
            return;
        }
        self.read_pass();
        self.pushes.flush();
        // Liveness: any record from the node counts, at the pass's time.
        if std::mem::take(&mut self.heard) {
            self.heard_now();
        }
    }

    /// Marks the node heard from at the pass's time (`MeshClient::server_alive`).
    fn heard_now(&self) {
        let ms = self
            .now
            .saturating_duration_since(self.shared.epoch)
            .as_millis() as u64;
        self.shared.last_rx_ms.store(ms.max(1), Ordering::Release);
    }

    fn read_pass(&mut self) {
        for _ in 0..512 {
            if self.stalled.is_some() || self.server_closed.is_some() {
                return;
            }
            let Some((first, rest)) = recv_multipart(&self.dealer) else {
                return;
            };
            let mut parts = Vec::with_capacity(2);
            parts.push(first);
            parts.extend(rest);
            if let Some(tap) = &self.tap {
                tap.record(TapDirection::Received, LinkKind::Client, b"", &parts);
            }
            if let [frame] = &parts[..]
                && zlink_wire::is_batch(frame)
            {
                match zlink_wire::BatchFrame::parse(frame.clone()) {
                    Ok(batch) => self.on_batch(batch, 0),
                    // Broken framing: the whole frame is dropped, once.
                    Err(e) => self
                        .shared
                        .counters
                        .drop(codec::drop_reason(&e), &format_args!("client: batch: {e}")),
                }
                continue;
            }
            match codec::decode(&parts, &self.limits) {
                Ok(d) => self.on_record(d, false),
                Err(e) => self.shared.counters.drop(codec::drop_reason(&e), &e),
            }
        }
    }

    /// The sub-records of a batch frame from index `from` on, in order, each decoded and
    /// checked exactly like a record received alone (same limits; a bad one is dropped and
    /// counted by itself). A push that finds the push channel full stops the walk: the rest
    /// of the frame waits in `rest` until that push was taken ([`ClientIo::resume`]).
    fn on_batch(&mut self, batch: zlink_wire::BatchFrame, from: usize) {
        let mut stopped_at = None;
        for (i, sub) in batch.records().enumerate().skip(from) {
            match self.decode_sub(sub) {
                Ok(d) => self.on_record(d, true),
                Err(e) => self
                    .shared
                    .counters
                    .drop(codec::drop_reason(&e), &format_args!("client: batch: {e}")),
            }
            if self.stalled.is_some() {
                stopped_at = Some(i + 1);
                break;
            }
        }
        if let Some(next) = stopped_at
            && next < batch.len()
        {
            self.rest = Some((batch, next));
        }
    }

    /// Decodes a sub-record like a record received alone. A push envelope byte-identical to
    /// the last one decoded (it depends only on the key) reuses that decode; the payload is
    /// bounded as the decoder bounds it.
    fn decode_sub(
        &mut self,
        sub: zlink_wire::BatchRecord<'_>,
    ) -> Result<zlink_wire::Decoded, zlink_wire::DecodeError> {
        if let Some(p) = &sub.payload
            && p.len() <= self.limits.max_payload
            && let Some(header) = self.memo.header(sub.envelope)
        {
            return Ok(zlink_wire::Decoded {
                header,
                record: self.memo.record(),
                payload: sub.payload,
            });
        }
        let d = sub.decode(&self.limits)?;
        if d.payload.is_some() {
            self.memo.store(sub.envelope, &d);
        }
        Ok(d)
    }

    /// Hands up what a full push channel held back: the stalled push, then the rest of its
    /// batch frame. True when nothing is held back any more (reading may go on).
    fn resume(&mut self) -> bool {
        if let Some(p) = self.stalled.take() {
            if let Err(p) = self.pushes.try_push(p) {
                self.stalled = Some(p);
                // What the application has not taken yet must reach it.
                self.pushes.flush();
                return false;
            }
        }
        if let Some((batch, from)) = self.rest.take() {
            self.on_batch(batch, from);
        }
        self.pushes.flush();
        self.stalled.is_none()
    }

    /// One record from the node (alone or from a batch). Inside a batch only pushes and
    /// replies are accepted (control records travel alone, SB-5.4): anything else there is
    /// dropped as `WrongConnection`, like a record that has no business on this connection.
    fn on_record(&mut self, d: zlink_wire::Decoded, in_batch: bool) {
        let corr = d.header.correlation.get();
        self.heard = true;
        // A push (the hot path) is classified without moving its record out.
        if let Record::Push(p) = &d.record {
            let key = p.key;
            if self.verdict(&Class::Push, in_batch) == Some(Verdict::Deliver) {
                let p = Push {
                    key,
                    payload: d.payload,
                };
                if let Err(p) = self.pushes.try_push(p) {
                    self.stalled = Some(p);
                }
            }
            return;
        }
        let class = codec::classify(&d.record);
        let record = Some(d.record);
        let Some(verdict) = self.verdict(&class, in_batch) else {
            return;
        };
        match verdict {
            Verdict::Control { resume } => {
                if resume {
                    self.flush();
                }
            }
            // The node ended this session: nothing after it on this connection counts.
            Verdict::Disconnect => {
                if let Class::Disconnect(reason) = class {
                    self.server_closed = Some(reason);
                }
            }
            Verdict::Complete => match self.corr.handle_reply(corr, &()) {
                ReplyOutcome::Deliver(w) => {
                    // The pushes that arrived before the reply are handed over first.
                    self.pushes.flush();
                    if let Some(rec) = record {
                        let _ = w.send(crate::engine::reply_result(rec, d.payload));
                    }
                }
                ReplyOutcome::Late(t) => self
                    .shared
                    .counters
                    .drop(DropReason::LateReply, &format_args!("after {t:?}")),
                _ => self.shared.counters.drop(DropReason::UnknownReply, &corr),
            },
            Verdict::Deliver | Verdict::Answer(_) | Verdict::Drop(_) => self
                .shared
                .counters
                .drop(DropReason::WrongConnection, &"client"),
        }
    }

    /// One record's verdict from the connection core ([`Conn::ingress`]: credit added,
    /// liveness noted), after the batch rule (inside a batch only pushes and replies; control
    /// records travel alone, SB-5.4); `None` when it was dropped (counted here).
    #[inline]
    fn verdict(&mut self, class: &Class, in_batch: bool) -> Option<Verdict> {
        if in_batch && !Lane::Server.batchable(class) {
            self.shared.counters.drop(
                DropReason::WrongConnection,
                &"client: control record inside a batch",
            );
            return None;
        }
        match self.conn.ingress(Lane::Server, class, 0, self.now) {
            Verdict::Drop(reason) => {
                self.shared.counters.drop(reason, &"client");
                None
            }
            v => Some(v),
        }
    }
}

/// Sends one message on the client's DEALER without blocking; false if libzmq refused it.
fn dealer_send(dealer: &zmq::Socket, tap: Option<&WireTap>, frames: &[Bytes]) -> bool {
    let last = frames.len().saturating_sub(1);
    for (i, f) in frames.iter().enumerate() {
        let flags = if i == last {
            zmq::DONTWAIT
        } else {
            zmq::SNDMORE | zmq::DONTWAIT
        };
        if dealer.send(&f[..], flags).is_err() {
            return false;
        }
    }
    if let Some(tap) = tap {
        tap.record(TapDirection::Sent, LinkKind::Client, b"", frames);
    }
    true
}

/// The client's DEALER as the [`Transport`] of [`conn::flush`]: the socket and the correlation
/// table a queued request is checked against at transmission.
struct DealerWire<'c> {
    dealer: &'c zmq::Socket,
    tap: Option<&'c WireTap>,
    corr: &'c mut Correlations<(), Waiter>,
    counters: &'c Counters,
    /// The pass's time (request deadlines are checked against it at transmission).
    now: Instant,
}

impl Transport for DealerWire<'_> {
    /// A lone record as its own frames, several as one 139 batch frame handed to libzmq
    /// without a copy ([`conn::encode_run`]); a refusal (HWM) is PAUSED (a DEALER has no
    /// unreachable peer).
    #[inline]
    fn send_run<'a>(
        &mut self,
        mut run: impl ExactSizeIterator<Item = &'a Parts>,
        frame: usize,
    ) -> SendOutcome {
        let sent = if run.len() <= 1 {
            match run.next() {
                Some(frames) => dealer_send(self.dealer, self.tap, frames),
                None => true,
            }
        } else {
            let frame = conn::encode_run(run, frame);
            let tapped = self.tap.map(|_| Bytes::copy_from_slice(&frame));
            let sent = self.dealer.send(frame, zmq::DONTWAIT).is_ok();
            if sent
                && let Some(tap) = self.tap
                && let Some(frame) = tapped
            {
                tap.record(TapDirection::Sent, LinkKind::Client, b"", &[frame]);
            }
            sent
        };
        if sent {
            SendOutcome::Sent
        } else {
            SendOutcome::Paused
        }
    }

    /// A framed run (the client frames none itself): sent copied, so a refused one stays
    /// whole for the retry.
    fn send_framed(&mut self, run: &mut conn::Framed) -> SendOutcome {
        let sent = match run.lone() {
            Some(r) => dealer_send(
                self.dealer,
                self.tap,
                &Parts::new(
                    Bytes::copy_from_slice(r.envelope),
                    r.payload.map(Bytes::copy_from_slice),
                ),
            ),
            None => {
                let sent = self.dealer.send(run.frame(), zmq::DONTWAIT).is_ok();
                if sent && let Some(tap) = self.tap {
                    tap.record(
                        TapDirection::Sent,
                        LinkKind::Client,
                        b"",
                        &[Bytes::copy_from_slice(run.frame())],
                    );
                }
                sent
            }
        };
        if sent {
            SendOutcome::Sent
        } else {
            SendOutcome::Paused
        }
    }

    fn ended(&mut self, corr: u64) -> bool {
        ended_before_transmission(self.corr, corr, self.now, self.counters, &"client")
    }

    fn expired(&self, corr: u64) -> bool {
        self.corr.is_ended_at(corr, self.now)
    }

    fn lost(&mut self, _out: &Out) {
        self.counters.drop(DropReason::PeerLost, &"client");
    }
}
