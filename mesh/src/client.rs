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

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::bridge::{Bell, Door};
use crate::budget::{Budget, OutboundBudget};
use zlink_wire::{Disconnect, DisconnectReason, Limits, Ping};

use crate::codec::{self, Class, Parts, Record};
use crate::config::{Liveness, MeshConfig, TransportLimits};
use crate::correlation::{Correlations, ReplyOutcome};
use crate::counters::{Counters, DropReason};
use crate::engine::{configure_network_socket, recv_multipart};
use crate::error::{ConfigError, RequestError, SendError};
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

type Waiter = oneshot::Sender<Result<Response, RequestError>>;

enum Cmd {
    Send {
        frames: Parts,
        bytes: u64,
    },
    Request {
        corr: u64,
        deadline: Instant,
        frames: Parts,
        bytes: u64,
        waiter: Waiter,
    },
    Cancel(u64),
    Close,
}

struct ClientShared {
    bell: Bell<Cmd>,
    budget: Budget,
    counters: Counters,
    next_corr: AtomicU64,
    send_timeout: Duration,
    max_message_size: usize,
    /// When the client started (base of `last_rx_ms`).
    epoch: Instant,
    /// Milliseconds since `epoch` of the last record received from the node (0 = never).
    last_rx_ms: AtomicU64,
    peer_timeout: Duration,
}

/// A ClientServer client.
pub struct MeshClient {
    shared: Arc<ClientShared>,
    pushes: tokio::sync::Mutex<mpsc::Receiver<Push>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for MeshClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MeshClient")
    }
}

impl MeshClient {
    /// Connects (libzmq connects in the background and reconnects with bounded backoff).
    pub fn connect(cfg: ClientConfig) -> Result<MeshClient, ConfigError> {
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
            budget: Budget::new(cfg.budget),
            counters: Counters::default(),
            next_corr: AtomicU64::new(1),
            send_timeout: cfg.send_timeout,
            max_message_size: cfg.transport.max_message_size,
            epoch: Instant::now(),
            last_rx_ms: AtomicU64::new(0),
            peer_timeout: cfg.liveness.peer_timeout,
        });
        let (push_tx, push_rx) = mpsc::channel(cfg.push_capacity.max(1));
        let io = ClientIo {
            dealer,
            mon,
            door,
            shared: shared.clone(),
            corr: Correlations::new(),
            pushes: push_tx,
            stalled: None,
            queue: std::collections::VecDeque::new(),
            credit_msgs: 0,
            credit_bytes: 0,
            pinged: false,
            ping_interval: cfg.liveness.ping_interval,
            next_ping: Instant::now(),
            seq: 0,
            limits: codec::limits(cfg.transport.max_message_size),
            tap: cfg.tap,
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

    /// Counters (late replies, malformed frames …).
    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    fn frames(&self, corr: u64, record: Record, payload: Bytes) -> Result<(Parts, u64), SendError> {
        let frames = codec::encode(&record, corr, Some(payload))
            .map_err(|e| SendError::Encode(e.to_string()))?;
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
        Ok((frames, total))
    }

    /// Sends one-way DATA.
    pub async fn send(&self, key: DispatchKey, payload: Bytes) -> Result<(), SendError> {
        let (frames, bytes) =
            self.frames(0, Record::OneWay(zlink_wire::OneWay { key }), payload)?;
        self.shared
            .budget
            .reserve(bytes, self.shared.send_timeout)
            .await
            .map_err(|e| SendError::DeadlineExceeded(e.waited))?;
        self.shared
            .bell
            .submit(Cmd::Send { frames, bytes })
            .map_err(|_| {
                self.shared.budget.release(bytes);
                SendError::Closed
            })
    }

    /// Sends a request with a deadline; exactly one terminal.
    pub async fn request(
        &self,
        key: DispatchKey,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Response, RequestError> {
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
        if self
            .shared
            .bell
            .submit(Cmd::Request {
                corr,
                deadline,
                frames,
                bytes,
                waiter: tx,
            })
            .is_err()
        {
            self.shared.budget.release(bytes);
            return Err(RequestError::Closed);
        }
        struct Guard<'a>(&'a ClientShared, u64, bool);
        impl Drop for Guard<'_> {
            fn drop(&mut self) {
                if self.2 {
                    let _ = self.0.bell.submit(Cmd::Cancel(self.1));
                }
            }
        }
        let mut g = Guard(&self.shared, corr, true);
        let r = rx.await;
        g.2 = false;
        r.unwrap_or(Err(RequestError::Closed))
    }

    /// Receives the next server push (`None` after close).
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
    shared: Arc<ClientShared>,
    corr: Correlations<(), Waiter>,
    pushes: mpsc::Sender<Push>,
    stalled: Option<Push>,
    /// PAUSED sends: (frames, budgeted bytes, correlation id of a request or 0).
    queue: std::collections::VecDeque<(Parts, u64, u64)>,
    /// Receive window the node granted (FlowCredit): requests and DATA go out only within it;
    /// none before the node's first grant (it answers the first Ping with one).
    credit_msgs: u64,
    credit_bytes: u64,
    /// A Ping was taken by libzmq (the connection exists).
    pinged: bool,
    ping_interval: Duration,
    next_ping: Instant,
    seq: u64,
    tap: Option<WireTap>,
    limits: Limits,
    _ctx: zmq::Context,
}

impl ClientIo {
    fn run(mut self) {
        loop {
            let mut close = false;
            while let Ok(cmd) = self.door.rx.try_recv() {
                match cmd {
                    Cmd::Send { frames, bytes } => self.send(frames, bytes, 0),
                    Cmd::Request {
                        corr,
                        deadline,
                        frames,
                        bytes,
                        waiter,
                    } => {
                        if let Err(w) = self.corr.register(corr, (), deadline, waiter) {
                            self.shared.budget.release(bytes);
                            let _ = w.send(Err(RequestError::Closed));
                        } else {
                            self.send(frames, bytes, corr);
                        }
                    }
                    Cmd::Cancel(c) => drop(self.corr.handle_cancel(c)),
                    Cmd::Close => close = true,
                }
            }
            if close {
                break;
            }
            self.read_monitor();
            self.flush();
            if let Some(p) = self.stalled.take() {
                match self.pushes.try_send(p) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(p)) => self.stalled = Some(p),
                    Err(mpsc::error::TrySendError::Closed(_)) => {}
                }
            }
            let now = Instant::now();
            if self.stalled.is_some() {
                // Not reading (pushes not taken): silence proves nothing about the node.
                let ms = (self.shared.epoch.elapsed().as_millis() as u64).max(1);
                self.shared.last_rx_ms.store(ms, Ordering::Release);
            }
            for (_, w) in self.corr.handle_timeout(now) {
                let _ = w.send(Err(RequestError::DeadlineExceeded));
            }
            // Until a first Ping got through (the node creates the session and grants the
            // window on it), retry it on every pass, not once per ping interval.
            if self.next_ping <= now || !self.pinged {
                self.seq += 1;
                self.next_ping = now + self.ping_interval;
                let f = codec::encode_control(Record::Ping(Ping { seq: self.seq }));
                if self.raw_send(&f) {
                    self.pinged = true;
                }
            }
            let mut t = self.next_ping.saturating_duration_since(now);
            if let Some(d) = self.corr.poll_timeout() {
                t = t.min(d.saturating_duration_since(now));
            }
            if self.stalled.is_some() || !self.queue.is_empty() || !self.pinged {
                t = t.min(Duration::from_millis(1));
            }
            let ms = if self.shared.bell.prepare_sleep() {
                t.as_millis().max(1) as i64
            } else {
                0
            };
            let (rd, rs) = {
                let mut items = [
                    self.door.socket.as_poll_item(zmq::POLLIN),
                    self.mon.as_poll_item(zmq::POLLIN),
                    self.dealer.as_poll_item(if self.stalled.is_none() {
                        zmq::POLLIN
                    } else {
                        zmq::PollEvents::empty()
                    }),
                ];
                let _ = zmq::poll(&mut items, ms);
                (items[0].is_readable(), items[2].is_readable())
            };
            self.shared.bell.awake();
            if rd {
                self.door.drain_rings();
            }
            if rs {
                self.read();
            }
        }
        let f = codec::encode_control(Record::Disconnect(Disconnect {
            reason: DisconnectReason::Shutdown,
        }));
        let _ = self.raw_send(&f);
        for (_, w) in self
            .corr
            .handle_timeout(Instant::now() + Duration::from_secs(86_400 * 365))
        {
            let _ = w.send(Err(RequestError::Closed));
        }
    }

    /// A lost connection ends the node's session: the credit it granted is void (the next
    /// connection is a new session with a fresh grant, which the first Ping on it obtains).
    fn read_monitor(&mut self) {
        while let Some((first, _)) = recv_multipart(&self.mon) {
            if first.len() >= 2
                && zmq::SocketEvent::from_raw(u16::from_le_bytes([first[0], first[1]]))
                    == zmq::SocketEvent::DISCONNECTED
            {
                self.credit_msgs = 0;
                self.credit_bytes = 0;
                self.pinged = false;
            }
        }
    }

    fn raw_send(&self, frames: &[Bytes]) -> bool {
        let last = frames.len().saturating_sub(1);
        for (i, f) in frames.iter().enumerate() {
            let flags = if i == last {
                zmq::DONTWAIT
            } else {
                zmq::SNDMORE | zmq::DONTWAIT
            };
            if self.dealer.send(&f[..], flags).is_err() {
                return false;
            }
        }
        if let Some(tap) = &self.tap {
            tap.record(TapDirection::Sent, LinkKind::Client, b"", frames);
        }
        true
    }

    fn send(&mut self, frames: Parts, bytes: u64, corr: u64) {
        self.queue.push_back((frames, bytes, corr));
        self.flush();
    }

    /// Sends queued records in order while libzmq takes them and the node's window allows.
    fn flush(&mut self) {
        while let Some(&(_, b, corr)) = self.queue.front() {
            if self.request_ended(corr) {
                self.shared.budget.release(b);
                self.queue.pop_front();
                continue;
            }
            if self.credit_msgs == 0 || self.credit_bytes == 0 {
                break;
            }
            if !self.raw_send(&self.queue.front().expect("front").0) {
                break;
            }
            self.credit_msgs -= 1;
            self.credit_bytes = self.credit_bytes.saturating_sub(b);
            self.shared.budget.release(b);
            self.queue.pop_front();
        }
    }

    /// True (and counted) if `corr` is a request that already reached its terminal, or whose
    /// deadline passed (ended here): it is never transmitted (SB-12, EG-16.26).
    fn request_ended(&mut self, corr: u64) -> bool {
        if corr == 0 {
            return false;
        }
        let ended = match self.corr.pending_deadline(corr) {
            None => true,
            Some(d) => {
                let now = Instant::now();
                if d <= now {
                    for (_, w) in self.corr.handle_timeout(now) {
                        let _ = w.send(Err(RequestError::DeadlineExceeded));
                    }
                    true
                } else {
                    false
                }
            }
        };
        if ended {
            self.shared.counters.drop(
                DropReason::RequestEnded,
                &format_args!("client corr {corr} ended before transmission"),
            );
        }
        ended
    }

    fn read(&mut self) {
        for _ in 0..512 {
            if self.stalled.is_some() {
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
            let d = match codec::decode(&parts, &self.limits) {
                Ok(d) => d,
                Err(e) => {
                    self.shared.counters.drop(codec::drop_reason(&e), &e);
                    continue;
                }
            };
            let corr = d.header.correlation.get();
            let now_ms = (self.shared.epoch.elapsed().as_millis() as u64).max(1);
            self.shared.last_rx_ms.store(now_ms, Ordering::Release);
            match codec::classify(d.record) {
                (Class::Pong | Class::Ping(_), _) => {}
                (Class::FlowCredit { messages, bytes }, _) => {
                    self.credit_msgs += u64::from(messages);
                    self.credit_bytes += bytes;
                    self.flush();
                }
                (Class::Push, Some(Record::Push(p))) => {
                    let p = Push {
                        key: p.key,
                        payload: d.payload,
                    };
                    match self.pushes.try_send(p) {
                        Ok(()) => {}
                        Err(mpsc::error::TrySendError::Full(p)) => self.stalled = Some(p),
                        Err(mpsc::error::TrySendError::Closed(_)) => {}
                    }
                }
                (Class::Reply, Some(rec)) => match self.corr.handle_reply(corr, &()) {
                    ReplyOutcome::Deliver(w) => {
                        let _ = w.send(crate::engine::reply_result(rec, d.payload));
                    }
                    ReplyOutcome::Late(t) => self
                        .shared
                        .counters
                        .drop(DropReason::LateReply, &format_args!("after {t:?}")),
                    _ => self.shared.counters.drop(DropReason::UnknownReply, &corr),
                },
                _ => self
                    .shared
                    .counters
                    .drop(DropReason::WrongConnection, &"client"),
            }
        }
    }
}
