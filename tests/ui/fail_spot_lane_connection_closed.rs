// SB-11.2: a Spot lane has no connection-closed.
use zlink::runtime::*;

fn main() {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let spot = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    spot.lane().connection_closed();
}
