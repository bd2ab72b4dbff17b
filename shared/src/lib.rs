//! Flashgate: voucher reservations that survive a flash sale and never hand out use
//! `total_limit + 1`. The design, in full: docs/ARCHITECTURE.md.
//!
//! # Layout
//!
//! Dependencies point one way, down this list's layers (a module may import only from layers
//! before its own; `layering` below checks it, and that no loop forms):
//!
//! 1. `domain`, `config`, `telemetry`, `tls`: nothing of the service;
//! 2. `aws` (SDK configuration and the configuration's AWS look-ups);
//! 3. `store` (Postgres), `gate` (Redis), `events` (the transports): three siblings, none
//!    importing another; each raises its own error and answers outcomes in domain words;
//! 4. `reservations`, whose `error` holds one error per operation, wrapping theirs;
//! 5. `sweeper`, `consumer`; 6. `app`; 7. `http`; 8. `server`, `lambda`.
//!
//! - [`domain`]: validated identifiers, the status lattice (`RESERVED < CONFIRMED < RELEASED`),
//!   the reserve outcome vocabulary and the JSON views. Pure, no I/O.
//! - [`config`]: settings from the environment, secrets wrapped; [`telemetry`]: JSON logs,
//!   error chains, the one metrics emitter.
//! - [`store`]: Postgres, the source of truth. The pool, migrations and every SQL statement;
//!   status changes all go through `Store::merge_batch` (the set-based `fg_merge_strict`, and
//!   when it declines a batch the loop of `fg_merge` calls, `fg_merge_batch`).
//! - [`gate`]: the Redis gate of flash-sale vouchers and campaigns (Lua scripts in `lua/`, keys
//!   built only in `gate::keys`: a voucher's own, or a campaign's shared by its codes; the rules
//!   as the scripts read them in `gate::GateMeta`).
//! - [`events`]: mode B's `voucher-reserved` events, on SQS or Kafka, and the `Sink` that
//!   receives them.
//! - [`reservations`]: the service every route calls (create and read vouchers, reserve,
//!   confirm, release, warm-up); its `flash` path runs the gate, its `warmup` loads it, its
//!   `error` holds one error enum per operation.
//! - [`sweeper`]: the scheduled sweep (expiry, orphans, reconciliation, warm-up);
//!   [`consumer`]: mode B's consumer and the local queue poller.
//! - [`app`]: the clients built once per process, holding the services.
//! - [`http`]: the axum router, built from one route table; `http::error` is the single mapping
//!   from errors to HTTP.
//! - [`server`]: the local server (`flashgate serve`); [`lambda`]: what every Lambda binary
//!   calls; [`tls`], [`aws`]: client configuration.

pub mod app;
pub mod aws;
pub mod config;
pub mod consumer;
pub mod domain;
pub mod events;
pub mod gate;
pub mod http;
pub mod lambda;
pub mod reservations;
pub mod server;
pub mod store;
pub mod sweeper;
pub mod telemetry;
pub mod tls;

pub use app::App;
pub use config::Settings;

/// The layering of the list at the top, read from the source: every `crate::` path of a module
/// names a module of a lower layer, so no import runs back up and no loop forms.
#[cfg(test)]
mod layering {
    const LAYERS: &[&[&str]] = &[
        &["domain", "config", "telemetry", "tls"],
        &["aws"],
        &["store", "gate", "events"],
        &["reservations"],
        &["sweeper", "consumer"],
        &["app"],
        &["http"],
        &["server", "lambda"],
    ];

    fn layer(module: &str) -> Option<usize> {
        LAYERS.iter().position(|l| l.contains(&module))
    }

    /// The modules a file's code (not its comments) names with `crate::`.
    fn imports(text: &str) -> Vec<String> {
        let mut found = Vec::new();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            let mut rest = code;
            while let Some(i) = rest.find("crate::") {
                rest = &rest[i + "crate::".len()..];
                if let Some(group) = rest.strip_prefix('{') {
                    let group = group.split('}').next().unwrap_or("");
                    for part in group.split(',') {
                        let name = part.trim().split("::").next().unwrap_or("").trim();
                        found.push(name.to_owned());
                    }
                } else {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    found.push(name);
                }
            }
        }
        found
    }

    fn sources(path: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        if path.is_dir() {
            for entry in std::fs::read_dir(path).unwrap() {
                sources(&entry.unwrap().path(), out);
            }
        } else if path.is_file() && path.extension().is_some_and(|e| e == "rs") {
            out.push(path.to_owned());
        }
    }

    #[test]
    fn every_import_points_down_the_layers() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut wrong = Vec::new();
        for module in LAYERS.iter().flat_map(|l| l.iter()) {
            let mut files = Vec::new();
            sources(&src.join(module), &mut files);
            sources(&src.join(format!("{module}.rs")), &mut files);
            assert!(!files.is_empty(), "no source for {module}");
            let own = layer(module).unwrap();
            for file in files {
                let text = std::fs::read_to_string(&file).unwrap();
                for name in imports(&text) {
                    match layer(&name) {
                        Some(l) if name != *module && l >= own => {
                            wrong.push(format!("{}: crate::{name}", file.display()))
                        }
                        _ => {}
                    }
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "imports up or across the layers: {wrong:#?}"
        );
    }

    /// A room of one concern stays small enough to read: no source file (its tests included)
    /// is over 450 lines. Past it, split the file along its seams.
    #[test]
    fn no_source_file_is_over_450_lines() {
        let mut files = Vec::new();
        sources(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        let long: Vec<String> = files
            .iter()
            .filter_map(|file| {
                let lines = std::fs::read_to_string(file).unwrap().lines().count();
                (lines > 450).then(|| format!("{}: {lines}", file.display()))
            })
            .collect();
        assert!(long.is_empty(), "files over 450 lines: {long:#?}");
    }
}
