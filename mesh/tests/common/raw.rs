//! A raw ZeroMQ ROUTER peer for the bad-input tests (shared by several test files).

use std::time::{Duration, Instant};

use bytes::Bytes;
use zlink_mesh::codec::HandshakeMsg;
use zlink_mesh::handshake::{Handshake, LocalIdentity, Outcome};
use zlink_mesh::zlink_wire::{self, CorrelationId, Record};
use zlink_mesh::{LinkKind, MeshName, MeshNode, MeshSecret, NodeGeneration, NodeRid};

use super::WAIT;

/// A raw ZeroMQ ROUTER peer (libzmq through the `zmq` crate) that can run the mesh handshake
/// itself and then send arbitrary frames.
pub struct RawPeer {
    _ctx: zmq::Context,
    relay: zmq::Socket,
    completion: zmq::Socket,
    target: Vec<u8>,
    identity: Vec<u8>,
}

impl RawPeer {
    pub fn connect(identity: &str, node: &MeshNode) -> RawPeer {
        let ctx = zmq::Context::new();
        let mk = |ep: &str| {
            let s = ctx.socket(zmq::ROUTER).unwrap();
            s.set_identity(identity.as_bytes()).unwrap();
            s.set_router_mandatory(true).unwrap();
            s.set_linger(0).unwrap();
            s.set_rcvtimeo(50).unwrap();
            s.connect(ep).unwrap();
            s
        };
        let relay = mk(&node.endpoints().relay);
        let completion = mk(&node.endpoints().completion);
        RawPeer {
            _ctx: ctx,
            relay,
            completion,
            target: node.node().as_bytes().to_vec(),
            identity: identity.as_bytes().to_vec(),
        }
    }

    pub fn socket(&self, kind: LinkKind) -> &zmq::Socket {
        if kind == LinkKind::Relay {
            &self.relay
        } else {
            &self.completion
        }
    }

    /// Sends raw parts to the node, waiting until the connection is routable.
    pub fn send(&self, kind: LinkKind, parts: &[&[u8]]) {
        let s = self.socket(kind);
        let deadline = Instant::now() + WAIT;
        loop {
            match s.send(&self.target[..], zmq::SNDMORE | zmq::DONTWAIT) {
                Ok(()) => break,
                Err(_) => {
                    assert!(Instant::now() < deadline, "node never routable");
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        for (i, p) in parts.iter().enumerate() {
            let more = if i + 1 < parts.len() { zmq::SNDMORE } else { 0 };
            s.send(*p, more).unwrap();
        }
    }

    pub fn send_record(&self, kind: LinkKind, record: &Record, corr: u64, payload: Option<Bytes>) {
        let f = zlink_wire::encode(record, CorrelationId::new(corr), payload).unwrap();
        let v: Vec<Bytes> = f.into_vec();
        let parts: Vec<&[u8]> = v.iter().map(|b| &b[..]).collect();
        self.send(kind, &parts);
    }

    pub fn recv(&self, kind: LinkKind, until: Instant) -> Option<Vec<Vec<u8>>> {
        while Instant::now() < until {
            if let Ok(parts) = self.socket(kind).recv_multipart(0) {
                return Some(parts[1..].to_vec());
            }
        }
        None
    }

    /// Runs the handshake on one link as `node`/`generation` with `secret`.
    pub fn handshake(
        &self,
        kind: LinkKind,
        node: &str,
        generation: u64,
        secret: &[u8],
    ) -> Option<Outcome> {
        let local = LocalIdentity {
            mesh: MeshName::new("test").unwrap(),
            node: NodeRid::new(node).unwrap(),
            generation: NodeGeneration::new(generation),
            secret: MeshSecret::new(secret.to_vec()).unwrap(),
        };
        let now = std::time::Instant::now();
        let mut hs = Handshake::initiator(local, kind, &self.identity, None, [3; 32], now, WAIT);
        let until = Instant::now() + WAIT;
        loop {
            while let Some(m) = hs.poll_transmit() {
                self.send_record(kind, &m.into_record(), 0, None);
            }
            if let Some(o) = hs.poll_outcome() {
                return Some(o.clone());
            }
            let parts = self.recv(kind, until)?;
            let bytes: Vec<Bytes> = parts.into_iter().map(Bytes::from).collect();
            let d = zlink_wire::decode(&bytes, &zlink_wire::Limits::DEFAULT).ok()?;
            hs.handle_message(
                HandshakeMsg::from_record(d.record)?,
                std::time::Instant::now(),
            );
        }
    }
}
