#!/usr/bin/env python3
"""Writes tests/vectors/sql92-random.json: random SQL92 expressions over random properties,
from a fixed seed, with "expect": "?" for Apache RocketMQ's filter module to fill in:

    python3 tests/sql92/random_cases.py
    java -cp '.tools/fidelity/sql92-jars/*:.tools/fidelity/sql92-classes' Sql92Check \\
        tests/vectors/sql92-random.json --bless

(the classes and jars as tests/ci/fidelity.sh builds them). The expected outcomes are then
Apache's; core/tests/sql92.rs holds Rocklet to them, fidelity.sh Apache again."""
import json
import os
import random

SEED, COUNT = 34, 1000
NAMES = ["a", "b", "c", "TAGS"]
VALUES = ["1", "-1", "0", "+1", "01", "1.0", "1.5", " 2 ", "x", "", "true", "TRUE", "NaN",
          "Infinity", "-0.0", "3000000000", "2147483648", "1e3", "abc", "ab", "0x1p1", "5"]
STRINGS = ["'x'", "'1'", "'ab'", "''", "'true'", "'1.5'", "'it''s'"]
NUMBERS = ["1", "0", "5", "1.5", "2147483648", "3000000000", "1e3", "10L", ".5", "1."]
rnd = random.Random(SEED)


def literal():
    r = rnd.random()
    if r < 0.35:
        return rnd.choice(STRINGS)
    if r < 0.75:
        return rnd.choice(NUMBERS)
    return rnd.choice(["TRUE", "FALSE", "NULL"])


def value(d):
    r = rnd.random()
    if d <= 0 or r < 0.6:
        return rnd.choice(NAMES)
    if r < 0.8:
        return literal()
    if r < 0.9:
        return "-" + value(d - 1)
    if r < 0.95:
        return "+" + value(d - 1)
    return "(" + expression(d - 1) + ")"


def condition(d):
    r = rnd.random()
    v = value(d)
    if r < 0.4:
        return v + " " + rnd.choice(["=", "<>", ">", ">=", "<", "<="]) + " " + value(d)
    if r < 0.5:
        return v + rnd.choice([" BETWEEN ", " NOT BETWEEN "]) + value(d) + " AND " + value(d)
    if r < 0.6:
        items = ", ".join(rnd.choice(STRINGS + ["1"]) for _ in range(rnd.randint(1, 6)))
        return v + rnd.choice([" IN (", " NOT IN ("]) + items + ")"
    if r < 0.7:
        op = rnd.choice(["CONTAINS", "STARTSWITH", "ENDSWITH"])
        return v + rnd.choice([" ", " NOT "]) + op + " " + rnd.choice(STRINGS)
    if r < 0.8:
        return v + rnd.choice([" IS NULL", " IS NOT NULL"])
    if r < 0.88 and d > 0:
        return "NOT " + condition(d - 1)
    if r < 0.94 or d <= 0:
        return v
    return "(" + expression(d - 1) + ")"


def expression(d):
    e = condition(d)
    for _ in range(rnd.randint(0, 3)):
        e += rnd.choice([" AND ", " OR "]) + condition(d)
    return e


cases = []
for _ in range(COUNT):
    e = expression(3)
    props = {n: rnd.choice(VALUES) for n in NAMES if rnd.random() < 0.6}
    cases.append({"expr": e, "props": props, "expect": "?"})
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
with open(os.path.join(root, "tests", "vectors", "sql92-random.json"), "w") as f:
    f.write('{\n "description": "Random SQL92 cases (tests/sql92/random_cases.py, seed %d); '
            'the outcomes are Apache RocketMQ 5.5.0\'s (Sql92Check --bless).",\n "cases": [\n' % SEED)
    f.write(",\n".join("  " + json.dumps(c) for c in cases))
    f.write("\n ]\n}\n")
