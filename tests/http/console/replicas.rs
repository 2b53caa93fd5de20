//! The overview names the replica it is served by and, when replicas share a Redis, lists
//! every replica announcing itself there with its admin address, against a real
//! `redis-server`.

use reqwest::blocking::Client;

use manifold_testkit::http::*;
use manifold_testkit::process::*;
use manifold_testkit::redis_server::{unique_prefix, RedisServer};

use super::TOKEN;

fn replica(redis: Option<(&RedisServer, &str)>) -> Server {
    let shared = redis.map_or_else(String::new, |(redis, prefix)| {
        format!(
            "[limits]\nbackend = \"redis\"\nredis_url = {url:?}\nkey_prefix = {prefix:?}\n\n",
            url = redis.url()
        )
    });
    Server::start(&format!(
        "[server]\nadmin = \"127.0.0.1:0\"\nmetrics_token = \"{TOKEN}\"\n\n{shared}{}",
        named_fixture("alpha")
    ))
}

fn overview(server: &Server) -> String {
    Client::new()
        .get(server.admin_url("/console/"))
        .bearer_auth(TOKEN)
        .send()
        .unwrap()
        .text()
        .unwrap()
}

/// The id the overview says it is served by.
fn id_of(page: &str) -> String {
    let at = page
        .find("<span id=\"replica\">")
        .expect("the replica's id")
        + 19;
    page[at..].split('<').next().unwrap().to_owned()
}

#[test]
fn replicas_sharing_a_redis_list_each_other_with_their_admin_addresses() {
    let redis = RedisServer::start();
    let prefix = unique_prefix("console-replicas");
    let a = replica(Some((&redis, &prefix)));
    let b = replica(Some((&redis, &prefix)));
    let (id_a, id_b) = (id_of(&overview(&a)), id_of(&overview(&b)));
    assert_eq!(id_a.len(), 16, "{id_a}");
    assert_ne!(id_a, id_b, "each process is a replica of its own");
    eventually("a lists both replicas", || {
        let page = overview(&a);
        page.contains(&format!("data-replica=\"{id_b}\""))
            && page.contains(&format!("data-replica=\"{id_a}\""))
    });
    let page = overview(&a);
    let row_b = page
        .lines()
        .find(|l| l.contains(&format!("data-replica=\"{id_b}\"")))
        .unwrap();
    let b_admin = b.admin_url("/console/");
    assert!(row_b.contains(&b_admin), "b's console is linked: {row_b}");
    let row_a = page
        .lines()
        .find(|l| l.contains(&format!("data-replica=\"{id_a}\"")))
        .unwrap();
    assert!(row_a.contains("(this one)"), "{row_a}");
}

#[test]
fn a_replica_sharing_nothing_names_itself_only() {
    let server = replica(None);
    let page = overview(&server);
    assert_eq!(id_of(&page).len(), 16);
    assert!(!page.contains("id=\"replicas\""), "{page}");
}
