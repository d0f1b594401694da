//! The mesh transport's drop counters are visible to an operator in the `NODE_INFO` reply:
//! a raw ZeroMQ peer without a routing id sends a record to the relay port; the node drops it
//! (`invalid_routing_id`) and `NODE_INFO` (`Node::info`) reports the count.
//!
//! spec: SB-2.1 (rejections counted with a closed vocabulary, visible to an operator).

mod node_common;

use node_common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_info_reports_mesh_drops() {
    let node = start_node("n1", memory_store(), vec![], None, None).await;
    // `Node::info` is what the node answers `NODE_INFO` with.
    assert!(node.info().mesh_drops.is_empty(), "no drops yet");
    let ctx = zmq::Context::new();
    let d = ctx.socket(zmq::DEALER).unwrap();
    d.set_linger(0).unwrap();
    d.connect(&node.mesh().endpoints().relay).unwrap();
    d.send_multipart([&b"not a record"[..]], 0).unwrap();
    wait_until("the drop is counted", || {
        node.mesh()
            .counters()
            .dropped(zlink_mesh::DropReason::InvalidRoutingId)
            >= 1
    })
    .await;
    let info = node.info();
    assert_eq!(
        info.mesh_drops.get("invalid_routing_id"),
        Some(&1),
        "{info:?}"
    );
    node.shutdown(TIMEOUT).await;
}
