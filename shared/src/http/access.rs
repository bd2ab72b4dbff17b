//! Who may call a route, and the local server's check of it.
//!
//! In AWS, API Gateway checks the caller's IAM identity against two invoke policies
//! (template.yaml, docs/DEPLOY.md): the order service's and the operators'. `flashgate serve`
//! has no IAM: given the two roles' tokens (`ORDER_SERVICE_TOKEN`, `OPERATOR_TOKEN`) it wants
//! `Authorization: Bearer <token>` of a role the route allows, read from the same route table
//! ([`super::ROUTES`]). Without tokens it checks nothing, and `server` refuses to listen beyond
//! loopback unless told to (`ALLOW_UNAUTHENTICATED`).

use std::fmt;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use secrecy::{ExposeSecret, SecretString};

use super::error::ApiError;
use super::{route_index, ROUTES};

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone: the liveness probe.
    Open,
    OrderService,
    Operators,
    /// Either role: reads both need (a voucher, one reservation).
    Both,
}

/// A caller, as its token says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    OrderService,
    Operator,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::OrderService => "order service",
            Role::Operator => "operator",
        })
    }
}

impl Access {
    pub fn allows(self, role: Role) -> bool {
        match self {
            Access::Open | Access::Both => true,
            Access::OrderService => role == Role::OrderService,
            Access::Operators => role == Role::Operator,
        }
    }
}

/// The two roles' bearer tokens.
#[derive(Clone)]
pub struct Tokens {
    order_service: SecretString,
    operator: SecretString,
}

impl Tokens {
    pub fn new(order_service: SecretString, operator: SecretString) -> Tokens {
        Tokens {
            order_service,
            operator,
        }
    }

    /// The role whose token this is. Both are compared whole, each in a time that does not
    /// depend on where it differs.
    fn role(&self, token: &str) -> Option<Role> {
        let order_service = same(token, self.order_service.expose_secret());
        let operator = same(token, self.operator.expose_secret());
        match (order_service, operator) {
            (true, _) => Some(Role::OrderService),
            (_, true) => Some(Role::Operator),
            _ => None,
        }
    }
}

fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

/// The access of the route a request matched, for every method that reaches its path.
///
/// axum answers HEAD with the GET handler, so HEAD is checked as GET: a HEAD that skipped the
/// check would run the handler (an operator listing, an existence oracle for codes). A method
/// no route of the path declares (OPTIONS, a 405) is checked as the path's routes are: open
/// only when they all are. A request whose path matched nothing (404) has nothing behind it.
fn access_of(method: &Method, path: Option<&MatchedPath>) -> Access {
    let Some(path) = path else {
        return Access::Open;
    };
    let method = if method == Method::HEAD {
        &Method::GET
    } else {
        method
    };
    if let Some(i) = route_index(method, Some(path)) {
        return ROUTES[i].access;
    }
    let mut routes = ROUTES.iter().filter(|r| r.path == path.as_str());
    if routes.all(|r| r.access == Access::Open) {
        Access::Open
    } else {
        Access::Both
    }
}

/// The token of `Authorization: Bearer <token>` (the scheme in any case).
fn bearer(req: &Request) -> Option<&str> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The middleware (`Router::layer`, so that the matched route is known): 401 without a token
/// of either role, 403 with a token of a role the route does not allow.
pub async fn require(State(tokens): State<Tokens>, req: Request, next: Next) -> Response {
    let access = access_of(req.method(), req.extensions().get::<MatchedPath>());
    if access == Access::Open {
        return next.run(req).await;
    }
    match bearer(&req).and_then(|t| tokens.role(t)) {
        None => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            "this route wants `Authorization: Bearer <token>`",
        )
        .into_response(),
        Some(role) if !access.allows(role) => ApiError::new(
            StatusCode::FORBIDDEN,
            "FORBIDDEN",
            format!("the {role} token may not call this route"),
        )
        .into_response(),
        Some(_) => next.run(req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_its_role_only_when_whole() {
        let tokens = Tokens::new("order-secret".into(), "ops-secret".into());
        assert_eq!(tokens.role("order-secret"), Some(Role::OrderService));
        assert_eq!(tokens.role("ops-secret"), Some(Role::Operator));
        for wrong in ["", "order-secre", "order-secret ", "ops-secreT", "x"] {
            assert_eq!(tokens.role(wrong), None, "{wrong:?}");
        }
    }

    #[test]
    fn every_route_but_the_liveness_probe_and_the_console_page_wants_a_role() {
        // The console page is static: the data it shows comes from routes that want a role.
        for route in ROUTES {
            let open = route.access == Access::Open;
            assert_eq!(
                open,
                route.path == "/health/live" || route.path == "/console",
                "{} {}",
                route.method,
                route.path
            );
        }
    }

    #[test]
    fn each_role_calls_what_its_invoke_policy_allows() {
        assert!(Access::OrderService.allows(Role::OrderService));
        assert!(!Access::OrderService.allows(Role::Operator));
        assert!(Access::Operators.allows(Role::Operator));
        assert!(!Access::Operators.allows(Role::OrderService));
        assert!(Access::Both.allows(Role::OrderService) && Access::Both.allows(Role::Operator));
    }
}
