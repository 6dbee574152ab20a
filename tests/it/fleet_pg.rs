//! A fleet on PostgreSQL (issue 27 "Done means"): three `polyphony daemon` processes (the
//! BUILT binary) with separate homes, workspace roots and machine ids (`store.machine`) on
//! one PostgreSQL database (`POLYPHONY_STORE_URL`), the real Docker engine with the offline
//! test image, real git origins and the stateful fake GitHub.
//!
//! - thirty tasks (local ones, by URL and pinned by path, and GitHub issues) drained through
//!   random kill -9s of any daemon (restarted) and one daemon killed for good: every task
//!   lands exactly once, one pull request and one comment of each kind per issue, no
//!   duplicate event, no failure counted;
//! - a daily cost ceiling across the three ends within the ceiling plus one attempt;
//! - a usage limit one daemon meets stops the other two from starting that agent;
//! - a trusted review on a landed pull request, watched by all three, gets one follow-up
//!   commit and one reply while the follow-up's machine dies (mid-run, or between its
//!   reply and the record).
//!
//! Needs the test server (`POLYPHONY_TEST_PG_URL`, scripts/pg-test-cluster.sh) and Docker:
//! without either SKIPPED, and a failure when `CI` is set.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use polyphony::demo::{write_home, FIX_DIRECTIVE};
use support::docker::test_image as image;
use support::fake_github::{FakeGithub, NewIssue};
use support::home::{Daemon, Home, Origin};

/// The fake agent's reported cost of one run (images/test/fake: `COST_USD`).
const RUN_COST: f64 = 0.0421;

/// Knobs of one member's config.yaml.
#[derive(Clone, Copy)]
struct Conf<'a> {
    slots: u32,
    /// `container.max_cost_usd_per_attempt`.
    max_cost: Option<f64>,
    /// The identity's `cost_ceiling_usd_per_day`.
    ceiling: Option<f64>,
    /// A GitHub repository to poll on the fake.
    repo: Option<&'a str>,
    /// `shepherd.enabled`: watch the pull requests the fleet opened.
    shepherd: bool,
}

impl<'a> Conf<'a> {
    /// `slots` agents at a time, no cost cap or ceiling, no GitHub repository, no shepherd.
    fn slots(slots: u32) -> Conf<'a> {
        Conf {
            slots,
            max_cost: None,
            ceiling: None,
            repo: None,
            shepherd: false,
        }
    }
}

/// One daemon's home on the shared store: machine id `machine`, its own workspaces and
/// mirrors (under the home), a 10 s lease renewed every 2 s.
fn member(
    image: &str,
    machine: &str,
    url: &str,
    conf: Conf<'_>,
    github: Option<&FakeGithub>,
) -> Home {
    let (dir, path) = Home::temp();
    write_home(&path, dir.path(), image).expect("home");
    let max_cost = conf
        .max_cost
        .map(|c| format!("  max_cost_usd_per_attempt: {c}\n"))
        .unwrap_or_default();
    let repos = conf
        .repo
        .map(|r| format!("github:\n  repos: [{r}]\n"))
        .unwrap_or_default();
    let shepherd = if conf.shepherd {
        "shepherd:\n  enabled: true\n"
    } else {
        ""
    };
    std::fs::write(
        path.join("config.yaml"),
        format!(
            "poll_interval: 2s\nmax_concurrent_agents: {}\nevent_idle_timeout: 1m\nmax_attempts: 3\ndefault_identity: demo\negress:\n  mode: none\ncontainer:\n  image: {image}\n  deadline: 2m\n  memory: 512m\n  cpus: 1\n{max_cost}{repos}{shepherd}store:\n  machine: {machine}\n  lease: 10s\n  heartbeat: 2s\n",
            conf.slots
        ),
    )
    .expect("config.yaml");
    if let Some(ceiling) = conf.ceiling {
        let ids = path.join("identities.yaml");
        let text = std::fs::read_to_string(&ids).expect("identities.yaml");
        std::fs::write(
            &ids,
            text.replace(
                "  - name: demo\n",
                &format!("  - name: demo\n    cost_ceiling_usd_per_day: {ceiling}\n"),
            ),
        )
        .expect("identities.yaml");
    }
    Home::at(dir, path, github)
        .with_env("POLYPHONY_STORE_URL", url)
        .with_env("RUST_LOG", "info")
}

/// A database of its own on the test server (SKIPPED / a CI failure without one).
async fn database(test: &'static str) -> Option<crate::store_contract::Backend> {
    // The admin connection blocks: off the test's runtime.
    tokio::task::spawn_blocking(move || crate::store_contract::postgres(test))
        .await
        .expect("create the test database")
}

/// What each test here starts from: its database on the test server, the test image and
/// the database's URL (`None`: SKIPPED, or a CI failure, without the server or Docker).
async fn start(test: &'static str) -> Option<(crate::store_contract::Backend, String, String)> {
    let pg = database(test).await?;
    let image = image().await?;
    let url = pg.handle.to_string();
    Some((pg, image, url))
}

/// A fake GitHub serving `repo` (default branch `main`) from a fresh origin.
async fn github(repo: &str) -> (FakeGithub, Origin) {
    let fake = FakeGithub::start().await;
    let origin = Origin::new();
    fake.add_repo(repo, &origin.url(), "main");
    (fake, origin)
}

/// Runs `sql` on the server; every column must be text (cast in the query).
async fn rows(url: &str, sql: &str) -> Vec<Vec<Option<String>>> {
    let (url, sql) = (url.to_string(), sql.to_string());
    tokio::task::spawn_blocking(move || {
        let mut client = ::postgres::Client::connect(&url, ::postgres::NoTls).expect("connect");
        client
            .query(sql.as_str(), &[])
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
            .iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| r.get::<_, Option<String>>(i))
                    .collect()
            })
            .collect()
    })
    .await
    .expect("query thread")
}

/// `(id, state, failures, next_attempt_at)` of every task.
async fn tasks(url: &str) -> Vec<(String, String, i64, Option<String>)> {
    rows(
        url,
        "SELECT id, state, failures::text, next_attempt_at FROM tasks ORDER BY seq",
    )
    .await
    .into_iter()
    .map(|r| {
        (
            r[0].clone().unwrap_or_default(),
            r[1].clone().unwrap_or_default(),
            r[2].as_deref().unwrap_or("0").parse().unwrap_or(-1),
            r[3].clone(),
        )
    })
    .collect()
}

/// `(task, attempt, agent, status, workspace)` of every attempt.
async fn attempts(url: &str) -> Vec<(String, i64, String, Option<String>, String)> {
    rows(
        url,
        "SELECT task_id, attempt::text, agent, status, workspace FROM attempts ORDER BY task_id, attempt",
    )
    .await
    .into_iter()
    .map(|r| {
        (
            r[0].clone().unwrap_or_default(),
            r[1].as_deref().unwrap_or("0").parse().unwrap_or(-1),
            r[2].clone().unwrap_or_default(),
            r[3].clone(),
            r[4].clone().unwrap_or_default(),
        )
    })
    .collect()
}

/// One task's attempts, transitions and the members' log lines naming it, for a failure
/// message.
async fn story(url: &str, homes: &[Home], task: &str) -> String {
    let history = rows(
        url,
        &format!(
            "SELECT from_state, to_state, reason, at::text FROM transitions WHERE task_id = '{}' ORDER BY id",
            task.replace('\'', "''")
        ),
    )
    .await;
    let runs: Vec<_> = attempts(url)
        .await
        .into_iter()
        .filter(|a| a.0 == task)
        .collect();
    let lines: Vec<String> = homes
        .iter()
        .flat_map(|h| {
            let name = h.path.display().to_string();
            h.logs()
                .lines()
                .filter(|l| l.contains(task))
                .map(|l| format!("{name}: {l}"))
                .collect::<Vec<_>>()
        })
        .collect();
    format!(
        "attempts: {runs:#?}\ntransitions: {history:#?}\nlog lines naming {task}:\n{}",
        lines.join("\n")
    )
}

fn body(scenario: &str) -> String {
    format!("`add 2 3` prints -1; test.sh fails.\n\n{scenario}\n{FIX_DIRECTIVE}\n")
}

/// Every log of every member, for a failure message.
fn logs(homes: &[Home]) -> String {
    homes.iter().map(Home::logs).collect::<Vec<_>>().join("\n")
}

/// A small deterministic generator (xorshift), seeded and printed per run.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let seed = std::env::var("POLYPHONY_FLEET_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(7)
            })
            | 1;
        println!("fleet seed {seed} (POLYPHONY_FLEET_SEED={seed} replays the kill order)");
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// In `lo..hi` milliseconds.
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo))
    }
}

/// Stops every running member with SIGTERM and waits for it.
async fn stop(daemons: &mut [Option<Daemon>]) {
    for d in daemons.iter().flatten() {
        d.signal(libc::SIGTERM);
    }
    for d in daemons.iter_mut().flatten() {
        d.wait(Duration::from_secs(60)).await;
    }
}

/// Polls the fleet's tasks every 500 ms until `done` holds; past `limit` stops every
/// member and fails with `what`, the tasks and every member's log.
async fn wait_for(
    url: &str,
    homes: &[Home],
    daemons: &mut [Option<Daemon>],
    limit: Instant,
    what: &str,
    done: impl Fn(&[(String, String, i64, Option<String>)]) -> bool,
) {
    loop {
        let all = tasks(url).await;
        if done(&all) {
            return;
        }
        if Instant::now() > limit {
            stop(daemons).await;
            panic!("{what}: {all:#?}\n{}", logs(homes));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The hidden `<!-- polyphony:… -->` markers of a comment body.
fn markers(body: &str) -> Vec<String> {
    body.lines()
        .map(str::trim)
        .filter(|l| l.starts_with("<!-- polyphony:") && l.ends_with("-->"))
        .map(String::from)
        .collect()
}

/// The fleet test: 15 GitHub issues and 15 local tasks (10 by `file://` URL, which any
/// machine may run, and 5 by path, pinned to m2 or m3) drained by three daemons on one
/// PostgreSQL store while random members are killed with SIGKILL and restarted, and m1 is
/// killed for good while it holds claims (its leases expire and m2/m3 take them over).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_daemons_on_postgresql_drain_thirty_tasks_through_kill_9s_exactly_once() {
    let Some((_pg, image, url)) = start("fleet_thirty_tasks").await else {
        return;
    };
    let started = Instant::now();
    let repo = "acme/fleet";
    let (fake, gh_origin) = github(repo).await;
    // Slow runs (4 s) beside quick ones, so kills meet running agents.
    let scenario = |i: usize| {
        if i.is_multiple_of(2) {
            "polyphony-fake: slow\npolyphony-fake-sleep: 4"
        } else {
            "polyphony-fake: succeed"
        }
    };
    let issues: Vec<u64> = (0..15)
        .map(|i| {
            fake.add_issue(
                repo,
                NewIssue::new(&format!("Fix add() #{i}"))
                    .body(&body(scenario(i)))
                    .labels(&["agent-ready"]),
            )
        })
        .collect();
    let conf = Conf {
        repo: Some(repo),
        ..Conf::slots(3)
    };
    let homes: Vec<Home> = ["m1", "m2", "m3"]
        .iter()
        .map(|m| member(&image, m, &url, conf, Some(&fake)))
        .collect();
    let local = Origin::new();
    let mut local_ids = Vec::new();
    for i in 0..10 {
        let id = homes[0]
            .enqueue(
                local.url(),
                &body(scenario(i)),
                &format!("Local by URL {i}"),
            )
            .await;
        local_ids.push(id);
    }
    for i in 0..5 {
        let id = homes[1 + i % 2]
            .enqueue(
                &local.path,
                &body(scenario(i)),
                &format!("Local by path {i}"),
            )
            .await;
        local_ids.push(id);
    }
    let mut daemons: Vec<Option<Daemon>> =
        homes.iter().map(|h| Some(h.start(&["daemon"]))).collect();
    let mut restart_at: Vec<Option<Instant>> = vec![None; 3];
    let mut rng = Rng::seeded();
    let mut kills = 0u32;
    let mut kill_log = Vec::new();
    let mut dead_for_good = false;
    let mut next_kill = Instant::now() + rng.millis(4000, 7000);
    const KILLS: u32 = 6;
    let limit = Duration::from_secs(300);
    loop {
        let all = tasks(&url).await;
        if all.len() == 30 && all.iter().all(|t| t.1 == "LANDED") {
            break;
        }
        if let Some(t) = all
            .iter()
            .find(|t| matches!(t.1.as_str(), "BLOCKED" | "CANCELLED"))
        {
            stop(&mut daemons).await;
            panic!(
                "{} ended {} (kills: {kill_log:?})\n{:#?}\n{}",
                t.0,
                t.1,
                attempts(&url).await,
                logs(&homes)
            );
        }
        if started.elapsed() > limit {
            stop(&mut daemons).await;
            panic!(
                "not drained within {limit:?} (kills: {kill_log:?}): {all:#?}\n{}",
                logs(&homes)
            );
        }
        let now = Instant::now();
        for i in 0..3 {
            if restart_at[i].is_some_and(|at| now >= at) {
                restart_at[i] = None;
                daemons[i] = Some(homes[i].start(&["daemon"]));
            }
        }
        if kills < KILLS && now >= next_kill {
            // The third kill is m1's last, once it holds claims of running work.
            let victim = if kills == 2 {
                let held = rows(&url, "SELECT task_id FROM claims WHERE machine = 'm1'").await;
                (daemons[0].is_some() && !held.is_empty()).then_some(0)
            } else {
                let alive: Vec<usize> = (0..3).filter(|i| daemons[*i].is_some()).collect();
                (!alive.is_empty()).then(|| alive[(rng.next() % alive.len() as u64) as usize])
            };
            if let Some(v) = victim {
                let mut d = daemons[v].take().expect("alive");
                d.child.start_kill().expect("kill -9");
                let _ = d.child.wait().await;
                kills += 1;
                let permanent = kills == 3;
                kill_log.push(format!(
                    "{:.1}s m{}{}",
                    started.elapsed().as_secs_f64(),
                    v + 1,
                    if permanent { " (for good)" } else { "" }
                ));
                if permanent {
                    dead_for_good = true;
                } else {
                    restart_at[v] = Some(Instant::now() + rng.millis(500, 2500));
                }
                next_kill = Instant::now() + rng.millis(3000, 7000);
            }
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let drained = started.elapsed();
    stop(&mut daemons).await;
    assert!(dead_for_good, "m1 was never killed for good: {kill_log:?}");
    assert!(kills >= 3, "{kill_log:?}");

    // Every task landed once, with no failure counted (a kill or a lost machine is never
    // the agent's doing).
    let all = tasks(&url).await;
    assert_eq!(all.len(), 30, "{all:#?}");
    for t in &all {
        if (t.1.as_str(), t.2) != ("LANDED", 0) {
            panic!(
                "{t:?}: not landed with no failure (kills: {kill_log:?})\n{}",
                story(&url, &homes, &t.0).await
            );
        }
    }
    let landings = rows(&url, "SELECT task_id FROM landings").await;
    assert_eq!(landings.len(), 30);
    let strikes = rows(&url, "SELECT key FROM kv WHERE key LIKE 'strikes:%'").await;
    if let Some(key) = strikes.first().and_then(|r| r[0].clone()) {
        let task = key["strikes:".len()..]
            .rsplit_once(':')
            .map_or("", |(t, _)| t);
        panic!(
            "strikes counted: {strikes:?} (kills: {kill_log:?})\n{}",
            story(&url, &homes, task).await
        );
    }
    // One branch pushed per task: an attempt the kills cut short pushed nothing of its
    // own, or its push was found and finished, never pushed again.
    assert_eq!(local.branches().len(), 15, "{:?}", local.branches());
    assert_eq!(gh_origin.branches().len(), 15, "{:?}", gh_origin.branches());
    // One pull request per issue, and no comment of any kind twice.
    let pulls = fake.pulls(repo);
    assert_eq!(pulls.len(), 15, "{pulls:#?}");
    let mut heads: Vec<&str> = pulls.iter().map(|p| p.head.as_str()).collect();
    heads.sort();
    heads.dedup();
    assert_eq!(heads.len(), 15, "{pulls:#?}");
    for n in &issues {
        let comments = fake.comments(repo, *n);
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for c in &comments {
            for m in markers(c) {
                *seen.entry(m).or_default() += 1;
            }
        }
        assert!(
            seen.values().all(|n| *n == 1),
            "#{n}: a comment twice: {comments:#?}"
        );
        let landed = seen
            .keys()
            .filter(|m| m.contains("polyphony:landed"))
            .count();
        assert_eq!(landed, 1, "#{n}: {comments:#?}");
        let claimants: Vec<&String> = seen
            .keys()
            .filter(|m| m.contains("polyphony:claim"))
            .collect();
        assert!(!claimants.is_empty(), "#{n}: {comments:#?}");
    }
    // No event stored twice: one attempt's events are unique by content as well as seq
    // (a re-attached attempt continues after what it stored).
    let dup = rows(
        &url,
        "SELECT task_id, attempt::text, data FROM events GROUP BY task_id, attempt, data HAVING COUNT(*) > 1",
    )
    .await;
    assert!(dup.is_empty(), "events stored twice: {dup:#?}");
    let runs = attempts(&url).await;
    let of_m1 = runs
        .iter()
        .filter(|a| a.4.starts_with(&homes[0].path.display().to_string()))
        .count();
    let taken_over = runs
        .iter()
        .filter(|a| {
            a.4.starts_with(&homes[0].path.display().to_string())
                && a.3.as_deref() != Some("succeeded")
        })
        .count();
    println!(
        "fleet: 30 tasks drained in {drained:?} ({} attempts; m1 ran {of_m1}, {taken_over} cut short); {kills} kill -9s: {kill_log:?}",
        runs.len()
    );
}

/// Issue 27, shared limits: a $0.15 daily ceiling across three daemons of two slots each,
/// each attempt capped at $0.05, nine 4-second tasks of $0.0421: the running attempts of
/// every daemon reserve their cap in the shared store, so the day ends within the ceiling
/// plus one attempt (before, each daemon saw only finished spend: six attempts started at
/// once, $0.25 against $0.15).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daily_ceiling_across_three_daemons_ends_within_one_attempt_of_it() {
    let Some((_pg, image, url)) = start("fleet_ceiling").await else {
        return;
    };
    let started = Instant::now();
    const CEILING: f64 = 0.15;
    let conf = Conf {
        max_cost: Some(0.05),
        ceiling: Some(CEILING),
        ..Conf::slots(2)
    };
    let homes: Vec<Home> = ["m1", "m2", "m3"]
        .iter()
        .map(|m| member(&image, m, &url, conf, None))
        .collect();
    let origin = Origin::new();
    for i in 0..9 {
        homes[0]
            .enqueue(
                origin.url(),
                &body("polyphony-fake: slow\npolyphony-fake-sleep: 4"),
                &format!("Spend {i}"),
            )
            .await;
    }
    let mut daemons: Vec<Option<Daemon>> =
        homes.iter().map(|h| Some(h.start(&["daemon"]))).collect();
    // Settled: every task landed or waits for tomorrow's ceiling.
    let tomorrow = (polyphony::identity_policy::utc_day_start(chrono::Utc::now())
        + chrono::Duration::days(1))
    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let day = &tomorrow[..10];
    let limit = started + Duration::from_secs(200);
    wait_for(&url, &homes, &mut daemons, limit, "not settled", |all| {
        all.len() == 9
            && all.iter().all(|t| {
                t.1 == "LANDED"
                    || (t.1 == "FAILED" && t.3.as_deref().is_some_and(|n| n.starts_with(day)))
            })
    })
    .await;
    stop(&mut daemons).await;
    let runs = attempts(&url).await;
    let all = tasks(&url).await;
    let landed = all.iter().filter(|t| t.1 == "LANDED").count();
    assert!(
        all.iter().all(|t| t.2 == 0),
        "a ceiling wait counted: {all:#?}"
    );
    // What the agents spent is what they reported: $0.0421 a run.
    let spent = runs.len() as f64 * RUN_COST;
    println!(
        "ceiling: {} agent runs, ${spent:.4} against ${CEILING} ({landed} landed) in {:?}",
        runs.len(),
        started.elapsed()
    );
    assert!(
        spent <= CEILING + RUN_COST + 1e-9,
        "{} runs spent ${spent:.4}: more than the ${CEILING} ceiling plus one attempt\n{runs:#?}",
        runs.len()
    );
    assert!(landed >= 3, "the ceiling let too little through: {all:#?}");
    let recorded = rows(
        &url,
        "SELECT COALESCE(SUM(cost_usd), 0)::text FROM attempts WHERE identity = 'demo'",
    )
    .await;
    let recorded: f64 = recorded[0][0].as_deref().unwrap_or("0").parse().unwrap();
    assert!(recorded <= CEILING + 1e-9, "recorded ${recorded}");
}

/// An issue whose title and body hold NUL bytes (GitHub's JSON carries them as `\u0000`)
/// lands from a PostgreSQL store like the issue beside it, the NULs stored as U+FFFD.
/// Before, PostgreSQL refused the text (`invalid byte sequence for encoding "UTF8": 0x00`)
/// and the issue never entered the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issue_with_nul_bytes_lands_from_a_postgresql_store() {
    let Some((_pg, image, url)) = start("nul_issue").await else {
        return;
    };
    let repo = "acme/nul";
    let (fake, _origin) = github(repo).await;
    let scenario = "polyphony-fake: succeed";
    let nul = fake.add_issue(
        repo,
        NewIssue::new("Fix\0 add()")
            .body(&format!("\0{}\0", body(scenario)))
            .labels(&["agent-ready"]),
    );
    let plain = fake.add_issue(
        repo,
        NewIssue::new("Fix add() too")
            .body(&body(scenario))
            .labels(&["agent-ready"]),
    );
    let conf = Conf {
        repo: Some(repo),
        ..Conf::slots(2)
    };
    let home = member(&image, "m1", &url, conf, Some(&fake));
    let out = home.run(&["daemon", "--exit-when-idle"]).await;
    assert!(out.status.success(), "daemon: {}", home.logs());
    for n in [nul, plain] {
        let v = home.task(&format!("{repo}#{n}")).await;
        assert_eq!(v["task"]["state"], "LANDED", "#{n}: {v:#}\n{}", home.logs());
    }
    let v = home.task(&format!("{repo}#{nul}")).await;
    assert_eq!(v["task"]["title"], "Fix\u{fffd} add()");
    assert_eq!(fake.pulls(repo).len(), 2, "{:#?}", fake.pulls(repo));
    assert!(home.containers().is_empty(), "containers left");
}

/// Issue 27, shared limits: claude's usage limit met by m1 (its quota row in the shared
/// store) keeps m2 and m3 from starting claude at all: their tasks (pinned to them by
/// path) go straight to the fallback, codex, with no claude attempt anywhere but m1's one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usage_limit_one_daemon_meets_stops_the_others_starting_that_agent() {
    let Some((_pg, image, url)) = start("fleet_usage_limit").await else {
        return;
    };
    let conf = Conf::slots(1);
    let homes: Vec<Home> = ["m1", "m2", "m3"]
        .iter()
        .map(|m| member(&image, m, &url, conf, None))
        .collect();
    let origin = Origin::new();
    let first = homes[0]
        .enqueue(
            &origin.path,
            &body("polyphony-fake[claude]: quota\npolyphony-fake[codex]: succeed"),
            "Meets the limit",
        )
        .await;
    let mut daemons: Vec<Option<Daemon>> = vec![Some(homes[0].start(&["daemon"])), None, None];
    homes[0]
        .wait_for(&first, Duration::from_secs(120), &|| homes[0].logs(), |v| {
            v["task"]["state"] == "LANDED"
        })
        .await;
    let quota = rows(&url, "SELECT identity, agent FROM quota").await;
    assert_eq!(
        quota,
        vec![vec![Some("demo".to_string()), Some("claude".to_string())]],
        "{}",
        homes[0].logs()
    );
    stop(&mut daemons[..1]).await;
    daemons[0] = None;
    // The other two, each with three tasks of its own that claude would do.
    let mut ids = Vec::new();
    for (i, home) in homes.iter().enumerate().skip(1) {
        for n in 0..3 {
            ids.push(
                home.enqueue(
                    &origin.path,
                    &body("polyphony-fake: succeed"),
                    &format!("m{} task {n}", i + 1),
                )
                .await,
            );
        }
    }
    daemons[1] = Some(homes[1].start(&["daemon"]));
    daemons[2] = Some(homes[2].start(&["daemon"]));
    let limit = Instant::now() + Duration::from_secs(150);
    wait_for(&url, &homes, &mut daemons, limit, "not landed", |all| {
        all.iter().all(|t| t.1 == "LANDED")
    })
    .await;
    stop(&mut daemons).await;
    let runs = attempts(&url).await;
    let claude: Vec<_> = runs.iter().filter(|a| a.2 == "claude").collect();
    assert_eq!(claude.len(), 1, "claude started again: {runs:#?}");
    assert_eq!(claude[0].0, first);
    for (i, home) in homes.iter().enumerate().skip(1) {
        let root = home.path.display().to_string();
        let mine: Vec<_> = runs.iter().filter(|a| a.4.starts_with(&root)).collect();
        assert_eq!(
            mine.len(),
            3,
            "m{}: {runs:#?}\nreasons: {:#?}\n{}",
            i + 1,
            rows(&url, "SELECT task_id, attempt::text, reason FROM attempts WHERE reason IS NOT NULL ORDER BY task_id, attempt").await,
            logs(&homes)
        );
        assert!(mine.iter().all(|a| a.2 == "codex"), "{mine:#?}");
    }
}

/// Where the follow-up's machine dies.
#[derive(Clone, Copy, PartialEq)]
enum FollowUpKill {
    /// kill -9 from outside while its agent runs.
    MidRun,
    /// `followup-reply`: after the reply was posted, before it was recorded.
    AfterReply,
}

/// Issue 27 with issue 15, the follow-ups of one pull request in a fleet: a follow-up
/// whose machine was killed -9 while its agent ran is taken over by another daemon once
/// its lease expires, and lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_whose_machine_dies_mid_run_lands_once_from_another() {
    follow_up_across_the_fleet("fleet_follow_up_run", FollowUpKill::MidRun).await;
}

/// The same with the kill between the reply and its record: the daemon taking over finds
/// the pushed commit and the posted reply (by its marker) another machine made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_whose_machine_dies_after_its_reply_posts_nothing_twice() {
    follow_up_across_the_fleet("fleet_follow_up_reply", FollowUpKill::AfterReply).await;
}

/// Three daemons with the shepherd on watch the same landed pull request in the shared
/// store; a trusted reviewer's inline comment asks for a change, the daemon whose claim
/// runs the follow-up dies (`kill`) and stays dead, and another takes the task over when
/// its lease expires. Exactly one follow-up task, one commit on top of the old head (doing
/// what the comment asked), one reply in the reviewer's thread, no comment twice, and no
/// failure counted; later looks by every daemon add nothing.
async fn follow_up_across_the_fleet(db: &'static str, kill: FollowUpKill) {
    const REVIEWER: &str = "alice";
    const DOC_LINE: &str = "# add A B: prints A + B";
    let Some((pg, image, url)) = start(db).await else {
        return;
    };
    let repo = "acme/fleet-review";
    let (fake, origin) = github(repo).await;
    fake.set_permission(repo, REVIEWER, "write");
    // No scenario line: the follow-up's scenario is the reviewer's (the first one wins).
    let issue = fake.add_issue(
        repo,
        NewIssue::new("Fix add()")
            .body(&format!(
                "`add 2 3` prints -1; test.sh fails.\n\n{FIX_DIRECTIVE}\n"
            ))
            .labels(&["agent-ready"]),
    );
    let conf = Conf {
        repo: Some(repo),
        shepherd: true,
        ..Conf::slots(2)
    };
    let homes: Vec<Home> = ["m1", "m2", "m3"]
        .iter()
        .map(|m| member(&image, m, &url, conf, Some(&fake)))
        .collect();
    // The schema, before the test reads the tables (the daemons would make it too).
    let handle = pg.handle.clone();
    tokio::task::spawn_blocking(move || handle.open().map(drop))
        .await
        .expect("migrate thread")
        .expect("migrate");
    let armed = |h: &Home| {
        let mut cmd = h.cmd(&["daemon"]);
        if kill == FollowUpKill::AfterReply {
            cmd.env("POLYPHONY_FAILPOINT", "followup-reply");
        }
        h.start_cmd(cmd, &["daemon"])
    };
    let mut daemons: Vec<Option<Daemon>> = homes.iter().map(|h| Some(armed(h))).collect();
    let task_id = format!("{repo}#{issue}");
    let limit = Instant::now() + Duration::from_secs(150);
    wait_for(
        &url,
        &homes,
        &mut daemons,
        limit,
        "the issue landed",
        |all| all.iter().any(|t| t.0 == task_id && t.1 == "LANDED"),
    )
    .await;
    let pull = rows(&url, "SELECT number::text, branch FROM pulls").await;
    assert_eq!(pull.len(), 1, "one watched pull request: {pull:?}");
    let number: u64 = pull[0][0]
        .as_deref()
        .unwrap_or("0")
        .parse()
        .expect("number");
    let branch = pull[0][1].clone().expect("branch");
    let git = |args: &[&str]| support::git::git(&origin.path, args);
    let head = git(&["rev-parse", &format!("refs/heads/{branch}")]);

    let sleep = if kill == FollowUpKill::MidRun { 8 } else { 2 };
    let comment = fake.add_review_comment_as(
        repo,
        number,
        REVIEWER,
        "calc.sh",
        5,
        &format!(
            "Please document add() above it.\n\npolyphony-fake: slow\npolyphony-fake-sleep: {sleep}\npolyphony-fake-sed: calc.sh 1a {DOC_LINE}"
        ),
    );
    let deadline = limit + Duration::from_secs(60);
    let no_follow_up = || Instant::now() > deadline;
    match kill {
        FollowUpKill::MidRun => {
            // The machine running the follow-up, once its agent runs: killed for good.
            let victim = loop {
                let held = rows(
                    &url,
                    "SELECT c.machine FROM claims c JOIN followups f ON f.task_id = c.task_id \
                     JOIN tasks t ON t.id = c.task_id WHERE t.state = 'RUNNING'",
                )
                .await;
                if let Some(m) = held.first().and_then(|r| r[0].clone()) {
                    break m;
                }
                if no_follow_up() {
                    stop(&mut daemons).await;
                    panic!(
                        "no follow-up ran: {:#?}\n{}",
                        tasks(&url).await,
                        logs(&homes)
                    );
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            };
            let v: usize = victim[1..].parse::<usize>().expect("m1..m3") - 1;
            let mut d = daemons[v].take().expect("alive");
            d.child.start_kill().expect("kill -9");
            let _ = d.child.wait().await;
            println!("killed {victim} while it ran the follow-up");
        }
        FollowUpKill::AfterReply => {
            // The member that posted the reply killed itself; the others are restarted
            // unarmed (SIGTERM), and the dead one stays dead.
            let victim = loop {
                let dead = daemons.iter_mut().position(|d| {
                    d.as_mut()
                        .is_some_and(|d| d.child.try_wait().ok().flatten().is_some())
                });
                if let Some(v) = dead {
                    break v;
                }
                if no_follow_up() {
                    stop(&mut daemons).await;
                    panic!(
                        "no reply was posted: {:#?}\n{}",
                        tasks(&url).await,
                        logs(&homes)
                    );
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
            daemons[victim] = None;
            let replied = fake
                .review_comments(repo, number)
                .into_iter()
                .filter(|c| c.author == "polyphony-bot")
                .count();
            assert_eq!(replied, 1, "m{} died after its reply", victim + 1);
            stop(&mut daemons).await;
            for i in (0..3).filter(|i| *i != victim) {
                daemons[i] = Some(homes[i].start(&["daemon"]));
            }
            println!("m{} died between its reply and the record", victim + 1);
        }
    }

    let limit = Instant::now() + Duration::from_secs(150);
    wait_for(
        &url,
        &homes,
        &mut daemons,
        limit,
        "the follow-up landed",
        |all| all.len() == 2 && all.iter().all(|t| t.1 == "LANDED"),
    )
    .await;
    // Several more looks by each live daemon (2 s polls) find nothing new.
    tokio::time::sleep(Duration::from_secs(8)).await;
    stop(&mut daemons).await;

    let all = tasks(&url).await;
    assert_eq!(all.len(), 2, "the issue and one follow-up: {all:#?}");
    for t in &all {
        assert_eq!(
            (t.1.as_str(), t.2),
            ("LANDED", 0),
            "{t:?}\n{}",
            logs(&homes)
        );
    }
    let followups = rows(&url, "SELECT task_id FROM followups").await;
    assert_eq!(followups.len(), 1, "{followups:?}");
    let list = git(&[
        "rev-list",
        "--first-parent",
        &format!("{head}..refs/heads/{branch}"),
    ]);
    let commits: Vec<&str> = list.lines().collect();
    assert_eq!(
        commits.len(),
        1,
        "one follow-up commit: {commits:?}\n{}",
        logs(&homes)
    );
    let parents = git(&["rev-list", "--parents", "-n1", commits[0]]);
    assert_eq!(
        parents.split_whitespace().skip(1).collect::<Vec<_>>(),
        vec![head.as_str()],
        "on top of the old head, no force"
    );
    let calc = origin.show(&format!("{}:calc.sh", commits[0]));
    assert!(calc.contains(DOC_LINE) && calc.contains("a + b"), "{calc}");
    let replies: Vec<_> = fake
        .review_comments(repo, number)
        .into_iter()
        .filter(|c| c.author == "polyphony-bot")
        .collect();
    assert_eq!(replies.len(), 1, "one reply: {replies:#?}");
    assert_eq!(
        replies[0].in_reply_to,
        Some(comment),
        "in the reviewer's thread"
    );
    assert!(
        replies[0].body.contains(&commits[0][..12]),
        "{}",
        replies[0].body
    );
    for n in [issue, number] {
        let comments = fake.comments(repo, n);
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for c in &comments {
            for m in markers(c) {
                *seen.entry(m).or_default() += 1;
            }
        }
        assert!(
            seen.values().all(|n| *n == 1),
            "#{n}: a comment twice: {comments:#?}"
        );
    }
    assert_eq!(fake.pulls(repo).len(), 1, "no second pull request");
    let strikes = rows(&url, "SELECT key FROM kv WHERE key LIKE 'strikes:%'").await;
    assert!(strikes.is_empty(), "strikes counted: {strikes:?}");
    let dup = rows(
        &url,
        "SELECT task_id, attempt::text, data FROM events GROUP BY task_id, attempt, data HAVING COUNT(*) > 1",
    )
    .await;
    assert!(dup.is_empty(), "events stored twice: {dup:#?}");
}
