//! Admission of ClientServer sessions (sans-IO): whether a new client connection may open a
//! session, with which receive window, and the counts that bound what strangers can make a
//! node hold — sessions in all (`MeshConfig::max_clients`) and per source address
//! (`max_clients_per_source`), and, with [`ClientAdmission::OnAccept`], sessions not yet
//! accepted in all and per source ([`Strangers`]). No sockets, no maps of sessions: the driver
//! ([`crate::engine`]) asks [`Admission::open`] on a connection's first record and reports
//! [`Admission::accepted`] and [`Admission::closed`].

use std::sync::Arc;

use crate::config::{ClientAdmission, InboundWindow, MeshConfig, Strangers};
use crate::counters::DropReason;
use crate::hashing::SeededMap;

/// A session [`Admission::open`] let in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Admitted {
    /// Counted as a stranger until [`Admission::accepted`].
    pub(crate) stranger: bool,
    /// Its receive window: the strangers' window, or the full `client_window`.
    pub(crate) window: InboundWindow,
}

/// The session counts of one node's client port (see the module doc).
pub(crate) struct Admission {
    max_sessions: usize,
    max_per_source: usize,
    full_window: InboundWindow,
    strangers_cfg: Option<Strangers>,
    sessions: usize,
    strangers: usize,
    /// Keyed by addresses strangers choose: a seeded hasher.
    sessions_by_source: SeededMap<Arc<str>, usize>,
    strangers_by_source: SeededMap<Arc<str>, usize>,
}

impl Admission {
    /// The bounds of `cfg`, nothing admitted yet.
    pub(crate) fn new(cfg: &MeshConfig) -> Self {
        Self {
            max_sessions: cfg.max_clients,
            max_per_source: cfg.max_clients_per_source,
            full_window: cfg.client_window,
            strangers_cfg: match cfg.client_admission {
                ClientAdmission::Open => None,
                ClientAdmission::OnAccept(st) => Some(st),
            },
            sessions: 0,
            strangers: 0,
            sessions_by_source: SeededMap::default(),
            strangers_by_source: SeededMap::default(),
        }
    }

    /// A new client connection from `source` (its peer address, when known) asks for a
    /// session: admitted and counted, or refused with the reason to count —
    /// `HandshakeCapacity` (all sessions, or all strangers, taken) or `SourceCapacity` (that
    /// address has its share).
    pub(crate) fn open(&mut self, source: Option<&Arc<str>>) -> Result<Admitted, DropReason> {
        if self.sessions >= self.max_sessions {
            return Err(DropReason::HandshakeCapacity);
        }
        let stranger = self.strangers_cfg;
        if let Some(st) = stranger
            && self.strangers >= st.max
        {
            return Err(DropReason::HandshakeCapacity);
        }
        if let Some(src) = source {
            let n = self.sessions_by_source.get(src).copied().unwrap_or(0);
            let m = self.strangers_by_source.get(src).copied().unwrap_or(0);
            if n >= self.max_per_source || stranger.is_some_and(|st| m >= st.max_per_source) {
                return Err(DropReason::SourceCapacity);
            }
            *self.sessions_by_source.entry(src.clone()).or_insert(0) += 1;
            if stranger.is_some() {
                *self.strangers_by_source.entry(src.clone()).or_insert(0) += 1;
            }
        }
        self.sessions += 1;
        if stranger.is_some() {
            self.strangers += 1;
        }
        Ok(Admitted {
            stranger: stranger.is_some(),
            window: stranger.map_or(self.full_window, |st| st.window),
        })
    }

    /// A stranger's session from `source` was accepted: no longer counted as a stranger; its
    /// window grows to the returned one.
    pub(crate) fn accepted(&mut self, source: Option<&Arc<str>>) -> InboundWindow {
        self.strangers = self.strangers.saturating_sub(1);
        if let Some(src) = source {
            count_down(&mut self.strangers_by_source, src);
        }
        self.full_window
    }

    /// A session from `source` ended (`stranger`: it was never accepted).
    pub(crate) fn closed(&mut self, source: Option<&Arc<str>>, stranger: bool) {
        self.sessions = self.sessions.saturating_sub(1);
        if let Some(src) = source {
            count_down(&mut self.sessions_by_source, src);
        }
        if stranger {
            self.strangers = self.strangers.saturating_sub(1);
            if let Some(src) = source {
                count_down(&mut self.strangers_by_source, src);
            }
        }
    }

    /// Sessions not yet accepted.
    #[cfg(test)]
    pub(crate) fn strangers(&self) -> usize {
        self.strangers
    }
}

/// One session from `src` ended (or stopped being a stranger): count it down, forget the
/// source at zero (the maps hold only addresses with live sessions).
fn count_down(by_source: &mut SeededMap<Arc<str>, usize>, src: &Arc<str>) {
    if let Some(n) = by_source.get_mut(src) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            by_source.remove(src);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{MeshName, NodeRid};

    fn cfg(admission: ClientAdmission) -> MeshConfig {
        let mut cfg = MeshConfig::new(MeshName::new("m").unwrap(), NodeRid::new("n").unwrap());
        cfg.max_clients = 4;
        cfg.max_clients_per_source = 3;
        cfg.client_admission = admission;
        cfg
    }

    const SMALL: InboundWindow = InboundWindow {
        messages: 2,
        bytes: 100,
    };

    // spec: SB-2.1 — strangers are bounded in all and per source, and get the small window;
    // accepting one frees its stranger slot (not its session slot) and grants the full
    // window; a closed session frees its slots; a source's entry is forgotten at zero.
    #[test]
    fn strangers_are_bounded_in_all_and_per_source() {
        let cfg = cfg(ClientAdmission::OnAccept(Strangers {
            window: SMALL,
            max: 3,
            max_per_source: 2,
        }));
        let full = cfg.client_window;
        let mut a = Admission::new(&cfg);
        let (x, y): (Arc<str>, Arc<str>) = ("10.0.0.1".into(), "10.0.0.2".into());
        let stranger = Admitted {
            stranger: true,
            window: SMALL,
        };
        assert_eq!(a.open(Some(&x)), Ok(stranger));
        assert_eq!(a.open(Some(&x)), Ok(stranger));
        assert_eq!(a.open(Some(&x)), Err(DropReason::SourceCapacity));
        assert_eq!(a.open(Some(&y)), Ok(stranger));
        assert_eq!(
            a.open(None),
            Err(DropReason::HandshakeCapacity),
            "3 strangers"
        );
        assert_eq!(a.accepted(Some(&x)), full);
        assert_eq!(a.strangers(), 2);
        // The accepted one still holds a session slot of x: x may open one more stranger,
        // then the per-source session bound (3) holds.
        assert_eq!(a.open(Some(&x)), Ok(stranger));
        a.closed(Some(&x), true);
        a.closed(Some(&x), false);
        a.closed(Some(&y), true);
        assert_eq!(a.strangers(), 1);
        assert!(!a.sessions_by_source.contains_key(&y), "forgotten at zero");
        assert_eq!(a.sessions, 1);
    }

    #[test]
    fn open_admission_grants_the_full_window_within_the_session_bounds() {
        let cfg = cfg(ClientAdmission::Open);
        let mut a = Admission::new(&cfg);
        let x: Arc<str> = "10.0.0.1".into();
        let full = Admitted {
            stranger: false,
            window: cfg.client_window,
        };
        for _ in 0..3 {
            assert_eq!(a.open(Some(&x)), Ok(full));
        }
        assert_eq!(a.open(Some(&x)), Err(DropReason::SourceCapacity));
        assert_eq!(a.open(None), Ok(full));
        assert_eq!(
            a.open(None),
            Err(DropReason::HandshakeCapacity),
            "4 sessions"
        );
        a.closed(None, false);
        assert_eq!(a.open(None), Ok(full));
        assert_eq!(a.strangers(), 0);
    }
}
