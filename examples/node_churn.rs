//! Node-level actor churn (issue 12): create + request + destroy cycles of an `echo` actor
//! through the client protocol, and the node process's RSS growth.
//!
//! Usage: `node_churn ENDPOINT NODE_PID [CYCLES] [ROUNDS]` against a running node (`scripts/mesh-up
//! 1`; the pid is in `RUN_DIR/pids`). Runs `ROUNDS` (default 5) rounds of `CYCLES` (default
//! 20,000) cycles and prints one JSON line per round: the node's RSS growth over the round
//! (`rss_kib_growth`) and the round's rate (`cycles_per_s`). The node remembers destroyed
//! incarnations (SB-12 `NotFound` answers) up to a bound of 65,536, so rounds before that bound
//! is reached grow by that record; later rounds show what a cycle leaves behind.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use zlink::node::client::{NodeClient, Placement};
use zlink_apps::demo::Echo;

fn rss_kib(pid: u32) -> anyhow::Result<i64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    let v = s
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .context("no VmRSS")?;
    Ok(v.parse()?)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let endpoint = args
        .get(1)
        .context("usage: node_churn ENDPOINT NODE_PID [CYCLES] [ROUNDS]")?;
    let pid: u32 = args.get(2).context("NODE_PID")?.parse()?;
    let cycles: usize = args.get(3).map_or(Ok(20_000), |s| s.parse())?;
    let rounds: usize = args.get(4).map_or(Ok(5), |s| s.parse())?;
    let client = NodeClient::connect(endpoint, Duration::from_secs(20))?;
    let run = std::process::id();
    let payload = vec![7u8; 64];
    let mut done = 0usize;
    for round in 0..rounds {
        let before = rss_kib(pid)?;
        let start = Instant::now();
        for _ in 0..cycles {
            let id = format!("churn-{run}-{done}");
            let a = client
                .create("echo", &id, Placement::default())
                .await
                .with_context(|| format!("create {id}"))?;
            let r = client.request(&a, &Echo(payload.clone())).await?;
            ensure!(r.0 == payload, "echo answered other bytes");
            client.destroy(&a).await?;
            done += 1;
        }
        let el = start.elapsed().as_secs_f64();
        let grown = rss_kib(pid)? - before;
        println!(
            "{{\"bench\":\"node_churn_round{round}\",\"metric\":\"rss_kib_growth\",\"value\":{grown},\"cycles\":{cycles},\"cycles_done\":{done}}}"
        );
        println!(
            "{{\"bench\":\"node_churn_round{round}\",\"metric\":\"cycles_per_s\",\"value\":{:.1}}}",
            cycles as f64 / el
        );
    }
    Ok(())
}
