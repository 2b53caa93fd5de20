use super::*;
use manifold_config::{QuotaConfig, RateConfig};

fn def(id: &str, rate: Option<RateConfig>, quotas: &[QuotaConfig]) -> Arc<LimitDef> {
    Arc::new(LimitDef {
        id: id.into(),
        rate,
        quotas: quotas.to_vec(),
    })
}

fn args(plan: &Plan<'_>) -> Vec<String> {
    let cmd = plan.command("EVALSHA", "sha");
    cmd.args_iter()
        .map(|a| match a {
            redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn keys_and_arguments() {
    let limits = [
        def(
            "team:a",
            Some(RateConfig {
                count: 50,
                period: Duration::from_secs(3600),
                burst: 10,
            }),
            &[QuotaConfig {
                count: 5000,
                window: Duration::from_secs(86_400),
            }],
        ),
        def(
            "team:a:tool:x",
            None,
            &[
                QuotaConfig {
                    count: 100,
                    window: Duration::from_secs(60),
                },
                // The same window again: one counter, the smaller count.
                QuotaConfig {
                    count: 40,
                    window: Duration::from_secs(60),
                },
            ],
        ),
    ];
    let plan = Plan::new("m", &limits);
    assert_eq!(
        args(&plan),
        [
            "EVALSHA",
            "sha",
            "3",
            "m:rate:team:a",
            "m:quota:team:a:86400",
            "m:quota:team:a:tool:x:60",
            "r",
            "72000000",
            "720000000",
            "q",
            "86400",
            "5000",
            "q",
            "60",
            "40",
        ]
    );
}

#[test]
fn a_limit_given_twice_counts_once() {
    let rate = RateConfig {
        count: 3,
        period: Duration::from_secs(1),
        burst: 1,
    };
    let a = def("a", Some(rate), &[]);
    let limits = [a.clone(), a];
    let plan = Plan::new("m", &limits);
    assert_eq!(plan.entries.len(), 1);
    // A fractional interval is passed as such.
    assert_eq!(
        args(&plan)[4..],
        ["r", "333333.3333333333", "333333.3333333333"]
    );
}

#[test]
fn replies_are_decoded() {
    let limits = [def(
        "a",
        None,
        &[QuotaConfig {
            count: 1,
            window: Duration::from_secs(60),
        }],
    )];
    let plan = Plan::new("m", &limits);
    assert_eq!(plan.decode(Value::Nil).ok(), Some(None));
    let refusal = plan
        .decode(Value::Array(vec![Value::Int(1), Value::Int(1_500_000)]))
        .ok()
        .flatten();
    assert_eq!(
        refusal,
        Some(Refusal {
            kind: RefusalKind::QuotaExceeded,
            limit: "a".into(),
            retry_after: Duration::from_millis(1500),
        })
    );
    for bad in [
        Value::Array(vec![Value::Int(2), Value::Int(1)]),
        Value::Array(vec![Value::Int(0), Value::Int(1)]),
        Value::Int(1),
    ] {
        assert!(matches!(plan.decode(bad), Err(StoreError::Protocol(_))));
    }
}

#[test]
fn connecting_does_not_connect_and_rejects_bad_urls() {
    let config = |url: &str| RedisConfig {
        url: url.to_owned(),
        pool_size: 2,
        timeout: Duration::from_millis(100),
        key_prefix: "m".to_owned(),
    };
    let redis = crate::Redis::default();
    // Nothing listens on port 1; no runtime is needed either.
    assert!(redis
        .connect(&config("redis://127.0.0.1:1/"), "limits.redis_url")
        .is_ok());
    let err = redis
        .connect(&config("redis://:secret@[nope/"), "limits.redis_url")
        .err()
        .unwrap_or_default();
    assert!(
        err.contains("limits.redis_url: unusable Redis URL"),
        "{err}"
    );
    assert!(!err.contains("secret"), "{err}");
    // TLS is not built in: refused here, not at the first check.
    let tls = redis
        .connect(&config("rediss://:secret@127.0.0.1:1/"), "limits.redis_url")
        .err()
        .unwrap_or_default();
    assert!(tls.contains("TLS"), "{tls}");
    assert!(!tls.contains("secret"), "{tls}");
}
