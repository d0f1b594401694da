//! A multi-room chat / lobby on sessions bound to actors (hosted by `zlink-node` next to the demo
//! session app of [`crate::demo`]; driven by `examples/chat.rs`).
//!
//! # Actors
//! | type | id | Spot | state |
//! |---|---|---|---|
//! | `chat_player` | `player:<name>` | [`PLAYERS_SPOT`] (User, PerActor) | its name, its room, online |
//! | `chat_room` | `room:<name>` | [`ROOMS_SPOT`] (User, SpotWide) | members (player, ref, online), line sequence |
//!
//! Both types can be relocated (`zlink-node ctl relocate`): their state travels with them (the
//! migration contract). A ref a room or player keeps to a moved actor reaches it through the
//! old owner's Message Follow for its bounded time (SB-5.12).
//!
//! Both are placed by a stable hash of their id over the mesh's nodes ([`home_node`]); when the
//! home node cannot activate (down), on the contacted node. So a player's actor, its session and
//! its room are usually on three different nodes, and relays (24), actor sends (160) and pushes
//! (36) cross the mesh.
//!
//! Players live in a **PerActor User Spot** of their own name: each player has its own gate, so
//! players run concurrently, and the Spot carries this module's `OnDisconnectActor` hook
//! ([`SpotHooks`], SB-7.6) without touching the Entry Spot's other actors. Rooms live in a
//! **SpotWide User Spot**: the rooms of one node share the Spot's gate, so a room's membership
//! and line sequence change one turn at a time; room handlers only ever *send* (one-way) to
//! players, so a room never holds the shared gate while waiting for another actor.
//!
//! # Session packets (application keys 50..=59; the demo app uses 1..=7 and push 100)
//! | key | packet | reply |
//! |---|---|---|
//! | 50 | [`Login`] `{player, room}` | [`LoggedIn`] |
//! | 51 | [`Say`] `{text}` | [`Said`] `{seq, recipients}` |
//! | 52 | [`Leave`] | the room left (`Option<String>`) |
//! | 53 | [`Who`] | the room's members ([`Member`]) |
//!
//! Pushes to the client: 55 [`ChatLine`], 56 [`Kicked`], 57 [`Presence`].
//!
//! # Flows
//! - **Login**: get-or-create `player:<name>` on its home node, `session.actors().bind` (a 38 to
//!   the player's owner), get-or-create `room:<room>` on its home node, then a relayed request
//!   to the player, which enters the room (a request to the room). The room tells its other
//!   online members a [`Presence`] (`Joined`, or `Online` for a member coming back). A session
//!   is logged in as one player at a time.
//! - **Say**: relayed to the bound player → a request to its room → the room sends a
//!   [`ChatLine`] to each online member player → each player `ctx.push`es it to its bound
//!   session (36).
//! - **Duplicate login**: a second session logging in as the same player binds the same actor:
//!   the binding moves (SB-6); the old session's replaced-callback pushes [`Kicked`], then the
//!   framework closes the old connection 100 ms later with reason `Replaced`.
//! - **Disconnect**: the framework notifies each bound actor's Spot (SB-7.1); the players'
//!   Spot hook sends the player `Offline`, which marks it offline in its room; the room tells
//!   the other online members a `Presence` `Offline`. Neither the actor nor the membership
//!   changes (a later Login brings the member back `Online`).
//!
//! The Login callback finds or creates its actors through the session
//! ([`Session::get_or_create`], SB-1 step 2); the players' Spot hook gets the player's
//! [`ActorCtx`] and sends it `Offline`.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use zlink_wire::{ActorId, DispatchKey, ErrorKind, NodeRid};

use zlink::actor::{
    ActorConfigError, ActorCtx, ActorRef, ActorRegistry, ActorTypeBuilder, Handled, HandlerError,
    Message, SpotHooks, SpotKind, SpotSpec, UserMode,
};
use zlink::node::Create;
use zlink::session::{BoundActor, PacketError, Session, SessionHandlers};

/// The player actor type.
pub const PLAYER_TYPE: &str = "chat_player";
/// The room actor type.
pub const ROOM_TYPE: &str = "chat_room";
/// The Spot of player actors (User, PerActor; carries the disconnect hook).
pub const PLAYERS_SPOT: &str = "chat-players";
/// The Spot of room actors (User, SpotWide).
pub const ROOMS_SPOT: &str = "chat-rooms";

const PLAYER_PREFIX: &str = "player:";
const ROOM_PREFIX: &str = "room:";
/// Timeout of the requests behind one packet (relay, player → room).
const STEP_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest player or room name (bytes).
pub const MAX_NAME: usize = 64;

/// The ActorId of player `name`.
#[must_use]
pub fn player_id(name: &str) -> String {
    format!("{PLAYER_PREFIX}{name}")
}

/// The ActorId of room `name`.
#[must_use]
pub fn room_id(name: &str) -> String {
    format!("{ROOM_PREFIX}{name}")
}

/// The home node of actor `id`: FNV-1a 64 of the id modulo the number of nodes, over the node
/// names sorted (so every node and client computes the same answer). `None` for no nodes.
#[must_use]
pub fn home_node<S: AsRef<str>>(id: &str, nodes: &[S]) -> Option<String> {
    let mut sorted: Vec<&str> = nodes.iter().map(AsRef::as_ref).collect();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.is_empty() {
        return None;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let i = usize::try_from(h % sorted.len() as u64).unwrap_or(0);
    Some(sorted[i].to_owned())
}

// ------------------------------------------------------------------------------------------
// Session packets and pushes
// ------------------------------------------------------------------------------------------

/// A room member as [`LoggedIn`] and [`Who`] list it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Player name.
    pub player: String,
    /// Whether its session is connected.
    pub online: bool,
}

/// Packet 50: log in as `player` and enter `room` (replaces another session of that player).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Login {
    /// Player name.
    pub player: String,
    /// Room name.
    pub room: String,
}
impl Message for Login {
    const KEY: DispatchKey = DispatchKey::new(50);
    type Reply = LoggedIn;
}

/// The reply of [`Login`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedIn {
    /// Player name.
    pub player: String,
    /// Room name.
    pub room: String,
    /// The node owning the player actor.
    pub player_node: String,
    /// The node owning the room actor.
    pub room_node: String,
    /// The node holding this session.
    pub session_node: String,
    /// The room's members after the login.
    pub members: Vec<Member>,
}

/// Packet 51: say `text` in the player's room.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Say {
    /// Text.
    pub text: String,
}
impl Message for Say {
    const KEY: DispatchKey = DispatchKey::new(51);
    type Reply = Said;
}

/// The reply of [`Say`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Said {
    /// The line's sequence number in its room.
    pub seq: u64,
    /// Online members the room sent the line to (the speaker included).
    pub recipients: u32,
}

/// Packet 52: leave the room (the session stays logged in as the player); replies the room
/// left, if any.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Leave;
impl Message for Leave {
    const KEY: DispatchKey = DispatchKey::new(52);
    type Reply = Option<String>;
}

/// Packet 53: the members of the player's room.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Who;
impl Message for Who {
    const KEY: DispatchKey = DispatchKey::new(53);
    type Reply = Vec<Member>;
}

/// Push 55: a line said in the player's room.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatLine {
    /// Room name.
    pub room: String,
    /// Speaker.
    pub from: String,
    /// The room's sequence number of the line.
    pub seq: u64,
    /// Text.
    pub text: String,
}
impl Message for ChatLine {
    const KEY: DispatchKey = DispatchKey::new(55);
    type Reply = ();
}

/// Push 56: this session lost its player to another session (duplicate login); the connection
/// closes right after (reason `Replaced`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kicked {
    /// Why.
    pub reason: String,
}
impl Message for Kicked {
    const KEY: DispatchKey = DispatchKey::new(56);
    type Reply = ();
}

/// What happened to a room member ([`Presence`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PresenceStatus {
    /// Entered the room.
    Joined,
    /// Came back (logged in again after a disconnect).
    Online,
    /// Its session disconnected; still a member.
    Offline,
    /// Left the room.
    Left,
}

/// Push 57: another member's presence changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Presence {
    /// Room name.
    pub room: String,
    /// The member.
    pub player: String,
    /// What happened.
    pub status: PresenceStatus,
}
impl Message for Presence {
    const KEY: DispatchKey = DispatchKey::new(57);
    type Reply = ();
}

// ------------------------------------------------------------------------------------------
// Actor messages (keys per actor type)
// ------------------------------------------------------------------------------------------

/// Actor messages of `chat_player` (keys 60..) and `chat_room` (keys 70..).
pub mod msg {
    use serde::{Deserialize, Serialize};
    use zlink_wire::DispatchKey;

    use super::{ChatLine, Member, Presence, Said};
    use zlink::actor::{ActorRef, Message};

    /// Player: enter `room` (leaving the previous one); replies the members.
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct Join {
        /// Room name.
        pub room: String,
        /// The room actor.
        pub room_ref: ActorRef,
    }
    impl Message for Join {
        const KEY: DispatchKey = DispatchKey::new(60);
        type Reply = Vec<Member>;
    }

    /// Player: say a line in its room.
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct PlayerSay {
        /// Text.
        pub text: String,
    }
    impl Message for PlayerSay {
        const KEY: DispatchKey = DispatchKey::new(61);
        type Reply = Said;
    }

    /// Player: leave its room; replies the room left.
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct PlayerLeave;
    impl Message for PlayerLeave {
        const KEY: DispatchKey = DispatchKey::new(62);
        type Reply = Option<String>;
    }

    /// Player: its room's members.
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct PlayerWho;
    impl Message for PlayerWho {
        const KEY: DispatchKey = DispatchKey::new(63);
        type Reply = Vec<Member>;
    }

    /// Player (sent by its room): push this line to the bound session.
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct Deliver(pub ChatLine);
    impl Message for Deliver {
        const KEY: DispatchKey = DispatchKey::new(64);
        type Reply = ();
    }

    /// Player (sent by its room): push this presence change to the bound session.
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct Notify(pub Presence);
    impl Message for Notify {
        const KEY: DispatchKey = DispatchKey::new(65);
        type Reply = ();
    }

    /// Player (sent by the players' Spot hook): its session disconnected.
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct Offline;
    impl Message for Offline {
        const KEY: DispatchKey = DispatchKey::new(66);
        type Reply = ();
    }

    /// Room: `player` enters (or comes back online); replies the members.
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct RoomJoin {
        /// Player name.
        pub player: String,
        /// The player actor.
        pub player_ref: ActorRef,
    }
    impl Message for RoomJoin {
        const KEY: DispatchKey = DispatchKey::new(70);
        type Reply = Vec<Member>;
    }

    /// Room: a line from `from`; replies its sequence number and recipient count.
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct RoomSay {
        /// Speaker.
        pub from: String,
        /// Text.
        pub text: String,
    }
    impl Message for RoomSay {
        const KEY: DispatchKey = DispatchKey::new(71);
        type Reply = Said;
    }

    /// Room: `player` leaves.
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct RoomLeave {
        /// Player name.
        pub player: String,
    }
    impl Message for RoomLeave {
        const KEY: DispatchKey = DispatchKey::new(72);
        type Reply = ();
    }

    /// Room: `player` went offline (membership unchanged).
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct RoomOffline {
        /// Player name.
        pub player: String,
    }
    impl Message for RoomOffline {
        const KEY: DispatchKey = DispatchKey::new(73);
        type Reply = ();
    }

    /// Room: its members.
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct RoomWho;
    impl Message for RoomWho {
        const KEY: DispatchKey = DispatchKey::new(74);
        type Reply = Vec<Member>;
    }
}

use msg::{
    Deliver, Join, Notify, Offline, PlayerLeave, PlayerSay, PlayerWho, RoomJoin, RoomLeave,
    RoomOffline, RoomSay, RoomWho,
};

// ------------------------------------------------------------------------------------------
// Actor state and handlers
// ------------------------------------------------------------------------------------------

/// A player's state (its migration state too: it travels when the player is relocated).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Player {
    name: String,
    room: Option<(String, ActorRef)>,
    online: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct RoomMember {
    player: String,
    actor: ActorRef,
    online: bool,
}

/// A room's state (its migration state too: it travels when the room is relocated).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Room {
    name: String,
    seq: u64,
    members: Vec<RoomMember>,
}

impl Room {
    fn listing(&self) -> Vec<Member> {
        self.members
            .iter()
            .map(|m| Member {
                player: m.player.clone(),
                online: m.online,
            })
            .collect()
    }

    /// Online members other than `except`.
    fn others(&self, except: &str) -> Vec<ActorRef> {
        self.members
            .iter()
            .filter(|m| m.online && m.player != except)
            .map(|m| m.actor.clone())
            .collect()
    }

    fn presence(&self, player: &str, status: PresenceStatus) -> Presence {
        Presence {
            room: self.name.clone(),
            player: player.to_owned(),
            status,
        }
    }
}

fn herr(what: &str, e: impl std::fmt::Display) -> HandlerError {
    HandlerError::new(format!("{what}: {e}"))
}

/// Sends `m` to each target, one after the other; a refusal is logged, never fatal (the
/// member may be on a node that just went down).
async fn fan_out<M: Message + Clone>(ctx: &ActorCtx, targets: &[ActorRef], m: &M) {
    for t in targets {
        if let Err(e) = ctx.send(t, m).await {
            tracing::debug!(target_actor = %t.id(), error = %e, "chat: fan-out send refused");
        }
    }
}

/// Pushes to the player's bound session; no session (offline) is not an error.
async fn push_quiet<M: Message>(ctx: &ActorCtx, m: &M) -> Result<(), HandlerError> {
    match ctx.push(m).await {
        Ok(()) => Ok(()),
        Err(e) => {
            tracing::debug!(actor = %ctx.actor_ref().id(), error = %e, "chat: push dropped");
            Ok(())
        }
    }
}

fn strip<'a>(id: &'a ActorId, prefix: &str) -> &'a str {
    id.as_str().strip_prefix(prefix).unwrap_or(id.as_str())
}

fn player_type() -> Result<zlink::actor::ActorType, ActorConfigError> {
    ActorTypeBuilder::new(PLAYER_TYPE, |info, _init| {
        Ok(Player {
            name: strip(&info.actor_id, PLAYER_PREFIX).to_owned(),
            room: None,
            online: true,
        })
    })
    .handle(|p: &mut Player, ctx, j: Join| {
        let old = p.room.replace((j.room.clone(), j.room_ref.clone()));
        p.online = true;
        let ctx = ctx.clone();
        let name = p.name.clone();
        Handled::later(async move {
            if let Some((_, old_ref)) = old.filter(|(_, r)| r.id() != j.room_ref.id()) {
                let leave = RoomLeave {
                    player: name.clone(),
                };
                if let Err(e) = ctx.send(&old_ref, &leave).await {
                    tracing::debug!(error = %e, "chat: leaving the previous room");
                }
            }
            let join = RoomJoin {
                player: name,
                player_ref: ctx.actor_ref().clone(),
            };
            ctx.request(&j.room_ref, &join, STEP_TIMEOUT)
                .await
                .map_err(|e| herr("entering the room", e))
        })
    })
    .handle(|p: &mut Player, ctx, s: PlayerSay| {
        let Some((_, room)) = p.room.clone() else {
            return Handled::err(HandlerError::new(format!("{} is in no room", p.name)));
        };
        let ctx = ctx.clone();
        let say = RoomSay {
            from: p.name.clone(),
            text: s.text,
        };
        Handled::later(async move {
            ctx.request(&room, &say, STEP_TIMEOUT)
                .await
                .map_err(|e| herr("saying", e))
        })
    })
    .handle(|p: &mut Player, ctx, _: PlayerLeave| {
        let Some((name, room)) = p.room.take() else {
            return Handled::ok(None);
        };
        let ctx = ctx.clone();
        let leave = RoomLeave {
            player: p.name.clone(),
        };
        Handled::later(async move {
            ctx.request(&room, &leave, STEP_TIMEOUT)
                .await
                .map_err(|e| herr("leaving", e))?;
            Ok(Some(name))
        })
    })
    .handle(|p: &mut Player, ctx, _: PlayerWho| {
        let Some((_, room)) = p.room.clone() else {
            return Handled::ok(Vec::new());
        };
        let ctx = ctx.clone();
        Handled::later(async move {
            ctx.request(&room, &RoomWho, STEP_TIMEOUT)
                .await
                .map_err(|e| herr("who", e))
        })
    })
    .handle(|_p: &mut Player, ctx, Deliver(line)| {
        let ctx = ctx.clone();
        Handled::later(async move { push_quiet(&ctx, &line).await })
    })
    .handle(|_p: &mut Player, ctx, Notify(presence)| {
        let ctx = ctx.clone();
        Handled::later(async move { push_quiet(&ctx, &presence).await })
    })
    .handle(|p: &mut Player, ctx, _: Offline| {
        if !p.online {
            return Handled::ok(());
        }
        p.online = false;
        let Some((_, room)) = p.room.clone() else {
            return Handled::ok(());
        };
        let ctx = ctx.clone();
        let off = RoomOffline {
            player: p.name.clone(),
        };
        Handled::later(async move {
            ctx.send(&room, &off)
                .await
                .map_err(|e| herr("telling the room", e))
        })
    })
    // Live relocation: the player's name, room and presence travel.
    .migrate(
        |p: &Player| Ok::<_, HandlerError>(p.clone()),
        |_info, p: Player| Ok(p),
    )
    .build()
}

fn room_type() -> Result<zlink::actor::ActorType, ActorConfigError> {
    ActorTypeBuilder::new(ROOM_TYPE, |info, _init| {
        Ok(Room {
            name: strip(&info.actor_id, ROOM_PREFIX).to_owned(),
            seq: 0,
            members: Vec::new(),
        })
    })
    .handle(|r: &mut Room, ctx, j: RoomJoin| {
        let status = match r.members.iter_mut().find(|m| m.player == j.player) {
            Some(m) => {
                m.actor = j.player_ref;
                let back = !m.online;
                m.online = true;
                back.then_some(PresenceStatus::Online)
            }
            None => {
                r.members.push(RoomMember {
                    player: j.player.clone(),
                    actor: j.player_ref,
                    online: true,
                });
                Some(PresenceStatus::Joined)
            }
        };
        let members = r.listing();
        let Some(status) = status else {
            return Handled::ok(members);
        };
        let targets = r.others(&j.player);
        let note = Notify(r.presence(&j.player, status));
        let ctx = ctx.clone();
        Handled::later(async move {
            fan_out(&ctx, &targets, &note).await;
            Ok(members)
        })
    })
    .handle(|r: &mut Room, ctx, s: RoomSay| {
        if !r.members.iter().any(|m| m.player == s.from) {
            return Handled::err(HandlerError::new(format!(
                "{} is not in room {}",
                s.from, r.name
            )));
        }
        r.seq += 1;
        let targets = r.others("");
        let said = Said {
            seq: r.seq,
            recipients: u32::try_from(targets.len()).unwrap_or(u32::MAX),
        };
        let line = Deliver(ChatLine {
            room: r.name.clone(),
            from: s.from,
            seq: r.seq,
            text: s.text,
        });
        let ctx = ctx.clone();
        Handled::later(async move {
            fan_out(&ctx, &targets, &line).await;
            Ok(said)
        })
    })
    .handle(|r: &mut Room, ctx, l: RoomLeave| {
        let before = r.members.len();
        r.members.retain(|m| m.player != l.player);
        if r.members.len() == before {
            return Handled::ok(());
        }
        let targets = r.others(&l.player);
        let note = Notify(r.presence(&l.player, PresenceStatus::Left));
        let ctx = ctx.clone();
        Handled::later(async move {
            fan_out(&ctx, &targets, &note).await;
            Ok(())
        })
    })
    .handle(|r: &mut Room, ctx, o: RoomOffline| {
        let Some(m) = r
            .members
            .iter_mut()
            .find(|m| m.player == o.player && m.online)
        else {
            return Handled::ok(());
        };
        m.online = false;
        let targets = r.others(&o.player);
        let note = Notify(r.presence(&o.player, PresenceStatus::Offline));
        let ctx = ctx.clone();
        Handled::later(async move {
            fan_out(&ctx, &targets, &note).await;
            Ok(())
        })
    })
    .handle(|r: &mut Room, _ctx, _: RoomWho| Handled::ok(r.listing()))
    // Live relocation: the members and the line sequence travel.
    .migrate(
        |r: &Room| Ok::<_, HandlerError>(r.clone()),
        |_info, r: Room| Ok(r),
    )
    .build()
}

// ------------------------------------------------------------------------------------------
// The application
// ------------------------------------------------------------------------------------------

/// The players' Spot.
#[must_use]
pub fn players_spot() -> SpotSpec {
    SpotSpec {
        name: PLAYERS_SPOT.into(),
        kind: SpotKind::User(UserMode::PerActor),
    }
}

/// The rooms' Spot.
#[must_use]
pub fn rooms_spot() -> SpotSpec {
    SpotSpec {
        name: ROOMS_SPOT.into(),
        kind: SpotKind::User(UserMode::SpotWide),
    }
}

/// The chat application: its actor types and Spot hook ([`Chat::registry_into`]), its session
/// packets ([`Chat::sessions`]). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Chat {
    inner: Arc<ChatInner>,
}

#[derive(Debug)]
struct ChatInner {
    /// Every node of the mesh (the placement hash's domain).
    mesh_nodes: Vec<String>,
}

impl Chat {
    /// A chat over the mesh of `mesh_nodes` (every node's name, this one included).
    #[must_use]
    pub fn new<S: Into<String>>(mesh_nodes: impl IntoIterator<Item = S>) -> Self {
        let mut mesh_nodes: Vec<String> = mesh_nodes.into_iter().map(Into::into).collect();
        mesh_nodes.sort_unstable();
        mesh_nodes.dedup();
        Self {
            inner: Arc::new(ChatInner { mesh_nodes }),
        }
    }

    /// The mesh's nodes (sorted).
    #[must_use]
    pub fn mesh_nodes(&self) -> &[String] {
        &self.inner.mesh_nodes
    }

    /// Registers `chat_player`, `chat_room` and the players' Spot hook in `registry`.
    ///
    /// # Errors
    /// A type name already registered.
    pub fn registry_into(&self, registry: &mut ActorRegistry) -> Result<(), ActorConfigError> {
        registry.register(player_type()?)?;
        registry.register(room_type()?)?;
        registry.spot_hooks(
            PLAYERS_SPOT,
            SpotHooks::new().on_disconnect_actor(move |_spot, ctx: ActorCtx| async move {
                let actor = ctx.actor_ref();
                if actor.actor_type() != PLAYER_TYPE {
                    return Ok(());
                }
                ctx.send(actor, &Offline)
                    .await
                    .map_err(|e| herr("marking the player offline", e))
            }),
        );
        Ok(())
    }

    /// `base` plus the chat packets (keys 50..=53) and a replaced-callback. A
    /// [`SessionHandlers`] holds one replaced-callback, so this one serves both apps hosted by
    /// `zlink-node`: a player's session gets [`Kicked`], any other actor's the demo's
    /// [`crate::demo::session::Replaced`] push (what [`crate::demo::sessions`] sends).
    #[must_use]
    pub fn sessions(&self, base: SessionHandlers) -> SessionHandlers {
        let login = self.clone();
        base.packet(move |s, l: Login| {
            let app = login.clone();
            async move { app.login(s, l).await }
        })
        .packet(|s, m: Say| async move {
            Ok(player_of(&s)?
                .request(&PlayerSay { text: m.text }, STEP_TIMEOUT)
                .await?)
        })
        .packet(|s, _: Leave| async move {
            Ok(player_of(&s)?.request(&PlayerLeave, STEP_TIMEOUT).await?)
        })
        .packet(
            |s, _: Who| async move { Ok(player_of(&s)?.request(&PlayerWho, STEP_TIMEOUT).await?) },
        )
        .on_replaced(|s, actor| async move {
            let sent = match actor.as_str().strip_prefix(PLAYER_PREFIX) {
                Some(player) => {
                    s.send(&Kicked {
                        reason: format!("{player} logged in from another session"),
                    })
                    .await
                }
                None => {
                    s.send(&crate::demo::session::Replaced {
                        actor_id: actor.to_string(),
                    })
                    .await
                }
            };
            if let Err(e) = sent {
                tracing::debug!(error = %e, "chat: replaced push dropped");
            }
            Ok(())
        })
    }

    /// Get-or-create on the id's home node; on the contacted node when the home cannot.
    async fn place(
        &self,
        s: &Session,
        actor_type: &str,
        id: &str,
        spot: SpotSpec,
    ) -> Result<ActorRef, PacketError> {
        let actor_id = ActorId::new(id)
            .map_err(|e| PacketError::new(ErrorKind::InvalidOperation, format!("actor id: {e}")))?;
        let create = Create::new(actor_type, actor_id).in_spot(spot);
        let home = home_node(id, &self.inner.mesh_nodes)
            .and_then(|h| NodeRid::new(&h).ok())
            .unwrap_or_else(|| s.owner().clone());
        match s.get_or_create(create.clone().on(home.clone())).await {
            Ok(r) => Ok(r),
            Err(e) if e.kind() == ErrorKind::Unavailable && home != *s.owner() => {
                tracing::warn!(%home, error = %e, "chat: home node unavailable, placing locally");
                Ok(s.get_or_create(create).await?)
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn login(&self, s: Session, l: Login) -> Result<LoggedIn, PacketError> {
        for (what, name) in [("player", &l.player), ("room", &l.room)] {
            if name.is_empty() || name.len() > MAX_NAME {
                return Err(PacketError::new(
                    ErrorKind::InvalidOperation,
                    format!("{what} name must have 1..={MAX_NAME} bytes"),
                ));
            }
        }
        let pid = player_id(&l.player);
        if let Some(other) = s.actors().bound().into_iter().find(|b| {
            b.actor_ref().actor_type() == PLAYER_TYPE && b.actor_ref().id().as_str() != pid
        }) {
            return Err(PacketError::new(
                ErrorKind::InvalidOperation,
                format!(
                    "this session is logged in as {}",
                    strip(other.actor_ref().id(), PLAYER_PREFIX)
                ),
            ));
        }
        let player = self.place(&s, PLAYER_TYPE, &pid, players_spot()).await?;
        let bound = s.actors().bind_or_get(&player).await?;
        let room = self
            .place(&s, ROOM_TYPE, &room_id(&l.room), rooms_spot())
            .await?;
        let members = bound
            .request(
                &Join {
                    room: l.room.clone(),
                    room_ref: room.clone(),
                },
                STEP_TIMEOUT,
            )
            .await?;
        Ok(LoggedIn {
            player: l.player,
            room: l.room,
            player_node: player.node().to_string(),
            room_node: room.node().to_string(),
            session_node: s.owner().to_string(),
            members,
        })
    }
}

/// The session's bound player (`InvalidOperation` when not logged in).
fn player_of(s: &Session) -> Result<BoundActor, PacketError> {
    s.actors()
        .bound()
        .into_iter()
        .find(|b| b.actor_ref().actor_type() == PLAYER_TYPE)
        .ok_or_else(|| PacketError::new(ErrorKind::InvalidOperation, "not logged in"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_node_is_stable_and_order_free() {
        let a = home_node("player:alice", &["n1", "n2", "n3"]);
        let b = home_node("player:alice", &["n3", "n1", "n2"]);
        assert_eq!(a, b);
        assert!(a.is_some());
        assert_eq!(home_node::<&str>("x", &[]), None);
        let spread: std::collections::HashSet<_> = (0..32)
            .filter_map(|i| home_node(&player_id(&format!("p{i}")), &["n1", "n2", "n3"]))
            .collect();
        assert_eq!(spread.len(), 3, "32 ids should land on all 3 nodes");
    }

    #[test]
    fn registry_and_sessions_validate() {
        let chat = Chat::new(["a", "b"]);
        let mut r = crate::demo::registry().unwrap();
        chat.registry_into(&mut r).unwrap();
        assert!(r.get(PLAYER_TYPE).is_some() && r.get(ROOM_TYPE).is_some());
        assert!(r.hooks_of(PLAYERS_SPOT).is_some());
        chat.sessions(crate::demo::sessions()).validate().unwrap();
    }
}
