//! The 139 batch frame: several records in one ZeroMQ message.
//!
//! A sender that finds several small records queued for the same connection packs them into
//! one batch frame, so libzmq moves one message instead of two or three per record. It never
//! waits to fill a batch: a lone record is sent as its own frame.
//!
//! ```text
//! one part (no payload part):
//!   offset 0   12-byte header: version 1, command 139, flags 0, reserved 0, correlation 0
//!   offset 12  u32 BE  count     (1..=MAX_BATCH_RECORDS)
//!   then `count` sub-records, each:
//!     u8      parts      (1 = envelope only, 2 = envelope + payload)
//!     u32 BE  envelope length, then the envelope (a complete record envelope: header + body)
//!     if parts = 2: u32 BE payload length, then the payload
//!   the frame ends exactly after the last sub-record
//! ```
//!
//! A sub-record is exactly the multipart message it replaces (`[envelope]` or
//! `[envelope, payload]`), so it decodes with [`crate::decode_parts`] under the same
//! [`Limits`].
//!
//! Invariants of [`BatchFrame::parse`]: it checks the header and walks the whole framing —
//! count, part counts, lengths, no nested batch, no trailing bytes — before anything is handed
//! out, and allocates nothing (a declared count or length never reserves memory). The
//! sub-records' own contents (sizes, header, body) are checked per sub-record by the caller's
//! decode, so one bad sub-record rejects only itself while broken framing rejects the frame.

use bytes::Bytes;

use crate::command::Command;
use crate::error::{DecodeError, EncodeError};
use crate::frame::{Decoded, Flags, HEADER_LEN, Header, Limits, decode_parts, peek_header};
use crate::ids::CorrelationId;

/// Most records one batch frame may hold.
pub const MAX_BATCH_RECORDS: u32 = 1024;

/// Bytes a batch frame takes before its first sub-record (header + count).
pub const BATCH_PREFIX_LEN: usize = HEADER_LEN + 4;

/// The wire number of the batch frame (139).
pub const BATCH_COMMAND: u8 = Command::Batch.number();

/// Bytes one sub-record adds to a batch frame (framing + its parts).
#[must_use]
pub const fn sub_record_len(envelope: usize, payload: Option<usize>) -> usize {
    match payload {
        Some(p) => 1 + 4 + envelope + 4 + p,
        None => 1 + 4 + envelope,
    }
}

/// `true` if `frame` starts like a batch frame (command byte 139). Cheap routing check only;
/// [`BatchFrame::parse`] validates.
#[must_use]
pub fn is_batch(frame: &[u8]) -> bool {
    frame.get(1) == Some(&BATCH_COMMAND)
}

/// Writes a batch frame into a reusable buffer.
///
/// Call order: [`BatchEncoder::new`] → [`BatchEncoder::push`] per record (each a complete
/// encoded record: envelope and optional payload, as [`crate::encode`] produced them) →
/// [`BatchEncoder::finish`] → send the bytes as one part.
#[derive(Debug)]
pub struct BatchEncoder {
    buf: Vec<u8>,
    count: u32,
}

impl BatchEncoder {
    /// Starts a batch in `buf` (its contents are discarded, its capacity reused).
    #[must_use]
    pub fn new(mut buf: Vec<u8>) -> Self {
        buf.clear();
        buf.extend_from_slice(&batch_prefix(0));
        Self { buf, count: 0 }
    }

    /// Appends one record.
    ///
    /// # Errors
    /// [`EncodeError::Batch`] if the envelope is itself a batch frame, the batch is full
    /// ([`MAX_BATCH_RECORDS`]) or a part does not fit a `u32` length.
    pub fn push(&mut self, envelope: &[u8], payload: Option<&[u8]>) -> Result<(), EncodeError> {
        if self.count >= MAX_BATCH_RECORDS {
            return Err(EncodeError::Batch {
                what: "the batch is full",
            });
        }
        if is_batch(envelope) {
            return Err(EncodeError::Batch {
                what: "a batch cannot hold a batch",
            });
        }
        if !push_sub_record(&mut self.buf, envelope, payload) {
            return Err(EncodeError::Batch {
                what: "a part is longer than u32::MAX",
            });
        }
        self.count += 1;
        Ok(())
    }

    /// Records pushed so far.
    #[must_use]
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Bytes of the frame so far.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        self.buf.len()
    }

    /// The finished frame (count patched in). A frame of zero records is not valid on the
    /// wire: push at least one.
    #[must_use]
    pub fn finish(mut self) -> Vec<u8> {
        set_batch_count(&mut self.buf, self.count);
        self.buf
    }
}

/// The bytes a batch frame of `count` records starts with: its header (command 139, no
/// flags, correlation 0) and the count.
#[must_use]
pub fn batch_prefix(count: u32) -> [u8; BATCH_PREFIX_LEN] {
    let header = Header {
        command: Command::Batch,
        flags: Flags::EMPTY,
        correlation: CorrelationId::NONE,
    }
    .to_bytes();
    let mut prefix = [0; BATCH_PREFIX_LEN];
    prefix[..HEADER_LEN].copy_from_slice(&header);
    prefix[HEADER_LEN..].copy_from_slice(&count.to_be_bytes());
    prefix
}

/// Writes `count` into a frame that starts with a [`batch_prefix`] (a frame built record by
/// record, [`push_sub_record`]). A shorter `frame` is left as it is.
pub fn set_batch_count(frame: &mut [u8], count: u32) {
    if let Some(at) = frame.get_mut(HEADER_LEN..BATCH_PREFIX_LEN) {
        at.copy_from_slice(&count.to_be_bytes());
    }
}

/// Appends one sub-record (its framing and parts, exactly what [`BatchEncoder::push`] writes)
/// to a frame being built in `buf`: for a sender that frames each record as it produces it,
/// behind a [`batch_prefix`], and keeps the count itself (at most [`MAX_BATCH_RECORDS`],
/// written with [`set_batch_count`]).
///
/// `false` (nothing written) if the envelope is itself a batch frame or a part does not fit
/// a `u32` length ([`BatchEncoder::push`] tells which).
#[inline]
#[must_use]
pub fn push_sub_record(buf: &mut Vec<u8>, envelope: &[u8], payload: Option<&[u8]>) -> bool {
    let (Ok(elen), Ok(plen)) = (
        u32::try_from(envelope.len()),
        u32::try_from(payload.map_or(0, <[u8]>::len)),
    ) else {
        return false;
    };
    if is_batch(envelope) {
        return false;
    }
    // One capacity check for the whole sub-record; the part count and the envelope's
    // length go in as one 5-byte head.
    buf.reserve(sub_record_len(envelope.len(), payload.map(<[u8]>::len)));
    let [a, b, c, d] = elen.to_be_bytes();
    let parts = if payload.is_some() { 2 } else { 1 };
    buf.extend_from_slice(&[parts, a, b, c, d]);
    buf.extend_from_slice(envelope);
    if let Some(p) = payload {
        buf.extend_from_slice(&plen.to_be_bytes());
        buf.extend_from_slice(p);
    }
    true
}

/// The first `count` sub-records of `frame` (a batch frame, or one being built with
/// [`push_sub_record`]) as plain slices, without validating the framing: for the writer of
/// the frame reading its own records back. The reads are checked: a frame that does not hold
/// `count` well-framed sub-records ends the iteration early, it never panics.
#[must_use]
pub fn sub_records(frame: &[u8], count: u32) -> RawRecords<'_> {
    RawRecords {
        frame,
        walk: Walk::new(count),
    }
}

/// A received batch frame whose framing was validated: iterate its sub-records with
/// [`BatchFrame::records`] (payloads are slices of the one frame buffer, never copied).
#[derive(Clone, Debug)]
pub struct BatchFrame {
    frame: Bytes,
    count: u32,
}

/// One sub-record of a batch: the envelope bytes and the payload part, if any.
#[derive(Clone, Debug)]
pub struct BatchRecord<'a> {
    /// The record's envelope (header + msgpack body), not yet decoded.
    pub envelope: &'a [u8],
    /// The record's payload part: a slice of the batch frame's buffer (shared, not copied).
    pub payload: Option<Bytes>,
}

impl BatchRecord<'_> {
    /// Bytes of the record's parts (envelope + payload): what one unbatched message of the same
    /// record would carry, the unit of credit and windows.
    #[must_use]
    pub fn len(&self) -> usize {
        self.envelope.len() + self.payload.as_ref().map_or(0, Bytes::len)
    }

    /// `true` for an empty envelope without payload (never valid; decoding rejects it).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decodes the record like the multipart message it stands for.
    ///
    /// # Errors
    /// As [`crate::decode_parts`].
    pub fn decode(&self, limits: &Limits) -> Result<Decoded, DecodeError> {
        decode_parts(self.envelope, self.payload.clone(), limits)
    }
}

fn read_u32(frame: &[u8], at: usize) -> Option<u32> {
    let bytes = frame.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// Position after sub-record `index` starting at `at`, or the framing error.
fn walk_one(frame: &[u8], at: usize, index: u32) -> Result<usize, DecodeError> {
    let broken = |what| DecodeError::BatchFraming { index, what };
    let parts = *frame
        .get(at)
        .ok_or_else(|| broken("frame ends before the record"))?;
    if parts != 1 && parts != 2 {
        return Err(broken("part count is not 1 or 2"));
    }
    let elen = read_u32(frame, at + 1).ok_or_else(|| broken("envelope length truncated"))? as usize;
    let start = at + 5;
    let end = start
        .checked_add(elen)
        .filter(|e| *e <= frame.len())
        .ok_or_else(|| broken("envelope runs past the frame"))?;
    if is_batch(&frame[start..end]) {
        return Err(DecodeError::NestedBatch { index });
    }
    if parts == 1 {
        return Ok(end);
    }
    let plen = read_u32(frame, end).ok_or_else(|| broken("payload length truncated"))? as usize;
    (end + 4)
        .checked_add(plen)
        .filter(|e| *e <= frame.len())
        .ok_or_else(|| broken("payload runs past the frame"))
}

impl BatchFrame {
    /// Validates a received batch frame: header (command 139, no flags, correlation 0), count
    /// in `1..=MAX_BATCH_RECORDS`, every sub-record's framing inside the frame, no nested
    /// batch, no trailing bytes. Allocates nothing.
    ///
    /// # Errors
    /// Header errors as [`crate::peek_header`]; [`DecodeError::BatchFraming`] (not a batch
    /// frame, count truncated, a sub-record running past the frame or with a part count other
    /// than 1 or 2, bytes after the last record); [`DecodeError::BatchCount`];
    /// [`DecodeError::NestedBatch`].
    pub fn parse(frame: Bytes) -> Result<BatchFrame, DecodeError> {
        let header = peek_header(&frame)?;
        if header.command != Command::Batch {
            return Err(DecodeError::BatchFraming {
                index: 0,
                what: "not a batch frame",
            });
        }
        if header.flags != Flags::EMPTY {
            return Err(DecodeError::BatchFraming {
                index: 0,
                what: "a batch frame carries no flags",
            });
        }
        let declared = read_u32(&frame, HEADER_LEN).ok_or(DecodeError::BatchFraming {
            index: 0,
            what: "count truncated",
        })?;
        if declared == 0 || declared > MAX_BATCH_RECORDS {
            return Err(DecodeError::BatchCount {
                declared,
                max: MAX_BATCH_RECORDS,
            });
        }
        let mut at = BATCH_PREFIX_LEN;
        for index in 0..declared {
            at = walk_one(&frame, at, index)?;
        }
        if at != frame.len() {
            return Err(DecodeError::BatchFraming {
                index: declared,
                what: "bytes remain after the declared records",
            });
        }
        Ok(BatchFrame {
            frame,
            count: declared,
        })
    }

    /// Number of sub-records.
    #[must_use]
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Never true for a parsed frame (a batch holds at least one record).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The whole frame.
    #[must_use]
    pub fn frame(&self) -> &Bytes {
        &self.frame
    }

    /// The sub-records in order.
    #[must_use]
    pub fn records(&self) -> BatchRecords<'_> {
        BatchRecords {
            frame: &self.frame,
            walk: Walk::new(self.count),
        }
    }

    /// The sub-records in order as plain slices of the frame: for a reader that copies each
    /// payload out (no shared handle on the frame is taken or dropped per record).
    #[must_use]
    pub fn raw_records(&self) -> RawRecords<'_> {
        RawRecords {
            frame: &self.frame,
            walk: Walk::new(self.count),
        }
    }

    /// Decodes every sub-record (one result per record, in order; the vector's length is the
    /// validated count, at most [`MAX_BATCH_RECORDS`]).
    #[must_use]
    pub fn decode_all(&self, limits: &Limits) -> Vec<Result<Decoded, DecodeError>> {
        self.records().map(|r| r.decode(limits)).collect()
    }
}

/// The position of an iteration over a validated batch frame's sub-records.
#[derive(Debug)]
struct Walk {
    at: usize,
    left: u32,
}

/// Where one sub-record's parts lie in the frame: envelope range, payload range if any.
type Spans = (std::ops::Range<usize>, Option<std::ops::Range<usize>>);

impl Walk {
    fn new(count: u32) -> Self {
        Self {
            at: BATCH_PREFIX_LEN,
            left: count,
        }
    }

    /// The next sub-record's spans in `frame`. The framing was validated by
    /// [`BatchFrame::parse`]; the reads are checked anyway, so a broken invariant ends the
    /// iteration instead of panicking.
    #[inline]
    fn next(&mut self, frame: &[u8]) -> Option<Spans> {
        if self.left == 0 {
            return None;
        }
        let parts = *frame.get(self.at)?;
        let elen = read_u32(frame, self.at + 1)? as usize;
        let start = self.at + 5;
        let mut end = start.checked_add(elen)?;
        if end > frame.len() {
            return None;
        }
        let envelope = start..end;
        let payload = if parts == 2 {
            let plen = read_u32(frame, end)? as usize;
            let p = end + 4;
            end = p.checked_add(plen)?;
            if end > frame.len() {
                return None;
            }
            Some(p..end)
        } else {
            None
        };
        self.at = end;
        self.left -= 1;
        Some((envelope, payload))
    }
}

/// Iterator over the sub-records of a [`BatchFrame`].
#[derive(Debug)]
pub struct BatchRecords<'a> {
    frame: &'a Bytes,
    walk: Walk,
}

impl<'a> Iterator for BatchRecords<'a> {
    type Item = BatchRecord<'a>;

    fn next(&mut self) -> Option<BatchRecord<'a>> {
        let frame: &'a [u8] = self.frame;
        let (envelope, payload) = self.walk.next(frame)?;
        Some(BatchRecord {
            envelope: &frame[envelope],
            payload: payload.map(|p| self.frame.slice(p)),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.walk.left as usize))
    }
}

/// One sub-record of a batch as plain slices of the frame ([`BatchFrame::raw_records`]).
#[derive(Clone, Copy, Debug)]
pub struct RawRecord<'a> {
    /// The record's envelope (header + msgpack body), not yet decoded.
    pub envelope: &'a [u8],
    /// The record's payload part, if any.
    pub payload: Option<&'a [u8]>,
}

/// Iterator over the sub-records of a [`BatchFrame`] as plain slices.
#[derive(Debug)]
pub struct RawRecords<'a> {
    frame: &'a [u8],
    walk: Walk,
}

impl<'a> Iterator for RawRecords<'a> {
    type Item = RawRecord<'a>;

    #[inline]
    fn next(&mut self) -> Option<RawRecord<'a>> {
        let frame = self.frame;
        let (envelope, payload) = self.walk.next(frame)?;
        Some(RawRecord {
            envelope: &frame[envelope],
            payload: payload.map(|p| &frame[p]),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.walk.left as usize))
    }
}

/// Encodes `records` (envelope, optional payload) into one batch frame: the helper for tests
/// and tools; the mesh reuses its buffer through [`BatchEncoder`].
///
/// # Errors
/// As [`BatchEncoder::push`]; an empty input is [`EncodeError::Batch`].
pub fn encode_batch<'a>(
    records: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
) -> Result<Bytes, EncodeError> {
    let mut enc = BatchEncoder::new(Vec::new());
    for (envelope, payload) in records {
        enc.push(envelope, payload)?;
    }
    if enc.count() == 0 {
        return Err(EncodeError::Batch {
            what: "a batch holds at least one record",
        });
    }
    Ok(Bytes::from(enc.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::encode;
    use crate::ids::DispatchKey;
    use crate::record::{OneWay, Ping, Record};

    fn one_way(key: u32, payload: &'static [u8]) -> crate::Frames {
        encode(
            &Record::OneWay(OneWay {
                key: DispatchKey::new(key),
            }),
            CorrelationId::NONE,
            Some(Bytes::from_static(payload)),
        )
        .unwrap()
    }

    #[test]
    fn round_trip_and_shared_payloads() {
        let a = one_way(1, b"first");
        let b = encode(&Record::Ping(Ping { seq: 3 }), CorrelationId::NONE, None).unwrap();
        let frame = encode_batch([
            (&a.envelope()[..], a.payload().map(|p| &p[..])),
            (&b.envelope()[..], None),
        ])
        .unwrap();
        assert!(is_batch(&frame));
        let batch = BatchFrame::parse(frame.clone()).unwrap();
        assert_eq!(batch.len(), 2);
        let recs: Vec<_> = batch.records().collect();
        assert_eq!(recs[0].envelope, &a.envelope()[..]);
        let p = recs[0].payload.as_ref().unwrap();
        assert_eq!(&p[..], b"first");
        // A slice of the frame buffer, not a copy.
        let base = frame.as_ptr() as usize;
        assert!((p.as_ptr() as usize) > base && (p.as_ptr() as usize) < base + frame.len());
        assert!(recs[1].payload.is_none());
        // The raw walk sees exactly the same parts.
        let raw: Vec<_> = batch.raw_records().collect();
        assert_eq!(raw.len(), recs.len());
        for (r, b) in raw.iter().zip(&recs) {
            assert_eq!(r.envelope, b.envelope);
            assert_eq!(r.payload, b.payload.as_deref());
        }
        let all = batch.decode_all(&Limits::DEFAULT);
        assert_eq!(
            all[1].as_ref().unwrap().record,
            Record::Ping(Ping { seq: 3 })
        );
    }

    // A frame built record by record by its sender (prefix, sub-records, count written last)
    // is byte for byte the encoder's, and its records read back as pushed.
    #[test]
    fn a_frame_built_by_its_sender_is_the_encoders() {
        let a = one_way(1, b"first");
        let b = encode(&Record::Ping(Ping { seq: 3 }), CorrelationId::NONE, None).unwrap();
        let parts = [
            (&a.envelope()[..], a.payload().map(|p| &p[..])),
            (&b.envelope()[..], None),
        ];
        let mut frame = batch_prefix(0).to_vec();
        for (e, p) in parts {
            assert!(push_sub_record(&mut frame, e, p));
        }
        set_batch_count(&mut frame, 2);
        assert_eq!(frame, encode_batch(parts).unwrap().to_vec());
        let back: Vec<_> = sub_records(&frame, 2)
            .map(|r| (r.envelope, r.payload))
            .collect();
        assert_eq!(back, parts);
        // Asking for more records than the frame holds ends early, without a panic.
        assert_eq!(sub_records(&frame, 3).count(), 2);
        assert_eq!(sub_records(&frame[..frame.len() - 1], 2).count(), 1);
        // A batch is refused as a sub-record, and nothing is written.
        let len = frame.len();
        assert!(!push_sub_record(&mut frame.clone(), &frame, None));
        assert_eq!(frame.len(), len);
    }

    #[test]
    fn framing_errors_are_typed() {
        let a = one_way(1, b"x");
        let good = encode_batch([(&a.envelope()[..], a.payload().map(|p| &p[..]))]).unwrap();
        // Count 0, too many, more than present.
        for (count, ok) in [(0u32, false), (MAX_BATCH_RECORDS + 1, false), (2, false)] {
            let mut f = good.to_vec();
            f[HEADER_LEN..BATCH_PREFIX_LEN].copy_from_slice(&count.to_be_bytes());
            let err = BatchFrame::parse(Bytes::from(f)).unwrap_err();
            assert!(!ok);
            assert!(
                matches!(
                    err,
                    DecodeError::BatchCount { .. } | DecodeError::BatchFraming { .. }
                ),
                "{err:?}"
            );
        }
        // Trailing byte.
        let mut f = good.to_vec();
        f.push(0);
        assert!(matches!(
            BatchFrame::parse(Bytes::from(f)),
            Err(DecodeError::BatchFraming { index: 1, .. })
        ));
        // Every truncation fails cleanly.
        for cut in 0..good.len() {
            assert!(BatchFrame::parse(good.slice(..cut)).is_err());
        }
        // Nested batch.
        let mut enc = BatchEncoder::new(Vec::new());
        assert!(enc.push(&good, None).is_err());
        let mut nested = good.slice(..BATCH_PREFIX_LEN).to_vec();
        nested[HEADER_LEN..BATCH_PREFIX_LEN].copy_from_slice(&1u32.to_be_bytes());
        nested.push(1);
        nested.extend_from_slice(&(good.len() as u32).to_be_bytes());
        nested.extend_from_slice(&good);
        assert!(matches!(
            BatchFrame::parse(Bytes::from(nested)),
            Err(DecodeError::NestedBatch { index: 0 })
        ));
        // The single-record decoder refuses a batch frame.
        assert!(matches!(
            crate::decode(&[good], &Limits::DEFAULT),
            Err(DecodeError::BatchNotRecord)
        ));
    }
}
