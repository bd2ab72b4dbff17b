//! A TCP proxy a test puts in front of a dependency to cut it.

use std::net::SocketAddr;

/// A TCP proxy in front of a real server, which a test can cut and restore: the dependency
/// "goes down" (open connections are closed, new ones refused) for this test alone.
pub struct Proxy {
    pub addr: SocketAddr,
    up: tokio::sync::watch::Sender<bool>,
}

impl Proxy {
    pub async fn start(target: &str) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, watch) = tokio::sync::watch::channel(true);
        let target = target.to_owned();
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if !*watch.borrow() {
                    drop(inbound);
                    continue;
                }
                let (target, mut watch) = (target.clone(), watch.clone());
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = watch.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Proxy { addr, up }
    }

    pub fn set_up(&self, up: bool) {
        self.up.send_replace(up);
    }
}
