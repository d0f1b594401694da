//! Spots with counting `OnDisconnectActor` hooks and a probe of an actor owner's binding, shared
//! by the session disconnect tests (in-process and against `zlink-node` processes).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use zlink::actor::{
    ActorId, ActorRef, ActorRegistry, HandlerError, SpotHooks, SpotKind, SpotSpec, UserMode,
};
use zlink::node::client::NodeClient;
use zlink::node::{Create, Node};
use zlink_apps::demo::{self, EchoPush};

use super::{TIMEOUT, rid};

pub fn spot(name: &str, kind: SpotKind) -> SpotSpec {
    SpotSpec {
        name: name.to_owned(),
        kind,
    }
}

pub fn per_actor(name: &str) -> SpotSpec {
    spot(name, SpotKind::User(UserMode::PerActor))
}

/// How often each Spot's `OnDisconnectActor` ran, by (Spot, actor id).
#[derive(Clone, Default)]
pub struct HookLog(pub Arc<Mutex<HashMap<(String, String), usize>>>);

impl HookLog {
    pub fn record(&self, spot: &str, actor: &ActorRef) {
        *self
            .0
            .lock()
            .unwrap()
            .entry((spot.to_owned(), actor.id().to_string()))
            .or_default() += 1;
    }

    pub fn count(&self, spot: &str, actor: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .get(&(spot.to_owned(), actor.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    pub fn total(&self) -> usize {
        self.0.lock().unwrap().values().sum()
    }
}

/// A hook that counts its runs and then succeeds (`fail == false`) or fails.
pub fn counting_hook(log: &HookLog, fail: bool) -> SpotHooks {
    let log = log.clone();
    SpotHooks::new().on_disconnect_actor(move |spot: String, ctx: zlink::actor::ActorCtx| {
        let log = log.clone();
        let actor = ctx.actor_ref().clone();
        async move {
            log.record(&spot, &actor);
            if fail {
                Err(HandlerError::new("deliberate on_disconnect_actor failure"))
            } else {
                Ok(())
            }
        }
    })
}

pub fn registry_with(hooks: Vec<(&str, SpotHooks)>) -> ActorRegistry {
    let mut r = demo::registry().unwrap();
    for (name, h) in hooks {
        r.spot_hooks(name, h);
    }
    r
}

pub fn aid(s: &str) -> ActorId {
    ActorId::new(s).unwrap()
}

/// Creates an `echo` actor `id` on `owner` in `spot` (through `via`'s public `Node::create`).
pub async fn echo_in(via: &Node, owner: &str, id: &str, spot: SpotSpec) -> ActorRef {
    via.create(Create::new("echo", aid(id)).in_spot(spot).on(rid(owner)))
        .await
        .unwrap()
}

/// What a framework CALL of `EchoPush` says about the actor owner's binding of `actor`:
/// `true` = registered (the push was accepted), `false` = session-not-bound.
pub async fn bound_at_owner(c: &NodeClient, actor: &ActorRef) -> bool {
    match c.request(actor, &EchoPush(b"probe".to_vec())).await {
        Ok(()) => true,
        Err(e) if e.to_string().contains("session not bound") => false,
        Err(e) => panic!("EchoPush to {}: unexpected {e:?}", actor.id()),
    }
}

/// Waits (bounded, event-driven) until the actor owner no longer holds a binding of `actor`.
pub async fn wait_unbound_at_owner(c: &NodeClient, actor: &ActorRef) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while bound_at_owner(c, actor).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "binding of {} never left its owner",
            actor.id()
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}
