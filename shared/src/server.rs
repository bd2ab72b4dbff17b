//! The local server: the whole router on a TCP listener, plus the background work that Lambda
//! gets from event sources and schedules (mode B's consumer, the sweep on an interval).
//!
//! Shutdown is passed in (as in mini-redis) so that `main` wires it to Ctrl-C and tests to a
//! oneshot channel; in-flight requests finish before `serve` returns, and the background tasks
//! stop with it.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::app::App;
use crate::http::{router, Routes};
use crate::sweeper::Sweeper;
use crate::telemetry::Chain;

/// Binds `host:port` (port 0 = any free port) and returns the listener and its address.
pub async fn bind(host: &str, port: u16) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind((host, port)).await?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
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

/// Serves the API until `shutdown`, with the `background` work beside it.
pub async fn serve(
    listener: TcpListener,
    app: App,
    background: Background,
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
    let served = axum::serve(listener, router(app, Routes::All))
        .with_graceful_shutdown(shutdown)
        .await;
    for task in tasks {
        task.abort();
    }
    served
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
