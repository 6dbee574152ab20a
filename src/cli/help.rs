//! The EXAMPLES and EXIT STATUS sections every verb's `--help` ends with (issue 29: the
//! habits of gh, cargo and kubectl). One constant per verb, so `--help`, the man page
//! (`polyphony man`) and the shell completions describe the same command line.

/// The exit codes, as `main` maps them (one place: `cli::exit_code`).
macro_rules! exit_status {
    () => {
        "EXIT STATUS:\n  0  success\n  1  the operation failed, or the task did not land\n  2  usage or configuration error (the message names the file, field and fix)"
    };
    ($zero:literal) => {
        concat!(
            "EXIT STATUS:\n  0  ",
            $zero,
            "\n  1  the operation failed, or the task did not land\n  2  usage or configuration error (the message names the file, field and fix)"
        )
    };
}

macro_rules! help {
    ($name:ident, $examples:literal) => {
        pub const $name: &str = concat!("EXAMPLES:\n", $examples, "\n\n", exit_status!());
    };
    ($name:ident, $examples:literal, $zero:literal) => {
        pub const $name: &str = concat!("EXAMPLES:\n", $examples, "\n\n", exit_status!($zero));
    };
}

help!(
    INIT,
    "  polyphony init                      # templates into ~/.polyphony\n  polyphony init --agents claude,codex # route only to the CLIs logged in here\n  POLYPHONY_HOME=/srv/poly polyphony init --force"
);
help!(
    CONFIG,
    "  polyphony config check              # validate, print the effective config\n  polyphony config check --json | jq .global"
);
help!(
    ENQUEUE,
    "  polyphony enqueue --repo ~/src/app \"Fix the flaky login test\"\n  polyphony enqueue --repo https://github.com/o/r.git --type docs --body-file notes.md \"Document the API\"",
    "the task was queued (its id on stdout)"
);
help!(
    STATUS,
    "  polyphony status                    # the newest 50 tasks\n  polyphony status --state BLOCKED\n  polyphony status local-3 --json | jq .attempts"
);
help!(
    ROUTE,
    "  polyphony route local-3\n  polyphony route owner/repo#42 --explain"
);
help!(
    REPLAY,
    "  polyphony replay transcript.ndjson --agent claude\n  polyphony replay run.jsonl --agent codex --json | jq .failure_kind",
    "the transcript shows a successful run"
);
help!(
    SPAWN,
    "  polyphony spawn owner/repo#42       # one labelled issue, in the foreground\n  polyphony spawn --task local-3 --json",
    "the task landed"
);
help!(
    RETRY,
    "  polyphony retry local-3             # a BLOCKED task, once its cause is fixed\n  polyphony retry --blocked --json",
    "a new generation was made (or nothing needed one)"
);
help!(
    CANCEL,
    "  polyphony cancel local-3            # stop its attempt; CANCELLED, no failure counted\n  polyphony cancel owner/repo#42 --by alice --json",
    "the task is CANCELLED"
);
help!(
    DAEMON,
    "  polyphony daemon --listen 127.0.0.1:8787\n  polyphony daemon --exit-when-idle --json\n  systemctl --user start polyphony    # see deploy/polyphony.service"
);
help!(
    DEMO,
    "  polyphony demo                      # offline: test image, fake agents\n  polyphony demo --real-claude        # the real Claude Code CLI, scripted model API\n  polyphony demo --real-codex         # the real Codex CLI, scripted Responses API",
    "every demo task ended as promised"
);
help!(
    LOGS,
    "  polyphony logs local-3 --follow\n  polyphony logs local-3 --attempt 1 --json | jq .summary"
);
help!(
    DOCTOR,
    "  polyphony doctor\n  polyphony doctor --json | jq '.checks[] | select(.level != \"ok\")'",
    "no check failed"
);
help!(
    CLEANUP,
    "  polyphony cleanup --dry-run\n  polyphony cleanup --all --json"
);
help!(
    BACKUP,
    "  polyphony backup ~/queue-$(date +%F).db\n  polyphony backup /backups/queue.db --force"
);
help!(
    COMPLETIONS,
    "  polyphony completions bash > ~/.local/share/bash-completion/completions/polyphony\n  polyphony completions zsh > \"${fpath[1]}/_polyphony\"\n  polyphony completions fish > ~/.config/fish/completions/polyphony.fish"
);
help!(
    MAN,
    "  polyphony man | man -l -\n  polyphony man > /usr/local/share/man/man1/polyphony.1"
);

help!(
    TOP,
    "  polyphony init && polyphony doctor  # a new home, then what is missing\n  polyphony enqueue --repo ~/src/app \"Fix the flaky login test\"\n  polyphony daemon --listen 127.0.0.1:8787\n  polyphony status\n  polyphony <VERB> --help             # each verb's own examples"
);
