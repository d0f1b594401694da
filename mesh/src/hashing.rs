//! Hashers for the I/O thread's maps ([`foldhash`]).
//!
//! Keys we choose (session ids, our correlation ids, NodeRids of peers we dial or that proved
//! themselves, our endpoints) use a fixed-seed fast hash. Keys a stranger chooses (routing ids
//! of client connections, of tombstoned sessions, of accepted connections) use a hasher seeded
//! randomly per map, so colliding ids cannot be precomputed to stall the single I/O thread
//! (hash flooding).

use std::collections::{HashMap, HashSet};

/// A `HashMap` for keys we choose: fast, fixed seed.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

/// A `HashSet` for keys we choose.
pub(crate) type FastSet<K> = HashSet<K, foldhash::fast::FixedState>;

/// A `HashMap` for keys a peer or client chooses: randomly seeded.
pub(crate) type SeededMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn maps_keyed_by_strangers_are_seeded_per_map() {
        let key: &[u8] = b"client-routing-id";
        let a = SeededMap::<Vec<u8>, u64>::default();
        let b = SeededMap::<Vec<u8>, u64>::default();
        // Different maps hash the same key differently: collisions cannot be precomputed.
        let differ = (0..4u8).any(|i| {
            let k = [key, &[i]].concat();
            a.hasher().hash_one(&k) != b.hasher().hash_one(&k)
        });
        assert!(differ);
        // Our own keys: a fixed seed (reproducible, as fast as Fx).
        let f = FastMap::<u64, u64>::default();
        let g = FastMap::<u64, u64>::default();
        assert_eq!(f.hasher().hash_one(7u64), g.hasher().hash_one(7u64));
    }
}
