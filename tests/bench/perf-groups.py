#!/usr/bin/env python3
"""Groups `perf report --no-children --sort dso,sym --stdio` self-time lines (stdin) into the
shares issue #16 asks about. By self symbol: inlined code counts where it was inlined."""
import re
import sys

GROUPS = [
    ("kernel futex", lambda d, s: d == "k" and re.search(r"futex", s)),
    ("kernel scheduler/context switches", lambda d, s: d == "k" and re.search(r"^(finish_task_switch|__schedule|schedule|try_to_wake_up|ttwu_|enqueue_task|dequeue_task|pick_next|update_curr|select_task_rq|__switch_to|switch_mm|psi_|update_load|set_next_entity|put_prev|enqueue_entity|dequeue_entity)", s)),
    ("kernel epoll", lambda d, s: d == "k" and re.search(r"^(ep_|do_epoll|__x64_sys_epoll)", s)),
    ("kernel TCP/IP/loopback", lambda d, s: d == "k" and re.search(r"tcp|ip_|ipv4|skb|sk_|sock|net_|netif|dev_|loopback|inet|napi|nf_|raw_v4", s)),
    ("kernel other (syscall entry, copies, irq re-enable)", lambda d, s: d == "k"),
    ("futex/park/unpark (user)", lambda d, s: re.search(r"futex|park|Condvar|condvar|pthread_cond|parking_lot|syscall$", s)),
    ("malloc/free", lambda d, s: re.search(r"malloc|free|realloc|calloc|cfree|tcache|arena|sysmalloc|__rust_alloc|__rust_dealloc|alloc::alloc", s)),
    ("memmove/memcpy/memset", lambda d, s: re.search(r"memmove|memcpy|memset|memcmp", s)),
    ("MD5", lambda d, s: re.search(r"md5|Md5|md_5", s)),
    ("h2/hyper", lambda d, s: re.search(r"\bh2::|hyper::|hpack|<h2|<hyper", s)),
    ("prost (encode/decode)", lambda d, s: re.search(r"prost|encoded_len|encode_raw|merge_field|::pb::", s)),
    ("tonic (and the generated service)", lambda d, s: re.search(r"tonic|messaging_service_server", s)),
    ("remoting codec, JSON headers, records", lambda d, s: re.search(r"remoting::codec|serde_json|serde::|record::|crc32", s)),
    ("the floor's own code", lambda d, s: re.search(r"grpc_floor|remoting_floor", s)),
    ("tokio runtime/io/time", lambda d, s: re.search(r"tokio|mio::", s)),
    ("bytes", lambda d, s: re.search(r"bytes::", s)),
    ("http/tower", lambda d, s: re.search(r"\bhttp::|tower", s)),
    ("libc other", lambda d, s: d == "libc"),
    ("other user", lambda d, s: True),
]

totals = {g: 0.0 for g, _ in GROUPS}
tops = {g: [] for g, _ in GROUPS}
line = re.compile(r"^\s*([0-9.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)$")
for l in sys.stdin:
    m = line.match(l)
    if not m:
        continue
    pct, dso, kind, sym = float(m.group(1)), m.group(2), m.group(3), m.group(4).strip()
    d = "k" if kind == "k" or "kernel" in dso else ("libc" if "libc" in dso else "u")
    for g, f in GROUPS:
        if f(d, sym):
            totals[g] += pct
            tops[g].append((pct, sym))
            break
for g, _ in sorted(GROUPS, key=lambda x: -totals[x[0]]):
    if totals[g] < 0.05:
        continue
    top = ", ".join(f"{s[:60]} {p:.1f}" for p, s in sorted(tops[g], reverse=True)[:4])
    print(f"{totals[g]:5.1f}%  {g}: {top}")
