//! The console's teams page: each team's view size, sessions, calls and refusals, and what
//! its quotas counted; the sessions by transport and protocol version.

use serde_json::json;

use manifold_testkit::http::*;
use manifold_testkit::process::*;

use super::{admin_page, TOKEN};

const ENG_KEY: &str = "console-teams-eng-key-0123456789abcdef";
const OPS_KEY: &str = "console-teams-ops-key-0123456789abcdef";

/// Two teams: `eng` sees alpha's echo alone and may call it twice an hour; `ops` sees all.
fn teams_server() -> Server {
    let config = format!(
        "[server]\nadmin = \"127.0.0.1:0\"\nmetrics_token = \"{TOKEN}\"\n\n{}\n\
         [teams.eng]\napi_keys = [\"{ENG_KEY}\"]\ntools = {{ include = [\"alpha__echo\"] }}\n\
         tool_limits = {{ alpha__echo = {{ quota = \"2/hour\" }} }}\n\n\
         [teams.ops]\napi_keys = [\"{OPS_KEY}\"]\n",
        named_fixture("alpha"),
    );
    Server::start(&config)
}

/// The text of the cell of class `class` in the row that starts with `row_start`.
fn cell<'a>(page: &'a str, row_start: &str, class: &str) -> &'a str {
    let row = &page[page
        .find(row_start)
        .unwrap_or_else(|| panic!("no {row_start} in {page}"))..];
    let row = &row[..row.find("</tr>").unwrap()];
    let at = row
        .find(&format!("class=\"num {class}\">"))
        .unwrap_or_else(|| panic!("no {class} in {row}"));
    let text = &row[at..];
    &text[text.find('>').unwrap() + 1..text.find("</td>").unwrap()]
}

#[test]
fn a_teams_calls_refusals_and_quota_use_are_shown() {
    let server = teams_server();
    let mut eng = server.ready_host_using(client_with(&Cred::bearer(ENG_KEY)));
    for text in ["a", "b"] {
        assert_eq!(
            text_of(&eng.call("alpha__echo", json!({ "text": text }))),
            text
        );
    }
    let refused = eng.call("alpha__echo", json!({"text": "c"}));
    assert_eq!(code(&refused), -32015, "the quota refuses: {refused}");
    // A tool outside eng's view is refused as unknown, and counted as denied.
    let hidden = eng.call("alpha__add", json!({"a": 1, "b": 2}));
    assert!(hidden.get("error").is_some(), "{hidden}");
    let _ops = server.ready_host_using(client_with(&Cred::bearer(OPS_KEY)));

    let page = admin_page(&server, "/console/teams");
    let eng_row = "<tr data-team=\"eng\">";
    assert_eq!(cell(&page, eng_row, "tools"), "1", "{page}");
    assert_eq!(cell(&page, eng_row, "sessions"), "1", "{page}");
    assert_eq!(cell(&page, eng_row, "calls"), "4", "{page}");
    assert_eq!(cell(&page, eng_row, "quota-exceeded"), "1", "{page}");
    assert_eq!(cell(&page, eng_row, "denied"), "1", "{page}");
    let ops_row = "<tr data-team=\"ops\">";
    assert_eq!(cell(&page, ops_row, "sessions"), "1", "{page}");
    assert_eq!(cell(&page, ops_row, "calls"), "0", "{page}");
    let quota_row = "<tr data-limit=\"team:eng:tool:alpha__echo\" data-window=\"3600\">";
    assert_eq!(cell(&page, quota_row, "used"), "2", "{page}");
    assert_eq!(cell(&page, quota_row, "count"), "2", "{page}");
    // Both hosts speak Streamable HTTP.
    assert!(
        page.contains("data-transport=\"streamable-http\""),
        "{page}"
    );
    assert!(
        !page.contains(ENG_KEY) && !page.contains(OPS_KEY),
        "no key is shown"
    );
}

#[test]
fn without_limits_the_page_says_so() {
    let config = format!(
        "[server]\nadmin = \"127.0.0.1:0\"\nmetrics_token = \"{TOKEN}\"\n\n{}",
        named_fixture("alpha")
    );
    let server = Server::start(&config);
    let page = admin_page(&server, "/console/teams");
    assert!(page.contains("id=\"no-limits\""), "{page}");
    assert!(page.contains("id=\"no-sessions\""), "{page}");
}
