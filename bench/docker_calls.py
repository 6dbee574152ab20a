#!/usr/bin/env python3
"""Times the engine calls of an egress proxy's setup and teardown, one call at a time, on
the local Docker socket (issue 25; docs/benchmarks.md, Egress).

    bench/docker_calls.py IMAGE [REPS]

IMAGE is a `polyphony-egress:<tag>` image (made by any `egress: allowlist` attempt, e.g.
`bench/run.sh egress`). Per rep, for a proxy container with no network, on `bridge` only,
on a new `--internal` network only, and on both (the product's shape): network create,
container create, connect, start, kill, the time from the kill to the end of the
container's followed log, remove, network remove. Medians in ms. Every object is labelled
`polyphony.home=bench-docker-calls` and removed by the run. The containers here run under
the engine's default seccomp profile; the product's proxy has its own (`bench/proxy_start.py`
compares the two starts).

    bench/docker_calls.py --overlap AGENT_IMAGE PROXY_IMAGE [REPS]

How much an agent container's start (`/bin/true`, the agent's hardening) costs on `bridge`,
on a new `--internal` network, and on that network while a proxy container's start runs
beside it (begun 50 ms before, the product's order), the proxy on no network, on the
internal network, and on both: whether the slowdown is the engine's network work or two
starts sharing the machine.

    bench/docker_calls.py --cpu AGENT_IMAGE PROXY_IMAGE [REPS]

The machine's CPU time (all processes and the kernel, from /proc/stat) beside the wall time
of each engine call an `egress: allowlist` attempt adds to an `open` one, one call at a
time on an otherwise idle engine: the network's create, the proxy's create, its connect to
`bridge`, its start on both networks, the agent's start on the internal network against on
`bridge`, the proxy's kill (the engine releases its endpoints and its root file system
then), its removal, the network's removal. Medians in ms. Whether the attempt's extra wall
time is the engine waiting or the engine working (2 cores: work beside the agent's start
slows it).
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


def overlap_one(agent_image, proxy_image, shape, rep):
    """The agent's start in ms, for `shape` ("bridge", "internal", "beside proxy on X")."""
    name = f"bench-docker-calls-overlap-{rep}"
    net = None
    if shape != "bridge":
        call("POST", "/networks/create", {
            "Name": name, "Driver": "bridge", "Internal": True, "Labels": LABELS})
        net = name
    _, data, _ = call("POST", f"/containers/create?name={name}-agent", {
        "Image": agent_image, "Entrypoint": ["/bin/true"], "Labels": LABELS,
        "HostConfig": dict(HARDENING, Init=True, ReadonlyRootfs=False,
                           NetworkMode=net or "bridge")})
    agent = json.loads(data)["Id"]
    proxy = None
    beside = None
    if shape.startswith("beside proxy on "):
        on = shape.removeprefix("beside proxy on ")
        _, data, _ = call("POST", f"/containers/create?name={name}-proxy", {
            "Image": proxy_image, "User": "65534:65534", "Labels": LABELS,
            "Env": ["POLYPHONY_EGRESS_CONFIG=" + CONFIG],
            "HostConfig": dict(HARDENING, NetworkMode="none" if on == "none" else net)})
        proxy = json.loads(data)["Id"]
        if on == "both":
            call("POST", "/networks/bridge/connect", {"Container": proxy})
        beside = threading.Thread(target=lambda: call("POST", f"/containers/{proxy}/start"))
        beside.start()
        time.sleep(0.05)
    _, _, ms = call("POST", f"/containers/{agent}/start")
    if beside:
        beside.join()
    for cid in (agent, proxy):
        if cid:
            call("DELETE", f"/containers/{cid}?force=1&v=1")
    if net:
        call("DELETE", f"/networks/{net}")
    return ms


def overlap(agent_image, proxy_image, reps):
    shapes = ["bridge", "internal", "beside proxy on none", "beside proxy on internal",
              "beside proxy on both"]
    runs = {s: [] for s in shapes}
    for rep in range(reps):
        for shape in shapes:  # interleaved
            runs[shape].append(overlap_one(agent_image, proxy_image, shape, rep))
    print("| the agent's start | median ms | runs |")
    print("|---|---|---|")
    for shape in shapes:
        values = sorted(runs[shape])
        print(f"| {shape} | {values[len(values) // 2]:.0f} | "
              + ", ".join(f"{v:.0f}" for v in values) + " |")


def busy_ms():
    """CPU time the machine spent busy (user, nice, system, irq, softirq) so far, in ms."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    hz = 100  # USER_HZ on Linux
    return sum(int(fields[i]) for i in (1, 2, 3, 6, 7)) * 1000 // hz


def cpu(agent_image, proxy_image, reps):
    runs = {}

    def step(name, *request):
        time.sleep(0.15)  # what the last call left running settles first
        before = busy_ms()
        result = call(*request)
        runs.setdefault(name, []).append((result[2], busy_ms() - before))
        return result

    for rep in range(reps):
        name = f"bench-docker-calls-cpu-{rep}"
        step("network create", "POST", "/networks/create", {
            "Name": name, "Driver": "bridge", "Internal": True, "Labels": LABELS,
            "Options": {"com.docker.network.bridge.inhibit_ipv4": "true"}})
        _, data, _ = step("proxy create", "POST", f"/containers/create?name={name}-proxy", {
            "Image": proxy_image, "User": "65534:65534", "Labels": LABELS,
            "Env": ["POLYPHONY_EGRESS_CONFIG=" + CONFIG],
            "HostConfig": dict(HARDENING, NetworkMode=name)})
        proxy = json.loads(data)["Id"]
        step("proxy connect to bridge", "POST", "/networks/bridge/connect", {"Container": proxy})
        step("proxy start, on both networks", "POST", f"/containers/{proxy}/start")
        agents = {}
        for net in (name, "bridge"):
            _, data, _ = call("POST", f"/containers/create?name={name}-agent-{net[:6]}", {
                "Image": agent_image, "Entrypoint": ["/bin/true"], "Labels": LABELS,
                "HostConfig": dict(HARDENING, Init=True, ReadonlyRootfs=False,
                                   NetworkMode=net)})
            agents[net] = json.loads(data)["Id"]
        step("agent start, internal network", "POST", f"/containers/{agents[name]}/start")
        step("agent start, bridge (open)", "POST", f"/containers/{agents['bridge']}/start")
        time.sleep(0.3)
        for cid in agents.values():
            call("DELETE", f"/containers/{cid}?force=1&v=1")
        step("proxy kill", "POST", f"/containers/{proxy}/kill")
        time.sleep(0.2)
        step("proxy remove", "DELETE", f"/containers/{proxy}?force=1&v=1")
        step("network remove", "DELETE", f"/networks/{name}")
    print("| engine call | wall ms | CPU ms |")
    print("|---|---|---|")
    for name, values in runs.items():
        wall = sorted(v[0] for v in values)
        busy = sorted(v[1] for v in values)
        print(f"| {name} | {wall[len(wall) // 2]:.0f} | {busy[len(busy) // 2]} |")


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    if sys.argv[1] == "--cpu":
        if len(sys.argv) < 4:
            raise SystemExit(__doc__)
        cpu(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 5)
        return
    if sys.argv[1] == "--overlap":
        if len(sys.argv) < 4:
            raise SystemExit(__doc__)
        overlap(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 5)
        return
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
