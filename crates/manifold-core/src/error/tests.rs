use super::*;

#[test]
fn each_failure_says_whose_fault_it_is_and_whether_to_retry() {
    let upstream = RouteError::Upstream(UpstreamError::Closed {
        upstream: "a".into(),
        reason: "gone".into(),
    });
    let timeout = RouteError::Upstream(UpstreamError::Timeout {
        upstream: "a".into(),
        after: std::time::Duration::from_secs(1),
    });
    let hidden = RouteError::Hidden(Box::new(RouteError::UnknownTool("x".into())));
    for (e, fault, retry) in [
        (&upstream, Fault::Upstream, true),
        (&timeout, Fault::Upstream, false),
        (&RouteError::LimitStore, Fault::Policy, true),
        (&hidden, Fault::Host, false),
        (&RouteError::BadCursor, Fault::Host, false),
        (&RouteError::Busy("b".into()), Fault::Host, true),
        (&RouteError::Full("f".into()), Fault::Manifold, true),
        (&RouteError::ShuttingDown, Fault::Manifold, true),
        (&RouteError::Internal("i".into()), Fault::Manifold, false),
    ] {
        let classified = e.classify(Era::Session);
        assert_eq!(
            (classified.fault, classified.retryable),
            (fault, retry),
            "{e}"
        );
    }
}

#[test]
fn an_open_breaker_has_its_own_code_and_says_when_to_retry() {
    let open = RouteError::Upstream(UpstreamError::CircuitOpen {
        upstream: "a".into(),
        reason: "5 failures in a row, the last: timed out".into(),
        retry_in: Some(std::time::Duration::from_millis(1500)),
    });
    let obj = open.error_object(Era::Session);
    assert_eq!(obj.code, codes::UPSTREAM_CIRCUIT_OPEN);
    assert!(
        obj.message.contains("tried again in 1500ms"),
        "{}",
        obj.message
    );
    let data: serde_json::Value = serde_json::from_str(obj.data.as_ref().unwrap().get()).unwrap();
    assert_eq!(
        data,
        serde_json::json!({"upstream": "a", "retryable": true, "retryAfterMs": 1500})
    );
    assert_eq!((open.fault(), open.retryable()), (Fault::Upstream, true));
    assert_eq!(open.outcome(), Outcome::Unavailable);
    assert_eq!(open.classify(Era::Session).answer_status, 200);
}

/// A consent is asked with the URL elicitation a host that declared it understands (-32042,
/// `data.elicitations`), else with the link in `data.url` (-32018); either way the call may be
/// made again once the user authorized.
#[test]
fn a_consent_carries_its_link_as_the_host_can_use_it() {
    let consent = |elicit| {
        RouteError::Consent(Box::new(Consent {
            upstream: "forge".into(),
            url: "http://127.0.0.1:1/oauth/connect/abc".into(),
            id: "abc".into(),
            message: "forge needs your authorization".into(),
            elicit,
        }))
    };
    let data = |e: &RouteError| -> serde_json::Value {
        let obj = e.error_object(Era::Session);
        serde_json::from_str(obj.data.as_ref().unwrap().get()).unwrap()
    };
    let elicit = consent(true);
    assert_eq!(
        elicit.error_object(Era::Session).code,
        codes::URL_ELICITATION_REQUIRED
    );
    assert_eq!(
        data(&elicit)["elicitations"],
        serde_json::json!([{
            "mode": "url",
            "elicitationId": "abc",
            "url": "http://127.0.0.1:1/oauth/connect/abc",
            "message": "forge needs your authorization",
        }])
    );
    let plain = consent(false);
    assert_eq!(
        plain.error_object(Era::Session).code,
        codes::UPSTREAM_AUTHORIZATION
    );
    assert_eq!(data(&plain)["url"], "http://127.0.0.1:1/oauth/connect/abc");
    for e in [&elicit, &plain] {
        assert!(e.retryable());
        assert_eq!(e.outcome(), Outcome::Denied);
        assert_eq!(e.fault(), Fault::Host);
    }
}

#[test]
fn http_refusals_have_their_status_code_and_retry_after() {
    let method = RouteError::MethodNotAllowed {
        method: "PUT".into(),
        path: "/mcp".into(),
    };
    for (e, status, code, retry) in [
        (
            RouteError::Unauthorized("no key".into()),
            401,
            codes::INVALID_REQUEST,
            None,
        ),
        (
            RouteError::Origin("http://x".into()),
            403,
            codes::INVALID_REQUEST,
            None,
        ),
        (
            RouteError::NotFound("n".into()),
            404,
            codes::INVALID_REQUEST,
            None,
        ),
        (
            RouteError::Body("empty body".into()),
            400,
            codes::PARSE_ERROR,
            None,
        ),
        (
            RouteError::BodyTooLarge(10),
            413,
            codes::INVALID_REQUEST,
            None,
        ),
        (
            RouteError::SlowBody(std::time::Duration::from_secs(10)),
            408,
            codes::INVALID_REQUEST,
            None,
        ),
        (method, 405, codes::INVALID_REQUEST, None),
        (
            RouteError::Busy("b".into()),
            429,
            codes::TOO_MANY_REQUESTS,
            Some(1),
        ),
        (
            RouteError::Full("f".into()),
            503,
            codes::INTERNAL_ERROR,
            Some(5),
        ),
        (
            RouteError::ShuttingDown,
            503,
            codes::INTERNAL_ERROR,
            Some(1),
        ),
        (
            RouteError::Internal("i".into()),
            500,
            codes::INTERNAL_ERROR,
            None,
        ),
    ] {
        let classified = e.classify(Era::Session);
        assert_eq!(classified.status, status, "{e}");
        assert_eq!(classified.code, code, "{e}");
        assert_eq!(e.error_object(Era::Session).code, code, "{e}");
        assert_eq!(classified.retry_after_secs, retry, "{e}");
    }
    // A JSON-RPC error answering a request travels in a 200.
    let unknown = RouteError::UnknownTool("x".into());
    assert_eq!(unknown.http_status(), None);
    assert_eq!(unknown.classify(Era::Session).answer_status, 200);
    assert_eq!(
        RouteError::Unauthorized("bad key".into()).to_string(),
        "authentication required: bad key"
    );
}

/// Every error object Manifold makes says `retryable` in its `data`, as the classification does.
#[test]
fn every_error_object_says_retryable_as_its_classification_does() {
    let refusal = Refusal {
        kind: RefusalKind::RateLimited,
        limit: "tool:a".into(),
        retry_after: std::time::Duration::from_millis(20),
    };
    let upstream = |e| RouteError::Upstream(e);
    for e in [
        RouteError::UnknownTool("x".into()),
        RouteError::UnknownResource("file:///x".into()),
        RouteError::UnknownMethod("nope".into()),
        RouteError::Limited {
            tool: "a".into(),
            refusal,
        },
        RouteError::LimitStore,
        RouteError::Busy("b".into()),
        RouteError::ShuttingDown,
        RouteError::UnsupportedVersion {
            requested: "2099-01-01".into(),
        },
        RouteError::MissingCapability {
            capability: "sampling",
            what: "sampling/createMessage".into(),
        },
        RouteError::Abandoned("the request is over".into()),
        RouteError::Hidden(Box::new(RouteError::UnknownPrompt("p".into()))),
        upstream(UpstreamError::Closed {
            upstream: "a".into(),
            reason: "gone".into(),
        }),
    ] {
        for era in [Era::Session, Era::Stateless] {
            let obj = e.error_object(era);
            let data: serde_json::Value =
                serde_json::from_str(obj.data.as_ref().map_or("null", |d| d.get())).unwrap();
            let classified = e.classify(era);
            assert_eq!(data["retryable"], classified.retryable, "{e}: {data}");
            assert_eq!(obj.code, classified.code, "{e}");
        }
    }
}

/// The stateless era's numbering is decided here, for Manifold's errors and upstreams' alike.
#[test]
fn the_stateless_era_renumbers_in_one_place() {
    let unknown = RouteError::UnknownResource("file:///x".into());
    assert_eq!(
        unknown.classify(Era::Session).code,
        codes::RESOURCE_NOT_FOUND
    );
    assert_eq!(unknown.classify(Era::Stateless).code, codes::INVALID_PARAMS);
    assert_eq!(
        unknown.error_object(Era::Stateless).code,
        codes::INVALID_PARAMS
    );
    let raw = r#"{"code":-32002,"message":"no such resource","data":{"uri":"x"}}"#;
    assert_eq!(upstream_refusal(Era::Session, raw), (Some(-32002), None));
    let (code, renumbered) = upstream_refusal(Era::Stateless, raw);
    assert_eq!(code, Some(codes::INVALID_PARAMS));
    let renumbered: serde_json::Value = serde_json::from_str(&renumbered.unwrap()).unwrap();
    assert_eq!(
        renumbered,
        serde_json::json!({"code": -32602, "message": "no such resource", "data": {"uri": "x"}})
    );
    assert_eq!(upstream_refusal(Era::Stateless, "not json"), (None, None));
    // A stateless POST's status follows its answer's code; a session's answers travel in 200s.
    for (code, stateless) in [
        (codes::HEADER_MISMATCH, 400),
        (codes::MISSING_REQUIRED_CLIENT_CAPABILITY, 400),
        (codes::UNSUPPORTED_PROTOCOL_VERSION, 400),
        (codes::METHOD_NOT_FOUND, 404),
        (codes::INVALID_PARAMS, 200),
    ] {
        assert_eq!(answer_status(Era::Stateless, code), stateless, "{code}");
        assert_eq!(answer_status(Era::Session, code), 200, "{code}");
    }
    let removed = RouteError::Removed("resources/subscribe".into());
    assert_eq!(removed.classify(Era::Stateless).answer_status, 404);
}

/// The server crates' sources, outside this module and outside their tests: none names a
/// JSON-RPC error code or builds an error object. Every error a host or an upstream is told of
/// is a `RouteError`, so that it is classified once.
#[test]
fn only_the_error_module_names_error_codes() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut offenders = Vec::new();
    for krate in ["manifold-core", "manifold-http", "manifold-redis"] {
        let src = crates.join(krate).join("src");
        if krate == "manifold-core" {
            assert!(src.is_dir(), "{}", src.display());
        }
        for file in rust_files(&src) {
            let rel = file
                .strip_prefix(&crates)
                .unwrap_or(&file)
                .display()
                .to_string();
            if rel.contains("manifold-core/src/error") || rel.ends_with("tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            // Unit tests sit at the end of a file, under `#[cfg(test)]`.
            let product = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (n, line) in product.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                if ["codes::", "ErrorObject::new", "ErrorObject {", "\"code\":"]
                    .iter()
                    .any(|needle| code.contains(needle))
                {
                    offenders.push(format!("{rel}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "error codes named outside error.rs:\n{}",
        offenders.join("\n")
    );
}

fn rust_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}
