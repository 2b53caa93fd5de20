//! The console's pages: templates compiled into the binary, filled by plain substitution with
//! every value escaped, and the embedded stylesheet and script.

use actix_web::http::header;
use actix_web::HttpResponse;

const LAYOUT: &str = include_str!("templates/layout.html");
pub(super) const LOGIN: &str = include_str!("templates/login.html");
pub(super) const OVERVIEW: &str = include_str!("templates/overview.html");
pub(super) const CATALOG: &str = include_str!("templates/catalog.html");
pub(super) const CATALOG_ITEM: &str = include_str!("templates/catalog_item.html");
pub(super) const CONFIG: &str = include_str!("templates/config.html");
pub(super) const TEAMS: &str = include_str!("templates/teams.html");
pub(super) const CONNECTIONS: &str = include_str!("templates/connections.html");
pub(super) const STYLESHEET: &str = include_str!("assets/console.css");
pub(super) const REFRESH_SCRIPT: &str = include_str!("assets/refresh.js");
pub(super) const TRY: &str = include_str!("templates/try.html");
pub(super) const CALLS: &str = include_str!("templates/calls.html");
pub(super) const CALLS_SCRIPT: &str = include_str!("assets/calls.js");

pub(super) use crate::markup::{escape, url_encode};

/// `template` with each `{{name}}` replaced by its value, in one pass over the template (a
/// value is never read for placeholders). Values are HTML already: callers escape what came
/// from outside with [`escape`]; a placeholder without a value is left out.
pub(super) fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return out;
        };
        let name = &after[..end];
        if let Some((_, value)) = values.iter().find(|(n, _)| *n == name) {
            out.push_str(value);
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

/// What the header of a page shows once logged in: the pages, and a logout form carrying
/// the login's CSRF token.
pub(super) fn nav(csrf: Option<&str>) -> String {
    let links: String = PAGES
        .iter()
        .map(|(href, name)| format!("<a href=\"{href}\">{name}</a>"))
        .collect();
    // A bearer token needs no logout: only a login's cookie has something to end.
    let logout = csrf.map_or_else(String::new, |csrf| {
        format!(
            "<form method=\"post\" action=\"/console/logout\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <button type=\"submit\" id=\"logout\">Log out</button></form>",
            escape(csrf)
        )
    });
    format!("<nav>{links}</nav>\n{logout}")
}

/// The console's pages, in the order the navigation lists them.
const PAGES: &[(&str, &str)] = &[
    ("/console/", "Overview"),
    ("/console/catalog", "Catalog"),
    ("/console/try", "Try a tool"),
    ("/console/teams", "Teams"),
    ("/console/connections", "Connections"),
    ("/console/calls", "Live calls"),
    ("/console/config", "Configuration"),
];

/// A whole page. `refresh` is how often, in seconds, the embedded script reloads it (0:
/// never, and the script is left out).
pub(super) fn page(title: &str, nav: &str, body: &str, refresh: u32) -> String {
    let script = if refresh > 0 {
        "<script src=\"/console/assets/refresh.js\"></script>"
    } else {
        ""
    };
    fill(
        LAYOUT,
        &[
            ("title", &escape(title)),
            ("refresh", &refresh.to_string()),
            ("nav", nav),
            ("body", body),
            ("script", script),
        ],
    )
}

/// An HTML answer.
pub(super) fn html(mut builder: actix_web::HttpResponseBuilder, text: String) -> HttpResponse {
    builder.content_type("text/html; charset=utf-8").body(text)
}

/// A 303 to `location` (after a form, or to the login page).
pub(super) fn see_other(location: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, location))
        .finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled() {
        let filled = fill("<p>{{a}} and {{b}}</p>", &[("a", "{{b}}"), ("b", "2")]);
        assert_eq!(filled, "<p>{{b}} and 2</p>");
    }
}
