//! The console's try page and live calls: a tool tried as a team goes the way a host's call
//! goes (its view, its refusals), a form that cannot be read sends nothing, and every host
//! request shows in the live calls without its arguments.

use std::collections::HashMap;

use reqwest::blocking::Client;
use reqwest::header::LOCATION;
use reqwest::StatusCode;
use serde_json::{json, Value};

use manifold_testkit::http::*;
use manifold_testkit::process::*;
use manifold_testkit::requests::Requests;

use super::{browser, TOKEN};

const RED_KEY: &str = "red-key-0123456789abcdef0123456789";
const BLUE_KEY: &str = "blue-key-0123456789abcdef012345678";

/// `red` sees `alpha`'s tools, `blue` only `beta`'s.
fn console_server() -> Server {
    let config = format!(
        "[server]\nadmin = \"127.0.0.1:0\"\nmetrics_token = \"{TOKEN}\"\n\n\
         [teams.red]\napi_keys = [\"{RED_KEY}\"]\nupstreams = [\"alpha\"]\n\n\
         [teams.blue]\napi_keys = [\"{BLUE_KEY}\"]\nupstreams = [\"beta\"]\n\n{}\n{}",
        named_fixture("alpha"),
        named_fixture("beta"),
    );
    Server::start(&config)
}

/// A login: its cookie and its CSRF token.
struct Login {
    cookie: String,
    csrf: String,
}

fn log_in(server: &Server, c: &Client) -> Login {
    let r = c
        .post(server.admin_url("/console/login"))
        .form(&[("token", TOKEN)])
        .send()
        .unwrap();
    let set = r.headers()["set-cookie"].to_str().unwrap();
    let cookie = set.split(';').next().unwrap().to_owned();
    let page = get(c, server, &cookie, "/console/").1;
    let at = page.find("name=\"csrf\" value=\"").unwrap() + 19;
    let csrf = page[at..].split('"').next().unwrap().to_owned();
    Login { cookie, csrf }
}

fn get(c: &Client, server: &Server, cookie: &str, path: &str) -> (StatusCode, String) {
    let r = c
        .get(server.admin_url(path))
        .header("cookie", cookie)
        .send()
        .unwrap();
    (r.status(), r.text().unwrap())
}

/// Posts the try form (with the login's CSRF token); the page it leads to, or the answer
/// itself when it is not a redirect.
fn try_tool(
    server: &Server,
    c: &Client,
    login: &Login,
    fields: &[(&str, &str)],
) -> (StatusCode, String) {
    let mut form: HashMap<&str, &str> = fields.iter().copied().collect();
    form.insert("csrf", &login.csrf);
    let r = c
        .post(server.admin_url("/console/try"))
        .header("cookie", &login.cookie)
        .form(&form)
        .send()
        .unwrap();
    if r.status() != StatusCode::SEE_OTHER {
        return (r.status(), r.text().unwrap());
    }
    let to = r.headers()[LOCATION].to_str().unwrap().to_owned();
    assert!(to.starts_with("/console/try?outcome="), "{to}");
    get(c, server, &login.cookie, &to)
}

fn trace_id_on(page: &str) -> String {
    let at = page.find("<code id=\"trace-id\">").expect("a trace id") + 20;
    page[at..].split('<').next().unwrap().to_owned()
}

#[test]
fn a_tool_tried_as_a_team_returns_its_result_with_a_trace_id() {
    let server = console_server();
    let c = browser();
    server.ready_host_with_key(RED_KEY);
    let login = log_in(&server, &c);
    // The form of the tool chosen without a script: its argument as a required text input.
    let (status, form) = get(
        &c,
        &server,
        &login.cookie,
        "/console/try?team=red&tool=alpha__echo",
    );
    assert_eq!(status, StatusCode::OK);
    assert!(
        form.contains("name=\"arg:text\" type=\"text\" value=\"\" required"),
        "{form}"
    );
    let (status, page) = try_tool(
        &server,
        &c,
        &login,
        &[
            ("team", "red"),
            ("tool", "alpha__echo"),
            ("arg:text", "hi <b>"),
        ],
    );
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("data-outcome=\"ok\""), "{page}");
    assert!(
        page.contains("<pre class=\"content-text\">hi &lt;b&gt;</pre>"),
        "{page}"
    );
    let trace = trace_id_on(&page);
    assert!(
        trace.len() == 32 && trace.bytes().all(|b| b.is_ascii_hexdigit()),
        "{trace}"
    );
    // The call went the way a host's goes: it is counted for the team.
    let calls = get(&c, &server, &login.cookie, "/console/calls").1;
    let row = calls
        .lines()
        .find(|l| l.contains(&trace))
        .expect("the call among the live calls, by its trace id");
    assert!(
        row.contains("<td>red</td><td>alpha__echo</td><td>alpha</td>"),
        "{row}"
    );
}

#[test]
fn a_team_that_cannot_see_the_tool_gets_the_error_its_hosts_get() {
    let server = console_server();
    let c = browser();
    let mut host = server.ready_host_with_key(BLUE_KEY);
    let refused = host.call("alpha__echo", json!({"text": "x"}));
    let message = refused["error"]["message"].as_str().unwrap().to_owned();
    let login = log_in(&server, &c);
    let picker = get(&c, &server, &login.cookie, "/console/try?team=blue").1;
    assert!(
        picker.contains("alpha__echo (not in the team's view)"),
        "{picker}"
    );
    let (_, page) = try_tool(
        &server,
        &c,
        &login,
        &[("team", "blue"), ("tool", "alpha__echo"), ("arg:text", "x")],
    );
    assert!(page.contains("data-outcome=\"error\""), "{page}");
    let code = refused["error"]["code"].to_string();
    assert!(
        page.contains(&format!("<span id=\"error-code\">{code}</span>")),
        "{code}: {page}"
    );
    assert!(
        page.contains(&message.replace('"', "&quot;").replace('\'', "&#39;")),
        "{message}: {page}"
    );
    let mut red = server.ready_host_with_key(RED_KEY);
    assert_eq!(red.calls_of("alpha", "echo"), 0, "nothing reached alpha");
}

#[test]
fn a_form_that_cannot_be_read_sends_nothing_and_says_why() {
    let server = console_server();
    let c = browser();
    let mut host = server.ready_host_with_key(RED_KEY);
    let login = log_in(&server, &c);
    let (status, page) = try_tool(
        &server,
        &c,
        &login,
        &[
            ("team", "red"),
            ("tool", "alpha__whoami"),
            ("arguments", "{oops"),
        ],
    );
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page.contains("id=\"form-problems\""), "{page}");
    assert!(page.contains("the arguments are not JSON"), "{page}");
    // What was typed stays in the form.
    assert!(page.contains(">{oops</textarea>"), "{page}");
    let (status, page) = try_tool(
        &server,
        &c,
        &login,
        &[
            ("team", "red"),
            ("tool", "alpha__add"),
            ("arg:a", "two"),
            ("arg:b", "1"),
        ],
    );
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        page.contains("a: &quot;two&quot; is not a number"),
        "{page}"
    );
    assert_eq!(host.calls_of("alpha", "whoami"), 0);
    assert_eq!(host.calls_of("alpha", "add"), 0);
    // Without the CSRF token the form is refused, and nothing is called either.
    let r = c
        .post(server.admin_url("/console/try"))
        .header("cookie", &login.cookie)
        .form(&[
            ("team", "red"),
            ("tool", "alpha__whoami"),
            ("arguments", "{}"),
        ])
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(host.calls_of("alpha", "whoami"), 0);
}

#[test]
fn host_calls_show_in_the_live_calls_without_their_arguments() {
    let server = console_server();
    let c = browser();
    let login = log_in(&server, &c);
    let mut host = server.ready_host_with_key(RED_KEY);
    assert!(host.call("alpha__echo", json!({"text": "secret-argument-1"}))["result"].is_object());
    let page = get(&c, &server, &login.cookie, "/console/calls").1;
    assert!(page.contains("<script src=\"/console/assets/calls.js\"></script>"));
    let row = page
        .lines()
        .find(|l| l.contains("data-tool=\"alpha__echo\""))
        .expect("the host's call");
    assert!(
        row.contains("<td>red</td>") && row.contains("outcome-ok"),
        "{row}"
    );
    assert!(!page.contains("secret-argument-1"), "{page}");
    // The JSON the page's script polls gives only what came after what the page shows.
    let last = page
        .split("data-last=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    let (_, newer) = get(
        &c,
        &server,
        &login.cookie,
        &format!("/console/calls.json?after={last}"),
    );
    assert_eq!(
        serde_json::from_str::<Value>(&newer).unwrap()["calls"],
        json!([])
    );
    host.call("alpha__fail", json!({}));
    let (status, newer) = get(
        &c,
        &server,
        &login.cookie,
        &format!("/console/calls.json?after={last}"),
    );
    assert_eq!(status, StatusCode::OK);
    let newer: Value = serde_json::from_str(&newer).unwrap();
    let calls = newer["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{newer}");
    assert_eq!(calls[0]["name"], "alpha__fail");
    assert_eq!(calls[0]["outcome"], "tool_error");
    assert_eq!(calls[0]["team"], "red");
    // Without a login there is nothing to read.
    let r = c
        .get(server.admin_url("/console/calls.json"))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
}
