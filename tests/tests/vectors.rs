//! Runs every scenario vector against the Rust core and compares each step with its `expect`.

use rocklet_conformance::{scenario_files, Scenario};

#[test]
fn every_scenario_matches_its_expectations() {
    let files = scenario_files().expect("scenario directory");
    assert!(
        files.len() >= 24,
        "expected at least 24 scenarios, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    for path in &files {
        let outcome = Scenario::load(path).and_then(|s| s.check());
        match outcome {
            Ok(mismatches) => failures.extend(mismatches.iter().map(ToString::to_string)),
            Err(e) => failures.push(e),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn files_are_in_blessed_layout() {
    // The layout is what `bless` writes; a hand edit that breaks it makes review diffs noisy.
    for path in scenario_files().expect("scenario directory") {
        let text = std::fs::read_to_string(&path).expect("readable");
        let s = Scenario::parse(&path, &text).expect("parses");
        let again = rocklet_conformance::render_scenario(&s.raw);
        assert_eq!(
            again,
            text,
            "{} is not in the layout `bless` writes; run bless",
            path.display()
        );
    }
}

#[test]
fn every_step_with_a_result_has_an_expectation() {
    for path in scenario_files().expect("scenario directory") {
        let s = Scenario::load(&path).expect("loads");
        let results = s.run().expect("runs");
        for (i, (step, r)) in s.steps().iter().zip(results).enumerate() {
            if r.is_some() {
                assert!(
                    step.get("expect").is_some(),
                    "{} step {i} yields a result but has no expect",
                    s.name
                );
            }
        }
    }
}
