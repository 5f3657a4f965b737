//! RocketMQ's SQL92 property filter: the expression tree and its evaluation (the lexer and
//! parser are in `parse.rs`).
//!
//! # Grammar (RocketMQ 5.5.0's `SelectorParser`, lowest precedence first)
//!
//! ```text
//! expr       := and (OR and)*
//! and        := equality (AND equality)*
//! equality   := comparison ( '=' comparison | '<>' comparison | IS NULL | IS NOT NULL )*
//! comparison := unary ( ('>' | '>=' | '<' | '<=') unary
//!                     | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string
//!                     | [NOT] BETWEEN unary AND unary
//!                     | [NOT] IN '(' string (',' string)* ')' )*
//! unary      := '+' unary | '-' unary | NOT unary | primary
//! primary    := string | integer | float | TRUE | FALSE | NULL | property | '(' expr ')'
//! ```
//!
//! Keywords are case-insensitive; property names are `[A-Za-z_$][A-Za-z0-9_$]*`; strings are
//! `'…'` with `''` for a quote; integers are `0` or `[1-9][0-9]*` with an optional `L` (there are
//! no hexadecimal or octal literals: `0x1F` lexes as `0` then the name `x1F`); floats are
//! `1.5`, `1.`, `.5`, `1e3`, `1.5E-3`. Whitespace is space, tab, CR, LF and form feed;
//! `/* … */` and `-- … end of line` are comments.
//!
//! Two quirks of RocketMQ's parser kept so that Rocklet accepts what Apache accepts: parsing
//! stops after the first complete expression and only the token after it must be a valid token
//! (`a = 1 b` is `a = 1`); and `NOT` binds tighter than comparisons (`NOT a = 'x'` compares
//! `NOT a` with `'x'`).
//!
//! # Evaluation (RocketMQ's `Expression` classes)
//!
//! Values are Java's: NULL, booleans, `Integer`, `Long`, `Double` and strings. A property's
//! value is its string, or NULL when the message does not have it. AND, OR and NOT are SQL's
//! three-valued logic, left to right, stopping at the first operand that decides. Comparing a
//! string with a number converts the string with the number's Java type (`Integer.valueOf`,
//! `Long.valueOf`, `Double.valueOf`); a string that does not convert makes the whole
//! evaluation fail (the message is not delivered, whatever the rest of the expression says).
//! Two strings are ordered (`>`, `<`, …) as doubles. A message matches when the expression
//! evaluates to TRUE: FALSE, NULL (unknown) and a failure all mean "not delivered".
//!
//! RocketMQ's rules that surprise, kept (each has cases in the table):
//! - `=` is asymmetric: NULL on the left is NULL, NULL on the right only is FALSE, and two
//!   NULLs are equal (`a = b` is TRUE when both are missing; `'x' <> a` is TRUE when `a` is).
//! - `CONTAINS`, `STARTSWITH`, `ENDSWITH` and their `NOT` forms are FALSE on a missing property
//!   or an empty search string, never NULL.
//! - A property used as a condition (`a AND …`, `NOT a`) is NULL when missing and FALSE
//!   otherwise (a string is never a boolean); `'true' = TRUE` converts, `TRUE = a` fails.
//! - A float literal of zero (`0.0`) is refused, and an integer literal is an `Integer` when it
//!   fits, a `Long` otherwise: `a = 5` fails on `a = '7.5'` and on `a = '3000000000'`.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::cmp::Ordering;

use super::java;
use super::{FilterError, FilterErrorKind as K, MAX_EXPR_LEN};

/// A parsed SQL92 filter expression. See the [module docs](super) for the bounds on its cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Sql92 {
    root: Node,
}

/// What an expression evaluated to for one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// TRUE: the message is delivered.
    True,
    /// FALSE.
    False,
    /// NULL, SQL's unknown (for example `a = 'x'` on a message without `a`).
    Unknown,
    /// RocketMQ's evaluator throws here: a property value that does not convert to the number
    /// it is compared with, or a condition compared with a string. Not delivered.
    Failed,
}

impl Sql92 {
    /// Parses an expression, refusing it with the problem and its position if RocketMQ's parser
    /// refuses it, or if it exceeds [`MAX_EXPR_LEN`], [`MAX_DEPTH`](super::MAX_DEPTH) or
    /// [`MAX_IN_LIST`](super::MAX_IN_LIST).
    ///
    /// # Errors
    /// The first problem found, with its byte offset.
    pub fn parse(expr: &str) -> Result<Self, FilterError> {
        if expr.len() > MAX_EXPR_LEN {
            return Err(FilterError {
                kind: K::TooLong { len: expr.len() },
                position: MAX_EXPR_LEN,
            });
        }
        Ok(Sql92 {
            root: super::parse::parse(expr)?,
        })
    }

    /// Whether a message with these properties passes: `props(name)` is the value of the
    /// message's property `name` (`TAGS` and `KEYS` included), `None` if it has none.
    #[must_use]
    pub fn matches<'m>(&self, props: impl Fn(&str) -> Option<&'m str>) -> bool {
        self.evaluate(props) == Outcome::True
    }

    /// What the expression evaluates to for a message (see [`Outcome`]); only
    /// [`Outcome::True`] delivers.
    #[must_use]
    pub fn evaluate<'m>(&self, props: impl Fn(&str) -> Option<&'m str>) -> Outcome {
        // The values met during evaluation borrow from both the expression and the message.
        match eval(&self.root, &|name| props(name)) {
            Ok(Val::Bool(true)) => Outcome::True,
            Ok(Val::Bool(false)) => Outcome::False,
            Ok(Val::Null) => Outcome::Unknown,
            // The root is always a condition; anything else would be a Java ClassCastException.
            Ok(Val::Int(_) | Val::Long(_) | Val::Double(_) | Val::Str(_)) | Err(Failed) => {
                Outcome::Failed
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Expression tree

/// A literal that is not a condition (Java's plain `ConstantExpression`).
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Lit {
    Str(Box<str>),
    Int(i32),
    Long(i64),
    Double(f64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CmpOp {
    Gt,
    Ge,
    Lt,
    Le,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TextOp {
    Contains,
    StartsWith,
    EndsWith,
}

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Node {
    Lit(Lit),
    /// TRUE, FALSE or NULL (`None`): Java's `BooleanConstantExpression`, a literal and a
    /// condition at once.
    BoolLit(Option<bool>),
    Prop(Box<str>),
    /// A property used as a condition: NULL if absent, else FALSE (a string is never a boolean).
    Cast(Box<str>),
    Negate(Box<Node>),
    Not(Box<Node>),
    /// Conditions, evaluated left to right (a chain of ANDs, flattened).
    And(Vec<Node>),
    Or(Vec<Node>),
    Eq(Box<Node>, Box<Node>),
    Cmp(Box<Node>, CmpOp, Box<Node>),
    /// `value [NOT] BETWEEN low AND high`: RocketMQ's `value >= low AND value <= high`
    /// (`value < low OR value > high`), the value read once.
    Between {
        value: Box<Node>,
        low: Box<Node>,
        high: Box<Node>,
        not: bool,
    },
    /// `prop [NOT] IN (…)`: the strings sorted and deduplicated for a binary search.
    In {
        prop: Box<str>,
        items: Vec<Box<str>>,
        not: bool,
    },
    Text {
        left: Box<Node>,
        op: TextOp,
        search: Box<str>,
        not: bool,
    },
}

impl Node {
    /// Java's `ConstantExpression` (TRUE, FALSE and NULL included).
    pub(super) fn is_literal(&self) -> bool {
        matches!(self, Node::Lit(_) | Node::BoolLit(_))
    }
    /// Java's `BooleanExpression`: a condition.
    pub(super) fn is_condition(&self) -> bool {
        match self {
            Node::BoolLit(_)
            | Node::Cast(_)
            | Node::Not(_)
            | Node::And(_)
            | Node::Or(_)
            | Node::Eq(..)
            | Node::Cmp(..)
            | Node::Between { .. }
            | Node::In { .. }
            | Node::Text { .. } => true,
            Node::Lit(_) | Node::Prop(_) | Node::Negate(_) => false,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluation

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Val<'a> {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Double(f64),
    Str(&'a str),
}

/// Java threw during evaluation (NumberFormatException, ClassCastException).
#[derive(Debug)]
pub(super) struct Failed;

fn eval<'a, F: Fn(&str) -> Option<&'a str>>(n: &'a Node, props: &F) -> Result<Val<'a>, Failed> {
    Ok(match n {
        Node::Lit(Lit::Str(s)) => Val::Str(s),
        Node::Lit(Lit::Int(i)) => Val::Int(*i),
        Node::Lit(Lit::Long(l)) => Val::Long(*l),
        Node::Lit(Lit::Double(d)) => Val::Double(*d),
        Node::BoolLit(b) => b.map_or(Val::Null, Val::Bool),
        Node::Prop(name) => props(name).map_or(Val::Null, Val::Str),
        Node::Cast(name) => props(name).map_or(Val::Null, |_| Val::Bool(false)),
        Node::Negate(x) => match eval(x, props)? {
            Val::Int(i) => Val::Int(i.wrapping_neg()),
            Val::Long(l) => Val::Long(l.wrapping_neg()),
            Val::Double(d) => Val::Double(-d),
            Val::Null | Val::Bool(_) | Val::Str(_) => Val::Null,
        },
        Node::Not(x) => match eval(x, props)? {
            Val::Null => Val::Null,
            Val::Bool(b) => Val::Bool(!b),
            Val::Int(_) | Val::Long(_) | Val::Double(_) | Val::Str(_) => return Err(Failed),
        },
        Node::And(xs) => logic(xs, props, false)?,
        Node::Or(xs) => logic(xs, props, true)?,
        Node::Eq(l, r) => match (eval(l, props)?, eval(r, props)?) {
            (Val::Null, Val::Null) => Val::Bool(true),
            (Val::Null, _) => Val::Null,
            (_, Val::Null) => Val::Bool(false),
            (a, b) => Val::Bool(java_equals(a, b) || compare(a, b)? == Ordering::Equal),
        },
        Node::Cmp(l, op, r) => ordered(eval(l, props)?, *op, r, props)?,
        Node::Between {
            value,
            low,
            high,
            not,
        } => {
            // As RocketMQ's AND (OR for NOT BETWEEN) of the two comparisons, left to right.
            let v = eval(value, props)?;
            let (first_op, second_op) = if *not {
                (CmpOp::Lt, CmpOp::Gt)
            } else {
                (CmpOp::Ge, CmpOp::Le)
            };
            let first = ordered(v, first_op, low, props)?;
            if first == Val::Bool(*not) {
                return Ok(first);
            }
            let second = ordered(v, second_op, high, props)?;
            match (first, second) {
                (_, Val::Bool(b)) if b == *not => second,
                (Val::Null, _) | (_, Val::Null) => Val::Null,
                _ => Val::Bool(!*not),
            }
        }
        Node::In { prop, items, not } => match props(prop) {
            None => Val::Null,
            Some(v) => Val::Bool(items.binary_search_by(|i| (**i).cmp(v)).is_ok() != *not),
        },
        Node::Text {
            left,
            op,
            search,
            not,
        } => {
            if search.is_empty() {
                return Ok(Val::Bool(false));
            }
            match eval(left, props)? {
                Val::Str(s) => Val::Bool(
                    match op {
                        TextOp::Contains => s.contains(&**search),
                        TextOp::StartsWith => s.starts_with(&**search),
                        TextOp::EndsWith => s.ends_with(&**search),
                    } != *not,
                ),
                Val::Null | Val::Bool(_) | Val::Int(_) | Val::Long(_) | Val::Double(_) => {
                    Val::Bool(false)
                }
            }
        }
    })
}

/// RocketMQ's `>`, `>=`, `<`, `<=` of an evaluated left side and the right one (evaluated only
/// when the left is not NULL).
fn ordered<'a, F: Fn(&str) -> Option<&'a str>>(
    a: Val<'a>,
    op: CmpOp,
    r: &'a Node,
    props: &F,
) -> Result<Val<'a>, Failed> {
    if a == Val::Null {
        return Ok(Val::Null);
    }
    let ord = match (a, eval(r, props)?) {
        (_, Val::Null) => return Ok(Val::Null),
        // Two strings are ordered as numbers, or not at all.
        (Val::Str(x), Val::Str(y)) => java::compare_double(
            java::parse_double(x).ok_or(Failed)?,
            java::parse_double(y).ok_or(Failed)?,
        ),
        (a, b) => compare(a, b)?,
    };
    Ok(Val::Bool(match op {
        CmpOp::Gt => ord.is_gt(),
        CmpOp::Ge => ord.is_ge(),
        CmpOp::Lt => ord.is_lt(),
        CmpOp::Le => ord.is_le(),
    }))
}

/// AND (`or` false) or OR over conditions, left to right, stopping at the deciding operand.
fn logic<'a, F: Fn(&str) -> Option<&'a str>>(
    xs: &'a [Node],
    props: &F,
    or: bool,
) -> Result<Val<'a>, Failed> {
    let mut unknown = false;
    for x in xs {
        match eval(x, props)? {
            Val::Bool(b) if b == or => return Ok(Val::Bool(or)),
            Val::Bool(_) => {}
            Val::Null => unknown = true,
            Val::Int(_) | Val::Long(_) | Val::Double(_) | Val::Str(_) => return Err(Failed),
        }
    }
    Ok(if unknown { Val::Null } else { Val::Bool(!or) })
}

/// Java's `Object.equals` between two values: same type and value (`Double.equals` for doubles).
fn java_equals(a: Val<'_>, b: Val<'_>) -> bool {
    match (a, b) {
        (Val::Double(x), Val::Double(y)) => java::double_equals(x, y),
        _ => a == b,
    }
}

/// RocketMQ's `ComparisonExpression.__compare` (with string conversion on, as its parser
/// sets it): numbers widen to the wider type; a string meeting a number or boolean converts to
/// that type; unrelated types are "less". `Err` where Java throws.
pub(super) fn compare(a: Val<'_>, b: Val<'_>) -> Result<Ordering, Failed> {
    use Val::{Bool, Double, Int, Long, Null, Str};
    let dbl = java::compare_double;
    #[allow(clippy::cast_precision_loss)] // Java widens long to double the same way
    let wide = |l: i64| l as f64;
    Ok(match (a, b) {
        (Bool(x), Bool(y)) => x.cmp(&y),
        (Int(x), Int(y)) => x.cmp(&y),
        (Long(x), Long(y)) => x.cmp(&y),
        (Double(x), Double(y)) => dbl(x, y),
        // Only whether they are equal is ever asked of two strings.
        (Str(x), Str(y)) => x.cmp(y),
        // Java casts the Boolean itself to String here: a ClassCastException.
        (Bool(_), Str(_)) => return Err(Failed),
        (Bool(_), Int(_) | Long(_) | Double(_))
        | (Int(_) | Long(_) | Double(_), Bool(_))
        // NULL never gets here: both callers answer it first.
        | (Null, _)
        | (_, Null) => Ordering::Less,
        (Int(x), Long(y)) => i64::from(x).cmp(&y),
        (Int(x), Double(y)) => dbl(f64::from(x), y),
        (Int(x), Str(s)) => x.cmp(&java::parse_int(s).ok_or(Failed)?),
        (Long(x), Int(y)) => x.cmp(&i64::from(y)),
        (Long(x), Double(y)) => dbl(wide(x), y),
        (Long(x), Str(s)) => x.cmp(&java::parse_long(s).ok_or(Failed)?),
        (Double(x), Int(y)) => dbl(x, f64::from(y)),
        (Double(x), Long(y)) => dbl(x, wide(y)),
        (Double(x), Str(s)) => dbl(x, java::parse_double(s).ok_or(Failed)?),
        (Str(s), Bool(y)) => java::parse_bool(s).cmp(&y),
        (Str(s), Int(y)) => java::parse_int(s).ok_or(Failed)?.cmp(&y),
        (Str(s), Long(y)) => java::parse_long(s).ok_or(Failed)?.cmp(&y),
        (Str(s), Double(y)) => dbl(java::parse_double(s).ok_or(Failed)?, y),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::{String, ToString};
    use std::collections::HashMap;

    #[test]
    fn an_error_names_the_problem_and_where() {
        let e = Sql92::parse("a = 'x' AND 5").expect_err("5 is no condition");
        assert_eq!(e.kind, K::NotCondition("5".into()));
        assert_eq!(e.position, 12);
        assert_eq!(
            e.to_string(),
            "5 is not a condition (true, false or unknown) (at byte 12)"
        );
        let e = Sql92::parse("a IN ('x', 3)").expect_err("3 is no string");
        assert_eq!(e.position, 11);
        assert!(
            e.to_string().contains("expected a string literal, found 3"),
            "{e}"
        );
    }

    #[test]
    fn evaluation_reads_each_property_of_the_expression_once() {
        // Nested BETWEENs over negations: RocketMQ reads each value twice (once per bound), so
        // 2^20 times here; one node per BETWEEN reads it once.
        let expr = ["-(".repeat(20), "a".into(), ") BETWEEN 1 AND 2".repeat(20)].concat();
        let f = Sql92::parse(&expr).expect("parses");
        let reads = core::cell::Cell::new(0);
        let outcome = f.evaluate(|_| {
            reads.set(reads.get() + 1);
            Some("x")
        });
        assert_eq!(outcome, Outcome::Unknown);
        assert_eq!(reads.get(), 1);
    }

    #[test]
    fn properties_may_live_shorter_or_longer_than_the_expression() {
        let f = Sql92::parse("TAGS = 'a' AND KEYS STARTSWITH 'k'").expect("parses");
        let message: HashMap<String, String> = [("TAGS", "a"), ("KEYS", "k1")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert!(f.matches(|n| message.get(n).map(String::as_str)));
        assert!(!f.matches(|n| (n == "TAGS").then_some("a")));
        assert_eq!(f.evaluate(|n| (n == "TAGS").then_some("b")), Outcome::False);
    }
}
