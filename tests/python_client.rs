//! The Python example client (`examples/python-client/`, written from docs/CLIENT-PROTOCOL.md)
//! against two in-process nodes serving the demo session application: framework operations,
//! bind, relayed request, pushes (alone and in 139 batches), one-way packets, the refusals of an
//! unbound push and relay (InvalidOperation, counted), NODE_INFO's fields, then replacement by a
//! Rust client's BindOrGet — the Python session sees the `Replaced` push and Disconnect
//! { Replaced }.
//!
//! Requires python3 with pyzmq and msgpack (`python3 -m pip install pyzmq msgpack`).

mod node_common;

use std::process::Stdio;

use node_common::{TIMEOUT, client_of, memory_store, session_pair, tapped};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use zlink::node::client::Placement;
use zlink_apps::demo;
use zlink_mesh::{LinkKind, TapDirection};
use zlink_wire::DisconnectReason;

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/python-client/test_session.py"
);

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Fails clearly when the Python side cannot run at all.
fn require_python() {
    let out = std::process::Command::new("python3")
        .args(["-c", "import zmq, msgpack"])
        .output();
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "python3 lacks pyzmq or msgpack (install: python3 -m pip install pyzmq msgpack): {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("python3 is required for this test: {e}"),
    }
}

struct Script {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Script {
    /// The next stdout line of the script, which must start with `prefix` (20 s guard).
    async fn expect(&mut self, prefix: &str) -> String {
        let line = tokio::time::timeout(TIMEOUT, self.lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("python client: no line '{prefix}' within {TIMEOUT:?}"))
            .expect("reading the script's stdout");
        match line {
            Some(l) if l.starts_with(prefix) => l,
            Some(l) => panic!("python client: expected '{prefix}', got '{l}'"),
            None => {
                let status = self.child.wait().await.expect("script status");
                panic!("python client ended ({status}) before '{prefix}' (its stderr is above)")
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn python_client_binds_relays_receives_pushes_and_is_replaced() {
    require_python();
    let (a, b, tap_a, _tap_b) = session_pair(memory_store(), demo::sessions(), None).await;
    let rust = client_of(&a);
    let echo = rust
        .create("echo", "e1", Placement::on("b"))
        .await
        .expect("create echo on b");
    let endpoint = a.endpoints().client.clone().expect("client endpoint");
    let ref_hex = hex(&rmp_serde::to_vec_named(&echo).expect("encode ActorRef"));

    let mut child = Command::new("python3")
        .arg("-u")
        .arg(SCRIPT)
        .arg(&endpoint)
        .arg(&ref_hex)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start python3");
    let stdout = child.stdout.take().expect("stdout");
    let mut script = Script {
        child,
        lines: BufReader::new(stdout).lines(),
    };
    script.expect("connected").await;
    script.expect("framework ok").await;
    script.expect("bound").await;
    script.expect("echo ok").await;
    script.expect("push ok").await;
    let oneway = script.expect("oneway ok").await;
    println!("python client: {oneway}");
    // Flow credit as the document says (issue 25): the stranger's grant, the rest once
    // accepted, every record's full cost returned — the counters end at the whole window.
    script.expect("credit ok").await;
    assert_eq!(
        a.info().mesh_drops.get("credit_exceeded"),
        Some(&1),
        "the script's first record, larger than a stranger's window, was dropped"
    );
    script.expect("ready-for-replace").await;

    // A second session (a Rust client) asks BindOrGet for the same actor: it holds no binding
    // of it, so this is a bind, and the Python session is replaced (SB-5.13, SB-6.1).
    let other = client_of(&a);
    let bound: zlink::actor::ActorRef = other
        .packet(&demo::session::BindOrGet {
            actor: echo.clone(),
        })
        .await
        .expect("BindOrGet from the second session");
    assert_eq!(bound.id(), echo.id());

    assert_eq!(script.expect("replaced ").await, "replaced e1");
    assert_eq!(
        script.expect("closed ").await,
        format!("closed {}", DisconnectReason::Replaced.code())
    );
    let status = tokio::time::timeout(TIMEOUT, script.child.wait())
        .await
        .expect("python client did not exit")
        .expect("script status");
    assert!(status.success(), "python client failed: {status}");

    // The bytes docs/CLIENT-PROTOCOL.md shows for the end of this session (section 10).
    let sent = |cmd: u8| -> Vec<String> {
        tapped(&tap_a, TapDirection::Sent, cmd)
            .into_iter()
            .filter(|f| f.link == LinkKind::Client)
            .map(|f| {
                f.frames
                    .iter()
                    .map(|p| hex(p))
                    .collect::<Vec<_>>()
                    .join("|")
            })
            .collect()
    };
    let replaced = "0194010000000000000000009164|81a86163746f725f6964a26531";
    assert!(
        sent(148).iter().any(|f| f == replaced),
        "no Replaced push {replaced}"
    );
    let disconnect = "0195000000000000000000009104";
    assert!(
        sent(149).iter().any(|f| f == disconnect),
        "no Disconnect {disconnect}"
    );

    // The actor stays bound to the new session: its pushes reach the Rust client.
    let reply: serde_bytes::ByteBuf = other
        .packet(&demo::session::RelayRequest {
            actor_id: "e1".into(),
            key: 11,
            payload: rmp_serde::to_vec_named(&demo::EchoPush(b"after".to_vec())).unwrap(),
            timeout_ms: 5_000,
        })
        .await
        .expect("relay EchoPush from the new session");
    assert_eq!(reply.as_slice(), [0xc0]);
    let push = other.recv_push_timeout(TIMEOUT).await.expect("push");
    assert_eq!(push.key.get(), 10);
    drop((rust, other, b));
}
