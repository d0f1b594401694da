//! The operator credential of the examples that use the framework's operator operations against
//! `zlink-node` processes: `scripts/mesh-up` gives the nodes one and writes its file's path to
//! `RUN_DIR/endpoints.env` as `ZLINK_OPERATOR_CREDENTIAL_FILE` (`ZLINK_OPERATOR_CREDENTIAL`
//! holds the credential itself instead).

use anyhow::Context;

/// The credential from the environment, if any (trimmed, as the node reads it).
pub fn from_env() -> anyhow::Result<Option<Vec<u8>>> {
    if let Ok(c) = std::env::var("ZLINK_OPERATOR_CREDENTIAL") {
        return Ok(Some(c.trim().as_bytes().to_vec()));
    }
    match std::env::var_os("ZLINK_OPERATOR_CREDENTIAL_FILE") {
        Some(path) => {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.to_string_lossy()))?;
            Ok(Some(text.trim().as_bytes().to_vec()))
        }
        None => Ok(None),
    }
}
