//! Live relocation between two `zlink-node` processes, from outside: `zlink-node ctl relocate
//! ACTOR --to NODE` moves the demo `counter` (its total travels by the migration contract) from
//! node1 to node2 and back while a client sends to it; `ctl relocations` shows each relocation
//! on both nodes; `ctl relocate-spot SPOT --to NODE` moves a SpotWide Spot of counters as one
//! unit. The nodes keep the default client policy with an operator credential.

use zlink::node::client::{NodeClient, Placement};
use zlink_apps::demo;

mod procs;
use procs::{BIN, OPERATOR, Proc, TIMEOUT, ctl, operator_file, setup};

// spec: SB-8.9, SB-14.21, SB-1.3
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_relocates_a_counter_between_processes_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let operator = operator_file(dir.path());
    let specs = setup(dir.path(), 2, "");
    let mut p1 = Proc::start(&specs[0]);
    let mut p2 = Proc::start(&specs[1]);
    p1.wait_ready().await;
    p2.wait_ready().await;
    let eps = [specs[0].client.as_str(), specs[1].client.as_str()];
    let client = NodeClient::connect(&specs[0].client, TIMEOUT).unwrap();
    client.authenticate(OPERATOR).await.unwrap();
    let counter = client
        .create("counter", "moving-counter", Placement::default())
        .await
        .unwrap();
    let mut total = 0u64;
    for n in 1..=10u64 {
        total += n;
        assert_eq!(
            client.request(&counter, &demo::Add(n)).await.unwrap(),
            total
        );
    }
    // There and back, the client sending between the moves.
    for (to, n) in [("node2", 11u64), ("node1", 12), ("node2", 13)] {
        let out = ctl(&operator, &eps, &["relocate", "moving-counter", "--to", to]).await;
        assert!(out.contains(&format!("to {to}")), "{out}");
        let here = client.get("moving-counter").await.unwrap();
        assert_eq!(here.node().as_str(), to);
        assert_eq!(here.object_generation(), counter.object_generation());
        total += n;
        assert_eq!(client.request(&here, &demo::Add(n)).await.unwrap(), total);
    }
    let t = ctl(&operator, &eps, &["relocations"]).await;
    assert_eq!(
        t.lines()
            .filter(|l| l.contains("source") && l.ends_with("moved"))
            .count(),
        3,
        "{t}"
    );
    assert!(
        t.lines()
            .any(|l| l.contains("target") && l.contains("committed")),
        "{t}"
    );
    // A node that does not own the actor is not the one that moves it; an unknown actor fails.
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("ctl")
        .env("ZLINK_OPERATOR_CREDENTIAL_FILE", &operator)
        .args(["-e", eps[0], "relocate", "nobody", "--to", "node2"]);
    let out = cmd.output().await.unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no node asked owns nobody"));
}

// spec: SB-8.9, SB-14.21, SB-1.3
// `ctl relocate-spot` moves a SpotWide Spot of three demo counters from node1 to node2 as one
// unit while another Spot of node1 stays: every member's total travels, identities are kept,
// the moved members serve on node2 and the one left behind on node1; `ctl relocations` shows
// the Spot's relocation on both nodes. A Spot the asked nodes do not host fails by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_relocates_a_spot_between_processes() {
    use zlink::actor::{SpotKind, SpotSpec, UserMode};
    let dir = tempfile::tempdir().unwrap();
    let operator = operator_file(dir.path());
    let specs = setup(dir.path(), 2, "");
    let mut p1 = Proc::start(&specs[0]);
    let mut p2 = Proc::start(&specs[1]);
    p1.wait_ready().await;
    p2.wait_ready().await;
    let eps = [specs[0].client.as_str(), specs[1].client.as_str()];
    let client = NodeClient::connect(&specs[0].client, TIMEOUT).unwrap();
    client.authenticate(OPERATOR).await.unwrap();
    let in_spot = |name: &str| Placement {
        spot: Some(SpotSpec {
            name: name.to_owned(),
            kind: SpotKind::User(UserMode::SpotWide),
        }),
        ..Placement::default()
    };
    let mut members = Vec::new();
    for (k, id) in ["arena-1", "arena-2", "arena-3"].into_iter().enumerate() {
        let a = client
            .create("counter", id, in_spot("arena"))
            .await
            .unwrap();
        assert_eq!(
            client.request(&a, &demo::Add(k as u64 + 1)).await.unwrap(),
            k as u64 + 1
        );
        members.push(a);
    }
    let stay = client
        .create("counter", "lobby-1", in_spot("lobby"))
        .await
        .unwrap();
    assert_eq!(client.request(&stay, &demo::Add(5)).await.unwrap(), 5);
    // The target is asked first: it does not host the Spot (NotFound), so `ctl` goes on.
    let target_first = [specs[1].client.as_str(), specs[0].client.as_str()];
    let out = ctl(
        &operator,
        &target_first,
        &["relocate-spot", "arena", "--to", "node2"],
    )
    .await;
    assert!(
        out.contains("moved spot arena (3 actors") && out.contains("to node2"),
        "{out}"
    );
    for (k, m) in members.iter().enumerate() {
        let here = client.get(m.id().as_str()).await.unwrap();
        assert_eq!(here.node().as_str(), "node2");
        assert_eq!(here.object_generation(), m.object_generation());
        // the total travelled: k + 1 before, 10 more now
        assert_eq!(
            client.request(&here, &demo::Add(10)).await.unwrap(),
            k as u64 + 11
        );
    }
    let here = client.get("lobby-1").await.unwrap();
    assert_eq!(here.node().as_str(), "node1");
    assert_eq!(client.request(&here, &demo::Add(1)).await.unwrap(), 6);
    let t = ctl(&operator, &eps, &["relocations"]).await;
    assert!(
        t.lines()
            .any(|l| l.contains("spot arena") && l.contains("source") && l.ends_with("moved")),
        "{t}"
    );
    assert!(
        t.lines()
            .any(|l| l.contains("target") && l.contains("committed")),
        "{t}"
    );
    let out = tokio::process::Command::new(BIN)
        .arg("ctl")
        .env("ZLINK_OPERATOR_CREDENTIAL_FILE", &operator)
        .args(["-e", eps[0], "relocate-spot", "nowhere", "--to", "node2"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no node asked hosts spot nowhere"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
