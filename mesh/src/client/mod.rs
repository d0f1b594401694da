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
use crate::config::OutboundBudget;
use crate::outbox::SendBudget;
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

mod io;
mod push;

use io::ClientIo;
use push::{PUSH_BATCH, PushReceiver, PushSender};

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
    budget: Arc<SendBudget>,
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
            budget: Arc::new(SendBudget::new(cfg.budget)),
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
        let fds = ClientIo::fds(
            dealer.get_fd().map_err(terr("dealer fd"))?,
            door.socket.get_fd().map_err(terr("doorbell fd"))?,
            mon.get_fd().map_err(terr("monitor fd"))?,
        );
        let io = ClientIo {
            dealer,
            mon,
            door,
            ready: crate::driver::Ready::new(fds),
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
        if let Some(p) = self.try_recv_push() {
            return Some(p);
        }
        self.pushes.lock().await.recv().await
    }

    /// A push already received, if any, taken without waiting (nor the lock's wait, nor a
    /// timer): a reader of a push stream finds most pushes here.
    fn try_recv_push(&self) -> Option<Push> {
        self.pushes.try_lock().ok()?.try_recv()
    }

    /// Receives a push, waiting at most `timeout`.
    pub async fn recv_push_timeout(&self, timeout: Duration) -> Option<Push> {
        if let Some(p) = self.try_recv_push() {
            return Some(p);
        }
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
