//! The `rocklet` client commands (`send`, `consume`, `tail`) against a running broker,
//! `ROCKLET_ADDR`, listen addresses by host name, sockets bound before the data directory
//! is made, and `rocklet playground`.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::BrokerProc;

const BIN: &str = env!("CARGO_BIN_EXE_rocklet");

fn rocklet(addr: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut c = Command::new(BIN)
        .args(args)
        .env("ROCKLET_ADDR", addr)
        .env_remove("ROCKLET_ACCESS_KEY")
        .env_remove("ROCKLET_SECRET_KEY")
        .env_remove("ROCKLET_TLS_CA")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut i = c.stdin.take().unwrap();
    if let Some(s) = stdin {
        i.write_all(s.as_bytes()).unwrap();
    }
    drop(i);
    c.wait_with_output().unwrap()
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn sorted(s: &str) -> Vec<&str> {
    let mut v: Vec<&str> = s.lines().collect();
    v.sort_unstable();
    v
}

#[test]
fn send_consume_and_tail_reach_the_broker_named_by_rocklet_addr() {
    let tmp = tempfile::tempdir().unwrap();
    let p = BrokerProc::start(&tmp.path().join("data"), &[]);
    let addr = p.addr.to_string();

    let out = ok(&rocklet(
        &addr,
        &[
            "send", "-t", "CliTopic", "--tag", "T1", "--key", "k1", "one", "two",
        ],
        None,
    ));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    for l in &lines {
        let id = l.split(' ').next().unwrap();
        assert!(id.len() == 34 && id.starts_with("01"), "{l}");
        assert!(l.contains(" CliTopic offset "), "{l}");
    }
    // No BODY: a message per line of stdin (a newline inside a body is escaped on output).
    ok(&rocklet(
        &addr,
        &["send", "-t", "CliTopic"],
        Some("three\nfour\n"),
    ));

    let got = ok(&rocklet(
        &addr,
        &["consume", "-t", "CliTopic", "-g", "G1", "--wait", "1"],
        None,
    ));
    assert_eq!(sorted(&got), ["four", "one", "three", "two"]);
    // Acked: the same group gets nothing more; another group gets all of them again, and
    // --tags filters.
    let again = ok(&rocklet(
        &addr,
        &["consume", "-t", "CliTopic", "-g", "G1", "--wait", "0.5"],
        None,
    ));
    assert_eq!(again, "");
    let tagged = ok(&rocklet(
        &addr,
        &[
            "consume", "-t", "CliTopic", "-g", "G2", "--tags", "T1", "-v", "--wait", "1",
        ],
        None,
    ));
    let tl: Vec<&str> = tagged.lines().collect();
    assert_eq!(tl.len(), 2, "{tagged}");
    assert!(tl.iter().all(|l| l.contains("tag=T1 keys=k1 ")), "{tagged}");

    // tail follows: it prints what arrives after it started, and stops at --count.
    let mut tail = Command::new(BIN)
        .args(["tail", "-t", "CliTopic", "-g", "G1", "-n", "2"])
        .env("ROCKLET_ADDR", &addr)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    ok(&rocklet(&addr, &["send", "-t", "CliTopic", "five"], None));
    std::thread::sleep(Duration::from_millis(300));
    ok(&rocklet(
        &addr,
        &["send", "-t", "CliTopic", "six\nlines"],
        None,
    ));
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(s) = tail.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "tail did not stop");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    tail.stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(status.success(), "{status:?} {out}");
    assert_eq!(sorted(&out), ["five", "six\\nlines"]);
    drop(p);
}

/// `rocklet tail` in the background, its stdout and stderr piped.
fn spawn_tail(addr: &str, args: &[&str]) -> std::process::Child {
    Command::new(BIN)
        .arg("tail")
        .args(args)
        .env("ROCKLET_ADDR", addr)
        .env_remove("ROCKLET_ACCESS_KEY")
        .env_remove("ROCKLET_SECRET_KEY")
        .env_remove("ROCKLET_TLS_CA")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the broker logged that `group` started at a topic's end.
fn wait_started(p: &BrokerProc, group: &str) {
    let t = std::time::Instant::now();
    let said = format!("group={group} ");
    while !p
        .log()
        .lines()
        .any(|l| l.contains("started at the topic's end") && l.contains(&said))
    {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "group {group} was not started at the end:\n{}",
            p.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A background tail's output once it stopped by itself (at --count).
fn tail_output(mut tail: std::process::Child) -> String {
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(s) = tail.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "tail did not stop");
        std::thread::sleep(Duration::from_millis(50));
    };
    let (mut out, mut err) = (String::new(), String::new());
    tail.stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    tail.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{status:?}\n{out}\n{err}");
    out
}

#[test]
fn tail_follows_from_now_and_keeps_its_start_across_a_restart_unless_from_beginning() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut p = BrokerProc::start(&data, &[]);
    let addr = p.addr.to_string();
    ok(&rocklet(
        &addr,
        &["send", "-t", "Follow", "n1", "n2", "n3"],
        None,
    ));

    // Sent before the tail started: not printed; sent after: printed.
    let tail = spawn_tail(&addr, &["-t", "Follow", "-g", "Now", "-n", "2"]);
    wait_started(&p, "Now");
    ok(&rocklet(&addr, &["send", "-t", "Follow", "m1", "m2"], None));
    assert_eq!(sorted(&tail_output(tail)), ["m1", "m2"]);

    // The start is durable: a tail that stopped before anything came, a broker killed and
    // restarted, and the group still reads only what was sent after its start.
    let mut tail = spawn_tail(&addr, &["-t", "Follow", "-g", "Later"]);
    wait_started(&p, "Later");
    tail.kill().unwrap();
    tail.wait().unwrap();
    p.kill9();
    let p = BrokerProc::start(&data, &[]);
    let addr = p.addr.to_string();
    ok(&rocklet(&addr, &["send", "-t", "Follow", "m3"], None));
    let got = ok(&rocklet(
        &addr,
        &["consume", "-t", "Follow", "-g", "Later", "--wait", "1"],
        None,
    ));
    assert_eq!(sorted(&got), ["m3"]);

    // --from-beginning replays the topic.
    let tail = spawn_tail(
        &addr,
        &[
            "-t",
            "Follow",
            "-g",
            "Replay",
            "--from-beginning",
            "-n",
            "6",
        ],
    );
    assert_eq!(
        sorted(&tail_output(tail)),
        ["m1", "m2", "m3", "n1", "n2", "n3"]
    );
    drop(p);
}

#[test]
fn consume_of_a_topic_the_broker_lacks_fails_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let p = BrokerProc::start(&tmp.path().join("data"), &[]);
    let addr = p.addr.to_string();
    ok(&rocklet(&addr, &["send", "-t", "Spelt", "x"], None));
    let o = rocklet(&addr, &["consume", "-t", "Speltt", "--wait", "0.5"], None);
    assert!(!o.status.success(), "consume of a missing topic exited 0");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("topic Speltt does not exist"), "{e}");
    // The lookup created nothing, and the real topic still reads.
    assert!(!ok(&rocklet(&addr, &["admin", "topics"], None)).contains("Speltt"));
    assert_eq!(
        ok(&rocklet(
            &addr,
            &["consume", "-t", "Spelt", "--wait", "0.5"],
            None
        )),
        "x\n"
    );
    drop(p);
}

#[test]
fn tail_from_now_needs_a_super_user_with_authentication_on_and_from_beginning_does_not() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("rocklet.toml");
    std::fs::write(
        &cfg,
        r#"
[[auth.users]]
access_key = "root"
secret_key = "root-secret"
super_user = true

[[auth.users]]
access_key = "alice"
secret_key = "alice-secret"

[[auth.acls]]
user = "alice"
resource = "Topic:Sec"
actions = ["Pub", "Sub"]
decision = "Allow"

[[auth.acls]]
user = "alice"
resource = "Group:AG"
actions = ["Sub"]
decision = "Allow"
"#,
    )
    .unwrap();
    let p = BrokerProc::start(
        &tmp.path().join("data"),
        &["--config", cfg.to_str().unwrap()],
    );
    let addr = p.addr.to_string();
    let run = |who: (&str, &str), args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env("ROCKLET_ADDR", &addr)
            .env("ROCKLET_ACCESS_KEY", who.0)
            .env("ROCKLET_SECRET_KEY", who.1)
            .env_remove("ROCKLET_TLS_CA")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let (root, alice) = (("root", "root-secret"), ("alice", "alice-secret"));
    ok(&run(alice, &["send", "-t", "Sec", "a"]));
    let o = run(alice, &["tail", "-t", "Sec", "-g", "AG", "-n", "1"]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("cannot start group AG at the end of topic Sec")
            && e.contains("--from-beginning does not"),
        "{e}"
    );
    // Nothing was started: the group reads from the first message.
    assert_eq!(
        ok(&run(
            alice,
            &[
                "tail",
                "-t",
                "Sec",
                "-g",
                "AG",
                "--from-beginning",
                "-n",
                "1"
            ]
        )),
        "a\n"
    );
    // A super user follows from now.
    let tail = Command::new(BIN)
        .args(["tail", "-t", "Sec", "-g", "RG", "-n", "1"])
        .env("ROCKLET_ADDR", &addr)
        .env("ROCKLET_ACCESS_KEY", root.0)
        .env("ROCKLET_SECRET_KEY", root.1)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_started(&p, "RG");
    ok(&run(root, &["send", "-t", "Sec", "b"]));
    assert_eq!(tail_output(tail), "b\n");
    drop(p);
}

#[test]
fn a_broker_that_is_not_there_is_named() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    drop(l);
    let o = rocklet(&addr, &["send", "-t", "T", "x"], None);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("cannot reach the broker at http://127.0.0.1:"),
        "{e}"
    );
    let o = rocklet(&addr, &["consume", "-t", "T"], None);
    assert!(!o.status.success());
}

/// `rocklet broker` with `args`, waiting for its `addr=` line (or its exit).
fn start(args: &[&str]) -> (std::process::Child, Result<String, String>) {
    let mut child = Command::new(BIN)
        .arg("broker")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let mut log = String::new();
    for line in BufReader::new(err).lines().map_while(Result::ok) {
        log.push_str(&line);
        log.push('\n');
        if let Some(i) = line.find(" addr=") {
            let a: String = line[i + 6..]
                .chars()
                .take_while(|c| !c.is_whitespace())
                .collect();
            return (child, Ok(a));
        }
    }
    (child, Err(log))
}

#[test]
fn listen_addresses_take_host_names() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("d");
    let (mut child, addr) = start(&[
        "--listen",
        "localhost:0",
        "--remoting-listen",
        "localhost:0",
        "--namesrv-listen",
        "off",
        "--metrics-listen",
        "localhost:0",
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    let addr = addr.unwrap();
    let a: std::net::SocketAddr = addr.parse().unwrap();
    assert!(a.ip().is_loopback(), "{a}");
    // The client side takes a host name too.
    let out = ok(&rocklet(
        &format!("localhost:{}", a.port()),
        &["send", "-t", "HostTopic", "h"],
        None,
    ));
    assert!(out.contains(" HostTopic offset 0"), "{out}");
    child.kill().unwrap();
    child.wait().unwrap();

    let o = Command::new(BIN)
        .args([
            "broker",
            "--listen",
            "no-such-host.invalid:8081",
            "--data-dir",
        ])
        .arg(tmp.path().join("never"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("cannot resolve host `no-such-host.invalid`"),
        "{e}"
    );
    assert!(!tmp.path().join("never").exists());
}

fn refused_leaves_nothing(flag: &str, taken: &str, dir: &Path) -> String {
    let mut args = vec!["broker", "--data-dir", dir.to_str().unwrap()];
    for f in ["--listen", "--remoting-listen", "--namesrv-listen"] {
        if f != flag {
            args.extend([f, "127.0.0.1:0"]);
        }
    }
    args.extend([flag, taken]);
    let o = Command::new(BIN).args(&args).output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "{flag} {taken}: started\n{e}");
    assert!(
        e.contains("cannot listen"),
        "{flag} {taken}: not refused for the port\n{e}"
    );
    assert!(
        !dir.exists(),
        "{flag} in use: {} was created\n{e}",
        dir.display()
    );
    e
}

#[test]
fn a_port_in_use_leaves_no_data_dir_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = busy.local_addr().unwrap().to_string();
    for flag in [
        "--listen",
        "--metrics-listen",
        "--admin-listen",
        "--remoting-listen",
        "--namesrv-listen",
    ] {
        let dir = tmp.path().join(flag.trim_start_matches('-'));
        let e = refused_leaves_nothing(flag, &taken, &dir);
        assert!(e.contains(&taken), "{flag}: {e}");
    }
    drop(busy);
}

#[test]
fn playground_serves_what_was_built_in_or_says_how_to_build_it() {
    let mut child = Command::new(BIN)
        .args(["playground", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if rocklet_broker::playground::FILES.is_empty() {
        let o = child.wait_with_output().unwrap();
        assert!(!o.status.success());
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains("built without the playground"), "{e}");
        assert!(e.contains("dist/build.sh"), "{e}");
        return;
    }
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|s| s.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    let get = |path: &str| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut v = Vec::new();
        s.read_to_end(&mut v).unwrap();
        String::from_utf8_lossy(&v).to_string()
    };
    let index = get("/");
    assert!(index.starts_with("HTTP/1.1 200 OK"), "{index}");
    assert!(index.contains("text/html"), "{index}");
    let wasm = get("/pkg/rocklet_wasm_bg.wasm");
    assert!(
        wasm.contains("Content-Type: application/wasm"),
        "{}",
        &wasm[..200]
    );
    assert!(get("/../Cargo.toml").starts_with("HTTP/1.1 404"));
    child.kill().unwrap();
    child.wait().unwrap();
}

/// `rocklet broker` with `args` in `cwd`, expected to refuse to start: its stderr. One that
/// starts instead (it logs its address) is stopped and fails the test.
fn refused_start(cwd: &Path, args: &[&str]) -> String {
    let mut child = Command::new(BIN)
        .arg("broker")
        .args(args)
        .current_dir(cwd)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut e = String::new();
    for line in BufReader::new(child.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        if line.contains(" addr=") {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{args:?}: started\n{e}{line}");
        }
        e.push_str(&line);
        e.push('\n');
    }
    let status = child.wait().unwrap();
    assert!(!status.success(), "{args:?}: exited 0\n{e}");
    e
}

#[test]
fn a_refused_start_creates_no_data_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let d = dir.to_str().unwrap();
    let loopback = [
        "--listen",
        "127.0.0.1:0",
        "--remoting-listen",
        "127.0.0.1:0",
        "--namesrv-listen",
        "off",
    ];
    // A flag combination: beyond loopback with authentication off.
    let mut args = vec!["--data-dir", d, "--listen", "0.0.0.0:0"];
    args.extend(&loopback[2..]);
    let e = refused_start(tmp.path(), &args);
    assert!(e.contains("refusing to listen on 0.0.0.0"), "{e}");
    assert!(!dir.exists(), "open broker refused: {} was created", d);
    // Config values: a topic name the core refuses, a topic of too many queues, a user
    // without a secret.
    for (toml, why) in [
        ("[[topics]]\nname = \"bad topic\"\n", "`bad topic`"),
        ("[[topics]]\nname = \"T\"\nqueues = 5000\n", "5000 queues"),
        (
            "[[auth.users]]\naccess_key = \"a\"\nsecret_key = \"\"\nsuper_user = true\n",
            "auth.users",
        ),
    ] {
        let cfg = tmp.path().join("bad.toml");
        std::fs::write(&cfg, toml).unwrap();
        let mut args = vec!["--data-dir", d, "--config", cfg.to_str().unwrap()];
        args.extend(&loopback);
        let e = refused_start(tmp.path(), &args);
        assert!(e.contains(why), "{toml}: {e}");
        assert!(!dir.exists(), "{toml}: {} was created\n{e}", d);
    }
    // The console's port in use.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = busy.local_addr().unwrap().to_string();
    let mut args = vec!["--data-dir", d, "--console-listen", &taken];
    args.extend(&loopback);
    let e = refused_start(tmp.path(), &args);
    assert!(
        e.contains(&format!("cannot listen for the console on {taken}")),
        "{e}"
    );
    assert!(!dir.exists(), "console port in use: {} was created\n{e}", d);
    // The default data directory, ./rocklet-data, likewise.
    let mut args = vec!["--listen", "0.0.0.0:0"];
    args.extend(&loopback[2..]);
    refused_start(tmp.path(), &args);
    assert!(!tmp.path().join("rocklet-data").exists());
}

#[test]
fn a_non_empty_directory_without_rocklet_data_is_refused_unless_the_flag_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("photos");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("holiday.jpg"), b"mine").unwrap();
    std::fs::create_dir(dir.join("2024")).unwrap();
    let d = dir.to_str().unwrap();
    let loopback = [
        "--listen",
        "127.0.0.1:0",
        "--remoting-listen",
        "127.0.0.1:0",
        "--namesrv-listen",
        "off",
    ];
    let mut args = vec!["--data-dir", d];
    args.extend(&loopback);
    let e = refused_start(tmp.path(), &args);
    assert!(
        e.contains(&format!(
            "the data directory {d} is not empty and holds no Rocklet data (it holds 2024, holiday.jpg)"
        )) && e.contains("--data-dir-not-empty-ok"),
        "{e}"
    );
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["2024", "holiday.jpg"], "nothing was added");
    // The default ./rocklet-data too.
    std::fs::create_dir(tmp.path().join("rocklet-data")).unwrap();
    std::fs::write(tmp.path().join("rocklet-data/notes.txt"), b"x").unwrap();
    let e = refused_start(tmp.path(), &loopback);
    assert!(
        e.contains("./rocklet-data is not empty and holds no Rocklet data"),
        "{e}"
    );
    assert!(!tmp.path().join("rocklet-data/LOCK").exists());
    // An Apache RocketMQ store (issue 34): refused even with the flag, pointing at
    // `rocklet import`, and left as it was.
    let store = tmp.path().join("store");
    std::fs::create_dir_all(store.join("commitlog")).unwrap();
    std::fs::create_dir_all(store.join("config")).unwrap();
    std::fs::write(store.join("commitlog/00000000000000000000"), b"log").unwrap();
    let s = store.to_str().unwrap();
    for flag in [None, Some("--data-dir-not-empty-ok")] {
        let mut args = vec!["--data-dir", s];
        args.extend(&loopback);
        args.extend(flag);
        let e = refused_start(tmp.path(), &args);
        assert!(
            e.contains("is an Apache RocketMQ store")
                && e.contains(&format!("rocklet import --from-rocketmq {s} --data-dir")),
            "{flag:?}: {e}"
        );
    }
    let mut names: Vec<_> = std::fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["commitlog", "config"], "nothing was added");
    // A file where the directory should be.
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let mut args = vec!["--data-dir", file.to_str().unwrap()];
    args.extend(&loopback);
    let e = refused_start(tmp.path(), &args);
    assert!(e.contains("is a file, not a directory"), "{e}");

    // With the flag it starts there, leaving the other files alone; then, holding Rocklet
    // data, it starts without the flag.
    for flag in [Some("--data-dir-not-empty-ok"), None] {
        let mut args = vec!["--data-dir", d];
        args.extend(&loopback);
        args.extend(flag);
        let (mut child, addr) = start(&args);
        assert!(addr.is_ok(), "{flag:?}: {addr:?}");
        child.kill().unwrap();
        child.wait().unwrap();
    }
    assert_eq!(std::fs::read(dir.join("holiday.jpg")).unwrap(), b"mine");
    // A new file system's lost+found alone counts as empty.
    let mount = tmp.path().join("mount");
    std::fs::create_dir_all(mount.join("lost+found")).unwrap();
    let mut args = vec!["--data-dir", mount.to_str().unwrap()];
    args.extend(&loopback);
    let (mut child, addr) = start(&args);
    assert!(addr.is_ok(), "{addr:?}");
    child.kill().unwrap();
    child.wait().unwrap();
}
