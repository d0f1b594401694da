//! Startup configuration and the `EnableActorDispatch` step (SB-3, SB-14.1).

use std::sync::Arc;
use std::time::Duration;

use zlink::config::{
    ConfigError, LaneLimits, NodeConfig, SESSION_RELOCATION_SEAL_TIMEOUT,
    SESSION_REPLACEMENT_CALLBACK_TIMEOUT, StartupBuilder, StoreChoice, Timeouts,
};
use zlink::store::{
    CountingStore, LocationStore, MemoryStore, StoreError, StoreOp, StoreUrl, contract,
};
use zlink_wire::ids::{DispatchKey, MeshName, NodeRid};

fn rid(s: &str) -> NodeRid {
    NodeRid::new(s).unwrap()
}

fn mesh(s: &str) -> MeshName {
    MeshName::new(s).unwrap()
}

fn key(k: u32) -> DispatchKey {
    DispatchKey::new(k)
}

fn memory_url() -> StoreUrl {
    StoreUrl::Memory
}

/// A node with everything actor dispatch needs.
fn complete() -> StartupBuilder<&'static str> {
    StartupBuilder::new(rid("node-a"))
        .mesh(mesh("main"))
        .object_client()
        .object_server()
        .location_store_url(memory_url())
        .enable_actor_dispatch()
}

// spec: SB-14.1, SB-3 — `enable_actor_dispatch` takes no MeshName (this compiles with no
// argument: `fn(StartupBuilder<H>) -> StartupBuilder<H>`), and a complete node starts.
#[test]
fn enable_actor_dispatch_takes_no_mesh_name_and_complete_node_starts() {
    let enable: fn(StartupBuilder<&'static str>) -> StartupBuilder<&'static str> =
        StartupBuilder::enable_actor_dispatch;
    let plan = enable(
        StartupBuilder::new(rid("node-a"))
            .mesh(mesh("main"))
            .object_server()
            .location_store_url(memory_url()),
    )
    .handler(key(1), "echo")
    .build()
    .expect("complete configuration starts");
    assert!(plan.actor_dispatch);
    assert_eq!(plan.meshes, vec![mesh("main")]);
    assert_eq!(plan.handlers.get(key(1)), Some(&"echo"));
    assert!(plan.open_store().unwrap().is_some());
}

// spec: SB-14.1, SB-3.1 — no Object Client/Server role → configuration error at startup.
#[test]
fn missing_object_role_fails_startup() {
    let err = StartupBuilder::<&str>::new(rid("node-a"))
        .mesh(mesh("main"))
        .location_store_url(memory_url())
        .enable_actor_dispatch()
        .build()
        .unwrap_err();
    assert!(matches!(err, ConfigError::NoObjectRole), "{err}");
    // Either role alone is enough.
    StartupBuilder::<&str>::new(rid("node-a"))
        .mesh(mesh("main"))
        .object_client()
        .location_store_url(memory_url())
        .enable_actor_dispatch()
        .build()
        .expect("object client alone");
}

// spec: SB-14.1, SB-3.2 — no Location Store → configuration error at startup.
#[test]
fn missing_location_store_fails_startup() {
    let err = StartupBuilder::<&str>::new(rid("node-a"))
        .mesh(mesh("main"))
        .object_server()
        .enable_actor_dispatch()
        .build()
        .unwrap_err();
    assert!(matches!(err, ConfigError::NoLocationStore), "{err}");
}

// spec: SB-3.3 — two handlers for one packet key → configuration error at startup, also when
// actor dispatch is off.
#[test]
fn duplicate_packet_key_fails_startup() {
    let err = complete()
        .handler(key(7), "first")
        .handler(key(8), "other")
        .handler(key(7), "second")
        .build()
        .unwrap_err();
    assert!(
        matches!(err, ConfigError::DuplicateHandler { key: k, count: 2 } if k == key(7)),
        "{err}"
    );
    let err = StartupBuilder::new(rid("stream-only"))
        .handler(key(1), "a")
        .handler(key(1), "b")
        .validate()
        .unwrap_err();
    assert!(matches!(err, ConfigError::DuplicateHandler { .. }), "{err}");
    // Distinct keys are fine.
    let plan = complete()
        .handler(key(1), "a")
        .handler(key(2), "b")
        .build()
        .unwrap();
    assert_eq!(
        plan.handlers.keys().collect::<Vec<_>>(),
        vec![key(1), key(2)]
    );
}

// spec: SB-3.4 — several meshes configured is not an error.
#[test]
fn several_meshes_are_fine() {
    let plan = complete()
        .mesh(mesh("second"))
        .mesh(mesh("third"))
        .build()
        .expect("several meshes");
    assert_eq!(plan.meshes.len(), 3);
}

// spec: SB-3.4 — a STREAM-only node that does not use actor dispatch needs no MeshNode, no
// object role and no store.
#[test]
fn stream_only_node_needs_no_mesh() {
    let plan = StartupBuilder::<&str>::new(rid("edge"))
        .handler(key(3), "login")
        .build()
        .expect("no actor dispatch, nothing else required");
    assert!(!plan.actor_dispatch);
    assert!(plan.meshes.is_empty());
}

// Implementation rule (docs/STORE.md): actor dispatch without any mesh cannot reach an owner.
#[test]
fn actor_dispatch_without_mesh_fails_startup() {
    let err = StartupBuilder::<&str>::new(rid("node-a"))
        .object_server()
        .location_store_url(memory_url())
        .enable_actor_dispatch()
        .build()
        .unwrap_err();
    assert!(matches!(err, ConfigError::NoMesh), "{err}");
    let err = complete().mesh(mesh("main")).build().unwrap_err();
    assert!(matches!(err, ConfigError::DuplicateMesh { .. }), "{err}");
}

// spec: SB-3.2 — an embedding program may provide its own store (e.g. the counting
// wrapper a contract test observes); startup hands out exactly that store and performs no
// store call itself.
#[tokio::test]
async fn provided_store_is_handed_out_untouched() {
    let counting = Arc::new(CountingStore::new(MemoryStore::new()));
    let plan = complete()
        .location_store(counting.clone() as Arc<dyn LocationStore>)
        .build()
        .unwrap();
    assert!(matches!(plan.store, Some(StoreChoice::Provided(_))));
    let store = plan.open_store().unwrap().unwrap();
    assert_eq!(
        counting.counts().total(),
        0,
        "startup performs no store call"
    );
    contract::register(&store, "node-a", 1).await;
    assert_eq!(counting.count(StoreOp::RegisterOwner), 1);
}

// spec: SB-3.2 — a `redis://` store is a Location Store like the others: startup accepts it and
// opens a handle (which connects on its first call); `rediss://` (TLS) is not built in: a clear
// configuration error.
#[test]
fn redis_store_urls_are_accepted_and_tls_is_a_clear_configuration_error() {
    let plan = StartupBuilder::<&str>::new(rid("node-a"))
        .mesh(mesh("main"))
        .object_server()
        .location_store_url("redis://127.0.0.1:6379/0?prefix=main".parse().unwrap())
        .enable_actor_dispatch()
        .build()
        .unwrap();
    assert!(plan.open_store().unwrap().is_some());
    let err = StartupBuilder::<&str>::new(rid("node-a"))
        .mesh(mesh("main"))
        .object_server()
        .location_store_url("rediss://127.0.0.1:6379".parse().unwrap())
        .enable_actor_dispatch()
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Store(StoreError::UnsupportedBackend { .. })
        ),
        "{err}"
    );
}

const FULL: &str = r#"
node = "node-a"
store = "sqlite:///tmp/zlink-test/store.db"
actor_dispatch = true
mesh_secret = "0123456789abcdef0123456789abcdef-secret"

[roles]
object_client = true
object_server = true

[[mesh]]
name = "main"
relay = "tcp://127.0.0.1:5551"
completion = "tcp://127.0.0.1:5552"
peers = [
  { node = "node-b", relay = "tcp://127.0.0.1:5561", completion = "tcp://127.0.0.1:5562" },
]

[[mesh]]
name = "backup"
relay = "tcp://127.0.0.1:5553"
completion = "tcp://127.0.0.1:5554"

[client]
endpoint = "tcp://127.0.0.1:6001"

[lanes]
application_items = 512

[timeouts]
send_ms = 2500
"#;

// spec: SB-3.4, SB-14.1 — a full TOML configuration with two meshes parses, validates and
// starts; omitted settings take the spec defaults.
#[test]
fn toml_configuration_parses_with_spec_defaults() {
    let cfg = NodeConfig::from_toml_str(FULL).expect("parse");
    cfg.validate().expect("valid");
    assert_eq!(cfg.node, rid("node-a"));
    assert_eq!(
        cfg.store,
        Some(StoreUrl::Sqlite(
            "/tmp/zlink-test/store.db".into(),
            Default::default()
        ))
    );
    assert_eq!(cfg.meshes.len(), 2);
    assert_eq!(cfg.meshes[0].peers[0].node, rid("node-b"));
    assert_eq!(
        cfg.client.as_ref().unwrap().endpoint,
        "tcp://127.0.0.1:6001"
    );
    assert_eq!(cfg.lanes.application_items, 512);
    assert_eq!(
        cfg.lanes.lifecycle_items,
        LaneLimits::default().lifecycle_items
    );
    assert_eq!(cfg.timeouts.send, Duration::from_millis(2_500));
    assert_eq!(
        cfg.timeouts.session_replacement_callback,
        Duration::from_millis(30_000)
    );
    assert_eq!(cfg.timeouts.session_relocation_seal, None);
    assert_eq!(
        cfg.relocation.seal(&cfg.timeouts),
        Duration::from_millis(3_000)
    );
    assert!(
        format!("{cfg:?}").contains("MeshSecretText(..)"),
        "secret is redacted"
    );
    assert!(!format!("{cfg:?}").contains("0123456789abcdef"));

    let plan = StartupBuilder::<()>::from_config(&cfg)
        .build()
        .expect("starts");
    assert!(plan.actor_dispatch);
    assert_eq!(plan.meshes, vec![mesh("main"), mesh("backup")]);
}

#[test]
fn defaults_match_the_spec_table() {
    assert_eq!(
        SESSION_REPLACEMENT_CALLBACK_TIMEOUT,
        Duration::from_millis(30_000)
    );
    assert_eq!(
        SESSION_RELOCATION_SEAL_TIMEOUT,
        Duration::from_millis(3_000)
    );
    let t = Timeouts::default();
    assert_eq!(
        t.session_replacement_callback,
        SESSION_REPLACEMENT_CALLBACK_TIMEOUT
    );
    assert_eq!(
        zlink::config::RelocationSettings::default().seal(&t),
        SESSION_RELOCATION_SEAL_TIMEOUT
    );
    let l = LaneLimits::default();
    assert_eq!(
        (l.application_items, l.application_bytes),
        (1_024, 64 * 1024 * 1024)
    );
    assert_eq!(
        (l.lifecycle_items, l.lifecycle_bytes),
        (128, 4 * 1024 * 1024)
    );
}

fn with(extra: &str) -> Result<(), ConfigError> {
    NodeConfig::from_toml_str(&format!("node = \"node-a\"\n{extra}"))?.validate()
}

// spec: SB-14.1, SB-3.1, SB-3.2 — the same startup rules apply to a TOML configuration.
#[test]
fn toml_actor_dispatch_needs_role_and_store() {
    let mesh = "mesh_secret = \"0123456789abcdef0123456789abcdef\"\n[[mesh]]\nname = \"m\"\nrelay = \"tcp://127.0.0.1:1\"\ncompletion = \"tcp://127.0.0.1:2\"\n";
    let err = with(&format!(
        "actor_dispatch = true\nstore = \"memory:\"\n{mesh}"
    ))
    .unwrap_err();
    assert!(matches!(err, ConfigError::NoObjectRole), "{err}");
    let err = with(&format!(
        "actor_dispatch = true\n{mesh}[roles]\nobject_server = true\n"
    ))
    .unwrap_err();
    assert!(matches!(err, ConfigError::NoLocationStore), "{err}");
    with(&format!(
        "actor_dispatch = true\nstore = \"memory:\"\n{mesh}[roles]\nobject_server = true\n"
    ))
    .expect("complete");
}

#[test]
fn toml_errors_are_typed() {
    // Unknown keys, invalid ids and invalid store URLs are parse errors.
    for bad in [
        "bogus = 1",
        "store = \"ftp://x\"",
        "store = \"sqlite:\"",
        "[roles]\nobject_servr = true",
    ] {
        assert!(matches!(with(bad), Err(ConfigError::Parse(_))), "{bad:?}");
    }
    assert!(matches!(
        NodeConfig::from_toml_str("node = \"has space\""),
        Err(ConfigError::Parse(_))
    ));

    let mesh = "[[mesh]]\nname = \"m\"\nrelay = \"tcp://127.0.0.1:1\"\ncompletion = \"tcp://127.0.0.1:2\"\n";
    assert!(matches!(with(mesh), Err(ConfigError::MissingMeshSecret)));
    assert!(matches!(
        with(&format!("mesh_secret = \"short\"\n{mesh}")),
        Err(ConfigError::MeshSecretTooShort { len: 5 })
    ));
    assert!(matches!(
        with(&format!(
            "mesh_secret = \"0123456789abcdef0123456789abcdef\"\ninsecure_dev_mode = true\n{mesh}"
        )),
        Err(ConfigError::ConflictingSecurity)
    ));
    with(&format!("insecure_dev_mode = true\n{mesh}")).expect("explicit insecure dev mode");

    let bad_endpoint = "insecure_dev_mode = true\n[[mesh]]\nname = \"m\"\nrelay = \"127.0.0.1:1\"\ncompletion = \"tcp://127.0.0.1:2\"\n";
    assert!(matches!(
        with(bad_endpoint),
        Err(ConfigError::InvalidEndpoint { .. })
    ));
    let self_peer = format!(
        "insecure_dev_mode = true\n{mesh}peers = [{{ node = \"node-a\", relay = \"tcp://h:1\", completion = \"tcp://h:2\" }}]\n"
    );
    assert!(matches!(
        with(&self_peer),
        Err(ConfigError::InvalidPeer { .. })
    ));
    assert!(matches!(
        with("[lanes]\napplication_items = 0"),
        Err(ConfigError::InvalidValue { .. })
    ));
    assert!(matches!(
        with("[timeouts]\nsession_relocation_seal_ms = 0"),
        Err(ConfigError::InvalidValue { .. })
    ));
    assert!(matches!(
        with("store = \"rediss://localhost\"\n"),
        Err(ConfigError::Store(StoreError::UnsupportedBackend { .. }))
    ));
}

#[test]
fn load_reads_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("node.toml");
    std::fs::write(&path, FULL).unwrap();
    let cfg = NodeConfig::load(&path).unwrap();
    assert_eq!(cfg.meshes[1].name, mesh("backup"));
    let err = NodeConfig::load(dir.path().join("missing.toml")).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }), "{err}");
}

// spec: SB-3.5 — there is no hidden same-process authority: without a configured store, startup
// with actor dispatch fails instead of silently using an in-process store, and a plan without a
// store never hands one out.
#[test]
fn no_hidden_same_process_authority() {
    let err = StartupBuilder::<&str>::new(rid("node-a"))
        .mesh(mesh("main"))
        .object_client()
        .object_server()
        .enable_actor_dispatch()
        .build()
        .unwrap_err();
    assert!(matches!(err, ConfigError::NoLocationStore), "{err}");
    let cfg = NodeConfig::from_toml_str("node = \"edge\"").unwrap();
    cfg.validate().unwrap();
    assert_eq!(cfg.store, None);
    let plan = StartupBuilder::<()>::from_config(&cfg).build().unwrap();
    assert!(plan.open_store().unwrap().is_none());
}

// spec: SB-5.11 — a lease TTL whose renewal cannot answer within the store's lease busy
// timeout before the local lease deadline is a configuration error that says why; the default
// SQLite settings honour a 1.5 s lease (a renewal waits at most 250 ms for the lock).
#[test]
fn a_lease_ttl_shorter_than_the_store_busy_timeout_allows_is_refused() {
    let default = "store = \"sqlite:///tmp/zlink-never-opened.db\"\n";
    with(&format!("{default}[timeouts]\nowner_lease_ttl_ms = 1500\n"))
        .expect("a 1.5 s lease on the default SQLite settings");
    let sqlite = "store = \"sqlite:///tmp/zlink-never-opened.db?lease_busy_timeout_ms=1000\"\n";
    let err = with(&format!("{sqlite}[timeouts]\nowner_lease_ttl_ms = 1500\n")).unwrap_err();
    let ConfigError::LeaseTtlTooShort {
        write_wait,
        minimum,
        ..
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(*write_wait, Duration::from_secs(1));
    let text = err.to_string();
    assert!(text.contains("busy timeout"), "{text}");
    assert!(text.contains("1500 ms"), "{text}");
    // The minimum it names is accepted, and so is the default TTL.
    let ok = format!(
        "{sqlite}[timeouts]\nowner_lease_ttl_ms = {}\n",
        minimum.as_millis()
    );
    with(&ok).expect("the minimum named in the error");
    with(sqlite).expect("the default TTL");
    // A store without busy waits (memory) takes any TTL.
    with("store = \"memory:\"\n[timeouts]\nowner_lease_ttl_ms = 1500\n").expect("memory");
}
