//! The chat app of `zlink_apps::chat` on two in-process nodes: login (get-or-create on the home
//! node + bind), lines relayed session → player → room → every online member → push, presence,
//! duplicate login (Kicked, then the close reason Replaced), disconnect (the players' Spot hook
//! marks the member offline, membership unchanged), leave. Every wait is on an event (a push, a
//! reply, the close) with the 20 s guard; exact push lists are checked after a barrier line,
//! which travels the same FIFO path (room → player → session) as everything before it.

mod node_common;

use std::collections::VecDeque;

use node_common::*;
use zlink::actor::Message;
use zlink::node::client::NodeClient;
use zlink_apps::chat::{
    self, Chat, ChatLine, Kicked, Leave, LoggedIn, Login, Member, Presence, PresenceStatus, Said,
    Say, Who,
};
use zlink_apps::demo;
use zlink_wire::DisconnectReason;

/// A push as the chat client sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Got {
    Line(ChatLine),
    Presence(Presence),
    Kicked(Kicked),
    Other(u32),
}

fn decode(p: zlink_mesh::Push) -> Got {
    let bytes = p.payload.unwrap_or_default();
    let key = p.key;
    if key == ChatLine::KEY {
        Got::Line(rmp_serde::from_slice(&bytes).unwrap())
    } else if key == Presence::KEY {
        Got::Presence(rmp_serde::from_slice(&bytes).unwrap())
    } else if key == Kicked::KEY {
        Got::Kicked(rmp_serde::from_slice(&bytes).unwrap())
    } else {
        Got::Other(key.get())
    }
}

/// A client and every push it received, in order; `expect` waits for the next matching one.
struct Player {
    name: String,
    c: NodeClient,
    got: Vec<Got>,
    unread: VecDeque<Got>,
}

impl Player {
    fn new(name: &str, c: NodeClient) -> Self {
        Self {
            name: name.to_owned(),
            c,
            got: Vec::new(),
            unread: VecDeque::new(),
        }
    }

    async fn login(&self, room: &str) -> LoggedIn {
        self.c
            .packet(&Login {
                player: self.name.clone(),
                room: room.to_owned(),
            })
            .await
            .unwrap_or_else(|e| panic!("login {} → {room}: {e}", self.name))
    }

    async fn say(&self, text: &str) -> Said {
        self.c
            .packet(&Say {
                text: text.to_owned(),
            })
            .await
            .unwrap_or_else(|e| panic!("{} says {text:?}: {e}", self.name))
    }

    /// Waits for the first not yet expected push matching `pred` (earlier ones stay unread).
    async fn expect(&mut self, what: &str, pred: impl Fn(&Got) -> bool) -> Got {
        if let Some(i) = self.unread.iter().position(&pred) {
            return self.unread.remove(i).unwrap();
        }
        loop {
            let p = self
                .c
                .recv_push_timeout(TIMEOUT)
                .await
                .unwrap_or_else(|| panic!("{}: no push {what}; got {:?}", self.name, self.got));
            let g = decode(p);
            self.got.push(g.clone());
            if pred(&g) {
                return g;
            }
            self.unread.push_back(g);
        }
    }

    async fn expect_line(&mut self, room: &str, from: &str, text: &str) -> ChatLine {
        let what = format!("line {from}: {text:?} in {room}");
        match self
            .expect(
                &what,
                |g| matches!(g, Got::Line(l) if l.room == room && l.from == from && l.text == text),
            )
            .await
        {
            Got::Line(l) => l,
            _ => unreachable!(),
        }
    }

    async fn expect_presence(&mut self, room: &str, player: &str, status: PresenceStatus) {
        let want = Presence {
            room: room.to_owned(),
            player: player.to_owned(),
            status,
        };
        let what = format!("{want:?}");
        self.expect(&what, |g| *g == Got::Presence(want.clone()))
            .await;
    }
}

fn line(room: &str, from: &str, seq: u64, text: &str) -> Got {
    Got::Line(ChatLine {
        room: room.into(),
        from: from.into(),
        seq,
        text: text.into(),
    })
}

fn presence(room: &str, player: &str, status: PresenceStatus) -> Got {
    Got::Presence(Presence {
        room: room.into(),
        player: player.into(),
        status,
    })
}

fn member(player: &str, online: bool) -> Member {
    Member {
        player: player.into(),
        online,
    }
}

/// The first of `base`, `base1`, `base2`, … whose actor id (`id_of`) has home node `node`.
fn named_on(base: &str, node: &str, id_of: fn(&str) -> String) -> String {
    (0..)
        .map(|i| {
            if i == 0 {
                base.to_owned()
            } else {
                format!("{base}{i}")
            }
        })
        .find(|n| chat::home_node(&id_of(n), &["a", "b"]).as_deref() == Some(node))
        .unwrap()
}

// spec: SB-5.3
// spec: SB-5.5
// spec: SB-6.3
// spec: SB-6.4
// spec: SB-7.1
// spec: SB-7.6
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_rooms_across_two_nodes() {
    let app = Chat::new(["a", "b"]);
    let mut registry = demo::registry().unwrap();
    app.registry_into(&mut registry).unwrap();
    let sessions = app.sessions(demo::sessions());
    let (a, b, _ta, _tb) = session_pair(memory_store(), sessions, Some(registry)).await;

    // Room 1 lives on a, room 2 on b; every player's actor lives on the node its session is
    // not on, so relays (24), room → player sends (160) and pushes (36) cross the mesh.
    let r1 = named_on("lobby", "a", chat::room_id);
    let r2 = named_on("arena", "b", chat::room_id);
    let mut alice = Player::new(&named_on("alice", "b", chat::player_id), client_of(&a));
    let mut bob = Player::new(&named_on("bob", "a", chat::player_id), client_of(&b));
    let mut carol = Player::new(&named_on("carol", "b", chat::player_id), client_of(&a));
    let mut dave = Player::new(&named_on("dave", "a", chat::player_id), client_of(&b));
    let (al, bo, ca, da) = (
        alice.name.clone(),
        bob.name.clone(),
        carol.name.clone(),
        dave.name.clone(),
    );

    // Logins.
    let li = alice.login(&r1).await;
    assert_eq!(
        (
            li.session_node.as_str(),
            li.player_node.as_str(),
            li.room_node.as_str()
        ),
        ("a", "b", "a")
    );
    assert_eq!(li.members, vec![member(&al, true)]);
    let li = bob.login(&r1).await;
    assert_eq!(
        (
            li.session_node.as_str(),
            li.player_node.as_str(),
            li.room_node.as_str()
        ),
        ("b", "a", "a")
    );
    assert_eq!(li.members, vec![member(&al, true), member(&bo, true)]);
    alice
        .expect_presence(&r1, &bo, PresenceStatus::Joined)
        .await;
    let li = carol.login(&r2).await;
    assert_eq!((li.player_node.as_str(), li.room_node.as_str()), ("b", "b"));
    let li = dave.login(&r2).await;
    assert_eq!(li.members, vec![member(&ca, true), member(&da, true)]);
    carol
        .expect_presence(&r2, &da, PresenceStatus::Joined)
        .await;

    // Lines reach every member of the room, and only them.
    assert_eq!(
        alice.say("hello").await,
        Said {
            seq: 1,
            recipients: 2
        }
    );
    assert_eq!(bob.say("hi alice").await.seq, 2);
    assert_eq!(dave.say("arena only").await.recipients, 2);
    for p in [&mut alice, &mut bob] {
        p.expect_line(&r1, &al, "hello").await;
        p.expect_line(&r1, &bo, "hi alice").await;
    }
    for p in [&mut carol, &mut dave] {
        p.expect_line(&r2, &da, "arena only").await;
    }

    // Duplicate login of alice from node b: the binding moves; the old client gets Kicked, then
    // the close reason Replaced.
    let mut alice2 = Player::new(&al, client_of(&b));
    let li = alice2.login(&r1).await;
    assert_eq!(li.members, vec![member(&al, true), member(&bo, true)]);
    alice
        .expect("Kicked", |g| matches!(g, Got::Kicked(_)))
        .await;
    assert_eq!(
        tokio::time::timeout(TIMEOUT, alice.c.closed())
            .await
            .expect("old session closed"),
        DisconnectReason::Replaced
    );
    while let Some(p) = alice.c.recv_push_timeout(TIMEOUT).await {
        alice.got.push(decode(p));
    }
    assert_eq!(
        alice.got,
        vec![
            presence(&r1, &bo, PresenceStatus::Joined),
            line(&r1, &al, 1, "hello"),
            line(&r1, &bo, 2, "hi alice"),
            Got::Kicked(Kicked {
                reason: format!("{al} logged in from another session")
            }),
        ],
        "the replaced client's pushes"
    );
    assert_eq!(bob.say("again").await.recipients, 2);
    alice2.expect_line(&r1, &bo, "again").await;
    bob.expect_line(&r1, &bo, "again").await;

    // Dave disconnects: carol sees him offline; he stays a member.
    let Player { c: dave_client, .. } = dave;
    dave_client.close().await;
    carol
        .expect_presence(&r2, &da, PresenceStatus::Offline)
        .await;
    let who: Vec<Member> = carol.c.packet(&Who).await.unwrap();
    assert_eq!(who, vec![member(&ca, true), member(&da, false)]);
    assert_eq!(
        carol.say("anyone?").await,
        Said {
            seq: 2,
            recipients: 1
        }
    );
    carol.expect_line(&r2, &ca, "anyone?").await;

    // Dave comes back on node a (Online), then carol leaves (Left).
    let mut dave2 = Player::new(&da, client_of(&a));
    let li = dave2.login(&r2).await;
    assert_eq!(li.members, vec![member(&ca, true), member(&da, true)]);
    carol
        .expect_presence(&r2, &da, PresenceStatus::Online)
        .await;
    assert_eq!(carol.c.packet(&Leave).await.unwrap(), Some(r2.clone()));
    dave2.expect_presence(&r2, &ca, PresenceStatus::Left).await;
    let who: Vec<Member> = dave2.c.packet(&Who).await.unwrap();
    assert_eq!(who, vec![member(&da, true)]);

    // Barrier lines, then the exact push lists.
    bob.say("bye r1").await;
    for p in [&mut alice2, &mut bob] {
        p.expect_line(&r1, &bo, "bye r1").await;
    }
    dave2.say("bye r2").await;
    dave2.expect_line(&r2, &da, "bye r2").await;
    assert_eq!(
        bob.got,
        vec![
            line(&r1, &al, 1, "hello"),
            line(&r1, &bo, 2, "hi alice"),
            line(&r1, &bo, 3, "again"),
            line(&r1, &bo, 4, "bye r1"),
        ],
        "bob's pushes (no presence for alice: her session was replaced, not disconnected)"
    );
    assert_eq!(
        alice2.got,
        vec![line(&r1, &bo, 3, "again"), line(&r1, &bo, 4, "bye r1")]
    );
    assert_eq!(
        carol.got,
        vec![
            presence(&r2, &da, PresenceStatus::Joined),
            line(&r2, &da, 1, "arena only"),
            presence(&r2, &da, PresenceStatus::Offline),
            line(&r2, &ca, 2, "anyone?"),
            presence(&r2, &da, PresenceStatus::Online),
        ]
    );
    assert_eq!(
        dave2.got,
        vec![
            presence(&r2, &ca, PresenceStatus::Left),
            line(&r2, &da, 3, "bye r2"),
        ]
    );
}

// A second login as another player on one session, and packets before login, are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_player_per_session() {
    let app = Chat::new(["a", "b"]);
    let mut registry = demo::registry().unwrap();
    app.registry_into(&mut registry).unwrap();
    let (a, _b, _ta, _tb) = session_pair(
        memory_store(),
        app.sessions(demo::sessions()),
        Some(registry),
    )
    .await;
    let c = client_of(&a);
    let e = c.packet(&Say { text: "x".into() }).await.unwrap_err();
    assert_eq!(e.kind(), zlink::actor::ErrorKind::InvalidOperation, "{e}");
    let e = c
        .packet(&Login {
            player: String::new(),
            room: "r".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind(), zlink::actor::ErrorKind::InvalidOperation, "{e}");
    c.packet(&Login {
        player: "erin".into(),
        room: "r".into(),
    })
    .await
    .unwrap();
    // Logging in again as the same player is idempotent.
    let li = c
        .packet(&Login {
            player: "erin".into(),
            room: "r".into(),
        })
        .await
        .unwrap();
    assert_eq!(li.members, vec![member("erin", true)]);
    let e = c
        .packet(&Login {
            player: "frank".into(),
            room: "r".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind(), zlink::actor::ErrorKind::InvalidOperation, "{e}");
}
