//! Model check: random operation sequences give identical results on the in-memory store (the
//! reference) and on SQLite, and the per-ActorId counters never go backwards (SB-4.1, EG-14).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use zlink::store::contract::{self, actor, node};
use zlink::store::{
    ActivationRequest, ActorLocation, ActorOwner, AuthorityFence, LocationStore, ManualClock,
    MemoryStore, MeshName, NodeGeneration, ObjectGeneration, OwnerFence, OwnerLease, SqliteOptions,
    SqliteStore, StoreVersion,
};

#[derive(Clone, Debug)]
enum Op {
    Register {
        node: u8,
        generation: u8,
    },
    Renew {
        node: u8,
    },
    Release {
        node: u8,
    },
    Reserve {
        actor: u8,
        node: u8,
        other_type: bool,
    },
    MarkReady {
        actor: u8,
        stale: bool,
    },
    Cas {
        actor: u8,
        node: u8,
        stale: bool,
    },
    Destroy {
        actor: u8,
        stale: bool,
    },
    Lookup {
        actor: u8,
    },
    Advance {
        ms: u16,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..3u8, 1..4u8).prop_map(|(node, generation)| Op::Register { node, generation }),
        (0..3u8).prop_map(|node| Op::Renew { node }),
        (0..3u8).prop_map(|node| Op::Release { node }),
        (0..3u8, 0..3u8, prop::bool::weighted(0.1)).prop_map(|(actor, node, other_type)| {
            Op::Reserve {
                actor,
                node,
                other_type,
            }
        }),
        (0..3u8, any::<bool>()).prop_map(|(actor, stale)| Op::MarkReady { actor, stale }),
        (0..3u8, 0..3u8, any::<bool>()).prop_map(|(actor, node, stale)| Op::Cas {
            actor,
            node,
            stale
        }),
        (0..3u8, prop::bool::weighted(0.3)).prop_map(|(actor, stale)| Op::Destroy { actor, stale }),
        (0..3u8).prop_map(|actor| Op::Lookup { actor }),
        (0..6_000u16).prop_map(|ms| Op::Advance { ms }),
    ]
}

/// What the driver knows (derived from the reference store's answers; fed identically to both).
#[derive(Default)]
struct Knowledge {
    leases: HashMap<u8, OwnerLease>,
    last_seen: HashMap<u8, ActorLocation>,
    high: HashMap<u8, (u64, u64, u64)>,
    destroyed_at: HashMap<u8, u64>,
}

impl Knowledge {
    fn lease(&self, n: u8) -> OwnerLease {
        self.leases.get(&n).cloned().unwrap_or_else(|| OwnerLease {
            holder: zlink::store::LeaseHolder {
                node: node(&format!("n{n}")),
                node_generation: NodeGeneration::new(0),
                lease_generation: 0.into(),
            },
            expires_at: contract::START,
        })
    }

    fn fence(&self, a: u8, stale: bool) -> AuthorityFence {
        let mut fence = self.last_seen.get(&a).map_or(
            AuthorityFence {
                object_generation: ObjectGeneration::new(1),
                authority_owner_generation: 1.into(),
                version: StoreVersion::new(1),
            },
            ActorLocation::fence,
        );
        if stale {
            fence.version = StoreVersion::new(fence.version.get().saturating_sub(1));
        }
        fence
    }

    /// The owner authority last seen for actor `a` (a guess on node 0's lease when none was).
    fn owner_fence(&self, a: u8) -> OwnerFence {
        self.last_seen.get(&a).map_or_else(
            || {
                let f = self.fence(a, false);
                OwnerFence {
                    object_generation: f.object_generation,
                    authority_owner_generation: f.authority_owner_generation,
                    holder: self.lease(0).holder,
                }
            },
            ActorLocation::owner_fence,
        )
    }

    /// Checks monotonicity (SB-4.1) and remembers a location observed for actor `a`.
    fn observe(&mut self, a: u8, l: &ActorLocation) -> Result<(), TestCaseError> {
        let now = (
            l.object_generation.get(),
            l.authority_owner_generation.get(),
            l.version.get(),
        );
        let high = self.high.entry(a).or_default();
        prop_assert!(
            now.0 >= high.0,
            "object generation went back: {now:?} < {high:?}"
        );
        prop_assert!(
            now.1 >= high.1,
            "authority generation went back: {now:?} < {high:?}"
        );
        prop_assert!(now.2 >= high.2, "version went back: {now:?} < {high:?}");
        if let Some(gone) = self.destroyed_at.remove(&a) {
            prop_assert!(
                now.0 > gone,
                "SB-4.1: re-create reused ObjectGeneration {gone}"
            );
        }
        *high = now;
        self.last_seen.insert(a, l.clone());
        Ok(())
    }
}

fn mesh() -> MeshName {
    MeshName::new("model").unwrap()
}

/// Applies `op`; answers the result as text (compared between backends) and, for lease
/// operations, the lease returned.
async fn apply<S: LocationStore + ?Sized>(
    store: &S,
    op: &Op,
    k: &Knowledge,
) -> (String, Option<OwnerLease>) {
    let text = match *op {
        Op::Register {
            node: n,
            generation,
        } => {
            let r = store
                .register_owner(
                    node(&format!("n{n}")),
                    NodeGeneration::new(u64::from(generation)),
                    contract::TTL,
                )
                .await;
            return (format!("{r:?}"), r.ok());
        }
        Op::Renew { node } => {
            let r = store.renew_owner(k.lease(node).holder, contract::TTL).await;
            return (format!("{r:?}"), r.ok());
        }
        Op::Release { node } => format!("{:?}", store.release_owner(k.lease(node).holder).await),
        Op::Reserve {
            actor: a,
            node,
            other_type,
        } => format!(
            "{:?}",
            store
                .reserve_activation(ActivationRequest {
                    actor_id: actor(&format!("a{a}")),
                    actor_type: if other_type { "Other" } else { "T" }.to_owned(),
                    owner: ActorOwner {
                        mesh: mesh(),
                        holder: k.lease(node).holder,
                    },
                })
                .await
        ),
        Op::MarkReady { actor: a, stale } => format!(
            "{:?}",
            store
                .mark_ready(actor(&format!("a{a}")), k.fence(a, stale))
                .await
        ),
        Op::Cas {
            actor: a,
            node,
            stale,
        } => format!(
            "{:?}",
            store
                .cas_owner(
                    actor(&format!("a{a}")),
                    k.fence(a, stale),
                    ActorOwner {
                        mesh: mesh(),
                        holder: k.lease(node).holder,
                    },
                )
                .await
        ),
        Op::Destroy { actor: a, stale } => {
            let mut fence = k.owner_fence(a);
            if stale {
                fence.object_generation = ObjectGeneration::new(fence.object_generation.get() + 1);
            }
            format!("{:?}", store.destroy(actor(&format!("a{a}")), fence).await)
        }
        Op::Lookup { actor: a } => {
            format!("{:?}", store.lookup(actor(&format!("a{a}"))).await)
        }
        Op::Advance { .. } => String::new(),
    };
    (text, None)
}

/// Learns from the reference store's answer to `op` (only reads it).
async fn learn(
    store: &MemoryStore,
    op: &Op,
    outcome: &str,
    lease: Option<OwnerLease>,
    k: &mut Knowledge,
) -> Result<(), TestCaseError> {
    match *op {
        Op::Register { node: n, .. } | Op::Renew { node: n } => {
            if let Some(lease) = lease {
                k.leases.insert(n, lease);
            }
        }
        Op::Destroy { actor: a, .. } if outcome.starts_with("Ok(") => {
            let gone = k.fence(a, false).object_generation.get();
            k.destroyed_at.insert(a, gone);
            k.last_seen.remove(&a);
        }
        Op::Reserve { actor: a, .. }
        | Op::MarkReady { actor: a, .. }
        | Op::Cas { actor: a, .. }
        | Op::Lookup { actor: a } => {
            if let Some(l) = store
                .lookup(actor(&format!("a{a}")))
                .await
                .map_err(|e| TestCaseError::fail(e.to_string()))?
            {
                k.observe(a, &l)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::at_wall(contract::START);
        let reference = MemoryStore::with_clock(Arc::new(clock.clone()));
        let sqlite = SqliteStore::open_with(
            dir.path().join("model.db"),
            SqliteOptions::default(),
            Arc::new(clock.clone()),
        )
        .unwrap();
        let mut k = Knowledge::default();
        for (i, op) in ops.iter().enumerate() {
            if let Op::Advance { ms } = *op {
                clock.advance(Duration::from_millis(u64::from(ms)));
                continue;
            }
            let (expected, lease) = apply(&reference, op, &k).await;
            let (actual, _) = apply(&sqlite, op, &k).await;
            prop_assert_eq!(&actual, &expected, "step {} {:?}", i, op);
            learn(&reference, op, &expected, lease, &mut k).await?;
        }
        for a in 0..3u8 {
            let id = actor(&format!("a{a}"));
            prop_assert_eq!(
                sqlite.lookup(id.clone()).await.unwrap(),
                reference.lookup(id).await.unwrap()
            );
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 40,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    // spec: SB-4.1, EG-14, SB-12 — SQLite behaves exactly like the reference model, and
    // ObjectGeneration / authority / version never go backwards; re-create never reuses an
    // ObjectGeneration.
    #[test]
    fn sqlite_matches_the_reference_model(ops in prop::collection::vec(op(), 1..40)) {
        run(&ops)?;
    }
}

// A fixed sequence that exercises takeover, destroy and re-create deterministically.
#[test]
fn scripted_sequence_matches() {
    use Op::*;
    let ops = [
        Register {
            node: 0,
            generation: 1,
        },
        Register {
            node: 1,
            generation: 1,
        },
        Reserve {
            actor: 0,
            node: 0,
            other_type: false,
        },
        MarkReady {
            actor: 0,
            stale: false,
        },
        Cas {
            actor: 0,
            node: 1,
            stale: false,
        },
        Cas {
            actor: 0,
            node: 0,
            stale: true,
        },
        Advance { ms: 5_000 },
        Renew { node: 0 },
        Advance { ms: 5_000 },
        Reserve {
            actor: 0,
            node: 0,
            other_type: false,
        },
        MarkReady {
            actor: 0,
            stale: false,
        },
        Destroy {
            actor: 0,
            stale: true,
        },
        Destroy {
            actor: 0,
            stale: false,
        },
        Reserve {
            actor: 0,
            node: 0,
            other_type: true,
        },
        Lookup { actor: 0 },
        Register {
            node: 0,
            generation: 3,
        },
        Reserve {
            actor: 0,
            node: 0,
            other_type: true,
        },
        Release { node: 0 },
        Reserve {
            actor: 0,
            node: 0,
            other_type: true,
        },
    ];
    run(&ops).unwrap();
}
