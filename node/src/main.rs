//! `zlink-node`: one ZLink mesh node process.
//!
//! Configuration comes from a TOML file (`--config`), `ZLINK_*` environment variables and
//! command-line flags; a flag beats the environment, which beats the file. The node hosts the
//! demo actor types (`counter`, `echo`, `room`, `failing`) with the demo session app and the
//! chat of `zlink_apps::chat` (`chat_player`, `chat_room`, session packets 50..=53), serves
//! clients over ClientServer (the client protocol of `zlink::node::protocol`) and stops
//! gracefully on SIGTERM/SIGINT (SB-10: stop accepting, drain accepted work until the drain
//! deadline, release the owner lease, close the mesh).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use serde::Deserialize;
use zlink::config::{
    ClientConfig, MeshConfig, MeshSecretText, NodeConfig, ObjectRoles, PeerConfig,
    RelocationSettings,
};
use zlink::node::access::{ClientAccess, ClientPolicy, OperatorCredential};
use zlink::node::{Node, NodeOptions};
use zlink::store::StoreUrl;
use zlink_apps::{chat, demo};
use zlink_wire::{MeshName, NodeRid};

mod ctl;
/// mimalloc: cheaper than glibc's malloc for the node's cross-thread alloc/free pattern
/// (records allocated on a mesh I/O thread, freed on a lane worker).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const AFTER_HELP: &str = "\
CONFIGURATION FILE (TOML, every key optional; flags and environment override it):
  name = \"node1\"                          node name = routing id (NodeRid)
  mesh = \"local\"                          mesh name
  relay = \"tcp://127.0.0.1:7001\"          RouteMesh relay endpoint to bind
  completion = \"tcp://127.0.0.1:7002\"     RouteMesh completion endpoint to bind (replies)
  client = \"tcp://127.0.0.1:7003\"         ClientServer endpoint to bind (omit: no clients)
  secret_file = \"/path/mesh.secret\"       mesh secret (HMAC key, >= 32 random bytes, trimmed)
  store = \"sqlite:///path/store.db\"       Location Store URL (sqlite:///PATH, redis://HOST[:PORT] or memory:)
  ready_file = \"/path/node1.ready\"        written once the node serves and its peers are up
  metrics = \"127.0.0.1:9464\"              serve Prometheus metrics (text format) at
                                          http://ADDR/metrics (omit: none; port 0: any free
                                          port, logged at startup). No authentication: bind
                                          it to a trusted network
  drain_timeout_ms = 5000                 graceful shutdown drain deadline
  lease_ttl_ms = 10000                    owner lease TTL in the Location Store; renewed every
                                          third of it; the node serves its actors only until
                                          TTL - TTL/10 after the last renewal it sent that
                                          succeeded. With SQLite (busy timeout 5 s) at least
                                          8825 ms, else a configuration error
  request_timeout_ms = 5000               node-to-node control requests (activate, destroy)
                                          and actor calls that name no timeout
  peer_wait_ms = 20000                    how long to wait for peers before `ready`
  session_relocation_seal_ms = 3000       SessionRelocationSealTimeout (SB-8.3): how long a
                                          session holds a binding sealed for a relocation
                                          without its 44 before it closes the session (or
                                          `seal_ms` under [relocation]: one of the two)
  log_format = \"text\"                     text | json
  insecure_dev_mode = false               run without a mesh secret (proves nothing)
  client_policy = \"operator_only\"         what a client that is not the operator may do with
                                          the framework operations (CREATE, GET, CALL, DESTROY,
                                          NODE_INFO, LIST_*, COUNTERS): operator_only (nothing;
                                          the default, safe on a public port), own_actors
                                          (create, then use and destroy its own incarnations)
                                          or open (everything; trusted networks only). Session
                                          packets are always the application's
  operator_credential_file = \"/path/op\"   the operator credential (1..=1024 bytes, trimmed):
                                          a client that presents it (AUTHENTICATE) may do
                                          every operation; `zlink-node ctl` sends it (omit:
                                          no client is the operator)
  [client_port]                           bounds of the client port, defaults shown
                                          (docs/MESH.md, \"Bounds at a glance\"):
  max_clients = 10000                     client sessions at once
  max_clients_per_source = 1000           ... from one source address
  window_records = 4096                   a session's receive window
  window_bytes = 1048576
  outbound_messages = 4096                a session's outbound budget (replies and pushes
  outbound_bytes = 1048576                queued for it); over it past the grace, or a reply
  slow_consumer_grace_ms = 5000           while over twice it: closed SlowConsumer
  send_hwm = 16                           messages libzmq holds per client connection
  batch_records = 256                     records per batch frame to a client
  max_strangers = 1024                    sessions not yet accepted, in all
  max_strangers_per_source = 64           ... from one source address
  stranger_window_records = 16            their receive window
  stranger_window_bytes = 16384
  max_operations_per_session = 64         framework operations in flight (then `busy`)
  max_bindings_per_session = 1024         actors one session may be bound to
  [relocation]                            live relocation (SB-8), defaults shown; each key
                                          but seal_ms also as a flag --relocation-KEY (with
                                          dashes) and ZLINK_RELOCATION_KEY (upper case)
  seal_ms = 3000                          = session_relocation_seal_ms (set one of the two;
                                          flag --session-relocation-seal-ms)
  cutover_timeout_ms = 1000               target: no cutover this long after relay-ready:
                                          the fallback; shorter than the seal
  restore_timeout_ms = 3000               source: no relay-ready this long: the target failed
  result_timeout_ms = 11000               source: no result this long after the cutover:
                                          the store's records decide
  source_wait_ms = 3000                   target, after a fallback: how long the source's
                                          relay stream stays ahead of regular ingress
  max_restore_timers = 1024               timers one moving actor may bring
  target_queue_records = 65536            target: one relocation's temporary queues, records
  target_queue_bytes = 268435456          ... and payload bytes
  [[peers]]                               every node of the mesh (its own entry is skipped);
  name = \"node2\"                          list every node (docs/MESH.md: who dials whom)
  relay = \"tcp://127.0.0.1:7101\"
  completion = \"tcp://127.0.0.1:7102\"

OPERATOR (zlink-node ctl --help):
  zlink-node ctl -e tcp://127.0.0.1:7003 nodes|actors|sessions|counters [--json]
                                          asks running nodes over their client endpoints
                                          (ZLINK_CLIENT_ENDPOINTS: comma-separated)

ENVIRONMENT:
  ZLINK_MESH_SECRET   the mesh secret itself (instead of a secret file)
  ZLINK_OPERATOR_CREDENTIAL   the operator credential itself (instead of a file)
  RUST_LOG            log filter (default: info), e.g. RUST_LOG=zlink=debug

SIGNALS:
  SIGTERM, SIGINT     graceful shutdown: refuse new work (clients, peers, timers), drain
                      accepted work until the drain deadline, end the actors, release the
                      owner lease, close the mesh, exit 0";

const ABOUT: &str = "A ZLink mesh node: hosts actors (demo types counter, echo, room, failing, \
sequence; \
chat types chat_player, chat_room), \
relays actor calls to other nodes over RouteMesh (replies on the completion connection) and serves \
clients over ClientServer. Owners are found through the Location Store (embedded SQLite by default).";

/// Command line of `zlink-node` (see `--help`).
#[derive(Debug, Parser)]
#[command(name = "zlink-node", version, about = ABOUT, after_help = AFTER_HELP)]
struct Cli {
    /// Run a tool instead of a node.
    #[command(subcommand)]
    command: Option<Command>,
    /// TOML configuration file (keys below).
    #[arg(long, short = 'c', env = "ZLINK_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Node name: the routing id (NodeRid) peers know this node by.
    #[arg(long, env = "ZLINK_NAME")]
    name: Option<String>,
    /// Mesh name [default: local].
    #[arg(long, env = "ZLINK_MESH")]
    mesh: Option<String>,
    /// RouteMesh relay endpoint to bind [default: tcp://127.0.0.1:*].
    #[arg(long, env = "ZLINK_RELAY", value_name = "ENDPOINT")]
    relay: Option<String>,
    /// RouteMesh completion endpoint to bind; replies travel here [default: tcp://127.0.0.1:*].
    #[arg(long, env = "ZLINK_COMPLETION", value_name = "ENDPOINT")]
    completion: Option<String>,
    /// ClientServer endpoint to bind (DEALER clients connect here).
    #[arg(long, env = "ZLINK_CLIENT", value_name = "ENDPOINT")]
    client: Option<String>,
    /// File holding the mesh secret (>= 32 bytes after trimming; make it random).
    #[arg(long, env = "ZLINK_SECRET_FILE", value_name = "FILE")]
    secret_file: Option<PathBuf>,
    /// Location Store URL: `sqlite:///PATH` (shared by every node on the machine),
    /// `redis://HOST[:PORT][/DB][?prefix=NAME]` (shared by nodes on any machine) or `memory:`
    /// [default: sqlite://./zlink-store.db].
    #[arg(long, env = "ZLINK_STORE", value_name = "URL")]
    store: Option<String>,
    /// File written once the node serves and its peers are up (endpoints, generation).
    #[arg(long, env = "ZLINK_READY_FILE", value_name = "FILE")]
    ready_file: Option<PathBuf>,
    /// Serve Prometheus metrics (text format) at http://ADDR/metrics, e.g. 127.0.0.1:9464
    /// [default: none].
    #[arg(long, env = "ZLINK_METRICS", value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// A peer, NAME=RELAY,COMPLETION (repeatable; adds to the file's `[[peers]]`).
    #[arg(long = "peer", value_name = "NAME=RELAY,COMPLETION")]
    peers: Vec<String>,
    /// Graceful shutdown drain deadline in ms [default: 5000].
    #[arg(long, env = "ZLINK_DRAIN_TIMEOUT_MS", value_name = "MS")]
    drain_timeout_ms: Option<u64>,
    /// Owner lease TTL in the Location Store in ms [default: 10000].
    #[arg(long, env = "ZLINK_LEASE_TTL_MS", value_name = "MS")]
    lease_ttl_ms: Option<u64>,
    /// Timeout of node-to-node control requests (activate, destroy) and of actor calls that name
    /// none, in ms [default: 5000].
    #[arg(long, env = "ZLINK_REQUEST_TIMEOUT_MS", value_name = "MS")]
    request_timeout_ms: Option<u64>,
    /// How long to wait for the peers before writing the ready file, in ms [default: 20000].
    #[arg(long, env = "ZLINK_PEER_WAIT_MS", value_name = "MS")]
    peer_wait_ms: Option<u64>,
    /// SessionRelocationSealTimeout (SB-8.3): how long a session holds a binding sealed for a
    /// relocation without its 44 before it closes the session, in ms [default: 3000].
    #[arg(long, env = "ZLINK_SESSION_RELOCATION_SEAL_MS", value_name = "MS")]
    session_relocation_seal_ms: Option<u64>,
    /// Relocation target: without the source's cutover this long after relay-ready, the
    /// cutover_timeout fallback, in ms; shorter than the seal [default: 1000].
    #[arg(long, env = "ZLINK_RELOCATION_CUTOVER_TIMEOUT_MS", value_name = "MS")]
    relocation_cutover_timeout_ms: Option<u64>,
    /// Relocation source: a target without relay-ready this long has failed, in ms
    /// [default: 3000].
    #[arg(long, env = "ZLINK_RELOCATION_RESTORE_TIMEOUT_MS", value_name = "MS")]
    relocation_restore_timeout_ms: Option<u64>,
    /// Relocation source: without the target's result this long after the cutover, the store
    /// decides, in ms [default: 11000].
    #[arg(long, env = "ZLINK_RELOCATION_RESULT_TIMEOUT_MS", value_name = "MS")]
    relocation_result_timeout_ms: Option<u64>,
    /// Relocation target, after a fallback: how long the source's relay stream stays ahead of
    /// regular ingress, in ms [default: 3000].
    #[arg(long, env = "ZLINK_RELOCATION_SOURCE_WAIT_MS", value_name = "MS")]
    relocation_source_wait_ms: Option<u64>,
    /// Relocation target: the most timers one moving actor may bring [default: 1024].
    #[arg(long, env = "ZLINK_RELOCATION_MAX_RESTORE_TIMERS", value_name = "N")]
    relocation_max_restore_timers: Option<usize>,
    /// Relocation target: records one relocation's temporary queues hold at most
    /// [default: 65536].
    #[arg(long, env = "ZLINK_RELOCATION_TARGET_QUEUE_RECORDS", value_name = "N")]
    relocation_target_queue_records: Option<usize>,
    /// Relocation target: payload bytes of those queues at most [default: 268435456].
    #[arg(
        long,
        env = "ZLINK_RELOCATION_TARGET_QUEUE_BYTES",
        value_name = "BYTES"
    )]
    relocation_target_queue_bytes: Option<usize>,
    /// Log format [default: text].
    #[arg(long, env = "ZLINK_LOG_FORMAT", value_enum)]
    log_format: Option<LogFormat>,
    /// Run the mesh without a secret (development only: the handshake proves nothing).
    #[arg(long, env = "ZLINK_INSECURE_DEV_MODE")]
    insecure_dev_mode: bool,
    /// What a client that is not the operator may do with framework operations:
    /// operator_only (nothing), own_actors or open [default: operator_only].
    #[arg(long, env = "ZLINK_CLIENT_POLICY", value_name = "POLICY")]
    client_policy: Option<String>,
    /// File holding the operator credential (1..=1024 bytes after trimming).
    #[arg(long, env = "ZLINK_OPERATOR_CREDENTIAL_FILE", value_name = "FILE")]
    operator_credential_file: Option<PathBuf>,
}

/// Tools of `zlink-node` other than the node itself.
#[derive(Debug, Subcommand)]
enum Command {
    /// An operator's view of running nodes over their client endpoints: `nodes`, `actors`,
    /// `sessions`, `counters`; a table, or JSON with --json.
    Ctl(ctl::CtlArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    name: Option<String>,
    mesh: Option<String>,
    relay: Option<String>,
    completion: Option<String>,
    client: Option<String>,
    secret_file: Option<PathBuf>,
    store: Option<String>,
    ready_file: Option<PathBuf>,
    metrics: Option<std::net::SocketAddr>,
    drain_timeout_ms: Option<u64>,
    lease_ttl_ms: Option<u64>,
    request_timeout_ms: Option<u64>,
    peer_wait_ms: Option<u64>,
    session_relocation_seal_ms: Option<u64>,
    log_format: Option<LogFormat>,
    #[serde(default)]
    insecure_dev_mode: bool,
    client_policy: Option<String>,
    operator_credential_file: Option<PathBuf>,
    /// The client port's bounds (`[client_port]`: the keys of the library's `[client]` table
    /// but `endpoint`, which is `client`).
    #[serde(default)]
    client_port: ClientConfig,
    /// Live relocation's timings and bounds (`[relocation]`, the library's table).
    #[serde(default)]
    relocation: RelocationSettings,
    #[serde(default)]
    peers: Vec<FilePeer>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePeer {
    name: String,
    relay: String,
    completion: String,
}

/// The merged settings of the process.
struct Settings {
    config: NodeConfig,
    ready_file: Option<PathBuf>,
    drain: Duration,
    peer_wait: Duration,
    log_format: LogFormat,
    access: ClientAccess,
}

fn read_secret(path: &Path) -> anyhow::Result<MeshSecretText> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the mesh secret file {}", path.display()))?;
    Ok(MeshSecretText::new(text.trim()))
}

/// The client access settings: the policy and the operator credential (flag > environment >
/// file; `ZLINK_OPERATOR_CREDENTIAL` holds the credential itself).
fn client_access(
    policy: Option<String>,
    credential_file: Option<PathBuf>,
) -> anyhow::Result<ClientAccess> {
    let mut access = ClientAccess::new();
    if let Some(name) = policy {
        access.policy = ClientPolicy::from_name(&name).map_err(|n| {
            anyhow::anyhow!("client_policy {n:?}: expected operator_only, own_actors or open")
        })?;
    }
    let credential = match (
        std::env::var("ZLINK_OPERATOR_CREDENTIAL").ok(),
        credential_file,
    ) {
        (Some(c), _) => Some(c.trim().to_owned()),
        (None, Some(path)) => Some(
            std::fs::read_to_string(&path)
                .with_context(|| {
                    format!("reading the operator credential file {}", path.display())
                })?
                .trim()
                .to_owned(),
        ),
        (None, None) => None,
    };
    if let Some(c) = credential {
        access.operator =
            Some(OperatorCredential::new(c.as_bytes()).context("the operator credential")?);
    }
    Ok(access)
}

fn parse_peer(s: &str) -> anyhow::Result<FilePeer> {
    let (name, rest) = s
        .split_once('=')
        .with_context(|| format!("--peer {s:?}: expected NAME=RELAY,COMPLETION"))?;
    let (relay, completion) = rest
        .split_once(',')
        .with_context(|| format!("--peer {s:?}: expected NAME=RELAY,COMPLETION"))?;
    Ok(FilePeer {
        name: name.to_owned(),
        relay: relay.to_owned(),
        completion: completion.to_owned(),
    })
}

fn settings(cli: Cli) -> anyhow::Result<Settings> {
    let file: FileConfig = match &cli.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
        }
        None => FileConfig::default(),
    };
    let name = cli
        .name
        .or(file.name)
        .context("no node name: set `name` in the config file, ZLINK_NAME or --name")?;
    let node = NodeRid::new(&name).with_context(|| format!("node name {name:?}"))?;
    let mesh = cli.mesh.or(file.mesh).unwrap_or_else(|| "local".into());
    let mesh = MeshName::new(&mesh).with_context(|| format!("mesh name {mesh:?}"))?;
    let store = cli
        .store
        .or(file.store)
        .unwrap_or_else(|| "sqlite://./zlink-store.db".into());
    let store: StoreUrl = store
        .parse()
        .with_context(|| format!("store URL {store:?}"))?;
    let insecure = cli.insecure_dev_mode || file.insecure_dev_mode;
    let access = client_access(
        cli.client_policy.or(file.client_policy),
        cli.operator_credential_file
            .or(file.operator_credential_file),
    )?;
    let secret = match (
        std::env::var("ZLINK_MESH_SECRET").ok(),
        cli.secret_file.or(file.secret_file),
    ) {
        (Some(s), _) => Some(MeshSecretText::new(s.trim())),
        (None, Some(path)) => Some(read_secret(&path)?),
        (None, None) => None,
    };
    let mut peers: Vec<FilePeer> = file.peers;
    for p in &cli.peers {
        peers.push(parse_peer(p)?);
    }
    let mut peer_configs = Vec::new();
    for p in peers {
        let peer = NodeRid::new(&p.name).with_context(|| format!("peer name {:?}", p.name))?;
        if peer == node {
            continue;
        }
        peer_configs.push(PeerConfig {
            node: peer,
            relay: p.relay,
            completion: p.completion,
        });
    }
    let mut config = NodeConfig::new(node);
    config.store = Some(store);
    config.actor_dispatch = true;
    config.roles = ObjectRoles {
        object_client: true,
        object_server: true,
    };
    config.mesh_secret = if insecure { None } else { secret };
    config.insecure_dev_mode = insecure;
    config.meshes = vec![MeshConfig {
        name: mesh,
        relay: cli
            .relay
            .or(file.relay)
            .unwrap_or_else(|| "tcp://127.0.0.1:*".into()),
        completion: cli
            .completion
            .or(file.completion)
            .unwrap_or_else(|| "tcp://127.0.0.1:*".into()),
        peers: peer_configs,
    }];
    if !file.client_port.endpoint.is_empty() {
        bail!("[client_port] has no `endpoint`: set the client endpoint with `client`");
    }
    config.client = cli.client.or(file.client).map(|endpoint| ClientConfig {
        endpoint,
        ..file.client_port
    });
    config.metrics = cli.metrics.or(file.metrics);
    if let Some(ms) = cli.lease_ttl_ms.or(file.lease_ttl_ms) {
        config.timeouts.owner_lease_ttl = Duration::from_millis(ms);
    }
    if let Some(ms) = cli.request_timeout_ms.or(file.request_timeout_ms) {
        config.timeouts.request = Duration::from_millis(ms);
    }
    // `[relocation]`, each key overridden by its flag or environment variable. The seal has
    // two keys in the file (`session_relocation_seal_ms`, `[relocation] seal_ms`: one of them);
    // its flag beats both.
    let ms = |v: Option<u64>| v.map(Duration::from_millis);
    config.relocation = file.relocation;
    config.timeouts.session_relocation_seal = ms(file.session_relocation_seal_ms);
    if let Some(seal) = ms(cli.session_relocation_seal_ms) {
        config.relocation.seal_ms = Some(seal);
        config.timeouts.session_relocation_seal = None;
    }
    let r = &mut config.relocation;
    r.cutover_timeout_ms = ms(cli.relocation_cutover_timeout_ms).or(r.cutover_timeout_ms);
    r.restore_timeout_ms = ms(cli.relocation_restore_timeout_ms).or(r.restore_timeout_ms);
    r.result_timeout_ms = ms(cli.relocation_result_timeout_ms).or(r.result_timeout_ms);
    r.source_wait_ms = ms(cli.relocation_source_wait_ms).or(r.source_wait_ms);
    r.max_restore_timers = cli.relocation_max_restore_timers.or(r.max_restore_timers);
    r.target_queue_records = cli
        .relocation_target_queue_records
        .or(r.target_queue_records);
    r.target_queue_bytes = cli.relocation_target_queue_bytes.or(r.target_queue_bytes);
    Ok(Settings {
        config,
        ready_file: cli.ready_file.or(file.ready_file),
        drain: Duration::from_millis(
            cli.drain_timeout_ms
                .or(file.drain_timeout_ms)
                .unwrap_or(5_000),
        ),
        peer_wait: Duration::from_millis(cli.peer_wait_ms.or(file.peer_wait_ms).unwrap_or(20_000)),
        log_format: cli
            .log_format
            .or(file.log_format)
            .unwrap_or(LogFormat::Text),
        access,
    })
}

/// The first environment variable of a flag of `cmd` (or of its subcommands) that is set but
/// empty: clap reports it as the flag's missing value, which names the flag, not the variable.
fn empty_env(cmd: &clap::Command) -> Option<String> {
    cmd.get_arguments()
        .filter_map(|a| a.get_env())
        .find(|var| std::env::var_os(var).is_some_and(|v| v.is_empty()))
        .map(|var| var.to_string_lossy().into_owned())
        .or_else(|| cmd.get_subcommands().find_map(empty_env))
}

fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn write_ready(path: &Path, node: &Node) -> anyhow::Result<()> {
    let ep = node.endpoints();
    let line = format!(
        "name={} generation={} relay={} completion={} client={} metrics={}\n",
        node.node_rid(),
        node.generation(),
        ep.relay,
        ep.completion,
        ep.client.as_deref().unwrap_or("-"),
        node.metrics_addr()
            .map_or_else(|| "-".to_owned(), |a| a.to_string())
    );
    let tmp = path.with_extension("ready.tmp");
    std::fs::write(&tmp, line).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

/// **Debug builds only (the process tests' fault points):** the relocation steps named in
/// `ZLINK_TEST_HOLD_RELOCATION` (comma-separated: `capture`, `cutover`, `route`) are held for
/// the process' life — every relocation this node takes part in stops there (the node logs
/// "relocation step held by a test" when one does), so a test can kill a node exactly in that
/// window. A release build has no such variable.
#[cfg(debug_assertions)]
fn test_holds(node: &Node) -> anyhow::Result<Vec<tokio::sync::OwnedRwLockWriteGuard<()>>> {
    use zlink::node::RelocationStep;
    let Ok(names) = std::env::var("ZLINK_TEST_HOLD_RELOCATION") else {
        return Ok(Vec::new());
    };
    let mut holds = Vec::new();
    for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let Some(step) = RelocationStep::ALL.into_iter().find(|s| s.as_str() == name) else {
            bail!("ZLINK_TEST_HOLD_RELOCATION: no relocation step {name:?}");
        };
        tracing::warn!(step = name, "test build: relocation step held");
        holds.push(node.hold_relocation_step_for_tests(step));
    }
    Ok(holds)
}

async fn shutdown_signal() -> anyhow::Result<&'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut cli = Cli::try_parse().unwrap_or_else(|e| {
        if e.kind() == clap::error::ErrorKind::InvalidValue
            && let Some(var) = empty_env(&Cli::command())
        {
            eprintln!("error: {var} is set but empty: give it a value, or unset it");
            std::process::exit(2);
        }
        e.exit()
    });
    if let Some(Command::Ctl(args)) = cli.command.take() {
        return ctl::run(args).await;
    }
    let s = settings(cli)?;
    init_logs(s.log_format);
    // The chat app places its actors by a hash over every node of the mesh (this one and its
    // configured peers; the first mesh carries actor traffic).
    let chat = chat::Chat::new(
        std::iter::once(s.config.node.to_string()).chain(
            s.config
                .meshes
                .first()
                .into_iter()
                .flat_map(|m| m.peers.iter().map(|p| p.node.to_string())),
        ),
    );
    let mut registry = demo::registry().context("registering the demo actor types")?;
    chat.registry_into(&mut registry)
        .context("registering the chat actor types")?;
    let sessions = chat.sessions(demo::sessions());
    let mut options =
        NodeOptions::from_config(&s.config, registry, sessions).context("startup configuration")?;
    // The policy and credential from the settings; the in-flight bound from `[client_port]`.
    let ops = options.client_access.max_operations_per_session;
    options.client_access = s.access.clone();
    options.client_access.max_operations_per_session = ops;
    let signal = tokio::spawn(shutdown_signal());
    let node = Node::start(options).await.context("starting the node")?;
    #[cfg(debug_assertions)]
    let _test_holds = test_holds(&node)?;
    let ep = node.endpoints().clone();
    tracing::info!(
        node = %node.node_rid(),
        generation = %node.generation(),
        relay = %ep.relay,
        completion = %ep.completion,
        client = ep.client.as_deref().unwrap_or("-"),
        "serving"
    );
    let down = node.wait_peers(s.peer_wait).await;
    if down.is_empty() {
        tracing::info!("all peers up");
    } else {
        tracing::warn!(?down, "peers still down after the peer wait");
    }
    if let Some(path) = &s.ready_file {
        write_ready(path, &node)?;
    }
    let which = match signal.await {
        Ok(Ok(which)) => which,
        Ok(Err(e)) => return Err(e),
        Err(e) => bail!("signal task failed: {e}"),
    };
    tracing::info!(signal = which, "shutting down");
    let stats = node.counters();
    node.shutdown(s.drain).await;
    tracing::info!(
        activations = stats.activations,
        calls_in = stats.calls_in,
        calls_out = stats.calls_out,
        turns = stats.turns,
        "stopped"
    );
    Ok(())
}
