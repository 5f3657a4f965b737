//! Message filters evaluated over a message's properties.
//!
//! [`Sql92`] is RocketMQ's SQL92 property filter (`MessageSelector.bySql` in the v4 client,
//! `FilterExpression(…, SQL92)` in v5): parsed once when a consumer subscribes, then asked
//! [`Sql92::matches`] for each candidate message with a lookup of the message's properties
//! (`TAGS` and `KEYS` are properties too, as RocketMQ stores them).
//!
//! The semantics are Apache RocketMQ 5.5.0's filter module (`org.apache.rocketmq.filter`), quirks
//! included, because an expression must select the same messages on both brokers: the shared
//! table `tests/vectors/sql92.json` is run against this module by `cargo test -p rocklet-core`
//! and against Apache's own `SqlFilter` by `tests/ci/fidelity.sh`. Where Rocklet differs on
//! purpose (the bounds below), the table says so and why.
//!
//! # Bounded cost
//!
//! [`Sql92::parse`] refuses an expression longer than [`MAX_EXPR_LEN`] bytes, nested deeper
//! than [`MAX_DEPTH`], or with an `IN` list of more than [`MAX_IN_LIST`] strings (RocketMQ has
//! no such limits). A parsed expression holds at most one node per token, and
//! [`Sql92::matches`] visits each node at most once (a `BETWEEN` reads its value once for both
//! bounds, where RocketMQ reads it twice, so nested ones cost it 2^n), with one binary search
//! per `IN` list: the cost per message is linear in the expression's length, allocates nothing,
//! and its recursion is bounded by [`MAX_DEPTH`].

mod java;
mod parse;
mod sql92;

pub use sql92::{Outcome, Sql92};

use alloc::string::String;
use core::fmt;

/// The longest expression [`Sql92::parse`] accepts, in bytes.
pub const MAX_EXPR_LEN: usize = 16 * 1024;
/// The deepest nesting [`Sql92::parse`] accepts: parentheses, `NOT`, signs and chained
/// comparisons each add a level (a flat chain of `AND`s or `OR`s adds one).
pub const MAX_DEPTH: usize = 64;
/// The most strings one `IN (…)` list may hold.
pub const MAX_IN_LIST: usize = 1024;

/// Why an expression was refused: the problem, and where (a byte offset into the expression).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterError {
    /// What is wrong.
    pub kind: FilterErrorKind,
    /// Byte offset in the expression where the problem was found.
    pub position: usize,
}

/// What is wrong with a refused expression.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FilterErrorKind {
    /// The expression is longer than [`MAX_EXPR_LEN`] bytes.
    TooLong { len: usize },
    /// Nesting deeper than [`MAX_DEPTH`].
    TooDeep,
    /// An `IN` list with more than [`MAX_IN_LIST`] strings.
    TooManyInItems,
    /// A character that starts no token (RocketMQ's lexer refuses it too).
    UnexpectedChar(char),
    /// A string literal without its closing quote.
    UnterminatedString,
    /// A `/*` comment without its `*/`.
    UnterminatedComment,
    /// A token where the grammar wants something else.
    Unexpected {
        /// The token found (`end of expression` at the end).
        found: String,
        /// What the grammar wanted there.
        expected: &'static str,
    },
    /// An integer literal beyond a signed 64-bit integer.
    IntegerOutOfRange(String),
    /// A floating-point literal that is zero, underflows to zero, or overflows (RocketMQ refuses
    /// a literal below `Double.MIN_VALUE` or above `Double.MAX_VALUE`).
    FloatOutOfRange(String),
    /// An operand of `AND`, `OR`, `NOT` or the whole expression that is not a condition (a
    /// string or number literal, or a negation).
    NotCondition(String),
    /// An operand `>`, `>=`, `<`, `<=` or `BETWEEN` cannot take: a string, boolean or NULL
    /// literal, or a condition; or a NULL literal compared with `=` or `<>` (use `IS NULL`).
    NotComparable(String),
    /// A boolean literal on the left of `=`/`<>` and another kind of literal on the right.
    IncompatibleLiterals { left: String, right: String },
    /// `IN` whose left side is not a property name.
    InNeedsProperty,
    /// `BETWEEN low AND high` with literal bounds where high < low.
    BetweenBounds { low: String, high: String },
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use FilterErrorKind as K;
        match &self.kind {
            K::TooLong { len } => write!(
                f,
                "SQL92 expression of {len} bytes is longer than the limit of {MAX_EXPR_LEN}"
            )?,
            K::TooDeep => write!(f, "SQL92 expression nested deeper than {MAX_DEPTH} levels")?,
            K::TooManyInItems => write!(f, "IN list longer than {MAX_IN_LIST} strings")?,
            K::UnexpectedChar(c) => write!(f, "unexpected character {c:?}")?,
            K::UnterminatedString => f.write_str("string literal without its closing quote")?,
            K::UnterminatedComment => f.write_str("comment /* without its closing */")?,
            K::Unexpected { found, expected } => write!(f, "expected {expected}, found {found}")?,
            K::IntegerOutOfRange(t) => {
                write!(f, "integer literal {t} is out of the 64-bit signed range")?;
            }
            K::FloatOutOfRange(t) => write!(
                f,
                "floating-point literal {t} is zero or out of range (RocketMQ refuses literals \
                 below 4.9E-324 or above 1.7976931348623157E308)"
            )?,
            K::NotCondition(e) => write!(f, "{e} is not a condition (true, false or unknown)")?,
            K::NotComparable(e) => write!(f, "{e} cannot be compared here")?,
            K::IncompatibleLiterals { left, right } => {
                write!(f, "{left} cannot be compared with {right}")?;
            }
            K::InNeedsProperty => f.write_str("IN needs a property name on its left")?,
            K::BetweenBounds { low, high } => write!(
                f,
                "BETWEEN {low} AND {high}: the low bound must not be greater than the high bound"
            )?,
        }
        write!(f, " (at byte {})", self.position)
    }
}

impl core::error::Error for FilterError {}
