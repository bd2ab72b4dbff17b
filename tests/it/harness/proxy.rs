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
    /// How many of the next answers to drop: the connection is closed as soon as the server
    /// answers, the answer unsent (the request ran, and the client sees a dropped connection).
    drop_replies: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl Proxy {
    pub async fn start(target: &str) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, watch) = tokio::sync::watch::channel(true);
        let (closings, closing) = tokio::sync::watch::channel(0u64);
        let (target_tx, targets) = tokio::sync::watch::channel(target.to_owned());
        let drop_replies = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let dropping = drop_replies.clone();
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
                let dropping = dropping.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    let (mut from_client, mut to_client) = inbound.split();
                    let (mut from_server, mut to_server) = outbound.into_split();
                    let requests = tokio::io::copy(&mut from_client, &mut to_server);
                    let replies = async {
                        use tokio::io::{AsyncReadExt, AsyncWriteExt};
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            let n = from_server.read(&mut buf).await?;
                            if n == 0 || take_one(&dropping) {
                                return Ok::<(), std::io::Error>(());
                            }
                            to_client.write_all(&buf[..n]).await?;
                        }
                    };
                    tokio::select! {
                        _ = requests => {}
                        _ = replies => {}
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
            drop_replies,
        }
    }

    /// The next `n` answers are never sent: each one's connection closes as soon as the server
    /// answers (a connection lost after the request ran).
    pub fn drop_replies(&self, n: u32) {
        self.drop_replies
            .store(n, std::sync::atomic::Ordering::SeqCst);
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

/// Takes one from `count` if it is above zero: true when it did.
fn take_one(count: &std::sync::atomic::AtomicU32) -> bool {
    use std::sync::atomic::Ordering;
    count
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}
