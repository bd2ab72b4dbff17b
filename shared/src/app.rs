//! The process's clients, built once from `Settings` (at a Lambda cold start, or when the local
//! server starts) and borrowed by every request: the Postgres pool, the Redis gate, the queue
//! in mode B, and the services built on them. Cloning an `App` is cheap (every part is shared).

use std::sync::Arc;
use std::time::Duration;

use crate::config::Settings;
use crate::consumer::Consumer;
use crate::events::kafka::Kafka;
use crate::events::sqs::Sqs;
use crate::events::{EventError, Transport};
use crate::gate::{Gate, GateError};
use crate::reservations::{self, Reservations};
use crate::store::Store;
use crate::store::StoreError;
use crate::sweeper::Sweeper;

/// Every client and service of the process, built once. A clone is one reference count: axum
/// clones its state for every request, and cloning each part (the pool, the gate, the services
/// and their own handles) cost a dozen atomic counts up and down per request, 6% of a sold-out
/// request's CPU.
#[derive(Clone)]
pub struct App(Arc<Parts>);

struct Parts {
    store: Store,
    gate: Arc<Gate>,
    events: Option<Arc<dyn Transport>>,
    /// Mode B on Kafka: the same transport as `events`, for what only Kafka does.
    kafka: Option<Arc<Kafka>>,
    /// Mode B on SQS: the same transport as `events`, for what only SQS does.
    sqs: Option<Arc<Sqs>>,
    reservations: Reservations,
    sweeper: Sweeper,
    consumer: Consumer,
}

/// Why the clients could not be built (a bad setting: nothing has connected yet).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("postgres client")]
    Store(#[from] StoreError),
    #[error("redis client")]
    Gate(#[from] GateError),
    #[error("event transport")]
    Events(#[from] EventError),
}

/// The state of the dependencies (`GET /health`).
#[derive(Debug, Clone, Copy)]
pub struct Health {
    pub postgres: bool,
    pub redis: bool,
}

impl App {
    /// Builds every client; none connects until its first call.
    pub fn new(settings: &Settings) -> Result<App, StartError> {
        let store = Store::connect(&settings.database)?;
        let gate = Arc::new(Gate::new(&settings.redis)?);
        // Kafka when `KAFKA_BROKERS` (or `KAFKA_CLUSTER_ARN`) is set, SQS when
        // `EVENTS_QUEUE_URL` is, none (mode A) otherwise.
        let events_settings = &settings.events;
        let kafka = match &events_settings.kafka {
            Some(k) => Some(Arc::new(Kafka::new(k.clone(), events_settings.timeout)?)),
            None => None,
        };
        let sqs = match (&kafka, &events_settings.queue_url) {
            (None, Some(url)) => Some(Arc::new(
                Sqs::new(
                    url,
                    events_settings.sqs_endpoint_url.clone(),
                    settings.aws.region.clone(),
                    events_settings.timeout,
                )
                .with_dead_letters(events_settings.dlq_url.clone()),
            )),
            _ => None,
        };
        let events: Option<Arc<dyn Transport>> = match (&kafka, &sqs) {
            (Some(kafka), _) => Some(kafka.clone()),
            (None, Some(sqs)) => Some(sqs.clone()),
            (None, None) => None,
        };
        let reservations = Reservations::new(
            reservations::Parts {
                store: store.clone(),
                gate: gate.clone(),
                events: events.clone(),
            },
            &settings.reservations,
            settings.sweep.retire_after,
        );
        let sweeper = Sweeper::new(
            store.clone(),
            gate.clone(),
            reservations.warmup().clone(),
            &settings.sweep,
        );
        let consumer = Consumer::new(store.clone(), gate.clone());
        Ok(App(Arc::new(Parts {
            store,
            gate,
            events,
            kafka,
            sqs,
            reservations,
            sweeper,
            consumer,
        })))
    }

    /// What every route calls.
    pub fn reservations(&self) -> &Reservations {
        &self.0.reservations
    }

    pub fn sweeper(&self) -> &Sweeper {
        &self.0.sweeper
    }

    pub fn consumer(&self) -> &Consumer {
        &self.0.consumer
    }

    /// Mode B's Kafka transport (None: SQS, or mode A).
    pub fn kafka(&self) -> Option<&Arc<Kafka>> {
        self.0.kafka.as_ref()
    }

    /// Mode B's SQS transport (None: Kafka, or mode A).
    pub fn sqs(&self) -> Option<&Arc<Sqs>> {
        self.0.sqs.as_ref()
    }

    /// What carries mode B's events (None: mode A).
    pub fn events(&self) -> Option<&Arc<dyn Transport>> {
        self.0.events.as_ref()
    }

    /// The gate itself, for operators' tools and tests that inject faults; routes go through
    /// [`App::reservations`].
    pub fn gate(&self) -> &Gate {
        &self.0.gate
    }

    /// The store itself, for operators' tools and tests; routes go through
    /// [`App::reservations`].
    pub fn store(&self) -> &Store {
        &self.0.store
    }

    /// Creates the database if missing and applies migrations: what `serve` does before it
    /// listens, and what `migrate` does alone. Answers the migrations it applied.
    pub async fn prepare_database(&self) -> Result<Vec<String>, StoreError> {
        self.0.store.ensure_database().await?;
        self.0.store.migrate().await
    }

    /// Creates mode B's queue or topics if missing (see [`Transport::prepare`]): what `serve`
    /// and `migrate` do besides the database.
    pub async fn prepare_events(&self) -> Result<(), EventError> {
        match &self.0.events {
            Some(events) => events.prepare().await,
            None => Ok(()),
        }
    }

    /// Opens mode B's sending side ahead of the first reserve (see [`Transport::connect`]);
    /// a failure is logged, and the first send tries again.
    pub async fn connect_events(&self) {
        if let Some(events) = &self.0.events {
            if let Err(e) = events.connect().await {
                tracing::warn!(error = %crate::telemetry::Chain(&e), "event transport not connected yet");
            }
        }
    }

    /// Postgres and Redis each answer within `limit`.
    pub async fn health(&self, limit: Duration) -> Health {
        let postgres = tokio::time::timeout(limit, self.0.store.ping()).await;
        Health {
            postgres: matches!(postgres, Ok(Ok(()))),
            redis: self.0.gate.ping().await,
        }
    }
}
