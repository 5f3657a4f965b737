//! The lexer and parser of SQL92 expressions: RocketMQ 5.5.0's `SelectorParser` (the grammar is
//! drawn in [`super::sql92`]'s docs), with its checks on operands, and Rocklet's bounds.
//!
//! Like RocketMQ's generated parser, it reads tokens only as the grammar asks (at most two
//! ahead), so what follows a complete expression is never read past its first token.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::cmp::Ordering;

use super::java;
use super::sql92::{compare, CmpOp, Lit, Node, TextOp, Val};
use super::{FilterError, FilterErrorKind as K, MAX_DEPTH, MAX_IN_LIST};

/// Parses a whole expression (its length already checked) into its tree.
pub(super) fn parse(expr: &str) -> Result<Node, FilterError> {
    let mut p = Parser {
        src: expr,
        pos: 0,
        ahead: VecDeque::new(),
        no_line_end_from: usize::MAX,
        depth: 0,
    };
    let top = p.or_expr()?;
    // RocketMQ stops here: the token after the expression was read (so it must be a valid
    // token) but nothing requires it to be the end.
    Ok(p.condition(top)?.node)
}

/// A parsed piece: its node, the height of its tree, and its span in the source.
struct Sub {
    node: Node,
    height: usize,
    start: usize,
    end: usize,
}

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

/// A token as an error message names it: as written (keywords in capitals), or what it is.
fn describe(t: Tok<'_>) -> String {
    String::from(match t {
        Tok::Decimal(s) | Tok::Float(s) => s,
        Tok::Str(s) => return ["'", s, "'"].concat(),
        Tok::Id(s) => return ["property ", s].concat(),
        Tok::Eof => "end of expression",
        Tok::Not => "NOT",
        Tok::And => "AND",
        Tok::Or => "OR",
        Tok::Between => "BETWEEN",
        Tok::In => "IN",
        Tok::True => "TRUE",
        Tok::False => "FALSE",
        Tok::Null => "NULL",
        Tok::Is => "IS",
        Tok::Contains => "CONTAINS",
        Tok::StartsWith => "STARTSWITH",
        Tok::EndsWith => "ENDSWITH",
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
    })
}

struct Parser<'s> {
    src: &'s str,
    /// Where the lexer reads next.
    pos: usize,
    /// Tokens read ahead (at most two: RocketMQ's parser looks two ahead, never more).
    ahead: VecDeque<Spanned<'s>>,
    /// Where the source has no line end left (searched once).
    no_line_end_from: usize,
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
                // A line comment needs its line end; without one, `--` is two minus signs
                // (and the rest is not searched again: lexing stays linear).
                let line_end = if self.pos < self.no_line_end_from {
                    rest.find(['\n', '\r'])
                } else {
                    None
                };
                match line_end {
                    Some(i) => {
                        self.pos += i + 1;
                        continue;
                    }
                    None => {
                        self.no_line_end_from = self.no_line_end_from.min(self.pos);
                        break;
                    }
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
        // A chain of the same operator is extended, not nested.
        let chain = |s: &Sub| match s.node {
            Node::Or(_) => or,
            Node::And(_) => !or,
            _ => false,
        };
        let height = [&left, &right]
            .map(|s| s.height + usize::from(!chain(s)))
            .into_iter()
            .max()
            .unwrap_or(1);
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
        self.orderable(&left)?;
        self.orderable(&right)?;
        let (start, end) = (left.start, right.end);
        let below = left.height.max(right.height);
        self.node(
            Node::Cmp(Box::new(left.node), op, Box::new(right.node)),
            below,
            start,
            end,
        )
    }

    /// RocketMQ's `checkLessThanOperand`: no literal but a number, no condition.
    fn orderable(&self, s: &Sub) -> Result<(), FilterError> {
        let number = matches!(
            s.node,
            Node::Lit(Lit::Int(_) | Lit::Long(_) | Lit::Double(_))
        );
        if (s.node.is_literal() && !number) || s.node.is_condition() {
            return err(K::NotComparable(self.text(s)), s.start);
        }
        Ok(())
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
        // RocketMQ builds `value >= low AND value <= high` (`value < low OR value > high`) and
        // checks those comparisons' operands; one node reads the value once for both.
        self.orderable(&value)?;
        self.orderable(&low)?;
        self.orderable(&high)?;
        let below = value.height.max(low.height).max(high.height) + 1;
        let (start, end) = (value.start, high.end);
        let node = Node::Between {
            value: Box::new(value.node),
            low: Box::new(low.node),
            high: Box::new(high.node),
            not,
        };
        self.node(node, below, start, end)
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
