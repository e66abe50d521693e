use super::*;
use std::collections::HashMap;
use std::path::Path;

const SECRET: &str = "s3cr3t-pa55";

fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| map.get(k).cloned()
}

fn err_of(target: &RedisTarget) -> ConnectError {
    match target.client() {
        Ok(_) => panic!("{target:?} was accepted"),
        Err(e) => e,
    }
}

/// The message names the problem and never the password.
fn assert_names(e: &ConnectError, words: &[&str]) {
    let text = e.to_string();
    assert!(!text.contains(SECRET), "password in {text:?}");
    assert!(!format!("{e:?}").contains(SECRET), "password in {e:?}");
    for w in words {
        assert!(text.contains(w), "{text:?} does not name {w:?}");
    }
}

#[test]
fn urls_are_printed_without_their_password() {
    let cases = [
        (
            format!("redis://crucible-api:{SECRET}@queue:6379"),
            "redis://crucible-api:***@queue:6379",
        ),
        (format!("rediss://:{SECRET}@queue/"), "rediss://:***@queue/"),
        ("redis://queue:6379".to_owned(), "redis://queue:6379"),
        (
            "redis://crucible-worker@queue:6379".to_owned(),
            "redis://crucible-worker@queue:6379",
        ),
        (
            format!("redis+unix:///run/redis.sock?user=w&pass={SECRET}"),
            "redis+unix:///run/redis.sock?user=w&pass=***",
        ),
    ];
    for (url, printed) in cases {
        assert_eq!(redact_url(&url), printed);
    }
    // Percent-encoded reserved characters, and a string that is no URL at all (a password
    // pasted in the wrong place), are not echoed either.
    let encoded = "redis://u:p%40ss%3Aw0rd@h:1";
    assert_eq!(redact_url(encoded), "redis://u:***@h:1");
    assert_eq!(redact_url(SECRET), "<unparseable URL>");
    let target = RedisTarget::new(format!("rediss://u:{SECRET}@h:1"));
    assert!(!format!("{target:?}").contains(SECRET));
}

#[test]
fn tls_files_come_from_the_environment_in_pairs() {
    let none = TlsFiles::from_lookup(lookup(&[(CA_FILE_ENV, " ")])).unwrap();
    assert_eq!(none, TlsFiles::default());
    let all = TlsFiles::from_lookup(lookup(&[
        (CA_FILE_ENV, "/etc/crucible/redis-ca.crt"),
        (CLIENT_CERT_ENV, "/etc/crucible/node.crt"),
        (CLIENT_KEY_ENV, "/etc/crucible/node.key"),
    ]))
    .unwrap();
    assert_eq!(
        all.ca_file.as_deref(),
        Some(Path::new("/etc/crucible/redis-ca.crt"))
    );
    let half = TlsFiles::from_lookup(lookup(&[(CLIENT_CERT_ENV, "/c.crt")])).unwrap_err();
    assert_names(&half, &[CLIENT_CERT_ENV, CLIENT_KEY_ENV]);
    let half = TlsFiles::from_lookup(lookup(&[(CLIENT_KEY_ENV, "/c.key")])).unwrap_err();
    assert_names(&half, &[CLIENT_CERT_ENV, CLIENT_KEY_ENV]);
}

#[test]
fn bad_urls_and_contradicting_settings_are_refused_before_any_connection() {
    // A malformed URL with a password in it.
    let e = err_of(&RedisTarget::new(format!("redis://u:{SECRET}@h:1/notadb")));
    assert!(matches!(e, ConnectError::InvalidUrl { .. }), "{e}");
    assert_names(&e, &["Redis URL", "redis://u:***@h:1/notadb"]);
    // Certificate checks cannot be switched off.
    let e = err_of(&RedisTarget::new(format!(
        "rediss://u:{SECRET}@h:1/#insecure"
    )));
    assert_names(&e, &["#insecure", CA_FILE_ENV]);
    // TLS files with a plain URL would silently send the password in clear.
    let ca = TlsFiles {
        ca_file: Some("/etc/crucible/redis-ca.crt".into()),
        ..TlsFiles::default()
    };
    let e = err_of(&RedisTarget::new(format!("redis://u:{SECRET}@h:1")).with_tls(ca));
    assert!(matches!(e, ConnectError::TlsSettings(_)), "{e}");
    assert_names(&e, &[CA_FILE_ENV, "rediss://"]);
}

#[test]
fn tls_files_must_be_readable_and_hold_what_they_should() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("rediss://crucible-worker:{SECRET}@localhost:6380");
    let with_ca = |path: PathBuf| {
        RedisTarget::new(&url).with_tls(TlsFiles {
            ca_file: Some(path),
            ..TlsFiles::default()
        })
    };

    let missing = dir.path().join("missing-ca.crt");
    let e = err_of(&with_ca(missing.clone()));
    assert_names(
        &e,
        &[CA_FILE_ENV, &missing.display().to_string(), "cannot read"],
    );

    let garbage = dir.path().join("garbage.crt");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    assert_names(
        &err_of(&with_ca(garbage.clone())),
        &[CA_FILE_ENV, "no PEM certificate"],
    );

    let issued = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, issued.cert.pem()).unwrap();
    with_ca(ca.clone()).client().expect("a PEM CA is accepted");

    // Mutual TLS: the key file must hold a key (a certificate there is a common slip).
    let key = dir.path().join("client.key");
    std::fs::write(&key, issued.cert.pem()).unwrap();
    let mtls = RedisTarget::new(&url).with_tls(TlsFiles {
        ca_file: Some(ca.clone()),
        client_cert: Some(ca.clone()),
        client_key: Some(key.clone()),
    });
    assert_names(&err_of(&mtls), &[CLIENT_KEY_ENV, "private key"]);
    std::fs::write(&key, issued.signing_key.serialize_pem()).unwrap();
    mtls.client()
        .expect("a certificate and its key are accepted");
}

#[tokio::test]
async fn a_closed_port_is_unreachable_which_is_transient() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let target = RedisTarget::new(format!("redis://u:{SECRET}@127.0.0.1:{port}"));
    let nodes = target.nodes().unwrap();
    let e = check(&nodes, &target.redacted(), Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert_names(&e, &["cannot be reached", "u:***@127.0.0.1"]);
}
