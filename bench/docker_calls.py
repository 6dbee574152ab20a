#!/usr/bin/env python3
"""Times the engine calls of an egress proxy's setup and teardown, one call at a time, on
the local Docker socket (issue 25; docs/benchmarks.md, Egress).

    bench/docker_calls.py IMAGE [REPS]

IMAGE is a `polyphony-egress:<tag>` image (made by any `egress: allowlist` attempt, e.g.
`bench/run.sh egress`). Per rep, for a proxy container with no network, on `bridge` only,
on a new `--internal` network only, and on both (the product's shape): network create,
container create, connect, start, kill, the time from the kill to the end of the
container's followed log, remove, network remove. Medians in ms. Every object is labelled
`polyphony.home=bench-docker-calls` and removed by the run.
"""
import http.client
import json
import socket
import sys
import threading
import time

SOCK = "/var/run/docker.sock"
LABELS = {"polyphony.home": "bench-docker-calls"}
HARDENING = {
    "CapDrop": ["ALL"],
    "SecurityOpt": ["no-new-privileges"],
    "ReadonlyRootfs": True,
    "PidsLimit": 64,
    "Memory": 268435456,
    "MemorySwap": 268435456,
    "NanoCpus": 1000000000,
    "LogConfig": {"Type": "json-file", "Config": {"max-size": "16m", "max-file": "1"}},
}
CONFIG = json.dumps({"allow": ["example.com:443"]})


class Conn(http.client.HTTPConnection):
    def __init__(self):
        super().__init__("localhost")

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(SOCK)


def call(method, path, body=None):
    """(status, body, ms) of one API call (API 1.41, what 20.10 speaks)."""
    conn = Conn()
    headers = {"Content-Type": "application/json"} if body is not None else {}
    start = time.perf_counter()
    conn.request(method, "/v1.41" + path, json.dumps(body) if body is not None else None, headers)
    resp = conn.getresponse()
    data = resp.read()
    ms = (time.perf_counter() - start) * 1000
    conn.close()
    if resp.status >= 300 and resp.status != 404:
        raise SystemExit(f"{method} {path}: {resp.status} {data[:200]!r}")
    return resp.status, data, ms


def one(image, shape, rep):
    name = f"bench-docker-calls-{shape}-{rep}"
    t = {}
    internal = shape in ("internal", "both")
    if internal:
        _, _, t["network create"] = call("POST", "/networks/create", {
            "Name": name, "Driver": "bridge", "Internal": True, "Labels": LABELS,
            "Options": {"com.docker.network.bridge.inhibit_ipv4": "true"}})
    mode = {"none": "none", "bridge": "bridge"}.get(shape, name)
    _, data, t["create"] = call("POST", f"/containers/create?name={name}", {
        "Image": image, "User": "65534:65534", "Labels": LABELS,
        "Env": ["POLYPHONY_EGRESS_CONFIG=" + CONFIG],
        "HostConfig": dict(HARDENING, NetworkMode=mode)})
    cid = json.loads(data)["Id"]
    if shape == "both":
        _, _, t["connect"] = call("POST", "/networks/bridge/connect", {"Container": cid})
    _, _, t["start"] = call("POST", f"/containers/{cid}/start")
    time.sleep(0.1)
    ended = {}

    def follow():
        call("GET", f"/containers/{cid}/logs?stdout=1&stderr=1&follow=1")
        ended["at"] = time.perf_counter()

    reader = threading.Thread(target=follow)
    reader.start()
    time.sleep(0.1)
    killed = time.perf_counter()
    _, _, t["kill (answered)"] = call("POST", f"/containers/{cid}/kill")
    reader.join()
    t["kill -> log ended"] = (ended["at"] - killed) * 1000
    _, _, t["remove"] = call("DELETE", f"/containers/{cid}?force=1&v=1")
    if internal:
        _, _, t["network remove"] = call("DELETE", f"/networks/{name}")
    return t


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    image = sys.argv[1]
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    shapes = ["none", "bridge", "internal", "both"]
    runs = {s: [] for s in shapes}
    for rep in range(reps):
        for shape in shapes:  # interleaved, so load drifts hit every shape alike
            runs[shape].append(one(image, shape, rep))
    steps = ["network create", "create", "connect", "start", "kill (answered)",
             "kill -> log ended", "remove", "network remove"]
    print("| proxy on | " + " | ".join(steps) + " |")
    print("|---|" + "---|" * len(steps))
    for shape in shapes:
        cells = []
        for step in steps:
            values = sorted(r[step] for r in runs[shape] if step in r)
            cells.append(f"{values[len(values) // 2]:.0f}" if values else "–")
        print(f"| {shape} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
