//! `manifold login`, `manifold connections` and `manifold revoke`: an operator's upstream
//! connections, through a running Manifold's admin address. `manifold login` also works
//! without one: it runs the broker in its own process, with the configured token store and a
//! loopback listener for the authorization server's redirect.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use manifold_auth::Broker;
use manifold_config::Config;
use manifold_http::credentials::Consents;

use crate::admin_client;
use crate::credentials::{lasting_store, BrokerConsents, CompletionHook, Unobserved};

/// How long `xdg-open` may take to hand the link to a browser.
const OPENER_TIMEOUT: Duration = Duration::from_secs(10);

/// `manifold login UPSTREAM`: the link of the upstream's shared login, from the running
/// Manifold when it answers at its admin address, else made here and waited for.
pub fn login(
    path: &Path,
    upstream: &str,
    open: bool,
    token: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let config = manifold_config::load(path)?;
    if let Some(admin) = config.server.admin {
        let asked = format!("/login/{}", encode(upstream));
        if let Ok((status, body)) = admin_client::request(admin, "POST", &asked, token, None) {
            return print_link(admin, status, &body, open);
        }
    }
    login_here(&config, upstream, open)
}

/// The running Manifold's answer to `POST /login/{upstream}`.
fn print_link(admin: SocketAddr, status: u16, body: &str, open: bool) -> anyhow::Result<ExitCode> {
    if status != 200 {
        anyhow::bail!("{admin} refused the login ({status}): {}", body.trim_end());
    }
    let link: serde_json::Value =
        serde_json::from_str(body).context("the admin address's answer is not JSON")?;
    let url = link["url"].as_str().context("the answer has no url")?;
    println!("Open this link to log in (the running Manifold keeps the connection):\n{url}");
    if open {
        open_in_browser(url);
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs the broker here: a loopback listener serves the pages, the link is printed, and the
/// command waits for the login to complete (at most `consent_timeout`).
fn login_here(config: &Config, upstream: &str, open: bool) -> anyhow::Result<ExitCode> {
    let store = lasting_store(&config.credentials)?;
    let mut settings = config.credentials.clone();
    // The browser comes back to this process, not to the listener of `public_url`.
    settings.public_url = None;
    let listen = loopback(settings.callback_listen.as_deref())?;
    let timeout = settings.consent_timeout;
    actix_web::rt::System::new().block_on(async move {
        let (done, mut completed) = tokio::sync::mpsc::unbounded_channel();
        let hook: CompletionHook = Arc::new(move |c| {
            let _ = done.send(c);
        });
        let broker = Broker::new(settings, &config.upstreams, store, Arc::new(Unobserved));
        let consents = BrokerConsents::new(Arc::clone(&broker), hook);
        let (server, bound) = manifold_http::credentials::serve_pages(consents.clone(), listen)
            .with_context(|| format!("cannot listen on {listen} for the login's callback"))?;
        broker.set_base_url(&format!("http://{bound}"));
        let handle = server.handle();
        actix_web::rt::spawn(server);
        let outcome = async {
            let link = consents.consent(upstream).await?;
            println!("Open this link to log in to {upstream}:\n{}", link.url);
            if open {
                open_in_browser(&link.url);
            }
            match tokio::time::timeout(timeout, completed.recv()).await {
                Ok(Some(done)) => {
                    println!("{} is connected.", done.upstream);
                    Ok(ExitCode::SUCCESS)
                }
                _ => anyhow::bail!("no login completed within {}s", timeout.as_secs()),
            }
        }
        .await;
        handle.stop(true).await;
        outcome
    })
}

/// The callback listener's address: `callback_listen`, which must be a loopback address
/// (default 127.0.0.1 with any port).
fn loopback(configured: Option<&str>) -> anyhow::Result<SocketAddr> {
    let addr = match configured {
        None => SocketAddr::from(([127, 0, 0, 1], 0)),
        Some(text) => manifold_config::parse_listen(text)
            .with_context(|| format!("[credentials] callback_listen {text:?} is not IP:PORT"))?,
    };
    if !addr.ip().is_loopback() {
        anyhow::bail!("[credentials] callback_listen must be a loopback address, not {addr}");
    }
    Ok(addr)
}

/// Hands `url` to the desktop's browser; a failure only warns (the link is printed).
fn open_in_browser(url: &str) {
    let opened = std::process::Command::new("xdg-open")
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match opened {
        Ok(mut child) => {
            let deadline = std::time::Instant::now() + OPENER_TIMEOUT;
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        Err(e) => eprintln!("manifold: cannot run xdg-open ({e}); open the link yourself"),
    }
}

/// Where a running Manifold's admin address is: `--admin`, else the config's `server.admin`.
pub fn admin_address(
    admin: Option<SocketAddr>,
    config: Option<&Path>,
) -> anyhow::Result<SocketAddr> {
    if let Some(addr) = admin {
        return Ok(addr);
    }
    let path = config.context("give --admin ADDR or --config FILE (with server.admin)")?;
    manifold_config::load(path)?
        .server
        .admin
        .with_context(|| format!("{} has no server.admin", path.display()))
}

/// `manifold connections`: every kept connection (of a team, or of one caller), never a token.
pub fn list(
    admin: SocketAddr,
    team: Option<&str>,
    principal: Option<&str>,
    token: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let mut query = Vec::new();
    if let Some(team) = team {
        query.push(format!("team={}", encode(team)));
    }
    if let Some(principal) = principal {
        query.push(format!("principal={}", encode(principal)));
    }
    let path = match query.is_empty() {
        true => "/connections".to_owned(),
        false => format!("/connections?{}", query.join("&")),
    };
    let (status, body) = admin_client::request(admin, "GET", &path, token, None)?;
    if status != 200 {
        anyhow::bail!("{admin} refused ({status}): {}", body.trim_end());
    }
    let listing: serde_json::Value =
        serde_json::from_str(&body).context("the admin address's answer is not JSON")?;
    let connections = listing["connections"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if connections.is_empty() {
        println!("no connections");
    }
    for c in connections {
        println!("{}", describe(&c));
    }
    Ok(ExitCode::SUCCESS)
}

/// One connection on one line: upstream, who, scopes, expiry, whether it refreshes.
fn describe(c: &serde_json::Value) -> String {
    let text = |k: &str| c[k].as_str().unwrap_or("?").to_owned();
    let scopes: Vec<&str> = c["scopes"]
        .as_array()
        .map(|s| s.iter().filter_map(serde_json::Value::as_str).collect())
        .unwrap_or_default();
    let expires = c["expires_at_ms"].as_u64().map_or_else(
        || "no expiry".to_owned(),
        |ms| format!("expires_at_ms={ms}"),
    );
    let refresh = if c["refreshable"].as_bool() == Some(true) {
        "refreshable"
    } else {
        "not refreshable"
    };
    format!(
        "{}\t{}\towner={}\tscopes={}\t{expires}\t{refresh}",
        text("upstream"),
        text("principal"),
        text("owner"),
        scopes.join(" ")
    )
}

/// `manifold revoke`: forgets a caller's connections (or the shared login's), to one
/// upstream or to all.
pub fn revoke(
    admin: SocketAddr,
    whose: &serde_json::Value,
    upstream: Option<&str>,
    token: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let mut body = whose.clone();
    if let Some(upstream) = upstream {
        body["upstream"] = upstream.into();
    }
    let body = body.to_string();
    let (status, answer) =
        admin_client::request(admin, "POST", "/connections/revoke", token, Some(&body))?;
    if status != 200 {
        anyhow::bail!("{admin} refused ({status}): {}", answer.trim_end());
    }
    let answer: serde_json::Value =
        serde_json::from_str(&answer).context("the admin address's answer is not JSON")?;
    println!(
        "revoked {} connection(s)",
        answer["revoked"].as_u64().unwrap_or(0)
    );
    Ok(ExitCode::SUCCESS)
}

/// Percent-encoding of everything but the unreserved characters (RFC 3986).
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn principals_are_encoded_for_a_query() {
        assert_eq!(
            super::encode("jwt:https://iss#a b"),
            "jwt%3Ahttps%3A%2F%2Fiss%23a%20b"
        );
    }

    #[test]
    fn the_callback_listener_is_loopback_only() {
        assert!(super::loopback(None).is_ok());
        assert!(super::loopback(Some("127.0.0.1:8123")).is_ok());
        assert!(super::loopback(Some("0.0.0.0:8123")).is_err());
    }
}
