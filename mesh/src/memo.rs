//! The decode memo (sans-IO): the last decoded envelope of a record kind whose envelopes repeat
//! byte for byte (no correlation, no deadline), so that a run of identical envelopes is decoded
//! once.

use zlink_wire::Decoded;

use crate::codec::Record;

/// Memo of the last decoded envelope of the kinds it keeps. A one-way 147 envelope depends only
/// on its dispatch key (no correlation, no deadline), so a sender repeats the same bytes record
/// after record; so does a binding's 36 (BoundSessionSend: the binding's identity and the key)
/// and a push 148. Decoding is a pure function of (envelope bytes, payload presence, limits): a
/// byte-identical envelope gives the same header and record, so the msgpack decode (and, for a
/// 36, its `ActorId` allocation) is skipped. Every other check still runs per record (payload
/// size, routing id, generation, connection kind, window). The node memoizes 147s and 36s
/// ([`DecodeMemo::default`]); a `MeshClient` memoizes pushes ([`DecodeMemo::for_commands`]).
/// A hit says nothing about where the record may come from: the caller checks the memoized
/// record like a decoded one.
pub(crate) struct DecodeMemo {
    /// The commands this memo keeps (records without correlation and with a payload).
    commands: &'static [zlink_wire::Command],
    len: usize,
    bytes: [u8; MEMO_ENVELOPE],
    hit: Option<(zlink_wire::Header, Record)>,
}

/// Longest envelope kept: a 147 is about 10 bytes, a 36 about 60–90 (its `ActorId` is up to
/// 128 bytes: longer ones are decoded every time).
const MEMO_ENVELOPE: usize = 128;

impl Default for DecodeMemo {
    fn default() -> Self {
        Self::for_commands(&[
            zlink_wire::Command::OneWay,
            zlink_wire::Command::BoundSessionSend,
        ])
    }
}

impl DecodeMemo {
    /// A memo that keeps records of `commands` only.
    pub(crate) fn for_commands(commands: &'static [zlink_wire::Command]) -> Self {
        Self {
            commands,
            len: 0,
            bytes: [0; MEMO_ENVELOPE],
            hit: None,
        }
    }

    /// The memoized header if `envelope` is byte-identical to the memoized one.
    #[inline]
    pub(crate) fn header(&self, envelope: &[u8]) -> Option<zlink_wire::Header> {
        match &self.hit {
            Some((h, _)) if envelope.len() == self.len && envelope == &self.bytes[..self.len] => {
                Some(*h)
            }
            _ => None,
        }
    }

    /// The memoized record (after a hit of [`DecodeMemo::header`]).
    #[inline]
    pub(crate) fn record(&self) -> Record {
        self.record_ref().clone()
    }

    /// The memoized record, borrowed (after a hit of [`DecodeMemo::header`]).
    #[inline]
    pub(crate) fn record_ref(&self) -> &Record {
        self.hit.as_ref().map(|(_, r)| r).expect("memo hit")
    }

    /// The dispatch key of the memoized record if it is a one-way 147.
    pub(crate) fn one_way_key(&self) -> Option<crate::types::DispatchKey> {
        match &self.hit {
            Some((_, Record::OneWay(o))) => Some(o.key),
            _ => None,
        }
    }

    #[cfg(test)]
    fn lookup(&self, envelope: &[u8]) -> Option<(zlink_wire::Header, Record)> {
        self.header(envelope).map(|h| (h, self.record()))
    }

    /// Keeps `decoded` (decoded from `envelope` with a payload present) if it is a record of
    /// one of this memo's commands without correlation.
    pub(crate) fn store(&mut self, envelope: &[u8], decoded: &Decoded) {
        if envelope.len() <= MEMO_ENVELOPE
            && decoded.header.correlation.get() == 0
            && self.commands.contains(&decoded.record.command())
        {
            self.len = envelope.len();
            self.bytes[..envelope.len()].copy_from_slice(envelope);
            self.hit = Some((decoded.header, decoded.record.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{self, Parts};
    use bytes::Bytes;
    use zlink_wire::DispatchKey;

    fn one_way(key: u32) -> Parts {
        codec::encode(
            &Record::OneWay(zlink_wire::OneWay {
                key: DispatchKey::new(key),
            }),
            0,
            Some(Bytes::from_static(b"payload")),
        )
        .unwrap()
    }

    // The memo answers only for a byte-identical one-way envelope, with exactly what the
    // decoder returns for it; other envelopes (other key, requests) are decoded afresh.
    #[test]
    fn decode_memo_matches_the_decoder() {
        let limits = codec::limits(1 << 20);
        let mut memo = DecodeMemo::default();
        let a = one_way(7);
        assert!(memo.lookup(&a[0]).is_none());
        let d = zlink_wire::decode_parts(&a[0], Some(a[1].clone()), &limits).unwrap();
        memo.store(&a[0], &d);
        let (h, r) = memo.lookup(&one_way(7)[0]).expect("hit");
        assert_eq!((h, r), (d.header, d.record));
        assert!(memo.lookup(&one_way(8)[0]).is_none());
        let mut truncated = a[0].to_vec();
        truncated.pop();
        assert!(memo.lookup(&truncated).is_none());

        // A record with a correlation (a request, 42) is never memoized, even by a memo for its
        // command and short enough (its bytes depend on more than the key); nor is a record of
        // another command than the memo's.
        let req = codec::encode(
            &Record::Request(zlink_wire::Request {
                key: DispatchKey::new(7),
                deadline: zlink_wire::Deadline::from_millis(1000),
            }),
            42,
            Some(Bytes::from_static(b"payload")),
        )
        .expect("a request encodes");
        let d = zlink_wire::decode_parts(&req[0], Some(req[1].clone()), &limits).unwrap();
        assert_eq!(d.header.correlation.get(), 42);
        assert!(
            req[0].len() <= MEMO_ENVELOPE,
            "short enough to be memoized by size"
        );
        let mut m = DecodeMemo::for_commands(&[zlink_wire::Command::Request]);
        m.store(&req[0], &d);
        assert!(
            m.lookup(&req[0]).is_none(),
            "records with a correlation are not memoized"
        );
        let mut m = DecodeMemo::default();
        m.store(&req[0], &d);
        assert!(
            m.lookup(&req[0]).is_none(),
            "another command is not memoized"
        );
    }

    fn bound_send(actor: &str) -> Parts {
        use zlink_wire::{
            ActorId, AuthorityOwnerGeneration, BindingGeneration, NodeGeneration, ObjectGeneration,
            SessionLifecycleGeneration, SessionRid,
        };
        let big = u64::MAX / 3; // generations are wall-clock nanoseconds: full-width integers
        codec::encode(
            &Record::BoundSessionSend(zlink_wire::BoundSessionSend {
                actor: ActorId::new(actor).unwrap(),
                object_generation: ObjectGeneration::new(big),
                source_node_generation: NodeGeneration::new(big),
                authority_owner_generation: AuthorityOwnerGeneration::new(big),
                session_lifecycle: SessionLifecycleGeneration::new(big),
                session: SessionRid::new(big),
                binding_generation: BindingGeneration::new(big),
                key: DispatchKey::new(9),
            }),
            0,
            Some(Bytes::from_static(b"payload")),
        )
        .unwrap()
    }

    // A binding's 36 envelopes repeat byte for byte: the node's memo keeps them (a typical
    // actor id fits), answering exactly what the decoder returns; an envelope longer than the
    // memo is decoded every time; a push memo keeps no 36.
    #[test]
    fn the_node_memo_keeps_bound_session_sends() {
        let limits = codec::limits(1 << 20);
        let mut memo = DecodeMemo::default();
        let a = bound_send("user:42/inventory");
        assert!(a[0].len() <= MEMO_ENVELOPE, "{} bytes", a[0].len());
        let d = zlink_wire::decode_parts(&a[0], Some(a[1].clone()), &limits).unwrap();
        memo.store(&a[0], &d);
        assert_eq!(
            memo.lookup(&bound_send("user:42/inventory")[0]),
            Some((d.header, d.record))
        );
        assert_eq!(memo.one_way_key(), None, "not a one-way");
        assert!(memo.lookup(&bound_send("user:43/inventory")[0]).is_none());
        let long = bound_send(&"x".repeat(120));
        assert!(long[0].len() > MEMO_ENVELOPE);
        let d = zlink_wire::decode_parts(&long[0], Some(long[1].clone()), &limits).unwrap();
        memo.store(&long[0], &d);
        assert!(memo.lookup(&long[0]).is_none(), "too long: not kept");
        let mut pushes = DecodeMemo::for_commands(&[zlink_wire::Command::Push]);
        let d = zlink_wire::decode_parts(&a[0], Some(a[1].clone()), &limits).unwrap();
        pushes.store(&a[0], &d);
        assert!(pushes.lookup(&a[0]).is_none());
    }
}
