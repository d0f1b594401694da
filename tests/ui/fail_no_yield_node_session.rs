// EG-16.3: Node, Channel and session handlers offer only the normal async terminal.
use zlink::runtime::*;

fn main() {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let node = rt.handler_lane().unwrap();
    let _ = node.submit(0, |ctx| {
        Handled::later(async move {
            let _ = ctx.request(|| async { Ok(()) }).yielding().await;
            Ok(())
        })
    });
    let session = rt.session_lane().unwrap();
    let _ = session.submit(0, |ctx| {
        Handled::later(async move {
            let _ = ctx.worker(|| 2).yielding().await;
            Ok(())
        })
    });
}
