#!/usr/bin/env python3
"""Import circles between the files of a crate's src/ (issue 30: none larger than three files).

A file depends on another when it names a path into it (`crate::a::b`, `super::x`, a `use`
group's items). Prints every strongly connected component of more than one file and exits 1
when one is larger than MAX (default 3).

    python3 tests/ci/tools/module_cycles.py broker/src [MAX]
"""
import os
import re
import sys

SRC = sys.argv[1] if len(sys.argv) > 1 else "broker/src"
MAX = int(sys.argv[2]) if len(sys.argv) > 2 else 3


def module_of(path):
    rel = os.path.relpath(path, SRC)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)


files = {}
for d, _, names in os.walk(SRC):
    for n in names:
        if n.endswith(".rs"):
            p = os.path.join(d, n)
            files[module_of(p)] = p
mods = set(files)


def resolve(segs):
    """The longest module prefix of a path that is a file."""
    for i in range(len(segs), 0, -1):
        if tuple(segs[:i]) in mods:
            return tuple(segs[:i])
    return None


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def expand(prefix, body):
    """Paths of a `{…}` group (nested groups flattened one level at a time)."""
    out, depth, cur = [], 0, ""
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    paths = []
    for item in out:
        m = re.match(r"([\w:]*?)::\{(.*)\}$", item, re.S)
        if m:
            paths += expand(prefix + [s for s in m.group(1).split("::") if s], m.group(2))
        else:
            paths.append(prefix + [s for s in item.split(" as ")[0].split("::") if s and s != "self"])
    return paths


def deps(mod, text):
    text = strip_comments(text)
    found = set()
    here = list(mod)
    for m in re.finditer(r"\b(crate|super)((?:::(?:\w+|\{))+)", text):
        root, rest = m.group(1), m.group(2)
        base = [] if root == "crate" else here[:-1] if files[mod].endswith("mod.rs") is False else here[:-1]
        if root == "super":
            # `super` of a.rs or a/mod.rs is the parent of module a.
            base = here[:-1]
        segs = [s for s in rest.split("::") if s]
        if segs and segs[-1] == "{":
            # A group: read to its matching brace.
            start = m.end()
            depth, i = 1, start
            while i < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            for p in expand(base + segs[:-1], text[start:i - 1]):
                r = resolve(p)
                if r is not None:
                    found.add(r)
        else:
            r = resolve(base + segs)
            if r is not None:
                found.add(r)
    found.discard(mod)
    # A module's parent is its namespace, not a dependency of substance (mod.rs declares it).
    return {d for d in found if d != tuple(mod[:-1]) or d in ()}


graph = {m: deps(m, open(p).read()) for m, p in files.items()}

# Tarjan's strongly connected components.
index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]
sys.setrecursionlimit(10000)


def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in graph[v]:
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        comps.append(comp)


for v in sorted(graph):
    if v not in index:
        visit(v)

big = 0
for c in sorted((c for c in comps if len(c) > 1), key=len, reverse=True):
    names = sorted("/".join(m) or "lib" for m in c)
    print(f"{len(c)} files: {', '.join(names)}")
    big = max(big, len(c))
print(f"largest import circle: {big} files (allowed: {MAX})")
sys.exit(1 if big > MAX else 0)
