//! Decoding one received record: the frame and payload views of what a socket gave
//! ([`Rx`], [`Pl`]), the one-way memo in front of the strict decoder, the relay-record
//! routing by command byte, and the relay lane's admission of one record of a run.

use super::*;

/// A record as [`Engine::decode_memoized`] gives it (the decoded record itself goes into the
/// caller's slot: a 160-byte value is moved as few times as possible).
pub(super) struct MemoDecoded {
    pub(super) header: zlink_wire::Header,
    pub(super) class: Class,
    pub(super) payload: Option<Bytes>,
    pub(super) from_memo: bool,
}

/// The engine's fields a decode reads or updates (borrowed apart from the connection maps, so
/// a run can decode while it holds a connection).
pub(super) struct Decoding<'e> {
    pub(super) memo: &'e mut DecodeMemo,
    pub(super) shared: &'e Shared,
    pub(super) limits: &'e Limits,
    pub(super) ids: &'e mut zlink_wire::IdCache,
}

/// A per-message record between nodes by its envelope's command byte (24 ActorSend, 36
/// BoundSessionSend, 160 ActorCall): a routing decision only, the decoder validates the
/// envelope.
#[inline]
pub(super) fn is_relay_record(envelope: &[u8]) -> bool {
    envelope.get(1).is_some_and(|&c| {
        matches!(
            zlink_wire::Command::from_number(c),
            Ok(zlink_wire::Command::ActorSend
                | zlink_wire::Command::BoundSessionSend
                | zlink_wire::Command::ActorCall)
        )
    })
}

/// A 24 ActorSend by its envelope's command byte: a routing decision only, the decoder
/// validates the envelope.
#[inline]
pub(super) fn is_actor_send(envelope: &[u8]) -> bool {
    envelope.get(1) == Some(&zlink_wire::Command::ActorSend.number())
}

/// [`decode_counted`] for a 24 in the compact form (`zlink_wire::decode_actor_send_cached`):
/// the payload bounded first, every rejection counted against `who` exactly as there;
/// `Ok(None)` if the envelope is not a 24 after all.
#[inline(always)]
pub(super) fn decode_actor_send_counted(
    shared: &Shared,
    limits: &Limits,
    envelope: &[u8],
    payload: Option<&Bytes>,
    who: &dyn std::fmt::Display,
    ids: &mut zlink_wire::IdCache,
) -> Result<Option<(zlink_wire::Header, zlink_wire::ActorSend)>, ()> {
    let len = payload.map_or(0, Bytes::len);
    let decoded = if len > limits.max_payload {
        Err(zlink_wire::DecodeError::PayloadTooLarge {
            len,
            max: limits.max_payload,
        })
    } else {
        zlink_wire::decode_actor_send_cached(envelope, payload, limits, ids)
    };
    decoded.map_err(|e| {
        shared
            .counters
            .drop(codec::drop_reason(&e), &format_args!("{who}: {e}"));
    })
}

/// Decodes one record (from a peer or a client, alone or from a batch) through the one-way
/// memo: a repeated one-way envelope (byte-identical to the last one decoded) is not
/// decoded again, its payload bounded and copied as [`decode_counted`] does; anything else
/// is decoded (rejections counted against `who`), its record put into `record`, and
/// classified. On a memo hit `record` stays `None` (the record is cloned from the memo only
/// where it is handed up).
#[inline(always)]
pub(super) fn decode_memoized(
    d: Decoding<'_>,
    envelope: &[u8],
    payload: Pl<'_>,
    who: &dyn std::fmt::Display,
    record: &mut Option<Record>,
) -> Option<MemoDecoded> {
    let memo = match &payload {
        Pl::None => None,
        p if p.len() <= d.limits.max_payload => d.memo.header(envelope),
        _ => None,
    };
    if let Some(header) = memo {
        // The memo holds only 147 and 36 records: application class.
        return Some(MemoDecoded {
            header,
            class: Class::App,
            payload: payload.into_bytes(),
            from_memo: true,
        });
    }
    let has_payload = !matches!(payload, Pl::None);
    let Ok(decoded) = decode_counted(d.shared, d.limits, envelope, payload, who, d.ids) else {
        return None;
    };
    if has_payload {
        d.memo.store(envelope, &decoded);
    }
    let class = codec::classify(&decoded.record);
    let zlink_wire::Decoded {
        header,
        record: decoded,
        payload,
    } = decoded;
    *record = Some(decoded);
    Some(MemoDecoded {
        header,
        class,
        payload,
        from_memo: false,
    })
}

/// A message read from a socket, as the receive pass hands it to ingress.
pub(crate) enum Rx<'a> {
    /// Its parts after the routing id, borrowed from the reused receive buffers.
    Parts(&'a [&'a [u8]]),
    /// A single-part 139 batch frame: the libzmq message itself, taken out of the receive
    /// buffer and wrapped without copying ([`ZmqFrame`]). It lives only for the frame's
    /// [`Engine::on_batch`]: every payload is copied out of it ([`unpin`]).
    Batch(Bytes),
}

/// A received libzmq message as the owner of a [`Bytes`] (zero-copy receive of a batch frame).
pub(crate) struct ZmqFrame(pub(crate) zmq::Message);

impl AsRef<[u8]> for ZmqFrame {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// A batch sub-record whose payload no longer points into the batch frame (copied out): a
/// record the node holds pins only its own bytes, which its window charge counts. Slices would
/// keep the whole frame alive — a frame of junk around one small valid record pinned the frame
/// (up to the message limit) for a few bytes charged. Copied from the plain slice: no shared
/// handle on the frame is taken and dropped per record.
#[inline]
pub(super) fn unpin(r: zlink_wire::RawRecord<'_>) -> zlink_wire::BatchRecord<'_> {
    zlink_wire::BatchRecord {
        envelope: r.envelope,
        payload: r.payload.map(Bytes::copy_from_slice),
    }
}

/// The payload part of a received record: none, a slice of a libzmq frame (copied once into
/// its own `Bytes` after the size check, so libzmq's receive buffer is not pinned), or a slice
/// already shared from a batch frame's buffer.
pub(crate) enum Pl<'a> {
    None,
    Copy(&'a [u8]),
    Shared(Bytes),
}

impl Pl<'_> {
    #[inline]
    pub(super) fn len(&self) -> usize {
        match self {
            Pl::None => 0,
            Pl::Copy(p) => p.len(),
            Pl::Shared(p) => p.len(),
        }
    }

    #[inline]
    pub(super) fn into_bytes(self) -> Option<Bytes> {
        match self {
            Pl::None => None,
            Pl::Copy(p) => Some(Bytes::copy_from_slice(p)),
            Pl::Shared(p) => Some(p),
        }
    }
}

/// Decodes one record, its payload bounded before it is copied (the decoder re-checks the
/// same limit), an actor identity taken from `ids` when it names the last one; a rejection
/// is counted against `who`.
#[inline(always)]
pub(super) fn decode_counted(
    shared: &Shared,
    limits: &Limits,
    envelope: &[u8],
    payload: Pl<'_>,
    who: &dyn std::fmt::Display,
    ids: &mut zlink_wire::IdCache,
) -> Result<Decoded, ()> {
    let decoded = if payload.len() > limits.max_payload {
        Err(zlink_wire::DecodeError::PayloadTooLarge {
            len: payload.len(),
            max: limits.max_payload,
        })
    } else {
        zlink_wire::decode_parts_cached(envelope, payload.into_bytes(), limits, ids)
    };
    // The decoded record stays where the decoder wrote it (no re-wrapping into an `Option`).
    decoded.map_err(|e| {
        shared
            .counters
            .drop(codec::drop_reason(&e), &format_args!("{who}: {e}"));
    })
}

/// A record of a peer's relay run ([`Engine::fast_peer_records`]) checked as one alone is: an
/// application record allowed inside a batch (`decoded`: its record is at hand), charged to
/// `conn`'s window. `false`: dropped and counted (a control record inside a batch, the window
/// overrun, or not an application verdict, as `on_record` drops it).
#[inline(always)]
#[allow(clippy::too_many_arguments)] // the run's state, lent field by field
pub(super) fn run_record_admitted(
    counters: &crate::counters::Counters,
    conn: &mut Conn,
    lane: Lane,
    class: &Class,
    bytes: u64,
    now: Instant,
    src: &Source<'_>,
    decoded: bool,
) -> bool {
    if !lane.batchable(class) {
        counters.drop(
            DropReason::WrongConnection,
            &format_args!("{src}: control record inside a batch on {lane:?}"),
        );
        return false;
    }
    match conn.ingress(lane, class, bytes, now) {
        Verdict::Deliver if decoded => true,
        Verdict::Drop(reason) => {
            counters.drop(reason, src);
            false
        }
        Verdict::Deliver => {
            // Charged, but nothing to deliver: the charge goes back (granted with the next
            // grant of this connection, or by housekeeping).
            counters.drop(DropReason::WrongConnection, src);
            conn.released(bytes);
            false
        }
        _ => {
            counters.drop(DropReason::WrongConnection, src);
            false
        }
    }
}
