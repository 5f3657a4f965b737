"""Rocklet-in-Python throughput, against a SQLite outbox doing the same work.

Not a test: prints a Markdown table for BENCHMARKS.md.

    python bindings-python/bench/bench.py [--seconds 2] [--dir /path/on/real/disk]

Work per operation, 1 KiB bodies:
- send: one message, acknowledged (durable when the flush mode says so).
- txn:  prepare (half message) + a no-op local transaction + commit.
SQLite outbox (sqlite3, WAL, one connection per thread): send = one autocommit INSERT into
an outbox table; txn = BEGIN IMMEDIATE + INSERT + COMMIT (the local work is a no-op).
Durability pairs: Rocklet flush="sync" vs synchronous=FULL; flush="async" vs NORMAL.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional, Tuple

import rocklet

BODY = b"x" * 1024
Op = Callable[[], None]


def run_threads(make_op: Callable[[int], Op], threads: int, seconds: float) -> float:
    """Runs each thread's op in a loop for `seconds`; returns operations per second."""
    counts = [0] * threads
    stop = threading.Event()
    start = threading.Barrier(threads + 1)

    def worker(i: int) -> None:
        op = make_op(i)
        start.wait()
        n = 0
        while not stop.is_set():
            for _ in range(16):
                op()
            n += 16
        counts[i] = n

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def rocklet_case(kind: str, work: str, threads: int, seconds: float, base: Path) -> float:
    path: Optional[Path] = None
    flush = "async"
    if kind != "memory":
        path = base / f"rocklet-{kind}-{work}-{threads}"
        flush = kind
    b = rocklet.Broker(path, flush=flush, segment_size=1 << 30)
    b.set_checker("bench", lambda m: "commit")

    def make(i: int) -> Op:
        if work == "send":
            return lambda: (b.send("Bench", BODY), None)[1]

        def txn() -> None:
            tx = b.prepare("bench", "Bench", BODY)
            tx.commit()

        return txn

    try:
        return run_threads(make, threads, seconds)
    finally:
        b.close()
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)


def sqlite_case(sync: str, work: str, threads: int, seconds: float, base: Path) -> float:
    db = base / f"outbox-{sync}-{work}-{threads}.db"
    setup = sqlite3.connect(db)
    setup.execute("PRAGMA journal_mode=WAL")
    setup.execute("CREATE TABLE outbox (id INTEGER PRIMARY KEY, topic TEXT, body BLOB, sent INTEGER DEFAULT 0)")
    setup.commit()
    setup.close()
    conns: List[sqlite3.Connection] = []

    def make(i: int) -> Op:
        c = sqlite3.connect(db, isolation_level=None, check_same_thread=False, timeout=60)
        c.execute(f"PRAGMA synchronous={sync}")
        conns.append(c)
        if work == "send":
            return lambda: (c.execute("INSERT INTO outbox (topic, body) VALUES ('Bench', ?)", (BODY,)), None)[1]

        def txn() -> None:
            c.execute("BEGIN IMMEDIATE")
            c.execute("INSERT INTO outbox (topic, body) VALUES ('Bench', ?)", (BODY,))
            c.execute("COMMIT")

        return txn

    try:
        return run_threads(make, threads, seconds)
    finally:
        for c in conns:
            c.close()
        for p in base.glob(db.name + "*"):
            p.unlink()


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0, help="per case")
    ap.add_argument("--dir", type=Path, default=None, help="where durable cases write (default: a temp dir)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 8])
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="rocklet-bench-", dir=args.dir))
    rows: List[Tuple[str, str, str, int, float]] = []
    try:
        for work in ("txn", "send"):
            for threads in args.threads:
                for kind, sq in (("memory", None), ("async", "NORMAL"), ("sync", "FULL")):
                    r = rocklet_case(kind, work, threads, args.seconds, base)
                    rows.append(("rocklet", kind, work, threads, r))
                    print(f"rocklet {kind:6} {work:4} x{threads}: {r:10.0f}/s", file=sys.stderr)
                    if sq is not None:
                        s = sqlite_case(sq, work, threads, args.seconds, base)
                        rows.append(("sqlite-outbox", sq, work, threads, s))
                        print(f"sqlite  {sq:6} {work:4} x{threads}: {s:10.0f}/s", file=sys.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print(f"Machine: {machine()}; data dir: {args.dir or tempfile.gettempdir()}")
    print(f"Command: python bindings-python/bench/bench.py --seconds {args.seconds:g}\n")
    print("| work | threads | storage | Rocklet ops/s | SQLite outbox ops/s | Rocklet / SQLite |")
    print("|---|---|---|---:|---:|---:|")
    lookup = {(e, k, w, t): v for e, k, w, t, v in rows}
    for work in ("txn", "send"):
        for threads in args.threads:
            for kind, sq in (("memory", None), ("async", "NORMAL"), ("sync", "FULL")):
                r = lookup[("rocklet", kind, work, threads)]
                label = {"memory": "memory", "async": "durable, flush=async", "sync": "durable, flush=sync"}[kind]
                if sq is None:
                    print(f"| {work} | {threads} | {label} | {r:,.0f} | | |")
                else:
                    s = lookup[("sqlite-outbox", sq, work, threads)]
                    print(f"| {work} | {threads} | {label} vs synchronous={sq} | {r:,.0f} | {s:,.0f} | {r / s:.1f}x |")


if __name__ == "__main__":
    main()
