//! `polyphony doctor`: is this machine and home ready to run agents? One [`Check`] per
//! fact (engine, images, git, config, credential paths, API-key variables, GitHub token,
//! daemon, disk), each with a fix when it fails (issue 7 item 5).
//!
//! The check builders and [`render`] are pure and table-tested; [`run`] is the thin IO
//! shell that gathers the facts (Docker, `git --version`, the filesystem, the environment,
//! one GitHub call per token and repository).
//!
//! Architecture Invariant: secret values never appear in a check: tokens and API keys are
//! named by their variable, never shown, not even in part.
//! Must not: create anything in the home (the queue is opened only when it exists), or stop
//! at the first problem (every check runs so one run lists everything to fix).
//!
//! Layout: this file holds the [`Check`] value and its rendering; `checks.rs` the pure
//! builders, one per fact; `gather.rs` the IO that collects the facts and calls them.

use serde::Serialize;

mod checks;
mod gather;

pub use checks::*;
pub use gather::run;

/// Free space under which a disk check fails: one clone plus its build does not fit.
pub const DISK_FAIL_BYTES: u64 = 1024 * 1024 * 1024;
/// Free space under which a disk check warns.
pub const DISK_WARN_BYTES: u64 = 5 * 1024 * 1024 * 1024;

/// How a check came out. Only `Fail` makes `doctor` exit 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Pass,
    Warn,
    Fail,
}

impl Level {
    pub fn mark(self) -> &'static str {
        match self {
            Level::Pass => "✓",
            Level::Warn => "!",
            Level::Fail => "✗",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked: `docker`, `image polyphony-worker:latest`, `git`, …
    pub name: String,
    pub level: Level,
    /// What was found.
    pub detail: String,
    /// What to do about it (always set for a warning or failure).
    pub fix: Option<String>,
}

impl Check {
    pub fn pass(name: impl Into<String>, detail: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            level: Level::Pass,
            detail: detail.into(),
            fix: None,
        }
    }

    pub fn warn(
        name: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check {
            name: name.into(),
            level: Level::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    pub fn fail(
        name: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check {
            name: name.into(),
            level: Level::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// `✓ name: detail` per check, `    fix: …` under each warning or failure, then a summary.
pub fn render(checks: &[Check]) -> String {
    let mut out = String::new();
    for c in checks {
        out.push_str(&format!("{} {}: {}\n", c.level.mark(), c.name, c.detail));
        if let Some(fix) = &c.fix {
            out.push_str(&format!("    fix: {fix}\n"));
        }
    }
    let count = |l: Level| checks.iter().filter(|c| c.level == l).count();
    let (fail, warn) = (count(Level::Fail), count(Level::Warn));
    if fail == 0 {
        out.push_str(&format!(
            "ready: {} checks passed, {warn} warning(s)\n",
            count(Level::Pass)
        ));
    } else {
        out.push_str(&format!(
            "not ready: {fail} check(s) failed, {warn} warning(s)\n"
        ));
    }
    out
}

/// True when no check failed (warnings do not count).
pub fn passed(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.level != Level::Fail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::AgentType;
    use crate::runtime::EngineVersion;
    use std::path::Path;

    #[test]
    fn proxy_images_of_other_binaries_warn_from_three_with_the_cleanup_fix() {
        use crate::runtime::proxy_image::ImageFact;
        let image = |id: &str, tag: &str| ImageFact {
            id: id.into(),
            tags: vec![tag.into()],
            bytes: 35 * 1024 * 1024,
        };
        let mut images = vec![
            image("a", "polyphony-egress:cur"),
            image("b", "polyphony-egress:b"),
        ];
        let c = proxy_images_check(&images, Some("polyphony-egress:cur"));
        assert_eq!(c.level, Level::Pass, "{c:?}");
        assert_eq!(
            c.detail,
            "1 image(s) of other polyphony binaries (this binary's is built)"
        );
        images.push(image("c", "polyphony-egress:c"));
        images.push(image("d", "polyphony-egress:d"));
        let c = proxy_images_check(&images, Some("polyphony-egress:cur"));
        assert_eq!(c.level, Level::Warn, "{c:?}");
        assert!(
            c.detail
                .starts_with("3 image(s) of other polyphony binaries take 105.0 MiB"),
            "{}",
            c.detail
        );
        assert!(c.fix.unwrap().contains("polyphony cleanup --images"));
        let c = proxy_images_check(&[], Some("polyphony-egress:cur"));
        assert_eq!(c.level, Level::Pass);
        assert!(
            c.detail.contains("at its first `allowlist` attempt"),
            "{}",
            c.detail
        );
    }

    #[test]
    fn quota_checks() {
        use chrono::TimeZone;
        let now = chrono::Utc
            .with_ymd_and_hms(2026, 11, 30, 13, 0, 0)
            .unwrap();
        let mut q = crate::domain::AgentQuota {
            identity: "personal".into(),
            agent: "claude".into(),
            resets_at: now + chrono::Duration::minutes(65),
            reported: true,
            message: "usage limit: Claude AI usage limit reached|1796054700".into(),
            task_id: Some("local-1".into()),
            attempt: Some(1),
            hit_at: now,
        };
        let c = quota_check(&q, now);
        assert_eq!(
            (c.name.as_str(), c.level),
            ("quota claude@personal", Level::Warn)
        );
        assert_eq!(
            c.detail,
            "out until 14:05 UTC (in 1 h 5 min; the CLI's reset time): usage limit: Claude AI usage limit reached (resets 16:05 UTC, in 3 h 5 min)"
        );
        q.reported = false;
        assert!(quota_check(&q, now)
            .detail
            .contains("quota_default_cooldown"));
        q.resets_at = now;
        let c = quota_check(&q, now);
        assert_eq!(c.level, Level::Pass);
        assert_eq!(c.detail, "available (last limit ended 13:00 UTC (now))");
    }

    #[test]
    fn cli_versions() {
        let ok = |out: &str| Ok((Some(0), out.to_string()));
        let c = cli_version_check(
            "r:1",
            AgentType::Claude,
            "claude",
            ok("2.1.332 (Claude Code)\n"),
        );
        assert_eq!(c.level, Level::Pass, "{c:?}");
        assert!(c.detail.starts_with("2.1.332"), "{c:?}");
        let c = cli_version_check(
            "r:1",
            AgentType::Claude,
            "claude",
            ok("2.3.0 (Claude Code)"),
        );
        assert_eq!(c.level, Level::Warn, "{c:?}");
        assert!(c.detail.contains("outside the tested range"), "{c:?}");
        let c = cli_version_check(
            "r:1",
            AgentType::Claude,
            "claude",
            ok("1.0.3 (Claude Code)"),
        );
        assert_eq!(c.level, Level::Warn, "{c:?}");
        // Codex 0.147.0 runs for real in images/real (its descriptor's tested range).
        let c = cli_version_check("r:1", AgentType::Codex, "codex", ok("codex-cli 0.147.0"));
        assert_eq!(c.level, Level::Pass, "{c:?}");
        assert!(c.detail.contains("tested range"), "{c:?}");
        let c = cli_version_check("r:1", AgentType::Codex, "codex", ok("codex-cli 0.98.0"));
        assert_eq!(c.level, Level::Warn, "{c:?}");
        let c = cli_version_check("r:1", AgentType::Kimi, "kimi", ok("kimi, version 0.40.0"));
        assert_eq!(c.level, Level::Pass, "{c:?}");
        assert!(c.detail.contains("never run for real"), "{c:?}");
        let c = cli_version_check(
            "r:1",
            AgentType::Kimi,
            "kimi",
            ok("kimi, version 1.52.0\nkimi-cli is no longer maintained. Please use the new Kimi Code CLI."),
        );
        assert_eq!(c.level, Level::Warn, "{c:?}");
        let c = cli_version_check(
            "r:1",
            AgentType::Codex,
            "codex",
            Ok((Some(127), "exec: codex: not found".into())),
        );
        assert_eq!(c.level, Level::Warn, "{c:?}");
        assert!(
            c.fix.as_deref().is_some_and(|f| f.contains("codex")),
            "{c:?}"
        );
        let c = cli_version_check(
            "r:1",
            AgentType::Gemini,
            "gemini",
            Err("engine gone".into()),
        );
        assert_eq!(c.level, Level::Warn, "{c:?}");
    }

    fn check(c: Check, level: Level, detail_has: &str, fix_has: Option<&str>) {
        assert_eq!(c.level, level, "{c:?}");
        assert!(
            c.detail.contains(detail_has),
            "detail {:?} lacks {detail_has:?}",
            c.detail
        );
        match fix_has {
            Some(f) => assert!(
                c.fix.as_deref().is_some_and(|x| x.contains(f)),
                "fix of {c:?} lacks {f:?}"
            ),
            None => assert_eq!(c.fix, None),
        }
    }

    #[test]
    fn docker() {
        let v = EngineVersion {
            version: "20.10.24".into(),
            api_version: "1.41".into(),
            negotiated_api: "1.41".into(),
        };
        check(
            docker_check(Ok(&v)),
            Level::Pass,
            "engine 20.10.24 (API 1.41",
            None,
        );
        check(
            docker_check(Err("no socket")),
            Level::Fail,
            "no socket",
            Some("DOCKER_HOST"),
        );
    }

    #[test]
    fn images() {
        check(
            image_check("w:1", "agent claude", Ok(true)),
            Level::Pass,
            "agent claude",
            None,
        );
        check(
            image_check("w:1", "agent claude", Ok(false)),
            Level::Fail,
            "missing",
            Some("docker build -t w:1 images/worker"),
        );
        check(
            image_check("polyphony-test:latest", "x", Ok(false)),
            Level::Fail,
            "missing",
            Some("polyphony demo"),
        );
        check(
            image_check("w:1", "x", Err("down")),
            Level::Fail,
            "down",
            Some("docker check"),
        );
    }

    #[test]
    fn networks() {
        let used = NetworkUse {
            network: "lab".into(),
            named_by: "agents.yaml: agent `claude` (egress open), field `network`".into(),
            instead: "remove `network: network:lab`".into(),
        };
        check(
            network_check(&used, Ok(true)),
            Level::Pass,
            "agent `claude`",
            None,
        );
        let missing = network_check(&used, Ok(false));
        check(
            missing.clone(),
            Level::Fail,
            "agents.yaml: agent `claude` (egress open), field `network`: Docker network `lab` \
             does not exist",
            Some("`docker network create lab`, or remove `network: network:lab`"),
        );
        assert_eq!(missing.name, "network lab");
        check(
            network_check(&used, Err("down")),
            Level::Fail,
            "down",
            Some("docker check"),
        );
    }

    #[test]
    fn git_and_daemon() {
        check(
            git_check(Ok("git version 2.47.2\n")),
            Level::Pass,
            "git version 2.47.2",
            None,
        );
        check(
            git_check(Err("not found")),
            Level::Fail,
            "not found",
            Some("install git"),
        );
        check(
            daemon_check(true, Some("42")),
            Level::Pass,
            "running (pid 42)",
            None,
        );
        check(
            daemon_check(false, None),
            Level::Warn,
            "not running",
            Some("polyphony daemon"),
        );
    }

    #[test]
    fn disk_thresholds() {
        let p = Path::new("/h");
        check(
            disk_check("home", p, Ok(DISK_WARN_BYTES)),
            Level::Pass,
            "5.0 GiB free at /h",
            None,
        );
        check(
            disk_check("home", p, Ok(DISK_WARN_BYTES - 1)),
            Level::Warn,
            "free",
            Some("cleanup"),
        );
        check(
            disk_check("home", p, Ok(10)),
            Level::Fail,
            "10 B free",
            Some("cleanup"),
        );
        check(
            disk_check("home", p, Err("EACCES")),
            Level::Warn,
            "EACCES",
            Some("readable"),
        );
    }

    #[test]
    fn staged_files_are_named_and_none_is_a_warning() {
        let files = |present: bool| {
            vec![
                ("/h/.claude/.credentials.json".to_string(), present),
                ("/h/.claude.json".to_string(), false),
            ]
        };
        let ok = staged_files_check("me", "claude", &files(true));
        assert_eq!(ok.level, Level::Pass);
        assert_eq!(ok.detail, "/h/.claude/.credentials.json");
        let none = staged_files_check("me", "claude", &files(false));
        assert_eq!(none.level, Level::Warn);
        assert!(none
            .detail
            .contains("none of /h/.claude/.credentials.json, /h/.claude.json"));
        assert!(none.fix.unwrap().contains("whole_directory"));
    }

    #[test]
    fn credentials_never_show_values() {
        check(
            volume_check("personal", "claude", Path::new("/c"), true),
            Level::Pass,
            "/c",
            None,
        );
        check(
            volume_check("personal", "codex", Path::new("/x"), false),
            Level::Fail,
            "/x does not exist",
            Some("identities.yaml"),
        );
        check(
            api_key_check("work", "OPENAI_API_KEY", "WORK_KEY", true),
            Level::Pass,
            "$WORK_KEY (set)",
            None,
        );
        check(
            api_key_check("work", "OPENAI_API_KEY", "WORK_KEY", false),
            Level::Fail,
            "$WORK_KEY is not set",
            Some("export WORK_KEY"),
        );
    }

    #[test]
    fn token_checks() {
        check(
            token_presence_check("identity a", Ok("GH_TOKEN"), true),
            Level::Pass,
            "$GH_TOKEN is set",
            None,
        );
        check(
            token_presence_check("identity a", Ok("GH_TOKEN"), false),
            Level::Pass,
            "not validated",
            None,
        );
        check(
            token_presence_check("identity a", Err("no GitHub token found"), true),
            Level::Fail,
            "no GitHub token",
            Some("GITHUB_TOKEN"),
        );
        check(
            token_presence_check("identity a", Err("no GitHub token found"), false),
            Level::Warn,
            "no GitHub token",
            Some("only needed"),
        );
        check(
            token_api_check("GITHUB_TOKEN", "o/r", "http://x", Ok(())),
            Level::Pass,
            "valid",
            None,
        );
        check(
            token_api_check("GITHUB_TOKEN", "o/r", "http://x", Err("401")),
            Level::Fail,
            "401",
            Some("GITHUB_TOKEN"),
        );
    }

    #[test]
    fn render_and_verdict() {
        let ok = vec![
            Check::pass("git", "git version 2"),
            Check::warn("daemon", "not running", "start it"),
        ];
        assert_eq!(
            render(&ok),
            "✓ git: git version 2\n! daemon: not running\n    fix: start it\nready: 1 checks passed, 1 warning(s)\n"
        );
        assert!(passed(&ok));
        let bad = vec![Check::fail("docker", "down", "start it")];
        assert!(render(&bad).ends_with("not ready: 1 check(s) failed, 0 warning(s)\n"));
        assert!(!passed(&bad));
    }
}
