//! The decode memo (sans-IO): the last decoded envelope of one command whose bytes depend only
//! on its dispatch key, so that a run of byte-identical envelopes is decoded once.

use zlink_wire::Decoded;

use crate::codec::Record;

/// Memo of the last decoded one-way envelope. A one-way 147 envelope depends only on its
/// dispatch key (no correlation, no deadline), so a sender repeats the same bytes record after
/// record. Decoding is a pure function of (envelope bytes, payload presence, limits): a
/// byte-identical envelope gives the same header and record, so the msgpack decode is skipped.
/// Every other check still runs per record (payload size, routing id, generation, window).
/// The node memoizes one-way 147s; a `MeshClient` memoizes pushes (148, also a function of
/// the key alone) with [`DecodeMemo::for_command`].
pub(crate) struct DecodeMemo {
    /// The only command this memo keeps (records without correlation and with a payload).
    command: zlink_wire::Command,
    len: usize,
    bytes: [u8; MEMO_ENVELOPE],
    hit: Option<(zlink_wire::Header, Record)>,
}

const MEMO_ENVELOPE: usize = 32;

impl Default for DecodeMemo {
    fn default() -> Self {
        Self::for_command(zlink_wire::Command::OneWay)
    }
}

impl DecodeMemo {
    /// A memo that keeps records of `command` only.
    pub(crate) fn for_command(command: zlink_wire::Command) -> Self {
        Self {
            command,
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
        self.hit.as_ref().map(|(_, r)| r.clone()).expect("memo hit")
    }

    /// The dispatch key of the memoized one-way record (the memo holds only 147s).
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
    /// this memo's command without correlation.
    pub(crate) fn store(&mut self, envelope: &[u8], decoded: &Decoded) {
        if envelope.len() <= MEMO_ENVELOPE
            && decoded.header.correlation.get() == 0
            && decoded.record.command() == self.command
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
        let mut m = DecodeMemo::for_command(zlink_wire::Command::Request);
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
}
