use std::fs::File;
use std::os::unix::fs::FileExt;

use super::copy::copy_range;
use super::manifest::{segment_name, valid_name};
use super::*;

fn sample() -> Manifest {
    Manifest {
        version: "0.1.0".into(),
        log_offset: 300,
        time_ms: 1_765_000_000_000,
        files: vec![
            Entry {
                name: segment_name(0),
                size: 1000,
                data: 200,
                crc: 0xdead_beef,
                head: 1,
            },
            Entry {
                name: segment_name(200),
                size: 1000,
                data: 100,
                crc: 7,
                head: 8,
            },
            Entry {
                name: "quarantine/10-20.damaged".into(),
                size: 10,
                data: 10,
                crc: 9,
                head: 9,
            },
        ],
    }
}

#[test]
fn a_manifest_reads_back_and_refuses_any_change() {
    let m = sample();
    let text = m.encode();
    assert_eq!(Manifest::parse(text.as_bytes()).unwrap(), m);
    m.check_log().unwrap();
    // One byte changed, a line lost, cut short: each refused.
    let changed = text.replacen(" 200 ", " 201 ", 1);
    assert!(Manifest::parse(changed.as_bytes())
        .unwrap_err()
        .contains("CRC"));
    let cut = &text[..text.len() - 10];
    assert!(Manifest::parse(cut.as_bytes()).is_err());
    let no_line: String = text
        .lines()
        .filter(|l| !l.starts_with("time_ms"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(Manifest::parse(no_line.as_bytes()).is_err());
}

#[test]
fn a_gap_between_segments_or_before_the_point_is_refused() {
    let mut m = sample();
    m.files[0].data = 150;
    assert!(m
        .check_log()
        .unwrap_err()
        .contains("next segment starts at 200"));
    let mut m = sample();
    m.log_offset = 400;
    assert!(m
        .check_log()
        .unwrap_err()
        .contains("not at the backup's point 400"));
}

#[test]
fn names_outside_the_backup_are_refused() {
    for bad in [
        "../x",
        "/etc/passwd",
        "quarantine/../x",
        ".hidden",
        "a b",
        "x/y",
        "",
    ] {
        assert!(!valid_name(bad), "{bad}");
    }
    assert!(valid_name("auth.json"));
    assert!(valid_name("quarantine/1-2.missing"));
}

/// A preallocated file holding a little data costs that data in the copy, and reads
/// back the same (holes as zeros) with the same CRC.
#[test]
fn a_sparse_file_copies_its_data_only() {
    let d = tempfile::tempdir().unwrap();
    let src_path = d.path().join("src");
    let src = File::create(&src_path).unwrap();
    src.set_len(64 << 20).unwrap();
    src.write_all_at(&[7u8; 100_000], 0).unwrap();
    src.write_all_at(&[9u8; 5000], 8 << 20).unwrap();
    let src = File::open(&src_path).unwrap();
    let dst_path = d.path().join("dst");
    let dst = File::create(&dst_path).unwrap();
    let mut buf = vec![0u8; BUF];
    let mut c1 = crc32fast::Hasher::new();
    let n = copy_range(&src, &src_path, Some(&dst), 0, 64 << 20, &mut c1, &mut buf).unwrap();
    dst.set_len(64 << 20).unwrap();
    // Data ranges are file-system blocks: at most a few blocks more than the data.
    assert!((105_000..=105_000 + 64 * 1024).contains(&n), "{n}");
    let mut c2 = crc32fast::Hasher::new();
    let dst = File::open(&dst_path).unwrap();
    copy_range(&dst, &dst_path, None, 0, 64 << 20, &mut c2, &mut buf).unwrap();
    assert_eq!(c1.finalize(), c2.finalize());
    assert_eq!(fs::read(&src_path).unwrap(), fs::read(&dst_path).unwrap());
}

/// One backup at a time, by name; a relative directory and a log in memory are refused
/// before anything is copied.
#[tokio::test]
async fn one_backup_at_a_time_and_what_cannot_be_backed_up() {
    use rocklet_core::{Broker, MemStorage};
    let clock = Arc::new(crate::clock::ManualClock::new(1_700_000_000_000));
    let b = Broker::open(
        rocklet_core::Config::default(),
        AnyStorage::Mem(MemStorage::new()),
        1_700_000_000_000,
    )
    .unwrap();
    let (core, _thread) =
        crate::driver::spawn(b, clock, Arc::new(crate::metrics::Metrics::default())).unwrap();
    let d = tempfile::tempdir().unwrap();
    let backups = Backups::default();
    let e = backups.run(&core, d.path(), 0).await.unwrap_err();
    assert!(e.contains("in memory"), "{e}");
    let e = backups
        .run(&core, Path::new("rel/dir"), 0)
        .await
        .unwrap_err();
    assert!(e.contains("not an absolute path"), "{e}");
    // While one runs, another is refused by name; once it is done, the next one runs.
    let held = Running(backups.running.clone());
    backups.running.store(true, Ordering::SeqCst);
    let e = backups.run(&core, d.path(), 0).await.unwrap_err();
    assert!(e.contains("a backup is already running"), "{e}");
    drop(held);
    let e = backups.run(&core, d.path(), 0).await.unwrap_err();
    assert!(e.contains("in memory"), "{e}");
    core.shutdown().await;
}
