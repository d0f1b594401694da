// SB-11.2: a session lane has no relocation seal and no return-pending.
use zlink::runtime::*;

fn main() {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let session: SerialLane<SessionLane> = rt.session_lane().unwrap();
    session.seal();
    session.return_pending();
}
