//! An ext4 file system on a loop device for tests that cut the power or fail the device:
//! `losetup`, `mkfs.ext4`, `mount`, and `EXT4_IOC_SHUTDOWN` with
//! `EXT4_GOING_FLAGS_NOLOGFLUSH`, which drops everything the file system had not yet written
//! to the device or committed to its journal — as a power cut does — while the backing file
//! keeps what the device had. Needs root; `Ext4::create` returns `Err` with the reason
//! where loop devices or mounts are not permitted, and callers skip with that message.
//!
//! The ioctl is made by `python3` (`fcntl.ioctl`), so no `unsafe` is needed here.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// `_IOR('X', 125, __u32)`: EXT4_IOC_SHUTDOWN (the same number as XFS_IOC_GOINGDOWN).
const EXT4_IOC_SHUTDOWN: u32 = 0x8004_587D;
/// Shut down without flushing the journal: a power cut.
const EXT4_GOING_FLAGS_NOLOGFLUSH: u32 = 2;

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {cmd}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!(
            "`{cmd} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// An ext4 file system on a loop device over `img`, mounted at `mnt` (unmounted and
/// detached when dropped).
pub struct Ext4 {
    pub img: PathBuf,
    pub dev: String,
    pub mnt: PathBuf,
    mounted: bool,
}

impl Ext4 {
    /// Makes `img` a file of `size_mib` MiB (unless it exists: a file on a FUSE mount the
    /// caller made), attaches it to a loop device, makes ext4 on it and mounts it at `mnt`.
    pub fn create(img: &Path, size_mib: u64, mnt: &Path) -> Result<Ext4, String> {
        if !img.exists() {
            let f = std::fs::File::create(img).map_err(|e| e.to_string())?;
            f.set_len(size_mib << 20).map_err(|e| e.to_string())?;
        }
        std::fs::create_dir_all(mnt).map_err(|e| e.to_string())?;
        let dev = run("losetup", &["-f", "--show", img.to_str().unwrap()])?;
        let mut d = Ext4 {
            img: img.to_path_buf(),
            dev,
            mnt: mnt.to_path_buf(),
            mounted: false,
        };
        // Everything written at once (no lazy init writing behind the test's back), no
        // discards to a loop device.
        run(
            "mkfs.ext4",
            &[
                "-q",
                "-F",
                "-E",
                "nodiscard,lazy_itable_init=0,lazy_journal_init=0",
                &d.dev,
            ],
        )?;
        d.mount()?;
        Ok(d)
    }

    /// Mounts the file system (replaying its journal after a shutdown).
    pub fn mount(&mut self) -> Result<(), String> {
        run(
            "mount",
            &[
                "-t",
                "ext4",
                "-o",
                "nodiscard",
                &self.dev,
                self.mnt.to_str().unwrap(),
            ],
        )?;
        self.mounted = true;
        Ok(())
    }

    /// Unmounts it (every process using it must be gone).
    pub fn umount(&mut self) -> Result<(), String> {
        let mut last = String::new();
        // A process that just died may still hold the mount for a moment.
        for _ in 0..50 {
            match run("umount", &[self.mnt.to_str().unwrap()]) {
                Ok(_) => {
                    self.mounted = false;
                    return Ok(());
                }
                Err(e) => last = e,
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Err(last)
    }

    /// A power cut: `EXT4_IOC_SHUTDOWN` with `EXT4_GOING_FLAGS_NOLOGFLUSH`. Every later I/O
    /// on the mount fails with EIO; what was not on the device or in the committed journal
    /// is gone after the next mount.
    pub fn power_cut(&self) -> Result<(), String> {
        let script = format!(
            "import fcntl, os, struct, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\nfcntl.ioctl(fd, {EXT4_IOC_SHUTDOWN}, struct.pack('I', {EXT4_GOING_FLAGS_NOLOGFLUSH}))\n"
        );
        run("python3", &["-c", &script, self.mnt.to_str().unwrap()]).map(|_| ())
    }

    /// Byte range of the device that holds the journal (`debugfs`: the journal inode's
    /// blocks, which mkfs lays out contiguously).
    pub fn journal_range(&self) -> Result<(u64, u64), String> {
        let bs: u64 = run("dumpe2fs", &["-h", &self.dev])?
            .lines()
            .find_map(|l| l.strip_prefix("Block size:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or("dumpe2fs printed no block size")?;
        let blocks: Vec<u64> = run("debugfs", &["-R", "blocks <8>", &self.dev])?
            .split_whitespace()
            .filter_map(|b| b.parse().ok())
            .collect();
        let (Some(first), Some(last)) = (blocks.iter().min(), blocks.iter().max()) else {
            return Err("debugfs listed no journal blocks".into());
        };
        if last - first + 1 != blocks.len() as u64 {
            return Err(format!(
                "the journal is not contiguous ({} blocks in {first}..={last})",
                blocks.len()
            ));
        }
        Ok((first * bs, (last + 1) * bs))
    }

    /// Detaches the loop device (after [`Ext4::umount`]).
    pub fn detach(&mut self) -> Result<(), String> {
        run("losetup", &["-d", &self.dev]).map(|_| ())
    }

    /// Attaches the image to a (new) loop device again.
    pub fn attach(&mut self) -> Result<(), String> {
        self.dev = run("losetup", &["-f", "--show", self.img.to_str().unwrap()])?;
        Ok(())
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

/// Whether this process may make loop devices and mounts (root); `Err` says why not.
pub fn permitted() -> Result<(), String> {
    let uid = run("id", &["-u"])?;
    if uid != "0" {
        return Err(format!("not root (uid {uid})"));
    }
    for tool in [
        "losetup",
        "mkfs.ext4",
        "mount",
        "umount",
        "python3",
        "debugfs",
        "dumpe2fs",
    ] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            return Err(format!("`{tool}` is not installed"));
        }
    }
    Ok(())
}
