//! Identity types used by the mesh, and the mesh's own connection vocabulary.

/// Temporary stand-ins for `zlink-wire`'s typed ids until that crate's API lands.
mod ids {
    use std::fmt;

    macro_rules! text_id {
        ($(#[$m:meta])* $name:ident, $check:expr) => {
            $(#[$m])*
            #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
            pub struct $name(Box<str>);
            impl $name {
                /// Validates and wraps.
                pub fn new(v: impl AsRef<str>) -> Result<Self, String> {
                    let v = v.as_ref();
                    let check: fn(char) -> bool = $check;
                    if v.is_empty() || v.len() > 64 || !v.chars().all(check) {
                        return Err(format!("invalid {}", stringify!($name)));
                    }
                    Ok(Self(v.into()))
                }
                /// As text.
                pub fn as_str(&self) -> &str { &self.0 }
                /// As bytes.
                pub fn as_bytes(&self) -> &[u8] { self.0.as_bytes() }
            }
            impl fmt::Display for $name {
                fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(&self.0) }
            }
        };
    }
    text_id!(
        /// Node routing id.
        NodeRid, |c| c.is_ascii_graphic());
    text_id!(
        /// Mesh name.
        MeshName, |c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));

    /// Process generation.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
    pub struct NodeGeneration(u64);
    impl NodeGeneration {
        /// Wraps.
        pub const fn new(v: u64) -> Self {
            Self(v)
        }
        /// Raw.
        pub const fn get(self) -> u64 {
            self.0
        }
    }
    impl fmt::Display for NodeGeneration {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            self.0.fmt(f)
        }
    }
}

pub use ids::{MeshName, NodeGeneration, NodeRid};

/// The kind of a physical connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum LinkKind {
    /// RouteMesh relay connection (ROUTER-ROUTER): requests and one-way records.
    Relay = 1,
    /// RouteMesh completion connection (ROUTER-ROUTER): replies and control records.
    Completion = 2,
    /// ClientServer connection (client DEALER ↔ node ROUTER).
    Client = 3,
}

/// A fresh NodeGeneration for this process start: wall-clock nanoseconds, so a restarted
/// process normally gets a larger value (used to reject an older generation's late Hello).
pub fn fresh_generation() -> NodeGeneration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    NodeGeneration::new(nanos.max(1))
}
