//! The shared SQL92 table, `tests/vectors/sql92.json`: every case's expression is parsed and
//! evaluated over its properties, and the outcome must be the one the table expects (Apache
//! RocketMQ's own filter module is held to the same table by `tests/sql92/Sql92Check.java`).
//! Evaluating allocates nothing: a counting global allocator watches every evaluation.
mod common;

use common::allocations;

use std::collections::HashMap;

use rocklet_core::filter::{Outcome, Sql92};
use serde_json::Value;

fn expression(case: &Value) -> String {
    match case.get("build") {
        Some(parts) => parts
            .as_array()
            .expect("build is a list")
            .iter()
            .map(|p| {
                let piece = p[0].as_str().expect("a build piece is a string");
                let times = usize::try_from(p[1].as_u64().expect("a count")).expect("count");
                piece.repeat(times)
            })
            .collect(),
        None => case["expr"].as_str().expect("expr is a string").to_owned(),
    }
}

#[test]
fn every_case_of_the_shared_table() {
    run_table("sql92.json", 150);
}

/// Random expressions (`tests/sql92/random_cases.py`) whose outcomes Apache gave.
#[test]
fn every_case_of_the_random_table() {
    run_table("sql92-random.json", 1000);
}

fn run_table(name: &str, at_least: usize) {
    let path = format!("{}/../tests/vectors/{name}", env!("CARGO_MANIFEST_DIR"));
    let table: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("read table"))
        .expect("the table is JSON");
    let cases = table["cases"].as_array().expect("cases");
    assert!(cases.len() >= at_least, "{name} has {} cases", cases.len());
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let expr = expression(case);
        let props: HashMap<String, String> = case["props"]
            .as_object()
            .expect("props is an object")
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_str().expect("a property is a string").to_owned(),
                )
            })
            .collect();
        let expect = case["expect"].as_str().expect("expect");
        let got = match Sql92::parse(&expr) {
            Err(e) => {
                let msg = e.to_string();
                if let Some(want) = case.get("error").and_then(Value::as_str) {
                    if !msg.contains(want) {
                        failures.push(format!("case {i} {expr:?}: error {msg:?} lacks {want:?}"));
                    }
                }
                "parse-error"
            }
            Ok(f) => {
                let before = allocations();
                let outcome = f.evaluate(|name| props.get(name).map(String::as_str));
                let allocated = allocations() - before;
                if allocated != 0 {
                    failures.push(format!(
                        "case {i} {expr:?}: evaluating allocated {allocated} times"
                    ));
                }
                assert_eq!(
                    f.matches(|name| props.get(name).map(String::as_str)),
                    outcome == Outcome::True
                );
                match outcome {
                    Outcome::True => "true",
                    Outcome::False => "false",
                    Outcome::Unknown => "unknown",
                    Outcome::Failed => "failed",
                }
            }
        };
        if got != expect {
            let shown: String = expr.chars().take(80).collect();
            failures.push(format!(
                "case {i} {shown:?} {props:?}: expected {expect}, got {got}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
