//! Answering an inbound request exactly once: [`ReplyHandle`] and where its reply goes.

use std::sync::Arc;

use bytes::Bytes;

use crate::codec::{self, ErrorKind, Record};
use crate::counters::ReplyOrigin;
use crate::engine::Command;
use crate::error::SendError;
use crate::types::{NodeGeneration, NodeRid};
use crate::{inbound::*, node::*};

#[derive(Clone, Debug)]
pub(crate) enum ReplyTarget {
    Peer {
        node: Arc<NodeRid>,
        generation: NodeGeneration,
    },
    Client {
        session: u64,
    },
}

/// Credit the layer above returned ([`MeshNode::release_credits`]): `records` records of
/// `bytes` bytes in total from `origin`.
pub(crate) struct Released {
    pub origin: Origin,
    pub records: u32,
    pub bytes: u64,
}

/// Answers one inbound request exactly once. Dropping it unanswered sends an `Internal`
/// error reply (EG-15), so the requester always gets a terminal.
#[derive(Debug)]
pub struct ReplyHandle {
    pub(crate) shared: Option<Arc<Shared>>,
    pub(crate) target: ReplyTarget,
    pub(crate) corr: u64,
}

impl ReplyHandle {
    pub(crate) fn new(shared: Arc<Shared>, target: ReplyTarget, corr: u64) -> Self {
        Self {
            shared: Some(shared),
            target,
            corr,
        }
    }

    /// The request's correlation id.
    pub fn correlation(&self) -> u64 {
        self.corr
    }

    /// Whether the answer can still reach the requester: `false` once a client session ended
    /// or began closing (a reply to it is dropped, `ReplyUndeliverable`), so work for it can be
    /// skipped. A peer's request: always `true` (its lifecycle is checked when the reply goes).
    pub fn is_live(&self) -> bool {
        match (&self.target, &self.shared) {
            (ReplyTarget::Client { session }, Some(shared)) => {
                shared.client_budget(*session).is_some()
            }
            (ReplyTarget::Client { .. }, None) => false,
            (ReplyTarget::Peer { .. }, _) => true,
        }
    }

    /// Sends a successful reply (record 145) with `payload` (RouteMesh: on the completion
    /// connection).
    pub fn reply(mut self, payload: Bytes) {
        self.send(Record::Reply(zlink_wire::Reply), Some(payload));
    }

    /// Sends a terminal reply record (e.g. the 38 reply or 43) — it must be a reply record.
    ///
    /// # Errors
    /// [`SendError::Encode`] if `record` is not a reply or its payload rule is violated; the
    /// handle is given back so the caller can still answer.
    pub fn reply_record(
        mut self,
        record: Record,
        payload: Option<Bytes>,
    ) -> Result<(), Box<(Self, SendError)>> {
        if !record.is_reply() {
            return Err(Box::new((
                self,
                SendError::Encode("not a reply record".into()),
            )));
        }
        if let Err(e) = codec::encode(&record, self.corr, payload.clone()) {
            return Err(Box::new((self, SendError::Encode(e.to_string()))));
        }
        self.send(record, payload);
        Ok(())
    }

    /// Sends an error reply (146); `detail` is cut to 256 bytes.
    pub fn error(mut self, kind: ErrorKind, detail: impl Into<String>) {
        self.send(
            Record::ErrorReply(zlink_wire::ErrorReply::new(kind, detail)),
            None,
        );
    }

    pub(crate) fn send(&mut self, record: Record, payload: Option<Bytes>) {
        let Some(shared) = self.shared.take() else {
            return;
        };
        let to = match self.target {
            ReplyTarget::Peer { .. } => ReplyOrigin::Peer,
            ReplyTarget::Client { .. } => ReplyOrigin::Client,
        };
        let error = match &record {
            Record::ErrorReply(e) => Some(e.kind),
            _ => None,
        };
        shared.counters.reply(to, error);
        let Ok(frames) = codec::encode(&record, self.corr, payload) else {
            return;
        };
        let _ = shared.submit(Command::Reply {
            to: self.target.clone(),
            frames,
        });
    }
}

impl Drop for ReplyHandle {
    fn drop(&mut self) {
        if self.shared.is_some() {
            self.send(
                Record::ErrorReply(zlink_wire::ErrorReply::new(
                    ErrorKind::Internal,
                    "request dropped without reply",
                )),
                None,
            );
        }
    }
}
