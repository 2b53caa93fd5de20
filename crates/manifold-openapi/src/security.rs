//! The security an operation asks for, as data for whoever supplies credentials.

use serde_json::Value;

use crate::load::Document;

/// Where an API key goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiKeyLocation {
    Header,
    Query,
    Cookie,
}

/// One OAuth 2 flow of a scheme, with the scopes the operation asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthFlow {
    /// `authorizationCode`, `clientCredentials`, `implicit`, `password` or `deviceAuthorization`.
    pub kind: String,
    pub authorization_url: Option<String>,
    pub token_url: Option<String>,
}

/// One scheme an operation needs; an operation needs all of one of its alternatives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecurityNeed {
    ApiKey {
        scheme: String,
        location: ApiKeyLocation,
        name: String,
    },
    Bearer {
        scheme: String,
    },
    Basic {
        scheme: String,
    },
    OAuth2 {
        scheme: String,
        flows: Vec<OAuthFlow>,
        scopes: Vec<String>,
    },
    OpenIdConnect {
        scheme: String,
        url: String,
        scopes: Vec<String>,
    },
    /// A scheme this crate does not model (mutual TLS, other HTTP schemes), by name and type.
    Other {
        scheme: String,
        kind: String,
    },
}

/// The operation's alternatives (its own `security`, else the document's); empty when none.
pub(crate) fn needs(doc: &Document, op: &Value) -> Vec<Vec<SecurityNeed>> {
    let root = doc.root();
    let Some(requirements) = op
        .get("security")
        .or_else(|| root.get("security"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let schemes = root.pointer("/components/securitySchemes");
    requirements
        .iter()
        .filter_map(Value::as_object)
        .map(|req| {
            req.iter()
                .map(|(name, scopes)| {
                    let scheme = schemes
                        .and_then(|s| s.get(name))
                        .map(|s| doc.deref(doc.url(), s));
                    let scheme = match scheme {
                        Some(Ok((_, s))) => s,
                        _ => &Value::Null,
                    };
                    need(name, scheme, strings(scopes))
                })
                .collect()
        })
        .collect()
}

fn need(name: &str, scheme: &Value, scopes: Vec<String>) -> SecurityNeed {
    let text = |key: &str| scheme.get(key).and_then(Value::as_str).map(str::to_string);
    let scheme_name = name.to_string();
    match text("type").as_deref() {
        Some("apiKey") => {
            let location = match text("in").as_deref() {
                Some("query") => ApiKeyLocation::Query,
                Some("cookie") => ApiKeyLocation::Cookie,
                _ => ApiKeyLocation::Header,
            };
            SecurityNeed::ApiKey {
                scheme: scheme_name,
                location,
                name: text("name").unwrap_or_default(),
            }
        }
        Some("http") => match text("scheme").map(|s| s.to_ascii_lowercase()).as_deref() {
            Some("bearer") => SecurityNeed::Bearer {
                scheme: scheme_name,
            },
            Some("basic") => SecurityNeed::Basic {
                scheme: scheme_name,
            },
            other => SecurityNeed::Other {
                scheme: scheme_name,
                kind: format!("http {}", other.unwrap_or("")),
            },
        },
        Some("oauth2") => SecurityNeed::OAuth2 {
            scheme: scheme_name,
            flows: flows(scheme),
            scopes,
        },
        Some("openIdConnect") => SecurityNeed::OpenIdConnect {
            scheme: scheme_name,
            url: text("openIdConnectUrl").unwrap_or_default(),
            scopes,
        },
        other => SecurityNeed::Other {
            scheme: scheme_name,
            kind: other.unwrap_or("undeclared").to_string(),
        },
    }
}

fn flows(scheme: &Value) -> Vec<OAuthFlow> {
    let Some(flows) = scheme.get("flows").and_then(Value::as_object) else {
        return Vec::new();
    };
    flows
        .iter()
        .map(|(kind, flow)| OAuthFlow {
            kind: kind.clone(),
            authorization_url: flow
                .get("authorizationUrl")
                .and_then(Value::as_str)
                .map(str::to_string),
            token_url: flow
                .get("tokenUrl")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
        .collect()
}

/// The strings of a JSON array (others, and anything not an array, give none).
pub(crate) fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::doc;

    #[test]
    fn an_operation_lists_its_schemes_with_names_and_scopes() {
        let d = doc("openapi: 3.0.0\nsecurity: [{key: []}]\ncomponents:\n  securitySchemes:\n    key: {type: apiKey, in: query, name: api_key}\n    tok: {type: http, scheme: Bearer}\n    o: {type: oauth2, flows: {clientCredentials: {tokenUrl: 'https://a/t', scopes: {}}}}\npaths: {}\n");
        assert_eq!(
            needs(&d, &serde_json::json!({})),
            vec![vec![SecurityNeed::ApiKey {
                scheme: "key".into(),
                location: ApiKeyLocation::Query,
                name: "api_key".into()
            }]]
        );
        let op = serde_json::json!({"security": [{"tok": []}, {"o": ["read"]}]});
        let got = needs(&d, &op);
        assert_eq!(
            got[0],
            vec![SecurityNeed::Bearer {
                scheme: "tok".into()
            }]
        );
        assert_eq!(
            got[1],
            vec![SecurityNeed::OAuth2 {
                scheme: "o".into(),
                flows: vec![OAuthFlow {
                    kind: "clientCredentials".into(),
                    authorization_url: None,
                    token_url: Some("https://a/t".into())
                }],
                scopes: vec!["read".into()],
            }]
        );
        assert!(needs(&d, &serde_json::json!({"security": []})).is_empty());
    }
}
