#!/usr/bin/env python3
"""Check the architecture invariants of docs/ARCHITECTURE.md ("Invariants") that a text
search can decide.

Each check names the invariant, then lists the files (and lines) that break it. Test code
(`#[cfg(test)] mod ...` to the end of a file, files named tests.rs) and comments are left
out: tests may reach anywhere. Exits 1 when any invariant is broken.

Usage: python3 scripts/invariants.py
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SRC = os.path.join(ROOT, "src")


def rust_files(under=""):
    base = os.path.join(SRC, under)
    if base.endswith(".rs") and os.path.exists(base):
        yield base
        return
    for root, _, names in os.walk(base):
        for n in sorted(names):
            if n.endswith(".rs"):
                yield os.path.join(root, n)


def code_lines(path):
    """(line number, text) of the non-test, non-comment code of `path`."""
    if os.path.basename(path) == "tests.rs":
        return
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if re.match(r"^#\[cfg\(test\)\]", line):
                nxt = f.readline()
                if re.match(r"^\s*mod \w+\s*\{", nxt):
                    return
                line = nxt
            code = re.sub(r"//.*", "", line)
            if code.strip():
                yield n, code


def rel(path):
    return os.path.relpath(path, ROOT)


def offenders(pattern, files, allowed=()):
    out = []
    for path in files:
        if rel(path) in allowed:
            continue
        for n, code in code_lines(path):
            if re.search(pattern, code):
                out.append(f"{rel(path)}:{n}: {code.strip()}")
    return out


# The claim's own state change (issue 27: the hot path, one statement that checks the
# same `domain::transition` rule): on SQLite by id, on PostgreSQL the whole owned claim.
CLAIM_WRITERS = ("claim_transition", "claim_next_postgres")


def one_state_write():
    """store/tasks.rs writes `state` in exactly one statement inside `write_transition`,
    and otherwise only in the claim's state change (CLAIM_WRITERS, one statement each)."""
    path = os.path.join(SRC, "store", "tasks.rs")
    fn = None
    hits = []
    for n, code in code_lines(path):
        m = re.match(r"\s*(?:pub(?:\([\w:]+\))?\s+)?fn\s+(\w+)", code)
        if m:
            fn = m.group(1)
        if re.search(r"UPDATE\s+tasks\s+SET\b[^\"]*\bstate\s*=", code):
            hits.append((n, fn, code.strip()))
    general = [h for h in hits if h[1] == "write_transition"]
    claims = [h for h in hits if h[1] in CLAIM_WRITERS]
    if (
        len(general) == 1
        and len(claims) == len(CLAIM_WRITERS)
        and {h[1] for h in claims} == set(CLAIM_WRITERS)
        and len(general) + len(claims) == len(hits)
    ):
        return []
    return [f"{rel(path)}:{n}: in {fn}: {c}" for n, fn, c in hits] or [
        f"{rel(path)}: no state write found in write_transition"
    ]


def outside(folder_or_file, top=SRC):
    inside = os.path.join(SRC, folder_or_file)
    for path in rust_files():
        if path == inside or path.startswith(inside.rstrip("/") + os.sep) or path == inside + ".rs":
            continue
        yield path


CHECKS = [
    (
        "the orchestrator reads the wall clock only through its Clock (src/orchestrator/clock.rs)",
        lambda: offenders(
            r"\b(Utc|Local)::now\b|SystemTime::now",
            rust_files("orchestrator"),
            allowed=("src/orchestrator/clock.rs",),
        ),
    ),
    (
        "only src/runtime/ names bollard (the Docker API)",
        lambda: offenders(r"\bbollard::", outside("runtime")),
    ),
    (
        "only src/store/ names rusqlite (SQL)",
        lambda: offenders(r"\brusqlite::", outside("store")),
    ),
    (
        "only src/store/ names the PostgreSQL driver",
        lambda: offenders(r"\bpostgres::", outside("store")),
    ),
    (
        "the store is opened through its handle (store::StoreHandle, issue 27), never by path",
        lambda: offenders(r"\bStore::open\(", outside("store")),
    ),
    (
        "only src/workspace/ spawns git or uses git2",
        lambda: offenders(r'Command::new\("git"\)|\bgit2::', outside("workspace")),
    ),
    (
        "src/runtime/ names neither agents nor the orchestrator (it knows containers)",
        lambda: offenders(r"\bcrate::(agents|orchestrator)\b", rust_files("runtime")),
    ),
    (
        "the attempt pipeline and cancel name no tracker: they ask the task's Source (src/sources/mod.rs)",
        lambda: offenders(
            # `.github()` is the orchestrator's handle on GitHub, the shepherd's alone.
            r"\bsources::github\b|\bSourceKind::Github\b|\bGithubSource\b|\.github\(\)",
            list(rust_files("orchestrator/pipeline"))
            + [
                os.path.join(SRC, "orchestrator", f)
                for f in ("land.rs", "intents.rs", "generation.rs", "daemon.rs", "cancel.rs")
            ]
            + [os.path.join(SRC, "cli", "cancel.rs"), os.path.join(SRC, "http", "act.rs")],
        ),
    ),
    (
        "a task's state is written only by write_transition and the claim's state change (checks domain::state; one implementation for both backends): store/tasks.rs",
        lambda: offenders(
            r"UPDATE\s+tasks\s+SET\b[^\"]*\bstate\s*=",
            rust_files(),
            allowed=("src/store/tasks.rs",),
        )
        + one_state_write(),
    ),
    (
        "src/domain/ and src/routing/ do no IO: no clock, file system, network, process or Docker",
        lambda: offenders(
            r"\b(Utc|Local)::now\b|SystemTime::now|std::fs\b|\bfs::|std::net\b|std::process\b|tokio::|reqwest::|bollard::|rusqlite::",
            list(rust_files("domain")) + list(rust_files("routing")),
        ),
    ),
]


def main():
    broken = 0
    for name, check in CHECKS:
        found = check()
        if found:
            broken += 1
            print(f"BROKEN: {name}", file=sys.stderr)
            for line in found:
                print(f"  {line}", file=sys.stderr)
        else:
            print(f"ok: {name}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
