//! `zlink-node ctl`: an operator's view of running nodes over the client protocol
//! (`docs/CLIENT-PROTOCOL.md`, section 7): `NODE_INFO`, `LIST_ACTORS`, `LIST_SESSIONS`,
//! `COUNTERS` and `LIST_RELOCATIONS`, asked of every given client endpoint, and one operation
//! that change something: `RELOCATE` (`ctl relocate ACTOR --to NODE`) and `RELOCATE_SPOT`
//! (`ctl relocate-spot SPOT --to NODE`), asked of the endpoints in turn until the node that owns
//! the actor (hosts the Spot) answers. Output is a table for people, or JSON
//! (`--json`, one array with an element per node or entry) for scripts.
//!
//! These operations are the operator's: `ctl` first presents the operator credential
//! (`AUTHENTICATE`) when it has one (`--credential-file`, `ZLINK_OPERATOR_CREDENTIAL_FILE` or
//! `ZLINK_OPERATOR_CREDENTIAL`); a node with the default client policy refuses them otherwise.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand};
use serde::Serialize;
use zlink::node::client::{ClientError, NodeClient};
use zlink::node::protocol::{
    ActorEntry, ListActors, ListSessions, NodeCounters, NodeInfo, RelocateActor, SessionEntry,
};

/// `zlink-node ctl`.
#[derive(Debug, Args)]
pub struct CtlArgs {
    /// A node's client endpoint (repeatable, or comma-separated; `scripts/mesh-up` writes them
    /// to RUN_DIR/endpoints.env as ZLINK_CLIENT_ENDPOINTS).
    #[arg(
        long = "endpoint",
        short = 'e',
        env = "ZLINK_CLIENT_ENDPOINTS",
        value_delimiter = ',',
        value_name = "ENDPOINT",
        required = true
    )]
    endpoints: Vec<String>,
    /// Print JSON (for scripts) instead of a table.
    #[arg(long, global = true)]
    json: bool,
    /// Time each request may take, in ms.
    #[arg(long, default_value_t = 5_000, value_name = "MS")]
    timeout_ms: u64,
    /// File holding the nodes' operator credential (trimmed), presented to every node first
    /// [env: ZLINK_OPERATOR_CREDENTIAL_FILE] (`ZLINK_OPERATOR_CREDENTIAL` holds the credential
    /// itself instead).
    #[arg(long, value_name = "FILE", global = true)]
    credential_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: CtlCommand,
}

/// What `ctl` shows.
#[derive(Debug, Subcommand)]
enum CtlCommand {
    /// Every node asked: generation, mesh, its peers (up or down), actors and sessions.
    Nodes,
    /// The actors each node owns: id, type, incarnation, Spot and its kind, bound or not.
    Actors {
        /// At most this many actors per node (pages of up to 1,000 are fetched until then).
        #[arg(long, default_value_t = 10_000)]
        limit: u64,
    },
    /// The client sessions of each node: id, phase, bound actors.
    Sessions {
        /// At most this many sessions per node.
        #[arg(long, default_value_t = 10_000)]
        limit: u64,
    },
    /// The counters of each node (what its metrics endpoint serves). The table leaves out the
    /// counters that are zero on every node unless `--all`.
    Counters {
        /// Show zero counters too.
        #[arg(long)]
        all: bool,
    },
    /// Moves ACTOR to the node NODE (live relocation, its clients stay connected): asked of
    /// each endpoint in turn until the node that owns the actor does it; prints the outcome.
    Relocate {
        /// The actor's id.
        actor: String,
        /// The target node's routing id.
        #[arg(long)]
        to: String,
    },
    /// Moves the Spot SPOT with every member actor to the node NODE as one unit (a SpotWide
    /// User or Instance Spot; its clients stay connected): asked of each endpoint in turn until
    /// the node that hosts the Spot does it; prints the outcome.
    RelocateSpot {
        /// The Spot's name.
        spot: String,
        /// The target node's routing id.
        #[arg(long)]
        to: String,
    },
    /// The relocations of each node: in progress and the last finished ones (id, actor, role,
    /// peer, phase, phase durations, outcome), and the counters.
    Relocations,
}

/// One node asked.
struct Target {
    endpoint: String,
    client: NodeClient,
}

/// Connects to every endpoint (libzmq connects in the background; a dead endpoint shows as a
/// request that times out, named in the error).
fn targets(args: &CtlArgs) -> anyhow::Result<Vec<Target>> {
    let timeout = Duration::from_millis(args.timeout_ms);
    args.endpoints
        .iter()
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let endpoint = e.trim().to_owned();
            let client = NodeClient::connect(&endpoint, timeout)
                .with_context(|| format!("connecting to {endpoint}"))?;
            Ok(Target { endpoint, client })
        })
        .collect()
}

/// The operator credential `ctl` presents: `--credential-file`, else the file named by
/// `ZLINK_OPERATOR_CREDENTIAL_FILE`, else `ZLINK_OPERATOR_CREDENTIAL` itself; none of them: no
/// credential. One that is set but empty (after trimming) is an error that names it: presenting
/// nothing would only be refused by every node.
fn operator_credential(args: &CtlArgs) -> anyhow::Result<Option<String>> {
    let file = match &args.credential_file {
        Some(path) => Some((path.clone(), "--credential-file")),
        None => match std::env::var_os("ZLINK_OPERATOR_CREDENTIAL_FILE") {
            Some(v) if v.is_empty() => bail!(
                "ZLINK_OPERATOR_CREDENTIAL_FILE is set but empty: name the operator credential \
                 file, or unset it"
            ),
            Some(v) => Some((v.into(), "ZLINK_OPERATOR_CREDENTIAL_FILE")),
            None => None,
        },
    };
    if let Some((path, from)) = file {
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "reading the operator credential file {} ({from})",
                path.display()
            )
        })?;
        let c = text.trim();
        if c.is_empty() {
            bail!(
                "the operator credential file {} ({from}) is empty",
                path.display()
            );
        }
        return Ok(Some(c.to_owned()));
    }
    match std::env::var("ZLINK_OPERATOR_CREDENTIAL") {
        Ok(c) if c.trim().is_empty() => bail!(
            "ZLINK_OPERATOR_CREDENTIAL is set but empty: give the operator credential, or unset it"
        ),
        Ok(c) => Ok(Some(c.trim().to_owned())),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            bail!("ZLINK_OPERATOR_CREDENTIAL is not valid UTF-8")
        }
    }
}

/// Runs `zlink-node ctl`: prints to stdout, fails naming the node that did not answer.
pub async fn run(args: CtlArgs) -> anyhow::Result<()> {
    let targets = targets(&args)?;
    if targets.is_empty() {
        bail!("no endpoint: give --endpoint or ZLINK_CLIENT_ENDPOINTS");
    }
    if let Some(c) = operator_credential(&args)? {
        for t in &targets {
            t.client
                .authenticate(c.as_bytes())
                .await
                .with_context(|| format!("{}: presenting the operator credential", t.endpoint))?;
        }
    }
    let out = match args.command {
        CtlCommand::Nodes => nodes(&targets, args.json).await?,
        CtlCommand::Actors { limit } => actors(&targets, limit, args.json).await?,
        CtlCommand::Sessions { limit } => sessions(&targets, limit, args.json).await?,
        CtlCommand::Counters { all } => counters(&targets, all, args.json).await?,
        CtlCommand::Relocate { actor, to } => relocate(&targets, actor, to, args.json).await?,
        CtlCommand::RelocateSpot { spot, to } => {
            relocate_spot(&targets, spot, to, args.json).await?
        }
        CtlCommand::Relocations => relocations(&targets, args.json).await?,
    };
    print!("{out}");
    for t in targets {
        t.client.close().await;
    }
    Ok(())
}

fn json<T: Serialize>(v: &T) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(v)? + "\n")
}

/// Left-aligned columns, two spaces apart; a header line first.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (i, c) in cells.enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            s.push_str(c);
            let pad = widths[i].saturating_sub(c.chars().count());
            s.extend(std::iter::repeat_n(' ', pad));
        }
        s.trim_end().to_owned() + "\n"
    };
    let mut out = line(&mut headers.iter().copied());
    for row in rows {
        out += &line(&mut row.iter().map(String::as_str));
    }
    out
}

/// `nodes --json`: one element per node asked.
#[derive(Serialize)]
struct NodeRow {
    endpoint: String,
    #[serde(flatten)]
    info: NodeInfo,
}

async fn nodes(targets: &[Target], as_json: bool) -> anyhow::Result<String> {
    let mut rows = Vec::new();
    for t in targets {
        let info = t
            .client
            .info()
            .await
            .with_context(|| format!("NODE_INFO of {}", t.endpoint))?;
        rows.push(NodeRow {
            endpoint: t.endpoint.clone(),
            info,
        });
    }
    if as_json {
        return json(&rows);
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let i = &r.info;
            let up: BTreeSet<&str> = i.peers_up.iter().map(String::as_str).collect();
            let down: Vec<&str> = i
                .peers
                .iter()
                .map(String::as_str)
                .filter(|p| !up.contains(p))
                .collect();
            vec![
                i.node.clone(),
                i.generation.to_string(),
                i.mesh.clone(),
                r.endpoint.clone(),
                format!(
                    "{}/{}",
                    i.peers_up.len(),
                    i.peers.len().max(i.peers_up.len())
                ),
                if down.is_empty() {
                    "-".to_owned()
                } else {
                    down.join(",")
                },
                i.local_actors.to_string(),
                i.sessions.to_string(),
            ]
        })
        .collect();
    Ok(table(
        &[
            "NODE",
            "GENERATION",
            "MESH",
            "ENDPOINT",
            "PEERS_UP",
            "PEERS_DOWN",
            "ACTORS",
            "SESSIONS",
        ],
        &cells,
    ))
}

/// A row of a listing's `--json` output: the node, then the entry's own fields.
#[derive(Serialize)]
struct Listed<E> {
    node: String,
    #[serde(flatten)]
    entry: E,
}

/// One page of a node's listing: `(entries, next, total)`.
type Page<'a, K, E> = Pin<Box<dyn Future<Output = anyhow::Result<(Vec<E>, Option<K>, u64)>> + 'a>>;

/// The name a node reports in `NODE_INFO`.
async fn node_name(t: &Target) -> anyhow::Result<String> {
    Ok(t.client
        .info()
        .await
        .with_context(|| format!("NODE_INFO of {}", t.endpoint))?
        .node)
}

/// One node's listing, page by page (at most 1,000 entries a page), up to `limit` entries:
/// `fetch(after, want)` answers `(entries, next, total)`. Returns the entries and, when `limit`
/// cut the listing short, a note saying how many of how many are shown.
async fn paged<K, E, F, Fut>(
    node: &str,
    what: &str,
    limit: u64,
    mut fetch: F,
) -> anyhow::Result<(Vec<E>, Option<String>)>
where
    F: FnMut(Option<K>, u32) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<(Vec<E>, Option<K>, u64)>>,
{
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let taken = out.len() as u64;
        let want = u32::try_from(limit.saturating_sub(taken).min(1_000)).unwrap_or(1_000);
        let (page, next, total) = fetch(after.take(), want).await?;
        out.extend(page);
        match next {
            Some(next) if (out.len() as u64) < limit => after = Some(next),
            Some(_) => {
                let note = format!("{node}: {} of {total} {what} shown", out.len());
                return Ok((out, Some(note)));
            }
            None => return Ok((out, None)),
        }
    }
}

/// A listing of every target (`what`: "actors", "sessions"): each node's entries, page by page
/// up to `limit` each (`fetch(target, after, want)`), as `--json` rows ([`Listed`]) or as a
/// table of `headers` (the node, then `cells` of the entry), with a note per node cut short.
async fn listing<K, E: Serialize>(
    targets: &[Target],
    limit: u64,
    as_json: bool,
    what: &str,
    fetch: impl for<'a> Fn(&'a Target, Option<K>, u32) -> Page<'a, K, E>,
    headers: &[&str],
    cells: impl Fn(&E) -> Vec<String>,
) -> anyhow::Result<String> {
    let mut rows = Vec::new();
    let mut truncated = Vec::new();
    for t in targets {
        let node = node_name(t).await?;
        let (entries, cut) = paged(&node, what, limit, |after, want| fetch(t, after, want)).await?;
        rows.extend(entries.into_iter().map(|entry| Listed {
            node: node.clone(),
            entry,
        }));
        truncated.extend(cut);
    }
    if as_json {
        return json(&rows);
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            std::iter::once(r.node.clone())
                .chain(cells(&r.entry))
                .collect()
        })
        .collect();
    let mut out = table(headers, &cells);
    for t in truncated {
        out += &format!("({t}; raise --limit)\n");
    }
    Ok(out)
}

async fn actors(targets: &[Target], limit: u64, as_json: bool) -> anyhow::Result<String> {
    listing(
        targets,
        limit,
        as_json,
        "actors",
        |t, after, limit| {
            Box::pin(async move {
                let page = t
                    .client
                    .list_actors(&ListActors { after, limit })
                    .await
                    .with_context(|| format!("LIST_ACTORS of {}", t.endpoint))?;
                Ok((page.actors, page.next, page.total))
            })
        },
        &[
            "NODE",
            "ACTOR",
            "TYPE",
            "GENERATION",
            "SPOT",
            "SPOT_KIND",
            "BOUND",
        ],
        |a: &ActorEntry| {
            vec![
                a.actor_id.clone(),
                a.actor_type.clone(),
                a.object_generation.to_string(),
                a.spot.clone(),
                a.spot_kind.clone(),
                if a.bound { "yes" } else { "no" }.to_owned(),
            ]
        },
    )
    .await
}

async fn sessions(targets: &[Target], limit: u64, as_json: bool) -> anyhow::Result<String> {
    listing(
        targets,
        limit,
        as_json,
        "sessions",
        |t, after, limit| {
            Box::pin(async move {
                let page = t
                    .client
                    .list_sessions(&ListSessions { after, limit })
                    .await
                    .with_context(|| format!("LIST_SESSIONS of {}", t.endpoint))?;
                Ok((page.sessions, page.next, page.total))
            })
        },
        &["NODE", "SESSION", "PHASE", "BINDINGS", "PENDING", "BOUND"],
        |s: &SessionEntry| {
            vec![
                s.session.to_string(),
                s.phase.clone(),
                s.bound.len().to_string(),
                s.pending_binds.to_string(),
                if s.bound.is_empty() {
                    "-".to_owned()
                } else {
                    s.bound.join(",")
                },
            ]
        },
    )
    .await
}

/// Every counter of a snapshot as `name → value`, maps flattened as `map.key`.
fn flatten(c: &NodeCounters) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut put = |k: String, v: String| {
        out.insert(k, v);
    };
    put("generation".into(), c.generation.to_string());
    for (k, v) in [
        ("peers_configured", c.peers_configured),
        ("peers_up", c.peers_up),
        ("sessions", c.sessions),
        ("bindings", c.bindings),
        ("activations", c.activations),
        ("calls_in", c.calls_in),
        ("calls_out", c.calls_out),
        ("turns", c.turns),
        ("send_failures", c.send_failures),
        ("sends_dropped", c.sends_dropped),
        ("timer_ticks_skipped", c.timer_ticks_skipped),
        ("bindings_owner_lost", c.bindings_owner_lost),
        ("relocations", c.relocations),
    ] {
        put(k.into(), v.to_string());
    }
    for (map, values) in [
        ("actors", &c.actors),
        ("client_operations", &c.client_operations),
        ("replies", &c.replies),
        ("mesh_drops", &c.mesh_drops),
        ("session_rejects", &c.session_rejects),
        ("client_refusals", &c.client_refusals),
        ("metrics_refused", &c.metrics_refused),
    ] {
        for (k, v) in values {
            put(format!("{map}.{k}"), v.to_string());
        }
    }
    for (k, b) in &c.backlogs {
        put(
            format!("backlogs.{k}.waiting_now"),
            b.waiting_now.to_string(),
        );
        put(format!("backlogs.{k}.waited"), b.waited.to_string());
        put(format!("backlogs.{k}.refused"), b.refused.to_string());
    }
    for (k, d) in &c.lanes {
        for (field, v) in [
            ("lanes", d.lanes),
            ("application_queued", d.application_queued),
            ("lifecycle_queued", d.lifecycle_queued),
            ("deepest", d.deepest),
        ] {
            put(format!("lanes.{k}.{field}"), v.to_string());
        }
    }
    for (k, s) in &c.store {
        put(format!("store.{k}.count"), s.count.to_string());
        let mean_ms = if s.count == 0 {
            0.0
        } else {
            s.seconds * 1_000.0 / s.count as f64
        };
        put(format!("store.{k}.mean_ms"), format!("{mean_ms:.3}"));
    }
    out
}

fn is_zero(v: &str) -> bool {
    v.parse::<f64>().is_ok_and(|x| x == 0.0)
}

async fn counters(targets: &[Target], all: bool, as_json: bool) -> anyhow::Result<String> {
    let mut snapshots = Vec::new();
    for t in targets {
        snapshots.push(
            t.client
                .counters()
                .await
                .with_context(|| format!("COUNTERS of {}", t.endpoint))?,
        );
    }
    if as_json {
        return json(&snapshots);
    }
    let flat: Vec<BTreeMap<String, String>> = snapshots.iter().map(flatten).collect();
    let names: BTreeSet<&String> = flat.iter().flat_map(|f| f.keys()).collect();
    let rows: Vec<Vec<String>> = names
        .into_iter()
        .filter(|name| {
            all || *name == "generation"
                || flat
                    .iter()
                    .any(|f| f.get(*name).is_some_and(|v| !is_zero(v)))
        })
        .map(|name| {
            std::iter::once(name.clone())
                .chain(
                    flat.iter()
                        .map(|f| f.get(name).cloned().unwrap_or_else(|| "-".into())),
                )
                .collect()
        })
        .collect();
    let headers: Vec<&str> = std::iter::once("COUNTER")
        .chain(snapshots.iter().map(|s| s.node.as_str()))
        .collect();
    Ok(table(&headers, &rows))
}

async fn relocate(
    targets: &[Target],
    actor: String,
    to: String,
    as_json: bool,
) -> anyhow::Result<String> {
    let req = RelocateActor {
        actor_id: actor.clone(),
        to,
    };
    let (t, answer) = match ask_owner(targets, |t| t.client.relocate(&req)).await {
        Ok(found) => found,
        Err(asked) => bail!("no node asked owns {actor} (asked: {})", asked.join(", ")),
    };
    let done = answer.map_err(|e| anyhow!("{}: relocating {actor}: {e}", t.endpoint))?;
    if as_json {
        return json(&done);
    }
    let phases = phase_text(&done.phases);
    Ok(format!(
        "relocation {} moved {} from {} to {} in {} ms ({} records relayed; {phases})\n",
        done.relocation,
        done.actor.id(),
        done.from,
        done.to,
        done.duration_ms,
        done.relayed
    ))
}

/// Asks the targets in turn until one answers other than `NotFound` (it owns what was
/// asked about): that target and its answer, or the endpoints of every target asked.
async fn ask_owner<'t, T, F>(
    targets: &'t [Target],
    ask: impl Fn(&'t Target) -> F,
) -> Result<(&'t Target, Result<T, ClientError>), Vec<String>>
where
    F: Future<Output = Result<T, ClientError>>,
{
    let mut asked = Vec::new();
    for t in targets {
        match ask(t).await {
            Err(e) if e.kind() == zlink_wire::ErrorKind::NotFound => {
                asked.push(t.endpoint.clone());
            }
            answer => return Ok((t, answer)),
        }
    }
    Err(asked)
}

/// A relocation's phases as `Sealing 1 ms, Restoring 0 ms, …`.
fn phase_text(phases: &[(String, u64)]) -> String {
    phases
        .iter()
        .map(|(p, ms)| format!("{p} {ms} ms"))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn relocate_spot(
    targets: &[Target],
    spot: String,
    to: String,
    as_json: bool,
) -> anyhow::Result<String> {
    let req = zlink::node::protocol::RelocateSpot {
        spot: spot.clone(),
        to,
    };
    let (t, answer) = match ask_owner(targets, |t| t.client.relocate_spot(&req)).await {
        Ok(found) => found,
        Err(asked) => bail!(
            "no node asked hosts spot {spot} (asked: {})",
            asked.join(", ")
        ),
    };
    let done = answer.map_err(|e| anyhow!("{}: relocating spot {spot}: {e}", t.endpoint))?;
    if as_json {
        return json(&done);
    }
    let phases = phase_text(&done.phases);
    let actors = done
        .actors
        .iter()
        .map(|a| a.id().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    Ok(format!(
        "relocation {} moved spot {} ({} actors: {actors}) from {} to {} in {} ms ({} records relayed; {phases})\n",
        done.relocation,
        done.spot,
        done.actors.len(),
        done.from,
        done.to,
        done.duration_ms,
        done.relayed
    ))
}

async fn relocations(targets: &[Target], as_json: bool) -> anyhow::Result<String> {
    let mut all = Vec::new();
    for t in targets {
        let list = t
            .client
            .relocations()
            .await
            .with_context(|| format!("LIST_RELOCATIONS of {}", t.endpoint))?;
        all.push((t.endpoint.clone(), list));
    }
    if as_json {
        #[derive(Serialize)]
        struct Row<'a> {
            endpoint: &'a str,
            #[serde(flatten)]
            list: &'a zlink::node::protocol::RelocationList,
        }
        let rows: Vec<Row<'_>> = all
            .iter()
            .map(|(e, l)| Row {
                endpoint: e,
                list: l,
            })
            .collect();
        return json(&rows);
    }
    let mut rows = Vec::new();
    for (endpoint, list) in &all {
        for r in &list.relocations {
            rows.push(vec![
                endpoint.clone(),
                r.relocation.to_string(),
                r.actor.clone(),
                r.role.clone(),
                r.peer.clone(),
                r.phase.clone(),
                r.phases
                    .iter()
                    .map(|(p, ms)| format!("{p}={ms}ms"))
                    .collect::<Vec<_>>()
                    .join(" "),
                r.outcome.clone().unwrap_or_else(|| "running".into()),
            ]);
        }
    }
    let mut out = table(
        &[
            "NODE",
            "ID",
            "ACTOR",
            "ROLE",
            "PEER",
            "PHASE",
            "DURATIONS",
            "OUTCOME",
        ],
        &rows,
    );
    for (endpoint, list) in &all {
        let c = &list.counters;
        out += &format!(
            "{endpoint}: started {} committed {} aborted {} failed {} target {} refused {}\n",
            c.started,
            c.committed,
            c.aborted,
            c.failed,
            c.target,
            c.refused_malformed
                + c.refused_unknown_relocation
                + c.refused_wrong_peer
                + c.refused_unknown_actor
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let t = table(
            &["A", "LONG_HEADER"],
            &[
                vec!["wide cell".into(), "x".into()],
                vec!["b".into(), "y".into()],
            ],
        );
        assert_eq!(t, "A          LONG_HEADER\nwide cell  x\nb          y\n");
    }
}
