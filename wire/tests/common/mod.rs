//! Shared sample records: one per golden fixture.
#![allow(dead_code)]

use bytes::Bytes;
use zlink_wire::*;

pub fn actor() -> ActorId {
    ActorId::new("room:7/player-42").unwrap()
}

pub fn node(name: &str) -> NodeRid {
    NodeRid::new(name).unwrap()
}

pub fn mesh() -> MeshName {
    MeshName::new("main").unwrap()
}

pub fn location() -> ActorLocation {
    ActorLocation {
        mesh: mesh(),
        node: node("node-b"),
        node_generation: NodeGeneration::new(1_700_000_000_002),
        authority_owner_generation: AuthorityOwnerGeneration::new(9),
        owner_lease_generation: OwnerLeaseGeneration::new(4),
    }
}

pub fn seal() -> SealIdentity {
    SealIdentity {
        relocation: RelocationId::new(77),
        session_lifecycle: SessionLifecycleGeneration::new(3),
        session: SessionRid::new(1001),
        binding_generation: BindingGeneration::new(12),
    }
}

pub fn fence(name: &str, node_generation: u64, authority: u64, lease: u64) -> AuthorityFence {
    AuthorityFence {
        node: node(name),
        node_generation: NodeGeneration::new(node_generation),
        authority_owner_generation: AuthorityOwnerGeneration::new(authority),
        owner_lease_generation: OwnerLeaseGeneration::new(lease),
    }
}

/// A 64-byte payload (the size the issue asks to report for record 24).
pub fn payload64() -> Bytes {
    Bytes::from((0u8..64).collect::<Vec<u8>>())
}

/// One sample per golden fixture: (fixture name, record, correlation, payload).
pub fn samples() -> Vec<(&'static str, Record, CorrelationId, Option<Bytes>)> {
    let none = CorrelationId::NONE;
    let corr = CorrelationId::new(0x0102_0304_0506_0708);
    vec![
        (
            "024_actor_send",
            Record::ActorSend(ActorSend {
                actor: actor(),
                object_generation: ObjectGeneration::new(5),
                authority_owner_generation: AuthorityOwnerGeneration::new(9),
                owner_lease_generation: OwnerLeaseGeneration::new(4),
                session_lifecycle: SessionLifecycleGeneration::new(3),
                key: DispatchKey::new(1200),
                deadline: None,
                tail: BoundSessionTail {
                    binding_generation: BindingGeneration::new(12),
                    session_sequence: SessionSequence::new(345),
                },
            }),
            none,
            Some(payload64()),
        ),
        (
            "024_actor_send_request",
            Record::ActorSend(ActorSend {
                actor: actor(),
                object_generation: ObjectGeneration::new(5),
                authority_owner_generation: AuthorityOwnerGeneration::new(9),
                owner_lease_generation: OwnerLeaseGeneration::new(4),
                session_lifecycle: SessionLifecycleGeneration::new(3),
                key: DispatchKey::new(1201),
                deadline: Some(Deadline::from_millis(5000)),
                tail: BoundSessionTail {
                    binding_generation: BindingGeneration::new(12),
                    session_sequence: SessionSequence::new(346),
                },
            }),
            corr,
            Some(Bytes::from_static(b"ping")),
        ),
        (
            "036_bound_session_send",
            Record::BoundSessionSend(BoundSessionSend {
                actor: actor(),
                object_generation: ObjectGeneration::new(5),
                source_node_generation: NodeGeneration::new(1_700_000_000_002),
                authority_owner_generation: AuthorityOwnerGeneration::new(9),
                session_lifecycle: SessionLifecycleGeneration::new(3),
                session: SessionRid::new(1001),
                binding_generation: BindingGeneration::new(12),
                key: DispatchKey::new(2000),
            }),
            none,
            Some(Bytes::from_static(b"push")),
        ),
        (
            "038_bound_session_bind",
            Record::BoundSessionBind(BoundSessionBind {
                actor: actor(),
                object_generation: ObjectGeneration::new(5),
                target_node_generation: NodeGeneration::new(1_700_000_000_002),
                authority_owner_generation: AuthorityOwnerGeneration::new(9),
                owner_lease_generation: OwnerLeaseGeneration::new(4),
                session_lifecycle: SessionLifecycleGeneration::new(3),
                session_owner: OwnerId::new(77),
                session_owner_lease_generation: OwnerLeaseGeneration::new(6),
                session: SessionRid::new(1001),
                binding_generation: BindingGeneration::new(12),
                operation: BindOperation::Bind,
                deadline: Deadline::from_millis(3000),
            }),
            corr,
            None,
        ),
        (
            "038_bound_session_bind_reply_ok",
            Record::BoundSessionBindReply(BoundSessionBindReply {
                result: Ok(BindSnapshot {
                    actor: actor(),
                    object_generation: ObjectGeneration::new(5),
                    location: location(),
                    binding_generation: BindingGeneration::new(12),
                }),
            }),
            corr,
            None,
        ),
        (
            "038_bound_session_bind_reply_err",
            Record::BoundSessionBindReply(BoundSessionBindReply {
                result: Err(ErrorKind::InvalidOperation),
            }),
            corr,
            None,
        ),
        (
            "042_session_relocation_seal",
            Record::SessionRelocationSeal(SessionRelocationSeal {
                seal: seal(),
                actor: actor(),
                object_generation: ObjectGeneration::new(5),
                deadline: Deadline::from_millis(3000),
            }),
            corr,
            None,
        ),
        (
            "043_session_relocation_sealed",
            Record::SessionRelocationSealed(SessionRelocationSealed {
                seal: seal(),
                outcome: SealOutcome::Installed,
            }),
            corr,
            None,
        ),
        (
            "043_session_relocation_sealed_rejected",
            Record::SessionRelocationSealed(SessionRelocationSealed {
                seal: seal(),
                outcome: SealOutcome::Rejected(ErrorKind::Unavailable),
            }),
            corr,
            None,
        ),
        (
            "044_session_relocation_route_commit",
            Record::SessionRelocationRoute(SessionRelocationRoute::Commit(RouteCommit {
                relocation: RelocationId::new(77),
                actor: actor(),
                object_generation: ObjectGeneration::new(5),
                target: location(),
                session_lifecycle: SessionLifecycleGeneration::new(3),
                session: SessionRid::new(1001),
                binding_generation: BindingGeneration::new(12),
            })),
            none,
            None,
        ),
        (
            "044_session_relocation_route_abort",
            Record::SessionRelocationRoute(SessionRelocationRoute::Abort(RouteAbort {
                seal: seal(),
                action: AbortAction::ResubmitToSource,
            })),
            none,
            None,
        ),
        (
            "051_bound_session_replaced",
            Record::BoundSessionReplaced(BoundSessionReplaced {
                actor: actor(),
                authority_source: fence("node-b", 1_700_000_000_002, 9, 4),
                authority_target: fence("node-c", 1_700_000_000_003, 10, 6),
                previous: PreviousSessionOwner {
                    node: node("node-a"),
                    lifecycle: SessionLifecycleGeneration::new(3),
                    owner: OwnerId::new(21),
                    owner_lease_generation: OwnerLeaseGeneration::new(2),
                    session: SessionRid::new(1001),
                    retired_binding_generation: BindingGeneration::new(12),
                },
            }),
            none,
            None,
        ),
        (
            "128_hello",
            Record::Hello(Hello {
                mesh: mesh(),
                node: node("node-a"),
                generation: NodeGeneration::new(1_700_000_000_001),
                nonce: [0x11; 32],
            }),
            none,
            None,
        ),
        (
            "129_challenge",
            Record::Challenge(Challenge {
                mesh: mesh(),
                node: node("node-b"),
                generation: NodeGeneration::new(1_700_000_000_002),
                nonce: [0x22; 32],
                proof: [0x33; 32],
            }),
            none,
            None,
        ),
        (
            "130_proof",
            Record::Proof(Proof { proof: [0x44; 32] }),
            none,
            None,
        ),
        ("131_welcome", Record::Welcome(Welcome), none, None),
        (
            "132_reject",
            Record::Reject(Reject {
                reason: HandshakeReject::BadProof,
            }),
            none,
            None,
        ),
        ("136_ping", Record::Ping(Ping { seq: 1 }), none, None),
        ("137_pong", Record::Pong(Pong { seq: 1 }), none, None),
        (
            "138_flow_credit",
            Record::FlowCredit(FlowCredit {
                messages: 1024,
                bytes: 64 * 1024 * 1024,
            }),
            none,
            None,
        ),
        (
            "144_request",
            Record::Request(Request {
                key: DispatchKey::new(7),
                deadline: Deadline::from_millis(1000),
            }),
            corr,
            Some(Bytes::from_static(b"req")),
        ),
        (
            "145_reply",
            Record::Reply(Reply),
            corr,
            Some(Bytes::from_static(b"rep")),
        ),
        (
            "146_error_reply",
            Record::ErrorReply(ErrorReply::new(ErrorKind::DeadlineExceeded, "timed out")),
            corr,
            None,
        ),
        (
            "147_one_way",
            Record::OneWay(OneWay {
                key: DispatchKey::new(8),
            }),
            none,
            Some(Bytes::from_static(b"evt")),
        ),
        (
            "148_push",
            Record::Push(Push {
                key: DispatchKey::new(9),
            }),
            none,
            Some(Bytes::from_static(b"srv")),
        ),
        (
            "149_disconnect",
            Record::Disconnect(Disconnect {
                reason: DisconnectReason::Shutdown,
            }),
            none,
            None,
        ),
        (
            "160_actor_call",
            Record::ActorCall(ActorCall {
                actor: actor(),
                object_generation: ObjectGeneration::new(5),
                authority_owner_generation: AuthorityOwnerGeneration::new(9),
                owner_lease_generation: OwnerLeaseGeneration::new(4),
                target_node_generation: NodeGeneration::new(1_700_000_000_002),
                key: DispatchKey::new(10),
                deadline: Some(Deadline::from_millis(2500)),
            }),
            corr,
            Some(Bytes::from_static(b"call")),
        ),
        (
            "160_actor_call_send",
            Record::ActorCall(ActorCall {
                actor: actor(),
                object_generation: ObjectGeneration::new(5),
                authority_owner_generation: AuthorityOwnerGeneration::new(9),
                owner_lease_generation: OwnerLeaseGeneration::new(4),
                target_node_generation: NodeGeneration::new(1_700_000_000_002),
                key: DispatchKey::new(11),
                deadline: None,
            }),
            none,
            Some(Bytes::from_static(b"send")),
        ),
    ]
}
