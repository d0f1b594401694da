//! `zlink-mesh-peer`: a minimal mesh node in its own OS process, for multi-process tests and
//! local experiments. It connects to one peer, answers every request with its payload
//! (echo) and prints `READY <node> <generation>` once the peer is up.
//!
//! Usage: `zlink-mesh-peer <mesh> <node> <peer-node> <peer-relay> <peer-completion>`;
//! the secret comes from `ZLINK_MESH_SECRET` (or `--insecure` as an extra argument).
//! `--no-read` makes it never read its inbound channel (a peer that stopped reading, for the
//! memory-bound benchmark).

#![forbid(unsafe_code)]

use std::io::Write;
use std::time::Duration;

use zlink_mesh::{MeshConfig, MeshName, MeshNode, MeshSecret, NodeRid, PeerAddress};

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 6 {
        return Err("usage: zlink-mesh-peer <mesh> <node> <peer-node> <peer-relay> <peer-completion> [--insecure]".into());
    }
    let mut cfg = MeshConfig::new(MeshName::new(&args[1])?, NodeRid::new(&args[2])?);
    let no_read = args.iter().any(|a| a == "--no-read");
    if args.iter().any(|a| a == "--insecure") {
        cfg.insecure_dev_mode = true;
    } else {
        let secret = std::env::var("ZLINK_MESH_SECRET")?;
        cfg.secret = Some(MeshSecret::new(secret.into_bytes())?);
    }
    cfg.liveness.ping_interval = Duration::from_millis(200);
    cfg.liveness.heartbeat_interval = Duration::from_millis(200);
    cfg.liveness.heartbeat_timeout = Duration::from_millis(1500);
    cfg.liveness.heartbeat_ttl = Duration::from_millis(1500);
    cfg.liveness.reconnect_interval = Duration::from_millis(50);
    cfg.liveness.reconnect_interval_max = Duration::from_millis(500);
    let peer = PeerAddress {
        node: NodeRid::new(&args[3])?,
        relay: args[4].clone(),
        completion: args[5].clone(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let (node, mut inbound) = MeshNode::start(cfg)?;
        node.connect(peer.clone())?;
        let g = node
            .wait_peer_up(&peer.node, None, Duration::from_secs(30))
            .await
            .ok_or("peer never came up")?;
        let mut out = std::io::stdout();
        writeln!(
            out,
            "READY {} {} peer-generation {}",
            node.node(),
            node.generation(),
            g
        )?;
        out.flush()?;
        if no_read {
            // Keep the receiver alive without ever reading it.
            std::future::pending::<()>().await;
        }
        while let Some(m) = inbound.recv().await {
            if let Some(reply) = m.reply {
                reply.reply(m.payload.unwrap_or_default());
            }
        }
        Ok::<(), Error>(())
    })
}
