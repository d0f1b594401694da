//! Wire tap: a test-facing observer of every frame sent and received, per connection
//! (SB-14.7, SB-14.26 contract tests assert on real wire traffic with it).
//!
//! The tap is filled by the I/O thread at the socket boundary: what it records is exactly what
//! libzmq was given or returned (routing-id frame stripped). It is bounded: when full, the
//! oldest entries are discarded and counted in [`WireTap::overflowed`].

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
        })))
    }

    pub(crate) fn record(
        &self,
        direction: TapDirection,
        link: LinkKind,
        peer: &[u8],
        frames: &[Bytes],
    ) {
        let decoded =
            codec::decode(frames, &zlink_wire::Limits::DEFAULT).map_err(|e| e.to_string());
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if g.frames.len() == g.capacity {
            g.frames.pop_front();
            g.overflowed += 1;
        }
        g.frames.push_back(TapFrame {
            direction,
            link,
            peer: Bytes::copy_from_slice(peer),
            frames: frames.to_vec(),
            decoded,
        });
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
