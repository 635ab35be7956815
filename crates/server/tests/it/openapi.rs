//! `GET /openapi.json` describes the router it is served by: an OpenAPI
//! 3.1 document whose operations are exactly the routes `app()` declares
//! (read from `src/app/router.rs` itself, so a route added without its
//! description fails here), each of which the live server answers (never
//! "unknown route" or "method not allowed"); every `$ref` resolves, every
//! operation has its 200 and error bodies, the authenticated ones their
//! security. (Answers against the schemas: scripts/schemathesis_check.sh.)

use crate::common;

use std::collections::BTreeSet;

use serde_json::{json, Value};

/// Every route of `app()` (method, path in OpenAPI's syntax).
const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/chat/completions"),
    ("post", "/v1/completions"),
    ("post", "/v1/messages"),
    ("post", "/v1/messages/count_tokens"),
    ("post", "/v1/responses"),
    ("get", "/v1/responses/{id}"),
    ("delete", "/v1/responses/{id}"),
    ("get", "/v1/responses/{id}/input_items"),
    ("post", "/v1/embeddings"),
    ("post", "/v1/rerank"),
    ("post", "/rerank"),
    ("get", "/v1/models"),
    ("get", "/v1/models/{id}"),
    ("post", "/admin/models/{name}/load"),
    ("post", "/admin/models/{name}/unload"),
    ("post", "/admin/models/{name}/adapters"),
    ("post", "/v1/chat/completions/render"),
    ("post", "/apply-template"),
    ("post", "/tokenize"),
    ("post", "/detokenize"),
    ("get", "/metrics"),
    ("get", "/get_load"),
    ("get", "/debug/ledger"),
    ("get", "/debug/requests"),
    ("get", "/debug/cells"),
    ("get", "/dashboard/events"),
    ("get", "/health"),
    ("get", "/ready"),
    ("get", "/openapi.json"),
    ("get", "/"),
    ("get", "/dashboard"),
    ("get", "/ui/{name}"),
    ("post", "/v1/files"),
    ("get", "/v1/files"),
    ("get", "/v1/files/{id}"),
    ("delete", "/v1/files/{id}"),
    ("get", "/v1/files/{id}/content"),
    ("post", "/v1/batches"),
    ("get", "/v1/batches"),
    ("get", "/v1/batches/{id}"),
    ("post", "/v1/batches/{id}/cancel"),
];

/// Routes without the API key.
const OPEN: &[&str] = &[
    "/health",
    "/ready",
    "/openapi.json",
    "/",
    "/dashboard",
    "/ui/{name}",
];

/// The `.route(PATH, METHOD(..).METHOD(..))` calls of `app()` in
/// `src/app/router.rs`, paths in OpenAPI's syntax (`{*id}` is `{id}`).
fn routes_in_source() -> BTreeSet<(String, String)> {
    let src = include_str!("../../src/app/router.rs");
    let start = src.find("pub fn app(").expect("app() in app/router.rs");
    let end = start + src[start..].find("\nfn ").expect("the fn after app()");
    let body = &src[start..end];
    let mut out = BTreeSet::new();
    let mut rest = body;
    while let Some(i) = rest.find(".route(") {
        let call = &rest[i + ".route(".len()..];
        // The call's text, to its closing parenthesis.
        let mut depth = 1;
        let close = call
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .map(|(j, _)| j)
            .expect("a closed .route( call");
        let args = &call[..close];
        let q = args.find('"').expect("a path literal");
        let path_len = args[q + 1..].find('"').expect("the path's end");
        let path = args[q + 1..q + 1 + path_len].replace("{*", "{");
        let handlers = &args[q + 1 + path_len + 1..];
        let mut found = 0;
        for m in ["get", "post", "delete", "put", "patch"] {
            for (k, _) in handlers.match_indices(&format!("{m}(")) {
                let before = handlers[..k].chars().last();
                if before.is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == ':')) {
                    out.insert((m.to_string(), path.clone()));
                    found += 1;
                }
            }
        }
        assert!(found > 0, "no method read for {path}: {args}");
        rest = &call[close..];
    }
    out
}

fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => doc
            .pointer(r.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("{r} does not resolve")),
        None => v,
    }
}

/// Every `$ref` in `v`.
fn refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                out.push(r.clone());
            }
            m.values().for_each(|x| refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_names_every_route_and_the_server_answers_each() {
    let s = common::server().await;
    let r = s
        .client
        .get(format!("{}/openapi.json", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let doc: Value = r.json().await.unwrap();
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1."),
        "{}",
        doc["openapi"]
    );
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));

    // The document's operations, the list above, and app()'s routes agree.
    let mut in_doc = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            in_doc.insert((method.clone(), path.clone()));
        }
    }
    let listed: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(listed.len(), ROUTES.len(), "a route listed twice");
    let source = routes_in_source();
    assert_eq!(
        source, listed,
        "app()'s routes (left) and this test's list (right) differ"
    );
    assert_eq!(
        in_doc, listed,
        "the document's operations (left) and the routes (right) differ"
    );

    // Every reference resolves; no schema is left empty.
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(!all.is_empty());
    for r in &all {
        resolve(&doc, &json!({ "$ref": r }));
    }
    for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
        assert!(
            schema.as_object().is_some_and(|o| !o.is_empty()),
            "schema {name} is empty"
        );
    }
    let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
    assert_eq!(schemes["bearerAuth"]["scheme"], "bearer");
    assert_eq!(schemes["apiKey"]["name"], "x-api-key");

    for (method, path) in ROUTES {
        let op = &doc["paths"][path][method];
        let at = format!("{method} {path}");
        let ok = &op["responses"]["200"];
        assert!(ok["content"].is_object(), "{at}: no 200 body");
        let security = op.get("security").cloned().unwrap_or(Value::Null);
        if OPEN.contains(path) {
            assert!(security.is_null(), "{at} needs no key");
        } else {
            assert_eq!(
                security,
                json!([{"bearerAuth": []}, {"apiKey": []}]),
                "{at}"
            );
            // The errors' body: Anthropic's under /v1/messages, OpenAI's
            // elsewhere.
            let want = if path.starts_with("/v1/messages") {
                "#/components/schemas/AnthropicError"
            } else {
                "#/components/schemas/ErrorBody"
            };
            for status in ["401", "429", "503"] {
                assert_eq!(
                    op["responses"][status]["content"]["application/json"]["schema"]["$ref"], want,
                    "{at} {status}"
                );
            }
            assert_eq!(
                op["responses"]["429"]["headers"]["retry-after"]["required"], true,
                "{at}"
            );
        }
        if *method == "post" {
            // Every POST body is JSON (load, unload and a batch's cancel
            // read none), but an upload's (multipart).
            let reads_body = !path.ends_with("/load")
                && !path.ends_with("/unload")
                && !path.ends_with("/cancel");
            let media = if *path == "/v1/files" {
                "multipart/form-data"
            } else {
                "application/json"
            };
            assert_eq!(
                op["requestBody"]["content"][media]["schema"].is_object(),
                reads_body,
                "{at}"
            );
            for status in ["413", "415"] {
                assert!(op["responses"][status].is_object(), "{at} {status}");
            }
        }
    }

    // The live router serves every documented operation: no answer is the
    // fallback's "unknown route" or "method not allowed".
    for (method, path) in ROUTES {
        let concrete = path
            .replace("{id}", "x")
            .replace("{name}", "app.css")
            .replace("/admin/models/app.css/", "/admin/models/x/");
        let url = match *path {
            "/dashboard/events" => format!("{}{concrete}?interval_ms=100", s.base),
            _ => format!("{}{concrete}", s.base),
        };
        let req = match *method {
            "get" => s.client.get(&url),
            "delete" => s.client.delete(&url),
            "post" => s
                .client
                .post(&url)
                .header("content-type", "application/json")
                .body("{}"),
            m => panic!("method {m}"),
        };
        if *path == "/dashboard/events" {
            // An endless stream: its head is enough (and closed before the
            // next route is asked).
            let _feeds = common::DASHBOARD_FEEDS.lock().await;
            let open = s.state.open_feeds();
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), 200, "{method} {path}");
            drop(r);
            common::feeds_closed(&s, open).await;
            continue;
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        let code = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_string));
        assert!(
            !matches!(code.as_deref(), Some("not_found" | "method_not_allowed")),
            "{method} {concrete}: {status} {text}"
        );
        assert_ne!(status, 405, "{method} {concrete}");
        let documented = &doc["paths"][path][method]["responses"][status.to_string()];
        assert!(
            documented.is_object(),
            "{method} {concrete}: status {status} is not documented ({text})"
        );
    }
}
