//! Tests of authentication and the ACL ([`super`]).

use super::*;
use crate::clock::Clock;

#[derive(Debug)]
struct At(u64);
impl Clock for At {
    fn now(&self) -> u64 {
        self.0
    }
}

fn user(ak: &str, sk: &str, sup: bool) -> UserSpec {
    UserSpec {
        access_key: ak.into(),
        secret_key: sk.into(),
        super_user: sup,
        session_token: None,
    }
}

const NOW: u64 = 1_772_360_100_000; // 20260301T101500Z

fn open(cfg: &AuthFileConfig, dir: &Path) -> Arc<Auth> {
    Auth::open(
        cfg,
        Some(dir),
        Arc::new(At(NOW)),
        Arc::new(Metrics::default()),
    )
    .unwrap()
}

fn headers(ak: &str, sk: &str, dt: &str) -> impl Fn(&str) -> Option<String> {
    let auth = sign::grpc_authorization(ak, sk, dt);
    let dt = dt.to_string();
    move |h: &str| match h {
        sign::AUTHORIZATION => Some(auth.clone()),
        sign::DATE_TIME => Some(dt.clone()),
        _ => None,
    }
}

#[test]
fn no_users_means_open() {
    let d = tempfile::tempdir().unwrap();
    let a = open(&AuthFileConfig::default(), d.path());
    assert!(!a.enabled());
    assert_eq!(a.authenticate_headers(|_| None), Ok(Identity::Open));
    assert!(a
        .authorize(
            &Identity::Open,
            None,
            &[Need::new(Resource::topic("t"), &[Action::Pub])]
        )
        .is_ok());
}

#[test]
fn grpc_failures_are_named_and_never_show_the_secret() {
    let d = tempfile::tempdir().unwrap();
    let cfg = AuthFileConfig {
        users: vec![
            user("alice", "s3cret-value", false),
            user("root", "r", true),
        ],
        timestamp_window_s: Some(300),
        client_utc_offsets: Some(vec!["+00:00".into()]),
        ..Default::default()
    };
    let a = open(&cfg, d.path());
    let dt = "20260301T101500Z";
    let id = a
        .authenticate_headers(headers("alice", "s3cret-value", dt))
        .unwrap();
    assert_eq!(
        id,
        Identity::User {
            name: "alice".into(),
            super_user: false
        }
    );
    let cases = [
        (
            a.authenticate_headers(|_| None),
            Failure::NoCredentials,
            "no credentials",
        ),
        (
            a.authenticate_headers(headers("", "", dt)),
            Failure::NoCredentials,
            "no credentials",
        ),
        (
            a.authenticate_headers(headers("bob", "x", dt)),
            Failure::UnknownKey,
            BAD_SIGNATURE,
        ),
        (
            a.authenticate_headers(headers("alice", "wrong", dt)),
            Failure::BadSignature,
            BAD_SIGNATURE,
        ),
        (
            a.authenticate_headers(headers("alice", "s3cret-value", "20260301T091500Z")),
            Failure::ExpiredTimestamp,
            "expired timestamp",
        ),
    ];
    for (r, failure, text) in cases {
        let r = r.unwrap_err();
        assert_eq!(r.failure, failure, "{r}");
        assert!(r.message.starts_with("UNAUTHORIZED: "), "{r}");
        assert!(r.message.contains(text), "{r}");
        assert!(!r.message.contains("s3cret"), "{r}");
    }
}

#[test]
fn session_tokens_are_required_when_set() {
    let d = tempfile::tempdir().unwrap();
    let mut u = user("t", "k", true);
    u.session_token = Some("tok".into());
    let a = open(
        &AuthFileConfig {
            users: vec![u],
            ..Default::default()
        },
        d.path(),
    );
    let base = headers("t", "k", "20260301T101500Z");
    let e = a.authenticate_headers(&base).unwrap_err();
    assert_eq!(e.failure, Failure::BadSessionToken);
    let with = |h: &str| {
        if h == sign::SESSION_TOKEN {
            Some("tok".to_string())
        } else {
            base(h)
        }
    };
    assert!(a.authenticate_headers(with).is_ok());
}

#[test]
fn remoting_signatures() {
    let d = tempfile::tempdir().unwrap();
    let a = open(
        &AuthFileConfig {
            users: vec![user("rocketmq2", "12345678", true)],
            ..Default::default()
        },
        d.path(),
    );
    let mut ext = BTreeMap::new();
    ext.insert("topic".to_string(), "T".to_string());
    ext.insert(sign::ACCESS_KEY.to_string(), "rocketmq2".to_string());
    let sig = sign::remoting_signature("12345678", &ext, 473, b"body");
    ext.insert(sign::SIGNATURE.to_string(), sig);
    assert!(a.authenticate_remoting(&ext, 473, b"body").is_ok());
    assert_eq!(
        a.authenticate_remoting(&ext, 473, b"bodz")
            .unwrap_err()
            .failure,
        Failure::BadSignature
    );
    ext.insert("topic".into(), "U".into());
    assert_eq!(
        a.authenticate_remoting(&ext, 473, b"body")
            .unwrap_err()
            .failure,
        Failure::BadSignature
    );
    ext.remove(sign::ACCESS_KEY);
    assert_eq!(
        a.authenticate_remoting(&ext, 473, b"body")
            .unwrap_err()
            .failure,
        Failure::NoCredentials
    );
}

#[test]
fn admin_changes_persist_and_config_entries_are_kept() {
    let d = tempfile::tempdir().unwrap();
    let cfg = AuthFileConfig {
        users: vec![user("root", "r", true)],
        acls: vec![EntrySpec {
            user: "root".into(),
            resource: "Topic:a".into(),
            actions: vec!["Pub".into()],
            decision: "Allow".into(),
            source_ips: vec![],
        }],
        ..Default::default()
    };
    let a = open(&cfg, d.path());
    a.put_user(user("alice", "s", false)).unwrap();
    let spec = EntrySpec {
        user: "alice".into(),
        resource: "Topic:t".into(),
        actions: vec!["Pub".into()],
        decision: "Allow".into(),
        source_ips: vec![],
    };
    assert!(!a.put_entry(&spec).unwrap());
    assert!(
        a.put_entry(&spec).unwrap(),
        "same user and resource: replaced"
    );
    assert!(a.remove_user("root").unwrap_err().contains("config file"));
    assert!(a.remove_entry("root", "Topic:a").is_err());
    assert!(a
        .put_entry(&EntrySpec {
            user: "nobody".into(),
            ..spec.clone()
        })
        .unwrap_err()
        .contains("no user"));
    // A restart sees the admin's changes.
    let b = open(&cfg, d.path());
    let users: Vec<String> = b.users().into_iter().map(|(u, _)| u.access_key).collect();
    assert_eq!(users, vec!["alice", "root"]);
    assert!(
        b.users().iter().all(|(u, _)| u.secret_key.is_empty()),
        "listings hold no secret"
    );
    assert_eq!(b.entries().len(), 2);
    let alice = Identity::User {
        name: "alice".into(),
        super_user: false,
    };
    assert!(b
        .authorize(
            &alice,
            None,
            &[Need::new(Resource::topic("t"), &[Action::Pub])]
        )
        .is_ok());
    b.remove_user("alice").unwrap();
    assert_eq!(b.entries().len(), 1, "a removed user's entries go too");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(d.path().join(STORE_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[test]
fn the_first_user_is_a_super_user_and_the_last_one_stays() {
    let d = tempfile::tempdir().unwrap();
    let a = open(&AuthFileConfig::default(), d.path());
    assert!(a
        .put_user(user("alice", "s", false))
        .unwrap_err()
        .contains("super user"));
    a.put_user(user("root", "r", true)).unwrap();
    assert!(a.enabled());
    a.put_user(user("alice", "s", false)).unwrap();
    assert!(a
        .put_user(user("root", "r", false))
        .unwrap_err()
        .contains("last super user"));
    assert!(a
        .remove_user("root")
        .unwrap_err()
        .contains("last super user"));
    a.remove_user("alice").unwrap();
    a.remove_user("root").unwrap();
    assert!(!a.enabled());
}
