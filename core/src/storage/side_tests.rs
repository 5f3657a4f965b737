//! Side files on every storage: what they hold, their names, their durability.

use super::*;
use alloc::vec;

/// The same script on any storage: write, overwrite, read back, list, cut, remove.
fn side_files_behave<S: Storage>(s: &mut S)
where
    S::Error: fmt::Debug,
{
    assert_eq!(s.side_len("cq/T/0/a").unwrap(), None);
    assert_eq!(s.side_read("cq/T/0/a", 0, &mut [0; 4]).unwrap(), 0);
    s.side_write("cq/T/0/a", 0, b"hello").unwrap();
    s.side_write("cq/T/0/a", 8, b"xy").unwrap();
    s.side_write("cq/T/1/b", 0, b"b").unwrap();
    s.side_write("index/c", 0, b"c").unwrap();
    assert_eq!(s.side_len("cq/T/0/a").unwrap(), Some(10));
    let mut buf = [9u8; 12];
    assert_eq!(s.side_read("cq/T/0/a", 0, &mut buf).unwrap(), 10);
    assert_eq!(&buf[..10], b"hello\0\0\0xy", "a gap reads as zeros");
    s.side_write("cq/T/0/a", 1, b"E").unwrap();
    assert_eq!(s.side_read("cq/T/0/a", 1, &mut buf[..2]).unwrap(), 2);
    assert_eq!(&buf[..2], b"El");
    assert_eq!(s.side_list("cq").unwrap(), vec!["cq/T/0/a", "cq/T/1/b"]);
    assert_eq!(s.side_list("cq/T/1").unwrap(), vec!["cq/T/1/b"]);
    assert!(s.side_list("nothing").unwrap().is_empty());
    s.side_truncate("cq/T/0/a", 3).unwrap();
    assert_eq!(s.side_len("cq/T/0/a").unwrap(), Some(3));
    s.side_remove("cq/T/0/a").unwrap();
    s.side_remove("cq/T/0/a").unwrap();
    assert_eq!(s.side_len("cq/T/0/a").unwrap(), None);
    assert_eq!(s.side_list("cq").unwrap(), vec!["cq/T/1/b"]);
    s.sync().unwrap();
}

#[test]
fn side_files_in_memory() {
    side_files_behave(&mut MemStorage::new());
}

#[test]
fn side_file_names_are_checked() {
    for bad in [
        "",
        "a",
        "/etc/x",
        "a/../b",
        "a/./b",
        "../a",
        "a//b",
        "a/",
        "quarantine/x",
        "a\\b/c",
    ] {
        assert!(check_side_name(bad).is_err(), "{bad:?} was taken");
    }
    for good in ["consumequeue/T%|_-/0/00000000000000000000", "index/x"] {
        assert!(check_side_name(good).is_ok(), "{good:?} was refused");
    }
}

#[cfg(feature = "testing")]
#[test]
fn a_crash_keeps_the_side_files_the_last_sync_covered() {
    use crate::testing::CrashStorage;
    let mut s = CrashStorage::new();
    side_files_behave(&mut s);
    s.side_write("cq/T/2/c", 0, b"synced").unwrap();
    s.sync().unwrap();
    s.side_write("cq/T/2/c", 6, b" and not").unwrap();
    s.side_write("cq/T/3/d", 0, b"not synced").unwrap();
    let crashed = s.crash();
    assert_eq!(crashed.side_file("cq/T/2/c"), Some(&b"synced"[..]));
    assert_eq!(crashed.side_file("cq/T/3/d"), None);
    assert_eq!(crashed.side_file("cq/T/1/b"), Some(&b"b"[..]));
    // A detached sync makes durable what was written before it was detached.
    let image = s.detach_sync();
    s.side_write("cq/T/4/e", 0, b"after").unwrap();
    s.complete_sync(image);
    let crashed = s.crash();
    assert_eq!(crashed.side_file("cq/T/3/d"), Some(&b"not synced"[..]));
    assert_eq!(crashed.side_file("cq/T/4/e"), None);
    // After a power cut no sync makes a side-file write durable.
    s.cut_after_bytes = Some(0);
    s.write(0, 0, b"x").unwrap();
    s.side_write("cq/T/5/f", 0, b"lost").unwrap();
    s.sync().unwrap();
    assert_eq!(s.crash().side_file("cq/T/5/f"), None);
}

#[cfg(feature = "std")]
mod files {
    use super::file::SIDE_HANDLES;
    use super::*;
    use crate::tests::temp_dir;

    #[test]
    fn side_files_in_a_directory() {
        let dir = temp_dir("side-files");
        let mut s = FileStorage::open(&dir).unwrap();
        side_files_behave(&mut s);
        assert_eq!(std::fs::read(dir.join("cq/T/1/b")).unwrap(), b"b");
        assert_eq!(
            s.segments().unwrap(),
            Vec::<u64>::new(),
            "side files are no segments"
        );
        for bad in ["../escape/x", "/tmp/x", "x", "quarantine/x"] {
            let e = s.side_write(bad, 0, b"no").unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{bad}: {e}");
            assert!(
                alloc::format!("{e}").contains("not a side file name"),
                "{e}"
            );
        }
        assert!(!dir.parent().unwrap().join("escape").exists());
        // More files than handles held: each still reads back what was written.
        for i in 0..(SIDE_HANDLES * 2) {
            s.side_write(&alloc::format!("many/{i}"), 0, &[i as u8])
                .unwrap();
        }
        assert!(s.side_open.len() <= SIDE_HANDLES);
        for i in 0..(SIDE_HANDLES * 2) {
            let mut b = [0u8];
            assert_eq!(
                s.side_read(&alloc::format!("many/{i}"), 0, &mut b).unwrap(),
                1
            );
            assert_eq!(b[0], i as u8);
        }
        // A detached sync covers the side files written (and the directories created).
        let job = s
            .detach_sync()
            .unwrap()
            .expect("side files wait for a sync");
        assert!(job.side.len() >= SIDE_HANDLES * 2, "{}", job.side.len());
        assert!(job.side_dirs.iter().any(|(d, _)| d.ends_with("many")));
        job.run().unwrap();
        s.detached_done(&job, true);
        assert!(s.side_dirty.is_empty() && s.side_dirs.is_empty());
        assert!(s.detach_sync().unwrap().is_none(), "nothing left to sync");
        drop(s);
        let mut s = FileStorage::open(&dir).unwrap();
        assert_eq!(s.side_len("many/3").unwrap(), Some(1));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
