"""CPU a Python subscriber uses while it waits for a message that does not come (issue 33).

Run with the wheel installed (bash tests/ci/python.sh builds one into .venv/wheel-test):
    .venv/wheel-test/bin/python tests/bench/idle/subscribe_idle.py [SECONDS]
Prints the process's CPU seconds (user + system) over SECONDS of waiting and the share of one
core that is; docs/benchmarks.md records the figures.
"""
import resource
import sys
import time

import rocklet

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
broker = rocklet.Broker()
broker.create_topic("Idle", 4)


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


c0, t0 = cpu(), time.monotonic()
got = list(broker.subscribe("G", "Idle", invisible_ms=30_000, timeout=seconds))
c1, t1 = cpu(), time.monotonic()
assert not got, got
used = c1 - c0
print(f"idle subscribe: waited {t1 - t0:.2f} s, cpu {used:.3f} s ({100 * used / (t1 - t0):.2f} % of a core)")
