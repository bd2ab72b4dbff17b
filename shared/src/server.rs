//! The local server: the whole router on a TCP listener, plus the background work that Lambda
//! gets from event sources and schedules (mode B's consumer, the sweep on an interval).
//!
//! Shutdown is passed in (as in mini-redis) so that `main` wires it to Ctrl-C and tests to a
//! oneshot channel; in-flight requests finish before `serve` returns, and the background tasks
//! stop with it.
//!
//! The accept loop is axum::serve's, plus what a server exposed to clients it does not control
//! needs (`config::ServerSettings`): a connection that sends no whole request head within
//! `header_read_timeout` (a slow client, or an idle keep-alive connection) is closed; a body
//! must arrive within `request_timeout` (408); at most `max_connections` are served at once;
//! with tokens, each route wants a bearer token of a role it allows (`http::access`), and
//! without them the server listens only on loopback unless told otherwise ([`exposure`]). In
//! AWS, API Gateway does this job in front of the functions.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::middleware;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tower::ServiceExt as _;

use crate::app::App;
use crate::config::ServerSettings;
use crate::http::access::{self, Tokens};
use crate::http::{router, BodyDeadline, Routes};
use crate::sweeper::Sweeper;
use crate::telemetry::Chain;

/// Binds `host:port` (port 0 = any free port) and returns the listener and its address.
pub async fn bind(host: &str, port: u16) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind((host, port)).await?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

/// Whether the server may listen on `addr`: beyond loopback only with tokens, or when told to
/// (`ALLOW_UNAUTHENTICATED`); the error says what to do.
pub fn exposure(addr: &SocketAddr, limits: &ServerSettings) -> Result<(), String> {
    if addr.ip().is_loopback() || limits.tokens.is_some() || limits.allow_unauthenticated {
        return Ok(());
    }
    Err(format!(
        "{addr} is reachable beyond this machine and every route would be open to whoever \
         reaches it: set ORDER_SERVICE_TOKEN and OPERATOR_TOKEN, listen on 127.0.0.1, or set \
         ALLOW_UNAUTHENTICATED=true if something in front authenticates"
    ))
}

/// The background work of the local server.
#[derive(Debug, Clone, Copy)]
pub struct Background {
    /// Period of the sweep; zero: no sweep.
    pub sweep_interval: Duration,
    /// Consume mode B's events (queue or topic) in this process.
    pub poll_events: bool,
}

impl Background {
    pub fn from_settings(s: &crate::Settings) -> Self {
        Background {
            sweep_interval: s.sweep.interval,
            poll_events: s.events.poll,
        }
    }

    /// Only the HTTP API.
    pub const NONE: Background = Background {
        sweep_interval: Duration::ZERO,
        poll_events: false,
    };
}

/// Serves the API until `shutdown`, with the `background` work beside it, within `limits`.
pub async fn serve(
    listener: TcpListener,
    app: App,
    background: Background,
    limits: ServerSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut tasks = Vec::new();
    if !background.sweep_interval.is_zero() {
        tasks.push(tokio::spawn(sweep_every(
            app.sweeper().clone(),
            background.sweep_interval,
        )));
    }
    if let (true, Some(events)) = (background.poll_events, app.events()) {
        let sink = std::sync::Arc::new(app.consumer().clone());
        tasks.push(tokio::spawn(events.clone().consume(sink)));
    }
    // The reserve path's producer opens beside the listener, not in front of it.
    let connecting = app.clone();
    tasks.push(tokio::spawn(
        async move { connecting.connect_events().await },
    ));
    let mut routes = router(app, Routes::All);
    if let Some((order_service, operators)) = limits.tokens.clone() {
        let tokens = Tokens::new(order_service, operators);
        routes = routes.layer(middleware::from_fn_with_state(tokens, access::require));
    }
    accept(listener, routes, &limits, shutdown).await;
    for task in tasks {
        task.abort();
    }
    Ok(())
}

/// Accepts connections until `shutdown`, each served on its own task; then stops accepting,
/// lets every connection finish the request it is on, and returns when all have closed.
async fn accept(
    listener: TcpListener,
    routes: Router,
    limits: &ServerSettings,
    shutdown: impl Future<Output = ()>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    // `stop` tells connections to finish; each holds a `running` receiver until it has closed.
    let (stop, stopped) = watch::channel(());
    let (running, all_closed) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        // A slot first: past the limit, connections wait in the kernel's backlog, unaccepted.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: as axum::serve, wait rather than
                    // spin; a connection reset before it was accepted is nothing.
                    if !is_connection_error(&e) {
                        tracing::error!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let deadline = limits.request_timeout;
        let service = TowerToHyperService::new(routes.clone().map_request(
            move |req: hyper::Request<Incoming>| {
                // Here rather than in a middleware layer: one less boxed future per request.
                let mut req = req.map(Body::new);
                req.extensions_mut()
                    .insert(BodyDeadline(tokio::time::Instant::now() + deadline));
                req
            },
        ));
        let connection = http.serve_connection(TokioIo::new(stream), service);
        let (mut stop, closed) = (stopped.clone(), all_closed.clone());
        tokio::spawn(async move {
            let mut connection = pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = stop.changed() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
            drop((slot, closed));
        });
    }
    drop(listener);
    drop(stop);
    drop(all_closed);
    running.closed().await;
}

fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

async fn sweep_every(sweeper: Sweeper, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = sweeper.sweep().await {
            tracing::error!(error = %Chain(&e), "sweep failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beyond_loopback_only_with_tokens_or_when_told() {
        let settings = |vars: &[(&str, &str)]| {
            let vars: std::collections::HashMap<_, _> = vars.iter().copied().collect();
            crate::Settings::from_lookup(|k| vars.get(k).map(|v| v.to_string()))
                .unwrap()
                .server
        };
        let (local, open): (SocketAddr, SocketAddr) = (
            "127.0.0.1:3000".parse().unwrap(),
            "0.0.0.0:3000".parse().unwrap(),
        );
        let plain = settings(&[]);
        assert!(exposure(&local, &plain).is_ok());
        assert!(exposure(&"[::1]:3000".parse().unwrap(), &plain).is_ok());
        assert!(exposure(&open, &plain)
            .unwrap_err()
            .contains("OPERATOR_TOKEN"));
        let tokens = settings(&[("ORDER_SERVICE_TOKEN", "a"), ("OPERATOR_TOKEN", "b")]);
        assert!(exposure(&open, &tokens).is_ok());
        let told = settings(&[("ALLOW_UNAUTHENTICATED", "true")]);
        assert!(exposure(&open, &told).is_ok());
    }
}
