//! Demo actor types hosted by `zlink-node` (and used by the examples and tests):
//!
//! | type | messages |
//! |---|---|
//! | `counter` | [`Add`] → new total, [`Get`] → total |
//! | `echo` | [`Echo`] → the same bytes |
//! | `room` | [`Join`] → member count, [`Say`] → message sequence number, [`Relay`] → the reply of an `echo` actor the room calls (actor → actor, possibly cross-node) |
//! | `failing` | [`Fail`] → always a handler error (EG-15 error reply) |

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use zlink_wire::DispatchKey;

use crate::actor::{
    ActorConfigError, ActorRef, ActorRegistry, ActorTypeBuilder, Handled, HandlerError, Message,
};

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

/// Joins a room; replies the member count.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Join {
    /// Player name.
    pub player: String,
}
impl Message for Join {
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
pub struct Relay {
    /// The echo actor.
    pub target: ActorRef,
    /// Bytes to echo.
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
    /// Timeout of the inner request in ms.
    pub timeout_ms: u32,
}
impl Message for Relay {
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

/// The demo types: `counter`, `echo`, `room`, `failing`.
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
        .build()?,
    )?;
    r.register(
        ActorTypeBuilder::new("echo", |_info, _init| Ok(()))
            .handle(|_: &mut (), _ctx, msg: Echo| Handled::ok(msg))
            .build()?,
    )?;
    r.register(
        ActorTypeBuilder::new("room", |_info, _init| Ok(Room::default()))
            .handle(|room: &mut Room, _ctx, j: Join| {
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
            .handle(|_room: &mut Room, ctx, r: Relay| {
                let node = ctx.node().clone();
                Handled::later(async move {
                    node.request(
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
        ActorTypeBuilder::new("failing", |_info, _init| Ok(()))
            .handle(|_: &mut (), _ctx, _: Fail| {
                Handled::err(HandlerError::new("deliberate failure"))
            })
            .build()?,
    )?;
    Ok(r)
}
