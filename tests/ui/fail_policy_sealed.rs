// SB-11.2: capabilities are sealed; nobody can give a session lane a relocation seal.
use zlink::runtime::*;

struct MyLane;
impl LanePolicy for MyLane {
    const NAME: &'static str = "mine";
}
impl RelocationSeal for SessionLane {}

fn main() {}
