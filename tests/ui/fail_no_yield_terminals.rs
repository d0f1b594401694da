// EG-16.4: actor join (defer), send, publish, timer registration, close and destroy offer no
// Yield, even in a SpotWide turn.
use zlink::runtime::*;

fn main() {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let spot = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let other = spot
        .spawn_actor(|_c: SpotWideCtx, m: u32| Handled::ok(m))
        .unwrap();
    let s = spot.clone();
    let _a = spot.spawn_actor(move |ctx: SpotWideCtx, _m: ()| {
        let _ = ctx.send(&other, 1).yielding();
        let _ = ctx.publish(&[other.clone()], 1).yielding();
        let _ = ctx.add_timer(&s, |_c| Handled::ok(())).yielding();
        let _ = ctx.close(&s).yielding();
        let _ = ctx.destroy(&other).yielding();
        let _ = ctx.defer(Join::new(&other, || async { Ok(()) })).yielding();
        Handled::ok(())
    });
}
