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
# 3. Hold (issue 25): when $POLYPHONY_HOLD_UNTIL names a file (the runtime's staging
#    directory, read-only here), wait until the daemon writes it, at most
#    $POLYPHONY_HOLD_SECONDS seconds: the container starts beside its egress proxy, and the
#    command runs only once the proxy listens. With $POLYPHONY_HOLD_FIFO (a FIFO there the
#    daemon writes a line into after the file) the wait sleeps in a `read`; else it polls.
#    Skipping the wait gains nothing: this container's network has no route out but
#    through that proxy.
# 4. exec the command (argv, never a shell string), so signals reach it directly.
#
# The images carry the label polyphony.entrypoint.hold=1: the daemon holds only the
# containers of images that say they honour step 3.
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
if [ -n "$POLYPHONY_HOLD_UNTIL" ] && [ ! -e "$POLYPHONY_HOLD_UNTIL" ]; then
    limit="${POLYPHONY_HOLD_SECONDS:-30}"
    fifo="${POLYPHONY_HOLD_FIFO:-}"
    not_released() {
        echo "polyphony-entrypoint: not released within ${limit} s (no $POLYPHONY_HOLD_UNTIL): the attempt's egress proxy never listened; see the daemon's log" >&2
        exit 75
    }
    if [ -n "$fifo" ] && [ -p "$fifo" ] && [ -r "$fifo" ] && [ -w "$fifo" ] \
        && ( exec 3<>"$fifo" ) 2>/dev/null; then
        # Woken, not polling: the daemon writes the file, then a line into the FIFO. The
        # FIFO is opened read-write (the open never blocks, and the timer can write to it
        # too) before the file is looked at again, so the line is never missed.
        exec 3<>"$fifo"
        if [ ! -e "$POLYPHONY_HOLD_UNTIL" ]; then
            (
                trap 'kill "$s" 2>/dev/null; wait "$s" 2>/dev/null; exit 0' TERM
                sleep "$limit" &
                s=$!
                wait "$s" && echo timeout >&3
            ) &
            timer=$!
            read -r word <&3 || word=timeout
            kill "$timer" 2>/dev/null
            wait "$timer" 2>/dev/null
            if [ "$word" = timeout ] && [ ! -e "$POLYPHONY_HOLD_UNTIL" ]; then
                not_released
            fi
        fi
        exec 3>&-
    else
        # Polled every 10 ms (every second on a `sleep` without fractions); counted in 10 ms.
        tick=0.01
        step=1
        sleep "$tick" 2>/dev/null || { tick=1; step=100; }
        waited=0
        while [ ! -e "$POLYPHONY_HOLD_UNTIL" ]; do
            if [ "$waited" -ge $((limit * 100)) ]; then
                not_released
            fi
            sleep "$tick"
            waited=$((waited + step))
        done
    fi
fi
if [ "$#" -eq 0 ]; then
    echo "polyphony-entrypoint: no command given" >&2
    exit 64
fi
if [ -n "$POLYPHONY_STDIN" ] && [ -f "$POLYPHONY_STDIN" ]; then
    exec "$@" < "$POLYPHONY_STDIN"
fi
exec "$@" < /dev/null
