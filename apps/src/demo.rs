//! Demo actor types hosted by `zlink-node` (and used by the examples and tests):
//!
//! | type | messages |
//! |---|---|
//! | `counter` | [`Add`] → new total, [`Get`] → total |
//! | `echo` | [`Echo`] → the same bytes, [`EchoPush`] → pushes `Echo` to its bound session, [`CloseSession`] → closes its bound session's connection |
//! | `room` | [`Enter`] → member count, [`Say`] → message sequence number, [`CallEcho`] → the reply of an `echo` actor the room calls (actor → actor, possibly cross-node) |
//! | `failing` | [`Fail`] → always a handler error (EG-15 error reply) |
//! | `sequence` | [`Next`] (sent in order 0, 1, 2, …) → `()`, [`Checked`] → (next expected, out of order) |
//! | `tally` | [`Mark`] (per sender in order 0, 1, 2, …) → marks counted from that sender, [`Tallied`] → [`Tally`]; migratable (its state travels when it is relocated) |

use std::time::Duration;

use bytes::{Buf, Bytes};
use serde::{Deserialize, Serialize};
use zlink_wire::{DispatchKey, ErrorKind};

use zlink::actor::{
    ActorConfigError, ActorRef, ActorRegistry, ActorTypeBuilder, Handled, HandlerError, Message,
};
use zlink::session::FlowRecord;

/// Adds to a counter; replies the new total.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Add(pub u64);
impl Message for Add {
    const KEY: DispatchKey = DispatchKey::new(1);
    type Reply = u64;
}

/// Reads a counter.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Get;
impl Message for Get {
    const KEY: DispatchKey = DispatchKey::new(2);
    type Reply = u64;
}

/// Echoes its bytes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Echo(#[serde(with = "serde_bytes")] pub Vec<u8>);
impl Message for Echo {
    const KEY: DispatchKey = DispatchKey::new(10);
    type Reply = Echo;
}

/// Pushes its bytes to the echo actor's bound session (36; the client receives a push with
/// key [`Echo::KEY`] and payload `Echo(bytes)`); replies `()`. `InvalidOperation`
/// (session-not-bound) when the actor has no bound session (SB-14.5).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EchoPush(#[serde(with = "serde_bytes")] pub Vec<u8>);
impl Message for EchoPush {
    const KEY: DispatchKey = DispatchKey::new(11);
    type Reply = ();
}

/// Asks the echo actor to close its bound session's connection (SB-5.14); replies `()`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CloseSession;
impl Message for CloseSession {
    const KEY: DispatchKey = DispatchKey::new(12);
    type Reply = ();
}

/// Joins a room; replies the member count.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Enter {
    /// Player name.
    pub player: String,
}
impl Message for Enter {
    const KEY: DispatchKey = DispatchKey::new(20);
    type Reply = u64;
}

/// Says something in a room; replies the room's message sequence number.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Say {
    /// Speaker.
    pub from: String,
    /// Text.
    pub text: String,
}
impl Message for Say {
    const KEY: DispatchKey = DispatchKey::new(21);
    type Reply = u64;
}

/// Asks a room to call an `echo` actor and return its reply (an actor → actor request that
/// keeps the room's turn until the reply arrives, EG-2.6).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CallEcho {
    /// The echo actor.
    pub target: ActorRef,
    /// Bytes to echo.
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
    /// Timeout of the inner request in ms.
    pub timeout_ms: u32,
}
impl Message for CallEcho {
    const KEY: DispatchKey = DispatchKey::new(22);
    type Reply = Echo;
}

/// Always fails.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Fail;
impl Message for Fail {
    const KEY: DispatchKey = DispatchKey::new(30);
    type Reply = ();
}

/// State of a `room`.
#[derive(Debug, Default)]
pub struct Room {
    members: Vec<String>,
    said: u64,
}

/// The next number of a sequence: a `sequence` actor counts every `Next(n)` whose `n` is not
/// one more than the previous one (so a reordering shows, unlike a sum).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Next(pub u64);
impl Message for Next {
    const KEY: DispatchKey = DispatchKey::new(50);
    type Reply = ();
}

/// Reads a `sequence` actor: (the next number it expects, how many arrived out of order).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Checked;
impl Message for Checked {
    const KEY: DispatchKey = DispatchKey::new(51);
    type Reply = (u64, u64);
}

/// One numbered message from one sender to a `tally` actor: each sender numbers its marks 0, 1,
/// 2, … per actor; the actor counts every mark whose number is not the next one it expects from
/// that sender (a lost, doubled or reordered mark shows). Replies how many marks it has counted
/// from `from`, this one included.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Mark {
    /// The sender's number (chosen by the senders, unique among them).
    pub from: u32,
    /// The mark's number in the sender's sequence to this actor.
    pub seq: u64,
}
impl Message for Mark {
    const KEY: DispatchKey = DispatchKey::new(52);
    type Reply = u64;
}

/// Reads a `tally` actor's whole state.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Tallied;
impl Message for Tallied {
    const KEY: DispatchKey = DispatchKey::new(53);
    type Reply = Tally;
}

/// A `tally` actor's state (its migration state too: it travels when the actor is relocated).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// Per sender: the number of the next mark expected (one more than the last one counted).
    pub next: std::collections::BTreeMap<u32, u64>,
    /// Per sender: marks counted.
    pub counted: std::collections::BTreeMap<u32, u64>,
    /// Marks whose number was not the next expected from their sender.
    pub out_of_order: u64,
}

/// The demo types: `counter`, `echo`, `room`, `failing`, `sequence`, `tally`.
///
/// # Errors
/// Never in practice (the types are valid); registration errors are passed on.
pub fn registry() -> Result<ActorRegistry, ActorConfigError> {
    let mut r = ActorRegistry::new();
    r.register(
        ActorTypeBuilder::new("counter", |_info, init: Bytes| {
            Ok(if init.len() == 8 {
                u64::from_be_bytes(init[..8].try_into().unwrap_or([0; 8]))
            } else {
                0
            })
        })
        .handle(|total: &mut u64, _ctx, Add(n)| {
            *total = total.wrapping_add(n);
            Handled::ok(*total)
        })
        .handle(|total: &mut u64, _ctx, Get| Handled::ok(*total))
        // Live relocation: the total travels (`zlink-node ctl relocate`).
        .migrate(
            |total: &u64| Ok::<_, HandlerError>(*total),
            |_info, total: u64| Ok(total),
        )
        .build()?,
    )?;
    r.register(
        ActorTypeBuilder::new("echo", |_info, _init| Ok(()))
            .handle(|_: &mut (), _ctx, msg: Echo| Handled::ok(msg))
            .handle(|_: &mut (), ctx, EchoPush(data)| {
                let ctx = ctx.clone();
                Handled::later(async move {
                    // Without a bound session: `InvalidOperation` (SB-12), the push's own kind.
                    ctx.push(&Echo(data)).await.map_err(HandlerError::from)
                })
            })
            .handle(|_: &mut (), ctx, _: CloseSession| {
                let ctx = ctx.clone();
                Handled::later(async move { ctx.close_session().await.map_err(HandlerError::from) })
            })
            // Live relocation: nothing travels (`scripts/chaos` relocates it).
            .stateless()
            .build()?,
    )?;
    r.register(
        ActorTypeBuilder::new("room", |_info, _init| Ok(Room::default()))
            .handle(|room: &mut Room, _ctx, j: Enter| {
                if !room.members.contains(&j.player) {
                    room.members.push(j.player);
                }
                Handled::ok(room.members.len() as u64)
            })
            .handle(|room: &mut Room, _ctx, s: Say| {
                if !room.members.contains(&s.from) {
                    return Handled::err(HandlerError::new(format!(
                        "{} is not in the room",
                        s.from
                    )));
                }
                room.said += 1;
                Handled::ok(room.said)
            })
            .handle(|_room: &mut Room, ctx, r: CallEcho| {
                let ctx = ctx.clone();
                Handled::later(async move {
                    ctx.request(
                        &r.target,
                        &Echo(r.data),
                        Duration::from_millis(u64::from(r.timeout_ms)),
                    )
                    .await
                    .map_err(|e| HandlerError::new(format!("relay: {e}")))
                })
            })
            .build()?,
    )?;
    r.register(
        ActorTypeBuilder::new("sequence", |_info, _init| Ok((0u64, 0u64)))
            // Live relocation: the count travels (`scripts/chaos` relocates it mid-sequence).
            .migrate(
                |state: &(u64, u64)| Ok::<_, HandlerError>(*state),
                |_info, state: (u64, u64)| Ok(state),
            )
            .handle(|(next, out_of_order): &mut (u64, u64), _ctx, Next(n)| {
                if n != *next {
                    *out_of_order += 1;
                }
                *next = n.saturating_add(1);
                Handled::ok(())
            })
            .handle(|state: &mut (u64, u64), _ctx, Checked| Handled::ok(*state))
            .build()?,
    )?;
    r.register(
        ActorTypeBuilder::new("tally", |_info, _init| Ok(Tally::default()))
            .handle(|t: &mut Tally, _ctx, Mark { from, seq }| {
                let next = t.next.entry(from).or_insert(0);
                if seq != *next {
                    t.out_of_order += 1;
                }
                *next = seq.saturating_add(1);
                let counted = t.counted.entry(from).or_insert(0);
                *counted += 1;
                Handled::ok(*counted)
            })
            .handle(|t: &mut Tally, _ctx, Tallied| Handled::ok(t.clone()))
            .migrate(
                |t: &Tally| Ok::<_, HandlerError>(t.clone()),
                |_info, t: Tally| Ok(t),
            )
            .build()?,
    )?;
    r.register(
        ActorTypeBuilder::new("failing", |_info, _init| Ok(()))
            .handle(|_: &mut (), _ctx, _: Fail| {
                Handled::err(HandlerError::new("deliberate failure"))
            })
            .build()?,
    )?;
    Ok(r)
}

/// The demo session application ([`sessions`]): generic packet handlers that let any client
/// bind actors and relay to them. Keys and payloads are documented in `docs/CLIENT-PROTOCOL.md`.
pub mod session {
    use serde::{Deserialize, Serialize};
    use zlink_wire::DispatchKey;

    use zlink::actor::{ActorRef, Message};

    /// Binds the session to an actor (`session.actors().bind`); replies the bound ref.
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct Bind {
        /// The incarnation to bind (from CREATE / GET / GET_OR_CREATE).
        pub actor: ActorRef,
    }
    impl Message for Bind {
        const KEY: DispatchKey = DispatchKey::new(1);
        type Reply = ActorRef;
    }

    /// BindOrGet (SB-5.13); replies the bound ref.
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct BindOrGet {
        /// The incarnation.
        pub actor: ActorRef,
    }
    impl Message for BindOrGet {
        const KEY: DispatchKey = DispatchKey::new(2);
        type Reply = ActorRef;
    }

    /// Relays a request to a bound actor; replies the actor's reply bytes.
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct RelayRequest {
        /// The bound actor.
        pub actor_id: String,
        /// The actor message's key.
        pub key: u32,
        /// MessagePack of the message.
        #[serde(with = "serde_bytes")]
        pub payload: Vec<u8>,
        /// Timeout in ms (0 = 5,000).
        pub timeout_ms: u32,
    }
    impl Message for RelayRequest {
        const KEY: DispatchKey = DispatchKey::new(3);
        type Reply = serde_bytes::ByteBuf;
    }

    /// Relays a one-way send to a bound actor (send it as a one-way packet, 147).
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct RelaySend {
        /// The bound actor.
        pub actor_id: String,
        /// The actor message's key.
        pub key: u32,
        /// MessagePack of the message.
        #[serde(with = "serde_bytes")]
        pub payload: Vec<u8>,
    }
    impl Message for RelaySend {
        const KEY: DispatchKey = DispatchKey::new(4);
        type Reply = ();
    }

    /// Unbinds an actor (38 tombstone).
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct Unbind {
        /// The bound actor.
        pub actor_id: String,
    }
    impl Message for Unbind {
        const KEY: DispatchKey = DispatchKey::new(5);
        type Reply = ();
    }

    /// `NotifyDisconnected` for one bound actor (SB-7.5).
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct NotifyDisconnected {
        /// The bound actor.
        pub actor_id: String,
    }
    impl Message for NotifyDisconnected {
        const KEY: DispatchKey = DispatchKey::new(6);
        type Reply = ();
    }

    /// The session's bound actors; replies their refs.
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct Bound;
    impl Message for Bound {
        const KEY: DispatchKey = DispatchKey::new(7);
        type Reply = Vec<ActorRef>;
    }

    /// Pushed by the demo session to its client when another session took over one of its
    /// actors (the replaced-callback), just before the connection closes.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Replaced {
        /// The actor that moved to the other session.
        pub actor_id: String,
    }
    impl Message for Replaced {
        const KEY: DispatchKey = DispatchKey::new(100);
        type Reply = ();
    }
}

fn find(
    s: &zlink::session::Session,
    id: &str,
) -> Result<zlink::session::BoundActor, zlink::session::PacketError> {
    // Looked up by its text: the identity is built (and validated) only for an error.
    match s.actors().find(id) {
        Some(b) => Ok(b),
        None => Err(counted_not_bound(s, FlowRecord::Bind, id)),
    }
}

/// [`not_bound`], counted on the session owner as `record`/`session_not_bound` (SB-5.9).
fn counted_not_bound(
    s: &zlink::session::Session,
    record: FlowRecord,
    id: &str,
) -> zlink::session::PacketError {
    match zlink_wire::ActorId::new(id) {
        Ok(actor) => s.not_bound(record, actor).into(),
        Err(_) => not_bound(id),
    }
}

/// The lookup of a relay packet's binding: [`find_raw`], and when there is none for a UTF-8 id,
/// the counted session-not-bound refusal (a relay, SB-5.9). `None` (not UTF-8) leaves the
/// answer to [`RelayView::parse`].
fn relay_target<T>(
    s: &zlink::session::Session,
    id: &[u8],
    found: Option<Result<T, zlink::session::PacketError>>,
) -> Option<Result<T, zlink::session::PacketError>> {
    found.or_else(|| {
        let id = std::str::from_utf8(id).ok()?;
        Some(Err(counted_not_bound(s, FlowRecord::Relay, id)))
    })
}

/// The error of a relay packet whose actor has no current binding.
fn not_bound(id: &str) -> zlink::session::PacketError {
    match zlink_wire::ActorId::new(id) {
        Ok(actor) => zlink::session::SessionError::NotBound { actor }.into(),
        Err(e) => {
            zlink::session::PacketError::new(ErrorKind::InvalidOperation, format!("actor id: {e}"))
        }
    }
}

/// The current binding of the actor whose id has these bytes (`None`: no binding, or not
/// UTF-8; [`relay_target`] then tells which). `find_bytes` checks the UTF-8 only for an id
/// other than the previous relay's.
fn bound(
    s: &zlink::session::Session,
    id: &[u8],
) -> Option<Result<zlink::session::BoundActor, zlink::session::PacketError>> {
    s.actors().find_bytes(id).map(Ok)
}

/// A relayed request's reply as the `RelayRequest` packet's reply: MessagePack bin (what
/// `serde_bytes::ByteBuf` encodes to).
fn bin_reply(reply: Bytes) -> Result<Bytes, zlink::session::PacketError> {
    rmp_serde::to_vec(serde_bytes::Bytes::new(&reply))
        .map(Bytes::from)
        .map_err(|e| zlink::session::PacketError::new(ErrorKind::Internal, e.to_string()))
}

/// MessagePack of `()` (nil): the reply of a packet whose reply type is `()`.
const UNIT: &[u8] = &[0xc0];

/// [`session::RelaySend`] / [`session::RelayRequest`] read in place (the same fields; a
/// `RelaySend` has no `timeout_ms`).
#[derive(Deserialize)]
struct RelayView<'a> {
    #[serde(borrow)]
    actor_id: &'a str,
    key: u32,
    #[serde(borrow)]
    payload: &'a [u8],
    #[serde(default)]
    timeout_ms: u32,
}

/// A relay packet's target (`T`: its bound actor), key, message (the packet
/// narrowed to it) and timeout.
type Relay<T> = (T, DispatchKey, Bytes, u32);

/// A [`RelayView`] as the fast readers take it: the actor id's bytes not checked for UTF-8 yet
/// ([`RelayView::parse`] looks them up first: bytes equal to a bound actor's id are valid, so
/// only a packet whose id names no binding pays for the check).
struct RawRelay<'a> {
    actor_id: &'a [u8],
    key: u32,
    payload: &'a [u8],
    timeout_ms: u32,
}

impl<'a> RawRelay<'a> {
    /// The packet in the form a client's `rmp_serde::to_vec_named` writes (a map of the
    /// fields, each once, nothing after it), read without serde's visitor machinery (about 850
    /// instructions per relayed packet). `None` for anything else: [`RelayView::parse`] then
    /// asks `rmp-serde`, which stays the authority on what is accepted and on every error.
    /// With its id checked ([`RawRelay::checked`]), it reads what `rmp-serde` reads.
    fn read(packet: &'a [u8]) -> Option<Self> {
        Self::read_in_order(packet).or_else(|| Self::read_any_order(packet))
    }

    /// The view with its actor id checked for UTF-8 (`None` if it is not).
    #[cfg(test)]
    fn checked(self) -> Option<RelayView<'a>> {
        Some(RelayView {
            actor_id: std::str::from_utf8(self.actor_id).ok()?,
            key: self.key,
            payload: self.payload,
            timeout_ms: self.timeout_ms,
        })
    }

    /// [`RawRelay::read`] of the fields in declaration order (what `to_vec_named` writes):
    /// each field name compared as the bytes it is written as. `None` for anything else
    /// ([`RawRelay::read_any_order`] then reads it).
    fn read_in_order(packet: &'a [u8]) -> Option<Self> {
        let mut r = zlink_wire::msgpack::Reader::new(packet);
        let fields = r.map()?;
        if !(3..=4).contains(&fields) {
            return None;
        }
        r.expect(b"\xa8actor_id")?;
        let actor_id = r.text_bytes()?;
        r.expect(b"\xa3key")?;
        let key = r.u32()?;
        r.expect(b"\xa7payload")?;
        let payload = r.bin()?;
        let timeout_ms = if fields == 4 {
            r.expect(b"\xaatimeout_ms")?;
            r.u32()?
        } else {
            0
        };
        r.end()?;
        Some(RawRelay {
            actor_id,
            key,
            payload,
            timeout_ms,
        })
    }

    /// [`RawRelay::read`] of the fields in any order, each once.
    fn read_any_order(packet: &'a [u8]) -> Option<Self> {
        let mut r = zlink_wire::msgpack::Reader::new(packet);
        let (mut actor_id, mut key, mut payload, mut timeout_ms) = (None, None, None, None);
        for _ in 0..r.map()? {
            match r.text_bytes()? {
                b"actor_id" if actor_id.is_none() => actor_id = Some(r.text_bytes()?),
                b"key" if key.is_none() => key = Some(r.u32()?),
                b"payload" if payload.is_none() => payload = Some(r.bin()?),
                b"timeout_ms" if timeout_ms.is_none() => timeout_ms = Some(r.u32()?),
                _ => return None,
            }
        }
        r.end()?;
        Some(RawRelay {
            actor_id: actor_id?,
            key: key?,
            payload: payload?,
            timeout_ms: timeout_ms.unwrap_or(0),
        })
    }
}

/// Longest id [`RawRelay::ascii`] copies out (longer ones take the packet whole): a
/// small stack copy, which a full [`zlink_wire::ActorId::MAX_LEN`] buffer is not (its zeroing
/// and copy cost about 0.14 k instructions per packet).
const SHORT_ID: usize = 32;

/// An ASCII actor id copied out of a relay packet (`bytes[..len]`).
struct AsciiId {
    bytes: [u8; SHORT_ID],
    len: usize,
}

impl RawRelay<'_> {
    /// A relay packet read by the fast reader whose actor id is ASCII (valid UTF-8, so what
    /// `rmp-serde` reads too) and at most [`SHORT_ID`] bytes: the id copied out, the key, the
    /// packet narrowed to the message, and the timeout (0 when absent, as a `RelaySend` has
    /// none). Anything else gives the packet back whole, for [`RelayView::parse`], which then
    /// answers it as without this step (a non-ASCII id's error is `rmp-serde`'s verdict on the
    /// whole packet).
    fn ascii(mut packet: Bytes) -> Result<(AsciiId, DispatchKey, Bytes, u32), Bytes> {
        let (id, key, start, len, timeout_ms) = {
            let Some(v) = RawRelay::read(&packet) else {
                return Err(packet);
            };
            if v.actor_id.len() > SHORT_ID || !v.actor_id.is_ascii() {
                return Err(packet);
            }
            let mut id = AsciiId {
                bytes: [0; SHORT_ID],
                len: v.actor_id.len(),
            };
            id.bytes[..id.len].copy_from_slice(v.actor_id);
            let start = v.payload.as_ptr() as usize - packet.as_ptr() as usize;
            (id, v.key, start, v.payload.len(), v.timeout_ms)
        };
        packet.advance(start);
        packet.truncate(len);
        Ok((id, DispatchKey::new(key), packet, timeout_ms))
    }
}

/// A packet `rmp-serde` refuses, as the application sees it.
fn payload_error(e: &rmp_serde::decode::Error) -> zlink::session::PacketError {
    zlink::session::PacketError::new(ErrorKind::InvalidOperation, format!("packet payload: {e}"))
}

impl<'a> RelayView<'a> {
    /// The packet read as `rmp-serde` reads it ([`RawRelay::read`] with the id checked).
    #[cfg(test)]
    fn read(packet: &'a [u8]) -> Option<Self> {
        RawRelay::read(packet)?.checked()
    }

    /// The packet read (`RawRelay::read`, else `rmp-serde`) with its actor id resolved by
    /// `target` while the packet is still whole: `target` is given the id's bytes and returns
    /// `None` when no binding has them; the error is then what it is without the fast reader —
    /// not bound (a valid id), or `rmp-serde`'s refusal of the packet (an id that is not UTF-8).
    fn parse<T>(
        mut packet: Bytes,
        target: impl FnOnce(&[u8]) -> Option<Result<T, zlink::session::PacketError>>,
    ) -> Result<Relay<T>, zlink::session::PacketError> {
        let (bound, key, start, len, timeout_ms) = {
            let v = match RawRelay::read(&packet) {
                Some(v) => v,
                None => {
                    let v = rmp_serde::from_slice::<RelayView<'_>>(&packet)
                        .map_err(|e| payload_error(&e))?;
                    RawRelay {
                        actor_id: v.actor_id.as_bytes(),
                        key: v.key,
                        payload: v.payload,
                        timeout_ms: v.timeout_ms,
                    }
                }
            };
            // Borrowed from `packet`: its offset there.
            let start = v.payload.as_ptr() as usize - packet.as_ptr() as usize;
            let bound = match target(v.actor_id) {
                Some(found) => found?,
                None => {
                    return Err(match std::str::from_utf8(v.actor_id) {
                        Ok(id) => not_bound(id),
                        // Not UTF-8 (only the fast reader takes such an id): what `rmp-serde`
                        // says about the packet.
                        Err(_) => match rmp_serde::from_slice::<RelayView<'_>>(&packet) {
                            Err(e) => payload_error(&e),
                            Ok(v) => not_bound(v.actor_id),
                        },
                    });
                }
            };
            (bound, v.key, start, v.payload.len(), v.timeout_ms)
        };
        // The packet itself narrowed to the message: no copy, and no shared handle to
        // allocate as a clone of it would.
        packet.advance(start);
        packet.truncate(len);
        Ok((bound, DispatchKey::new(key), packet, timeout_ms))
    }
}

fn timeout_of(ms: u32) -> Duration {
    Duration::from_millis(if ms == 0 { 5_000 } else { u64::from(ms) })
}

/// The demo session application hosted by `zlink-node`: [`session`]'s packets, and a
/// replaced-callback that tells the client which actor moved ([`session::Replaced`] push).
#[must_use]
pub fn sessions() -> zlink::session::SessionHandlers {
    use session::{
        Bind, BindOrGet, Bound, NotifyDisconnected, RelayRequest, RelaySend, Replaced, Unbind,
    };
    zlink::session::SessionHandlers::new()
        .packet(|s, b: Bind| async move {
            Ok(s.actors().bind(&b.actor).await?.actor_ref())
        })
        .packet(|s, b: BindOrGet| async move {
            Ok(s.actors().bind_or_get(&b.actor).await?.actor_ref())
        })
        // The two relay packets are decoded in place (the actor message stays a slice of the
        // packet) and their bound actor found while the packet is whole: no copy of the
        // message, no allocation beyond the relay's own. A relay request is forwarded
        // (`BoundActor::forward`): the packet's turn ends once the 24 is handed off, and the
        // actor's reply answers the client on its own (SB-1.5). An ASCII id (every id a client
        // normally sends) is found and forwarded in one step (`forward_bytes`).
        .packet_turn(RelayRequest::KEY, |s, packet| {
            let packet = match RawRelay::ascii(packet) {
                Ok((id, key, payload, timeout_ms)) => {
                    let id = &id.bytes[..id.len];
                    return match s.actors().forward_bytes(
                        id,
                        key,
                        payload,
                        timeout_of(timeout_ms),
                        bin_reply,
                    ) {
                        Some(turn) => turn,
                        // ASCII, so text: the relay's not-bound refusal, counted.
                        None => zlink::session::PacketTurn::Done(Err(counted_not_bound(
                            &s,
                            FlowRecord::Relay,
                            std::str::from_utf8(id).unwrap_or_default(),
                        ))),
                    };
                }
                Err(packet) => packet,
            };
            match RelayView::parse(packet, |id| relay_target(&s, id, bound(&s, id))) {
                Ok((actor, key, payload, timeout_ms)) => {
                    actor.forward(key, payload, timeout_of(timeout_ms), bin_reply)
                }
                Err(e) => zlink::session::PacketTurn::Done(Err(e)),
            }
        })
        // A one-way relay admitted at once finishes without a future; an ASCII id (every id
        // a client normally sends) is found and relayed in one step (`send_turn_bytes`).
        .packet_turn(RelaySend::KEY, |s, packet| {
            let packet = match RawRelay::ascii(packet) {
                Ok((id, key, payload, _)) => {
                    let id = &id.bytes[..id.len];
                    return match s.actors().send_turn_bytes(
                        id,
                        key,
                        payload,
                        Bytes::from_static(UNIT),
                    ) {
                        Some(turn) => turn,
                        // ASCII, so text: the relay's not-bound refusal, counted.
                        None => zlink::session::PacketTurn::Done(Err(counted_not_bound(
                            &s,
                            FlowRecord::Relay,
                            std::str::from_utf8(id).unwrap_or_default(),
                        ))),
                    };
                }
                Err(packet) => packet,
            };
            match RelayView::parse(packet, |id| relay_target(&s, id, bound(&s, id))) {
                Ok((actor, key, payload, _)) => {
                    actor.send_turn(key, payload, Bytes::from_static(UNIT))
                }
                Err(e) => zlink::session::PacketTurn::Done(Err(e)),
            }
        })
        .packet(|s, u: Unbind| async move {
            find(&s, &u.actor_id)?.unbind().await?;
            Ok(())
        })
        .packet(|s, n: NotifyDisconnected| async move {
            find(&s, &n.actor_id)?.notify_disconnected().await?;
            Ok(())
        })
        .packet(|s, _: Bound| async move {
            Ok(s.actors().bound().iter().map(|b| b.actor_ref()).collect())
        })
        .on_replaced(|s, actor| async move {
            let _ = s
                .send(&Replaced {
                    actor_id: actor.to_string(),
                })
                .await;
            Ok(())
        })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{RawRelay, RelayView, session};

    fn in_order(p: &[u8]) -> Option<RelayView<'_>> {
        RawRelay::read_in_order(p).and_then(RawRelay::checked)
    }

    fn any_order(p: &[u8]) -> Option<RelayView<'_>> {
        RawRelay::read_any_order(p).and_then(RawRelay::checked)
    }

    /// One value as rmp-serde writes it, whatever its type.
    mod erased {
        pub(super) trait Enc {
            fn enc(&self) -> Vec<u8>;
        }
        impl<T: serde::Serialize> Enc for T {
            fn enc(&self) -> Vec<u8> {
                rmp_serde::to_vec(self).unwrap()
            }
        }
    }

    fn same(a: &RelayView<'_>, b: &RelayView<'_>) -> bool {
        (a.actor_id, a.key, a.payload, a.timeout_ms) == (b.actor_id, b.key, b.payload, b.timeout_ms)
    }

    /// A mutation of valid bytes: a byte changed, a byte dropped or one appended.
    fn mutate(mut b: Vec<u8>, at: usize, byte: u8, how: u8) -> Vec<u8> {
        let i = at % (b.len() + 1);
        match how % 3 {
            0 if i < b.len() => b[i] = byte,
            1 if i < b.len() => {
                b.remove(i);
            }
            _ => b.insert(i, byte),
        }
        b
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// The relay packets as clients write them read the same without serde, and the fast
        /// reader never accepts what rmp-serde refuses (mutated packets).
        #[test]
        fn relay_packets_read_as_serde_reads_them(actor_id in "\\PC{0,40}", key in any::<u32>(),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            timeout_ms in any::<u32>(), request in any::<bool>(), at in any::<usize>(),
            byte in any::<u8>(), how in any::<u8>()) {
            let packet = if request {
                rmp_serde::to_vec_named(&session::RelayRequest {
                    actor_id, key, payload, timeout_ms,
                })
            } else {
                rmp_serde::to_vec_named(&session::RelaySend { actor_id, key, payload })
            }
            .unwrap();
            let fast = RelayView::read(&packet);
            let slow: RelayView<'_> = rmp_serde::from_slice(&packet).unwrap();
            prop_assert!(fast.as_ref().is_some_and(|f| same(f, &slow)));
            // The packets clients write take the in-order path; the any-order one reads them
            // the same.
            let ordered = in_order(&packet);
            prop_assert!(ordered.as_ref().is_some_and(|f| same(f, &slow)));
            let any = any_order(&packet);
            prop_assert!(any.as_ref().is_some_and(|f| same(f, &slow)));
            let bad = mutate(packet, at, byte, how);
            for f in [in_order(&bad), RelayView::read(&bad)].into_iter().flatten() {
                let slow = rmp_serde::from_slice::<RelayView<'_>>(&bad);
                prop_assert!(slow.as_ref().is_ok_and(|s| same(&f, s)));
            }
            // What the fast reader takes before the id's UTF-8 check, `parse` answers as
            // without it: the binding of those bytes; with none, what `rmp-serde` decides
            // (not bound, or its refusal of the packet, e.g. an id that is not UTF-8).
            let parsed = RelayView::parse(bytes::Bytes::from(bad.clone()), |id| {
                Some(Ok::<Vec<u8>, zlink::session::PacketError>(id.to_vec()))
            });
            match (RawRelay::read(&bad), &parsed) {
                (Some(raw), Ok((id, ..))) => prop_assert_eq!(raw.actor_id, &id[..]),
                (Some(_), Err(_)) => prop_assert!(false, "a packet the fast reader took refused"),
                (None, _) => {}
            }
            let unbound = RelayView::parse(bytes::Bytes::from(bad.clone()), |_| {
                None::<Result<(), zlink::session::PacketError>>
            });
            let expected = match rmp_serde::from_slice::<RelayView<'_>>(&bad) {
                Ok(v) => super::not_bound(v.actor_id),
                Err(e) => super::payload_error(&e),
            };
            let got = unbound.err().map(|e| (e.kind, e.detail));
            prop_assert_eq!(got, Some((expected.kind, expected.detail)));
        }

        /// Fields in another order, or fewer / more of them: not the in-order path; the
        /// any-order path reads what rmp-serde reads.
        #[test]
        fn relay_packets_in_any_order_read_as_serde_reads_them(actor_id in "\\PC{1,40}",
            key in any::<u32>(), payload in proptest::collection::vec(any::<u8>(), 0..100),
            timeout_ms in any::<u32>(), order in Just(vec![0usize, 1, 2, 3]).prop_shuffle(),
            fields in 1usize..=4) {
            // A fixmap of the chosen fields, each name and value as rmp-serde writes it.
            let enc = |v: &dyn erased::Enc| v.enc();
            let mut buf = vec![0x80 | fields as u8];
            for &f in order.iter().take(fields) {
                let (name, value) = match f {
                    0 => ("actor_id", enc(&actor_id.as_str())),
                    1 => ("key", enc(&key)),
                    2 => ("payload", enc(&serde_bytes::Bytes::new(&payload))),
                    _ => ("timeout_ms", enc(&timeout_ms)),
                };
                buf.extend(enc(&name));
                buf.extend(value);
            }
            let slow = rmp_serde::from_slice::<RelayView<'_>>(&buf);
            let fast = RelayView::read(&buf);
            match (&fast, &slow) {
                (Some(f), Ok(s)) => prop_assert!(same(f, s)),
                (Some(_), Err(_)) => prop_assert!(false, "fast path accepted what serde refuses"),
                // The fast path reads every complete set of fields in any order.
                (None, Ok(_)) => prop_assert!(fields < 3 || !order[..3].contains(&0)
                    || !order[..3].contains(&1) || !order[..3].contains(&2)),
                (None, Err(_)) => {}
            }
            if order[..fields.min(4)] != [0, 1, 2, 3][..fields.min(4)] {
                prop_assert!(RawRelay::read_in_order(&buf).is_none());
            }
        }
    }
}
