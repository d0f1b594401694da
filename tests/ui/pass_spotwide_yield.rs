// EG-16.1, EG-16.2: SpotWide User and Instance Spot turns offer the normal terminal and Yield
// for requests, workers and create / get-or-create. SB-11.2: the valid policy combinations.
use zlink::runtime::*;

fn spotwide<K: SpotKind<Yield = CanYield>>(rt: &Runtime) {
    let spot = rt.create_spot::<K, _>(|_c, b| Handled::ok(b)).unwrap();
    let other = rt
        .create_spot::<PerActorUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let target = other
        .spawn_actor(|_c: SerialCtx, m: u32| Handled::ok(m))
        .unwrap();
    let s = spot.clone();
    let _a = spot.spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
        let (t, s) = (target.clone(), s.clone());
        Handled::later(async move {
            let _ = ctx.ask(&t, 1).await;
            let _ = ctx.ask(&t, 1).yielding().await;
            let _ = ctx.request(|| async { Ok(()) }).await;
            let _ = ctx.request(|| async { Ok(()) }).yielding().await;
            let _ = ctx.worker(|| 1).await;
            let _ = ctx.worker(|| 1).yielding().await;
            let _ = ctx
                .create_actor(&s, |_c: SpotWideCtx, m: u32| Handled::ok(m))
                .yielding()
                .await;
            let _ = ctx
                .get_or_create_actor(&s, "k", |_c: SpotWideCtx, m: u32| Handled::ok(m))
                .yielding()
                .await;
            Ok(())
        })
    });
    spot.lane().seal();
    spot.lane().return_pending();
}

fn main() {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    spotwide::<SpotWideUser>(&rt);
    spotwide::<InstanceSpot>(&rt);
    rt.session_lane().unwrap().connection_closed();
}
