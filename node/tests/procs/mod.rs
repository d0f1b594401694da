//! A mesh of `zlink-node` processes for the process tests (`node_ctl`, `node_relocate`,
//! `node_relocate_load`, `node_relocate_faults`): configuration files in a temporary directory
//! (one SQLite Location Store, one operator credential), each process started with its log
//! beside its config and killed on drop, `ctl` and operator clients.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use zlink::node::client::NodeClient;

#[path = "../../../mesh/tests/common/ports.rs"]
mod ports;
pub use ports::free_port;

/// The guard of every wait.
pub const TIMEOUT: Duration = Duration::from_secs(20);
/// The node binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_zlink-node");
/// The nodes' operator credential.
pub const OPERATOR: &[u8] = b"reloc-operator";

/// One node of the mesh: its name, config file, ready file and client endpoint.
#[derive(Clone, Debug)]
pub struct Spec {
    /// `node1`, `node2`, …
    pub name: String,
    /// Its configuration file.
    pub config: PathBuf,
    /// Its ready file.
    pub ready: PathBuf,
    /// Its client endpoint.
    pub client: String,
}

/// Writes the configuration of an `n`-node mesh into `dir`; `extra` is appended to each
/// node's file before its peers (e.g. relocation timings).
pub fn setup(dir: &Path, n: usize, extra: &str) -> Vec<Spec> {
    setup_each(dir, n, |_| extra.to_owned())
}

/// [`setup`] with the lines `extra(i)` appended to the file of node `i` (0-based), e.g. a
/// metrics address for one node only.
pub fn setup_each(dir: &Path, n: usize, extra: impl Fn(usize) -> String) -> Vec<Spec> {
    std::fs::write(
        dir.join("secret"),
        "reloc-load-secret-0123456789abcdef-xyz\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("operator"),
        format!("{}\n", String::from_utf8_lossy(OPERATOR)),
    )
    .unwrap();
    let ports: Vec<[u16; 3]> = (0..n)
        .map(|_| [free_port(), free_port(), free_port()])
        .collect();
    let mut peers = String::new();
    for (i, p) in ports.iter().enumerate() {
        peers += &format!(
            "[[peers]]\nname = \"node{}\"\nrelay = \"tcp://127.0.0.1:{}\"\ncompletion = \"tcp://127.0.0.1:{}\"\n",
            i + 1,
            p[0],
            p[1]
        );
    }
    (0..n)
        .map(|i| {
            let name = format!("node{}", i + 1);
            let config = dir.join(format!("{name}.toml"));
            let ready = dir.join(format!("{name}.ready"));
            let p = ports[i];
            std::fs::write(
                &config,
                format!(
                    "name = \"{name}\"\nrelay = \"tcp://127.0.0.1:{}\"\n\
                     completion = \"tcp://127.0.0.1:{}\"\nclient = \"tcp://127.0.0.1:{}\"\n\
                     secret_file = \"{}\"\nstore = \"sqlite://{}\"\nready_file = \"{}\"\n\
                     operator_credential_file = \"{}\"\n\
                     drain_timeout_ms = 2000\n{}\n{peers}",
                    p[0],
                    p[1],
                    p[2],
                    dir.join("secret").display(),
                    dir.join("store.db").display(),
                    ready.display(),
                    dir.join("operator").display(),
                    extra(i)
                ),
            )
            .unwrap();
            Spec {
                name,
                config,
                ready,
                client: format!("tcp://127.0.0.1:{}", p[2]),
            }
        })
        .collect()
}

/// A `zlink-node` process, killed on drop.
pub struct Proc {
    /// What it was started with.
    pub spec: Spec,
    child: tokio::process::Child,
}

impl Proc {
    /// Starts the node of `spec`.
    pub fn start(spec: &Spec) -> Proc {
        Proc::start_with(spec, &[])
    }

    /// Starts the node of `spec` with the command-line arguments `args` after its config.
    pub fn start_with(spec: &Spec, args: &[&str]) -> Proc {
        Proc::start_env(spec, args, &[])
    }

    /// [`Proc::start_with`] with the environment variables `env` set too.
    pub fn start_env(spec: &Spec, args: &[&str], env: &[(&str, &str)]) -> Proc {
        let log = std::fs::File::create(spec.config.with_extension("log")).unwrap();
        let child = tokio::process::Command::new(BIN)
            .arg("--config")
            .arg(&spec.config)
            .args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Proc {
            spec: spec.clone(),
            child,
        }
    }

    /// The node's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.spec.config.with_extension("log")).unwrap_or_default()
    }

    /// Waits for the ready file (the node serves and its peers are up); its `key=value` fields.
    pub async fn wait_ready(&mut self) -> HashMap<String, String> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Ok(s) = std::fs::read_to_string(&self.spec.ready) {
                return s
                    .split_whitespace()
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect();
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("exited during startup: {status}\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "not ready\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// `kill -9` (SIGKILL) and waits for the process to end.
    pub async fn kill(&mut self) {
        self.child.start_kill().unwrap();
        tokio::time::timeout(TIMEOUT, self.child.wait())
            .await
            .expect("killed in time")
            .unwrap();
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }
}

/// Starts every node of `specs` and waits until each is ready.
pub async fn start_all(specs: &[Spec]) -> Vec<Proc> {
    let mut procs: Vec<Proc> = specs.iter().map(Proc::start).collect();
    for p in &mut procs {
        p.wait_ready().await;
    }
    procs
}

/// A client of `endpoint` that presented the operator credential.
pub async fn operator(endpoint: &str) -> NodeClient {
    let c = NodeClient::connect(endpoint, TIMEOUT).unwrap();
    c.authenticate(OPERATOR).await.unwrap();
    c
}

/// The operator credential file of the mesh configured in `dir` (for `ctl`).
pub fn operator_file(dir: &Path) -> PathBuf {
    dir.join("operator")
}

/// Runs `zlink-node ctl -e EP… ARGS…` with the operator credential file `operator`; its
/// stdout (it must succeed).
pub async fn ctl(operator: &Path, endpoints: &[&str], args: &[&str]) -> String {
    let out = ctl_output(operator, endpoints, args).await;
    assert!(
        out.status.success(),
        "ctl {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `zlink-node ctl -e EP… ARGS…` with the operator credential file `operator`; its
/// output, whether it succeeded or not.
pub async fn ctl_output(
    operator: &Path,
    endpoints: &[&str],
    args: &[&str],
) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("ctl");
    cmd.env("ZLINK_OPERATOR_CREDENTIAL_FILE", operator);
    for e in endpoints {
        cmd.args(["-e", e]);
    }
    tokio::time::timeout(TIMEOUT, cmd.args(args).output())
        .await
        .expect("ctl in time")
        .unwrap()
}
