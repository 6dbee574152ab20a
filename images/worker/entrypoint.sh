#!/bin/sh
# Polyphony container entrypoint (shared by images/worker and images/test).
#
# 1. Stage credentials: the runtime mounts a per-container copy of the identity's
#    credential files READ-ONLY below $POLYPHONY_CREDENTIALS (e.g.
#    /polyphony/credentials/.claude/.credentials.json, readable by this container's group
#    only). Agents rewrite their token files, so each attempt gets a private writable copy
#    in $HOME (a tmpfs owned by the container user); the host's files are never mounted.
#    Runs as the unprivileged container user: nothing here needs root.
# 2. Feed stdin: when the runtime uploaded a prompt to $POLYPHONY_STDIN, the command reads
#    it on stdin; otherwise stdin is empty (never a terminal).
# 3. exec the command (argv, never a shell string), so signals reach it directly.
staging="${POLYPHONY_CREDENTIALS:-/polyphony/credentials}"
home="${HOME:-/home/worker}"
if [ -d "$staging" ]; then
    if ! mkdir -p "$home" 2>/dev/null || [ ! -w "$home" ]; then
        echo "polyphony-entrypoint: HOME $home is not writable by $(id -u):$(id -g)" >&2
        exit 70
    fi
    for entry in "$staging"/.[!.]* "$staging"/*; do
        [ -e "$entry" ] || continue
        if ! cp -RL "$entry" "$home/"; then
            echo "polyphony-entrypoint: cannot copy staged credentials $entry into $home" >&2
            exit 70
        fi
    done
    chmod -R u+rwX "$home" 2>/dev/null || true
fi
if [ "$#" -eq 0 ]; then
    echo "polyphony-entrypoint: no command given" >&2
    exit 64
fi
if [ -n "$POLYPHONY_STDIN" ] && [ -f "$POLYPHONY_STDIN" ]; then
    exec "$@" < "$POLYPHONY_STDIN"
fi
exec "$@" < /dev/null
