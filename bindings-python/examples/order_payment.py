"""Order/payment with a transactional message and a real SQLite local transaction.

The order service stores an order in SQLite and must tell billing ("OrderCreated") if and
only if the order row was committed. It prepares a half message, runs the local SQLite
transaction, then commits the message. If the process dies in between, the broker keeps the
half message; on restart the checker looks the order up in SQLite and answers commit (the row
exists) or rollback (it does not).

Run:  python examples/order_payment.py [workdir]

The crash is real: a child process prepares, commits its SQLite transaction, and is killed
(os._exit) before it can commit the message. The parent reopens the broker from its
directory, registers the checker and lets it resolve the transaction.
"""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Callable, List

import rocklet

GROUP = "order-service"
TOPIC = "OrderCreated"


def open_broker(path: "str | Path") -> rocklet.Broker:
    """The order service's broker: durable, sync flush, quick checks for the demo."""
    return rocklet.Broker(path, flush="sync", transaction_timeout_ms=1_000, transaction_check_interval_ms=1_000)


def open_db(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, amount INTEGER NOT NULL)")
    return db


def place_order(broker: rocklet.Broker, db: sqlite3.Connection, order_id: str, amount: int) -> None:
    """The normal path: half message, local transaction, commit (rollback on failure)."""
    body = f'{{"order": "{order_id}", "amount": {amount}}}'
    with broker.transaction(GROUP, TOPIC, body, keys=[order_id], properties={"order_id": order_id}):
        db.execute("BEGIN IMMEDIATE")
        try:
            if amount <= 0:
                raise ValueError(f"order {order_id}: amount must be positive")
            db.execute("INSERT INTO orders (id, amount) VALUES (?, ?)", (order_id, amount))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise


def checker_for(db_path: Path) -> Callable[[rocklet.Message], rocklet.Resolution]:
    """The check-back: does the order the half message announces exist?"""

    def check(message: rocklet.Message) -> rocklet.Resolution:
        order_id = message.properties.get("order_id", "")
        db = open_db(db_path)
        try:
            row = db.execute("SELECT 1 FROM orders WHERE id = ?", (order_id,)).fetchone()
        finally:
            db.close()
        print(f"  checker: transaction {message.transaction_id} (check {message.check_times}) "
              f"order {order_id} -> {'commit' if row else 'rollback'}")
        return "commit" if row else "rollback"

    return check


def crashing_order(broker_dir: str, db_path: str, order_id: str, local_commit: bool) -> None:
    """Child process: prepare, (maybe) commit the order row, then die before commit()."""
    broker = open_broker(broker_dir)
    db = open_db(Path(db_path))
    tx = broker.prepare(GROUP, TOPIC, f'{{"order": "{order_id}"}}', keys=[order_id],
                        properties={"order_id": order_id})
    if local_commit:
        db.execute("INSERT INTO orders (id, amount) VALUES (?, ?)", (order_id, 42))
    print(f"  child: prepared {tx.transaction_id}, order row {'committed' if local_commit else 'not written'}; crashing")
    sys.stdout.flush()
    os._exit(1)  # no commit(), no close(): the process is gone


def main(workdir: Path) -> List[str]:
    broker_dir, db_path = workdir / "broker", workdir / "orders.db"
    db = open_db(db_path)

    print("1. normal orders")
    broker = open_broker(broker_dir)
    broker.set_checker(GROUP, checker_for(db_path))
    place_order(broker, db, "o-1", 100)
    try:
        place_order(broker, db, "o-2", -5)
    except ValueError as e:
        print(f"  o-2 failed and was rolled back: {e}")
    broker.close()

    print("2. crashes between prepare and commit")
    ctx = multiprocessing.get_context("spawn")
    for order_id, local_commit in (("o-3", True), ("o-4", False)):
        p = ctx.Process(target=crashing_order, args=(str(broker_dir), str(db_path), order_id, local_commit))
        p.start()
        p.join()
        assert p.exitcode == 1

    print("3. restart: the checker resolves what the crashes left")
    broker = open_broker(broker_dir)
    pending = broker.pending_transactions()
    print(f"  pending after restart: {[t.transaction_id for t in pending]}")
    broker.set_checker(GROUP, checker_for(db_path))
    billing = broker.subscribe("billing", TOPIC, invisible_ms=30_000, timeout=5.0)
    seen: List[str] = []
    for r in billing:
        seen.append(r.message.properties["order_id"])
        broker.ack("billing", r)
        if not broker.pending_transactions() and len(seen) >= 2:
            break
    broker.close()
    print(f"  billing saw: {sorted(seen)}")
    return sorted(seen)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        result = main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as d:
            result = main(Path(d))
    assert result == ["o-1", "o-3"], result
    print("ok: billing saw exactly the committed orders")
