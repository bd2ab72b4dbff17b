//! `server`: the local server (`flashgate serve`).

use std::time::Duration;

use secrecy::SecretString;

/// The local server (`flashgate serve`). In AWS, API Gateway does this job, so the Lambda
/// functions read none of it.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// `PORT`: 0 asks the OS for a free one (the chosen address is logged).
    pub port: u16,
    /// `HEADER_READ_TIMEOUT_MS`: a connection that has not sent a whole request head this long
    /// after it opened, or after its last answer (an idle keep-alive connection), is closed.
    pub header_read_timeout: Duration,
    /// `REQUEST_TIMEOUT_MS`: most a request's body may take to arrive once its head has;
    /// past it, 408. (The work that follows is bounded by each dependency's own timeout.)
    pub request_timeout: Duration,
    /// `MAX_CONNECTIONS`: connections served at once; past it the server accepts no more until
    /// one closes (the kernel's backlog holds the rest).
    pub max_connections: usize,
    /// `ORDER_SERVICE_TOKEN` and `OPERATOR_TOKEN`, both or neither: with them, every route but
    /// the liveness probe wants `Authorization: Bearer <token>` of a role it allows
    /// (`http::access`).
    pub tokens: Option<(SecretString, SecretString)>,
    /// `ALLOW_UNAUTHENTICATED`: listen beyond loopback without tokens. Off, the server refuses
    /// to start there.
    pub allow_unauthenticated: bool,
}
