//! A peer in a separate OS process (`zlink-mesh-peer`): handshake across processes, relay
//! and completion-path replies, kill -9 → peer down, restart → new generation.

mod common;

use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use tokio::io::{AsyncBufReadExt, BufReader};
use zlink_mesh::{DispatchKey, MeshNode, NodeGeneration, PeerEvent};

async fn spawn_peer(node: &MeshNode) -> (tokio::process::Child, NodeGeneration) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_zlink-mesh-peer"))
        .args([
            "test",
            "proc",
            node.node().as_str(),
            &node.endpoints().relay,
            &node.endpoints().completion,
        ])
        .env("ZLINK_MESH_SECRET", std::str::from_utf8(SECRET).unwrap())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // READY <node> <generation> peer-generation <g>
    let mut it = line.split_whitespace();
    assert_eq!(it.next(), Some("READY"), "{line}");
    assert_eq!(it.next(), Some("proc"));
    let generation = NodeGeneration::new(it.next().unwrap().parse().unwrap());
    (child, generation)
}

// spec: SB-9 (a process restart is a new lifecycle), SB-14.7 (relay over the raw ROUTER path
// between processes), EG-4 (reply on the completion connection)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_process_peer_kill_and_restart() {
    let mut c = config("host");
    c.liveness.peer_timeout = Duration::from_millis(1500);
    let (node, _inbound) = MeshNode::start(c).unwrap();
    let mut events = node.subscribe();
    let proc_rid = rid("proc");

    let (mut child, g1) = spawn_peer(&node).await;
    assert_eq!(node.wait_peer_up(&proc_rid, None, WAIT).await, Some(g1));
    let r = node
        .request(
            &proc_rid,
            DispatchKey::new(1),
            Bytes::from_static(b"echo-1"),
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(r.payload.as_deref(), Some(&b"echo-1"[..]));

    // kill -9: no Disconnect record; the host notices through liveness (ZMTP heartbeat or
    // mesh ping timeout).
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    loop {
        match tokio::time::timeout(WAIT, events.recv())
            .await
            .unwrap()
            .unwrap()
        {
            PeerEvent::Down {
                node: n,
                generation,
                ..
            } if n == proc_rid => {
                assert_eq!(generation, g1);
                break;
            }
            _ => {}
        }
    }
    assert!(node.peer_generation(&proc_rid).is_none());

    let (mut child2, g2) = spawn_peer(&node).await;
    assert_ne!(g1, g2);
    assert_eq!(node.wait_peer_up(&proc_rid, Some(g1), WAIT).await, Some(g2));
    let r = node
        .request(
            &proc_rid,
            DispatchKey::new(1),
            Bytes::from_static(b"echo-2"),
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(r.payload.as_deref(), Some(&b"echo-2"[..]));
    child2.start_kill().unwrap();
    child2.wait().await.unwrap();
    node.shutdown().await;
}
