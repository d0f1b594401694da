//! Wire tap: a test-facing observer of every frame sent and received, per connection
//! (SB-14.7, SB-14.26 contract tests assert on real wire traffic with it).
//!
//! The tap is filled by the I/O thread at the socket boundary: what it records is exactly what
//! libzmq was given or returned (routing-id frame stripped). A sent message is recorded once libzmq
//! accepted its routing id and before its last part is handed over, so its entry exists before
//! the peer can receive it. It is bounded: when full, the
//! oldest entries are discarded and counted in [`WireTap::overflowed`].
//!
//! A 139 batch frame is recorded as one entry for the frame itself (command 139, `batch` set,
//! `decoded` an error text: a batch is not a record) followed by one entry per record it
//! carried, in order, each with the same `batch` number and looking exactly like that record
//! sent alone (`frames` = envelope and payload, `decoded` its record). So a test that counts
//! records of a command on the wire counts batched and unbatched records alike; a test that
//! wants to see batching looks for command 139 or a set `batch`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::codec;
use crate::types::LinkKind;

/// Direction of a tapped frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TapDirection {
    /// Handed to libzmq by this node.
    Sent,
    /// Received from libzmq by this node.
    Received,
}

/// One tapped multipart message.
#[derive(Clone, Debug)]
pub struct TapFrame {
    /// Sent or received.
    pub direction: TapDirection,
    /// Which connection kind carried it.
    pub link: LinkKind,
    /// The peer's routing id bytes (NodeRid for RouteMesh, libzmq's id for clients).
    pub peer: Bytes,
    /// The raw frames (envelope, payload).
    pub frames: Vec<Bytes>,
    /// The decoded record, or the decode error text.
    pub decoded: Result<zlink_wire::Decoded, String>,
    /// For a batch frame and for each record it carried: the batch's number (unique per tap);
    /// `None` for a message that is not (in) a batch.
    pub batch: Option<u64>,
}

impl TapFrame {
    /// The command number in the envelope header, if the envelope has one.
    pub fn command(&self) -> Option<u8> {
        self.frames.first().and_then(|f| f.get(1).copied())
    }
}

#[derive(Debug)]
struct Inner {
    frames: VecDeque<TapFrame>,
    capacity: usize,
    overflowed: u64,
    next_batch: u64,
}

/// A bounded, shared recorder of wire traffic. Cloning shares the recording.
#[derive(Clone, Debug)]
pub struct WireTap(Arc<Mutex<Inner>>);

impl WireTap {
    /// A tap keeping at most `capacity` frames.
    pub fn new(capacity: usize) -> Self {
        Self(Arc::new(Mutex::new(Inner {
            frames: VecDeque::new(),
            capacity: capacity.max(1),
            overflowed: 0,
            next_batch: 1,
        })))
    }

    pub(crate) fn record(
        &self,
        direction: TapDirection,
        link: LinkKind,
        peer: &[u8],
        frames: &[Bytes],
    ) {
        let peer = Bytes::copy_from_slice(peer);
        let mut entries = Vec::with_capacity(1);
        let batch = match frames {
            [frame] if zlink_wire::is_batch(frame) => zlink_wire::BatchFrame::parse(frame.clone()),
            _ => Err(zlink_wire::DecodeError::BatchNotRecord),
        };
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match batch {
            Ok(b) => {
                let id = g.next_batch;
                g.next_batch += 1;
                entries.push(TapFrame {
                    direction,
                    link,
                    peer: peer.clone(),
                    frames: frames.to_vec(),
                    decoded: Err(format!("batch frame of {} records", b.len())),
                    batch: Some(id),
                });
                for r in b.records() {
                    let mut parts = vec![Bytes::copy_from_slice(r.envelope)];
                    parts.extend(r.payload.clone());
                    entries.push(TapFrame {
                        direction,
                        link,
                        peer: peer.clone(),
                        decoded: r
                            .decode(&zlink_wire::Limits::DEFAULT)
                            .map_err(|e| e.to_string()),
                        frames: parts,
                        batch: Some(id),
                    });
                }
            }
            Err(_) => entries.push(TapFrame {
                direction,
                link,
                peer,
                frames: frames.to_vec(),
                decoded: codec::decode(frames, &zlink_wire::Limits::DEFAULT)
                    .map_err(|e| e.to_string()),
                batch: None,
            }),
        }
        for entry in entries {
            if g.frames.len() == g.capacity {
                g.frames.pop_front();
                g.overflowed += 1;
            }
            g.frames.push_back(entry);
        }
    }

    /// A copy of everything recorded so far.
    pub fn frames(&self) -> Vec<TapFrame> {
        let g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        g.frames.iter().cloned().collect()
    }

    /// Frames discarded because the tap was full.
    pub fn overflowed(&self) -> u64 {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).overflowed
    }

    /// Forgets everything recorded.
    pub fn clear(&self) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .frames
            .clear();
    }
}
