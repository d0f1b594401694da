//! Unit tests of the Redis backend: URL options, the shown URL, rows, tagged values, the longest
//! wait, and the commit script's lease check (that one against the server of
//! `ZLINK_TEST_REDIS_URL`; the contract suite is `tests/store_redis.rs`).

use super::url::UrlOptions;
use super::*;

#[test]
fn the_prefix_parameter_is_ours_and_other_parameters_stay() {
    assert_eq!(
        split_options("redis://h:1/2").unwrap(),
        ("redis://h:1/2".to_owned(), UrlOptions::default())
    );
    assert_eq!(
        split_options("redis://h/0?prefix=mesh-a").unwrap(),
        (
            "redis://h/0".to_owned(),
            UrlOptions {
                prefix: Some("mesh-a".to_owned()),
                lease_timeout: None
            }
        )
    );
    assert_eq!(
        split_options("redis://h?protocol=resp3&prefix=x").unwrap(),
        (
            "redis://h?protocol=resp3".to_owned(),
            UrlOptions {
                prefix: Some("x".to_owned()),
                lease_timeout: None
            }
        )
    );
    assert!(matches!(
        split_options("redis://h?prefix="),
        Err(StoreError::InvalidUrl { .. })
    ));
}

#[test]
fn debug_never_shows_credentials() {
    let store = RedisStore::open("redis://user:secret@h:1/0", RedisOptions::default()).unwrap();
    let shown = format!("{store:?}");
    assert!(!shown.contains("secret"), "{shown}");
    assert!(shown.contains("h:1/0"), "{shown}");
}

/// With the server's clock, the script itself checks that no lease read live at the decision
/// time has ended by the time of the write (the server's `TIME` inside the script).
#[tokio::test]
async fn the_commit_script_refuses_a_write_after_a_lease_read_live_has_ended() {
    let Some(url) = crate::store::contract::redis_test_url("commit_script_lease_flip") else {
        return;
    };
    let url = crate::store::contract::with_unique_prefix(&url, "script");
    let store = RedisStore::open(&url, RedisOptions::default()).unwrap();
    let conn = store.conn().await.unwrap();
    let mut manager = conn.manager.clone();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut manager).await.unwrap();
    let server_now = secs * 1_000 + micros / 1_000;
    let probe = format!("{}:probe", store.prefix());
    let attempt = |decided: u64, expires: u64| {
        let mut tx = Tx::new(&store.shared, conn);
        tx.reads
            .push((store.shared.keys.instance(), Some(conn.instance.clone())));
        tx.batches = 1;
        tx.now = StoreTime::from_millis(decided);
        tx.leases.push(StoreTime::from_millis(expires));
        let write = vec![Write::Set(probe.clone(), b"written".to_vec())];
        tx.finish(Ok(((), write)))
    };
    let read = |mut m: ConnectionManager| {
        let probe = probe.clone();
        async move {
            redis::cmd("GET")
                .arg(probe)
                .query_async::<Option<Vec<u8>>>(&mut m)
                .await
                .unwrap()
        }
    };
    // Decided 10 s ago while the lease was live; it ended 5 s ago: refused, nothing written.
    let outcome = attempt(server_now - 10_000, server_now - 5_000).await;
    assert!(outcome.unwrap().is_none(), "a conflict: decide again");
    assert_eq!(read(manager.clone()).await, None);
    // Already ended at the decision (the core judged it dead): liveness did not change.
    let outcome = attempt(server_now - 10_000, server_now - 20_000).await;
    assert!(outcome.unwrap().is_some());
    // Still live now: written.
    let outcome = attempt(server_now - 10_000, server_now + 60_000).await;
    assert!(outcome.unwrap().is_some());
    assert_eq!(read(manager).await, Some(b"written".to_vec()));
}

#[test]
fn the_longest_wait_is_the_lease_timeout() {
    let store = RedisStore::open("redis://h:1", RedisOptions::default()).unwrap();
    assert_eq!(store.longest_wait(), Duration::from_millis(500));
    // a 1.5 s lease's renewal slack (850 ms) is longer: the configuration accepts it
    assert!(crate::store::renewal_slack(Duration::from_millis(1_500)) > store.longest_wait());
    let store = RedisStore::open(
        "redis://h:1?lease_timeout_ms=200&prefix=p",
        RedisOptions::default(),
    )
    .unwrap();
    assert_eq!(store.longest_wait(), Duration::from_millis(200));
    assert_eq!(store.prefix(), "p");
    for bad in [
        "redis://h:1?lease_timeout_ms=0",
        "redis://h:1?lease_timeout_ms=x",
    ] {
        assert!(matches!(
            RedisStore::open(bad, RedisOptions::default()),
            Err(StoreError::InvalidUrl { .. })
        ));
    }
}

#[test]
fn values_are_tagged_absent_or_present() {
    assert_eq!(tagged(None), b"0");
    assert_eq!(tagged(Some(b"")), b"1");
    assert_eq!(tagged(Some(b"{}")), b"1{}");
}

#[test]
fn rows_round_trip() {
    let location = ActorLocation {
        actor_id: ActorId::new("a").unwrap(),
        actor_type: "T".into(),
        object_generation: ObjectGeneration::new(u64::MAX),
        mesh: MeshName::new("m").unwrap(),
        owner_node: NodeRid::new("n").unwrap(),
        node_generation: NodeGeneration::new(2),
        authority_owner_generation: AuthorityOwnerGeneration::new(3),
        owner_lease_generation: OwnerLeaseGeneration::new(4),
        state: ActivationState::Ready,
        version: StoreVersion::new(5),
    };
    let raw = encode_actor(&location).unwrap();
    assert_eq!(decode_actor(&location.actor_id, &raw).unwrap(), location);
    assert!(matches!(
        decode_actor(&location.actor_id, b"{"),
        Err(StoreError::Unavailable { .. })
    ));
}
