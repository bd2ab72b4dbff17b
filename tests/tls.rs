//! Encryption in transit to Redis (ElastiCache runs with TLS required): a `rediss://` URL goes
//! through rustls and verifies the server against the trusted roots. A real redis-server with
//! TLS on, its certificate signed by a CA made for the test, trusted through `SSL_CERT_FILE`.
//!
//! Its own test binary, apart from `tests/it`: the test changes `SSL_CERT_FILE`, an environment
//! variable of the whole process, from which every rustls client built afterwards takes its
//! trusted roots. In a binary shared with other tests it would change what their clients trust
//! while they run; and setting a variable while other threads read the environment is a data
//! race.

// The harness of the `it` binary, included whole: this binary uses a few of its items, so the
// rest (and their re-exports) would be reported unused here, although `it` uses every one.
#[allow(dead_code, unused_imports)]
#[path = "it/harness/mod.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

use harness::{wait_for, TestApp};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A self-signed CA certificate and its key.
fn make_ca(dir: &Path, name: &str) {
    let (key, pem) = (format!("{name}.key"), format!("{name}.pem"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-keyout",
            &key,
            "-out",
            &pem,
            "-subj",
            &format!("/CN=flashgate test {name}"),
        ],
    );
}

/// A CA, a server certificate for localhost signed by it, and an unrelated CA.
fn certificates() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    make_ca(&dir, "ca");
    make_ca(&dir, "other-ca");
    openssl(
        &dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server.pem",
        ],
    );
    dir
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn start_tls_redis(dir: &Path, port: u16) -> Server {
    let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let child = Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--tls-port", &port.to_string(), "--tls-auth-clients", "no"])
        .args([
            "--tls-cert-file",
            &path("server.pem"),
            "--tls-key-file",
            &path("server.key"),
        ])
        .args(["--tls-ca-cert-file", &path("ca.pem")])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server starts");
    let server = Server(child);
    wait_for(
        &format!("redis-server with TLS to listen on {port}"),
        Duration::from_secs(5),
        async || {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        },
    )
    .await;
    server
}

/// What the service's `/health` says of Redis: "up" or "down".
async fn redis_health(app: &TestApp) -> String {
    let (_, health) = app.health().await;
    health["redis"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_flash_sale_runs_through_a_tls_redis() {
    let dir = certificates();
    let port = free_port();
    let _redis = start_tls_redis(&dir, port).await;

    // Clear text to a TLS port gets nowhere: health reports the gate down.
    let plain = format!("redis://localhost:{port}");
    let app = TestApp::builder()
        .configure(move |s| {
            s.redis.url = plain;
            s.redis.timeout = Duration::from_millis(500);
        })
        .spawn()
        .await;
    assert_eq!(redis_health(&app).await, "down");

    // Read by rustls-native-certs when a client is built. Trusting only an unrelated CA, the
    // server's certificate is refused: verification is on.
    std::env::set_var("SSL_CERT_FILE", dir.join("other-ca.pem"));
    let tls = format!("rediss://localhost:{port}");
    let app = TestApp::builder()
        .configure({
            let tls = tls.clone();
            move |s| {
                s.redis.url = tls;
                s.redis.timeout = Duration::from_millis(500);
            }
        })
        .spawn()
        .await;
    assert_eq!(redis_health(&app).await, "down");

    // Trusting the CA that signed it, the same URL works.
    std::env::set_var("SSL_CERT_FILE", dir.join("ca.pem"));
    let app = TestApp::builder()
        .configure(move |s| s.redis.url = tls)
        .spawn()
        .await;
    assert_eq!(redis_health(&app).await, "up");

    app.voucher("TLS-SALE", 1, json!({"flashSale": true})).await;
    let (status, body) = app.reserve("TLS-SALE", 1, "tls-1", 50_000).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = app.reserve("TLS-SALE", 2, "tls-2", 50_000).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(app.view("TLS-SALE").await["usedCount"], 1);
}
