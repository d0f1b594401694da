//! The metrics endpoint: its HTTP server (`GET /metrics` only) and the connection slots that
//! bound what a stranger on that port can make the node hold.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Weak;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use prometheus_client::registry::Registry;

use super::*;
use crate::node::Inner;
use crate::sync::atomic::{AtomicU64, Ordering};

/// Connections the metrics server holds at once; a connection beyond them is closed at once.
pub const MAX_CONNECTIONS: usize = 64;

/// Connections one source host (IP address) may hold at once: one host cannot take all of
/// [`MAX_CONNECTIONS`]; a connection beyond it is closed at once.
pub const MAX_CONNECTIONS_PER_HOST: usize = 8;

/// How long a metrics client has to send its request head.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// The metrics endpoint's connection slots: in all and per source host, and the connections
/// refused for want of one (`metrics_refused`: `too_many`, `too_many_from_host`).
#[derive(Debug, Default)]
pub(crate) struct EndpointSlots {
    hosts: crate::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
    open: crate::sync::atomic::AtomicUsize,
    refused_total: AtomicU64,
    refused_host: AtomicU64,
}

/// Why the metrics endpoint closed a connection at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotRefusal {
    /// [`MAX_CONNECTIONS`] are open.
    TooMany,
    /// [`MAX_CONNECTIONS_PER_HOST`] are open from that host.
    TooManyFromHost,
}

/// One open connection's slot: given back when dropped.
pub(crate) struct Slot {
    slots: std::sync::Arc<EndpointSlots>,
    host: std::net::IpAddr,
}

impl EndpointSlots {
    fn hosts(
        &self,
    ) -> crate::sync::MutexGuard<'_, std::collections::HashMap<std::net::IpAddr, usize>> {
        self.hosts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a connection from `host`, or why not (counted).
    pub(crate) fn take(
        self: &std::sync::Arc<Self>,
        host: std::net::IpAddr,
    ) -> Result<Slot, SlotRefusal> {
        let mut hosts = self.hosts();
        let refusal = if self.open.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
            Some((SlotRefusal::TooMany, &self.refused_total))
        } else if hosts.get(&host).copied().unwrap_or(0) >= MAX_CONNECTIONS_PER_HOST {
            Some((SlotRefusal::TooManyFromHost, &self.refused_host))
        } else {
            None
        };
        if let Some((why, counter)) = refusal {
            counter.fetch_add(1, Ordering::Relaxed);
            return Err(why);
        }
        *hosts.entry(host).or_default() += 1;
        self.open.fetch_add(1, Ordering::Relaxed);
        Ok(Slot {
            slots: self.clone(),
            host,
        })
    }

    /// Connections refused, by reason (`too_many`, `too_many_from_host`).
    pub(crate) fn refused(&self) -> BTreeMap<String, u64> {
        [
            ("too_many", self.refused_total.load(Ordering::Relaxed)),
            (
                "too_many_from_host",
                self.refused_host.load(Ordering::Relaxed),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut hosts = self.slots.hosts();
        if let Some(n) = hosts.get_mut(&self.host) {
            *n -= 1;
            if *n == 0 {
                hosts.remove(&self.host);
            }
        }
        self.slots.open.fetch_sub(1, Ordering::Relaxed);
    }
}

type Body = Full<Bytes>;

fn respond(
    registry: &Registry,
    req: &hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Body> {
    let status = |code: u16, text: &'static str| {
        let mut r = hyper::Response::new(Full::new(Bytes::from_static(text.as_bytes())));
        *r.status_mut() = hyper::StatusCode::from_u16(code).unwrap_or_default();
        r
    };
    if req.uri().path() != "/metrics" {
        return status(404, "not found: the metrics are at /metrics\n");
    }
    if req.method() != hyper::Method::GET && req.method() != hyper::Method::HEAD {
        return status(405, "method not allowed\n");
    }
    let mut text = String::new();
    if prometheus_client::encoding::prometheus_text::encode(&mut text, registry).is_err() {
        return status(500, "encoding failed\n");
    }
    let mut r = hyper::Response::new(Full::new(Bytes::from(text)));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

/// Serves `GET /metrics` on `listener` until the task is aborted (node shutdown).
pub(in crate::node) async fn serve(
    listener: tokio::net::TcpListener,
    node: Weak<Inner>,
    slots: std::sync::Arc<EndpointSlots>,
) {
    let registry = std::sync::Arc::new(registry(node));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors and the like: back off instead of spinning.
                tracing::debug!(error = %e, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let permit = match slots.take(peer.ip()) {
            Ok(slot) => slot,
            Err(why) => {
                tracing::debug!(%peer, ?why, "metrics connection refused");
                continue;
            }
        };
        let registry = registry.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let out = respond(&registry, &req);
                async move { Ok::<_, Infallible>(out) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "metrics connection ended");
            }
            drop(permit);
        });
    }
}
