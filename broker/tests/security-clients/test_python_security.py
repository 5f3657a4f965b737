"""The official RocketMQ 5 Python client (rocketmq-python-client 5.1.2), unmodified, against
rocklet with authentication, ACLs and TLS; and `rocklet admin` without credentials."""
import os
import subprocess
import threading
import time
import uuid

import pytest
from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer,
                      SimpleConsumer, TransactionChecker, TransactionResolution)
from rocketmq.v5.exception import ForbiddenException, UnauthorizedException


def unique(name):
    return f"{name}_{uuid.uuid4().hex[:8]}"


class Checker(TransactionChecker):
    def check(self, message):
        return TransactionResolution.COMMIT


def config(addr, ak, sk):
    return ClientConfiguration(addr, Credentials(ak, sk), request_timeout=5)


def message(topic, body):
    m = Message()
    m.topic = topic
    m.body = body
    m.tag = "TagA"
    return m


def receive_all(c, want, timeout=20):
    got = []
    deadline = time.time() + timeout
    while len(got) < want and time.time() < deadline:
        got.extend(c.receive(16, 30))
    return got


def roundtrip(addr, ak, sk, tls=False):
    """Send, a committed transaction, receive both, ack."""
    topic = unique("PySecT")
    p = Producer(config(addr, ak, sk), (topic,), Checker(), tls_enable=tls)
    p.startup()
    try:
        assert p.send(message(topic, b"plain")).message_id
        tx = p.begin_transaction()
        p.send(message(topic, b"txn"), tx)
        tx.commit()
    finally:
        p.shutdown()
    c = SimpleConsumer(config(addr, ak, sk), unique("PySecG"), {topic: FilterExpression("*")},
                       await_duration=3, tls_enable=tls)
    c.startup()
    try:
        msgs = receive_all(c, 2)
        assert sorted(m.body for m in msgs) == [b"plain", b"txn"]
        for m in msgs:
            c.ack(m)
    finally:
        c.shutdown()


def test_signed_send_transaction_receive(secure):
    roundtrip(secure.addr, "app", "app-secret")


@pytest.mark.parametrize("ak,sk,reason", [
    ("app", "not-the-secret", "bad signature"),
    ("nobody", "x", "unknown access key"),
    ("", "", "no credentials"),
])
def test_wrong_credentials_are_refused_as_unauthorized(secure, ak, sk, reason, caplog):
    topic = unique("PySecT")
    p = Producer(config(secure.addr, ak, sk), (topic,))
    # The client raises UnauthorizedException from the route query, logs it, and the send
    # fails for want of a route.
    with pytest.raises(Exception):
        p.startup()
        p.send(message(topic, b"refused"))
    p.shutdown()
    logged = caplog.text
    assert "40100, UNAUTHORIZED: " in logged and reason in logged, logged
    assert "app-secret" not in logged
    # Called directly, the refusal is the client's UnauthorizedException.
    from rocketmq.v5.util.messaging_result_checker import MessagingResultChecker
    from rocketmq.grpc_protocol import Code, Status
    with pytest.raises(UnauthorizedException):
        MessagingResultChecker.check(Status(code=Code.UNAUTHORIZED, message=reason))


def test_pub_without_sub_can_send_but_not_receive(secure):
    topic = unique("PySecT")
    p = Producer(config(secure.addr, "writer", "writer-secret"), (topic,))
    p.startup()
    try:
        assert p.send(message(topic, b"w")).message_id
    finally:
        p.shutdown()
    with pytest.raises(ForbiddenException) as e:
        c = SimpleConsumer(config(secure.addr, "writer", "writer-secret"), unique("PySecG"),
                           {topic: FilterExpression("*")}, await_duration=1)
        c.startup()
        try:
            c.receive(16, 30)
        finally:
            c.shutdown()
    assert e.value.code == 40300
    assert "may not Sub on Topic:" + topic in str(e.value), str(e.value)


def test_deny_beats_allow(secure, caplog):
    topic = unique("PySecDenied")
    p = Producer(config(secure.addr, "app", "app-secret"), (topic,))
    with pytest.raises(Exception):
        p.startup()
        p.send(message(topic, b"d"))
    p.shutdown()
    assert "40300, FORBIDDEN: " in caplog.text and "a Deny entry matches" in caplog.text, caplog.text


def test_tls_permissive(secure):
    roundtrip(secure.addr, "app", "app-secret", tls=True)


def test_tls_enforcing(enforcing):
    roundtrip(enforcing.addr, "app", "app-secret", tls=True)


def test_plaintext_against_enforcing_is_refused(enforcing):
    topic = unique("PySecT")
    p = Producer(config(enforcing.addr, "app", "app-secret"), (topic,))
    t0 = time.time()
    with pytest.raises(Exception) as e:
        p.startup()
        p.send(message(topic, b"plain"))
    assert time.time() - t0 < 30
    with open(enforcing.log_path) as f:
        assert "plaintext gRPC connection refused" in f.read()
    print("plaintext client reported:", e.value)


def admin(broker, *args, env=None):
    return subprocess.run([os.environ["ROCKLET_BIN"], "admin", "--broker", broker.addr, *args],
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, **(env or {})})


def test_admin_needs_a_super_user_and_adds_users_at_once(secure):
    r = admin(secure, "topics", env={"ROCKLET_ACCESS_KEY": "", "ROCKLET_SECRET_KEY": ""})
    assert r.returncode != 0
    assert "no credentials" in r.stderr, r.stderr
    r = admin(secure, "topics", env={"ROCKLET_ACCESS_KEY": "app", "ROCKLET_SECRET_KEY": "app-secret"})
    assert r.returncode != 0 and "not a super user" in r.stderr, r.stderr
    root = {"ROCKLET_ACCESS_KEY": "root", "ROCKLET_SECRET_KEY": "root-secret"}
    assert admin(secure, "topics", env=root).returncode == 0
    ak = unique("py")
    r = admin(secure, "user", "add", ak, "--secret", "fresh-secret", env=root)
    assert r.returncode == 0, r.stderr
    r = admin(secure, "acl", "add", "--user", ak, "--resource", "Topic:PySecFresh*", "--actions", "Pub", env=root)
    assert r.returncode == 0, r.stderr
    listed = admin(secure, "user", "list", env=root).stdout
    assert ak in listed and "fresh-secret" not in listed
    topic = unique("PySecFresh")
    p = Producer(config(secure.addr, ak, "fresh-secret"), (topic,))
    p.startup()
    try:
        assert p.send(message(topic, b"new user")).message_id
    finally:
        p.shutdown()
