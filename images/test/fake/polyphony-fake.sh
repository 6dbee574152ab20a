# polyphony-fake.sh: the shared body of the fake agent CLIs (claude, codex, kimi, gemini,
# opencode).
# Sourced by /usr/local/bin/<agent> with AGENT set. busybox sh only. See README.md.
#
# The fakes accept the real argv, find the prompt (the -p/--prompt value, else the last
# positional argument, else stdin; `-` means stdin), read `polyphony-fake…:` directives
# from it, edit files in the working directory (/workspace) and print the CLI's real
# stream-json format.

# Flags of the real CLIs that take a value (so the value is not mistaken for the prompt).
VALUE_FLAGS=" --output-format --input-format --max-turns --model -m --permission-mode \
--allowedTools --allowed-tools --disallowedTools --disallowed-tools --append-system-prompt \
--system-prompt --config -c --sandbox -s --cd -C --approval-mode --session-id --resume -r \
--work-dir -w --agent-file --mcp-config --add-dir --include-directories --max-budget-usd \
--fallback-model --settings --color --output-last-message -o --profile --max-steps-per-turn \
--agent --mcp-config-file -i --prompt-interactive --max-ralph-iterations --skills-dir \
--format --session --title --file -f --port --variant --dir "

MODEL_CLAUDE="claude-sonnet-4-5-20250929"
MODEL_CODEX="gpt-5-codex"
MODEL_KIMI="kimi-k2-turbo-preview"
MODEL_GEMINI="gemini-2.5-pro"
# OpenCode: `run --format json` lines carry a ms timestamp and the session id.
OC_SID="ses_fa4e00000001fakeFakeFake"

# Fixed usage figures, so tests can assert them (README.md lists them). IN_TOK includes
# the cached part, as Codex and Gemini count it; Claude reports the uncached rest.
IN_TOK=6200
OUT_TOK=340
CACHED_TOK=5000
COST_USD=0.0421

SID="00000000-0000-4000-8000-fa4e00000001"
N=0          # item / tool counter
TURNS=0      # assistant messages so far (Claude's num_turns counts these)
TOOLS=0

parse_args() {
    PROMPT=""
    have_prompt=0
    want_stdin=0
    last_pos=""
    first_pos=1
    while [ $# -gt 0 ]; do
        a=$1
        shift
        case "$a" in
            -p|--prompt)
                if [ $# -gt 0 ]; then
                    case "$1" in
                        -) want_stdin=1; shift ;;
                        -*) ;;
                        *) PROMPT=$1; have_prompt=1; shift ;;
                    esac
                fi
                ;;
            --prompt=*) PROMPT=${a#--prompt=}; have_prompt=1 ;;
            -) want_stdin=1 ;;
            --*=*) ;;
            -*)
                case "$VALUE_FLAGS" in
                    *" $a "*) [ $# -gt 0 ] && shift ;;
                esac
                ;;
            *)
                # `codex exec …`, `opencode run …`: the subcommand is not the prompt.
                if [ "$first_pos" = 1 ] && { { [ "$AGENT" = codex ] && [ "$a" = exec ]; } \
                    || { [ "$AGENT" = opencode ] && [ "$a" = run ]; }; }; then
                    first_pos=0
                    continue
                fi
                first_pos=0
                last_pos=$a
                ;;
        esac
    done
    if [ "$have_prompt" = 0 ] && [ "$want_stdin" = 0 ] && [ -n "$last_pos" ]; then
        PROMPT=$last_pos
        have_prompt=1
    fi
    if [ "$have_prompt" = 0 ] && [ ! -t 0 ]; then
        PROMPT=$(cat)
    fi
}

# directive KEY: the value of `KEY[agent]: v` (wins) or `KEY: v` in the prompt. A line may
# be quoted (`> KEY: v`): a follow-up's prompt quotes the reviewer's words (issue 15).
directive() {
    v=$(printf '%s\n' "$PROMPT" | sed -n "s/^[[:space:]>]*$1\[$AGENT\]:[[:space:]]*//p" | head -n 1)
    if [ -z "$v" ]; then
        v=$(printf '%s\n' "$PROMPT" | sed -n "s/^[[:space:]>]*$1:[[:space:]]*//p" | head -n 1)
    fi
    printf '%s' "$v" | sed 's/[[:space:]]*$//'
}

# all_directives KEY: every value of KEY and KEY[agent], one per line.
all_directives() {
    printf '%s\n' "$PROMPT" | sed -n \
        -e "s/^[[:space:]>]*$1\[$AGENT\]:[[:space:]]*//p" \
        -e "s/^[[:space:]>]*$1:[[:space:]]*//p"
}

# j TEXT: TEXT escaped as the inside of a JSON string.
j() {
    printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/	/\\t/g' -e 's/\r/\\r/g' \
        | awk 'BEGIN { ORS = "" } NR > 1 { print "\\n" } { print }'
}

now_iso() { date -u +%Y-%m-%dT%H:%M:%S.000Z; }

# OpenCode's envelope: `{"type":T,"timestamp":MS,"sessionID":S,` (the caller closes it).
oc() { printf '{"type":"%s","timestamp":%s000,"sessionID":"%s",' "$1" "$(date +%s)" "$OC_SID"; }
OC_STEP=0    # OpenCode: model requests (steps) so far
# oc_step_start: a new step (one model request, one assistant message).
oc_step_start() {
    OC_STEP=$((OC_STEP + 1))
    oc step_start
    printf '"part":{"id":"prt_fake%03d_s","sessionID":"%s","messageID":"msg_fake%03d","type":"step-start"}}\n' "$OC_STEP" "$OC_SID" "$OC_STEP"
}
# oc_step_finish REASON COST INPUT OUTPUT CACHE_READ: the step's report (its own tokens).
oc_step_finish() {
    oc step_finish
    printf '"part":{"id":"prt_fake%03d_f","sessionID":"%s","messageID":"msg_fake%03d","type":"step-finish","reason":"%s","cost":%s,"tokens":{"total":%d,"input":%d,"output":%d,"reasoning":0,"cache":{"write":0,"read":%d}}}}\n' \
        "$OC_STEP" "$OC_SID" "$OC_STEP" "$1" "$2" "$(($3 + $4 + $5))" "$3" "$4" "$5"
}

# ---- per-CLI emitters ---------------------------------------------------------------

INIT_DONE=0

emit_init() {
    [ "$INIT_DONE" = 0 ] || return 0
    INIT_DONE=1
    case "$AGENT" in
        claude)
            printf '{"type":"system","subtype":"init","cwd":"%s","session_id":"%s","tools":["Bash","Edit","Read","Write","Glob","Grep"],"mcp_servers":[],"model":"%s","permissionMode":"bypassPermissions","slash_commands":[],"apiKeySource":"none","claude_code_version":"2.0.14","output_style":"default","agents":[],"uuid":"fa4e0000-0000-4000-8000-000000000000"}\n' \
                "$(j "$PWD")" "$SID" "$MODEL_CLAUDE"
            ;;
        codex)
            printf '{"type":"thread.started","thread_id":"%s"}\n' "$SID"
            printf '{"type":"turn.started"}\n'
            ;;
        kimi) ;; # Kimi's print mode starts with the first message.
        opencode) oc_step_start ;;
        gemini)
            printf '{"type":"init","timestamp":"%s","session_id":"%s","model":"%s"}\n' "$(now_iso)" "$SID" "$MODEL_GEMINI"
            printf '{"type":"message","timestamp":"%s","role":"user","content":"%s"}\n' "$(now_iso)" "$(j "$PROMPT")"
            ;;
    esac
}

# emit_text TEXT: one assistant message.
emit_text() {
    TURNS=$((TURNS + 1))
    N=$((N + 1))
    t=$(j "$1")
    case "$AGENT" in
        claude)
            printf '{"type":"assistant","message":{"id":"msg_fake%03d","type":"message","role":"assistant","model":"%s","content":[{"type":"text","text":"%s"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":1000,"output_tokens":25,"service_tier":"standard"}},"parent_tool_use_id":null,"session_id":"%s","uuid":"fa4e0000-0000-4000-8000-%012d"}\n' \
                "$N" "$MODEL_CLAUDE" "$t" "$SID" "$N"
            ;;
        codex)
            printf '{"type":"item.completed","item":{"id":"item_%d","type":"agent_message","text":"%s"}}\n' "$N" "$t"
            ;;
        kimi)
            printf '{"role":"assistant","content":[{"type":"text","text":"%s"}]}\n' "$t"
            ;;
        opencode)
            oc text
            printf '"part":{"id":"prt_fake%03d","sessionID":"%s","messageID":"msg_fake%03d","type":"text","text":"%s","time":{"start":1,"end":2}}}\n' "$N" "$OC_SID" "$OC_STEP" "$t"
            ;;
        gemini)
            printf '{"type":"message","timestamp":"%s","role":"assistant","content":"%s","delta":true}\n' "$(now_iso)" "$t"
            ;;
    esac
}

# emit_tool KIND ARG: a tool call; KIND is shell (ARG = command) or edit (ARG = file).
emit_tool() {
    TURNS=$((TURNS + 1))
    TOOLS=$((TOOLS + 1))
    N=$((N + 1))
    TOOL_ID=$N
    TOOL_KIND=$1
    TOOL_ARG=$2
    a=$(j "$2")
    case "$AGENT" in
        claude)
            if [ "$1" = shell ]; then
                input=$(printf '{"command":"%s","description":"Run %s"}' "$a" "$a")
                name=Bash
            else
                input=$(printf '{"file_path":"%s/%s","old_string":"","new_string":"(edited)"}' "$(j "$PWD")" "$a")
                name=Edit
            fi
            printf '{"type":"assistant","message":{"id":"msg_fake%03d","type":"message","role":"assistant","model":"%s","content":[{"type":"tool_use","id":"toolu_fake%03d","name":"%s","input":%s}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":8,"cache_creation_input_tokens":0,"cache_read_input_tokens":1200,"output_tokens":40,"service_tier":"standard"}},"parent_tool_use_id":null,"session_id":"%s","uuid":"fa4e0000-0000-4000-8000-%012d"}\n' \
                "$N" "$MODEL_CLAUDE" "$N" "$name" "$input" "$SID" "$N"
            ;;
        codex)
            if [ "$1" = shell ]; then
                printf '{"type":"item.started","item":{"id":"item_%d","type":"command_execution","command":"bash -lc %s","aggregated_output":"","exit_code":null,"status":"in_progress"}}\n' "$N" "$a"
            fi
            ;;
        kimi)
            if [ "$1" = shell ]; then
                args=$(j "$(printf '{"command":"%s"}' "$a")")
                name=Shell
            else
                args=$(j "$(printf '{"path":"%s","edit":{"old":"","new":"(edited)"}}' "$a")")
                name=StrReplaceFile
            fi
            printf '{"role":"assistant","content":[],"tool_calls":[{"type":"function","id":"tool_fake%03d","function":{"name":"%s","arguments":"%s"}}]}\n' "$N" "$name" "$args"
            ;;
        opencode) ;; # `tool_use` comes once the call has finished (emit_tool_result).
        gemini)
            if [ "$1" = shell ]; then
                printf '{"type":"tool_use","timestamp":"%s","tool_name":"run_shell_command","tool_id":"run_shell_command-fake%03d","parameters":{"command":"%s"}}\n' "$(now_iso)" "$N" "$a"
            else
                printf '{"type":"tool_use","timestamp":"%s","tool_name":"replace","tool_id":"replace-fake%03d","parameters":{"file_path":"%s/%s","old_string":"","new_string":"(edited)"}}\n' "$(now_iso)" "$N" "$(j "$PWD")" "$a"
            fi
            ;;
    esac
}

# emit_tool_result OUTPUT | emit_tool_result @FILE (raw content, already JSON-safe).
emit_tool_result() {
    case "$1" in
        @*) body() { cat "${1#@}"; } ;;
        *) body() { j "$1"; } ;;
    esac
    case "$AGENT" in
        claude)
            printf '{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_fake%03d","type":"tool_result","content":"' "$TOOL_ID"
            body "$1"
            printf '","is_error":false}]},"parent_tool_use_id":null,"session_id":"%s","uuid":"fa4e0000-0000-4000-8000-%012d"}\n' "$SID" "$TOOL_ID"
            ;;
        codex)
            if [ "$TOOL_KIND" = shell ]; then
                printf '{"type":"item.completed","item":{"id":"item_%d","type":"command_execution","command":"bash -lc %s","aggregated_output":"' "$TOOL_ID" "$(j "$TOOL_ARG")"
                body "$1"
                printf '","exit_code":0,"status":"completed"}}\n'
            else
                printf '{"type":"item.completed","item":{"id":"item_%d","type":"file_change","changes":[{"path":"%s/%s","kind":"update"}],"status":"completed"}}\n' "$TOOL_ID" "$(j "$PWD")" "$(j "$TOOL_ARG")"
            fi
            ;;
        kimi)
            printf '{"role":"tool","content":[{"type":"text","text":"'
            body "$1"
            printf '"}],"tool_call_id":"tool_fake%03d"}\n' "$TOOL_ID"
            ;;
        opencode)
            # The finished call, then the step ends in tool calls and the next one starts.
            if [ "$TOOL_KIND" = shell ]; then
                tool=bash
                input=$(printf '{"command":"%s","description":"Run %s"}' "$(j "$TOOL_ARG")" "$(j "$TOOL_ARG")")
            else
                tool=edit
                input=$(printf '{"filePath":"%s/%s","oldString":"","newString":"(edited)"}' "$(j "$PWD")" "$(j "$TOOL_ARG")")
            fi
            oc tool_use
            printf '"part":{"id":"prt_fake%03d_t","sessionID":"%s","messageID":"msg_fake%03d","type":"tool","callID":"call_fake%03d","tool":"%s","state":{"status":"completed","input":%s,"output":"' "$TOOL_ID" "$OC_SID" "$OC_STEP" "$TOOL_ID" "$tool" "$input"
            body "$1"
            printf '","title":"%s","metadata":{},"time":{"start":1,"end":2}}}}\n' "$(j "$TOOL_ARG")"
            oc_step_finish tool-calls 0 0 0 0
            oc_step_start
            ;;
        gemini)
            if [ "$TOOL_KIND" = shell ]; then id="run_shell_command-fake"; else id="replace-fake"; fi
            printf '{"type":"tool_result","timestamp":"%s","tool_id":"%s%03d","status":"success","output":"' "$(now_iso)" "$id" "$TOOL_ID"
            body "$1"
            printf '"}\n'
            ;;
    esac
}

# emit_result_ok FINAL: the CLI's successful completion.
emit_result_ok() {
    f=$(j "$1")
    case "$AGENT" in
        claude)
            printf '{"type":"result","subtype":"success","is_error":false,"duration_ms":2345,"duration_api_ms":2100,"num_turns":%d,"result":"%s","session_id":"%s","total_cost_usd":%s,"usage":{"input_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":%d,"output_tokens":%d,"server_tool_use":{"web_search_requests":0},"service_tier":"standard"},"modelUsage":{},"permission_denials":[],"uuid":"fa4e0000-0000-4000-8000-ffffffffffff"}\n' \
                "$TURNS" "$f" "$SID" "$COST_USD" "$((IN_TOK - CACHED_TOK))" "$CACHED_TOK" "$OUT_TOK"
            ;;
        codex)
            printf '{"type":"turn.completed","usage":{"input_tokens":%d,"cached_input_tokens":%d,"output_tokens":%d}}\n' "$IN_TOK" "$CACHED_TOK" "$OUT_TOK"
            ;;
        kimi) ;; # the last assistant message (emitted by the caller) is the result
        opencode)
            # The last step carries the run's tokens and cost; `done` once the session idles.
            oc_step_finish stop "$COST_USD" "$((IN_TOK - CACHED_TOK))" "$OUT_TOK" "$CACHED_TOK"
            oc done
            printf '"reason":"idle","rejected":[]}\n'
            ;;
        gemini)
            printf '{"type":"result","timestamp":"%s","status":"success","stats":{"total_tokens":%d,"input_tokens":%d,"output_tokens":%d,"cached":%d,"input":%d,"duration_ms":2345,"tool_calls":%d}}\n' \
                "$(now_iso)" "$((IN_TOK + OUT_TOK))" "$IN_TOK" "$OUT_TOK" "$CACHED_TOK" "$((IN_TOK - CACHED_TOK))" "$TOOLS"
            ;;
    esac
}

# emit_quota: the CLI's real usage-limit report; the caller exits 1. The reset is
# RESET_AT (epoch seconds; `polyphony-fake-reset-at`), else an hour from now for Claude,
# Kimi and Gemini and Codex's 4 days.
emit_quota() {
    now_s=$(date +%s)
    reset=${RESET_AT:-$((now_s + 3600))}
    left=$((reset - now_s))
    [ "$left" -gt 0 ] || left=1
    case "$AGENT" in
        claude)
            printf '{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":%s,"rateLimitType":"five_hour","overageStatus":"rejected"},"session_id":"%s","uuid":"fa4e0000-0000-4000-8000-00000000abcc"}\n' "$reset" "$SID"
            printf '{"type":"assistant","message":{"id":"msg_fake_limit","type":"message","role":"assistant","model":"<synthetic>","content":[{"type":"text","text":"Claude AI usage limit reached|%s"}],"stop_reason":"stop_sequence","stop_sequence":"","usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0,"service_tier":null}},"parent_tool_use_id":null,"error":"rate_limit","session_id":"%s","uuid":"fa4e0000-0000-4000-8000-00000000abcd"}\n' "$reset" "$SID"
            printf '{"type":"result","subtype":"success","is_error":true,"duration_ms":312,"duration_api_ms":0,"num_turns":1,"result":"Claude AI usage limit reached|%s","session_id":"%s","total_cost_usd":0,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0,"server_tool_use":{"web_search_requests":0},"service_tier":"standard"},"modelUsage":{},"permission_denials":[],"uuid":"fa4e0000-0000-4000-8000-fffffffffffe"}\n' "$reset" "$SID"
            ;;
        codex)
            msg="You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing), or try again in 4 days 2 hours 13 minutes."
            if [ -n "$RESET_AT" ]; then
                msg="You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing), or try again in $(((left + 59) / 60)) minutes."
            fi
            printf '{"type":"error","message":"%s"}\n' "$(j "$msg")"
            printf '{"type":"turn.failed","error":{"message":"%s"}}\n' "$(j "$msg")"
            ;;
        kimi)
            # kimi-cli's print mode reports provider errors as a plain line on stdout.
            emit_text "Let me run the tests first."
            echo "Error code: 429 - {'error': {'message': 'Your account org-fake request reached organization max RPM: 3, please try again after $left seconds', 'type': 'rate_limit_reached_error'}}"
            ;;
        opencode)
            # The provider's 429 as OpenCode reports it: an `APIError` with the status, the
            # response headers and body (message-v2.ts), then the session goes idle.
            emit_text "Let me run the tests first."
            oc error
            printf '"error":{"name":"APIError","data":{"message":"This request would exceed your account'"'"'s rate limit. Please try again later.","statusCode":429,"isRetryable":false,"responseHeaders":{"retry-after":"%d","content-type":"application/json"},"responseBody":"{\\"type\\":\\"error\\",\\"error\\":{\\"type\\":\\"rate_limit_error\\",\\"message\\":\\"This request would exceed your account'"'"'s rate limit. Please try again later.\\"}}"}}}\n' "$left"
            ;;
        gemini)
            printf '{"type":"error","timestamp":"%s","severity":"warning","message":"Quota exceeded for quota metric '"'"'Gemini 2.5 Pro Requests'"'"'; falling back"}\n' "$(now_iso)"
            printf '{"type":"result","timestamp":"%s","status":"error","error":{"type":"TerminalQuotaError","message":"You have exhausted your capacity on this model. Your quota will reset after '"$left"'s."},"stats":{"total_tokens":0,"input_tokens":0,"output_tokens":0,"cached":0,"input":0,"duration_ms":412,"tool_calls":0}}\n' "$(now_iso)" 
            ;;
    esac
}

# ---- workspace changes --------------------------------------------------------------

# Hostile agents (issue 11 "landing integrity"): each prepares an attack in the workspace,
# then applies the fix like `succeed`, so only the attack can make the attempt go wrong.

# attack_repoint: test.sh first moves the attempt branch to origin's `evil` commit (by
# writing the ref file: no git in this image), then runs the real test.
attack_repoint() {
    {
        echo '#!/bin/sh'
        echo '# polyphony-fake repoint-branch: repoint the attempt branch at origin/evil.'
        echo 'if [ -f .git/HEAD ]; then'
        echo '    ref=$(sed -n "s/^ref: //p" .git/HEAD)'
        echo '    evil=$(cat .git/refs/remotes/origin/evil 2>/dev/null || sed -n "s# refs/remotes/origin/evil\$##p" .git/packed-refs)'
        echo '    if [ -n "$ref" ] && [ -n "$evil" ]; then'
        echo '        mkdir -p ".git/$(dirname "$ref")" && echo "$evil" > ".git/$ref" && echo "repointed $ref to $evil"'
        echo '    fi'
        echo 'fi'
        sed '1d' test.sh
    } > test.sh.new
    mv test.sh.new test.sh
    CHANGED="$CHANGED test.sh"
}

# attack_exclude: the real fix lives in .fix.sh, hidden from the commit by .git/info/exclude;
# calc.sh sources it when present. The agent's tree passes `sh test.sh`; the commit fails it.
attack_exclude() {
    printf 'add() {\n    echo $(($1 + $2))\n}\n' > .fix.sh
    echo '[ -f ./.fix.sh ] && . ./.fix.sh' >> calc.sh
    mkdir -p .git/info
    echo '/.fix.sh' >> .git/info/exclude
    CHANGED="$CHANGED calc.sh"
}

# attack_plant (issue 23): the hostile kit whose bytes the test computed on the host with
# real git. Every `polyphony-fake-plant: PATH BASE64` writes the decoded bytes to PATH
# (relative, `.git/...` allowed: replace refs, loose objects, packs, an index, a
# commit-graph); `polyphony-fake-many: N` creates N empty files under many/;
# `polyphony-fake-name-of: VAR` creates a file whose name holds $VAR's value;
# `polyphony-fake-garble: yes` overwrites every file in .git with random bytes and adds
# random refs, config, objects and index.
attack_plant() {
    all_directives polyphony-fake-plant | while read -r path data; do
        case "$path" in '' | /* | *..*) continue ;; esac
        mkdir -p "$(dirname "$path")"
        [ -e "$path" ] && chmod u+w "$path" 2>/dev/null
        printf '%s' "$data" | base64 -d > "$path" || note "plant: cannot write $path"
    done
    n=$(directive polyphony-fake-many)
    case "$n" in
        '' | *[!0-9]*) ;;
        *)
            # In chunks of 1000, each followed by a line (a slow disk is not a stall).
            emit_init
            mkdir -p many
            i=1
            while [ "$i" -le "$n" ]; do
                end=$((i + 999))
                [ "$end" -le "$n" ] || end=$n
                (cd many && seq "$i" "$end" | xargs touch)
                emit_text "created many/$i..many/$end"
                i=$((end + 1))
            done
            CHANGED="$CHANGED many/"
            ;;
    esac
    for var in $(all_directives polyphony-fake-name-of); do
        case "$var" in *[!A-Za-z0-9_]* | [0-9]*) continue ;; esac
        eval "val=\${$var-}"
        [ -n "$val" ] && echo "notes" > "notes-$val.txt"
    done
    if [ "$(directive polyphony-fake-garble)" = yes ]; then
        chmod -R u+w .git 2>/dev/null
        find .git -type f | while read -r f; do head -c 97 /dev/urandom > "$f"; done
        mkdir -p .git/refs/replace .git/objects/info .git/objects/pack .git/objects/ab
        head -c 41 /dev/urandom > .git/refs/replace/0123456789abcdef0123456789abcdef01234567
        head -c 300 /dev/urandom > .git/objects/info/commit-graph
        head -c 300 /dev/urandom > .git/objects/info/alternates
        head -c 300 /dev/urandom > .git/objects/pack/pack-0123456789abcdef0123456789abcdef01234567.pack
        head -c 300 /dev/urandom > .git/objects/pack/pack-0123456789abcdef0123456789abcdef01234567.idx
        head -c 300 /dev/urandom > .git/objects/ab/cdef0123456789abcdef0123456789abcdef01
        head -c 300 /dev/urandom > .git/index
        head -c 300 /dev/urandom > .git/config
        head -c 300 /dev/urandom > .git/HEAD
        head -c 300 /dev/urandom > .git/packed-refs
    fi
}

# attack_fifo: a FIFO at .git/index (host-side `git add` would block on it forever).
attack_fifo() {
    rm -f .git/index
    mkfifo .git/index
}

attack_gitmodules() {
    printf '[submodule "vendor/evil"]\n\tpath = vendor/evil\n\turl = https://example.invalid/evil.git\n' > .gitmodules
    CHANGED="$CHANGED .gitmodules"
}

attack_attr_filter() {
    echo '*.sh filter=polyphony-evil' > .gitattributes
    CHANGED="$CHANGED .gitattributes"
}

# attack_big_file: a file of `polyphony-fake-size: BYTES` bytes (default 2 MiB).
attack_big_file() {
    size=$(directive polyphony-fake-size)
    case "$size" in '' | *[!0-9]*) size=2097152 ;; esac
    head -c "$size" /dev/zero > big.bin
    CHANGED="$CHANGED big.bin"
}

# attack_leak: writes the values of the `polyphony-fake-echo` variables into leak.txt.
attack_leak() {
    for var in $(all_directives polyphony-fake-echo); do
        case "$var" in
            *[!A-Za-z0-9_]* | [0-9]*) continue ;;
        esac
        eval "val=\${$var-}"
        echo "config: $val" >> leak.txt
    done
    CHANGED="$CHANGED leak.txt"
}

CHANGED=""

note() {
    echo "- fake $AGENT, attempt $ATTEMPT: $1" >> POLYPHONY_FAKE.md
    CHANGED="$CHANGED POLYPHONY_FAKE.md"
}

# apply_seds: applies every `polyphony-fake-sed: FILE SED_EXPR`; fails when there is none.
apply_seds() {
    seds=$(all_directives polyphony-fake-sed)
    [ -n "$seds" ] || return 1
    status=0
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        file=${line%% *}
        expr=${line#* }
        if [ ! -f "$file" ]; then
            echo "polyphony-fake: $file does not exist in $PWD" >&2
            status=1
            continue
        fi
        sed -i "$expr" "$file" || status=1
        CHANGED="$CHANGED $file"
    done <<EOF_SEDS
$seds
EOF_SEDS
    return $status
}

# leak_value VALUE: prints VALUE the ways an agent could leak it past a plain-text
# scrubber (issue 11 "Scrubbing that holds"): base64, base64url, hex, URL-encoded, base64
# wrapped over lines, split across two lines and across two writes of one line.
leak_value() {
    lv=$1
    half=$((${#lv} / 2))
    a=$(printf '%s' "$lv" | cut -c1-"$half")
    b=$(printf '%s' "$lv" | cut -c"$((half + 1))"-)
    emit_text "base64: $(printf '%s' "$lv" | base64 | tr -d '\n')"
    emit_text "base64url: $(printf '%s' "$lv" | base64 | tr -d '\n=' | tr '+/' '-_')"
    emit_text "hex: $(printf '%s' "$lv" | od -An -tx1 -v | tr -d ' \n')"
    emit_text "url: $(printf '%s' "$lv" | od -An -tx1 -v | tr -d '\n' | sed 's/ /%/g')"
    printf 'in base64 inside: %s\n' "$(printf 'token=%s&x=1' "$lv" | base64 | tr -d '\n')"
    printf '%s%s%s%s' "$lv" "$lv" "$lv" "$lv" | base64 >&2
    printf '%s\n%s\n' "$a" "$b" >&2
    printf 'chunked %s' "$a" >&2
    sleep 0.3
    printf '%s done\n' "$b" >&2
    printf 'split %s\n' "$a"
    sleep 0.3
    printf '%s end\n' "$b"
}

# resolve_conflicts: a merge left git's markers (a follow-up on a pull request whose base
# moved, issue 15): keep the branch's side of each conflict, as an agent told to keep the
# pull request's intent would.
resolve_conflicts() {
    # One grep per batch of files, not per file (a tree of 20,000 files, issue 23).
    for f in $(find . -path ./.git -prune -o -type f -print | xargs grep -l '^<<<<<<< ' 2>/dev/null); do
        sed -i -e '/^<<<<<<< /d' -e '/^=======$/,/^>>>>>>> /d' "$f"
        CHANGED="$CHANGED ${f#./}"
    done
}

# run_success CHANGE: a complete successful session making CHANGE
# (default | note | fix | protected | none).
run_success() {
    emit_init
    emit_text "I'll start by looking at the repository."
    emit_tool shell "ls"
    emit_tool_result "$(ls -A 2>&1 | head -n 50)"
    resolve_conflicts
    case "$1" in
        default) apply_seds || note "succeed" ;;
        fix) apply_seds || note "no fix given (no polyphony-fake-sed line)" ;;
        note) note "$2" ;;
        protected)
            mkdir -p .github/workflows
            echo "# edited by the fake $AGENT (touch-protected)" >> .github/workflows/ci.yml
            CHANGED=".github/workflows/ci.yml"
            ;;
        none) ;;
    esac
    for file in $CHANGED; do
        emit_tool edit "$file"
        emit_tool_result "The file $file has been updated."
        break
    done
    final="Done. Changed:${CHANGED:- nothing}."
    custom=$(directive polyphony-fake-final)
    [ -z "$custom" ] || final=$custom
    emit_text "$final"
    emit_result_ok "$final"
}

fake_main() {
    parse_args "$@"
    SCENARIO=$(directive polyphony-fake)
    [ -n "$SCENARIO" ] || SCENARIO=succeed
    # A line `Attempt: N`, or the built-in template's `Task (REF, attempt N): TITLE`.
    ATTEMPT=$(printf '%s\n' "$PROMPT" | sed -n \
        -e 's/^[[:space:]]*Attempt:[[:space:]]*\([0-9][0-9]*\).*/\1/p' \
        -e 's/^Task (.*[, ]attempt \([0-9][0-9]*\)):.*/\1/p' | head -n 1)
    [ -n "$ATTEMPT" ] || ATTEMPT=${POLYPHONY_ATTEMPT:-1}
    case "$SCENARIO" in
        succeed) run_success default ;;
        fix-on-retry)
            if [ "$ATTEMPT" -ge 2 ]; then
                run_success fix
            else
                run_success note "a change that does not fix anything (fix-on-retry, attempt 1)"
            fi
            ;;
        fail-tests) run_success note "a change that breaks nothing and fixes nothing (fail-tests)" ;;
        no-change) run_success none ;;
        touch-protected) run_success protected ;;
        quota)
            # With `polyphony-fake-reset-at: EPOCH` the limit holds until then and the
            # session after it succeeds (the limit reset).
            RESET_AT=$(directive polyphony-fake-reset-at)
            case "$RESET_AT" in *[!0-9]*) RESET_AT="" ;; esac
            if [ -n "$RESET_AT" ] && [ "$(date +%s)" -ge "$RESET_AT" ]; then
                run_success default
            else
                emit_init
                # `polyphony-fake-edit-first: yes`: the limit comes mid-run, after the
                # `polyphony-fake-sed` edits (or a note) are made.
                if [ "$(directive polyphony-fake-edit-first)" = yes ]; then
                    emit_tool shell "ls"
                    emit_tool_result "$(ls -A 2>&1 | head -n 50)"
                    apply_seds || note "work before the usage limit"
                fi
                emit_quota
                exit 1
            fi
            ;;
        not-logged-in)
            # What each CLI prints with no login, or a key the model API refuses (401).
            case "$AGENT" in
                claude)
                    printf '{"type":"result","subtype":"success","is_error":true,"duration_ms":120,"duration_api_ms":0,"num_turns":1,"result":"Invalid API key \302\267 Please run /login","session_id":"%s","total_cost_usd":0,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}\n' "$SID"
                    ;;
                codex)
                    printf '{"type":"error","message":"unexpected status 401 Unauthorized: Missing bearer authentication in header"}\n'
                    printf '{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized"}}\n'
                    ;;
                opencode)
                    oc error
                    printf '"error":{"name":"APIError","data":{"message":"invalid x-api-key","statusCode":401,"isRetryable":false,"responseBody":"{\\"type\\":\\"error\\",\\"error\\":{\\"type\\":\\"authentication_error\\",\\"message\\":\\"invalid x-api-key\\"}}"}}}\n'
                    ;;
                *)
                    echo "Error code: 401 - {'error': {'message': 'Invalid Authentication', 'type': 'invalid_authentication_error'}}"
                    ;;
            esac
            exit 1
            ;;
        hang)
            emit_init
            i=0
            while :; do
                i=$((i + 1))
                emit_text "Still working ($i)"
                sleep 1
            done
            ;;
        silent)
            sleep 2147483
            ;;
        garbage)
            echo "this line is not JSON"
            echo '{"type": "assistant", "message": {'
            printf '\033[31mcolour codes\033[0m and a tab\there\n'
            echo '[1, 2, 3]'
            echo 'null'
            run_success default
            ;;
        crash)
            emit_init
            emit_text "Starting work."
            emit_tool shell "make test"
            kill -9 $$
            ;;
        huge-line)
            emit_init
            emit_tool shell "cat big.log"
            head -c 1572864 /dev/zero | tr '\0' 'x' > /tmp/polyphony-fake-big
            emit_tool_result @/tmp/polyphony-fake-big
            rm -f /tmp/polyphony-fake-big
            run_success default
            ;;
        echo-secret-encoded)
            # Each `polyphony-fake-echo: VAR` value and the accessToken of each
            # `polyphony-fake-cat: FILE` credential file (found by name under $HOME or the
            # staging root), in every spelling leak_value knows.
            emit_init
            # Terminal escapes too: `logs` must not pass them to the operator's terminal.
            printf 'title \033]0;pwned\007 clear \033[2J end\n'
            printf 'stderr \033[31mred\033[0m\n' >&2
            for var in $(all_directives polyphony-fake-echo); do
                case "$var" in
                    *[!A-Za-z0-9_]* | [0-9]*) continue ;;
                esac
                eval "val=\${$var-}"
                [ -n "$val" ] && leak_value "$val"
            done
            for name in $(all_directives polyphony-fake-cat); do
                case "$name" in *[!A-Za-z0-9._-]*) continue ;; esac
                f=$(find "$HOME" /polyphony -name "$name" -type f 2>/dev/null | head -n 1)
                [ -n "$f" ] || continue
                emit_text "credential file $name: $(cat "$f")"
                tok=$(sed -n 's/.*"accessToken" *: *"\([^"]*\)".*/\1/p' "$f" | head -n 1)
                [ -n "$tok" ] && leak_value "$tok"
            done
            run_success default
            ;;
        echo-secret)
            emit_init
            for var in $(all_directives polyphony-fake-echo); do
                case "$var" in
                    *[!A-Za-z0-9_]* | [0-9]*) continue ;;
                esac
                eval "val=\${$var-}"
                emit_text "The value of $var is $val (do not share it)"
            done
            run_success default
            ;;
        vandal-mirror)
            # Issue 18: try to damage the mirror this workspace borrows objects from (the
            # path its alternates file names), record each outcome, then do the task.
            alt=$(head -n 1 .git/objects/info/alternates 2>/dev/null)
            # One stored object: a pack, else a loose object (small mirrors keep those).
            f=$(find "$alt" -type f -name '*.pack' 2>/dev/null | head -n 1)
            [ -n "$f" ] || f=$(find "$alt" -type f -path '*/[0-9a-f][0-9a-f]/*' 2>/dev/null | head -n 1)
            if [ -z "$alt" ] || [ -z "$f" ]; then
                note "mirror vandal: no mirror object visible under '$alt'"
            else
                report=""
                vandal() {
                    what=$1
                    shift
                    if "$@" >/dev/null 2>&1; then r=done; else r=refused; fi
                    report="$report $what:$r"
                }
                d=$(dirname "$f")
                vandal read head -c 4 "$f"
                vandal write sh -c "echo x > '$alt/polyphony-fake-was-here'"
                vandal loose sh -c "mkdir -p '$alt/ff' && echo x > '$alt/ff/polyphony-fake'"
                vandal repack sh -c "cat '$f' > '$d/tmp_pack_fake' && mv '$d/tmp_pack_fake' '$f'"
                vandal truncate sh -c ": > '$f'"
                vandal chmod chmod u+w "$f"
                vandal delete sh -c "rm -f '$f'; [ ! -e '$f' ]"
                vandal delete-all sh -c "rm -rf '$alt'; [ ! -d '$alt' ]"
                note "mirror vandal:$report"
            fi
            run_success default
            ;;
        slow)
            secs=$(directive polyphony-fake-sleep)
            case "$secs" in '' | *[!0-9]*) secs=5 ;; esac
            emit_init
            i=0
            while [ "$i" -lt "$secs" ]; do
                i=$((i + 1))
                emit_text "Progress $i/$secs"
                sleep 1
            done
            run_success default
            ;;
        reach)
            # Asks the attempt's egress proxy ($HTTPS_PROXY) for a tunnel to each
            # `polyphony-fake-connect: HOST:PORT`, in order, with `polyphony-fake-sleep: N`
            # seconds of progress after each (default 5); then success.
            secs=$(directive polyphony-fake-sleep)
            case "$secs" in '' | *[!0-9]*) secs=5 ;; esac
            proxy=${HTTPS_PROXY#http://}
            proxy=${proxy%/}
            emit_init
            for target in $(all_directives polyphony-fake-connect); do
                answer=$(printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' "$target" "$target" \
                    | nc -w 3 "${proxy%:*}" "${proxy##*:}" 2>&1 | head -n 1 | tr -d '\r')
                emit_text "CONNECT $target: ${answer:-no answer}"
                i=0
                while [ "$i" -lt "$secs" ]; do
                    i=$((i + 1))
                    emit_text "Waiting $i/$secs"
                    sleep 1
                done
            done
            run_success default
            ;;
        refuse-flood)
            # A hostile agent filling the store with refusals (issue 25): asks its egress
            # proxy for `polyphony-fake-refusals: N` (default 600) tunnels to distinct
            # unlisted names, flood-I.example:443, as fast as it answers; then
            # `polyphony-fake-sleep: S` seconds of progress (default 2) and success.
            n=$(directive polyphony-fake-refusals)
            case "$n" in '' | *[!0-9]*) n=600 ;; esac
            secs=$(directive polyphony-fake-sleep)
            case "$secs" in '' | *[!0-9]*) secs=2 ;; esac
            delay=$(directive polyphony-fake-delay)
            case "$delay" in '' | *[!0-9]*) delay=0 ;; esac
            proxy=${HTTPS_PROXY#http://}
            proxy=${proxy%/}
            emit_init
            # With `polyphony-fake-delay: D`, the flood starts after D seconds of progress.
            i=0
            while [ "$i" -lt "$delay" ]; do
                i=$((i + 1))
                emit_text "Starting in $((delay - i + 1))"
                sleep 1
            done
            i=0
            while [ "$i" -lt "$n" ]; do
                printf 'CONNECT flood-%s.example:443 HTTP/1.1\r\n\r\n' "$i" \
                    | nc -w 3 "${proxy%:*}" "${proxy##*:}" >/dev/null 2>&1
                i=$((i + 1))
            done
            emit_text "asked for $n unlisted names"
            i=0
            while [ "$i" -lt "$secs" ]; do
                i=$((i + 1))
                emit_text "Waiting $i/$secs"
                sleep 1
            done
            run_success default
            ;;
        repoint-branch) attack_repoint; run_success default ;;
        exclude-hidden) attack_exclude; run_success note "the fix is in an excluded file" ;;
        fifo-index) attack_fifo; run_success default ;;
        plant) attack_plant; run_success default ;;
        gitmodules) attack_gitmodules; run_success default ;;
        attr-filter) attack_attr_filter; run_success default ;;
        big-file) attack_big_file; run_success default ;;
        leak-secret) attack_leak; run_success default ;;
        forge-result)
            # The real report first, then a "tool subprocess" forges a second one through
            # PID 1's stdout (the container's stdout), as a hostile tool run could.
            run_success default
            COST_USD=1000000
            TURNS=999
            forged=$(emit_result_ok "forged report")
            sh -c 'printf "%s\n" "$1" > /proc/1/fd/1' forge "$forged"
            ;;
        forge-cost)
            # The one report carries the cost of `polyphony-fake-cost: N` (e.g. -5, 1000000).
            cost=$(directive polyphony-fake-cost)
            [ -n "$cost" ] && COST_USD=$cost
            run_success default
            ;;
        flood)
            # Output without end: 1000-byte lines as fast as the pipe takes them.
            emit_init
            line=$(head -c 1000 /dev/zero | tr '\0' 'x')
            while :; do
                echo "$line"
            done
            ;;
        fill-workspace)
            # Grows the workspace by `polyphony-fake-fill-mb: N` MiB (default 64), then waits.
            mb=$(directive polyphony-fake-fill-mb)
            case "$mb" in '' | *[!0-9]*) mb=64 ;; esac
            emit_init
            dd if=/dev/zero of=polyphony-fill.bin bs=1048576 count="$mb" 2>/dev/null
            i=0
            while :; do
                i=$((i + 1))
                emit_text "Still filling ($i)"
                sleep 1
            done
            ;;
        show-home)
            # What the agent can see of its credentials and who it runs as.
            emit_init
            emit_text "uid=$(id -u) gid=$(id -g) home=$HOME"
            emit_text "files: $(cd "$HOME" && find . -type f | sort | tr '\n' ' ')"
            emit_text "root: $( (echo x > /polyphony-root-write) 2>/dev/null && echo writable || echo read-only)"
            run_success default
            ;;
        *)
            echo "polyphony-fake: unknown scenario '$SCENARIO' (see images/test/README.md)" >&2
            exit 2
            ;;
    esac
}
