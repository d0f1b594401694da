//! The envelope cache: the encoded envelopes of repeated (command, key) pairs kept once per
//! process, and the frame parts of one-way records and pushes built from them.

use crate::hashing::FastMap;
use std::sync::{Mutex, OnceLock};

use bytes::Bytes;

use crate::codec::{self, Parts, Record};
use crate::error::SendError;
use crate::types::DispatchKey;

/// Most distinct (command, dispatch key) pairs whose envelope is kept for the life of the
/// process.
pub(crate) const MAX_STATIC_ENVELOPES: usize = 4096;

/// One-way (147) and push (148) envelopes by (command, key), encoded once per process and
/// never freed (at most [`MAX_STATIC_ENVELOPES`] of ~14 bytes; keys come from local code, not
/// the network). Such an envelope depends only on its key, so every send with that key shares
/// one static buffer: nothing is allocated by the sender nor freed by the I/O thread, and no
/// reference count is touched per record.
pub(crate) static STATIC_ENVELOPES: Mutex<Option<FastMap<u64, &'static [u8]>>> = Mutex::new(None);

/// Slots of [`ENVELOPE_SLOTS`].
pub(crate) const ENVELOPE_SLOT_COUNT: usize = 1024;

/// Lock-free front of [`STATIC_ENVELOPES`]: a direct-mapped table, each slot set once to the
/// first kept envelope whose key hashes there and never changed. A send finds its envelope
/// with one acquire load and no lock, from any thread (no thread-local cache); a key whose slot
/// belongs to another key takes the lock instead.
pub(crate) static ENVELOPE_SLOTS: [OnceLock<(u64, &'static [u8])>; ENVELOPE_SLOT_COUNT] =
    [const { OnceLock::new() }; ENVELOPE_SLOT_COUNT];

pub(crate) fn static_key(command: zlink_wire::Command, key: DispatchKey) -> u64 {
    (u64::from(command.number()) << 32) | u64::from(key.get())
}

pub(crate) fn envelope_slot(key: u64) -> &'static OnceLock<(u64, &'static [u8])> {
    // Fibonacci hashing: the top bits of the product spread consecutive keys over the table.
    let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - ENVELOPE_SLOT_COUNT.trailing_zeros());
    &ENVELOPE_SLOTS[h as usize]
}

/// Keeps `envelope` as the envelope of `key` (or returns the one already kept); `None` once
/// [`MAX_STATIC_ENVELOPES`] are kept.
pub(crate) fn static_envelope(key: u64, envelope: &[u8]) -> Option<&'static [u8]> {
    let kept = {
        let mut g = STATIC_ENVELOPES.lock().unwrap_or_else(|e| e.into_inner());
        let map = g.get_or_insert_with(FastMap::default);
        match map.get(&key) {
            Some(e) => *e,
            None if map.len() >= MAX_STATIC_ENVELOPES => return None,
            None => {
                let kept: &'static [u8] = Box::leak(envelope.to_vec().into_boxed_slice());
                map.insert(key, kept);
                kept
            }
        }
    };
    // First key to reach the slot keeps it; another key's envelope stays behind the lock.
    let _ = envelope_slot(key).set((key, kept));
    Some(kept)
}

/// The kept envelope for `key`, if any: its slot without a lock, else one short lock; no
/// allocation.
pub(crate) fn kept_envelope(key: u64) -> Option<&'static [u8]> {
    match envelope_slot(key).get() {
        Some(&(k, e)) if k == key => Some(e),
        // An empty slot: nothing is kept for `key` (keeping sets the slot first time round).
        None => None,
        Some(_) => {
            let g = STATIC_ENVELOPES.lock().unwrap_or_else(|e| e.into_inner());
            g.as_ref().and_then(|m| m.get(&key).copied())
        }
    }
}

/// The parts of a record without correlation that depends on `key` only (one-way 147, push
/// 148): the kept envelope shared from [`STATIC_ENVELOPES`] after the first use of that key,
/// else a fresh encode of `record`, then kept.
pub(crate) fn keyed_parts(
    command: zlink_wire::Command,
    key: DispatchKey,
    record: impl FnOnce() -> Record,
    payload: Bytes,
) -> Result<Parts, SendError> {
    let skey = static_key(command, key);
    if let Some(envelope) = kept_envelope(skey) {
        return Ok(Parts::new(Bytes::from_static(envelope), Some(payload)));
    }
    let parts =
        codec::encode(&record(), 0, Some(payload)).map_err(|e| SendError::Encode(e.to_string()))?;
    static_envelope(skey, &parts[0]);
    Ok(parts)
}

/// The parts of a push 148 record with `key` and `payload`, byte-identical to
/// `codec::encode(&Record::Push(..), 0, Some(payload))`.
pub(crate) fn push_parts(key: DispatchKey, payload: Bytes) -> Result<Parts, SendError> {
    keyed_parts(
        zlink_wire::Command::Push,
        key,
        || Record::Push(zlink_wire::Push { key }),
        payload,
    )
}

/// The parts of a one-way 147 record with `key` and `payload`, byte-identical to
/// `codec::encode(&Record::OneWay(..), 0, Some(payload))`.
pub(crate) fn one_way_parts(key: DispatchKey, payload: Bytes) -> Result<Parts, SendError> {
    keyed_parts(
        zlink_wire::Command::OneWay,
        key,
        || Record::OneWay(zlink_wire::OneWay { key }),
        payload,
    )
}
