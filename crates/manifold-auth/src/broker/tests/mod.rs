//! The broker against an in-process upstream and authorization server ([`mock`]), with a
//! test-only in-memory token store.

mod machines;
mod mock;
mod oauth;
mod refusals;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use manifold_config::{
    ClientSettings, CredentialsSettings, Identity, OAuthSettings, Transport, UpstreamAuth,
    UpstreamConfig,
};

use super::{Broker, Caller, Completed, Observe};
use crate::store::{Grant, Owner, StoreError, TokenStore};
pub use mock::Mock;

/// A token store in memory; `shared` makes it act as one replicas share (with the lock).
#[derive(Default)]
pub struct TestStore {
    pub shared: bool,
    grants: Mutex<HashMap<(String, Owner), Grant>>,
    once: Mutex<HashMap<String, (Vec<u8>, Instant)>>,
    locks: Mutex<HashMap<(String, Owner), Instant>>,
}

impl TestStore {
    pub fn shared() -> Arc<Self> {
        Arc::new(Self {
            shared: true,
            ..Self::default()
        })
    }
}

impl TokenStore for TestStore {
    fn is_shared(&self) -> bool {
        self.shared
    }
    fn get<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<Option<Grant>, StoreError>> {
        let grant = self
            .grants
            .lock()
            .unwrap()
            .get(&(upstream.to_owned(), *owner))
            .cloned();
        async move { Ok(grant) }.boxed()
    }
    fn put<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
        grant: &'a Grant,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.grants
            .lock()
            .unwrap()
            .insert((upstream.to_owned(), *owner), grant.clone());
        async { Ok(()) }.boxed()
    }
    fn remove<'a>(
        &'a self,
        upstream: Option<&'a str>,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        let mut grants = self.grants.lock().unwrap();
        let before = grants.len();
        grants.retain(|(u, o), _| o != owner || upstream.is_some_and(|w| w != u));
        let n = before - grants.len();
        async move { Ok(n) }.boxed()
    }
    fn remove_upstream<'a>(
        &'a self,
        upstream: &'a str,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        let mut grants = self.grants.lock().unwrap();
        let before = grants.len();
        grants.retain(|(u, _), _| u != upstream);
        let n = before - grants.len();
        async move { Ok(n) }.boxed()
    }
    fn list(&self) -> BoxFuture<'_, Result<Vec<(String, Owner, Grant)>, StoreError>> {
        let all = self
            .grants
            .lock()
            .unwrap()
            .iter()
            .map(|((u, o), g)| (u.clone(), *o, g.clone()))
            .collect();
        async move { Ok(all) }.boxed()
    }
    fn lock<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let mut locks = self.locks.lock().unwrap();
        let now = Instant::now();
        let key = (upstream.to_owned(), *owner);
        let free = locks.get(&key).is_none_or(|until| *until <= now);
        if free {
            locks.insert(key, now + ttl);
        }
        async move { Ok(free) }.boxed()
    }
    fn unlock<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.locks
            .lock()
            .unwrap()
            .remove(&(upstream.to_owned(), *owner));
        async { Ok(()) }.boxed()
    }
    fn put_once<'a>(
        &'a self,
        key: &'a str,
        value: &'a [u8],
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.once
            .lock()
            .unwrap()
            .insert(key.to_owned(), (value.to_vec(), Instant::now() + ttl));
        async { Ok(()) }.boxed()
    }
    fn peek_once<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        let value = self
            .once
            .lock()
            .unwrap()
            .get(key)
            .filter(|(_, t)| *t > Instant::now())
            .map(|(v, _)| v.clone());
        async move { Ok(value) }.boxed()
    }
    fn take_once<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        let value = self
            .once
            .lock()
            .unwrap()
            .remove(key)
            .filter(|(_, t)| *t > Instant::now())
            .map(|(v, _)| v);
        async move { Ok(value) }.boxed()
    }
}

/// What the broker reported, as `kind:upstream[:ok]` lines.
#[derive(Default)]
pub struct Recorder(pub Mutex<Vec<String>>);

impl Recorder {
    pub fn saw(&self, line: &str) -> usize {
        self.0.lock().unwrap().iter().filter(|l| *l == line).count()
    }
}

impl Observe for Recorder {
    fn consent_asked(&self, upstream: &str) {
        self.0.lock().unwrap().push(format!("asked:{upstream}"));
    }
    fn consent_completed(&self, upstream: &str) {
        self.0.lock().unwrap().push(format!("completed:{upstream}"));
    }
    fn consent_expired(&self, upstream: &str) {
        self.0.lock().unwrap().push(format!("expired:{upstream}"));
    }
    fn refreshed(&self, upstream: &str, ok: bool) {
        self.0
            .lock()
            .unwrap()
            .push(format!("refreshed:{upstream}:{ok}"));
    }
}

pub fn settings() -> CredentialsSettings {
    CredentialsSettings {
        timeout: Duration::from_secs(5),
        ..CredentialsSettings::default()
    }
}

/// An HTTP upstream `key` at `url` with `auth`.
pub fn upstream(key: &str, url: &str, auth: UpstreamAuth) -> UpstreamConfig {
    let text = format!("[upstreams.{key}]\nurl = \"{url}\"\n");
    let config =
        manifold_config::parse_str(Path::new("/etc/manifold/manifold.toml"), &text, &|_| None)
            .unwrap();
    let mut upstream = config.upstreams.into_iter().next().unwrap();
    match &mut upstream.transport {
        Transport::Http(http) => http.auth = Some(auth),
        Transport::Stdio(_) | Transport::OpenApi(_) => unreachable!(),
    }
    upstream
}

pub fn oauth(identity: Identity) -> UpstreamAuth {
    UpstreamAuth::OAuth(OAuthSettings {
        identity,
        client: ClientSettings {
            dynamic_registration: true,
            ..ClientSettings::default()
        },
        scopes: None,
        authorization_server: None,
        catalog_login: false,
    })
}

pub struct Setup {
    pub broker: Arc<Broker>,
    pub store: Arc<TestStore>,
    pub seen: Arc<Recorder>,
}

pub fn setup(
    settings: CredentialsSettings,
    upstreams: &[UpstreamConfig],
    store: Arc<TestStore>,
) -> Setup {
    let seen = Arc::new(Recorder::default());
    let broker = Broker::new(settings, upstreams, store.clone(), seen.clone());
    broker.set_base_url("http://127.0.0.1:9");
    Setup {
        broker,
        store,
        seen,
    }
}

pub fn caller(name: &str) -> Caller {
    Caller::new(Arc::from("eng"), Arc::from(format!("key:{name}")), None)
}

/// The query of the URL the broker sent the browser to, as pairs.
pub fn query_of(url: &str) -> HashMap<String, String> {
    reqwest::Url::parse(url)
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect()
}

/// Runs a consent through: link, authorization URL, and the redirect back (with `iss` as
/// `iss` says: the issuer, or what the test gives).
pub async fn consent_through(
    broker: &Broker,
    key: &str,
    who: &Caller,
    iss: Option<&str>,
) -> Result<Completed, super::CredentialError> {
    let link = broker
        .consent(key, who, Some("binding-1".to_owned()))
        .await?;
    let pending = broker.pending(&link.id).await?;
    let url = broker.authorize(&link.id, &pending.owner).await?;
    let query = query_of(&url);
    let mut back = format!("code=the-code&state={}", query["state"]);
    if let Some(iss) = iss {
        back.push_str(&format!(
            "&iss={}",
            iss.replace(':', "%3A").replace('/', "%2F")
        ));
    }
    broker.callback(&back).await
}
