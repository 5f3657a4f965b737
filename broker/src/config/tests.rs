use super::*;

#[test]
fn store_host_is_ipv4_or_ipv6_in_the_config_file() {
    use rocklet_core::config::StoreHost;
    let at = |ip: &str| {
        FileConfig::parse(&format!(
            "[core]\nstore_host = {{ ip = {ip}, port = 10911 }}\n"
        ))
        .map(|f| f.core.store_host)
    };
    assert_eq!(at("[10, 0, 0, 2]"), Ok(StoreHost::V4([10, 0, 0, 2], 10911)));
    let mut v6 = [0u8; 16];
    v6[0] = 0x20;
    v6[15] = 1;
    assert_eq!(
        at("[32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]"),
        Ok(StoreHost::V6(v6, 10911))
    );
    let e = at("[1, 2, 3, 4, 5]").unwrap_err();
    assert!(e.contains("4 bytes (IPv4) or 16 (IPv6)"), "{e}");
}

#[test]
fn parses_every_section() {
    let f = FileConfig::parse(
        r#"
        listen = "127.0.0.1:9999"
        [core]
        flush = "sync"
        flush_interval_ms = 100
        transaction_timeout_ms = 1000
        delay_levels = [1000, 2000]
        [[topics]]
        name = "orders"
        queues = 2
        message_types = ["TRANSACTION"]
        "#,
    )
    .unwrap();
    let c = BrokerConfig::from_file(f);
    assert_eq!(c.listen.port(), 9999);
    assert_eq!(c.core.flush_interval_ms, 100);
    assert_eq!(c.core.flush, rocklet_core::FlushMode::Sync);
    assert_eq!(c.core.transaction_timeout_ms, 1000);
    assert_eq!(c.core.delay_levels, vec![1000, 2000]);
    assert_eq!(
        c.accepted_types("orders"),
        vec![TopicMessageType::Transaction]
    );
    assert_eq!(c.accepted_types("other").len(), 4);
    c.validate().unwrap();
}

#[test]
fn remoting_listeners_default_off_in_the_library_and_resolve_for_the_command() {
    let f = FileConfig::parse("remoting_listen = \"off\"\nnamesrv_listen = \"127.0.0.1:9999\"")
        .unwrap();
    assert_eq!(f.remoting_listen, Some(Listen::Off));
    let c = BrokerConfig::from_file(f);
    assert_eq!(c.remoting_listen, None);
    assert_eq!(c.namesrv_listen, Some("127.0.0.1:9999".parse().unwrap()));
    assert_eq!(BrokerConfig::default().remoting_listen, None);
    let grpc: SocketAddr = "127.0.0.1:8081".parse().unwrap();
    assert_eq!(
        resolve_listen(None, DEFAULT_REMOTING_LISTEN, grpc),
        Some("127.0.0.1:10911".parse().unwrap())
    );
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    assert_eq!(resolve_listen(None, DEFAULT_NAMESRV_LISTEN, any), Some(any));
    assert_eq!(
        resolve_listen(Some(Listen::Off), DEFAULT_NAMESRV_LISTEN, grpc),
        None
    );
    let e = FileConfig::parse("remoting_listen = \"nowhere\"").unwrap_err();
    assert!(e.contains("nowhere"), "{e}");
}

#[test]
fn listen_addresses_take_host_names() {
    let a = socket_addr("localhost:8081").unwrap();
    assert!(a.ip().is_loopback() && a.port() == 8081, "{a}");
    assert_eq!(socket_addr("[::1]:9").unwrap().port(), 9);
    let f = FileConfig::parse("listen = \"localhost:0\"\nadmin_listen = \"localhost:7\"").unwrap();
    assert!(f.listen.unwrap().ip().is_loopback());
    assert_eq!(f.admin_listen.unwrap().port(), 7);
    assert!(matches!("localhost:5".parse::<Listen>(), Ok(Listen::At(a)) if a.port() == 5));
    for (bad, says) in [
        ("localhost", "no port"),
        ("localhost:99999", "not HOST:PORT"),
        (
            "no-such-host.invalid:1",
            "cannot resolve host `no-such-host.invalid`",
        ),
    ] {
        let e = socket_addr(bad).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
    let e = FileConfig::parse("listen = \"no-such-host.invalid:1\"").unwrap_err();
    assert!(e.contains("no-such-host.invalid"), "{e}");
}

#[test]
fn unknown_fields_are_named() {
    let e = FileConfig::parse("[core]\ntransaction_timeout = 5").unwrap_err();
    assert!(e.contains("transaction_timeout"), "{e}");
    let e = FileConfig::parse("lisen = \"x\"").unwrap_err();
    assert!(e.contains("lisen"), "{e}");
}

#[test]
fn invalid_values_are_named() {
    let mut c = BrokerConfig::default();
    c.core.segment_size = 10;
    assert!(c.validate().unwrap_err().contains("segment_size"));
    let mut c = BrokerConfig::default();
    c.core.flush_interval_ms = 0;
    assert!(c.validate().unwrap_err().contains("flush_interval_ms"));
    let c = BrokerConfig {
        max_concurrent_streams: 0,
        ..BrokerConfig::default()
    };
    assert!(c.validate().unwrap_err().contains("max_concurrent_streams"));
    let c = BrokerConfig {
        max_inflight_receive_bytes: 0,
        ..BrokerConfig::default()
    };
    assert!(c
        .validate()
        .unwrap_err()
        .contains("max_inflight_receive_bytes"));
    let c = BrokerConfig {
        max_batch_messages: 0,
        ..BrokerConfig::default()
    };
    assert!(c.validate().unwrap_err().contains("max_batch_messages"));
    let c = BrokerConfig {
        max_inflight_request_bytes: 9 << 20,
        ..BrokerConfig::default()
    };
    let e = c.validate().unwrap_err();
    assert!(e.contains("max_inflight_request_bytes"), "{e}");
    assert!(
        e.contains("9699328 bytes"),
        "names the largest request: {e}"
    );
    let mut c = BrokerConfig {
        max_inflight_request_bytes: 4 << 20,
        ..BrokerConfig::default()
    };
    c.core.max_message_size = 1 << 20;
    c.core.max_batch_size = 1 << 20;
    c.validate().unwrap();
}

#[test]
fn a_bad_disk_space_warning_level_ratio_is_named() {
    assert_eq!(
        BrokerConfig::default().disk_space_warning_level_ratio,
        DEFAULT_DISK_SPACE_WARNING_LEVEL_RATIO
    );
    let f = FileConfig::parse("disk_space_warning_level_ratio = 0.8").unwrap();
    let c = BrokerConfig::from_file(f);
    assert_eq!(c.disk_space_warning_level_ratio, 0.8);
    c.validate().unwrap();
    for bad in [0.0, -0.5, 1.5, f64::NAN] {
        let c = BrokerConfig {
            disk_space_warning_level_ratio: bad,
            ..BrokerConfig::default()
        };
        let e = c.validate().unwrap_err();
        assert!(
            e.starts_with("invalid config `disk_space_warning_level_ratio`: "),
            "{e}"
        );
    }
}

#[test]
fn the_console_is_off_unless_given_and_its_step_is_checked() {
    let c = BrokerConfig::default();
    assert_eq!(c.console_listen, None);
    assert_eq!(c.console_sample_ms, 10_000);
    let f =
        FileConfig::parse("console_listen = \"127.0.0.1:8083\"\nconsole_sample_ms = 1000").unwrap();
    let c = BrokerConfig::from_file(f);
    assert_eq!(c.console_listen, Some("127.0.0.1:8083".parse().unwrap()));
    assert!(c
        .client_listeners()
        .contains(&"127.0.0.1:8083".parse().unwrap()));
    c.validate().unwrap();
    let c = BrokerConfig {
        console_sample_ms: 5,
        ..BrokerConfig::default()
    };
    assert!(c.validate().unwrap_err().contains("console_sample_ms"));
}

#[test]
fn groups_are_parsed_and_checked() {
    let f = FileConfig::parse(
        "[[groups]]\nname = \"orders\"\nfifo = true\n[[groups]]\nname = \"audit\"",
    )
    .unwrap();
    let c = BrokerConfig::from_file(f);
    assert_eq!(
        c.groups,
        vec![
            GroupDecl {
                name: "orders".into(),
                fifo: true
            },
            GroupDecl {
                name: "audit".into(),
                fifo: false
            }
        ]
    );
    c.validate().unwrap();
    let twice = FileConfig::parse("[[groups]]\nname = \"g\"\n[[groups]]\nname = \"g\"")
        .map(BrokerConfig::from_file)
        .unwrap();
    assert!(twice.validate().unwrap_err().contains("declared twice"));
    let bad = FileConfig::parse("[[groups]]\nname = \"a b\"")
        .map(BrokerConfig::from_file)
        .unwrap();
    let e = bad.validate().unwrap_err();
    assert!(e.contains("groups") && e.contains("a b"), "{e}");
    let e = FileConfig::parse("[[groups]]\nname = \"g\"\norderly = true").unwrap_err();
    assert!(e.contains("orderly"), "{e}");
}

#[test]
fn stream_limit_and_receive_budget_default_and_parse() {
    let c = BrokerConfig::default();
    assert_eq!(c.max_concurrent_streams, 256);
    assert_eq!(c.max_inflight_receive_bytes, 256 << 20);
    assert_eq!(c.max_batch_messages, 10_000);
    assert_eq!(c.max_inflight_request_bytes, 256 << 20);
    let f = FileConfig::parse("max_concurrent_streams = 16\nmax_inflight_receive_bytes = 33554432")
        .unwrap();
    let c = BrokerConfig::from_file(f);
    assert_eq!(c.max_concurrent_streams, 16);
    assert_eq!(c.max_inflight_receive_bytes, 32 << 20);
    c.validate().unwrap();
}

#[test]
fn retention_settings_are_checked_by_name() {
    let c = BrokerConfig::default();
    assert_eq!(c.retention, RetentionConfig::default());
    assert_eq!(c.retention.file_reserved_time_hours, 72.0);
    assert_eq!(c.retention.delete_when, vec![4]);
    let f = FileConfig::parse(
        "file_reserved_time_hours = 0.5\ndelete_when = \"04;16\"\n\
         disk_max_used_space_ratio = 0.6\nretention_check_interval_ms = 500",
    )
    .unwrap();
    let c = BrokerConfig::from_file(f);
    assert_eq!(c.retention.delete_when, vec![4, 16]);
    assert_eq!(c.retention.file_reserved_time_hours, 0.5);
    assert_eq!(c.retention.disk_max_used_space_ratio, 0.6);
    assert_eq!(c.retention.check_interval_ms, 500);
    c.validate().unwrap();
    for bad in ["25", "4am", "04;;16"] {
        let e = FileConfig::parse(&format!("delete_when = \"{bad}\"")).unwrap_err();
        assert!(
            e.contains("`delete_when`") && e.contains("hour of the day"),
            "{e}"
        );
    }
    for (text, field) in [
        (
            "file_reserved_time_hours = -1.0",
            "file_reserved_time_hours",
        ),
        (
            "disk_max_used_space_ratio = 1.5",
            "disk_max_used_space_ratio",
        ),
        (
            "disk_max_used_space_ratio = 0.0",
            "disk_max_used_space_ratio",
        ),
        (
            "disk_space_clean_forcibly_ratio = 2.0",
            "disk_space_clean_forcibly_ratio",
        ),
        (
            "retention_check_interval_ms = 0",
            "retention_check_interval_ms",
        ),
    ] {
        let c = BrokerConfig::from_file(FileConfig::parse(text).unwrap());
        let e = c.validate().unwrap_err();
        assert!(e.contains(&format!("`{field}`")), "{text}: {e}");
    }
}

#[test]
fn checkpoint_settings_are_checked_by_name() {
    let c = BrokerConfig::default();
    assert_eq!(c.checkpoint, CheckpointConfig::default());
    assert_eq!(
        (c.checkpoint.bytes, c.checkpoint.interval_ms),
        (256 << 20, 60_000)
    );
    let f = FileConfig::parse("checkpoint_bytes = 2097152\ncheckpoint_interval_ms = 500").unwrap();
    let c = BrokerConfig::from_file(f);
    assert_eq!(
        (c.checkpoint.bytes, c.checkpoint.interval_ms),
        (2 << 20, 500)
    );
    c.validate().unwrap();
    for (text, want) in [
        (
            "checkpoint_interval_ms = 10",
            "invalid config `checkpoint_interval_ms`: 10 is below 100",
        ),
        (
            "checkpoint_bytes = 1000",
            "invalid config `checkpoint_bytes`: 1000 is below 1048576 (1 MiB)",
        ),
    ] {
        let c = BrokerConfig::from_file(FileConfig::parse(text).unwrap());
        assert_eq!(c.validate().unwrap_err(), want, "{text}");
    }
}
