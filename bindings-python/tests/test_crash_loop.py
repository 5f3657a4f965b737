"""Crash loop through the Python binding: a child Python process drives a durable broker
(sync flush) with sends, batches, delayed sends and transactions committed, rolled back or
left unknown, and is killed with SIGKILL at random moments, often between a prepare and its
commit. After the last cycle a fresh broker checks everything against what the children
reported as acknowledged: every acknowledged message delivered exactly once, no rolled-back
message delivered, every transaction left unknown checked and resolved as the checker
answered, nothing delivered that was never sent.

Cycles: ROCKLET_PY_CRASH_CYCLES (default 8); seed: ROCKLET_PY_CRASH_SEED (printed).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Dict, List, Set

import rocklet

CHILD = textwrap.dedent(
    """
    import random, sys, time
    import rocklet
    data, cycle, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    b = rocklet.Broker(data, flush="sync")
    def out(kind, ident):
        sys.stdout.write(f"{kind} {ident}\\n")
        sys.stdout.flush()
    out("READY", cycle)
    n = 0
    while True:
        n += 1
        tag = f"{cycle}-{n}"
        op = rng.randrange(100)
        if op < 25:
            ident = f"N-{tag}"
            out("SENT", ident)
            b.send("PyCrash", ident)
            out("ACK", ident)
        elif op < 35:
            ids = [f"B-{tag}-{i}" for i in range(rng.randrange(2, 5))]
            for i in ids:
                out("SENT", i)
            b.send_batch("PyCrash", ids)
            for i in ids:
                out("ACK", i)
        elif op < 45:
            ident = f"D-{tag}"
            out("SENT", ident)
            b.send("PyCrash", ident, delay_ms=rng.randrange(1, 300))
            out("ACK", ident)
        else:
            kind = rng.choice(["C", "C", "R", "UC", "UR"])
            ident = f"{kind}-{tag}"
            out("SENT", ident)
            tx = b.prepare("PyPG", "PyCrash", ident)
            out("ACK", ident)
            # Mid-transaction: the parent's SIGKILL often lands here.
            time.sleep(rng.random() * 0.01)
            if kind == "C":
                tx.commit()
                out("ENDED", ident)
            elif kind == "R":
                tx.rollback()
                out("ENDED", ident)
    """
)


def run_child(data: Path, cycle: int, seed: int, kill_after: float, acked: Set[str], sent: Set[str], ended: Set[str]) -> None:
    p = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(data), str(cycle), str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None
    lines: List[str] = []

    def read() -> None:
        assert p.stdout is not None
        for line in p.stdout:
            lines.append(line)

    t = threading.Thread(target=read)
    t.start()
    deadline = time.monotonic() + 30
    while not any(line.startswith("READY") for line in lines):
        assert p.poll() is None, f"child died: {p.stderr.read() if p.stderr else ''}"
        assert time.monotonic() < deadline, "child never opened the broker"
        time.sleep(0.01)
    time.sleep(kill_after)
    p.send_signal(signal.SIGKILL)
    p.wait()
    t.join()
    for line in lines:
        kind, _, ident = line.strip().partition(" ")
        if kind == "SENT":
            sent.add(ident)
        elif kind == "ACK":
            acked.add(ident)
        elif kind == "ENDED":
            ended.add(ident)


def test_sigkill_mid_transaction_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    cycles = int(os.environ.get("ROCKLET_PY_CRASH_CYCLES", "8"))
    seed = int(os.environ.get("ROCKLET_PY_CRASH_SEED", str(random.randrange(1 << 32))))
    print(f"python crash loop: {cycles} cycles, seed {seed}")
    rng = random.Random(seed)
    data = tmp_path / "data"
    acked: Set[str] = set()
    sent: Set[str] = set()
    ended: Set[str] = set()
    for cycle in range(cycles):
        run_child(data, cycle, rng.randrange(1 << 32), rng.uniform(0.05, 0.6), acked, sent, ended)
    assert acked, "the children acknowledged nothing"

    # Recover, answer every check as the id says, then read everything.
    b = rocklet.Broker(
        data, clock="manual", start_ms=int(time.time() * 1000) + 1000,
        flush="sync", transaction_timeout_ms=100, transaction_check_interval_ms=100,
    )
    checked: Dict[str, str] = {}

    def checker(m: rocklet.Message) -> str:
        ident = m.text()
        answer = "commit" if ident.split("-")[0] in ("C", "UC") else "rollback"
        checked[ident] = answer
        return answer

    b.set_checker("PyPG", checker)
    b.advance(5_000)
    assert b.pending_transactions() == []
    delivered: List[str] = []
    while True:
        got = b.pull("Reader", "PyCrash", max=1000)
        if not got:
            break
        delivered.extend(m.text() for m in got)
    b.close()

    must = {i for i in acked if i.split("-")[0] in ("N", "B", "D", "C", "UC")}
    never = {i for i in sent if i.split("-")[0] in ("R", "UR")}
    dup = {i for i in delivered if delivered.count(i) > 1}
    summary = (
        f"{cycles} cycles (seed {seed}): {len(sent)} sends, {len(acked)} acknowledged, "
        f"{len(delivered)} delivered, {len(checked)} checked"
    )
    print(summary)
    assert not dup, f"duplicates: {sorted(dup)[:10]}; {summary}"
    assert not (must - set(delivered)), f"lost: {sorted(must - set(delivered))[:10]}; {summary}"
    assert not (never & set(delivered)), f"rolled back but delivered: {sorted(never & set(delivered))}"
    assert not (set(delivered) - sent), f"never sent: {sorted(set(delivered) - sent)}"
    for i in acked:
        if i.split("-")[0] in ("UC", "UR"):
            assert i in checked, f"unknown transaction {i} was never checked; {summary}"
    # Transactions the producer ended are not checked again (RocketMQ #1517).
    assert not (ended & set(checked)), f"checked after END: {sorted(ended & set(checked))}"
