//! The console's configuration page: the file in force with every secret redacted, and a
//! reload from the console with its report, or its refusal while the old configuration stays.

use reqwest::header::LOCATION;
use reqwest::StatusCode;

use manifold_testkit::http::*;
use manifold_testkit::process::*;

use super::{admin_page, browser, TOKEN};

const ENV_SECRET: &str = "sk-env-secret-never-shown";

fn config(extra: &str) -> String {
    format!(
        "[server]\nadmin = \"127.0.0.1:0\"\nmetrics_token = \"{TOKEN}\"\n\n{}\
         env = {{ API_TOKEN = \"{ENV_SECRET}\" }}\n\n{extra}",
        named_fixture("alpha"),
    )
}

/// Presses the reload button: the 303 back to the page.
fn press_reload(server: &Server) {
    let r = browser()
        .post(server.admin_url("/console/config/reload"))
        .bearer_auth(TOKEN)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()[LOCATION], "/console/config");
}

#[test]
fn the_configuration_page_shows_the_file_with_every_secret_redacted() {
    let server = Server::start(&config(""));
    let page = admin_page(&server, "/console/config");
    let path = server.config_path();
    assert!(page.contains(&path.display().to_string()), "{page}");
    assert!(page.contains("No reload since start."), "{page}");
    assert!(
        page.contains("API_TOKEN = &quot;&lt;redacted&gt;&quot;"),
        "{page}"
    );
    assert!(
        page.contains("metrics_token = &quot;&lt;redacted&gt;&quot;"),
        "{page}"
    );
    for secret in [ENV_SECRET, TOKEN] {
        assert!(!page.contains(secret), "{secret} is on the page: {page}");
    }
}

#[test]
fn a_reload_from_the_console_shows_its_report_and_a_refused_file_keeps_the_old_one() {
    let server = Server::start(&config(""));
    std::fs::write(server.config_path(), config(&named_fixture("beta"))).unwrap();
    press_reload(&server);
    let page = admin_page(&server, "/console/config");
    assert!(page.contains("data-outcome=\"reloaded\""), "{page}");
    assert!(
        page.contains("<tr data-report=\"added\"><th>Upstreams added</th><td>beta</td></tr>"),
        "{page}"
    );
    assert!(
        page.contains("[upstreams.beta]"),
        "the file in force: {page}"
    );
    // A file that is not TOML is refused, and the configuration in force stays.
    std::fs::write(server.config_path(), "[upstreams.gamma\ncommand = ").unwrap();
    press_reload(&server);
    let page = admin_page(&server, "/console/config");
    assert!(page.contains("data-outcome=\"refused\""), "{page}");
    assert!(page.contains("id=\"reload-refusal\""), "{page}");
    assert!(page.contains("[upstreams.beta]"), "still in force: {page}");
    let in_force = page.split("id=\"config-text\">").nth(1).unwrap();
    assert!(!in_force.contains("gamma"), "{in_force}");
    let overview = admin_page(&server, "/console/");
    assert!(overview.contains("data-upstream=\"beta\""), "{overview}");
}
