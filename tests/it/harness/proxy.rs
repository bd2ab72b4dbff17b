//! A TCP proxy a test puts in front of a dependency to cut it.

use std::net::SocketAddr;

/// A TCP proxy in front of a real server, which a test can cut and restore: the dependency
/// "goes down" (open connections are closed, new ones refused) for this test alone. It can
/// also close the open connections and go on accepting new ones, as RDS Proxy and ElastiCache
/// close connections idle past their timeout while a Lambda environment is frozen.
pub struct Proxy {
    pub addr: SocketAddr,
    up: tokio::sync::watch::Sender<bool>,
    /// Where new connections go: moved as a failover moves a managed service's endpoint.
    target: tokio::sync::watch::Sender<String>,
    /// Bumped to close every connection open at that moment.
    closings: tokio::sync::watch::Sender<u64>,
}

impl Proxy {
    pub async fn start(target: &str) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, watch) = tokio::sync::watch::channel(true);
        let (closings, closing) = tokio::sync::watch::channel(0u64);
        let (target_tx, targets) = tokio::sync::watch::channel(target.to_owned());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if !*watch.borrow() {
                    drop(inbound);
                    continue;
                }
                let (target, mut watch) = (targets.borrow().clone(), watch.clone());
                let mut closing = closing.clone();
                closing.mark_unchanged();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = watch.wait_for(|up| !*up) => {}
                        _ = closing.changed() => {}
                    }
                });
            }
        });
        Proxy {
            addr,
            up,
            target: target_tx,
            closings,
        }
    }

    /// Sends new connections to `target` from now on (open ones stay where they are).
    pub fn retarget(&self, target: &str) {
        self.target.send_replace(target.to_owned());
    }

    pub fn set_up(&self, up: bool) {
        self.up.send_replace(up);
    }

    /// Closes every connection open now (both ends see the close); new ones are accepted.
    pub fn close_connections(&self) {
        self.closings.send_modify(|n| *n += 1);
    }
}
