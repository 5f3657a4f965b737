"""The one table of error codes (tests/vectors/error-codes.json): the code of every kind of
failure is the same in Python, Node and wasm (`rocklet_embed::ErrorKind::code`). Each case of
the vector is triggered through the public API and the code of what it raises compared."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Dict, Type

import pytest

import rocklet

from conftest import REPO

VECTOR = json.loads((REPO / "tests" / "vectors" / "error-codes.json").read_text())
CODES: Dict[str, str] = VECTOR["codes"]

#: The class Python raises for each kind (the native module's `class_of`).
CLASS_OF_KIND: Dict[str, Type[rocklet.RockletError]] = {
    "client": rocklet.ClientError,
    "argument": rocklet.InvalidArgument,
    "config": rocklet.ConfigError,
    "storage": rocklet.StorageError,
    "corrupted": rocklet.CorruptLog,
    "encode": rocklet.EncodeError,
    "failed": rocklet.BrokerFailed,
    "closed": rocklet.BrokerClosed,
    "wrong_clock": rocklet.WrongClock,
    "internal": rocklet.InternalError,
}

#: What this host cannot do, by the case's `needs` (a case needing anything else must run).
CANNOT = {"fail_sync_hook": "the Python binding has no hook that fails a sync"}


def test_every_kind_has_a_class_with_the_tables_code() -> None:
    assert set(CLASS_OF_KIND) == set(CODES)
    for kind, cls in CLASS_OF_KIND.items():
        assert cls.code == CODES[kind], kind


def test_renamed_codes_still_compare_equal_to_their_old_names_with_a_warning() -> None:
    for cls, old in [
        (rocklet.ConfigError, "CONFIG"),
        (rocklet.CorruptLog, "CORRUPT_LOG"),
        (rocklet.BrokerFailed, "BROKER_FAILED"),
    ]:
        with pytest.warns(DeprecationWarning, match=old):
            assert cls.code == old
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert str(cls.code) == CODES[next(k for k, c in CLASS_OF_KIND.items() if c is cls)]
            assert cls.code != "SOMETHING_ELSE"
            assert json.dumps(cls.code) != json.dumps(old)
    # Range errors stay ValueErrors (Python's idiom), as does the wrong clock.
    assert issubclass(rocklet.InvalidArgument, ValueError)
    assert issubclass(rocklet.WrongClock, ValueError)


def write_corrupt(path: Path) -> None:
    """Three durable messages, a byte of the second one's body flipped."""
    bodies = [b"a" * 100, b"b" * 100, b"c" * 100]
    with rocklet.Broker(path, clock="manual", flush="sync", default_queues=1) as b:
        for body in bodies:
            b.send("T", body)
    [seg] = [p for p in path.iterdir() if p.name.isdigit()]
    damaged = bytearray(seg.read_bytes())
    damaged[damaged.index(bodies[1]) + 50] ^= 0xFF
    seg.write_bytes(bytes(damaged))


def trigger(case: Dict[str, Any], tmp: Path) -> None:
    """Does what the case says; it must raise."""
    name = case["case"]
    if name == "client_error":
        rocklet.Broker(clock="manual").send("bad topic", b"x")
    elif name == "bad_config":
        rocklet.Broker(clock="manual", max_message_size=0)
    elif name == "bad_argument":
        rocklet.Broker(clock="manual").advance_to(-1)
    elif name == "closed":
        b = rocklet.Broker(clock="manual")
        b.close()
        b.send("T", b"x")
    elif name == "wrong_clock":
        b = rocklet.Broker()
        try:
            b.advance(1)
        finally:
            b.close()
    elif name == "corrupt_log":
        write_corrupt(tmp / "data")
        rocklet.Broker(tmp / "data", clock="manual")
    elif name == "locked":
        with rocklet.Broker(tmp / "data", clock="manual"):
            rocklet.Broker(tmp / "data", clock="manual")
    else:
        raise AssertionError(f"case {name!r} of error-codes.json is not run by the Python tests")


@pytest.mark.parametrize("case", VECTOR["cases"], ids=[c["case"] for c in VECTOR["cases"]])
def test_each_failure_raises_the_code_of_the_table(case: Dict[str, Any], tmp_path: Path) -> None:
    if case.get("needs") in CANNOT:
        pytest.skip(CANNOT[case["needs"]])
    with pytest.raises(rocklet.RockletError) as e:
        trigger(case, tmp_path)
    assert isinstance(e.value, CLASS_OF_KIND[case["kind"]]), repr(e.value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name: no deprecation
        assert e.value.code == case["expect"], repr(e.value)
