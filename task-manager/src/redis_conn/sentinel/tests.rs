use super::*;

const SECRET: &str = "s3cr3t-pa55";

#[test]
fn a_sentinel_url_names_its_sentinels_master_and_credentials() {
    let url = SentinelUrl::parse(&format!(
        "redis+sentinel://crucible-api:{SECRET}%40x@s1:26380,s2,[::1]:26381/crucible?sentinel_password=sp%2Bw"
    ))
    .expect("valid");
    assert_eq!(
        url.sentinels,
        vec![
            ("s1".to_owned(), 26380),
            ("s2".to_owned(), SENTINEL_PORT),
            ("::1".to_owned(), 26381)
        ]
    );
    assert_eq!(url.master_name, "crucible");
    assert_eq!(url.data.username.as_deref(), Some("crucible-api"));
    assert_eq!(url.data.password, Some(format!("{SECRET}@x")));
    assert_eq!(url.sentinel.username, None);
    assert_eq!(url.sentinel.password.as_deref(), Some("sp+w"));
}

#[test]
fn a_sentinel_url_is_printed_without_its_passwords() {
    let raw = format!(
        "redis+sentinel://crucible-worker:{SECRET}@s1:26379,s2:26379/crucible?sentinel_username=mon&sentinel_password={SECRET}"
    );
    let printed = super::super::redact_url(&raw);
    assert_eq!(
        printed,
        "redis+sentinel://crucible-worker:***@s1:26379,s2:26379/crucible?sentinel_username=mon&sentinel_password=***"
    );
    assert!(!format!("{:?}", SentinelUrl::parse(&raw).unwrap()).contains(SECRET));
    // Without credentials nothing is added.
    assert_eq!(
        super::super::redact_url("redis+sentinel://s1/m"),
        "redis+sentinel://s1:26379/m"
    );
}

#[test]
fn a_bad_sentinel_url_is_refused_with_its_reason_and_without_its_password() {
    let cases = [
        (
            format!("redis+sentinel://u:{SECRET}@s1:26379"),
            "names no master",
        ),
        (
            format!("redis+sentinel://u:{SECRET}@s1:26379/"),
            "master name",
        ),
        (format!("redis+sentinel://u:{SECRET}@s1:x/m"), "port"),
        (
            format!("redis+sentinel://u:{SECRET}@s1,,s2/m"),
            "empty Sentinel host",
        ),
        (
            format!("redis+sentinel://u:{SECRET}@s1/m?db=2"),
            "unknown query parameter",
        ),
    ];
    for (raw, words) in cases {
        let target = crate::RedisTarget::new(&raw);
        let Err(e) = target.nodes() else {
            panic!("{raw} was accepted");
        };
        let text = e.to_string();
        assert!(text.contains(words), "{text:?} does not say {words:?}");
        assert!(!text.contains(SECRET), "password in {text:?}");
        assert!(text.contains("u:***@s1"), "{text:?} does not name the URL");
    }
}

#[test]
fn tls_files_with_a_plain_sentinel_url_are_refused() {
    let target = crate::RedisTarget::new("redis+sentinel://s1/m").with_tls(crate::TlsFiles {
        ca_file: Some("/etc/ca.pem".into()),
        ..Default::default()
    });
    let Err(e) = target.nodes() else {
        panic!("accepted");
    };
    assert!(e.to_string().contains("not rediss+sentinel://"), "{e}");
}

#[test]
fn the_tls_form_is_parsed_and_printed_as_such() {
    let url = SentinelUrl::parse(&format!("rediss+sentinel://u:{SECRET}@s1,s2:26380/m")).unwrap();
    assert!(url.tls);
    assert_eq!(
        url.redacted(),
        "rediss+sentinel://u:***@s1:26379,s2:26380/m"
    );
    assert!(!SentinelUrl::parse("redis+sentinel://s1/m").unwrap().tls);
}

#[tokio::test]
async fn no_sentinel_listening_is_transient() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let target = crate::RedisTarget::new(format!("redis+sentinel://127.0.0.1:{port}/m"));
    let Ok(crate::redis_conn::Nodes::Sentinel(primary)) = target.nodes() else {
        panic!("a sentinel URL");
    };
    let e = checked_connection(&primary, Duration::from_millis(500))
        .await
        .expect_err("nothing listens");
    assert!(e.is_transient(), "{e}");
}
