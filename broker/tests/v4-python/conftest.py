"""Starts one `rocklet broker` (ROCKLET_BIN) for the RocketMQ 4 client tests, with gRPC,
remoting and the name server on free ports read back from its log."""
import os
import re
import subprocess
import tempfile
import threading
import time

import pytest

CONFIG = """
[core]
flush = "sync"
transaction_timeout_ms = 1000
transaction_check_interval_ms = 1000
"""


@pytest.fixture(scope="session")
def broker():
    binary = os.environ.get("ROCKLET_BIN")
    assert binary and os.path.exists(binary), "set ROCKLET_BIN to the rocklet binary"
    tmp = tempfile.mkdtemp(prefix="rocklet-v4-")
    cfg = os.path.join(tmp, "rocklet.toml")
    with open(cfg, "w") as f:
        f.write(CONFIG)
    proc = subprocess.Popen(
        [binary, "broker", "--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmp, "data"), "--config", cfg],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "info")},
    )
    grpc = namesrv = None
    lines = []
    deadline = time.time() + 30
    while time.time() < deadline and not (grpc and namesrv):
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r" addr=(\S+)", line)
        if m and not grpc:
            grpc = m.group(1)
        m = re.search(r"namesrv=Some\((\S+?)\)", line)
        if m:
            namesrv = m.group(1)
    assert grpc and namesrv, "broker did not start:\n" + "".join(lines)
    log_path = os.path.join(tmp, "broker.log")

    def pump():
        with open(log_path, "a") as out:
            out.writelines(lines)
            for line in proc.stderr:
                out.write(line)
                out.flush()

    threading.Thread(target=pump, daemon=True).start()
    yield {"grpc": grpc, "namesrv": namesrv, "log": log_path}
    proc.terminate()
    assert proc.wait(timeout=30) == 0, "broker did not exit 0 on SIGTERM; log in " + log_path
