//! `loadtest`: Flashgate's load tools, in a package of their own so that the service and its
//! functions build without the tools' dependencies (histograms, progress bars, an HTTP client,
//! charts).
//!
//! - `bench` (`src/bin/bench.rs`): reserve on one hot voucher through the service's own code,
//!   without HTTP, strategy against strategy, and the article's naive check-then-act beside them;
//! - `flash-sale` (`src/bin/flash-sale.rs`): an open-model flash sale over HTTP against a running
//!   Flashgate (or, with `--compare`, servers of its own), checked to the last use, with a JSON
//!   summary and an HTML report.
//!
//! The flash-sale report puts the server's own view (its `/metrics`, [`server_view`]) beside the
//! client's. Both run from the repository root: `cargo run --release --bin bench` or `--bin flash-sale`.
//! This library holds what they share: a Flashgate's settings (or its process's variables) on a
//! scratch database and Redis key prefix of the run's own, and the cleanup that removes both
//! afterwards.

use shared::Settings;

/// A database and a Redis key space that belong to one run, named after the process so that two
/// runs on the same servers do not meet.
pub struct Scratch {
    postgres: String,
    redis: String,
    name: String,
}

impl Scratch {
    /// `postgres` is a server URL without a database; `tool` names the database
    /// (`fg_<tool>_<pid>`). Nothing is created until a Flashgate prepares the database.
    pub fn new(tool: &str, postgres: &str, redis: &str) -> Scratch {
        Scratch {
            postgres: postgres.trim_end_matches('/').to_owned(),
            redis: redis.to_owned(),
            name: format!("fg_{tool}_{}", std::process::id()),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn database_url(&self) -> String {
        format!("{}/{}", self.postgres, self.name)
    }

    /// A Redis key prefix inside this run's key space; `tag` tells apart several Flashgates of
    /// one run, which must not share a gate.
    pub fn key_prefix(&self, tag: &str) -> String {
        if tag.is_empty() {
            format!("{}:", self.name)
        } else {
            format!("{}:{tag}:", self.name)
        }
    }

    /// The variables of a Flashgate on the scratch database and Redis: `extra` added (or
    /// overriding) the run's own database, Redis and key prefix.
    pub fn env(&self, tag: &str, extra: &[(&str, String)]) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        for (k, v) in [
            ("DATABASE_URL", self.database_url()),
            ("REDIS_URL", self.redis.clone()),
            ("REDIS_KEY_PREFIX", self.key_prefix(tag)),
        ] {
            if !env.iter().any(|(name, _)| name == k) {
                env.push((k.to_owned(), v));
            }
        }
        env
    }

    /// Settings for an in-process Flashgate with [`Scratch::env`]'s variables; everything else
    /// at the service's defaults, whatever this process's environment says.
    pub fn settings(&self, tag: &str, extra: &[(&str, String)]) -> anyhow::Result<Settings> {
        let env = self.env(tag, extra);
        Ok(Settings::from_lookup(|k| {
            env.iter()
                .find(|(name, _)| name == k)
                .map(|(_, v)| v.clone())
        })?)
    }

    /// Drops the database (closing whatever connections are left on it) and deletes the run's
    /// Redis keys. Best effort: a run's result must not turn into a failure for want of cleanup.
    pub async fn remove(&self) {
        if let Ok(client) = redis::Client::open(self.redis.as_str()) {
            if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("{}:*", self.name))
                    .query_async(&mut c)
                    .await
                    .unwrap_or_default();
                if !keys.is_empty() {
                    let _ = redis::cmd("DEL").arg(keys).query_async::<i64>(&mut c).await;
                }
            }
        }
        let admin = format!("{}/postgres", self.postgres);
        if let Ok((client, conn)) = tokio_postgres::connect(&admin, tokio_postgres::NoTls).await {
            tokio::spawn(conn);
            let _ = client
                .batch_execute(&format!(
                    "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                    self.name
                ))
                .await;
        }
    }
}

/// What a Flashgate's own `/metrics` says of the reserves it answered: the server's view, which
/// the simulator's report puts beside the client's.
pub mod server_view {
    use std::collections::BTreeMap;

    /// The reserve route's name in the server's metrics.
    pub const RESERVE_ROUTE: &str = "POST /vouchers/{code}/reservations";

    /// The reserve route's counters at one scrape.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct Scrape {
        /// Answers by outcome.
        pub outcomes: BTreeMap<String, f64>,
        /// Latency histogram: (upper bound in seconds, cumulative count), `+Inf` as infinity.
        pub buckets: Vec<(f64, f64)>,
    }

    impl Scrape {
        /// The reserve route's samples of a Prometheus text exposition.
        pub fn parse(text: &str) -> Scrape {
            let mut scrape = Scrape::default();
            for line in text.lines().filter(|l| !l.starts_with('#')) {
                let Some((series, value)) = line.rsplit_once(' ') else {
                    continue;
                };
                let Ok(value) = value.parse::<f64>() else {
                    continue;
                };
                let Some((name, labels)) = series.split_once('{') else {
                    continue;
                };
                let labels = labels.trim_end_matches('}');
                let label = |key: &str| {
                    let start = labels.find(&format!("{key}=\""))? + key.len() + 2;
                    let end = labels[start..].find('"')? + start;
                    Some(labels[start..end].to_owned())
                };
                if label("route").as_deref() != Some(RESERVE_ROUTE) {
                    continue;
                }
                match name {
                    "flashgate_requests_total" => {
                        if let Some(outcome) = label("outcome") {
                            *scrape.outcomes.entry(outcome).or_default() += value;
                        }
                    }
                    "flashgate_request_duration_seconds_bucket" => {
                        let le = match label("le").as_deref() {
                            Some("+Inf") => f64::INFINITY,
                            Some(le) => le.parse().unwrap_or(f64::INFINITY),
                            None => continue,
                        };
                        scrape.buckets.push((le, value));
                    }
                    _ => {}
                }
            }
            scrape.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            scrape
        }

        /// What happened between `before` and this scrape.
        pub fn since(&self, before: &Scrape) -> Scrape {
            let outcomes = self
                .outcomes
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v - before.outcomes.get(k).copied().unwrap_or(0.0),
                    )
                })
                .filter(|(_, v)| *v > 0.0)
                .collect();
            let buckets = self
                .buckets
                .iter()
                .map(|(le, v)| {
                    let was = before
                        .buckets
                        .iter()
                        .find(|(b, _)| b == le)
                        .map_or(0.0, |b| b.1);
                    (*le, v - was)
                })
                .collect();
            Scrape { outcomes, buckets }
        }

        /// The smallest bucket bound under which a share `q` of the answers fell (seconds).
        pub fn quantile_bound(&self, q: f64) -> Option<f64> {
            let total = self.buckets.last()?.1;
            if total <= 0.0 {
                return None;
            }
            self.buckets
                .iter()
                .find(|(_, n)| *n >= total * q)
                .map(|(le, _)| *le)
        }
    }

    /// The server's `/metrics`, or None when it exports none (an in-process server, a
    /// function behind API Gateway).
    pub async fn scrape(http: &reqwest::Client, base: &str) -> Option<Scrape> {
        let response = http.get(format!("{base}/metrics")).send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        Some(Scrape::parse(&response.text().await.ok()?))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_run_is_the_difference_of_two_scrapes() {
            let before = Scrape::parse(
                "flashgate_requests_total{route=\"POST /vouchers/{code}/reservations\",outcome=\"RESERVED\"} 2\n\
                 flashgate_request_duration_seconds_bucket{route=\"POST /vouchers/{code}/reservations\",le=\"0.01\"} 2\n\
                 flashgate_request_duration_seconds_bucket{route=\"POST /vouchers/{code}/reservations\",le=\"+Inf\"} 2\n",
            );
            let after = Scrape::parse(
                "# TYPE flashgate_requests_total counter\n\
                 flashgate_requests_total{route=\"POST /vouchers/{code}/reservations\",outcome=\"RESERVED\"} 12\n\
                 flashgate_requests_total{route=\"POST /vouchers/{code}/reservations\",outcome=\"OUT_OF_STOCK\"} 90\n\
                 flashgate_requests_total{route=\"POST /vouchers\",outcome=\"CREATED\"} 1\n\
                 flashgate_request_duration_seconds_bucket{route=\"POST /vouchers/{code}/reservations\",le=\"0.01\"} 80\n\
                 flashgate_request_duration_seconds_bucket{route=\"POST /vouchers/{code}/reservations\",le=\"+Inf\"} 102\n",
            );
            let run = after.since(&before);
            assert_eq!(run.outcomes["RESERVED"], 10.0);
            assert_eq!(run.outcomes["OUT_OF_STOCK"], 90.0);
            assert_eq!(run.outcomes.len(), 2);
            assert_eq!(run.buckets, vec![(0.01, 78.0), (f64::INFINITY, 100.0)]);
            assert_eq!(run.quantile_bound(0.5), Some(0.01));
            assert_eq!(run.quantile_bound(0.99), Some(f64::INFINITY));
        }
    }
}
