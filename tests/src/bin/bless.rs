//! Rewrites every `expect` in `tests/vectors/scenarios/*.json` from the Rust core.
//!
//! `cargo run -p rocklet-conformance --bin bless [-- --check] [name-filter]`
//!
//! Steps marked `"hand_written": true` keep their expectation (a known core bug: the vector
//! states what RocketMQ semantics demand). With `--check` nothing is written; the exit code
//! says whether any file would change.

use std::process::ExitCode;

use rocklet_conformance::{scenario_files, Scenario};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let check = args.iter().any(|a| a == "--check");
    let filter: Option<&String> = args.iter().find(|a| !a.starts_with("--"));
    let files = match scenario_files() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("bless: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (mut changed, mut failed) = (0, 0);
    for path in files {
        if filter.is_some_and(|f| !path.to_string_lossy().contains(f.as_str())) {
            continue;
        }
        let result = std::fs::read_to_string(&path)
            .map_err(|e| format!("{}: {e}", path.display()))
            .and_then(|old| Ok((Scenario::parse(&path, &old)?.blessed()?, old)));
        match result {
            Ok((new, old)) if new != old => {
                changed += 1;
                println!(
                    "{} {}",
                    if check { "would change" } else { "blessed" },
                    path.display()
                );
                if !check {
                    if let Err(e) = std::fs::write(&path, new) {
                        eprintln!("bless: {}: {e}", path.display());
                        failed += 1;
                    }
                }
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("bless: {e}");
                failed += 1;
            }
        }
    }
    println!(
        "{changed} file(s) {}, {failed} failed",
        if check { "out of date" } else { "rewritten" }
    );
    if failed > 0 || (check && changed > 0) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
