"""Brokers with authentication (and TLS) for the official-client security tests.

ROCKLET_BIN names the binary. A CA and a server certificate (127.0.0.1, localhost) are made
with the openssl command at the start; grpcio's TLS (the Python client's `tls_enable=True`)
trusts the CA through GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, set before any channel exists.
"""
import os
import re
import subprocess
import tempfile
import threading
import time

import pytest

USERS = """
[auth]
client_utc_offsets = ["any"]

[[auth.users]]
access_key = "root"
secret_key = "root-secret"
super_user = true

[[auth.users]]
access_key = "app"
secret_key = "app-secret"

[[auth.users]]
access_key = "writer"
secret_key = "writer-secret"

[[auth.acls]]
user = "app"
resource = "Topic:PySec*"
actions = ["Pub", "Sub"]

[[auth.acls]]
user = "app"
resource = "Group:PySecG*"
actions = ["Sub"]

[[auth.acls]]
user = "app"
resource = "Topic:PySecDenied*"
actions = ["All"]
decision = "Deny"

[[auth.acls]]
user = "writer"
resource = "Topic:PySec*"
actions = ["Pub"]

[[auth.acls]]
user = "writer"
resource = "Group:PySecG*"
actions = ["Sub"]
"""

CORE = """
[core]
flush = "sync"
transaction_timeout_ms = 1000
transaction_check_interval_ms = 1000
"""


def _run(cmd):
    subprocess.run(cmd, check=True, capture_output=True)


@pytest.fixture(scope="session")
def pki():
    d = tempfile.mkdtemp(prefix="rocklet-pki-")
    p = lambda f: os.path.join(d, f)
    _run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
          "-subj", "/CN=rocklet test CA", "-keyout", p("ca.key"), "-out", p("ca.pem")])
    _run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
          "-keyout", p("server.key"), "-out", p("server.csr")])
    with open(p("ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n")
    _run(["openssl", "x509", "-req", "-in", p("server.csr"), "-CA", p("ca.pem"), "-CAkey", p("ca.key"),
          "-CAcreateserial", "-days", "2", "-extfile", p("ext.cnf"), "-out", p("server.pem")])
    os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = p("ca.pem")
    return d


class Broker:
    def __init__(self, addr, namesrv, proc, log_path, data_dir):
        self.addr = addr
        self.namesrv = namesrv
        self.proc = proc
        self.log_path = log_path
        self.data_dir = data_dir


def start_broker(config):
    binary = os.environ.get("ROCKLET_BIN")
    assert binary and os.path.exists(binary), "set ROCKLET_BIN to the rocklet binary"
    tmp = tempfile.mkdtemp(prefix="rocklet-sec-")
    cfg = os.path.join(tmp, "rocklet.toml")
    with open(cfg, "w") as f:
        f.write(config)
    proc = subprocess.Popen(
        [binary, "broker", "--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmp, "data"), "--config", cfg],
        stderr=subprocess.PIPE, text=True,
        env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "info")},
    )
    addr, namesrv, lines = None, None, []
    deadline = time.time() + 30
    while time.time() < deadline and not addr:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"namesrv=Some\(([^)]*)\)", line)
        if m:
            namesrv = m.group(1)
        m = re.search(r" addr=(\S+)", line)
        if m:
            addr = m.group(1)
    assert addr, "broker did not start:\n" + "".join(lines)
    log_path = os.path.join(tmp, "broker.log")

    def pump():
        with open(log_path, "a") as out:
            out.writelines(lines)
            for line in proc.stderr:
                out.write(line)
                out.flush()

    threading.Thread(target=pump, daemon=True).start()
    return Broker(addr, namesrv, proc, log_path, os.path.join(tmp, "data"))


def stop_broker(b):
    b.proc.terminate()
    assert b.proc.wait(timeout=30) == 0, "broker did not exit 0 on SIGTERM; log in " + b.log_path


def tls_table(pki, mode):
    return f"""
[tls]
mode = "{mode}"
cert = "{os.path.join(pki, 'server.pem')}"
key = "{os.path.join(pki, 'server.key')}"
"""


@pytest.fixture(scope="session")
def secure(pki):
    """Authentication on, TLS permissive (TLS and plaintext on one port)."""
    b = start_broker(USERS + CORE + tls_table(pki, "permissive"))
    yield b
    stop_broker(b)


@pytest.fixture(scope="session")
def enforcing(pki):
    """Authentication on, TLS enforcing."""
    b = start_broker(USERS + CORE + tls_table(pki, "enforcing"))
    yield b
    stop_broker(b)
