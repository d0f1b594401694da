//! Node startup through the SB-3 configuration rules and the `zlink-node` command line.

#[path = "../../tests/node_common/mod.rs"]
mod node_common;

use node_common::*;
use zlink::config::{
    ConfigError, MeshConfig, MeshSecretText, NodeConfig, ObjectRoles, StartupBuilder,
};
use zlink::node::{Node, NodeError, NodeOptions};
use zlink::session::SessionHandlers;
use zlink::store::StoreUrl;
use zlink_apps::demo;
use zlink_mesh::MeshName;

fn config() -> NodeConfig {
    let mut c = NodeConfig::new(rid("n1"));
    c.store = Some("memory:".parse::<StoreUrl>().unwrap());
    c.actor_dispatch = true;
    c.roles = ObjectRoles {
        object_client: true,
        object_server: true,
    };
    c.mesh_secret = Some(MeshSecretText::new("zlink-test-secret-0123456789abcdef"));
    c.meshes = vec![MeshConfig {
        name: MeshName::new("main").unwrap(),
        relay: "tcp://127.0.0.1:*".into(),
        completion: "tcp://127.0.0.1:*".into(),
        peers: vec![],
    }];
    c
}

fn options(c: &NodeConfig) -> Result<NodeOptions, NodeError> {
    NodeOptions::from_config(c, demo::registry().unwrap(), SessionHandlers::new())
}

// spec: SB-14.1, SB-3.1 (no object role → configuration error at startup)
#[test]
fn actor_dispatch_without_an_object_role_fails_startup() {
    let mut c = config();
    c.roles = ObjectRoles::default();
    assert!(matches!(
        options(&c),
        Err(NodeError::Config(ConfigError::NoObjectRole))
    ));
}

// spec: SB-14.1, SB-3.2 (no Location Store → configuration error at startup)
#[test]
fn actor_dispatch_without_a_location_store_fails_startup() {
    let mut c = config();
    c.store = None;
    assert!(matches!(
        options(&c),
        Err(NodeError::Config(ConfigError::NoLocationStore))
    ));
}

// spec: SB-14.1, SB-3, SB-3.4 — `enable_actor_dispatch()` takes no MeshName; several meshes are
// fine; the node starts and serves.
#[tokio::test]
async fn enable_actor_dispatch_takes_no_mesh_name_and_the_node_starts() {
    let startup = StartupBuilder::<()>::new(rid("n1"))
        .mesh(MeshName::new("one").unwrap())
        .mesh(MeshName::new("two").unwrap())
        .object_server()
        .location_store(memory_store())
        .enable_actor_dispatch()
        .build()
        .unwrap();
    assert!(startup.actor_dispatch);
    let mut c = config();
    c.meshes.push(MeshConfig {
        name: MeshName::new("second").unwrap(),
        relay: "tcp://127.0.0.1:*".into(),
        completion: "tcp://127.0.0.1:*".into(),
        peers: vec![],
    });
    let node = Node::start(options(&c).unwrap()).await.unwrap();
    assert_eq!(node.info().node, "n1");
    assert!(node.info().actor_types.contains(&"counter".to_owned()));
    node.shutdown(TIMEOUT).await;
}

// A node hosting actors needs actor dispatch enabled.
#[test]
fn a_configuration_without_actor_dispatch_is_refused() {
    let mut c = config();
    c.actor_dispatch = false;
    assert!(matches!(options(&c), Err(NodeError::ActorDispatchDisabled)));
}

#[test]
fn help_explains_every_option() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_zlink-node"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "--config",
        "--name",
        "--mesh",
        "--relay",
        "--completion",
        "--client",
        "--secret-file",
        "--store",
        "--ready-file",
        "--peer",
        "--drain-timeout-ms",
        "--lease-ttl-ms",
        "--peer-wait-ms",
        "--log-format",
        "--insecure-dev-mode",
        "--session-relocation-seal-ms",
        "--relocation-cutover-timeout-ms",
        "--relocation-restore-timeout-ms",
        "--relocation-result-timeout-ms",
        "--relocation-source-wait-ms",
        "--relocation-max-restore-timers",
        "--relocation-target-queue-records",
        "--relocation-target-queue-bytes",
        "[relocation]",
        "ZLINK_MESH_SECRET",
        "SIGTERM",
        "[[peers]]",
    ] {
        assert!(help.contains(needle), "--help lacks {needle}:\n{help}");
    }
}

// A process without a mesh secret (and without insecure dev mode) does not start: the mesh
// authenticates its peers (docs/MESH.md); no spec id covers the secret itself.
#[test]
fn the_binary_refuses_a_mesh_without_a_secret() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_zlink-node"))
        .args(["--name", "solo", "--store", "memory:"])
        .env_remove("ZLINK_MESH_SECRET")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("secret"), "{err}");
}

// `[relocation]` in the binary's file, its flags and its environment variables reach the
// library's validation: each bad value below stops the process before it serves, naming the key.
// (`tests/node_config.rs` checks that every key reaches `NodeOptions::relocation`.)
#[test]
fn the_binary_reads_and_checks_the_relocation_keys() {
    let dir = tempfile::tempdir().unwrap();
    let run = |file: &str, args: &[&str], env: &[(&str, &str)]| {
        let path = dir.path().join("node.toml");
        std::fs::write(
            &path,
            format!("name = \"solo\"\nstore = \"memory:\"\ninsecure_dev_mode = true\n{file}"),
        )
        .unwrap();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_zlink-node"));
        cmd.arg("--config").arg(&path).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        // A value that is not refused leaves the node serving: 20 s guard, then it is killed.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let Ok(out) = rx.recv_timeout(std::time::Duration::from_secs(20)) else {
            let _ = std::process::Command::new("kill")
                .arg(pid.to_string())
                .status();
            panic!("{file:?} {args:?} {env:?}: the node started");
        };
        let out = out.unwrap();
        assert!(!out.status.success(), "{file:?} {args:?} {env:?} started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    for (file, args, env, key) in [
        (
            "[relocation]\ntarget_queue_records = 0\n",
            &[][..],
            &[][..],
            "relocation.target_queue_records",
        ),
        (
            "[relocation]\nseal_ms = 2000\ncutover_timeout_ms = 2500\n",
            &[],
            &[],
            "relocation.cutover_timeout_ms",
        ),
        // the seal's two keys in one file
        (
            "session_relocation_seal_ms = 4000\n[relocation]\nseal_ms = 4000\n",
            &[],
            &[],
            "relocation.seal_ms",
        ),
        // the flag beats the file: a cutover as long as the default 3 s seal
        (
            "[relocation]\ncutover_timeout_ms = 500\n",
            &["--relocation-cutover-timeout-ms", "3000"],
            &[],
            "relocation.cutover_timeout_ms",
        ),
        // the seal's flag, shorter than the file's cutover timeout
        (
            "[relocation]\ncutover_timeout_ms = 1500\n",
            &["--session-relocation-seal-ms", "1500"],
            &[],
            "relocation.cutover_timeout_ms",
        ),
        (
            "",
            &["--relocation-target-queue-bytes", "0"],
            &[],
            "relocation.target_queue_bytes",
        ),
        (
            "",
            &[],
            &[("ZLINK_RELOCATION_SOURCE_WAIT_MS", "0")],
            "relocation.source_wait_ms",
        ),
        (
            "",
            &[],
            &[("ZLINK_RELOCATION_MAX_RESTORE_TIMERS", "0")],
            "relocation.max_restore_timers",
        ),
    ] {
        let err = run(file, args, env);
        assert!(err.contains(key), "{file:?} {args:?} {env:?}: {err}");
    }
    // An unknown key of the table does not parse.
    let err = run("[relocation]\ncutover_ms = 10\n", &[], &[]);
    assert!(err.contains("cutover_ms"), "{err}");
}

// spec: SB-3.3 (two session handlers for one packet key → configuration error at startup)
#[test]
fn a_duplicate_session_packet_key_fails_startup() {
    let twice = demo::sessions().packet(|_s, _b: demo::session::Bind| async move {
        Err::<zlink::actor::ActorRef, _>(zlink::session::PacketError::new(
            zlink::actor::ErrorKind::Internal,
            "never",
        ))
    });
    assert!(matches!(
        NodeOptions::from_config(&config(), demo::registry().unwrap(), twice.clone()),
        Err(NodeError::Config(ConfigError::DuplicateHandler {
            count: 2,
            ..
        }))
    ));
    assert!(matches!(
        twice.validate(),
        Err(ConfigError::DuplicateHandler { .. })
    ));
    // The demo application alone is valid.
    options(&config()).unwrap();
    NodeOptions::from_config(&config(), demo::registry().unwrap(), demo::sessions()).unwrap();
}

// The framework's client operations own the keys from 0xFFFF0000: an application key there is
// a configuration error, so application keys can never collide with them.
#[test]
fn a_reserved_session_packet_key_fails_startup() {
    let reserved = SessionHandlers::new().packet_raw(
        zlink::actor::DispatchKey::new(zlink::session::RESERVED_KEYS_START + 1),
        |_s, _b| Box::pin(async { Ok(Default::default()) }),
    );
    assert!(matches!(
        NodeOptions::from_config(&config(), demo::registry().unwrap(), reserved),
        Err(NodeError::Config(ConfigError::ReservedPacketKey { .. }))
    ));
}
