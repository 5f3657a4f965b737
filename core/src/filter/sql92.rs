//! RocketMQ's SQL92 property filter: lexer, parser and evaluator.
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

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::cmp::Ordering;

use super::java;
use super::{FilterError, FilterErrorKind as K, MAX_DEPTH, MAX_EXPR_LEN, MAX_IN_LIST};

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
    /// refuses it, or if it exceeds [`MAX_EXPR_LEN`], [`MAX_DEPTH`] or [`MAX_IN_LIST`].
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
        let mut p = Parser {
            src: expr,
            pos: 0,
            ahead: VecDeque::new(),
            depth: 0,
        };
        let top = p.or_expr()?;
        // RocketMQ stops here: the token after the expression was read (so it must be a valid
        // token) but nothing requires it to be the end.
        let top = p.condition(top)?;
        Ok(Sql92 { root: top.node })
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
enum Lit {
    Str(Box<str>),
    Int(i32),
    Long(i64),
    Double(f64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CmpOp {
    Gt,
    Ge,
    Lt,
    Le,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TextOp {
    Contains,
    StartsWith,
    EndsWith,
}

#[derive(Clone, Debug, PartialEq)]
enum Node {
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
    fn is_literal(&self) -> bool {
        matches!(self, Node::Lit(_) | Node::BoolLit(_))
    }
    /// Java's `BooleanExpression`: a condition.
    fn is_condition(&self) -> bool {
        match self {
            Node::BoolLit(_)
            | Node::Cast(_)
            | Node::Not(_)
            | Node::And(_)
            | Node::Or(_)
            | Node::Eq(..)
            | Node::Cmp(..)
            | Node::In { .. }
            | Node::Text { .. } => true,
            Node::Lit(_) | Node::Prop(_) | Node::Negate(_) => false,
        }
    }
}

/// A parsed piece: its node, the height of its tree, and its span in the source.
struct Sub {
    node: Node,
    height: usize,
    start: usize,
    end: usize,
}

// ---------------------------------------------------------------------------------------------
// Evaluation

#[derive(Clone, Copy, Debug, PartialEq)]
enum Val<'a> {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Double(f64),
    Str(&'a str),
}

/// Java threw during evaluation (NumberFormatException, ClassCastException).
#[derive(Debug)]
struct Failed;

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
        Node::Cmp(l, op, r) => {
            let a = eval(l, props)?;
            if a == Val::Null {
                return Ok(Val::Null);
            }
            let b = eval(r, props)?;
            let ord = match (a, b) {
                (_, Val::Null) => return Ok(Val::Null),
                // Two strings are ordered as numbers, or not at all.
                (Val::Str(x), Val::Str(y)) => {
                    java::compare_double(java::parse_double(x).ok_or(Failed)?, {
                        java::parse_double(y).ok_or(Failed)?
                    })
                }
                (a, b) => compare(a, b)?,
            };
            Val::Bool(match op {
                CmpOp::Gt => ord.is_gt(),
                CmpOp::Ge => ord.is_ge(),
                CmpOp::Lt => ord.is_lt(),
                CmpOp::Le => ord.is_le(),
            })
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
fn compare(a: Val<'_>, b: Val<'_>) -> Result<Ordering, Failed> {
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

// ---------------------------------------------------------------------------------------------
// Lexer

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok<'s> {
    Not,
    And,
    Or,
    Between,
    In,
    True,
    False,
    Null,
    Is,
    Contains,
    StartsWith,
    EndsWith,
    Decimal(&'s str),
    Float(&'s str),
    /// A string literal's text between its quotes, `''` not yet decoded.
    Str(&'s str),
    Id(&'s str),
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    LParen,
    Comma,
    RParen,
    Plus,
    Minus,
    Eof,
}

#[derive(Clone, Copy, Debug)]
struct Spanned<'s> {
    tok: Tok<'s>,
    start: usize,
    end: usize,
}

const KEYWORDS: [(&str, Tok<'static>); 12] = [
    ("NOT", Tok::Not),
    ("AND", Tok::And),
    ("OR", Tok::Or),
    ("BETWEEN", Tok::Between),
    ("IN", Tok::In),
    ("TRUE", Tok::True),
    ("FALSE", Tok::False),
    ("NULL", Tok::Null),
    ("IS", Tok::Is),
    ("CONTAINS", Tok::Contains),
    ("STARTSWITH", Tok::StartsWith),
    ("ENDSWITH", Tok::EndsWith),
];

fn describe(t: Tok<'_>) -> String {
    let quoted = |s: &str| {
        let mut q = String::from("'");
        q.push_str(s);
        q.push('\'');
        q
    };
    match t {
        Tok::Decimal(s) | Tok::Float(s) => s.to_string(),
        Tok::Str(s) => quoted(s),
        Tok::Id(s) => {
            let mut d = String::from("property ");
            d.push_str(s);
            d
        }
        Tok::Eof => String::from("end of expression"),
        _ => {
            let text = KEYWORDS
                .iter()
                .find(|(_, k)| *k == t)
                .map(|(s, _)| *s)
                .unwrap_or(match t {
                    Tok::Eq => "=",
                    Tok::Ne => "<>",
                    Tok::Gt => ">",
                    Tok::Ge => ">=",
                    Tok::Lt => "<",
                    Tok::Le => "<=",
                    Tok::LParen => "(",
                    Tok::Comma => ",",
                    Tok::RParen => ")",
                    Tok::Plus => "+",
                    Tok::Minus => "-",
                    _ => "?",
                });
            quoted(text)
        }
    }
}

struct Parser<'s> {
    src: &'s str,
    /// Where the lexer reads next.
    pos: usize,
    /// Tokens read ahead (at most two: RocketMQ's parser looks two ahead, never more).
    ahead: VecDeque<Spanned<'s>>,
    /// Parser recursion: parentheses and unary operators.
    depth: usize,
}

fn err<T>(kind: K, position: usize) -> Result<T, FilterError> {
    Err(FilterError { kind, position })
}

impl<'s> Parser<'s> {
    /// The next token from the source. Tokens are read only as the grammar asks for them, as
    /// RocketMQ's lexer does, so a bad character after a complete expression's next token is
    /// never seen.
    fn lex(&mut self) -> Result<Spanned<'s>, FilterError> {
        let src = self.src;
        let b = src.as_bytes();
        // Whitespace and comments.
        loop {
            while self.pos < b.len() && matches!(b[self.pos], b' ' | b'\t' | b'\n' | b'\r' | 0x0c) {
                self.pos += 1;
            }
            let rest = &src[self.pos..];
            if rest.starts_with("--") {
                // A line comment needs its line end; without one, `--` is two minus signs.
                match rest.find(['\n', '\r']) {
                    Some(i) => {
                        self.pos += i + 1;
                        continue;
                    }
                    None => break,
                }
            }
            if let Some(body) = rest.strip_prefix("/*") {
                match body.find("*/") {
                    Some(i) => {
                        self.pos += 2 + i + 2;
                        continue;
                    }
                    None => return err(K::UnterminatedComment, self.pos),
                }
            }
            break;
        }
        let start = self.pos;
        let Some(&c) = b.get(start) else {
            return Ok(Spanned {
                tok: Tok::Eof,
                start,
                end: start,
            });
        };
        let (tok, len) = match c {
            b'\'' => {
                let mut i = start + 1;
                loop {
                    match src[i..].find('\'') {
                        None => return err(K::UnterminatedString, start),
                        Some(q) if b.get(i + q + 1) == Some(&b'\'') => i += q + 2,
                        Some(q) => {
                            i += q;
                            break;
                        }
                    }
                }
                (Tok::Str(&src[start + 1..i]), i + 1 - start)
            }
            b'0'..=b'9' | b'.' => return self.number(start),
            b'a'..=b'z' | b'A'..=b'Z' | b'_' | b'$' => {
                let len = b[start..]
                    .iter()
                    .take_while(|&&c| c.is_ascii_alphanumeric() || c == b'_' || c == b'$')
                    .count();
                let word = &src[start..start + len];
                let tok = KEYWORDS
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(word))
                    .map_or(Tok::Id(word), |(_, t)| *t);
                (tok, len)
            }
            b'=' => (Tok::Eq, 1),
            b'<' => match b.get(start + 1) {
                Some(b'>') => (Tok::Ne, 2),
                Some(b'=') => (Tok::Le, 2),
                _ => (Tok::Lt, 1),
            },
            b'>' => match b.get(start + 1) {
                Some(b'=') => (Tok::Ge, 2),
                _ => (Tok::Gt, 1),
            },
            b'(' => (Tok::LParen, 1),
            b',' => (Tok::Comma, 1),
            b')' => (Tok::RParen, 1),
            b'+' => (Tok::Plus, 1),
            b'-' => (Tok::Minus, 1),
            _ => {
                let ch = src[start..].chars().next().unwrap_or('\u{fffd}');
                return err(K::UnexpectedChar(ch), start);
            }
        };
        self.pos = start + len;
        Ok(Spanned {
            tok,
            start,
            end: self.pos,
        })
    }

    /// A number: the longest of `0`, `[1-9][0-9]*[lL]?` and the float forms.
    fn number(&mut self, start: usize) -> Result<Spanned<'s>, FilterError> {
        let b = self.src.as_bytes();
        let digits = |from: usize| b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
        let int = digits(start);
        let mut end = start + int;
        let mut float = false;
        if b.get(end) == Some(&b'.') {
            let frac = digits(end + 1);
            if int == 0 && frac == 0 {
                return err(K::UnexpectedChar('.'), start);
            }
            end += 1 + frac;
            float = true;
        }
        if matches!(b.get(end), Some(b'e' | b'E')) {
            let sign = usize::from(matches!(b.get(end + 1), Some(b'+' | b'-')));
            let n = digits(end + 1 + sign);
            if n > 0 {
                end += 1 + sign + n;
                float = true;
            }
        }
        let tok = if float {
            Tok::Float(&self.src[start..end])
        } else if b[start] == b'0' {
            end = start + 1;
            Tok::Decimal("0")
        } else {
            if matches!(b.get(end), Some(b'l' | b'L')) {
                end += 1;
            }
            Tok::Decimal(&self.src[start..end])
        };
        self.pos = end;
        Ok(Spanned { tok, start, end })
    }

    fn peek(&mut self, k: usize) -> Result<Spanned<'s>, FilterError> {
        while self.ahead.len() <= k {
            let t = self.lex()?;
            self.ahead.push_back(t);
        }
        Ok(self.ahead[k])
    }

    fn next(&mut self) -> Result<Spanned<'s>, FilterError> {
        let t = self.peek(0)?;
        self.ahead.pop_front();
        Ok(t)
    }

    fn expect(
        &mut self,
        want: Tok<'static>,
        expected: &'static str,
    ) -> Result<Spanned<'s>, FilterError> {
        let t = self.next()?;
        if t.tok == want {
            Ok(t)
        } else {
            err(
                K::Unexpected {
                    found: describe(t.tok),
                    expected,
                },
                t.start,
            )
        }
    }

    fn text(&self, s: &Sub) -> String {
        self.src[s.start..s.end].to_string()
    }

    /// One more level of parser recursion.
    fn enter(&mut self, at: usize) -> Result<(), FilterError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return err(K::TooDeep, at);
        }
        Ok(())
    }

    /// A new node over children at most `below` high, refused if the tree gets deeper than
    /// [`MAX_DEPTH`].
    fn node(&self, node: Node, below: usize, start: usize, end: usize) -> Result<Sub, FilterError> {
        let height = below + 1;
        if height > MAX_DEPTH {
            return err(K::TooDeep, start);
        }
        Ok(Sub {
            node,
            height,
            start,
            end,
        })
    }

    // Grammar ------------------------------------------------------------------------------

    fn or_expr(&mut self) -> Result<Sub, FilterError> {
        let mut left = self.and_expr()?;
        while self.peek(0)?.tok == Tok::Or {
            self.next()?;
            let right = self.and_expr()?;
            left = self.logic(left, right, true)?;
        }
        Ok(left)
    }

    fn and_expr(&mut self) -> Result<Sub, FilterError> {
        let mut left = self.equality()?;
        while self.peek(0)?.tok == Tok::And {
            self.next()?;
            let right = self.equality()?;
            left = self.logic(left, right, false)?;
        }
        Ok(left)
    }

    /// `left AND right` or `left OR right`, flattened into one chain.
    fn logic(&self, left: Sub, right: Sub, or: bool) -> Result<Sub, FilterError> {
        let left = self.condition(left)?;
        let right = self.condition(right)?;
        let (start, end) = (left.start, right.end);
        let height = left.height.max(right.height + 1).max(2);
        let mut items = Vec::new();
        for s in [left, right] {
            match s.node {
                Node::Or(xs) if or => items.extend(xs),
                Node::And(xs) if !or => items.extend(xs),
                n => items.push(n),
            }
        }
        if height > MAX_DEPTH {
            return err(K::TooDeep, start);
        }
        let node = if or {
            Node::Or(items)
        } else {
            Node::And(items)
        };
        Ok(Sub {
            node,
            height,
            start,
            end,
        })
    }

    /// RocketMQ's `asBooleanExpression`: a condition as it is, a property as a condition.
    fn condition(&self, s: Sub) -> Result<Sub, FilterError> {
        match s.node {
            Node::Prop(name) => Ok(Sub {
                node: Node::Cast(name),
                ..s
            }),
            ref n if n.is_condition() => Ok(s),
            _ => err(K::NotCondition(self.text(&s)), s.start),
        }
    }

    fn equality(&mut self) -> Result<Sub, FilterError> {
        let mut left = self.comparison()?;
        loop {
            let t = self.peek(0)?;
            left = match t.tok {
                Tok::Eq | Tok::Ne => {
                    self.next()?;
                    let right = self.comparison()?;
                    let eq = self.equal(left, right)?;
                    if t.tok == Tok::Ne {
                        self.not(eq)?
                    } else {
                        eq
                    }
                }
                Tok::Is => {
                    let is_null = self.peek(1)?.tok == Tok::Null;
                    self.next()?;
                    if !is_null {
                        self.expect(Tok::Not, "NULL or NOT NULL after IS")?;
                    }
                    let null = self.expect(Tok::Null, "NULL after IS NOT")?;
                    let (start, end) = (left.start, null.end);
                    let eq = self.node(
                        Node::Eq(Box::new(left.node), Box::new(Node::BoolLit(None))),
                        left.height,
                        start,
                        end,
                    )?;
                    if is_null {
                        eq
                    } else {
                        self.not(eq)?
                    }
                }
                _ => return Ok(left),
            };
        }
    }

    fn not(&self, s: Sub) -> Result<Sub, FilterError> {
        let (start, end) = (s.start, s.end);
        let h = s.height;
        self.node(Node::Not(Box::new(s.node)), h, start, end)
    }

    /// `left = right`, with RocketMQ's checks: no NULL literal on either side, and a boolean
    /// literal on the left only against another boolean literal.
    fn equal(&self, left: Sub, right: Sub) -> Result<Sub, FilterError> {
        for s in [&left, &right] {
            if s.node == Node::BoolLit(None) {
                return err(K::NotComparable(self.text(s)), s.start);
            }
        }
        if matches!(left.node, Node::BoolLit(_)) && matches!(right.node, Node::Lit(_)) {
            return err(
                K::IncompatibleLiterals {
                    left: self.text(&left),
                    right: self.text(&right),
                },
                left.start,
            );
        }
        let (start, end) = (left.start, right.end);
        let below = left.height.max(right.height);
        self.node(
            Node::Eq(Box::new(left.node), Box::new(right.node)),
            below,
            start,
            end,
        )
    }

    /// `left op right` for `>`, `>=`, `<`, `<=`: neither side a non-number literal nor a
    /// condition.
    fn ordered(&self, left: Sub, op: CmpOp, right: Sub) -> Result<Sub, FilterError> {
        for s in [&left, &right] {
            let number = matches!(
                s.node,
                Node::Lit(Lit::Int(_) | Lit::Long(_) | Lit::Double(_))
            );
            if (s.node.is_literal() && !number) || s.node.is_condition() {
                return err(K::NotComparable(self.text(s)), s.start);
            }
        }
        let (start, end) = (left.start, right.end);
        let below = left.height.max(right.height);
        self.node(
            Node::Cmp(Box::new(left.node), op, Box::new(right.node)),
            below,
            start,
            end,
        )
    }

    fn comparison(&mut self) -> Result<Sub, FilterError> {
        let mut left = self.unary()?;
        loop {
            let t = self.peek(0)?;
            let op = match t.tok {
                Tok::Gt => Some(CmpOp::Gt),
                Tok::Ge => Some(CmpOp::Ge),
                Tok::Lt => Some(CmpOp::Lt),
                Tok::Le => Some(CmpOp::Le),
                _ => None,
            };
            if let Some(op) = op {
                self.next()?;
                let right = self.unary()?;
                left = self.ordered(left, op, right)?;
                continue;
            }
            let not = t.tok == Tok::Not;
            let t2 = if not { self.peek(1)? } else { t };
            left = match t2.tok {
                Tok::Contains | Tok::StartsWith | Tok::EndsWith => {
                    self.next()?;
                    if not {
                        self.next()?;
                    }
                    let (search, end) = self.string()?;
                    let op = match t2.tok {
                        Tok::Contains => TextOp::Contains,
                        Tok::StartsWith => TextOp::StartsWith,
                        _ => TextOp::EndsWith,
                    };
                    let start = left.start;
                    let h = left.height;
                    let node = Node::Text {
                        left: Box::new(left.node),
                        op,
                        search: search.into_boxed_str(),
                        not,
                    };
                    self.node(node, h, start, end)?
                }
                Tok::Between => {
                    self.next()?;
                    if not {
                        self.next()?;
                    }
                    let low = self.unary()?;
                    self.expect(Tok::And, "AND between the bounds of BETWEEN")?;
                    let high = self.unary()?;
                    self.between(left, low, high, not)?
                }
                Tok::In => {
                    self.next()?;
                    if not {
                        self.next()?;
                    }
                    self.in_list(left, not)?
                }
                _ if not => {
                    return err(
                        K::Unexpected {
                            found: describe(t2.tok),
                            expected: "CONTAINS, STARTSWITH, ENDSWITH, BETWEEN or IN after NOT",
                        },
                        t2.start,
                    )
                }
                _ => return Ok(left),
            };
        }
    }

    /// `value BETWEEN low AND high` is `value >= low AND value <= high`; `NOT BETWEEN` is
    /// `value < low OR value > high`. RocketMQ refuses literal bounds that are NULL or out of
    /// order for BETWEEN (not for NOT BETWEEN).
    fn between(&self, value: Sub, low: Sub, high: Sub, not: bool) -> Result<Sub, FilterError> {
        if !not && low.node.is_literal() && high.node.is_literal() {
            for s in [&low, &high] {
                if s.node == Node::BoolLit(None) {
                    return err(K::NotComparable(self.text(s)), s.start);
                }
            }
            let num = |n: &Node| match n {
                Node::Lit(Lit::Int(i)) => Some(Val::Int(*i)),
                Node::Lit(Lit::Long(l)) => Some(Val::Long(*l)),
                Node::Lit(Lit::Double(d)) => Some(Val::Double(*d)),
                _ => None,
            };
            if let (Some(l), Some(h)) = (num(&low.node), num(&high.node)) {
                if compare(h, l).is_ok_and(Ordering::is_lt) {
                    return err(
                        K::BetweenBounds {
                            low: self.text(&low),
                            high: self.text(&high),
                        },
                        low.start,
                    );
                }
            }
        }
        let copy = Sub {
            node: value.node.clone(),
            ..value
        };
        let (first, second) = if not {
            (
                self.ordered(copy, CmpOp::Lt, low)?,
                self.ordered(value, CmpOp::Gt, high)?,
            )
        } else {
            (
                self.ordered(copy, CmpOp::Ge, low)?,
                self.ordered(value, CmpOp::Le, high)?,
            )
        };
        self.logic(first, second, not)
    }

    fn in_list(&mut self, left: Sub, not: bool) -> Result<Sub, FilterError> {
        self.expect(Tok::LParen, "( after IN")?;
        let mut items = Vec::new();
        let end = loop {
            let at = self.peek(0)?.start;
            if items.len() == MAX_IN_LIST {
                return err(K::TooManyInItems, at);
            }
            items.push(self.string()?.0.into_boxed_str());
            let t = self.next()?;
            match t.tok {
                Tok::Comma => {}
                Tok::RParen => break t.end,
                other => {
                    return err(
                        K::Unexpected {
                            found: describe(other),
                            expected: ", or ) in the IN list",
                        },
                        t.start,
                    )
                }
            }
        };
        let Node::Prop(prop) = left.node else {
            return err(K::InNeedsProperty, left.start);
        };
        items.sort_unstable();
        items.dedup();
        let node = Node::In { prop, items, not };
        self.node(node, left.height, left.start, end)
    }

    /// A string literal, decoded (`''` is one quote), and where it ends.
    fn string(&mut self) -> Result<(String, usize), FilterError> {
        let t = self.next()?;
        let Tok::Str(raw) = t.tok else {
            return err(
                K::Unexpected {
                    found: describe(t.tok),
                    expected: "a string literal",
                },
                t.start,
            );
        };
        Ok((raw.replace("''", "'"), t.end))
    }

    fn unary(&mut self) -> Result<Sub, FilterError> {
        let t = self.peek(0)?;
        match t.tok {
            Tok::Plus | Tok::Minus | Tok::Not => {
                self.next()?;
                self.enter(t.start)?;
                let inner = self.unary()?;
                self.depth -= 1;
                match t.tok {
                    Tok::Plus => Ok(Sub {
                        start: t.start,
                        ..inner
                    }),
                    Tok::Minus => {
                        let end = inner.end;
                        let h = inner.height;
                        self.node(Node::Negate(Box::new(inner.node)), h, t.start, end)
                    }
                    _ => {
                        let c = self.condition(inner)?;
                        let s = self.not(c)?;
                        Ok(Sub {
                            start: t.start,
                            ..s
                        })
                    }
                }
            }
            _ => self.primary(),
        }
    }

    fn primary(&mut self) -> Result<Sub, FilterError> {
        let t = self.next()?;
        let node = match t.tok {
            Tok::Str(raw) => Node::Lit(Lit::Str(raw.replace("''", "'").into_boxed_str())),
            Tok::Decimal(text) => {
                let digits = text.trim_end_matches(['l', 'L']);
                let v: i64 = digits.parse().map_err(|_| FilterError {
                    kind: K::IntegerOutOfRange(text.to_string()),
                    position: t.start,
                })?;
                Node::Lit(i32::try_from(v).map_or(Lit::Long(v), Lit::Int))
            }
            Tok::Float(text) => match java::parse_double(text) {
                Some(v) if v.is_finite() && v >= f64::from_bits(1) => Node::Lit(Lit::Double(v)),
                _ => return err(K::FloatOutOfRange(text.to_string()), t.start),
            },
            Tok::True => Node::BoolLit(Some(true)),
            Tok::False => Node::BoolLit(Some(false)),
            Tok::Null => Node::BoolLit(None),
            Tok::Id(name) => Node::Prop(Box::from(name)),
            Tok::LParen => {
                self.enter(t.start)?;
                let inner = self.or_expr()?;
                let close = self.expect(Tok::RParen, ")")?;
                self.depth -= 1;
                return Ok(Sub {
                    start: t.start,
                    end: close.end,
                    ..inner
                });
            }
            other => {
                return err(
                    K::Unexpected {
                        found: describe(other),
                        expected: "a literal, a property name, NOT, a sign or (",
                    },
                    t.start,
                )
            }
        };
        Ok(sub_of(node, t.start, t.end))
    }
}

fn sub_of(node: Node, start: usize, end: usize) -> Sub {
    Sub {
        node,
        height: 1,
        start,
        end,
    }
}
