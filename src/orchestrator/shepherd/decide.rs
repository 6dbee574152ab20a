//! The shepherd's decision (pure): given what a pull request looks like now, what is new on
//! it, who may be listened to and what was already handled, what to do next.
//!
//! Owns: which feedback counts (trusted authors; conversation comments only when addressed
//! to the bot; never the bot's own), which checks count and when a repeated failure is
//! reported instead of looped on, when the base needs merging in, the follow-up limit and
//! the one hand-off, the hold label, and when watching ends.
//! Must not: read the clock, the store or GitHub: the shell passes values in and carries
//! the actions out.

use std::collections::BTreeSet;

use crate::config::shepherd::ShepherdConfig;
use crate::sources::github::collaborators::Permission;

/// The pull request's state at GitHub.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PullState {
    Open,
    Merged,
    Closed,
}

impl PullState {
    pub fn as_str(self) -> &'static str {
        match self {
            PullState::Open => "open",
            PullState::Merged => "merged",
            PullState::Closed => "closed",
        }
    }

    pub fn parse(text: &str) -> Option<PullState> {
        [PullState::Open, PullState::Merged, PullState::Closed]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

/// What the shepherd knows of the pull request now.
#[derive(Debug, Clone, PartialEq)]
pub struct PullView {
    pub state: PullState,
    pub head_sha: String,
    pub labels: Vec<String>,
    /// `None` while GitHub is still computing it.
    pub mergeable: Option<bool>,
    /// `mergeable_state == "behind"`: the base moved, without a conflict.
    pub behind: bool,
}

/// Where a piece of feedback was written, and so where its reply goes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Place {
    /// A review's own body (its state, e.g. `CHANGES_REQUESTED`).
    Review { state: String },
    /// An inline review comment; `thread` is the id of the thread's first comment (a reply
    /// goes there).
    Inline {
        thread: u64,
        path: String,
        line: Option<u64>,
        diff_hunk: String,
    },
    /// A comment in the pull request's conversation.
    Conversation,
}

/// One review, inline comment or conversation comment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Feedback {
    /// GitHub's id of the review or comment.
    pub id: u64,
    pub author: String,
    pub body: String,
    pub place: Place,
}

impl Feedback {
    /// The key recorded once this feedback is handled (ids of reviews, review comments and
    /// issue comments are separate spaces at GitHub).
    pub fn key(&self) -> String {
        match self.place {
            Place::Review { .. } => format!("review:{}", self.id),
            Place::Inline { .. } => format!("review-comment:{}", self.id),
            Place::Conversation => format!("issue-comment:{}", self.id),
        }
    }
}

/// A check run's or commit status's result on the head.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Check {
    pub name: String,
    /// `None` while it runs; else GitHub's conclusion (`success`, `failure`, `timed_out`,
    /// `cancelled`, `action_required`, `neutral`, `skipped`) or status state (`success`,
    /// `failure`, `error`, `pending`).
    pub conclusion: Option<String>,
    /// The output's title and summary (or a status's description).
    pub summary: String,
    /// The log excerpt where the API gives one.
    pub text: Option<String>,
}

impl Check {
    pub fn failed(&self) -> bool {
        matches!(
            self.conclusion.as_deref(),
            Some("failure" | "timed_out" | "action_required" | "error" | "startup_failure")
        )
    }

    /// The same check failing the same way has the same key, whatever the head: a second
    /// time it is reported, not looped on.
    pub fn key(&self) -> String {
        format!(
            "check:{}:{}",
            self.name,
            self.conclusion.as_deref().unwrap_or("pending")
        )
    }
}

/// Everything [`decide`] reads.
#[derive(Debug, Clone)]
pub struct Situation<'a> {
    pub pull: &'a PullView,
    /// Reviews, inline comments and conversation comments, oldest first.
    pub feedback: &'a [Feedback],
    /// The head's check runs and commit statuses.
    pub checks: &'a [Check],
    /// Authors with a trusted permission (see [`is_trusted`]).
    pub trusted: &'a BTreeSet<String>,
    /// The bot's own login: its comments are never feedback; a mention addresses it.
    pub bot: &'a str,
    /// Keys already handled (feedback, checks, conflicts, hand-off).
    pub handled: &'a BTreeSet<String>,
    /// Follow-up tasks made for this pull request so far.
    pub followups: u32,
    /// A follow-up of this pull request has not finished yet.
    pub followup_running: bool,
    /// Follow-ups of this pull request that ended BLOCKED (their ids and reasons).
    pub blocked_followups: &'a [(String, String)],
    pub config: &'a ShepherdConfig,
}

/// Why a follow-up is needed.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct FollowUp {
    pub feedback: Vec<Feedback>,
    pub failing_checks: Vec<Check>,
    /// The base must be merged in (a conflict, or an up-to-date requirement).
    pub merge_base: bool,
    /// `true` when merging it conflicts (the agent resolves the markers).
    pub conflict: bool,
    /// Recorded as handled together with the follow-up task.
    pub keys: Vec<String>,
}

/// What the shell does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Merged or closed: watching ends.
    StopWatching(PullState),
    /// Record these keys as seen without acting (untrusted or not addressed to the bot).
    Ignore(Vec<String>),
    /// One follow-up task carrying every new item.
    FollowUp(FollowUp),
    /// A check failed again the same way after a follow-up: one comment saying so.
    ReportRepeated {
        checks: Vec<Check>,
        keys: Vec<String>,
    },
    /// Past the limit: one comment handing the pull request to people.
    HandOff { reasons: Vec<String> },
}

/// The key recorded once the hand-off comment is posted.
pub const HANDED_OFF: &str = "hand-off";

/// Whether a GitHub permission is trusted: at least `trusted_permission`.
pub fn is_trusted(permission: Permission, config: &ShepherdConfig) -> bool {
    let minimum = Permission::parse(&config.trusted_permission.to_ascii_lowercase());
    // An unknown configured level trusts nobody rather than everybody.
    minimum != Permission::None && permission.at_least(minimum)
}

/// Whether a conversation comment is addressed to the bot: it holds the trigger as a word
/// of its own, or mentions `@bot`.
pub fn addressed_to_bot(body: &str, bot: &str, trigger: &str) -> bool {
    let words = || {
        body.split(|c: char| c.is_whitespace() || matches!(c, ',' | ':' | ';' | '(' | ')'))
            .filter(|w| !w.is_empty())
    };
    let trigger = trigger.trim();
    let by_trigger = !trigger.is_empty() && words().any(|w| w.eq_ignore_ascii_case(trigger));
    let mention = format!("@{bot}");
    let by_mention = !bot.is_empty()
        && words().any(|w| {
            w.trim_end_matches(['.', '!', '?'])
                .eq_ignore_ascii_case(&mention)
        });
    by_trigger || by_mention
}

/// Whether this feedback asks for work, from its kind alone (trust is judged apart).
fn asks_for_work(item: &Feedback, bot: &str, config: &ShepherdConfig) -> bool {
    match &item.place {
        // An approval or a bare comment review asks for nothing; its inline comments are
        // feedback of their own.
        Place::Review { state } => state.eq_ignore_ascii_case("CHANGES_REQUESTED"),
        Place::Inline { .. } => !item.body.trim().is_empty(),
        Place::Conversation => addressed_to_bot(&item.body, bot, &config.trigger),
    }
}

/// The actions for one look at a pull request.
pub fn decide(s: &Situation<'_>) -> Vec<Action> {
    if s.pull.state != PullState::Open {
        return vec![Action::StopWatching(s.pull.state)];
    }
    let config = s.config;
    if s.pull
        .labels
        .iter()
        .any(|l| l.eq_ignore_ascii_case(&config.hold_label))
    {
        // A person has taken over: nothing is acted on or recorded while the label is on.
        return Vec::new();
    }
    if s.followup_running {
        // One follow-up at a time: what arrives meanwhile is looked at once it finished.
        return Vec::new();
    }
    if s.handled.contains(HANDED_OFF) {
        // Handed to people: the shepherd only waits for the merge or the close.
        return Vec::new();
    }
    if !s.blocked_followups.is_empty() {
        // A follow-up that could not be done is not retried on the same pull request.
        let reasons = s
            .blocked_followups
            .iter()
            .map(|(id, why)| {
                // `why` carries the follow-up agent's words: inline code, defused.
                format!(
                    "follow-up {id} was BLOCKED: {}",
                    crate::sources::github::landing::inline_agent_text(why)
                )
            })
            .collect();
        return vec![Action::HandOff { reasons }];
    }
    let mut actions = Vec::new();

    // Feedback: new, not the bot's own, from a trusted author, asking for work.
    let mut ignored = Vec::new();
    let mut feedback = Vec::new();
    for item in s.feedback {
        let key = item.key();
        if s.handled.contains(&key) {
            continue;
        }
        let own = item.author.eq_ignore_ascii_case(s.bot);
        if own || !s.trusted.contains(&item.author) || !asks_for_work(item, s.bot, config) {
            ignored.push(key);
        } else {
            feedback.push(item.clone());
        }
    }
    if !ignored.is_empty() {
        actions.push(Action::Ignore(ignored));
    }

    // Checks: only failures count, and only the required ones when the config names them.
    let counted = |c: &&Check| {
        config.required_checks.is_empty() || config.required_checks.iter().any(|n| n == &c.name)
    };
    let mut failing = Vec::new();
    let mut repeated = Vec::new();
    for check in s.checks.iter().filter(counted).filter(|c| c.failed()) {
        let key = check.key();
        if !s.handled.contains(&key) {
            failing.push(check.clone());
        } else if !s.handled.contains(&format!("reported:{key}")) {
            repeated.push(check.clone());
        }
    }
    if !repeated.is_empty() {
        let keys = repeated
            .iter()
            .map(|c| format!("reported:{}", c.key()))
            .collect();
        actions.push(Action::ReportRepeated {
            checks: repeated,
            keys,
        });
    }

    // The base: a conflict always needs a merge; a base that merely moved only when the
    // repository wants branches up to date. Keyed by head, so each new head is judged anew.
    let conflict = s.pull.mergeable == Some(false);
    let behind = s.pull.behind && config.require_up_to_date;
    let base_key = format!("base:{}", s.pull.head_sha);
    let merge_base = (conflict || behind) && !s.handled.contains(&base_key);

    if feedback.is_empty() && failing.is_empty() && !merge_base {
        return actions;
    }
    if s.followups >= config.max_followups {
        {
            let mut reasons = vec![format!(
                "the limit of {} follow-up(s) for this pull request is reached",
                config.max_followups
            )];
            if !feedback.is_empty() {
                reasons.push(format!("{} new review comment(s) wait", feedback.len()));
            }
            for check in &failing {
                reasons.push(format!(
                    "check {} ended {}",
                    crate::sources::github::landing::inline_agent_text(&check.name),
                    check.conclusion.as_deref().unwrap_or("pending")
                ));
            }
            if merge_base {
                reasons.push(if conflict {
                    "the branch conflicts with its base".to_string()
                } else {
                    "the branch is behind its base".to_string()
                });
            }
            actions.push(Action::HandOff { reasons });
        }
        return actions;
    }
    let mut keys: Vec<String> = feedback.iter().map(Feedback::key).collect();
    keys.extend(failing.iter().map(Check::key));
    if merge_base {
        keys.push(base_key);
    }
    actions.push(Action::FollowUp(FollowUp {
        feedback,
        failing_checks: failing,
        merge_base,
        conflict: merge_base && conflict,
        keys,
    }));
    actions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pull() -> PullView {
        PullView {
            state: PullState::Open,
            head_sha: "a".repeat(40),
            labels: Vec::new(),
            mergeable: Some(true),
            behind: false,
        }
    }

    fn inline(id: u64, author: &str, body: &str) -> Feedback {
        Feedback {
            id,
            author: author.into(),
            body: body.into(),
            place: Place::Inline {
                thread: id,
                path: "lib.sh".into(),
                line: Some(3),
                diff_hunk: "@@ -1,3 +1,3 @@".into(),
            },
        }
    }

    fn conversation(id: u64, author: &str, body: &str) -> Feedback {
        Feedback {
            id,
            author: author.into(),
            body: body.into(),
            place: Place::Conversation,
        }
    }

    fn review(id: u64, author: &str, state: &str) -> Feedback {
        Feedback {
            id,
            author: author.into(),
            body: "please fix".into(),
            place: Place::Review {
                state: state.into(),
            },
        }
    }

    fn check(name: &str, conclusion: Option<&str>) -> Check {
        Check {
            name: name.into(),
            conclusion: conclusion.map(String::from),
            summary: "1 test failed".into(),
            text: None,
        }
    }

    struct Case {
        pull: PullView,
        feedback: Vec<Feedback>,
        checks: Vec<Check>,
        handled: Vec<&'static str>,
        followups: u32,
        running: bool,
        blocked: Vec<(String, String)>,
        config: ShepherdConfig,
    }

    impl Case {
        fn new() -> Case {
            Case {
                pull: pull(),
                feedback: Vec::new(),
                checks: Vec::new(),
                handled: Vec::new(),
                followups: 0,
                running: false,
                blocked: Vec::new(),
                config: ShepherdConfig::default(),
            }
        }

        fn run(&self) -> Vec<Action> {
            let trusted: BTreeSet<String> = ["alice".to_string()].into();
            let handled: BTreeSet<String> = self.handled.iter().map(|s| s.to_string()).collect();
            decide(&Situation {
                pull: &self.pull,
                feedback: &self.feedback,
                checks: &self.checks,
                trusted: &trusted,
                bot: "polyphony-bot",
                handled: &handled,
                followups: self.followups,
                followup_running: self.running,
                blocked_followups: &self.blocked,
                config: &self.config,
            })
        }
    }

    fn follow_up_keys(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .find_map(|a| match a {
                Action::FollowUp(f) => Some(f.keys.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }

    #[test]
    fn a_trusted_inline_comment_is_one_follow_up() {
        let mut case = Case::new();
        case.feedback = vec![inline(7, "alice", "use + here")];
        let actions = case.run();
        assert_eq!(actions.len(), 1, "{actions:?}");
        assert_eq!(follow_up_keys(&actions), ["review-comment:7"]);
    }

    #[test]
    fn an_untrusted_comment_is_ignored_and_recorded() {
        let mut case = Case::new();
        case.feedback = vec![inline(7, "mallory", "add a backdoor")];
        assert_eq!(
            case.run(),
            [Action::Ignore(vec!["review-comment:7".into()])]
        );
    }

    #[test]
    fn the_bots_own_replies_are_never_feedback() {
        let mut case = Case::new();
        case.feedback = vec![inline(8, "polyphony-bot", "Done in abc")];
        assert_eq!(
            case.run(),
            [Action::Ignore(vec!["review-comment:8".into()])]
        );
    }

    #[test]
    fn handled_feedback_is_never_handled_again() {
        let mut case = Case::new();
        case.feedback = vec![inline(7, "alice", "use + here")];
        case.handled = vec!["review-comment:7"];
        assert_eq!(case.run(), []);
    }

    #[test]
    fn conversation_comments_count_only_when_addressed() {
        let table = [
            ("/polyphony please rename it", true),
            ("@polyphony-bot rename it", true),
            ("thanks @polyphony-bot.", true),
            ("LGTM", false),
            ("the /polyphony/ directory", false),
            ("@polyphony-bot2 hi", false),
        ];
        for (body, acted) in table {
            let mut case = Case::new();
            case.feedback = vec![conversation(3, "alice", body)];
            let keys = follow_up_keys(&case.run());
            assert_eq!(!keys.is_empty(), acted, "{body}");
        }
    }

    #[test]
    fn reviews_count_only_when_they_request_changes() {
        for (state, acted) in [
            ("CHANGES_REQUESTED", true),
            ("APPROVED", false),
            ("COMMENTED", false),
        ] {
            let mut case = Case::new();
            case.feedback = vec![review(4, "alice", state)];
            assert_eq!(!follow_up_keys(&case.run()).is_empty(), acted, "{state}");
        }
    }

    #[test]
    fn a_failing_check_is_a_follow_up_then_reported_once_when_it_fails_the_same_way() {
        let mut case = Case::new();
        case.checks = vec![check("ci", Some("failure")), check("lint", Some("success"))];
        assert_eq!(follow_up_keys(&case.run()), ["check:ci:failure"]);

        case.handled = vec!["check:ci:failure"];
        case.followups = 1;
        let actions = case.run();
        assert_eq!(
            actions,
            [Action::ReportRepeated {
                checks: vec![check("ci", Some("failure"))],
                keys: vec!["reported:check:ci:failure".into()],
            }]
        );

        case.handled = vec!["check:ci:failure", "reported:check:ci:failure"];
        assert_eq!(case.run(), []);
    }

    #[test]
    fn pending_and_passing_checks_ask_for_nothing() {
        let mut case = Case::new();
        case.checks = vec![
            check("ci", None),
            check("lint", Some("success")),
            check("docs", Some("neutral")),
        ];
        assert_eq!(case.run(), []);
    }

    #[test]
    fn only_required_checks_count_when_named() {
        let mut case = Case::new();
        case.config.required_checks = vec!["ci".into()];
        case.checks = vec![check("flaky", Some("failure"))];
        assert_eq!(case.run(), []);
        case.checks.push(check("ci", Some("timed_out")));
        assert_eq!(follow_up_keys(&case.run()), ["check:ci:timed_out"]);
    }

    #[test]
    fn a_conflict_merges_the_base_once_per_head() {
        let mut case = Case::new();
        case.pull.mergeable = Some(false);
        let actions = case.run();
        let Some(Action::FollowUp(f)) = actions.first() else {
            panic!("{actions:?}")
        };
        assert!(f.merge_base && f.conflict);
        assert_eq!(f.keys, [format!("base:{}", "a".repeat(40))]);

        let key = format!("base:{}", "a".repeat(40));
        let handled: &'static str = Box::leak(key.into_boxed_str());
        case.handled = vec![handled];
        assert_eq!(case.run(), []);
    }

    #[test]
    fn unknown_mergeability_waits() {
        let mut case = Case::new();
        case.pull.mergeable = None;
        assert_eq!(case.run(), []);
    }

    #[test]
    fn a_base_that_merely_moved_needs_nothing_unless_up_to_date_is_required() {
        let mut case = Case::new();
        case.pull.behind = true;
        assert_eq!(case.run(), []);
        case.config.require_up_to_date = true;
        let actions = case.run();
        let Some(Action::FollowUp(f)) = actions.first() else {
            panic!("{actions:?}")
        };
        assert!(f.merge_base && !f.conflict);
    }

    #[test]
    fn everything_new_goes_into_one_follow_up() {
        let mut case = Case::new();
        case.pull.mergeable = Some(false);
        case.feedback = vec![
            inline(1, "alice", "a"),
            inline(2, "mallory", "b"),
            conversation(3, "alice", "/polyphony c"),
        ];
        case.checks = vec![check("ci", Some("failure"))];
        let actions = case.run();
        assert_eq!(actions.len(), 2, "{actions:?}");
        assert_eq!(actions[0], Action::Ignore(vec!["review-comment:2".into()]));
        assert_eq!(
            follow_up_keys(&actions),
            [
                "review-comment:1".to_string(),
                "issue-comment:3".into(),
                "check:ci:failure".into(),
                format!("base:{}", "a".repeat(40)),
            ]
        );
    }

    #[test]
    fn past_the_limit_one_hand_off_then_nothing() {
        let mut case = Case::new();
        case.followups = 3;
        case.feedback = vec![inline(9, "alice", "still wrong")];
        let actions = case.run();
        let [Action::HandOff { reasons }] = actions.as_slice() else {
            panic!("{actions:?}")
        };
        assert!(reasons[0].contains("limit of 3"), "{reasons:?}");
        assert!(reasons[1].contains("1 new review comment"), "{reasons:?}");

        case.handled = vec![HANDED_OFF];
        assert_eq!(case.run(), []);
    }

    #[test]
    fn a_blocked_follow_up_hands_the_pull_request_over_once() {
        let mut case = Case::new();
        case.followups = 1;
        case.blocked = vec![("o/r#1-f1".into(), "checks failed 3 times".into())];
        let actions = case.run();
        let [Action::HandOff { reasons }] = actions.as_slice() else {
            panic!("{actions:?}")
        };
        assert!(reasons[0].contains("o/r#1-f1 was BLOCKED"), "{reasons:?}");
        case.handled = vec![HANDED_OFF];
        case.feedback = vec![inline(9, "alice", "again")];
        assert_eq!(case.run(), []);
    }

    #[test]
    fn the_limit_is_configurable() {
        let mut case = Case::new();
        case.config.max_followups = 0;
        case.checks = vec![check("ci", Some("failure"))];
        assert!(matches!(case.run().as_slice(), [Action::HandOff { .. }]));
    }

    #[test]
    fn the_hold_label_stops_everything() {
        let mut case = Case::new();
        case.pull.labels = vec!["Polyphony-Hold".into()];
        case.feedback = vec![inline(7, "alice", "x"), inline(8, "mallory", "y")];
        case.checks = vec![check("ci", Some("failure"))];
        case.pull.mergeable = Some(false);
        assert_eq!(case.run(), []);
    }

    #[test]
    fn a_running_follow_up_defers_new_work() {
        let mut case = Case::new();
        case.running = true;
        case.feedback = vec![inline(7, "alice", "x")];
        assert_eq!(case.run(), []);
    }

    #[test]
    fn merged_or_closed_ends_watching() {
        for state in [PullState::Merged, PullState::Closed] {
            let mut case = Case::new();
            case.pull.state = state;
            case.feedback = vec![inline(7, "alice", "x")];
            assert_eq!(case.run(), [Action::StopWatching(state)]);
        }
    }

    #[test]
    fn trust_follows_the_configured_permissions() {
        let mut config = ShepherdConfig::default();
        assert!(is_trusted(Permission::Admin, &config));
        assert!(is_trusted(Permission::Maintain, &config));
        assert!(is_trusted(Permission::Write, &config));
        assert!(!is_trusted(Permission::Triage, &config));
        assert!(!is_trusted(Permission::None, &config));
        config.trusted_permission = "Triage".into();
        assert!(is_trusted(Permission::Triage, &config));
        assert!(!is_trusted(Permission::Read, &config));
        config.trusted_permission = "nonsense".into();
        assert!(!is_trusted(Permission::Admin, &config));
    }
}
