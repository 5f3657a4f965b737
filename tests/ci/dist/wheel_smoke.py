"""The wheel, installed alone in a fresh venv: import rocklet, a transaction, a durable log."""
import sys
import tempfile

import rocklet

assert "site-packages" in rocklet.__file__, rocklet.__file__

# The README's first example: a checked transaction commits and its message is delivered.
broker = rocklet.Broker(clock="manual")
broker.set_checker("orders", lambda msg: "commit")
with broker.transaction("orders", "OrderPaid", b"order-1"):
    pass
assert [m.body for m in broker.pull("billing", "OrderPaid")] == [b"order-1"]

# A durable one: what was committed is there after a reopen, a rolled-back one never.
with tempfile.TemporaryDirectory() as d:
    b = rocklet.Broker(d)
    b.set_checker("g", lambda msg: "rollback")
    with b.transaction("g", "T", b"kept"):
        pass
    try:
        with b.transaction("g", "T", b"dropped"):
            raise RuntimeError("local transaction failed")
    except RuntimeError:
        pass
    b.close()
    b = rocklet.Broker(d)
    assert [m.body for m in b.pull("c", "T")] == [b"kept"]
    b.close()
print(f"wheel OK on Python {sys.version.split()[0]}: import rocklet, commit, rollback, reopen")
