//! Adapter between the mesh and the wire codec. TEMPORARY format until `zlink-wire` lands.

use bytes::{BufMut, Bytes, BytesMut};

use crate::types::{MeshName, NodeGeneration, NodeRid};

/// Why the peer rejected a handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandshakeReject {
    /// Different MeshName.
    WrongMesh,
    /// Proof did not verify.
    BadProof,
    /// Unexpected message.
    Protocol,
    /// Duplicate or stale lifecycle.
    Duplicate,
}

/// Handshake records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandshakeMsg {
    /// 128
    Hello {
        mesh: MeshName,
        node: NodeRid,
        generation: NodeGeneration,
        nonce: [u8; 32],
    },
    /// 129
    Challenge {
        mesh: MeshName,
        node: NodeRid,
        generation: NodeGeneration,
        nonce: [u8; 32],
        proof: [u8; 32],
    },
    /// 130
    Proof { proof: [u8; 32] },
    /// 131
    Welcome,
    /// 132
    Reject { reason: HandshakeReject },
}

/// Application record (temporary).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// 144
    Request { key: u32, deadline_ms: u32 },
    /// 145
    Reply,
    /// 146
    ErrorReply { kind: u8, detail: String },
    /// 147
    OneWay { key: u32 },
    /// 148
    Push { key: u32 },
}

/// A decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    Handshake(HandshakeMsg),
    Ping(u64),
    Pong(u64),
    Disconnect,
    App(Record),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub corr: u64,
    pub body: Body,
    pub payload: Option<Bytes>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("malformed")]
    Malformed,
    #[error("reserved command")]
    Reserved,
    #[error("unknown command {0}")]
    Unknown(u8),
}

pub fn encode(f: &Frame) -> Vec<Bytes> {
    let mut b = BytesMut::with_capacity(64);
    let cmd = match &f.body {
        Body::Handshake(HandshakeMsg::Hello { .. }) => 128,
        Body::Handshake(HandshakeMsg::Challenge { .. }) => 129,
        Body::Handshake(HandshakeMsg::Proof { .. }) => 130,
        Body::Handshake(HandshakeMsg::Welcome) => 131,
        Body::Handshake(HandshakeMsg::Reject { .. }) => 132,
        Body::Ping(_) => 136,
        Body::Pong(_) => 137,
        Body::App(Record::Request { .. }) => 144,
        Body::App(Record::Reply) => 145,
        Body::App(Record::ErrorReply { .. }) => 146,
        Body::App(Record::OneWay { .. }) => 147,
        Body::App(Record::Push { .. }) => 148,
        Body::Disconnect => 149,
    };
    b.put_u8(1);
    b.put_u8(cmd);
    b.put_u8(u8::from(f.payload.is_some()));
    b.put_u64(f.corr);
    let s = |b: &mut BytesMut, s: &str| {
        b.put_u8(s.len() as u8);
        b.put_slice(s.as_bytes());
    };
    match &f.body {
        Body::Handshake(HandshakeMsg::Hello {
            mesh,
            node,
            generation,
            nonce,
        }) => {
            s(&mut b, mesh.as_str());
            s(&mut b, node.as_str());
            b.put_u64(generation.get());
            b.put_slice(nonce);
        }
        Body::Handshake(HandshakeMsg::Challenge {
            mesh,
            node,
            generation,
            nonce,
            proof,
        }) => {
            s(&mut b, mesh.as_str());
            s(&mut b, node.as_str());
            b.put_u64(generation.get());
            b.put_slice(nonce);
            b.put_slice(proof);
        }
        Body::Handshake(HandshakeMsg::Proof { proof }) => b.put_slice(proof),
        Body::Handshake(HandshakeMsg::Welcome) | Body::Disconnect => {}
        Body::Handshake(HandshakeMsg::Reject { reason }) => b.put_u8(*reason as u8),
        Body::Ping(x) | Body::Pong(x) => b.put_u64(*x),
        Body::App(Record::Request { key, deadline_ms }) => {
            b.put_u32(*key);
            b.put_u32(*deadline_ms);
        }
        Body::App(Record::Reply) => {}
        Body::App(Record::ErrorReply { kind, detail }) => {
            b.put_u8(*kind);
            s(&mut b, &detail[..detail.len().min(200)]);
        }
        Body::App(Record::OneWay { key }) | Body::App(Record::Push { key }) => b.put_u32(*key),
    }
    let mut v = vec![b.freeze()];
    if let Some(p) = &f.payload {
        v.push(p.clone());
    }
    v
}

struct R<'a>(&'a [u8]);
impl R<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError::Malformed);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn a32(&mut self) -> Result<[u8; 32], DecodeError> {
        Ok(self.take(32)?.try_into().unwrap())
    }
    fn s(&mut self) -> Result<String, DecodeError> {
        let n = self.u8()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| DecodeError::Malformed)
    }
}

pub fn decode(parts: &[Bytes]) -> Result<Frame, DecodeError> {
    if parts.is_empty() || parts.len() > 2 {
        return Err(DecodeError::Malformed);
    }
    let mut r = R(&parts[0]);
    if r.u8()? != 1 {
        return Err(DecodeError::Malformed);
    }
    let cmd = r.u8()?;
    let flags = r.u8()?;
    if (flags == 1) != (parts.len() == 2) {
        return Err(DecodeError::Malformed);
    }
    let corr = r.u64()?;
    let bad = |_| DecodeError::Malformed;
    let body = match cmd {
        45 => return Err(DecodeError::Reserved),
        128 => Body::Handshake(HandshakeMsg::Hello {
            mesh: MeshName::new(r.s()?).map_err(bad)?,
            node: NodeRid::new(r.s()?).map_err(bad)?,
            generation: NodeGeneration::new(r.u64()?),
            nonce: r.a32()?,
        }),
        129 => Body::Handshake(HandshakeMsg::Challenge {
            mesh: MeshName::new(r.s()?).map_err(bad)?,
            node: NodeRid::new(r.s()?).map_err(bad)?,
            generation: NodeGeneration::new(r.u64()?),
            nonce: r.a32()?,
            proof: r.a32()?,
        }),
        130 => Body::Handshake(HandshakeMsg::Proof { proof: r.a32()? }),
        131 => Body::Handshake(HandshakeMsg::Welcome),
        132 => Body::Handshake(HandshakeMsg::Reject {
            reason: match r.u8()? {
                0 => HandshakeReject::WrongMesh,
                1 => HandshakeReject::BadProof,
                2 => HandshakeReject::Protocol,
                3 => HandshakeReject::Duplicate,
                _ => return Err(DecodeError::Malformed),
            },
        }),
        136 => Body::Ping(r.u64()?),
        137 => Body::Pong(r.u64()?),
        144 => Body::App(Record::Request {
            key: r.u32()?,
            deadline_ms: r.u32()?,
        }),
        145 => Body::App(Record::Reply),
        146 => Body::App(Record::ErrorReply {
            kind: r.u8()?,
            detail: r.s()?,
        }),
        147 => Body::App(Record::OneWay { key: r.u32()? }),
        148 => Body::App(Record::Push { key: r.u32()? }),
        149 => Body::Disconnect,
        c => return Err(DecodeError::Unknown(c)),
    };
    if !r.0.is_empty() {
        return Err(DecodeError::Malformed);
    }
    Ok(Frame {
        corr,
        body,
        payload: parts.get(1).cloned(),
    })
}

/// Public error kinds (temporary mirror of zlink-wire's `ErrorKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Not available now.
    Unavailable = 1,
    /// Invalid in this state.
    InvalidOperation = 2,
    /// Target does not exist.
    NotFound = 3,
    /// Deadline passed.
    DeadlineExceeded = 4,
    /// Handler failed.
    Internal = 5,
    /// Cancelled.
    Cancelled = 6,
}

impl ErrorKind {
    pub(crate) fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Unavailable,
            2 => Self::InvalidOperation,
            3 => Self::NotFound,
            4 => Self::DeadlineExceeded,
            5 => Self::Internal,
            6 => Self::Cancelled,
            _ => return None,
        })
    }
}
