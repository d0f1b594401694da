//! The operator's read-only client operations (`LIST_ACTORS`, `LIST_SESSIONS`; `COUNTERS` is
//! [`Node::counters`]), used by `zlink-node ctl`. They page through the node's own tables, at
//! most [`protocol::MAX_PAGE`] entries per reply, and change nothing.

use std::collections::HashMap;

use super::protocol::{
    self, ActorEntry, ActorList, ListActors, ListSessions, SessionEntry, SessionList,
};
use super::{Node, lock};

fn page_size(limit: u32) -> usize {
    (if limit == 0 {
        protocol::MAX_PAGE
    } else {
        limit.min(protocol::MAX_PAGE)
    }) as usize
}

impl Node {
    /// One page of the actors this node owns, ascending by id (`LIST_ACTORS`).
    #[must_use]
    pub fn list_actors(&self, req: &ListActors) -> ActorList {
        let limit = page_size(req.limit);
        let (total, mut page, more) = {
            let actors = lock(&self.inner.actors);
            let mut ids: Vec<&zlink_wire::ActorId> = actors
                .live
                .keys()
                .filter(|id| req.after.as_deref().is_none_or(|after| id.as_str() > after))
                .collect();
            let more = ids.len() > limit;
            if more {
                ids.select_nth_unstable_by(limit, |a, b| a.as_str().cmp(b.as_str()));
                ids.truncate(limit);
            }
            let page: Vec<(ActorEntry, String)> = ids
                .into_iter()
                .filter_map(|id| actors.live.get(id))
                .map(|a| {
                    let r = &a.actor_ref;
                    (
                        ActorEntry {
                            actor_id: r.id().to_string(),
                            actor_type: r.actor_type().to_owned(),
                            object_generation: r.object_generation().get(),
                            spot: a.spot.clone(),
                            spot_kind: String::new(),
                            bound: a.binding.current().is_some(),
                        },
                        a.spot.clone(),
                    )
                })
                .collect();
            (actors.live.len() as u64, page, more)
        };
        // The Spot kinds, after the actors lock is released (never both at once).
        let kinds: HashMap<String, &'static str> = lock(&self.inner.spots)
            .iter()
            .map(|(name, s)| (name.clone(), super::metrics::spot_kind_name(s.kind)))
            .collect();
        page.sort_by(|a, b| a.0.actor_id.cmp(&b.0.actor_id));
        let actors: Vec<ActorEntry> = page
            .into_iter()
            .map(|(mut e, spot)| {
                e.spot_kind = kinds.get(&spot).copied().unwrap_or("unknown").to_owned();
                e
            })
            .collect();
        let next = if more {
            actors.last().map(|a| a.actor_id.clone())
        } else {
            None
        };
        ActorList {
            total,
            actors,
            next,
        }
    }

    /// One page of this node's client sessions, ascending by id (`LIST_SESSIONS`).
    #[must_use]
    pub fn list_sessions(&self, req: &ListSessions) -> SessionList {
        let limit = page_size(req.limit);
        let views = self.inner.sessions.views();
        let total = views.len() as u64;
        let mut rest = views
            .into_iter()
            .filter(|v| req.after.is_none_or(|after| v.session.get() > after));
        let sessions: Vec<SessionEntry> = rest
            .by_ref()
            .take(limit)
            .map(|v| SessionEntry {
                session: v.session.get(),
                phase: v.phase.to_owned(),
                bound: v.bound.iter().map(ToString::to_string).collect(),
                pending_binds: v.pending_binds as u64,
            })
            .collect();
        let next = if rest.next().is_some() {
            sessions.last().map(|s| s.session)
        } else {
            None
        };
        SessionList {
            total,
            sessions,
            next,
        }
    }
}
