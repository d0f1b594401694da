//! Contract tests of the spec records' wire shape (SB-5.3, SB-6.2, SB-8.7, SB-8.8, SB-14.26).
//!
//! Field sets are pinned by exhaustive destructuring (no `..`): adding or removing a field fails
//! to compile here, and the golden fixtures pin the encoding.

mod common;

use bytes::Bytes;
use serde::Serialize;
use zlink_wire::*;

fn envelope(command: u8, flags: u8, correlation: u64, body: &[u8]) -> Bytes {
    let mut bytes = vec![VERSION, command, flags, 0];
    bytes.extend_from_slice(&correlation.to_be_bytes());
    bytes.extend_from_slice(body);
    Bytes::from(bytes)
}

fn sample(name: &str) -> (Record, CorrelationId, Option<Bytes>) {
    common::samples()
        .into_iter()
        .find(|(n, ..)| *n == name)
        .map(|(_, r, c, p)| (r, c, p))
        .unwrap()
}

// spec: SB-14.26 — 43 carries no sequence/high-water: the record has exactly a seal identity and
// an outcome (destructured without `..`), and the seal identity has no sequence either.
#[test]
fn sealed_43_has_no_sequence_or_high_water_field() {
    let SessionRelocationSealed { seal, outcome } = SessionRelocationSealed {
        seal: common::seal(),
        outcome: SealOutcome::Installed,
    };
    let SealIdentity {
        relocation: _,
        session_lifecycle: _,
        session: _,
        binding_generation: _,
    } = seal;
    let _ = outcome;
    let (record, correlation, _) = sample("043_session_relocation_sealed");
    let frames = encode(&record, correlation, None).unwrap();
    let body = &frames.envelope()[HEADER_LEN..];
    // [seal [relocation, session_lifecycle, session, binding_generation], outcome]
    assert_eq!(body[0], 0x92);
    assert_eq!(body[1], 0x94);
}

/// A 43 as a buggy or hostile peer might send it, with a sequence/high-water field appended.
#[derive(Serialize)]
struct SealedWithHighWater {
    seal: SealIdentity,
    outcome: SealOutcome,
    high_water: u64,
}

// spec: SB-14.26 — a 43 body with an extra (high-water) field is rejected, in the compact
// (array) form and in the named (map) form.
#[test]
fn sealed_43_with_extra_field_is_rejected() {
    let extra = SealedWithHighWater {
        seal: common::seal(),
        outcome: SealOutcome::Installed,
        high_water: 345,
    };
    for body in [
        rmp_serde::to_vec(&extra).unwrap(),
        rmp_serde::to_vec_named(&extra).unwrap(),
    ] {
        let frame = [envelope(43, Flags::REPLY.bits(), 9, &body)];
        let err = decode(&frame, &Limits::DEFAULT).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::Body {
                    command: Command::SessionRelocationSealed,
                    ..
                }
            ),
            "{err:?}"
        );
    }
    // The same body without the extra field is accepted in both forms.
    #[derive(Serialize)]
    struct Sealed {
        seal: SealIdentity,
        outcome: SealOutcome,
    }
    let plain = Sealed {
        seal: common::seal(),
        outcome: SealOutcome::Installed,
    };
    for body in [
        rmp_serde::to_vec(&plain).unwrap(),
        rmp_serde::to_vec_named(&plain).unwrap(),
    ] {
        let frame = [envelope(43, Flags::REPLY.bits(), 9, &body)];
        assert!(decode(&frame, &Limits::DEFAULT).is_ok());
    }
}

// spec: SB-14.26 — 45 can be neither encoded nor accepted: no Command or Record maps to 45, and
// every frame carrying 45 is `ReservedCommand`, whatever its flags, correlation or body.
#[test]
fn command_45_is_never_encoded_nor_accepted() {
    assert_eq!(RESERVED_COMMAND, 45);
    assert!(Command::ALL.iter().all(|c| c.number() != 45));
    for (_, record, correlation, payload) in common::samples() {
        let frames = encode(&record, correlation, payload).unwrap();
        assert_ne!(frames.envelope()[1], 45);
    }
    for flags in 0..=u8::MAX {
        for correlation in [0, 1, u64::MAX] {
            let env = envelope(45, flags, correlation, &[0x90]);
            assert!(matches!(
                peek_header(&env),
                Err(DecodeError::ReservedCommand)
            ));
            let with_payload = [env.clone(), Bytes::from_static(b"x")];
            for parts in [&[env.clone()][..], &with_payload[..]] {
                assert!(matches!(
                    decode(parts, &Limits::DEFAULT),
                    Err(DecodeError::ReservedCommand)
                ));
            }
        }
    }
}

// spec: SB-14.26 — 44 has no response: it is one-way (correlation must be none) and can never be
// a reply.
#[test]
fn route_44_is_one_way_without_response() {
    use zlink_wire::command::{CorrelationRule, ReplyRule};
    assert_eq!(
        Command::SessionRelocationRoute.correlation(),
        CorrelationRule::None
    );
    assert_eq!(Command::SessionRelocationRoute.reply(), ReplyRule::Never);
    let (record, _, _) = sample("044_session_relocation_route_commit");
    assert!(matches!(
        encode(&record, CorrelationId::new(5), None),
        Err(EncodeError::Correlation {
            command: Command::SessionRelocationRoute,
            ..
        })
    ));
    let frames = encode(&record, CorrelationId::NONE, None).unwrap();
    let body = &frames.envelope()[HEADER_LEN..];
    assert!(matches!(
        decode(&[envelope(44, 0, 5, body)], &Limits::DEFAULT),
        Err(DecodeError::Correlation { .. })
    ));
    assert!(matches!(
        decode(
            &[envelope(44, Flags::REPLY.bits(), 0, body)],
            &Limits::DEFAULT
        ),
        Err(DecodeError::ReplyFlag { .. })
    ));
}

// spec: SB-8.7 — 44 commit carries relocation identity, ActorId, ObjectGeneration, target
// MeshName/NodeRid, session identity, SessionRid and binding generation.
#[test]
fn route_44_commit_fields() {
    let (record, ..) = sample("044_session_relocation_route_commit");
    let Record::SessionRelocationRoute(SessionRelocationRoute::Commit(commit)) = record else {
        panic!("commit sample")
    };
    let RouteCommit {
        relocation,
        actor,
        object_generation,
        target,
        session_lifecycle,
        session,
        binding_generation,
    } = commit;
    let ActorLocation { mesh, node, .. } = target;
    assert_eq!(relocation, RelocationId::new(77));
    assert_eq!(actor, common::actor());
    assert_eq!(object_generation, ObjectGeneration::new(5));
    assert_eq!((mesh.as_str(), node.as_str()), ("main", "node-b"));
    assert_eq!(session_lifecycle, SessionLifecycleGeneration::new(3));
    assert_eq!(session, SessionRid::new(1001));
    assert_eq!(binding_generation, BindingGeneration::new(12));
}

// spec: SB-8.8 — 44 abort carries only the matching seal identity and the abort action; a body
// with anything more is rejected.
#[test]
fn route_44_abort_carries_only_seal_and_action() {
    let RouteAbort { seal, action } = RouteAbort {
        seal: common::seal(),
        action: AbortAction::ResubmitToSource,
    };
    assert_eq!(seal, common::seal());
    assert_eq!(action, AbortAction::ResubmitToSource);
    #[derive(Serialize)]
    enum Route {
        Abort(SealIdentity, AbortAction, u64),
    }
    let body = rmp_serde::to_vec(&Route::Abort(common::seal(), action, 1)).unwrap();
    assert!(matches!(
        decode(&[envelope(44, 0, 0, &body)], &Limits::DEFAULT),
        Err(DecodeError::Body { .. })
    ));
}

// spec: SB-6.2 — 51 carries the actor authority source fence and the previous session owner's
// Node RID, lifecycle generation, owner id, owner lease generation, session RID and retired
// binding generation (plus the authority target the sender must equal).
#[test]
fn replaced_51_fields() {
    let (record, correlation, payload) = sample("051_bound_session_replaced");
    assert!(correlation.is_none() && payload.is_none(), "51 is one-way");
    let Record::BoundSessionReplaced(replaced) = record else {
        panic!("51 sample")
    };
    let BoundSessionReplaced {
        actor,
        authority_source,
        authority_target,
        previous,
    } = replaced;
    let AuthorityFence {
        node: _,
        node_generation: _,
        authority_owner_generation: _,
        owner_lease_generation: _,
    } = authority_source;
    let PreviousSessionOwner {
        node,
        lifecycle,
        owner,
        owner_lease_generation,
        session,
        retired_binding_generation,
    } = previous;
    assert_eq!(actor, common::actor());
    assert_eq!(authority_target.node.as_str(), "node-c");
    assert_eq!(node.as_str(), "node-a");
    assert_eq!(lifecycle, SessionLifecycleGeneration::new(3));
    assert_eq!(owner, OwnerId::new(21));
    assert_eq!(owner_lease_generation, OwnerLeaseGeneration::new(2));
    assert_eq!(session, SessionRid::new(1001));
    assert_eq!(retired_binding_generation, BindingGeneration::new(12));
}

// spec: SB-5.3 — 24 carries binding generation and session sequence (the bound-session tail);
// the binding token never goes on the wire; the payload is a separate, uncopied part.
#[test]
fn actor_send_24_carries_bound_session_tail() {
    let (record, correlation, payload) = sample("024_actor_send");
    let Record::ActorSend(send) = record.clone() else {
        panic!("24 sample")
    };
    let ActorSend {
        actor: _,
        object_generation: _,
        authority_owner_generation: _,
        owner_lease_generation: _,
        session_lifecycle: _,
        key: _,
        deadline: _,
        tail,
    } = send;
    let BoundSessionTail {
        binding_generation,
        session_sequence,
    } = tail;
    assert_eq!(binding_generation, BindingGeneration::new(12));
    assert_eq!(session_sequence, SessionSequence::new(345));
    let payload = payload.unwrap();
    let frames = encode(&record, correlation, Some(payload.clone())).unwrap();
    assert_eq!(frames.payload().unwrap().as_ptr(), payload.as_ptr());
    // 24 without a payload part is rejected both ways.
    assert!(matches!(
        encode(&record, correlation, None),
        Err(EncodeError::Payload { .. })
    ));
    let body = &frames.envelope()[HEADER_LEN..];
    assert!(matches!(
        decode(&[envelope(24, 0, 0, body)], &Limits::DEFAULT),
        Err(DecodeError::Payload {
            command: Command::ActorSend,
            present: false
        })
    ));
}

// spec: SB-5.2 — 38 carries ObjectGeneration, target NodeGeneration and AuthorityOwnerGeneration
// (the approval inputs) and the OwnerLeaseGeneration (carried only); request and terminal reply
// share number 38 and differ in the REPLY flag.
#[test]
fn bind_38_request_and_reply_share_the_number() {
    let (request, corr, _) = sample("038_bound_session_bind");
    let (reply, _, _) = sample("038_bound_session_bind_reply_ok");
    let req = encode(&request, corr, None).unwrap();
    let rep = encode(&reply, corr, None).unwrap();
    assert_eq!(req.envelope()[1], 38);
    assert_eq!(rep.envelope()[1], 38);
    assert!(!peek_header(req.envelope()).unwrap().is_reply());
    assert!(peek_header(rep.envelope()).unwrap().is_reply());
    // A request body under the REPLY flag is not a reply: typed error, not a mix-up.
    let mut flipped = req.envelope().to_vec();
    flipped[2] |= Flags::REPLY.bits();
    assert!(matches!(
        decode(&[Bytes::from(flipped)], &Limits::DEFAULT),
        Err(DecodeError::Body {
            command: Command::BoundSessionBind,
            ..
        })
    ));
    // Requests and replies need a correlation.
    assert!(matches!(
        encode(&request, CorrelationId::NONE, None),
        Err(EncodeError::Correlation { .. })
    ));
}

// spec: SB-5.5 — 36 carries the four push-currency values: source ObjectGeneration, source
// NodeGeneration, AuthorityOwnerGeneration and expected binding generation.
#[test]
fn bound_session_send_36_fields() {
    let (record, ..) = sample("036_bound_session_send");
    let Record::BoundSessionSend(send) = record else {
        panic!("36 sample")
    };
    let BoundSessionSend {
        actor: _,
        object_generation,
        source_node_generation,
        authority_owner_generation,
        session_lifecycle: _,
        session: _,
        binding_generation,
        key: _,
    } = send;
    assert_eq!(object_generation, ObjectGeneration::new(5));
    assert_eq!(
        source_node_generation,
        NodeGeneration::new(1_700_000_000_002)
    );
    assert_eq!(authority_owner_generation, AuthorityOwnerGeneration::new(9));
    assert_eq!(binding_generation, BindingGeneration::new(12));
}
