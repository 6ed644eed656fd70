#!/usr/bin/env python3
"""Hostile load (issue 29): one stranger holds as many idle sockets as it
can, another person floods paid submissions and test webhooks, and a
well-behaved person orders edits of a real photograph meanwhile. Prints
what each got, how /healthz answered, and the server's memory.

    python3 bench/hostile.py --bin target/release/tollgate [--seconds 60] [--idle 2000]

Standard library only. The stranger connects from 127.0.0.2 and the flood
from 127.0.0.3 (Linux answers all of 127.0.0.0/8 on loopback), so the
per-address limits see three clients, as they would on a real network.
"""

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHOTO = os.path.join(ROOT, "tests", "photos", "dog_corgi.jpg")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def http(port, method, path, body=b"", headers=None, source=None, timeout=30):
    """One HTTP/1.1 request on its own connection: (status, headers, body)."""
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(
            "127.0.0.1", port, local_addr=(source, 0) if source else None
        ),
        timeout,
    )
    try:
        head = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
        for k, v in (headers or {}).items():
            head.append(f"{k}: {v}")
        head.append(f"Content-Length: {len(body)}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    header, _, payload = raw.partition(b"\r\n\r\n")
    lines = header.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines and lines[0] else 0
    fields = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        fields[k.strip().lower()] = v.strip()
    if fields.get("transfer-encoding") == "chunked":
        payload = dechunk(payload)
    return status, fields, payload


def dechunk(data):
    out = b""
    while data:
        size, _, rest = data.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        out += rest[:n]
        data = rest[n + 2:]
    return out


def cli(bin_path, env, *args, password=None):
    e = dict(env)
    if password:
        e["TOLLGATE_PASSWORD"] = password
    return subprocess.run([bin_path, *args], env=e, check=True, capture_output=True, text=True).stdout.strip()


def person(bin_path, env, email):
    cli(bin_path, env, "user", "add", "--email", email, "--role", "user", password="a long password 1")
    cli(bin_path, env, "credits", "grant", "--email", email, "--amount", "100000", "--reason", "bench")
    return cli(bin_path, env, "token", "create", "--email", email, "--name", "bench").splitlines()[-1]


def open_fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def upload(port, token, source):
    with open(PHOTO, "rb") as f:
        photo = f.read()
    status, _, body = await http(
        port, "POST", "/v1/assets", photo,
        {"Authorization": f"Bearer {token}", "Content-Type": "image/jpeg"}, source)
    assert status == 201, (status, body)
    return json.loads(body)["id"]


def edit_body(asset):
    return json.dumps({"kind": "image_edit", "source": asset,
                       "target": {"kind": "pet", "description": "the dog"},
                       "style": "embroidery", "strength": "balanced"}).encode()


async def hoarder(port, n, stop, seen):
    """Keeps up to `n` idle sockets open from 127.0.0.2, reconnecting each
    one the server closes (after a pause)."""
    async def one():
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, local_addr=("127.0.0.2", 0))
            except OSError:
                seen["connect_errors"] += 1
                await asyncio.sleep(2)
                continue
            seen["opened"] += 1
            seen["open"] += 1
            seen["most_open"] = max(seen["most_open"], seen["open"])
            opened = time.monotonic()
            try:
                await reader.read()
            except OSError:
                pass
            seen["open"] -= 1
            held = time.monotonic() - opened
            if held < 1:
                seen["closed_at_once"] += 1
            else:
                seen["closed_idle"] += 1
                seen["longest_held_s"] = max(seen["longest_held_s"], held)
            writer.close()
            await asyncio.sleep(2)
    await asyncio.gather(*(one() for _ in range(n)))


async def flood(port, token, asset, endpoint, stop, seen):
    body = edit_body(asset)
    async def jobs():
        while not stop.is_set():
            try:
                status, _, _ = await http(port, "POST", "/v1/jobs", body, {
                    "Authorization": f"Bearer {token}", "Content-Type": "application/json",
                    "Idempotency-Key": str(uuid.uuid4())}, "127.0.0.3")
                seen[f"jobs_{status}"] = seen.get(f"jobs_{status}", 0) + 1
            except (OSError, asyncio.TimeoutError):
                seen["jobs_errors"] = seen.get("jobs_errors", 0) + 1
    async def tests():
        while not stop.is_set():
            try:
                status, _, _ = await http(port, "POST", f"/v1/webhook-endpoints/{endpoint}/test", b"", {
                    "Authorization": f"Bearer {token}"}, "127.0.0.3")
                seen[f"tests_{status}"] = seen.get(f"tests_{status}", 0) + 1
            except (OSError, asyncio.TimeoutError):
                seen["tests_errors"] = seen.get("tests_errors", 0) + 1
    await asyncio.gather(*(jobs() for _ in range(8)), *(tests() for _ in range(4)))


async def well_behaved(port, token, asset, stop, seen):
    body = edit_body(asset)
    auth = {"Authorization": f"Bearer {token}"}
    while not stop.is_set():
        started = time.monotonic()
        status, _, answer = await http(port, "POST", "/v1/jobs", body, {
            **auth, "Content-Type": "application/json", "Idempotency-Key": str(uuid.uuid4())})
        seen["submit_ms"].append((time.monotonic() - started) * 1000)
        if status != 201:
            seen["refused"].append(status)
            await asyncio.sleep(3)
            continue
        job = json.loads(answer)["id"]
        while True:
            await asyncio.sleep(0.2)
            _, _, now = await http(port, "GET", f"/v1/jobs/{job}", b"", auth)
            state = json.loads(now)["status"]
            if state in ("succeeded", "failed", "cancelled", "parked"):
                seen["outcomes"][state] = seen["outcomes"].get(state, 0) + 1
                seen["done_s"].append(time.monotonic() - started)
                break
        await asyncio.sleep(2)


async def health(port, stop, seen):
    while not stop.is_set():
        started = time.monotonic()
        try:
            status, _, _ = await http(port, "GET", "/healthz", timeout=10)
            seen["healthz_ms"].append((time.monotonic() - started) * 1000)
            if status != 200:
                seen["healthz_bad"] += 1
        except (OSError, asyncio.TimeoutError):
            seen["healthz_bad"] += 1
        await asyncio.sleep(0.5)


async def memory(pid, stop, seen):
    while not stop.is_set():
        seen["rss_mib"].append(rss_mib(pid))
        seen["fds"].append(open_fds(pid))
        await asyncio.sleep(1)


async def hanging_receiver():
    """A webhook receiver that accepts and never answers."""
    async def hang(reader, writer):
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            writer.close()
    server = await asyncio.start_server(hang, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--idle", type=int, default=2000, help="idle sockets the stranger wants (0: no stranger)")
    ap.add_argument("--no-flood", action="store_true", help="no flood of paid work and test events")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    work = tempfile.mkdtemp(prefix="tollgate-hostile-")
    port = free_port()
    env = dict(os.environ,
               TOLLGATE_DATABASE_URL=f"sqlite://{work}/tollgate.db",
               TOLLGATE_LISTEN=f"127.0.0.1:{port}",
               TOLLGATE_STORAGE=f"{work}/objects",
               TOLLGATE_SITE_ROOT=os.path.join(ROOT, "target", "site"),
               TOLLGATE_WEBHOOK_ALLOW_NETWORKS="127.0.0.0/8",
               TOLLGATE_LOG="warn")
    good = person(args.bin, env, "good@example.com")
    flooder = person(args.bin, env, "flood@example.com")
    server = subprocess.Popen([args.bin, "serve", "--role", "all"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    receiver, receiver_port = await hanging_receiver()
    try:
        for _ in range(300):
            try:
                if (await http(port, "GET", "/healthz", timeout=2))[0] == 200:
                    break
            except (OSError, asyncio.TimeoutError):
                await asyncio.sleep(0.1)
        good_asset = await upload(port, good, None)
        flood_asset = await upload(port, flooder, "127.0.0.3")
        status, _, made = await http(port, "POST", "/v1/webhook-endpoints", json.dumps(
            {"url": f"http://127.0.0.1:{receiver_port}/hook"}).encode(), {
            "Authorization": f"Bearer {flooder}", "Content-Type": "application/json"}, "127.0.0.3")
        assert status == 201, (status, made)
        endpoint = json.loads(made)["id"]

        stop = asyncio.Event()
        seen = {"opened": 0, "open": 0, "most_open": 0, "closed_at_once": 0, "closed_idle": 0,
                "longest_held_s": 0.0, "connect_errors": 0, "submit_ms": [], "refused": [],
                "outcomes": {}, "done_s": [], "healthz_ms": [], "healthz_bad": 0, "rss_mib": [], "fds": []}
        rss_before = rss_mib(server.pid)
        fds_before = open_fds(server.pid)
        work = [well_behaved(port, good, good_asset, stop, seen),
                health(port, stop, seen), memory(server.pid, stop, seen)]
        if args.idle:
            work.append(hoarder(port, args.idle, stop, seen))
        if not args.no_flood:
            work.append(flood(port, flooder, flood_asset, endpoint, stop, seen))
        tasks = [asyncio.create_task(t) for t in work]
        await asyncio.sleep(args.seconds)
        stop.set()
        await asyncio.wait(tasks, timeout=30)
        for t in tasks:
            t.cancel()
    finally:
        server.terminate()
        server.wait(timeout=30)
        receiver.close()

    flood_counts = {k: v for k, v in seen.items() if k.startswith(("jobs_", "tests_"))}
    print(f"## hostile load, {args.seconds} s, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    print(f"- idle stranger (127.0.0.2, {args.idle} sockets wanted): {seen['opened']} connections made; "
          f"{seen['closed_at_once']} closed within 1 s (over the per-address cap), {seen['closed_idle']} closed idle "
          f"(longest held {seen['longest_held_s']:.1f} s)")
    print(f"- server's open descriptors: {fds_before} before, at most {max(seen['fds'] or [0])}")
    print(f"- flood (127.0.0.3): {json.dumps(flood_counts, sort_keys=True)}")
    print(f"- well-behaved person: {sum(seen['outcomes'].values())} jobs {json.dumps(seen['outcomes'])}, "
          f"refused {seen['refused']}; submit p50 {pct(seen['submit_ms'], .5):.0f} ms p99 {pct(seen['submit_ms'], .99):.0f} ms; "
          f"done p50 {pct(seen['done_s'], .5):.1f} s max {max(seen['done_s'] or [float('nan')]):.1f} s")
    print(f"- /healthz: {len(seen['healthz_ms'])} answered, {seen['healthz_bad']} failed; "
          f"p50 {pct(seen['healthz_ms'], .5):.1f} ms p99 {pct(seen['healthz_ms'], .99):.1f} ms max {max(seen['healthz_ms'] or [0]):.1f} ms")
    print(f"- server memory: {rss_before:.0f} MiB before, at most {max(seen['rss_mib'] or [0]):.0f} MiB, "
          f"{(seen['rss_mib'] or [0])[-1]:.0f} MiB at the end")
    ok = (seen["outcomes"].get("succeeded", 0) > 0 and not seen["refused"]
          and seen["healthz_bad"] == 0)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    asyncio.run(main())
