#!/usr/bin/env python3
"""What the egress proxy's container costs to start, under two choices (issue 25;
docs/benchmarks.md, Egress): the engine's default seccomp profile against the proxy's own
(`src/runtime/seccomp.rs`, rebuilt here from its list), and the proxy's binary paged in
from the image (fuse-overlayfs) against bound read-only from the host.

    bench/proxy_start.py PROXY_IMAGE BINARY [REPS]

PROXY_IMAGE is a `polyphony-egress:<tag>` image (made by any `egress: allowlist` attempt,
e.g. `bench/run.sh egress`) and BINARY the polyphony binary it was made of. Per rep, the
variants interleaved, each a proxy container on no network with the product's other
hardening: the start call's wall time and the machine's CPU over it (/proc/stat, all
processes and the kernel), and the time from the start call's return to the proxy's
`ready` line (its own timestamp). Medians (CPU: means) in ms. Every container is labelled
`polyphony.home=bench-docker-calls` and removed by the run.
"""
import datetime
import json
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import docker_calls as d  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def own_profile():
    """The proxy's profile as `runtime::seccomp::proxy_profile` writes it."""
    src = open(os.path.join(ROOT, "src/runtime/seccomp.rs")).read()
    body = src[src.index("PROXY_SYSCALLS: &[&str] = &["):]
    body = body[: body.index("];")]
    names = re.findall(r'"([a-z0-9_]+)"', body)
    return json.dumps({
        "defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 38,
        "syscalls": [
            {"names": names, "action": "SCMP_ACT_ALLOW"},
            {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
             "args": [{"index": 0, "value": 0x7E020000, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]},
            {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
        ]})


def one(image, host_config, name):
    _, data, _ = d.call("POST", f"/containers/create?name={name}", {
        "Image": image, "User": "65534:65534", "Labels": d.LABELS,
        "Env": ["POLYPHONY_EGRESS_CONFIG=" + d.CONFIG], "HostConfig": host_config})
    cid = json.loads(data)["Id"]
    busy = d.busy_ms()
    t0 = time.perf_counter()
    d.call("POST", f"/containers/{cid}/start")
    wall = (time.perf_counter() - t0) * 1000
    cpu = d.busy_ms() - busy
    returned = time.time()
    ready = None
    for _ in range(500):
        _, logs, _ = d.call("GET", f"/containers/{cid}/logs?stdout=1&stderr=1")
        text = logs.decode("latin1")
        if '"event":"ready"' in text:
            ts = text.split('"event":"ready"', 1)[1].split('"ts":"', 1)[1].split('"', 1)[0]
            at = datetime.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
            ready = (at - returned) * 1000
            break
        time.sleep(0.005)
    d.call("DELETE", f"/containers/{cid}?force=1&v=1")
    return wall, cpu, ready


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    image, binary = sys.argv[1], os.path.realpath(sys.argv[2])
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    base = dict(d.HARDENING, NetworkMode="none")
    own = ["no-new-privileges", "seccomp=" + own_profile()]
    variants = {
        "engine's default profile, binary from the image": base,
        "the proxy's own profile, binary from the image (the product)": dict(base, SecurityOpt=own),
        "the proxy's own profile, binary bound from the host": dict(
            base, SecurityOpt=own, Binds=[f"{binary}:/polyphony:ro"]),
    }
    runs = {k: [] for k in variants}
    for rep in range(reps):
        for n, (k, hc) in enumerate(variants.items()):
            runs[k].append(one(image, hc, f"bench-proxy-start-{os.getpid()}-{rep}-{n}"))
            time.sleep(0.2)
    print("| proxy container | start, wall | start, machine CPU (mean) | start's return to `ready` |")
    print("|---|---|---|---|")
    for k, rows in runs.items():
        ready = [r[2] for r in rows if r[2] is not None]
        print(f"| {k} | {statistics.median(r[0] for r in rows):.0f} ms | "
              f"{statistics.mean(r[1] for r in rows):.0f} ms | "
              f"{statistics.median(ready):.1f} ms |" if ready else "| – |")


if __name__ == "__main__":
    main()
