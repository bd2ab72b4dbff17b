//! The local server: the whole router on a TCP listener, stopped by a future.
//!
//! Shutdown is passed in (as in mini-redis) so that `main` wires it to Ctrl-C and tests to a
//! oneshot channel; in-flight requests finish before `serve` returns.

use std::future::Future;
use std::net::SocketAddr;

use tokio::net::TcpListener;

use crate::app::App;
use crate::http::{router, Routes};

/// Binds `127.0.0.1:port` (0 = any free port) and returns the listener and its address.
pub async fn bind(host: &str, port: u16) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind((host, port)).await?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

pub async fn serve(
    listener: TcpListener,
    app: App,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(app, Routes::All))
        .with_graceful_shutdown(shutdown)
        .await
}
