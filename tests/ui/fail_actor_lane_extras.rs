// SB-11.2: an actor-delivery lane has no policy extras at all.
use zlink::runtime::*;

fn main() {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let lane: SerialLane<ActorDeliveryLane> = rt.handler_lane().unwrap();
    lane.seal();
    lane.return_pending();
    lane.connection_closed();
}
