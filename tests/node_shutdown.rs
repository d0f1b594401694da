//! Graceful shutdown (SB-10): stop accepting, drain accepted work until the deadline, close.

mod node_common;

use node_common::*;
use zlink::actor::{ActorId, ErrorKind};
use zlink::node::client::NodeClient;
use zlink::node::{Create, Node, NodeOptions};
use zlink_apps::demo::{self, Add, Get};

async fn node_with_clients(name: &str) -> Node {
    let mut mc = mesh_config(name);
    mc.client_endpoint = Some("tcp://127.0.0.1:*".into());
    Node::start(NodeOptions::new(
        mc,
        memory_store(),
        demo::registry().unwrap(),
    ))
    .await
    .unwrap()
}

// spec: SB-10 (shutdown rejects new work, drains accepted work until a deadline, then closes)
#[tokio::test]
async fn shutdown_refuses_new_work_and_drains_accepted_work() {
    let node = node_with_clients("n").await;
    let endpoint = node.endpoints().client.clone().unwrap();
    let c = node
        .create(Create::new("counter", ActorId::new("c").unwrap()))
        .await
        .unwrap();
    let client = NodeClient::connect(&endpoint, TIMEOUT).unwrap();
    assert_eq!(client.request(&c, &Add(1)).await.unwrap(), 1);
    // Accept a request that cannot run yet.
    node.set_application_paused(true);
    let turns = node.stats().turns;
    let accepted = tokio::spawn({
        let client = NodeClient::connect(&endpoint, TIMEOUT).unwrap();
        let c = c.clone();
        async move { client.request(&c, &Add(1)).await }
    });
    wait_until("the accepted request's turn", || node.stats().turns > turns).await;
    let handle = node.clone();
    // a drain deadline well past every wait below: the drain ends when the accepted work does
    let shutdown = tokio::spawn(node.shutdown(3 * TIMEOUT));
    // New client work is refused while draining (NODE_INFO is answered inline, so it shows
    // when the node stopped accepting).
    let refused = async {
        loop {
            match client.info().await {
                Err(e) if e.kind() == ErrorKind::Unavailable => return e,
                Err(e) => panic!("unexpected {e}"),
                Ok(_) => tokio::task::yield_now().await,
            }
        }
    };
    let e = tokio::time::timeout(TIMEOUT, refused).await.unwrap();
    assert!(e.to_string().contains("shutting down"), "{e}");
    assert_eq!(
        client.request(&c, &Get).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    assert!(
        !shutdown.is_finished(),
        "shutdown did not wait for accepted work"
    );
    // The accepted request still completes once the application runs again.
    handle.set_application_paused(false);
    drop(handle);
    assert_eq!(accepted.await.unwrap().unwrap(), 2);
    tokio::time::timeout(TIMEOUT, shutdown)
        .await
        .unwrap()
        .unwrap();
}
