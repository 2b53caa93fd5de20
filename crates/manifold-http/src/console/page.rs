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

/// Text made safe to place in HTML, in an element or a quoted attribute.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// Text made safe to place in a URL's query string: every byte but the unreserved ones
/// percent-encoded.
pub(super) fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(byte))
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

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
    fn values_from_outside_cannot_open_markup() {
        assert_eq!(
            escape("<script>\"x\" & 'y'</script>"),
            "&lt;script&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/script&gt;"
        );
    }

    #[test]
    fn a_name_in_a_query_string_is_encoded() {
        assert_eq!(url_encode("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
    }

    #[test]
    fn every_placeholder_is_filled() {
        let filled = fill("<p>{{a}} and {{b}}</p>", &[("a", "{{b}}"), ("b", "2")]);
        assert_eq!(filled, "<p>{{b}} and 2</p>");
    }
}
