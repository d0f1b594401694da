// EG-16.3: Entry Spot, PerActor and Entry actor handlers offer only the normal async terminal.
use zlink::runtime::*;

fn main() {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let per = rt
        .create_spot::<PerActorUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let target = per
        .spawn_actor(|_c: SerialCtx, m: u32| Handled::ok(m))
        .unwrap();
    let _a = per.spawn_actor(move |ctx: SerialCtx, _m: ()| {
        let t = target.clone();
        Handled::later(async move {
            let _ = ctx.ask(&t, 1).yielding().await;
            let _ = ctx.request(|| async { Ok(()) }).yielding().await;
            let _ = ctx.worker(|| 1).yielding().await;
            Ok(())
        })
    });
    let _entry = rt.create_spot::<EntrySpot, _>(|ctx: SerialCtx, b| {
        Handled::later(async move {
            let _ = ctx.request(|| async { Ok(()) }).yielding().await;
            Ok(b)
        })
    });
    // a PerActor Spot never hands out a context that offers Yield
    let _wrong = per.spawn_actor(|_ctx: SpotWideCtx, _m: ()| Handled::ok(()));
}
