//! A minimal HTTP/1.1 server on tokio for `/metrics` (Prometheus text) and the read-only status
//! page (`/`). One request per connection (`Connection: close`), GET and HEAD only, request head
//! at most 8 KiB, read whole within [`HEAD_DEADLINE`]: nothing a scraper or a browser needs more
//! of. No peer can blind monitoring by holding connections: accepting never waits for room; a
//! connection from outside `[metrics] allow` is closed as it is accepted; one source address
//! holds at most [`MAX_PER_SOURCE`] connections and everyone together [`MAX_CONNECTIONS`], and a
//! connection beyond either is closed at once instead of waiting in the listen queue.

use crate::core::Event;
use crate::core::metrics::Registry;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

/// Largest request head accepted.
const MAX_HEAD: usize = 8 * 1024;
/// Time a peer has to send its whole request head (a scraper sends it at once).
const HEAD_DEADLINE: Duration = Duration::from_secs(1);
/// Time a peer has to take the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once.
const MAX_CONNECTIONS: usize = 64;
/// Connections served at once from one source address.
const MAX_PER_SOURCE: usize = 8;

/// What the HTTP server needs.
#[derive(Clone)]
pub(crate) struct HttpContext {
    pub(crate) events: mpsc::UnboundedSender<Event>,
    pub(crate) metrics: Arc<Registry>,
    pub(crate) db_path: PathBuf,
    pub(crate) config: crate::core::shared_config::SharedConfig,
}

/// The connections being served, per source address. Shared by the accept loop and the
/// connection tasks, which give their place back as they end ([`Place`]).
#[derive(Default)]
struct Places {
    by_source: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place among [`Places`], given back on drop.
struct Place {
    places: Arc<Places>,
    source: IpAddr,
}

impl Places {
    /// A place for a connection from `source`, unless that source or everyone is at the limit.
    fn take(self: &Arc<Places>, source: IpAddr) -> Option<Place> {
        let mut by_source = self.by_source.lock().unwrap_or_else(PoisonError::into_inner);
        let total: usize = by_source.values().sum();
        let mine = by_source.entry(source).or_default();
        if *mine >= MAX_PER_SOURCE || total >= MAX_CONNECTIONS {
            return None;
        }
        *mine += 1;
        Some(Place { places: self.clone(), source })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut by_source = self.places.by_source.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = by_source.get_mut(&self.source) {
            *count -= 1;
            if *count == 0 {
                by_source.remove(&self.source);
            }
        }
    }
}

/// Serves connections until the listener fails.
pub(crate) async fn serve(listener: TcpListener, context: HttpContext) {
    let places = Arc::new(Places::default());
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                if !context.config.get().metrics.allows(peer.ip()) {
                    context.metrics.http("refused", 403);
                    continue;
                }
                let Some(place) = places.take(peer.ip()) else {
                    context.metrics.http("refused", 503);
                    continue;
                };
                let context = context.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(HEAD_DEADLINE + IO_TIMEOUT * 2, handle(stream, peer, &context)).await;
                    drop(place);
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept on metrics port failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// A parsed request line and the headers we look at.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct RequestHead {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) query: String,
    pub(crate) bearer: Option<String>,
}

/// Parses a request head (everything before the blank line).
pub(crate) fn parse_head(head: &str) -> Option<RequestHead> {
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, target, version) = (first.next()?, first.next()?, first.next()?);
    if !version.starts_with("HTTP/1.") || first.next().is_some() {
        return None;
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let bearer = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("authorization"))
        .and_then(|(_, value)| value.trim().strip_prefix("Bearer ").map(|t| t.trim().to_owned()));
    Some(RequestHead { method: method.to_owned(), path: path.to_owned(), query: query.to_owned(), bearer })
}

/// The request head, read whole within [`HEAD_DEADLINE`] (a head sent a byte at a time gets no
/// more time than one sent at once).
async fn read_head(stream: &mut TcpStream) -> Option<String> {
    tokio::time::timeout(HEAD_DEADLINE, read_head_bytes(stream)).await.ok()?
}

async fn read_head_bytes(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return String::from_utf8(buf[..end].to_vec()).ok();
        }
        if buf.len() > MAX_HEAD {
            return None;
        }
    }
}

async fn handle(mut stream: TcpStream, peer: SocketAddr, context: &HttpContext) {
    let Some(head) = read_head(&mut stream).await else {
        respond(&mut stream, 400, "text/plain", b"bad request\n".to_vec(), false).await;
        return;
    };
    let Some(request) = parse_head(&head) else {
        respond(&mut stream, 400, "text/plain", b"bad request\n".to_vec(), false).await;
        return;
    };
    let head_only = request.method == "HEAD";
    if request.method != "GET" && !head_only {
        context.metrics.http("other", 405);
        respond(&mut stream, 405, "text/plain", b"only GET and HEAD\n".to_vec(), false).await;
        return;
    }
    let (label, status, kind, body) = match request.path.as_str() {
        "/metrics" => match snapshot(context).await {
            Some(snap) => (
                "/metrics",
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                crate::core::metrics::render(&context.metrics, &snap),
            ),
            None => ("/metrics", 503, "text/plain", "controller is shutting down\n".into()),
        },
        "/" if !allowed(context, peer, &request) => {
            ("/", 403, "text/plain", "the status page needs a token from this address\n".into())
        }
        "/" => match snapshot(context).await {
            Some(snap) => {
                let path = context.db_path.clone();
                let now = drover_shared::now();
                let hours = tokio::task::spawn_blocking(move || crate::serve::status_page::recent_hours(&path, now))
                    .await
                    .ok()
                    .unwrap_or_default();
                (
                    "/",
                    200,
                    "text/html; charset=utf-8",
                    crate::serve::status_page::render(&context.config.get().cluster_name, &snap, &hours, now),
                )
            }
            None => ("/", 503, "text/plain", "controller is shutting down\n".into()),
        },
        _ => ("other", 404, "text/plain", "not found\n".into()),
    };
    context.metrics.http(label, status);
    respond(&mut stream, status, kind, body.into_bytes(), head_only).await;
}

/// Localhost may see the status page; anyone else needs the configured token.
fn allowed(context: &HttpContext, peer: SocketAddr, request: &RequestHead) -> bool {
    if peer.ip().is_loopback() {
        return true;
    }
    let config = context.config.get();
    let Some(token) = &config.metrics.token else { return false };
    let from_query = request.query.split('&').filter_map(|kv| kv.strip_prefix("token=")).any(|t| t == token);
    from_query || request.bearer.as_deref() == Some(token.as_str())
}

async fn snapshot(context: &HttpContext) -> Option<crate::core::metrics::Snapshot> {
    let (tx, rx) = oneshot::channel();
    context.events.send(Event::Metrics { reply: tx }).ok()?;
    rx.await.ok()
}

async fn respond(stream: &mut TcpStream, status: u16, kind: &str, body: Vec<u8>, head_only: bool) {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Service Unavailable",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        if !head_only {
            stream.write_all(&body).await?;
        }
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(IO_TIMEOUT, write).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_parse() {
        let head = parse_head("GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer s3cret").unwrap();
        assert_eq!(head.method, "GET");
        assert_eq!(head.path, "/metrics");
        assert_eq!(head.query, "x=1");
        assert_eq!(head.bearer.as_deref(), Some("s3cret"));
        assert!(parse_head("GET /metrics").is_none());
        assert!(parse_head("GET / SPDY/3").is_none());
    }
}
