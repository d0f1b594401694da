//! Hashers of the node's per-message maps ([`foldhash`]; std's SipHash cost about 1,000
//! instructions per relayed packet across the five lookups on its path).
//!
//! Keys the node chooses (session ids, dispatch keys) use a fixed-seed fast hash. Keys a client
//! or peer chooses (actor ids: a client creates and names actors, a peer's 24 names one) use a
//! hasher seeded randomly per map, so colliding ids cannot be precomputed (hash flooding), as
//! in `zlink_mesh`'s own maps.

use std::collections::HashMap;

/// A `HashMap` for keys the node chooses: fast, fixed seed.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

/// A `HashMap` for keys a client or peer chooses: randomly seeded per map.
pub(crate) type SeededMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn maps_keyed_by_strangers_are_seeded_per_map() {
        let a = SeededMap::<String, u64>::default();
        let b = SeededMap::<String, u64>::default();
        // Different maps hash the same key differently: collisions cannot be precomputed.
        let differ = (0..4u8).any(|i| {
            let k = format!("actor-{i}");
            a.hasher().hash_one(&k) != b.hasher().hash_one(&k)
        });
        assert!(differ);
        let f = FastMap::<u64, u64>::default();
        let g = FastMap::<u64, u64>::default();
        assert_eq!(f.hasher().hash_one(7u64), g.hasher().hash_one(7u64));
    }
}
