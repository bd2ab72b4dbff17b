//! `flashgate serve` as its own process, for what only a whole process shows: its metrics.
//!
//! The test servers of [`super::TestApp`] share this test binary's process, and a process has
//! one metrics recorder: counts would mix across the tests running at once. This one is the
//! real binary, on port 0, on a database and Redis key prefix of its own, with whatever
//! environment the test adds; it is killed when dropped, and its database and keys go with it.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::{postgres_base, redis_url, unique_name, Cleanup};

pub struct ServerProcess {
    pub url: String,
    _child: Child,
    _cleanup: Cleanup,
}

impl ServerProcess {
    /// Starts the server with `env` on top of its defaults, and waits for its `listening` line.
    pub async fn start(env: &[(&str, &str)]) -> ServerProcess {
        let db = unique_name("fg_test_proc");
        let prefix = format!("{}:", unique_name("fgproc"));
        let cleanup = Cleanup::database(&db).and_redis_keys(&[redis_url()], &prefix);
        let mut command = Command::new(env!("CARGO_BIN_EXE_flashgate"));
        command
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("DATABASE_URL", format!("{}/{db}", postgres_base()))
            .env("REDIS_URL", redis_url())
            .env("REDIS_KEY_PREFIX", &prefix)
            .env("PORT", "0")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("start flashgate serve");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                let Ok(log) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if log["message"] == "listening" {
                    return log["url"].as_str().unwrap().to_owned();
                }
            }
            panic!("flashgate serve stopped before listening");
        })
        .await
        .expect("flashgate serve listening within 60 s");
        // The request log goes on: read it, or the pipe fills and the server blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        ServerProcess {
            url,
            _child: child,
            _cleanup: cleanup,
        }
    }

    /// The server's `/metrics`, as text.
    pub async fn metrics(&self, client: &reqwest::Client) -> String {
        let response = client
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), reqwest::StatusCode::OK);
        response.text().await.unwrap()
    }
}

/// The value of the sample `name{labels}` in a Prometheus text exposition (labels in any
/// order; other labels of the sample must be absent); 0 when there is none, as a counter
/// that never moved is not rendered.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, found) = match series.split_once('{') {
                Some((metric, rest)) => (metric, parse_labels(rest.strip_suffix('}')?)),
                None => (series, Vec::new()),
            };
            let wanted = metric == name
                && found.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| found.iter().any(|(fk, fv)| fk == k && fv == v));
            wanted.then(|| value.parse().unwrap())
        })
        .unwrap_or(0.0)
}

/// `a="x",b="y \"z\""` -> [(a, x), (b, y "z")].
fn parse_labels(text: &str) -> Vec<(String, String)> {
    let mut labels = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            return labels;
        }
        assert_eq!(
            chars.next(),
            Some('"'),
            "label {key} without a quoted value"
        );
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => value.push(match chars.next() {
                    Some('n') => '\n',
                    Some(c) => c,
                    None => break,
                }),
                '"' => break,
                c => value.push(c),
            }
        }
        labels.push((key.trim_start_matches(',').to_owned(), value));
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
}
