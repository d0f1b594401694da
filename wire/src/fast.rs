//! Hand-written bodies of the per-message records — 24 [`ActorSend`], 36
//! [`BoundSessionSend`] and 160 [`ActorCall`] — beside the serde codec of every record
//! (`frame`).
//!
//! One of these crosses the mesh per relayed packet, push or direct actor send; through
//! `rmp-serde` the 24's body cost about 1,200 instructions to decode and 430 to encode
//! (callgrind), most of it the generic visitor machinery. Invariants:
//! - **Encode** writes the bytes `rmp-serde` writes (the same `rmp` primitives, in field order:
//!   an array of the fields, the smallest integer and length markers), so a peer cannot tell
//!   the two apart; a property test compares them byte for byte.
//! - **Decode** reads only that canonical form and returns `None` for anything else — another
//!   marker, a short or over-long slice, trailing bytes, an invalid identity. The caller then
//!   decodes with `rmp-serde`, which stays the one authority on what is accepted and on every
//!   error. The fast path never accepts bytes `rmp-serde` would refuse, and yields the same
//!   record when both accept (property-tested on valid and mutated bodies).
//! - Every read is a bounds-checked `get`: no panic on untrusted bytes, no arithmetic that can
//!   overflow (lengths come from at most 4 bytes and are checked against the slice).

use bytes::Bytes;

use crate::command::Command;
use crate::frame::{Flags, Frames, Header};
use crate::ids::CorrelationId;
use crate::ids::{
    ActorId, AuthorityOwnerGeneration, BindingGeneration, Deadline, DispatchKey, NodeGeneration,
    ObjectGeneration, OwnerLeaseGeneration, SessionLifecycleGeneration, SessionRid,
    SessionSequence,
};
use crate::msgpack::Reader;
use crate::record::{ActorCall, ActorSend, BoundSessionSend, BoundSessionTail, Record};

/// Fields of a 24 body (one array).
const ACTOR_SEND_FIELDS: usize = 8;
/// Fields of a 160 body (one array).
const ACTOR_CALL_FIELDS: usize = 7;
/// Fields of a 36 body (one array).
const BOUND_SESSION_SEND_FIELDS: usize = 8;

// ---------------------------------------------------------------- encode

/// Room for the largest envelope written here: header, array marker, the longest actor id
/// with its marker, eight integers of at most 9 bytes and the tail's array marker.
const ENVELOPE_MAX: usize = crate::frame::HEADER_LEN + 1 + 5 + ActorId::MAX_LEN + 8 * 9 + 1;

/// An envelope built on the stack, then copied once into a `Bytes` of exactly its size (one
/// allocation; a `Bytes` made from a `Vec` with spare capacity allocates a second block).
#[derive(Clone, Debug)]
struct Out<const N: usize = ENVELOPE_MAX> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Out<N> {
    // Inlined: as calls they cost about 40 instructions per envelope.
    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) -> Option<()> {
        let end = self.len.checked_add(bytes.len())?;
        self.buf.get_mut(self.len..end)?.copy_from_slice(bytes);
        self.len = end;
        Some(())
    }

    /// `v` as `rmp::encode::write_uint` writes it: the smallest unsigned form.
    #[inline(always)]
    fn uint(&mut self, v: u64) -> Option<()> {
        let b = v.to_be_bytes();
        match v {
            0..=0x7f => self.put(&b[7..]),
            0x80..=0xff => self.put(&[0xcc, b[7]]),
            0x100..=0xffff => self.put(&[0xcd, b[6], b[7]]),
            0x1_0000..=0xffff_ffff => self.put(&[0xce, b[4], b[5], b[6], b[7]]),
            _ => {
                self.put(&[0xcf])?;
                self.put(&b)
            }
        }
    }

    /// `s` as `rmp::encode::write_str` writes it.
    #[inline(always)]
    fn text(&mut self, s: &str) -> Option<()> {
        let len = u32::try_from(s.len()).ok()?;
        let b = len.to_be_bytes();
        match len {
            0..=31 => self.put(&[0xa0 | b[3]])?,
            32..=0xff => self.put(&[0xd9, b[3]])?,
            0x100..=0xffff => self.put(&[0xda, b[2], b[3]])?,
            _ => self.put(&[0xdb, b[0], b[1], b[2], b[3]])?,
        }
        self.put(s.as_bytes())
    }

    /// A fixarray marker (`n` < 16).
    #[inline(always)]
    fn array(&mut self, n: u8) -> Option<()> {
        (n < 16).then_some(())?;
        self.put(&[0x90 | n])
    }
}

fn actor_send(r: &ActorSend, o: &mut Out) -> Option<()> {
    o.array(8)?;
    o.text(r.actor.as_str())?;
    o.uint(r.object_generation.get())?;
    o.uint(r.authority_owner_generation.get())?;
    o.uint(r.owner_lease_generation.get())?;
    o.uint(r.session_lifecycle.get())?;
    o.uint(u64::from(r.key.get()))?;
    match r.deadline {
        None => o.put(&[0xc0])?,
        Some(d) => o.uint(u64::from(d.as_millis()))?,
    }
    o.array(2)?;
    o.uint(r.tail.binding_generation.get())?;
    o.uint(r.tail.session_sequence.get())
}

fn bound_session_send(r: &BoundSessionSend, o: &mut Out) -> Option<()> {
    o.array(8)?;
    o.text(r.actor.as_str())?;
    o.uint(r.object_generation.get())?;
    o.uint(r.source_node_generation.get())?;
    o.uint(r.authority_owner_generation.get())?;
    o.uint(r.session_lifecycle.get())?;
    o.uint(r.session.get())?;
    o.uint(r.binding_generation.get())?;
    o.uint(u64::from(r.key.get()))
}

fn actor_call(r: &ActorCall, o: &mut Out) -> Option<()> {
    o.array(7)?;
    o.text(r.actor.as_str())?;
    o.uint(r.object_generation.get())?;
    o.uint(r.authority_owner_generation.get())?;
    o.uint(r.owner_lease_generation.get())?;
    o.uint(r.target_node_generation.get())?;
    o.uint(u64::from(r.key.get()))?;
    match r.deadline {
        None => o.put(&[0xc0]),
        Some(d) => o.uint(u64::from(d.as_millis())),
    }
}

/// `header` followed by the body of a 24, 36 or 160 (the bytes `rmp-serde` writes for it);
/// `None` for any other record (the caller encodes it with `rmp-serde`).
pub(crate) fn envelope(header: &[u8], record: &Record) -> Option<Bytes> {
    let mut o = Out {
        buf: [0; ENVELOPE_MAX],
        len: 0,
    };
    o.put(header)?;
    match record {
        Record::ActorSend(r) => actor_send(r, &mut o)?,
        Record::BoundSessionSend(r) => bound_session_send(r, &mut o)?,
        Record::ActorCall(r) => actor_call(r, &mut o)?,
        _ => return None,
    }
    Some(Bytes::copy_from_slice(o.buf.get(..o.len)?))
}

/// What a binding's one-way 24 adds to its [`ActorSendTemplate`]: the dispatch key (at most
/// 5 bytes), the nil deadline, the tail's array marker and two integers of at most 9 bytes.
const TAIL_MAX: usize = 5 + 1 + 1 + 9 + 9;

/// The envelope of the one-way 24s relayed through one binding, encoded once: the header (no
/// correlation, a payload) and the body's fields that stay the same record after record —
/// target actor, its fences, the session lifecycle, and the binding generation (SB-5.3). Each
/// record then writes only its dispatch key and session sequence ([`Self::frames`]): the
/// bytes are those [`crate::encode`] writes for the whole record, so the receiver decodes and
/// checks it exactly as any other 24.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActorSendTemplate {
    /// Header, array marker, actor, object, authority and lease generations, lifecycle.
    head: Box<[u8]>,
    binding_generation: BindingGeneration,
}

impl ActorSendTemplate {
    /// The header of every envelope of a template: a one-way 24 with a payload.
    const HEADER: Header = Header {
        command: Command::ActorSend,
        flags: Flags::HAS_PAYLOAD,
        correlation: CorrelationId::NONE,
    };

    /// The template of the one-way 24s of `record`'s binding (its key, deadline and session
    /// sequence are not part of it); `None` for a request relay (a deadline).
    #[must_use]
    pub fn new(record: &ActorSend) -> Option<Self> {
        if record.deadline.is_some() {
            return None;
        }
        let header = Self::HEADER;
        let mut o = Out {
            buf: [0; ENVELOPE_MAX],
            len: 0,
        };
        o.put(&header.to_bytes())?;
        o.array(8)?;
        o.text(record.actor.as_str())?;
        o.uint(record.object_generation.get())?;
        o.uint(record.authority_owner_generation.get())?;
        o.uint(record.owner_lease_generation.get())?;
        o.uint(record.session_lifecycle.get())?;
        Some(Self {
            head: o.buf.get(..o.len)?.into(),
            binding_generation: record.tail.binding_generation,
        })
    }

    /// The frames of one one-way 24 of this binding with `key`, `sequence` and `payload`: what
    /// [`crate::encode`] gives for the record with the template's fields, no deadline and no
    /// correlation (one allocation of exactly the envelope's size). The tail has a fixed
    /// bound, so this never fails in practice; if it did, the payload comes back (`Err`) for
    /// the caller to encode the record instead.
    ///
    /// # Errors
    /// The payload, when the tail did not fit (never, see above).
    pub fn frames(
        &self,
        key: DispatchKey,
        sequence: SessionSequence,
        payload: Bytes,
    ) -> Result<Frames, Bytes> {
        self.record(key, sequence, payload)
            .map(TemplateRecord::into_frames)
    }

    /// One one-way 24 of this binding with `key`, `sequence` and `payload`, not yet written
    /// anywhere: its envelope is written where the sender needs it — as a batch sub-record
    /// straight into a frame ([`TemplateRecord::push_sub_record`]) or as its own part
    /// ([`TemplateRecord::into_frames`]) — with the bytes [`Self::frames`] gives.
    ///
    /// # Errors
    /// The payload, when the tail did not fit (never, see [`Self::frames`]).
    pub fn record(
        &self,
        key: DispatchKey,
        sequence: SessionSequence,
        payload: Bytes,
    ) -> Result<TemplateRecord<'_>, Bytes> {
        let mut tail = Out {
            buf: [0; TAIL_MAX],
            len: 0,
        };
        if Self::tail(&mut tail, key, self.binding_generation, sequence).is_none() {
            return Err(payload);
        }
        Ok(TemplateRecord {
            template: self,
            tail,
            payload,
        })
    }

    #[inline(always)]
    fn tail(
        o: &mut Out<TAIL_MAX>,
        key: DispatchKey,
        generation: BindingGeneration,
        sequence: SessionSequence,
    ) -> Option<()> {
        o.uint(u64::from(key.get()))?;
        o.put(&[0xc0])?;
        o.array(2)?;
        o.uint(generation.get())?;
        o.uint(sequence.get())
    }
}

/// One one-way 24 of a binding ([`ActorSendTemplate::record`]): the template's bytes, the
/// record's tail (key, deadline, binding generation, sequence) on the stack, and the payload.
#[derive(Clone, Debug)]
pub struct TemplateRecord<'a> {
    template: &'a ActorSendTemplate,
    tail: Out<TAIL_MAX>,
    payload: Bytes,
}

impl TemplateRecord<'_> {
    /// The header its envelope starts with: a one-way 24 with a payload, no correlation.
    #[must_use]
    pub fn header(&self) -> Header {
        ActorSendTemplate::HEADER
    }

    /// Bytes of its envelope.
    #[must_use]
    pub fn envelope_len(&self) -> usize {
        self.template.head.len() + self.tail.len
    }

    /// Its payload.
    #[must_use]
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// Appends the record as one sub-record of a batch frame being built in `frame`
    /// (exactly what [`crate::batch::push_sub_record`] writes for its frames, without the
    /// envelope written anywhere else first); `false` (nothing written) if the payload does
    /// not fit a `u32` length.
    #[inline]
    #[must_use]
    pub fn push_sub_record(&self, frame: &mut Vec<u8>) -> bool {
        let tail = self.tail.buf.get(..self.tail.len).unwrap_or_default();
        let head = &self.template.head[..];
        let (Ok(elen), Ok(plen)) = (
            u32::try_from(head.len() + tail.len()),
            u32::try_from(self.payload.len()),
        ) else {
            return false;
        };
        frame.reserve(crate::batch::sub_record_len(
            elen as usize,
            Some(self.payload.len()),
        ));
        let [a, b, c, d] = elen.to_be_bytes();
        frame.extend_from_slice(&[2, a, b, c, d]);
        frame.extend_from_slice(head);
        frame.extend_from_slice(tail);
        frame.extend_from_slice(&plen.to_be_bytes());
        frame.extend_from_slice(&self.payload);
        true
    }

    /// The payload, the record given up.
    #[must_use]
    pub fn into_payload(self) -> Bytes {
        self.payload
    }

    /// The record's frames: its envelope in one allocation of exactly its size, and the
    /// payload.
    #[must_use]
    pub fn into_frames(self) -> Frames {
        let tail = self.tail.buf.get(..self.tail.len).unwrap_or_default();
        let mut envelope = Vec::with_capacity(self.template.head.len() + tail.len());
        envelope.extend_from_slice(&self.template.head);
        envelope.extend_from_slice(tail);
        Frames::from_parts(
            ActorSendTemplate::HEADER,
            Bytes::from(envelope),
            Some(self.payload),
        )
    }
}

// ---------------------------------------------------------------- decode

/// The last actor identity the fast decoders built (from a 24, 36 or 160 body), kept by a
/// receiver across records: the same actor receives record after record, so a body naming it
/// again reuses the identity (an `Arc` count increment) instead of checking its UTF-8,
/// validating and allocating it again, and the record's drop frees nothing.
///
/// Exact: whether text bytes are a valid [`ActorId`], and which one, is a pure function of
/// those bytes, so bytes equal to the cached identity's give the identity built from them the
/// first time. Any other bytes are decoded as without a cache (and replace the entry). One
/// entry: a receiver keeps one per decoding thread ([`crate::decode_parts_cached`]).
#[derive(Clone, Debug, Default)]
pub struct IdCache {
    actor: Option<ActorId>,
}

impl IdCache {
    /// The identity named by `bytes` (a string's bytes as read from the body), from the cache
    /// when they are its identity's bytes; `None` if they are not a valid [`ActorId`].
    #[inline]
    fn actor(&mut self, bytes: &[u8]) -> Option<ActorId> {
        if let Some(id) = &self.actor
            && id.as_bytes() == bytes
        {
            return Some(id.clone());
        }
        let id = ActorId::from_bytes(bytes).ok()?;
        self.actor = Some(id.clone());
        Some(id)
    }
}

/// The body of a 24 in its canonical form; `None` for anything else (see the module doc).
#[inline(always)]
pub(crate) fn decode_actor_send(body: &[u8], ids: &mut IdCache) -> Option<ActorSend> {
    let mut r = Reader::new(body);
    if r.array()? != ACTOR_SEND_FIELDS {
        return None;
    }
    let actor = r.text_bytes()?;
    let object_generation = ObjectGeneration::new(r.uint()?);
    let authority_owner_generation = AuthorityOwnerGeneration::new(r.uint()?);
    let owner_lease_generation = OwnerLeaseGeneration::new(r.uint()?);
    let session_lifecycle = SessionLifecycleGeneration::new(r.uint()?);
    let key = DispatchKey::new(r.u32()?);
    let deadline = if r.nil() {
        None
    } else {
        Some(Deadline::from_millis(r.u32()?))
    };
    if r.array()? != 2 {
        return None;
    }
    let binding_generation = BindingGeneration::new(r.uint()?);
    let session_sequence = SessionSequence::new(r.uint()?);
    r.end()?;
    // Validated last: the only allocation (none on a cache hit), made for a body that is
    // otherwise complete.
    let actor = ids.actor(actor)?;
    Some(ActorSend {
        actor,
        object_generation,
        authority_owner_generation,
        owner_lease_generation,
        session_lifecycle,
        key,
        deadline,
        tail: BoundSessionTail {
            binding_generation,
            session_sequence,
        },
    })
}

/// The body of a 160 in its canonical form; `None` for anything else (see the module doc).
#[inline]
pub(crate) fn decode_actor_call(body: &[u8], ids: &mut IdCache) -> Option<ActorCall> {
    let mut r = Reader::new(body);
    if r.array()? != ACTOR_CALL_FIELDS {
        return None;
    }
    let actor = r.text_bytes()?;
    let object_generation = ObjectGeneration::new(r.uint()?);
    let authority_owner_generation = AuthorityOwnerGeneration::new(r.uint()?);
    let owner_lease_generation = OwnerLeaseGeneration::new(r.uint()?);
    let target_node_generation = NodeGeneration::new(r.uint()?);
    let key = DispatchKey::new(r.u32()?);
    let deadline = if r.nil() {
        None
    } else {
        Some(Deadline::from_millis(r.u32()?))
    };
    r.end()?;
    let actor = ids.actor(actor)?;
    Some(ActorCall {
        actor,
        object_generation,
        authority_owner_generation,
        owner_lease_generation,
        target_node_generation,
        key,
        deadline,
    })
}

/// The body of a 36 in its canonical form; `None` for anything else (see the module doc).
pub(crate) fn decode_bound_session_send(
    body: &[u8],
    ids: &mut IdCache,
) -> Option<BoundSessionSend> {
    let mut r = Reader::new(body);
    if r.array()? != BOUND_SESSION_SEND_FIELDS {
        return None;
    }
    let actor = r.text_bytes()?;
    let object_generation = ObjectGeneration::new(r.uint()?);
    let source_node_generation = NodeGeneration::new(r.uint()?);
    let authority_owner_generation = AuthorityOwnerGeneration::new(r.uint()?);
    let session_lifecycle = SessionLifecycleGeneration::new(r.uint()?);
    let session = SessionRid::new(r.uint()?);
    let binding_generation = BindingGeneration::new(r.uint()?);
    let key = DispatchKey::new(r.u32()?);
    r.end()?;
    let actor = ids.actor(actor)?;
    Some(BoundSessionSend {
        actor,
        object_generation,
        source_node_generation,
        authority_owner_generation,
        session_lifecycle,
        session,
        binding_generation,
        key,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde::Serialize;

    use super::*;

    fn serde_bytes<T: Serialize>(v: &T) -> Vec<u8> {
        let mut buf = Vec::new();
        v.serialize(&mut rmp_serde::Serializer::new(&mut buf))
            .unwrap();
        buf
    }

    fn serde_decode<T: for<'de> serde::Deserialize<'de>>(b: &[u8]) -> Option<T> {
        let mut rest = b;
        let v = T::deserialize(&mut rmp_serde::Deserializer::new(&mut rest)).ok()?;
        rest.is_empty().then_some(v)
    }

    /// Integers at every boundary of MessagePack's unsigned forms.
    fn int() -> impl Strategy<Value = u64> {
        prop_oneof![
            0u64..300,
            (0u32..64).prop_map(|s| 1u64 << s),
            (1u32..64).prop_map(|s| (1u64 << s) - 1),
            any::<u64>(),
        ]
    }

    fn id() -> impl Strategy<Value = ActorId> {
        prop_oneof!["[a-z:/0-9]{1,40}", "\\PC{1,40}", "[a-z]{100,128}",]
            .prop_filter_map("valid id", |s| ActorId::new(s).ok())
    }

    prop_compose! {
        fn actor_send()(actor in id(), og in int(), aog in int(), olg in int(), lc in int(),
            key in any::<u32>(), deadline in proptest::option::of(any::<u32>()), bg in int(),
            seq in int()) -> ActorSend {
            ActorSend {
                actor,
                object_generation: ObjectGeneration::new(og),
                authority_owner_generation: AuthorityOwnerGeneration::new(aog),
                owner_lease_generation: OwnerLeaseGeneration::new(olg),
                session_lifecycle: SessionLifecycleGeneration::new(lc),
                key: DispatchKey::new(key),
                deadline: deadline.map(Deadline::from_millis),
                tail: BoundSessionTail {
                    binding_generation: BindingGeneration::new(bg),
                    session_sequence: SessionSequence::new(seq),
                },
            }
        }
    }

    prop_compose! {
        fn bound_session_send()(actor in id(), og in int(), ng in int(), aog in int(),
            lc in int(), session in int(), bg in int(), key in any::<u32>()) -> BoundSessionSend {
            BoundSessionSend {
                actor,
                object_generation: ObjectGeneration::new(og),
                source_node_generation: NodeGeneration::new(ng),
                authority_owner_generation: AuthorityOwnerGeneration::new(aog),
                session_lifecycle: SessionLifecycleGeneration::new(lc),
                session: SessionRid::new(session),
                binding_generation: BindingGeneration::new(bg),
                key: DispatchKey::new(key),
            }
        }
    }

    prop_compose! {
        fn actor_call()(actor in id(), og in int(), aog in int(), olg in int(), ng in int(),
            key in any::<u32>(), deadline in proptest::option::of(any::<u32>())) -> ActorCall {
            ActorCall {
                actor,
                object_generation: ObjectGeneration::new(og),
                authority_owner_generation: AuthorityOwnerGeneration::new(aog),
                owner_lease_generation: OwnerLeaseGeneration::new(olg),
                target_node_generation: NodeGeneration::new(ng),
                key: DispatchKey::new(key),
                deadline: deadline.map(Deadline::from_millis),
            }
        }
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

        #[test]
        fn actor_send_encodes_as_serde_and_decodes_back(r in actor_send()) {
            let fast = envelope(&[], &Record::ActorSend(r.clone())).unwrap();
            prop_assert_eq!(&fast[..], &serde_bytes(&r)[..]);
            prop_assert_eq!(decode_actor_send(&fast, &mut IdCache::default()), Some(r.clone()));
            // A cache that holds this actor (a hit) or another one (a miss) changes nothing.
            let mut ids = IdCache::default();
            for _ in 0..2 {
                prop_assert_eq!(decode_actor_send(&fast, &mut ids), Some(r.clone()));
            }
        }

        #[test]
        fn bound_session_send_encodes_as_serde_and_decodes_back(r in bound_session_send()) {
            let fast = envelope(&[], &Record::BoundSessionSend(r.clone())).unwrap();
            prop_assert_eq!(&fast[..], &serde_bytes(&r)[..]);
            prop_assert_eq!(
                decode_bound_session_send(&fast, &mut IdCache::default()),
                Some(r.clone())
            );
            let mut ids = IdCache::default();
            for _ in 0..2 {
                prop_assert_eq!(decode_bound_session_send(&fast, &mut ids), Some(r.clone()));
            }
        }

        #[test]
        fn actor_call_encodes_as_serde_and_decodes_back(r in actor_call()) {
            let fast = envelope(&[], &Record::ActorCall(r.clone())).unwrap();
            prop_assert_eq!(&fast[..], &serde_bytes(&r)[..]);
            prop_assert_eq!(decode_actor_call(&fast, &mut IdCache::default()), Some(r.clone()));
            let mut ids = IdCache::default();
            for _ in 0..2 {
                prop_assert_eq!(decode_actor_call(&fast, &mut ids), Some(r.clone()));
            }
        }

        /// The 160's fast path accepts only what rmp-serde accepts, with the same record.
        #[test]
        fn mutated_160_bodies_are_never_accepted_beyond_serde(r in actor_call(),
            at in any::<usize>(), byte in any::<u8>(), how in any::<u8>()) {
            let valid = serde_bytes(&r);
            let b = mutate(valid.clone(), at, byte, how);
            let mut warm = IdCache::default();
            prop_assert!(decode_actor_call(&valid, &mut warm).is_some());
            for ids in [&mut IdCache::default(), &mut warm] {
                if let Some(fast) = decode_actor_call(&b, ids) {
                    prop_assert_eq!(Some(fast), serde_decode::<ActorCall>(&b));
                }
            }
        }

        /// A binding's template writes the bytes `encode` writes for each of its one-way 24s.
        #[test]
        fn actor_send_template_writes_what_encode_writes(r in actor_send(),
            payload in proptest::collection::vec(any::<u8>(), 0..8)) {
            let payload = Bytes::from(payload);
            let t = ActorSendTemplate::new(&r);
            prop_assert_eq!(t.is_some(), r.deadline.is_none());
            if let Some(t) = t {
                let frames = t.frames(r.key, r.tail.session_sequence, payload.clone()).unwrap();
                let encoded = crate::encode(
                    &Record::ActorSend(r.clone()),
                    CorrelationId::NONE,
                    Some(payload.clone()),
                ).unwrap();
                prop_assert_eq!(frames.header(), crate::peek_header(frames.envelope()).unwrap());
                // Written straight into a frame: the sub-record of those very frames.
                let record = t.record(r.key, r.tail.session_sequence, payload.clone()).unwrap();
                prop_assert_eq!(record.envelope_len(), frames.envelope().len());
                let mut direct = vec![7u8];
                prop_assert!(record.push_sub_record(&mut direct));
                let mut framed = vec![7u8];
                prop_assert!(crate::batch::push_sub_record(
                    &mut framed,
                    frames.envelope(),
                    frames.payload().map(|p| &p[..]),
                ));
                prop_assert_eq!(direct, framed);
                prop_assert_eq!(frames, encoded);
            }
        }

        /// The fast path accepts only what rmp-serde accepts, with the same record.
        #[test]
        fn mutated_bodies_are_never_accepted_beyond_serde(r in actor_send(),
            p in bound_session_send(), at in any::<usize>(), byte in any::<u8>(),
            how in any::<u8>()) {
            // Each decoded with a fresh cache and with one that holds the unmutated record's
            // actor: a mutation of the identity's bytes must miss the cache and be validated.
            let valid = serde_bytes(&r);
            let b = mutate(valid.clone(), at, byte, how);
            let mut warm = IdCache::default();
            prop_assert!(decode_actor_send(&valid, &mut warm).is_some());
            for ids in [&mut IdCache::default(), &mut warm] {
                if let Some(fast) = decode_actor_send(&b, ids) {
                    prop_assert_eq!(Some(fast), serde_decode::<ActorSend>(&b));
                }
            }
            let valid = serde_bytes(&p);
            let b = mutate(valid.clone(), at, byte, how);
            let mut warm = IdCache::default();
            prop_assert!(decode_bound_session_send(&valid, &mut warm).is_some());
            for ids in [&mut IdCache::default(), &mut warm] {
                if let Some(fast) = decode_bound_session_send(&b, ids) {
                    prop_assert_eq!(Some(fast), serde_decode::<BoundSessionSend>(&b));
                }
            }
        }

        /// `decode_actor_send_cached` is `decode_parts_cached` for a 24 without the `Record`
        /// around it: on whole frames (header and body mutated, payload present or not,
        /// limits met or not) it gives the same header and record or the same error, and
        /// `None` for a frame of another command.
        #[test]
        fn compact_24_decode_is_decode_parts(r in actor_send(), corr in 0u64..3,
            payload in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
            at in any::<usize>(), byte in any::<u8>(), how in any::<u8>(),
            mutated in any::<bool>(), max_envelope in 0usize..200, max_payload in 0usize..10) {
            let payload = payload.map(Bytes::from);
            let frames = crate::encode(
                &Record::ActorSend(r),
                CorrelationId::new(corr),
                Some(Bytes::from_static(b"p")),
            )
            .unwrap();
            let mut env = frames.envelope().to_vec();
            if mutated {
                env = mutate(env, at, byte, how);
            }
            let limits = crate::Limits { max_envelope, max_payload };
            for limits in [limits, crate::Limits::DEFAULT] {
                let (mut a, mut b) = (IdCache::default(), IdCache::default());
                let compact = crate::decode_actor_send_cached(&env, payload.as_ref(), &limits, &mut a);
                let full = crate::decode_parts_cached(&env, payload.clone(), &limits, &mut b);
                match (compact, full) {
                    (Ok(Some((h, s))), Ok(d)) => {
                        prop_assert_eq!(h, d.header);
                        prop_assert_eq!(Record::ActorSend(s), d.record);
                    }
                    // Not a 24: the caller decodes it in full (whatever that gives).
                    (Ok(None), _) => prop_assert_ne!(
                        crate::peek_header(&env).map(|h| h.command).ok(),
                        Some(Command::ActorSend)
                    ),
                    (Err(x), Err(y)) => prop_assert_eq!(format!("{x:?}"), format!("{y:?}")),
                    (x, y) => prop_assert!(false, "compact {:?}, full {:?}", x, y),
                }
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Some(fast) = decode_actor_send(&b, &mut IdCache::default()) {
                prop_assert_eq!(Some(fast), serde_decode::<ActorSend>(&b));
            }
            if let Some(fast) = decode_bound_session_send(&b, &mut IdCache::default()) {
                prop_assert_eq!(Some(fast), serde_decode::<BoundSessionSend>(&b));
            }
            if let Some(fast) = decode_actor_call(&b, &mut IdCache::default()) {
                prop_assert_eq!(Some(fast), serde_decode::<ActorCall>(&b));
            }
        }
    }

    #[test]
    fn non_canonical_forms_fall_back() {
        let r = ActorSend {
            actor: ActorId::new("a").unwrap(),
            object_generation: ObjectGeneration::new(1),
            authority_owner_generation: AuthorityOwnerGeneration::new(1),
            owner_lease_generation: OwnerLeaseGeneration::new(1),
            session_lifecycle: SessionLifecycleGeneration::new(1),
            key: DispatchKey::new(1),
            deadline: None,
            tail: BoundSessionTail {
                binding_generation: BindingGeneration::new(1),
                session_sequence: SessionSequence::new(1),
            },
        };
        let canonical = serde_bytes(&r);
        // The same record as a signed integer (0xd0 1): rmp-serde's business, not ours.
        let mut signed = canonical.clone();
        let at = 1 + 2; // array marker, fixstr "a"
        signed.splice(at..=at, [0xd0, 1]);
        assert_eq!(decode_actor_send(&signed, &mut IdCache::default()), None);
        // Trailing bytes and a truncated body.
        let mut trailing = canonical.clone();
        trailing.push(0);
        assert_eq!(decode_actor_send(&trailing, &mut IdCache::default()), None);
        assert_eq!(
            decode_actor_send(&canonical[..canonical.len() - 1], &mut IdCache::default()),
            None
        );
        // An invalid identity (a control character) is left to the serde path's error.
        let mut bad = canonical.clone();
        bad[2] = b'\n';
        assert_eq!(decode_actor_send(&bad, &mut IdCache::default()), None);
        // Nor does a cache that holds a valid identity let an invalid one through.
        let mut ids = IdCache::default();
        assert_eq!(decode_actor_send(&canonical, &mut ids), Some(r));
        assert_eq!(decode_actor_send(&bad, &mut ids), None);
    }

    /// The cache hands out the identity it holds for equal bytes (a count increment, no new
    /// allocation) and replaces it for other bytes.
    #[test]
    fn id_cache_reuses_the_identity_for_equal_bytes_only() {
        let mut ids = IdCache::default();
        let a = ids.actor(b"actor-a").expect("valid");
        let again = ids.actor(b"actor-a").expect("valid");
        assert!(
            std::ptr::eq(a.as_str(), again.as_str()),
            "the same text, shared"
        );
        let b = ids.actor(b"actor-b").expect("valid");
        assert_eq!(b.as_str(), "actor-b");
        assert!(!std::ptr::eq(
            a.as_str(),
            ids.actor(b"actor-a").expect("valid").as_str()
        ));
        assert_eq!(ids.actor(b"bad\x01"), None);
        assert_eq!(ids.actor(&[0xff, 0xfe]), None);
        assert_eq!(ids.actor(b""), None);
    }
}
