//! Execution resources scale with cores, not Spots (EG-10). Alone in its own test binary so that
//! no other test's threads disturb the count.

use zlink::runtime::*;

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

fn run(rt: &Runtime, spots: usize) {
    let mut actors = Vec::with_capacity(spots);
    for _ in 0..spots {
        let spot = rt
            .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
            .unwrap();
        let a = spot
            .spawn_actor(|_c: SpotWideCtx, m: u32| Handled::ok(m + 1))
            .unwrap();
        actors.push((spot, a));
    }
    for (_, a) in &actors {
        a.tell(1).unwrap();
    }
    for (_, a) in &actors {
        assert_eq!(rt.block_on(a.ask(1)).unwrap(), Ok(2));
    }
}

// spec: EG-10, EG-6.2 — the same fixed pool runs 10 and 10,000 Spots; no worker per gate.
#[test]
fn threads_with_10_and_10000_spots_are_equal() {
    let rt = Runtime::new(RuntimeConfig {
        application_workers: 2,
        infrastructure_workers: 1,
        ..Default::default()
    })
    .unwrap();
    run(&rt, 10);
    let with_10 = threads();
    run(&rt, 10_000);
    let with_10k = threads();
    assert_eq!(with_10, with_10k);
}
