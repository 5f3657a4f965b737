//! [`open`]: what the Python and Node bindings open — the core's storage (segment files in
//! a directory, or memory) and a manual clock or the system's, behind the `std` feature.

use rocklet_core::{AnyStorage, Config, Millis};
use std::io;
use std::path::Path;

use crate::clock::{AnyClock, ManualClock, SystemClock};
use crate::engine::Engine;

/// A host on [`AnyStorage`] with a manual clock or the system clock.
pub type StdEngine = Engine<AnyStorage, AnyClock<SystemClock>>;

/// Why [`open`] failed.
#[derive(Debug)]
pub enum OpenFail {
    /// The data directory could not be opened (or locked).
    Storage(io::Error),
    /// Recovery refused the log, or the configuration cannot work.
    Core(rocklet_core::Error<io::Error>),
}

/// Opens a broker: its log in the directory `path` (`None`: in memory), on a manual clock
/// starting at `manual` (`Some(start)`) or on the system clock (`None`); `repair` keeps
/// every valid record of a damaged log and quarantines the rest.
pub fn open(
    path: Option<&Path>,
    manual: Option<Millis>,
    config: Config,
    repair: bool,
) -> Result<StdEngine, OpenFail> {
    let storage = AnyStorage::open(path).map_err(OpenFail::Storage)?;
    let clock = match manual {
        Some(start) => AnyClock::Manual(ManualClock::new(start)),
        None => AnyClock::Host(SystemClock),
    };
    Engine::open(config, storage, clock, repair).map_err(OpenFail::Core)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Clock;

    #[test]
    fn opens_in_memory_or_in_a_directory_on_either_clock() {
        let h = open(None, Some(1234), Config::default(), false).unwrap();
        assert!(h.clock().is_manual());
        assert_eq!(h.now(), 1234);
        let h = open(None, None, Config::default(), false).unwrap();
        assert!(!h.clock().is_manual());
        let dir =
            std::env::temp_dir().join(std::format!("rocklet-embed-open-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut h = open(Some(&dir), Some(0), Config::default(), false).unwrap();
        // The directory is locked while open.
        assert!(matches!(
            open(Some(&dir), Some(0), Config::default(), false),
            Err(OpenFail::Storage(_))
        ));
        h.close().unwrap();
        drop(h);
        let bad = Config {
            transaction_check_interval_ms: 0,
            ..Config::default()
        };
        assert!(matches!(
            open(Some(&dir), Some(0), bad, false),
            Err(OpenFail::Core(_))
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
