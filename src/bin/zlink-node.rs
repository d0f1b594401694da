//! `zlink-node`: one ZLink mesh node process (placeholder while the node lands).

fn main() {}
