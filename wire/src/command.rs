//! Command numbers and the per-command rules the frame codec enforces.
//!
//! Invariants:
//! - Spec command numbers are normative: 24, 36, 38, 42, 43, 44, 51 (spec "Wire commands").
//! - 45 is reserved: it is not a [`Command`] variant, so no record and no header can carry it;
//!   decoding it is [`DecodeError::ReservedCommand`] (SB-14.26).
//! - Mesh commands live in [`MESH_RANGE`] (128..=191), disjoint from every spec number; spec
//!   numbers are all below 128.

use std::ops::RangeInclusive;

use crate::error::DecodeError;

/// The reserved spec command number: never sent, never accepted.
pub const RESERVED_COMMAND: u8 = 45;

/// The number range of the mesh's own records. Never collides with spec commands (all < 128).
pub const MESH_RANGE: RangeInclusive<u8> = 128..=191;

/// A command number that may appear on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum Command {
    /// 24 actorSend: session owner → actor owner, session→actor payload with bound-session tail.
    ActorSend = 24,
    /// 36 boundSessionSend: actor owner → session owner, actor→session push.
    BoundSessionSend = 36,
    /// 38 boundSessionBind: session owner → actor owner bind request, and its terminal reply
    /// (same number, REPLY flag).
    BoundSessionBind = 38,
    /// 42 sessionRelocationSeal: coordinator → session owner, install a seal.
    SessionRelocationSeal = 42,
    /// 43 sessionRelocationSealed: session owner → coordinator, seal result (no sequence, no
    /// high-water).
    SessionRelocationSealed = 43,
    /// 44 sessionRelocationRoute: target or coordinator → session owner, commit or abort; one-way.
    SessionRelocationRoute = 44,
    /// 51 boundSessionReplaced: actor owner → previous session owner; one-way, at most once.
    BoundSessionReplaced = 51,
    /// 128 mesh handshake: initiator's hello.
    Hello = 128,
    /// 129 mesh handshake: acceptor's challenge.
    Challenge = 129,
    /// 130 mesh handshake: initiator's proof.
    Proof = 130,
    /// 131 mesh handshake: accepted.
    Welcome = 131,
    /// 132 mesh handshake: rejected.
    Reject = 132,
    /// 136 heartbeat ping.
    Ping = 136,
    /// 137 heartbeat pong.
    Pong = 137,
    /// 138 flow-control credit.
    FlowCredit = 138,
    /// 139 batch: one frame holding several length-prefixed records (envelope and optional
    /// payload each); never a record itself, read with [`crate::batch::BatchFrame`].
    Batch = 139,
    /// 144 generic request envelope (payload frame).
    Request = 144,
    /// 145 generic reply envelope (payload frame).
    Reply = 145,
    /// 146 error reply carrying a public [`crate::ErrorKind`].
    ErrorReply = 146,
    /// 147 generic one-way envelope (payload frame).
    OneWay = 147,
    /// 148 server → client push (payload frame).
    Push = 148,
    /// 149 disconnect notification.
    Disconnect = 149,
    /// 160 direct actor send / request (payload frame).
    ActorCall = 160,
}

/// Whether a command's frame carries the payload part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PayloadRule {
    /// The payload part is always present (it may be empty).
    Required,
    /// The frame never has a payload part.
    Forbidden,
}

/// What a command's header correlation must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CorrelationRule {
    /// Always [`crate::CorrelationId::NONE`] (one-way).
    None,
    /// Always non-zero (requests and replies).
    Required,
    /// Either: `NONE` for a send, non-zero for a request.
    Optional,
}

/// Whether a command's header carries the REPLY flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyRule {
    /// Never a reply.
    Never,
    /// Always a reply.
    Always,
    /// Request without the flag, terminal reply with it (38).
    Either,
}

impl Command {
    /// Every command, in number order.
    pub const ALL: [Command; 23] = [
        Command::ActorSend,
        Command::BoundSessionSend,
        Command::BoundSessionBind,
        Command::SessionRelocationSeal,
        Command::SessionRelocationSealed,
        Command::SessionRelocationRoute,
        Command::BoundSessionReplaced,
        Command::Hello,
        Command::Challenge,
        Command::Proof,
        Command::Welcome,
        Command::Reject,
        Command::Ping,
        Command::Pong,
        Command::FlowCredit,
        Command::Batch,
        Command::Request,
        Command::Reply,
        Command::ErrorReply,
        Command::OneWay,
        Command::Push,
        Command::Disconnect,
        Command::ActorCall,
    ];

    /// The wire number.
    #[must_use]
    pub const fn number(self) -> u8 {
        self as u8
    }

    /// The command for a wire number.
    ///
    /// # Errors
    /// [`DecodeError::ReservedCommand`] for 45, [`DecodeError::UnknownCommand`] for any other
    /// unassigned number.
    pub const fn from_number(number: u8) -> Result<Command, DecodeError> {
        Ok(match number {
            24 => Command::ActorSend,
            36 => Command::BoundSessionSend,
            38 => Command::BoundSessionBind,
            42 => Command::SessionRelocationSeal,
            43 => Command::SessionRelocationSealed,
            44 => Command::SessionRelocationRoute,
            RESERVED_COMMAND => return Err(DecodeError::ReservedCommand),
            51 => Command::BoundSessionReplaced,
            128 => Command::Hello,
            129 => Command::Challenge,
            130 => Command::Proof,
            131 => Command::Welcome,
            132 => Command::Reject,
            136 => Command::Ping,
            137 => Command::Pong,
            138 => Command::FlowCredit,
            139 => Command::Batch,
            144 => Command::Request,
            145 => Command::Reply,
            146 => Command::ErrorReply,
            147 => Command::OneWay,
            148 => Command::Push,
            149 => Command::Disconnect,
            160 => Command::ActorCall,
            _ => return Err(DecodeError::UnknownCommand { number }),
        })
    }

    /// The name: the spec's camelCase name for spec commands, the record name for mesh commands.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Command::ActorSend => "actorSend",
            Command::BoundSessionSend => "boundSessionSend",
            Command::BoundSessionBind => "boundSessionBind",
            Command::SessionRelocationSeal => "sessionRelocationSeal",
            Command::SessionRelocationSealed => "sessionRelocationSealed",
            Command::SessionRelocationRoute => "sessionRelocationRoute",
            Command::BoundSessionReplaced => "boundSessionReplaced",
            Command::Hello => "hello",
            Command::Challenge => "challenge",
            Command::Proof => "proof",
            Command::Welcome => "welcome",
            Command::Reject => "reject",
            Command::Ping => "ping",
            Command::Pong => "pong",
            Command::FlowCredit => "flowCredit",
            Command::Batch => "batch",
            Command::Request => "request",
            Command::Reply => "reply",
            Command::ErrorReply => "errorReply",
            Command::OneWay => "oneWay",
            Command::Push => "push",
            Command::Disconnect => "disconnect",
            Command::ActorCall => "actorCall",
        }
    }

    /// `true` for the mesh's own commands ([`MESH_RANGE`]), `false` for spec commands.
    #[must_use]
    pub const fn is_mesh(self) -> bool {
        self.number() >= *MESH_RANGE.start() && self.number() <= *MESH_RANGE.end()
    }

    /// Whether the frame carries a payload part.
    #[must_use]
    pub const fn payload(self) -> PayloadRule {
        match self {
            Command::ActorSend
            | Command::BoundSessionSend
            | Command::Request
            | Command::Reply
            | Command::OneWay
            | Command::Push
            | Command::ActorCall => PayloadRule::Required,
            _ => PayloadRule::Forbidden,
        }
    }

    /// What the header correlation must be.
    #[must_use]
    pub const fn correlation(self) -> CorrelationRule {
        match self {
            Command::ActorSend | Command::ActorCall => CorrelationRule::Optional,
            Command::BoundSessionBind
            | Command::SessionRelocationSeal
            | Command::SessionRelocationSealed
            | Command::Request
            | Command::Reply
            | Command::ErrorReply => CorrelationRule::Required,
            _ => CorrelationRule::None,
        }
    }

    /// Whether the header carries the REPLY flag.
    #[must_use]
    pub const fn reply(self) -> ReplyRule {
        match self {
            Command::BoundSessionBind => ReplyRule::Either,
            Command::SessionRelocationSealed | Command::Reply | Command::ErrorReply => {
                ReplyRule::Always
            }
            _ => ReplyRule::Never,
        }
    }
}

impl TryFrom<u8> for Command {
    type Error = DecodeError;
    fn try_from(number: u8) -> Result<Self, DecodeError> {
        Command::from_number(number)
    }
}

impl From<Command> for u8 {
    fn from(command: Command) -> u8 {
        command.number()
    }
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.number(), self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_numbers_are_normative() {
        assert_eq!(Command::ActorSend.number(), 24);
        assert_eq!(Command::BoundSessionSend.number(), 36);
        assert_eq!(Command::BoundSessionBind.number(), 38);
        assert_eq!(Command::SessionRelocationSeal.number(), 42);
        assert_eq!(Command::SessionRelocationSealed.number(), 43);
        assert_eq!(Command::SessionRelocationRoute.number(), 44);
        assert_eq!(Command::BoundSessionReplaced.number(), 51);
    }

    // spec: SB-14.26 — 45 is no Command, so it can be neither encoded nor accepted.
    #[test]
    fn reserved_45_is_not_a_command() {
        assert!(matches!(
            Command::from_number(45),
            Err(DecodeError::ReservedCommand)
        ));
        assert!(Command::ALL.iter().all(|c| c.number() != RESERVED_COMMAND));
    }

    #[test]
    fn every_number_maps_back_and_ranges_never_collide() {
        for n in 0..=u8::MAX {
            if let Ok(c) = Command::from_number(n) {
                assert_eq!(c.number(), n);
                assert_eq!(c.is_mesh(), MESH_RANGE.contains(&n));
                assert!(c.is_mesh() || n < *MESH_RANGE.start());
            }
        }
        for c in Command::ALL {
            assert_eq!(Command::from_number(c.number()).ok(), Some(c));
        }
        assert!(Command::ALL.windows(2).all(|w| w[0] < w[1]));
    }
}
