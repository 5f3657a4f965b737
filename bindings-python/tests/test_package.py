"""The installed package: typed, documented, and the example runs."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import rocklet
import rocklet._rocklet as native

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_ships_stubs_and_marker() -> None:
    pkg = Path(rocklet.__file__).parent
    if os.environ.get("ROCKLET_EXPECT_WHEEL"):
        assert "site-packages" in pkg.parts, f"tests ran against {pkg}, not the installed wheel"
    assert (pkg / "py.typed").exists()
    assert (pkg / "_rocklet.pyi").exists()


def test_every_public_name_has_a_docstring() -> None:
    missing = []
    for name in native.__all__:
        obj = getattr(native, name)
        if not inspect.isclass(obj):
            continue
        if not (obj.__doc__ or "").strip():
            missing.append(name)
        for attr, member in vars(obj).items():
            if attr.startswith("_"):
                continue
            if not (getattr(member, "__doc__", None) or "").strip():
                missing.append(f"{name}.{attr}")
    assert missing == []


def test_order_payment_example(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "order_payment.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ok: billing saw exactly the committed orders" in out.stdout
    assert "order o-4 -> rollback" in out.stdout
