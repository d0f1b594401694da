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
    use std::hash::{BuildHasher, Hash, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};

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

    /// Key equality comparisons made by the map: the per-operation work of a lookup, counted.
    static EQ_CALLS: AtomicU64 = AtomicU64::new(0);

    /// A routing id that counts how often the map compares it (hashes exactly as `Vec<u8>`).
    #[derive(Clone, Debug)]
    struct Counted(Vec<u8>);

    impl PartialEq for Counted {
        fn eq(&self, other: &Self) -> bool {
            EQ_CALLS.fetch_add(1, Ordering::Relaxed);
            self.0 == other.0
        }
    }
    impl Eq for Counted {}
    impl Hash for Counted {
        fn hash<H: Hasher>(&self, h: &mut H) {
            self.0.hash(h);
        }
    }

    /// Routing ids an attacker precomputed against a fixed-seed hasher: the same bucket bits
    /// (the low `BUCKET_BITS`, the probe start for any table of up to 2^BUCKET_BITS buckets) and
    /// the same 7-bit control tag (the top bits), so every lookup compares the key with every
    /// colliding one. Deterministic: the fixed seed never changes.
    fn colliding_ids(n: usize) -> Vec<Counted> {
        const BUCKET_BITS: u32 = 8;
        let fixed = foldhash::fast::FixedState::default();
        let target = |h: u64| (h & ((1 << BUCKET_BITS) - 1), h >> 57);
        let want = target(fixed.hash_one(b"rid-0".to_vec()));
        let mut out = Vec::with_capacity(n);
        let mut i = 0u64;
        while out.len() < n {
            let id = format!("rid-{i}").into_bytes();
            if target(fixed.hash_one(&id)) == want {
                out.push(Counted(id));
            }
            i += 1;
        }
        out
    }

    /// Counts the key comparisons of inserting every id and then looking each up once.
    fn comparisons<S: BuildHasher>(mut map: HashMap<Counted, usize, S>, ids: &[Counted]) -> u64 {
        let before = EQ_CALLS.load(Ordering::Relaxed);
        for (i, id) in ids.iter().enumerate() {
            map.insert(id.clone(), i);
        }
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(map.get(id), Some(&i));
        }
        EQ_CALLS.load(Ordering::Relaxed) - before
    }

    /// Hash flooding: many client connections announce routing ids chosen to collide under a
    /// fixed-seed hasher. In a fixed-seed map every insert and lookup compares the key with the
    /// colliding ones (quadratic work on the single I/O thread); in the randomly seeded map the
    /// I/O thread keys them by (`SeededMap`), the work per operation stays flat. Work is
    /// counted (key comparisons), not timed.
    #[test]
    fn colliding_routing_ids_do_not_degrade_seeded_maps() {
        const N: usize = 64;
        let ids = colliding_ids(N);
        let n = N as u64;
        // The ids are a real attack on a fixed seed: about N²/2 comparisons for 2N operations.
        let fixed = comparisons(FastMap::default(), &ids);
        assert!(fixed >= n * n / 2, "fixed seed: {fixed} comparisons");
        // The seeded map: about one comparison per lookup (the key itself), a few stray tag
        // matches at most (each other key matches a tag with probability 1/128 per probe).
        let seeded = comparisons(SeededMap::default(), &ids);
        assert!(seeded <= 2 * n, "seeded: {seeded} comparisons for {N} ids");
        eprintln!("{N} colliding ids, insert + lookup each: fixed seed {fixed}, seeded {seeded}");
    }
}
