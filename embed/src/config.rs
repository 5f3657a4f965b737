//! One parser of the broker's configuration from a neutral key/value form (JSON values by
//! key), for every binding: the keys are the core `Config` fields in the host's naming
//! (snake_case for Python, camelCase for JS), a field not given keeps the core's default,
//! and an error names the key as the host spelled it.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use rocklet_core::Config;
pub use serde_json::{Map, Number, Value};

use crate::view::camel_case;

/// How the host spells the `Config` field names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// `transaction_timeout_ms` (Python keywords).
    Snake,
    /// `transactionTimeoutMs` (JS options).
    Camel,
}

impl Naming {
    fn spell(self, snake: &str) -> String {
        match self {
            Naming::Snake => snake.into(),
            Naming::Camel => camel_case(snake),
        }
    }
}

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigFail {
    /// A key that names no option; `known` lists the options, as the host spells them.
    Unknown { key: String, known: String },
    /// A value the option does not take (`key` as the host spelled it).
    Invalid { key: String, reason: String },
}

impl fmt::Display for ConfigFail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigFail::Unknown { key, known } => {
                write!(f, "unknown option `{key}` (known: {known})")
            }
            ConfigFail::Invalid { key, reason } => write!(f, "config `{key}`: {reason}"),
        }
    }
}

/// The `Config` from `base` with `entries` applied, each key a `Config` field in `naming`.
/// `extra` names the host's own options (listed among the known ones in an `Unknown`);
/// `hidden` are fields the host sets itself (refused as unknown).
pub fn config(
    base: &Config,
    entries: impl IntoIterator<Item = (String, Value)>,
    naming: Naming,
    extra: &[&str],
    hidden: &[&str],
) -> Result<Config, ConfigFail> {
    let internal = |reason: String| ConfigFail::Invalid {
        key: "config".into(),
        reason,
    };
    let Value::Object(mut fields) =
        serde_json::to_value(base).map_err(|e| internal(format!("{e}")))?
    else {
        return Err(internal("Config does not serialize to an object".into()));
    };
    let known: Vec<(String, String)> = fields
        .keys()
        .filter(|k| !hidden.contains(&k.as_str()))
        .map(|k| (naming.spell(k), k.clone()))
        .collect();
    for (key, value) in entries {
        let Some((_, snake)) = known.iter().find(|(spelt, _)| *spelt == key) else {
            let names: Vec<&str> = extra
                .iter()
                .copied()
                .chain(known.iter().map(|(s, _)| s.as_str()))
                .collect();
            return Err(ConfigFail::Unknown {
                key,
                known: names.join(", "),
            });
        };
        // This field alone first, so that an error names it.
        let mut one = fields.clone();
        one.insert(snake.clone(), value.clone());
        if let Err(e) = serde_json::from_value::<Config>(Value::Object(one)) {
            return Err(ConfigFail::Invalid {
                key,
                reason: format!("{e}"),
            });
        }
        fields.insert(snake.clone(), value);
    }
    serde_json::from_value(Value::Object(fields)).map_err(|e| internal(format!("{e}")))
}
