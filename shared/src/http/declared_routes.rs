//! The routes are declared once, in [`ROUTES`] (what the router serves, and each route's
//! operation in the OpenAPI document, which `openapi` generates from it). Deployment needs them
//! in two more places that are not Rust: the `cargo lambda watch` router in the root Cargo.toml
//! and template.yaml (the functions' events, and the order service's routes in the API's own
//! definition). These tests fail as soon as one of those, or the committed docs/openapi.json,
//! disagrees with the table, and prove that every entry of the table reaches its handler in
//! its own function's router.

use std::collections::BTreeSet;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use tower::ServiceExt;

use super::access::{Access, Role};
use super::{live_router, router, Routes, LIVE_PATH, ROUTES};
use crate::{App, Settings};

/// (method, path with its parameters unnamed, function).
type Declared = BTreeSet<(String, String, String)>;

/// `/vouchers/{code}/reservations/{orderId}` -> `/vouchers/{}/reservations/{}`.
fn unnamed(path: &str) -> String {
    let mut out = String::new();
    let mut in_param = false;
    for c in path.chars() {
        match c {
            '{' => {
                in_param = true;
                out.push_str("{}");
            }
            '}' => in_param = false,
            c if !in_param => out.push(c),
            _ => {}
        }
    }
    out
}

/// The API's routes: the local server's own pages are in no declaration but the table.
fn api() -> impl Iterator<Item = &'static super::Route> {
    ROUTES.iter().filter(|r| !r.is_local())
}

fn table() -> Declared {
    api()
        .map(|r| {
            let function = r.family.function().expect("every route has a function");
            (r.method.to_owned(), unnamed(r.path), function.to_owned())
        })
        .collect()
}

fn watch_router() -> Declared {
    let manifest: toml::Table = include_str!("../../../Cargo.toml").parse().unwrap();
    let router = manifest["workspace"]["metadata"]["lambda"]["watch"]["router"]
        .as_table()
        .expect("the watch router is a table");
    let mut declared = Declared::new();
    for (path, target) in router {
        let path = unnamed(path);
        match target {
            // A bare function name takes every method on that path.
            toml::Value::String(function) => {
                let methods: Vec<String> = table()
                    .into_iter()
                    .filter(|(_, p, _)| *p == path)
                    .map(|(m, _, _)| m)
                    .collect();
                assert!(!methods.is_empty(), "{path} is not a route");
                for method in methods {
                    declared.insert((method, path.clone(), function.clone()));
                }
            }
            toml::Value::Array(entries) => {
                for entry in entries {
                    declared.insert((
                        entry["method"].as_str().unwrap().to_owned(),
                        path.clone(),
                        entry["function"].as_str().unwrap().to_owned(),
                    ));
                }
            }
            other => panic!("unexpected watch route {path}: {other:?}"),
        }
    }
    declared
}

/// The function (its directory under `functions/`) of a template resource, by logical id.
fn function_of(template: &serde_norway::Value, resource: &str) -> String {
    let code_uri = template["Resources"][resource]["Properties"]["CodeUri"]
        .as_str()
        .unwrap_or_else(|| panic!("{resource} is a function of template.yaml"));
    code_uri.trim_start_matches("functions/").to_owned()
}

/// The resources an integration's `uri` names, `${Resource}` or `${Resource.Attribute}` in
/// its `!Sub` strings; a SAM alias `<function>Alias<name>` stands for its function.
fn named_functions(template: &serde_norway::Value, uri: &serde_norway::Value) -> BTreeSet<String> {
    let text = serde_norway::to_string(uri).unwrap();
    text.split("${")
        .skip(1)
        .filter_map(|s| s.split('}').next())
        .map(|name| name.split('.').next().unwrap())
        .filter(|name| !name.starts_with("AWS::"))
        .map(|name| function_of(template, name.split("Alias").next().unwrap()))
        .collect()
}

fn template() -> Declared {
    let template: serde_norway::Value =
        serde_norway::from_str(include_str!("../../../template.yaml")).unwrap();
    let mut declared = Declared::new();
    // The routes the API declares itself (each to an on-demand function or its twin on managed
    // instances): both targets must be the same function.
    let paths = template["Resources"]["Api"]["Properties"]["DefinitionBody"]["paths"]
        .as_mapping()
        .expect("the API declares the order service's routes");
    for (path, item) in paths {
        for (method, operation) in item.as_mapping().unwrap() {
            let uri = &operation["x-amazon-apigateway-integration"]["uri"];
            let functions = named_functions(&template, uri);
            let [function] = Vec::from_iter(functions).try_into().unwrap_or_else(|f| {
                panic!("{method:?} {path:?} goes to one function in every model, not {f:?}")
            });
            declared.insert((
                method.as_str().unwrap().to_ascii_uppercase(),
                unnamed(path.as_str().unwrap()),
                function,
            ));
        }
    }
    for (id, resource) in template["Resources"].as_mapping().unwrap() {
        if resource["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        let function = function_of(&template, id.as_str().unwrap());
        let Some(events) = resource["Properties"]["Events"].as_mapping() else {
            continue;
        };
        for event in events.values() {
            if event["Type"].as_str() != Some("HttpApi") {
                continue;
            }
            let p = &event["Properties"];
            declared.insert((
                p["Method"].as_str().unwrap().to_owned(),
                unnamed(p["Path"].as_str().unwrap()),
                function.clone(),
            ));
        }
    }
    declared
}

/// (method, path with its parameters unnamed) of every operation in docs/openapi.json.
fn openapi() -> BTreeSet<(String, String)> {
    const METHODS: [&str; 8] = [
        "get", "put", "post", "delete", "options", "head", "patch", "trace",
    ];
    let document: serde_json::Value =
        serde_json::from_str(include_str!("../../../docs/openapi.json")).unwrap();
    let mut declared = BTreeSet::new();
    for (path, item) in document["paths"]
        .as_object()
        .expect("the document has paths")
    {
        // A path item also holds `parameters`, `summary` and the like beside its operations.
        for method in item.as_object().unwrap().keys() {
            if METHODS.contains(&method.as_str()) {
                declared.insert((method.to_ascii_uppercase(), unnamed(path)));
            }
        }
    }
    declared
}

#[test]
fn the_watch_router_declares_the_route_table() {
    assert_eq!(watch_router(), table());
}

#[test]
fn template_yaml_declares_the_route_table() {
    assert_eq!(template(), table());
}

#[test]
fn the_openapi_document_declares_the_route_table() {
    let served: BTreeSet<(String, String)> = api()
        .map(|r| (r.method.to_owned(), unnamed(r.path)))
        .collect();
    let documented = openapi();
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let not_served: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty() && not_served.is_empty(),
        "served but not in docs/openapi.json: {undocumented:?}; \
         in docs/openapi.json but not served: {not_served:?}"
    );
}

#[tokio::test]
async fn every_route_reaches_its_handler_in_its_own_function() {
    // Nothing listens on port 1: a handler that touches a store fails fast, and the request
    // never gets that far anyway (every parameter is invalid).
    let settings = Settings::from_lookup(|name| match name {
        "DATABASE_URL" => Some("postgres://postgres@127.0.0.1:1/none".into()),
        "REDIS_URL" => Some("redis://127.0.0.1:1".into()),
        "REDIS_TIMEOUT_MS" => Some("200".into()),
        "DATABASE_TIMEOUT_MS" => Some("200".into()),
        _ => None,
    })
    .unwrap();
    let app = App::new(&settings).unwrap();
    for route in ROUTES {
        let uri = route
            .path
            .replace("{code}", "bad!")
            .replace("{order_id}", "bad!")
            .replace("{id}", "bad!");
        for routes in [Routes::All, route.family] {
            let request = Request::builder()
                .method(route.method)
                .uri(&uri)
                .body(Body::empty())
                .unwrap();
            let response = router(app.clone(), routes).oneshot(request).await.unwrap();
            let status = response.status();
            let body = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap();
            let body = String::from_utf8_lossy(&body);
            // The router's own fallbacks answer these two; any other answer is the handler's.
            let fallback = (status == StatusCode::NOT_FOUND && body.contains("\"NOT_FOUND\""))
                || status == StatusCode::METHOD_NOT_ALLOWED;
            assert!(
                !fallback,
                "{} {} in {routes:?}: {status} {body}",
                route.method, route.path
            );
        }
    }
}

/// IAM's `*`: any run of characters, `/` included.
fn iam_match(pattern: &str, s: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == s,
        Some((head, rest)) => {
            s.starts_with(head) && (head.len()..=s.len()).any(|i| iam_match(rest, &s[i..]))
        }
    }
}

/// The `METHOD/path` patterns a managed policy of template.yaml allows and denies.
fn policy(name: &str) -> (Vec<String>, Vec<String>) {
    let template: serde_norway::Value =
        serde_norway::from_str(include_str!("../../../template.yaml")).unwrap();
    let (mut allow, mut deny) = (Vec::new(), Vec::new());
    let statements = &template["Resources"][name]["Properties"]["PolicyDocument"]["Statement"];
    for statement in statements.as_sequence().unwrap() {
        for resource in statement["Resource"].as_sequence().unwrap() {
            // `!Sub "arn:...:${Api}/${Api.Stage}/METHOD/path"`
            let serde_norway::Value::Tagged(sub) = resource else {
                panic!("{name}: a resource that is not !Sub: {resource:?}");
            };
            let arn = sub.value.as_str().unwrap();
            let (_, route) = arn.split_once("${Api.Stage}/").unwrap();
            match statement["Effect"].as_str().unwrap() {
                "Allow" => allow.push(route.to_owned()),
                _ => deny.push(route.to_owned()),
            }
        }
    }
    (allow, deny)
}

/// The local server's route access (`http::access`) is what the deployment's two invoke
/// policies give each role: a token opens exactly what the role's IAM policy opens.
#[test]
fn route_access_is_what_template_yaml_invoke_policies_give() {
    let policies = [
        (Role::OrderService, policy("OrderServiceInvokePolicy")),
        (Role::Operator, policy("OperatorInvokePolicy")),
    ];
    for route in api() {
        // `/vouchers/{code}` -> `GET/vouchers/CODE`, as API Gateway names the call.
        let call = format!("{}{}", route.method, unnamed(route.path).replace("{}", "P"));
        let allowed: Vec<Role> = policies
            .iter()
            .filter(|(_, (allow, deny))| {
                allow.iter().any(|p| iam_match(p, &call))
                    && !deny.iter().any(|p| iam_match(p, &call))
            })
            .map(|(role, _)| *role)
            .collect();
        let expected = match allowed.as_slice() {
            [] => Access::Open,
            [Role::OrderService] => Access::OrderService,
            [Role::Operator] => Access::Operators,
            _ => Access::Both,
        };
        assert_eq!(
            route.access, expected,
            "{call}: the policies allow {allowed:?}"
        );
    }
}

/// The live function's router, built without an `App`, serves its family's route and no other.
#[tokio::test]
async fn the_live_function_serves_its_route_and_nothing_else() {
    let call = |method: &str, path: &str| {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .unwrap();
        async move { live_router().oneshot(request).await.unwrap().status() }
    };
    assert_eq!(call("GET", LIVE_PATH).await, StatusCode::OK);
    for route in ROUTES.iter().filter(|r| r.family != Routes::Live) {
        let uri = route
            .path
            .replace("{code}", "A")
            .replace("{order_id}", "o")
            .replace("{id}", "1");
        let status = call(route.method, &uri).await;
        assert!(
            matches!(
                status,
                StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED
            ),
            "{} {} answered {status} in the live function",
            route.method,
            route.path
        );
    }
    let live: Vec<_> = ROUTES.iter().filter(|r| r.family == Routes::Live).collect();
    assert_eq!(live.len(), 1);
    assert_eq!((live[0].method, live[0].path), ("GET", LIVE_PATH));
}

/// The admin function generates campaigns of up to `MAX_GENERATED` codes in one request (11-12 s
/// for a million here): its timeout must leave room for that, within the 30 s an HTTP API
/// integration waits. On main it had the global 10 s.
#[test]
fn the_admin_function_outlives_the_largest_campaign_generation() {
    let template: serde_norway::Value =
        serde_norway::from_str(include_str!("../../../template.yaml")).unwrap();
    let timeout = |function: &str| {
        template["Resources"][function]["Properties"]["Timeout"]
            .as_u64()
            .or_else(|| template["Globals"]["Function"]["Timeout"].as_u64())
            .unwrap()
    };
    assert_eq!(crate::domain::MAX_GENERATED, 1_000_000);
    assert!(
        (25..30).contains(&timeout("AdminFunction")),
        "AdminFunction's timeout: {} s",
        timeout("AdminFunction")
    );
}
