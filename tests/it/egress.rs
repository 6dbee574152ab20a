//! Red-team suite for egress by construction (issue 25), on Docker networks this test makes:
//! an attempt's internal network and proxy are brought up through the product's own
//! `WorkerRuntime::egress_up`, and a hostile probe (the offline test image's busybox) on
//! that network tries every way out it can. Each case fails on a plain bridge network.
//!
//! The test server listens on the gateway of an outbound network the test creates (a host
//! address, as a model API or the daemon's HTTP API would be); the proxy reaches it only by
//! the name `model.test`, which `pins` maps to that address.

use crate::support;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::process::Command;

use polyphony::egress::{EgressReport, ProxyConfig};
use polyphony::runtime::{DockerRuntime, EgressPlan, WorkerRuntime};
use support::home::BIN;

/// A user-defined bridge network removed on drop, with its gateway address.
struct Net {
    name: String,
    gateway: IpAddr,
}

impl Net {
    fn create(name: &str, internal: bool) -> Net {
        let mut args = vec!["network", "create", "--driver", "bridge"];
        if internal {
            args.push("--internal");
        }
        args.push(name);
        let out = Command::new("docker").args(&args).output().expect("docker");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = Command::new("docker")
            .args([
                "network",
                "inspect",
                "-f",
                "{{(index .IPAM.Config 0).Gateway}}",
                name,
            ])
            .output()
            .expect("docker");
        let gateway = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("gateway");
        Net {
            name: name.to_string(),
            gateway,
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["network", "rm", &self.name])
            .output();
    }
}

/// An HTTP server answering `hello-from-the-test-server` to anything, counting connections.
async fn server(ip: IpAddr) -> (u16, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.expect("bind");
    let port = listener.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 2048];
                let _ = s.read(&mut buf).await;
                let body = "hello-from-the-test-server";
                let _ = s
                    .write_all(
                        format!(
                            "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            });
        }
    });
    (port, hits)
}

fn plan(label: &str, attempt: u32, outbound: &str, config: &ProxyConfig) -> EgressPlan {
    let task = format!("egress-it-{}", std::process::id());
    let (network, proxy_name) = polyphony::egress::names(&task, attempt, label);
    EgressPlan {
        network,
        outbound: outbound.to_string(),
        proxy_name,
        labels: BTreeMap::from([
            ("polyphony.home".to_string(), label.to_string()),
            ("polyphony.task".to_string(), task),
            ("polyphony.attempt".to_string(), attempt.to_string()),
            ("polyphony.role".to_string(), "egress".to_string()),
        ]),
        config_json: serde_json::to_string(config).unwrap(),
        // The proxy's own resolver answers: a name allowed but resolving to a private address.
        resolver_hosts: vec!["private.test:10.9.9.9".to_string()],
        mounts: Vec::new(),
        user: None,
        config_file: None,
    }
}

/// Runs `script` with busybox sh in the test image as a confined agent of `plan`: created
/// by the product's runtime with the product's own confinement (`egress::confine`: the
/// attempt's network only, the agent's resolver settings, the proxy variables); its stdout.
async fn probe_confined(
    rt: &DockerRuntime,
    image: &str,
    label: &str,
    plan: &EgressPlan,
    proxy_ip: IpAddr,
    script: &str,
) -> String {
    use futures_util::StreamExt;
    use polyphony::runtime::{ContainerSpec, Role};
    let name = format!("{}-probe", plan.proxy_name);
    let spec = ContainerSpec::new(
        name,
        image,
        vec!["/bin/sh".to_string(), "-c".to_string(), script.to_string()],
    )
    .labels_for("egress-probe", 1, label, Role::Agent)
    .limits(
        polyphony::domain::ResourceLimits::default(),
        &polyphony::runtime::daemon_user(),
    );
    let spec = polyphony::egress::confine(spec, plan, proxy_ip);
    let id = rt.create(&spec).await.expect("create the probe");
    rt.start(&id).await.expect("start the probe");
    let mut out = Vec::new();
    let mut logs = rt.logs(&id, None);
    while let Some(chunk) = logs.next().await {
        let chunk = chunk.expect("probe log");
        if chunk.stream == polyphony::domain::EventStream::Stdout {
            out.extend_from_slice(&chunk.bytes);
        }
    }
    drop(logs);
    rt.wait(&id).await.expect("wait for the probe");
    rt.remove(&id).await.expect("remove the probe");
    String::from_utf8_lossy(&out).into_owned()
}

/// Runs `script` with busybox sh in the test image in an unconfined container on
/// `network` (`docker run` plus `args`): the control that shows a probe reaches its target.
async fn probe_open(image: &str, network: &str, args: &[&str], script: &str) -> String {
    let out = tokio::process::Command::new("docker")
        .args(["run", "--rm", "--network", network])
        .args(args)
        .args(["--entrypoint", "/bin/sh", image, "-c", script])
        .output()
        .await
        .expect("docker run");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no `{key}=` in the probe's output:\n{out}"))
}

type Counter = std::sync::Arc<std::sync::atomic::AtomicU64>;

fn count(c: &Counter) -> u64 {
    c.load(std::sync::atomic::Ordering::SeqCst)
}

/// A TCP listener on `ip` that writes `banner` to each connection and closes it.
async fn banner(ip: IpAddr, banner: &'static str) -> (u16, Counter) {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind((ip, 0))
        .await
        .unwrap_or_else(|e| panic!("bind {ip}: {e}"));
    let port = listener.local_addr().unwrap().port();
    let hits = Counter::default();
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = s.write_all(format!("{banner}\n").as_bytes()).await;
        }
    });
    (port, hits)
}

/// A UDP listener on `ip` counting the datagrams it receives.
async fn udp_counter(ip: IpAddr) -> (u16, Counter) {
    let udp = tokio::net::UdpSocket::bind((ip, 0)).await.expect("udp");
    let port = udp.local_addr().unwrap().port();
    let datagrams = Counter::default();
    let counted = datagrams.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while udp.recv_from(&mut buf).await.is_ok() {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    (port, datagrams)
}

/// The answer of [`dns_server`] to a query: every A question gets `192.0.2.7`.
fn dns_answer(query: &[u8]) -> Option<Vec<u8>> {
    if query.len() < 12 {
        return None;
    }
    // The question: labels up to the root, then type and class.
    let mut end = 12;
    while end < query.len() && query[end] != 0 {
        end += 1 + query[end] as usize;
    }
    let question = query.get(12..end + 5)?;
    let mut out = Vec::new();
    out.extend_from_slice(&query[..2]);
    out.extend_from_slice(&[0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
    out.extend_from_slice(question);
    out.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 7]);
    Some(out)
}

/// A DNS server the test controls on `ip` port 53 (UDP and TCP: the engine's embedded
/// resolver forwards over the protocol it was asked on), answering every A query with
/// 192.0.2.7 and counting the queries that reach it.
async fn dns_server(ip: IpAddr) -> Counter {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let queries = Counter::default();
    let udp = tokio::net::UdpSocket::bind((ip, 53))
        .await
        .unwrap_or_else(|e| {
            panic!("the DNS case binds {ip}:53 (needs root or CAP_NET_BIND_SERVICE): {e}")
        });
    let tcp = tokio::net::TcpListener::bind((ip, 53))
        .await
        .unwrap_or_else(|e| panic!("bind {ip}:53/tcp: {e}"));
    let counted = queries.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = udp.recv_from(&mut buf).await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if let Some(answer) = dns_answer(&buf[..n]) {
                let _ = udp.send_to(&answer, from).await;
            }
        }
    });
    let counted = queries.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = tcp.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut len = [0u8; 2];
                if s.read_exact(&mut len).await.is_err() {
                    return;
                }
                let mut query = vec![0u8; u16::from_be_bytes(len) as usize];
                if s.read_exact(&mut query).await.is_err() {
                    return;
                }
                if let Some(answer) = dns_answer(&query) {
                    let mut framed = (answer.len() as u16).to_be_bytes().to_vec();
                    framed.extend_from_slice(&answer);
                    let _ = s.write_all(&framed).await;
                }
            });
        }
    });
    queries
}

/// The host's address on Docker's default `bridge` network: its interface's (docker0's)
/// IPv4 address (the default bridge's IPAM config may name no gateway).
fn bridge_gateway() -> IpAddr {
    let out = Command::new("docker")
        .args([
            "network",
            "inspect",
            "-f",
            r#"{{index .Options "com.docker.network.bridge.name"}}"#,
            "bridge",
        ])
        .output()
        .expect("docker");
    let name = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "dev", &name])
        .output()
        .expect("ip addr");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .and_then(|a| a.split('/').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no IPv4 address on {name}"))
}

/// A DNS query for `forwarded.test` (type A) over TCP, as busybox `printf` escapes: the
/// two-byte length (32), then the message.
const DNS_TCP_QUERY: &str = r"\000\040\022\064\001\000\000\001\000\000\000\000\000\000\011forwarded\004test\000\000\001\000\001";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_reaches_only_its_allowlist_through_its_proxy() {
    let Some(rt) = support::docker::engine().await else {
        return;
    };
    let image = support::docker::image(&rt).await;
    let rt: DockerRuntime = rt.with_proxy_binary(BIN);
    let pid = std::process::id();
    let label = format!("egressit{pid:08x}");
    let out = Net::create(&format!("polyphony-it-egress-out-{pid}"), false);
    // Removes the proxies and networks made under `label` on every path (a panic too),
    // before `out`'s own removal, which a proxy still attached to it would refuse.
    let _leftovers = support::docker::LabelGuard(label.clone());
    let (port, hits) = server(out.gateway).await;
    // Listeners the probes must never reach, each shown reachable by a control below: a
    // UDP one on the server's address, a TCP one on the host's `bridge` address, and a DNS
    // server (port 53) on the server's address.
    let (uport, datagrams) = udp_counter(out.gateway).await;
    let bridge = bridge_gateway();
    let (bport, bridge_hits) = banner(bridge, "hello-from-the-host-bridge").await;
    let dns_queries = dns_server(out.gateway).await;
    let config = ProxyConfig {
        allow: vec![format!("model.test:{port}"), "private.test:443".to_string()],
        pins: BTreeMap::from([("model.test".to_string(), out.gateway)]),
        ..ProxyConfig::default()
    };
    let one = plan(&label, 1, &out.name, &config);
    let two = plan(&label, 2, &out.name, &config);
    let started = std::time::Instant::now();
    let a = rt.egress_up(&one).await.expect("egress up");
    println!("egress network + proxy up in {:?}", started.elapsed());
    let b = rt.egress_up(&two).await.expect("egress up (attempt 2)");
    let proxy = a.proxy_ip;
    let gw = out.gateway;
    let other = b.proxy_ip;

    // The controls, from an unconfined container on the test's own network: the bridge
    // listener answers, a UDP datagram arrives, the DNS server answers directly and as the
    // embedded resolver's upstream (`--dns`). Retried: under load a first try may be slow.
    let control = format!(
        r#"
try() {{ for i in 1 2 3 4 5; do if out=$("$@" 2>&1); then echo "$out"; return 0; fi; sleep 1; done; echo "$out"; return 1; }}
echo "bridge=$(try nc -w 5 {bridge} {bport} </dev/null)"
echo "udp=$(timeout 3 tftp -g -r probe -l /tmp/probe {gw} {uport} 2>/dev/null; echo sent)"
echo "dns_direct=$(try nslookup direct.test {gw} | grep -q 192.0.2.7 && echo answered)"
echo "dns_forwarded=$(try nslookup forwarded.test | grep -q 192.0.2.7 && echo answered)"
"#
    );
    let control = probe_open(&image, &out.name, &["--dns", &gw.to_string()], &control).await;
    assert_eq!(
        line(&control, "bridge"),
        "hello-from-the-host-bridge",
        "{control}"
    );
    assert_eq!(line(&control, "dns_direct"), "answered", "{control}");
    assert_eq!(line(&control, "dns_forwarded"), "answered", "{control}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while count(&datagrams) == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(count(&datagrams) > 0, "the control's datagram: {control}");
    let (datagrams_before, bridge_before, dns_before) =
        (count(&datagrams), count(&bridge_hits), count(&dns_queries));

    // Each probe prints KEY=ok or KEY=fail; `c` sends a CONNECT and prints the status line.
    let script = format!(
        r#"
c() {{ printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' "$1" "$1" | nc -w 3 {proxy} 3128 | head -1 | tr -d '\r'; }}
r() {{ if "$@" >/dev/null 2>&1; then echo ok; else echo fail; fi; }}
echo "allowed_http=$(printf 'GET http://model.test:{port}/ HTTP/1.1\r\nHost: model.test:{port}\r\n\r\n' | nc -w 3 {proxy} 3128 | tail -1)"
echo "allowed_connect=$(printf 'CONNECT model.test:{port} HTTP/1.1\r\n\r\nGET / HTTP/1.0\r\n\r\n' | nc -w 3 {proxy} 3128 | tail -1)"
echo "unlisted=$(c evil.example:443)"
echo "raw_ip=$(c {gw}:{port})"
echo "other_port=$(c model.test:22)"
echo "ipv6=$(c '[::1]:443')"
echo "private_answer=$(c private.test:443)"
echo "loopback_name=$(c localhost:{port})"
unset HTTPS_PROXY HTTP_PROXY https_proxy http_proxy
echo "direct_server=$(r nc -w 3 {gw} {port} </dev/null)"
echo "direct_bridge=$(nc -w 3 {bridge} {bport} </dev/null 2>/dev/null; echo end)"
echo "direct_other_attempt=$(r nc -w 3 {other} 3128 </dev/null)"
echo "direct_name=$(r wget -q -T 3 -O - http://model.test:{port}/)"
echo "udp_server=$(timeout 3 tftp -g -r probe -l /tmp/probe {gw} {uport} 2>/dev/null; echo sent)"
echo "dns_default=$(r nslookup model.test)"
echo "dns_outside=$(r nslookup forwarded.test)"
echo "dns_gateway=$(r nslookup direct.test {gw})"
echo "dns_public=$(r nslookup example.com 8.8.8.8)"
nc -l -p 53 > /tmp/upstream 2>/dev/null &
sleep 0.3
echo "dns_tcp=$(printf '{DNS_TCP_QUERY}' | nc -w 5 127.0.0.11 53 | wc -c)"
sleep 0.3
kill %1 2>/dev/null
echo "dns_upstream=$(tr -c 'a-z' ' ' < /tmp/upstream | tr -s ' ' | sed 's/^ //; s/ $//')"
echo "docker_socket=$(r test -e /var/run/docker.sock -o -e /run/docker.sock)"
"#
    );
    let hits_before = count(&hits);
    let result = probe_confined(&rt, &image, &label, &one, a.proxy_ip, &script).await;
    let log = rt
        .egress_down(&one.proxy_name, &one.network)
        .await
        .expect("egress down");
    rt.egress_down(&two.proxy_name, &two.network)
        .await
        .expect("egress down (attempt 2)");
    let report = EgressReport::from_log(&log);

    // The allowed host, by name, through the proxy: plain HTTP and a CONNECT tunnel.
    assert_eq!(
        line(&result, "allowed_http"),
        "hello-from-the-test-server",
        "{result}"
    );
    assert_eq!(
        line(&result, "allowed_connect"),
        "hello-from-the-test-server",
        "{result}"
    );
    // Everything else asked of the proxy is refused, each with a reason in its log.
    for key in [
        "unlisted",
        "raw_ip",
        "other_port",
        "ipv6",
        "private_answer",
        "loopback_name",
    ] {
        assert!(
            line(&result, key).starts_with("HTTP/1.1 403"),
            "{key}: {result}"
        );
    }
    let reason = |host: &str| {
        report
            .refused
            .iter()
            .find(|r| r.host == host)
            .map(|r| r.reason.clone())
            .unwrap_or_else(|| panic!("no refusal of {host}: {report:?}"))
    };
    assert_eq!(reason("evil.example"), "not_allowed");
    assert_eq!(reason(&gw.to_string()), "ip_literal");
    assert_eq!(reason("[::1]"), "ip_literal");
    assert_eq!(reason("private.test"), "private_address");
    assert_eq!(reason("localhost"), "not_allowed");
    assert!(
        report
            .refused
            .iter()
            .any(|r| r.host == "model.test" && r.port == 22 && r.reason == "port_not_allowed"),
        "{report:?}"
    );
    assert!(report
        .allowed
        .iter()
        .any(|h| h.host == "model.test" && h.connections == 2 && h.bytes_down > 0));
    // With the proxy variables unset there is no way out at all.
    for key in [
        "direct_server",
        "direct_other_attempt",
        "direct_name",
        "dns_default",
        "dns_outside",
        "dns_gateway",
        "dns_public",
        "docker_socket",
    ] {
        assert_eq!(line(&result, key), "fail", "{key}: {result}");
    }
    assert_eq!(line(&result, "direct_bridge"), "end", "{result}");
    assert_eq!(
        count(&bridge_hits),
        bridge_before,
        "the host's bridge address was reached: {result}"
    );
    assert_eq!(line(&result, "udp_server"), "sent", "{result}");
    assert_eq!(
        count(&datagrams),
        datagrams_before,
        "a UDP datagram got out"
    );
    // No DNS query reached the test's server, directly or forwarded, and the engine's
    // embedded resolver sent the one it could not answer to the agent's own loopback
    // (`egress::AGENT_DNS`, the `nc -l` above), not to the host's resolvers: the query
    // arrived there, and no answer came back.
    assert_eq!(
        count(&dns_queries),
        dns_before,
        "a DNS query got out: {result}"
    );
    assert_eq!(line(&result, "dns_upstream"), "forwarded test", "{result}");
    assert_eq!(line(&result, "dns_tcp"), "0", "{result}");
    // The server saw the two allowed connections (the proxy's) and no direct one.
    assert_eq!(count(&hits) - hits_before, 2, "{result}");
    // Nothing of either attempt is left.
    for name in [&one.network, &two.network] {
        let out = Command::new("docker")
            .args(["network", "inspect", name])
            .output()
            .unwrap();
        assert!(!out.status.success(), "network {name} left behind");
    }
    for name in [&one.proxy_name, &two.proxy_name] {
        let out = Command::new("docker")
            .args(["inspect", name])
            .output()
            .unwrap();
        assert!(!out.status.success(), "proxy {name} left behind");
    }
}

/// This home's egress networks (label `polyphony.home`).
fn networks_of(label: &str) -> Vec<String> {
    support::docker::networks_of(label).expect("docker network ls")
}

/// A PR shepherd follow-up runs under the same confinement as the attempt that opened the
/// pull request: its agent is on an internal network of its own whose one exit is its
/// proxy (the daemon brings them up and down for the follow-up's task, and its RunSpec
/// says `allowlist`), and nothing of it is left once it lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pr_shepherd_follow_up_runs_behind_its_own_proxy() {
    use support::fake_github::{FakeGithub, NewIssue};
    use support::home::{output, Home, Origin};
    let Some(image) = support::docker::test_image().await else {
        return;
    };
    let origin = Origin::new();
    let fake = FakeGithub::start().await;
    let repo = "acme/calc-egress";
    fake.add_repo(repo, &origin.url(), "main");
    fake.set_permission(repo, "alice", "write");
    let n = fake.add_issue(
        repo,
        NewIssue::new("Fix add()")
            .body(&format!(
                "`add 2 3` prints -1.\n\npolyphony-fake: succeed\n{}\n",
                polyphony::demo::FIX_DIRECTIVE
            ))
            .labels(&["agent-ready"]),
    );
    let (dir, path) = Home::temp();
    polyphony::demo::write_home(&path, dir.path(), &image).expect("home");
    std::fs::write(
        path.join("config.yaml"),
        format!(
            "poll_interval: 30s\nmax_concurrent_agents: 2\nevent_idle_timeout: 1m\nmax_attempts: 2\ndefault_identity: demo\negress:\n  mode: allowlist\ncontainer:\n  image: {image}\n  deadline: 2m\n  memory: 512m\n  cpus: 1\nverify:\n  timeout: 1m\nshepherd:\n  enabled: true\n"
        ),
    )
    .expect("config.yaml");
    std::fs::write(
        path.join("routing.yaml"),
        "default:\n  agent: claude\n  fallback: []\n",
    )
    .expect("routing.yaml");
    let home = Home::at(dir, path, Some(&fake));
    let issue = format!("{repo}#{n}");
    let out = home.run(&["spawn", &issue]).await;
    assert!(out.status.success(), "spawn: {}", output(&out));
    let v = home.task(&issue).await;
    let pr = v["pull"]["number"]
        .as_u64()
        .expect("a watched pull request");
    fake.add_review_comment_as(
        repo,
        pr,
        "alice",
        "calc.sh",
        5,
        "Please document add() above it.\n\npolyphony-fake-sed: calc.sh 1a # add A B: prints A + B",
    );
    let out = home.run(&["-v", "daemon", "--exit-when-idle"]).await;
    assert!(out.status.success(), "daemon: {}", output(&out));
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = home.task(&issue).await;
    let followups = v["followups"].as_array().cloned().unwrap_or_default();
    assert_eq!(followups.len(), 1, "{v:#}");
    let id = followups[0]["task_id"].as_str().expect("id").to_string();
    let f = home.task(&id).await;
    assert_eq!(f["task"]["state"], "LANDED", "{f:#}");
    // The daemon brought up the follow-up's own internal network and proxy ...
    let (network, _) = polyphony::egress::names(&id, 1, &home.label);
    let up = log
        .lines()
        .find(|l| l.contains("egress network and proxy up") && l.contains(&id))
        .unwrap_or_else(|| panic!("no egress network for the follow-up {id}:\n{log}"));
    assert!(up.contains(&network), "{up}");
    // ... ran the follow-up's agent under `allowlist` (its recorded RunSpec) ...
    let spec: String = home
        .db()
        .query_row(
            "SELECT run_spec FROM attempts WHERE task_id = ?1 AND attempt = 1",
            [&id],
            |r| r.get(0),
        )
        .expect("the follow-up's attempt");
    let spec: serde_json::Value = serde_json::from_str(&spec).expect("run_spec");
    assert_eq!(spec["egress"]["mode"], "allowlist", "{spec:#}");
    // ... removed that network and proxy once it ended ...
    assert!(
        log.lines()
            .any(|l| l.contains("egress proxy and network removed")
                && l.contains(&id)
                && l.contains(&network)),
        "{log}"
    );
    // ... and nothing of it is left.
    assert!(home.containers().is_empty(), "containers left");
    assert!(networks_of(&home.label).is_empty(), "networks left");
}

/// The gateway keys (issue 26) on disk under `home/run/gateway/`, and its directories.
fn gateway_leftovers(home: &std::path::Path) -> (Vec<std::path::PathBuf>, Vec<String>) {
    let root = home.join("run").join("gateway");
    let mut keys = Vec::new();
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        dirs.push(entry.file_name().to_string_lossy().into_owned());
        let key = entry.path().join("credential");
        if key.exists() {
            keys.push(key);
        }
    }
    (keys, dirs)
}

/// A daemon killed after an attempt's gateway key is written for its proxy and before the
/// proxy read it (the `egress-up` failpoint: SIGKILL, as `kill -9`) leaves the key on disk;
/// `cleanup` sweeps it, and so does the next daemon start (whose retry then lands).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_key_left_by_a_killed_daemon_is_swept_by_cleanup_and_at_start() {
    use std::os::unix::process::ExitStatusExt;
    use support::home::{output, Home, Origin};
    let Some(image) = support::docker::test_image().await else {
        return;
    };
    let origin = Origin::new();
    let (dir, path) = Home::temp();
    polyphony::demo::write_home(&path, dir.path(), &image).expect("home");
    std::fs::write(
        path.join("config.yaml"),
        format!(
            "poll_interval: 30s\nmax_concurrent_agents: 2\nevent_idle_timeout: 1m\nmax_attempts: 3\ndefault_identity: demo\negress:\n  mode: allowlist\ncontainer:\n  image: {image}\n  deadline: 2m\n  memory: 512m\n  cpus: 1\n"
        ),
    )
    .expect("config.yaml");
    let identities = std::fs::read_to_string(path.join("identities.yaml")).expect("identities");
    std::fs::write(
        path.join("identities.yaml"),
        format!("{identities}    api_keys:\n      ANTHROPIC_API_KEY: POLYPHONY_EGRESS_IT_KEY\n"),
    )
    .expect("identities.yaml");
    std::fs::write(
        path.join("routing.yaml"),
        "default:\n  agent: claude\n  fallback: []\n",
    )
    .expect("routing.yaml");
    let home = Home::at(dir, path.clone(), None).with_env(
        "POLYPHONY_EGRESS_IT_KEY",
        "sk-ant-egress-it-0123456789abcdef",
    );
    let body = format!(
        "`add 2 3` prints -1.\n\npolyphony-fake: succeed\n{}\n",
        polyphony::demo::FIX_DIRECTIVE
    );
    let killed_in_the_window = |id: String| {
        let home = &home;
        async move {
            let args = ["spawn", "--task", id.as_str()];
            let mut cmd = home.cmd(&args);
            cmd.env(polyphony::failpoint::ENV, "egress-up");
            let out = home.finish(cmd, &args).await;
            assert_eq!(
                out.status.signal(),
                Some(libc::SIGKILL),
                "expected a kill at `egress-up`: {}",
                output(&out)
            );
            let (keys, _) = gateway_leftovers(&home.path);
            assert_eq!(keys.len(), 1, "the key the killed daemon left: {keys:?}");
        }
    };

    let first = home.enqueue(&origin, &body, "Fix add()").await;
    killed_in_the_window(first.clone()).await;
    let out = home.run(&["cleanup"]).await;
    assert!(out.status.success(), "cleanup: {}", output(&out));
    let (keys, dirs) = gateway_leftovers(&path);
    assert!(
        keys.is_empty() && dirs.is_empty(),
        "cleanup left {keys:?} {dirs:?}"
    );

    let second = home.enqueue(&origin, &body, "Fix add() again").await;
    killed_in_the_window(second.clone()).await;
    let out = home.run(&["daemon", "--exit-when-idle"]).await;
    assert!(out.status.success(), "daemon: {}", output(&out));
    for id in [&first, &second] {
        let v = home.task(id).await;
        assert_eq!(v["task"]["state"], "LANDED", "{v:#}");
    }
    let (keys, dirs) = gateway_leftovers(&path);
    assert!(
        keys.is_empty() && dirs.is_empty(),
        "the daemon start left {keys:?} {dirs:?}"
    );
    assert!(home.containers().is_empty(), "containers left");
    assert!(networks_of(&home.label).is_empty(), "networks left");
}

/// Every IPv4 address of this host but loopback (`ip -4 -o addr`): where a host service
/// listening on 0.0.0.0 can be reached.
fn host_addresses() -> Vec<IpAddr> {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
        .expect("ip addr");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            words.find(|w| *w == "inet")?;
            words.next()?.split('/').next()?.parse::<IpAddr>().ok()
        })
        .filter(|ip| !ip.is_loopback())
        .collect()
}

/// The daemon's HTTP API served on every host address (`--listen 0.0.0.0:PORT`, the real
/// daemon) cannot be reached from a confined agent at any of the host's addresses, nor
/// through its proxy; a control from a container on a network this test creates reaches
/// it at that network's gateway (so the probe itself works).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemons_http_api_is_unreachable_from_an_attempt() {
    use support::home::{output, Home};
    let Some(rt) = support::docker::engine().await else {
        return;
    };
    let image = support::docker::image(&rt).await;
    let rt: DockerRuntime = rt.with_proxy_binary(BIN);
    let (dir, path) = Home::temp();
    let home = Home::at(dir, path, None)
        .with_env("POLYPHONY_HTTP_TOKEN", "egress-it-api-token-0123456789");
    let init = home.run(&["init"]).await;
    assert!(init.status.success(), "init: {}", output(&init));
    let port = std::net::TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("0.0.0.0:{port}");
    let mut daemon = home.start(&["daemon", "--listen", &listen]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon did not listen on {listen}: {}",
            daemon.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let pid = std::process::id();
    let label = format!("egressapi{pid:08x}");
    let out = Net::create(&format!("polyphony-it-egress-api-{pid}"), false);
    // Removes the proxies and networks made under `label` on every path (a panic too),
    // before `out`'s own removal, which a proxy still attached to it would refuse.
    let _leftovers = support::docker::LabelGuard(label.clone());
    let config = ProxyConfig::default();
    let one = plan(&label, 7, &out.name, &config);
    let up = rt.egress_up(&one).await.expect("egress up");
    let request = r"GET /metrics HTTP/1.0\r\n\r\n";

    // The control: the API answers a container on the test's network at its gateway.
    let control = format!(
        r#"
for i in 1 2 3 4 5 6 7 8 9 10; do
  got=$(printf '{request}' | nc -w 5 {gw} {port} | head -1 | tr -d '\r')
  [ -n "$got" ] && break
  sleep 1
done
echo "api=$got"
"#,
        gw = out.gateway
    );
    let control = probe_open(&image, &out.name, &[], &control).await;
    assert!(
        line(&control, "api").starts_with("HTTP/1."),
        "the control did not reach the API: {control}"
    );

    // The confined agent, at every host address, with and without its proxy.
    let addresses = host_addresses();
    assert!(addresses.contains(&out.gateway), "{addresses:?}");
    let mut script = String::new();
    for (i, ip) in addresses.iter().enumerate() {
        script.push_str(&format!(
            "echo \"direct_{i}=$(printf '{request}' | nc -w 3 {ip} {port} 2>/dev/null | head -1 | tr -d '\\r')\"\n\
             echo \"proxied_{i}=$(printf 'GET http://{ip}:{port}/metrics HTTP/1.1\\r\\nHost: {ip}:{port}\\r\\n\\r\\n' | nc -w 3 $HTTP_PROXY_ADDR 2>/dev/null | head -1 | tr -d '\\r')\"\n"
        ));
    }
    let script = format!("HTTP_PROXY_ADDR=\"{} 3128\"\n{script}", up.proxy_ip);
    let result = probe_confined(&rt, &image, &label, &one, up.proxy_ip, &script).await;
    let log = rt
        .egress_down(&one.proxy_name, &one.network)
        .await
        .expect("egress down");
    daemon.signal(libc::SIGTERM);
    daemon.wait(std::time::Duration::from_secs(30)).await;
    for (i, ip) in addresses.iter().enumerate() {
        assert_eq!(line(&result, &format!("direct_{i}")), "", "{ip}: {result}");
        assert!(
            line(&result, &format!("proxied_{i}")).starts_with("HTTP/1.1 403"),
            "{ip}: {result}"
        );
    }
    let report = EgressReport::from_log(&log);
    assert!(report.allowed.is_empty(), "{report:?}");
    assert_eq!(report.refused.len(), addresses.len(), "{report:?}");
}

/// A home on the demo's files whose agents run under `egress: allowlist` (the fake
/// agents call no model: nothing else is allowed), with one local task whose fake agent
/// asks its proxy for each of `targets` with `secs` seconds between.
async fn reaching_home(
    image: &str,
    targets: &[&str],
    secs: u32,
) -> (support::home::Home, support::home::Origin, String) {
    let connects: String = targets
        .iter()
        .map(|t| format!("polyphony-fake-connect: {t}\n"))
        .collect();
    let (dir, path) = support::home::Home::temp();
    scripted_home(
        image,
        dir,
        path,
        &format!("polyphony-fake: reach\n{connects}polyphony-fake-sleep: {secs}\n"),
    )
    .await
}

/// [`reaching_home`]'s home at `path` (in `dir`), its one task's fake agent scripted by
/// `directives`.
async fn scripted_home(
    image: &str,
    dir: tempfile::TempDir,
    path: std::path::PathBuf,
    directives: &str,
) -> (support::home::Home, support::home::Origin, String) {
    use support::home::{Home, Origin};
    let origin = Origin::new();
    polyphony::demo::write_home(&path, dir.path(), image).expect("home");
    std::fs::write(
        path.join("config.yaml"),
        format!(
            "poll_interval: 1s\nmax_concurrent_agents: 2\nevent_idle_timeout: 1m\nmax_attempts: 1\ndefault_identity: demo\negress:\n  mode: allowlist\ncontainer:\n  image: {image}\n  deadline: 3m\n  memory: 512m\n  cpus: 1\nverify:\n  timeout: 1m\n"
        ),
    )
    .expect("config.yaml");
    std::fs::write(
        path.join("routing.yaml"),
        "default:\n  agent: claude\n  fallback: []\n",
    )
    .expect("routing.yaml");
    let home = Home::at(dir, path, None);
    let body = format!(
        "`add 2 3` prints -1.\n\n{directives}{}\n",
        polyphony::demo::FIX_DIRECTIVE
    );
    let id = home
        .enqueue(&origin, &body, "Fix add() and look around")
        .await;
    (home, origin, id)
}

/// The hosts of attempt 1's refusals in `status TASK --json`, in order.
fn refused_hosts(v: &serde_json::Value) -> Vec<String> {
    v["attempts"][0]["egress"]["refused"]
        .as_array()
        .map(|r| {
            r.iter()
                .map(|r| r["host"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Polls `status TASK --json` until attempt 1's egress refused `host`; the detail then.
async fn until_refused(
    home: &support::home::Home,
    id: &str,
    host: &str,
    limit: std::time::Duration,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let v = home.task(id).await;
        if refused_hosts(&v).iter().any(|h| h == host) {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no refusal of {host} within {limit:?}: {v:#}\n{}",
            home.logs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// Issue 25: a refusal is visible while the attempt runs, not once the agent exits: the
/// fake agent asks its proxy for `evil.example:443` and then works on for 25 s; the
/// refusal, with the line that would allow it, is in `status TASK --json` and `status
/// TASK` while the attempt is still running, and once it lands it is there exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_shows_in_status_while_the_agent_still_runs() {
    let Some(image) = support::docker::test_image().await else {
        return;
    };
    let (home, _origin, id) = reaching_home(&image, &["evil.example:443"], 25).await;
    let mut daemon = home.start(&["-v", "daemon", "--exit-when-idle"]);
    let v = until_refused(
        &home,
        &id,
        "evil.example",
        std::time::Duration::from_secs(90),
    )
    .await;
    // Still running: the agent works on for 25 s after its refusal.
    assert_eq!(v["task"]["state"], "RUNNING", "{v:#}");
    assert!(v["attempts"][0]["status"].is_null(), "{v:#}");
    let refusal = &v["attempts"][0]["egress"]["refused"][0];
    assert_eq!(refusal["reason"], "not_allowed", "{v:#}");
    assert_eq!(
        refusal["suggestion"],
        "refused evil.example:443 (not on the allowlist) — to allow it add \"evil.example:443\" to egress.allow of profile claude in agents.yaml",
        "{v:#}"
    );
    let text = home.run(&["status", &id]).await;
    let text = support::home::text(&text.stdout);
    assert!(
        text.contains("refused evil.example:443 (not on the allowlist) — to allow it add"),
        "{text}"
    );
    let status = daemon.wait(std::time::Duration::from_secs(180)).await;
    assert!(status.success(), "daemon: {}", daemon.log());
    let v = home.task(&id).await;
    assert_eq!(v["task"]["state"], "LANDED", "{v:#}\n{}", daemon.log());
    assert_eq!(refused_hosts(&v), vec!["evil.example"], "{v:#}");
    // The follower read the log to its end once the proxy was stopped: no second read.
    let stopped = daemon
        .log()
        .lines()
        .find(|l| l.contains("egress proxy stopped and its log read"))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no stop line: {}", daemon.log()));
    assert!(stopped.contains("read_whole=false"), "{stopped}");
    assert!(
        v["attempts"][0]["egress"]["summary"]
            .as_str()
            .is_some_and(|s| s.contains("refused 1: evil.example:443")),
        "{v:#}"
    );
    assert!(networks_of(&home.label).is_empty(), "networks left");
    assert!(home.containers().is_empty(), "containers left");
}

/// Issue 25: a daemon killed (SIGKILL) mid-attempt has stored the refusals its proxy logged
/// so far, and the next daemon, which re-attaches the attempt and follows the same proxy's
/// log from its first line, adds the later ones and repeats none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_mid_attempt_neither_loses_nor_repeats_egress_events() {
    let Some(image) = support::docker::test_image().await else {
        return;
    };
    let (home, _origin, id) =
        reaching_home(&image, &["evil.example:443", "other.example:443"], 8).await;
    let mut first = home.start(&["daemon"]);
    until_refused(
        &home,
        &id,
        "evil.example",
        std::time::Duration::from_secs(90),
    )
    .await;
    first.signal(libc::SIGKILL);
    let _ = first.wait(std::time::Duration::from_secs(20)).await;
    // With no daemon running, the store holds the refusal (the old daemon read the log
    // only once the agent exited).
    let v = home.task(&id).await;
    assert_eq!(v["task"]["state"], "RUNNING", "{v:#}");
    assert_eq!(refused_hosts(&v), vec!["evil.example"], "{v:#}");

    let mut second = home.start(&["daemon", "--exit-when-idle", "--json"]);
    let status = second.wait(std::time::Duration::from_secs(180)).await;
    assert!(status.success(), "daemon: {}", second.log());
    let v = home.task(&id).await;
    assert_eq!(v["task"]["state"], "LANDED", "{v:#}\n{}", home.logs());
    assert_eq!(v["task"]["attempts"], 1, "the re-attached attempt: {v:#}");
    assert_eq!(
        refused_hosts(&v),
        vec!["evil.example", "other.example"],
        "each refusal once: {v:#}"
    );
    let rows: i64 = home
        .db()
        .query_row(
            "SELECT COUNT(*) FROM egress_events WHERE task_id = ?1 AND what = 'refused'",
            [&id],
            |r| r.get(0),
        )
        .expect("egress_events");
    assert_eq!(rows, 2, "{v:#}");
    assert!(networks_of(&home.label).is_empty(), "networks left");
    assert!(home.containers().is_empty(), "containers left");
}

/// The tests' guard (`support::docker::LabelGuard`): a test that panics after its attempt's
/// network and proxy are up, before its own `egress_down`, leaves neither behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_that_panics_after_egress_up_leaves_no_proxy_or_network() {
    let Some(rt) = support::docker::engine().await else {
        return;
    };
    let rt: DockerRuntime = rt.with_proxy_binary(BIN);
    let pid = std::process::id();
    let label = format!("egressguard{pid:08x}");
    let out = Net::create(&format!("polyphony-it-egress-guard-{pid}"), false);
    let one = plan(&label, 1, &out.name, &ProxyConfig::default());
    let (guarded, made) = (label.clone(), one.clone());
    let panicked = tokio::spawn(async move {
        let _leftovers = support::docker::LabelGuard(guarded);
        rt.egress_up(&made).await.expect("egress up");
        panic!("a test failing before its egress_down");
    })
    .await;
    assert!(panicked.is_err_and(|e| e.is_panic()));
    assert!(networks_of(&label).is_empty(), "networks left");
    assert!(
        support::docker::containers_of(&label, "").is_empty(),
        "proxy left"
    );
}

/// `host_address` of Docker's default `bridge` is the host's address on it (its
/// interface's, docker0's), also on an engine (20.10) whose IPAM config names no gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_address_on_the_default_bridge_is_its_interfaces() {
    let Some(rt) = support::docker::engine().await else {
        return;
    };
    let found = rt
        .host_address(&polyphony::domain::NetworkMode::Bridge)
        .await
        .expect("inspect the bridge");
    assert_eq!(found, Some(bridge_gateway()));
}

/// `GET /metrics` of a daemon on `port` (with its token): the sum of
/// `polyphony_egress_connections_total` samples whose labels contain `labels`.
async fn egress_metric(port: u16, token: &str, labels: &str) -> f64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("the daemon's API");
    s.write_all(
        format!(
            "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).await.unwrap();
    assert!(
        body.starts_with("HTTP/1.0 200") || body.starts_with("HTTP/1.1 200"),
        "{body}"
    );
    body.lines()
        .filter(|l| l.starts_with("polyphony_egress_connections_total{") && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A free port on loopback, and a daemon of `home` listening there (once it answers).
async fn listening_daemon(
    home: &support::home::Home,
    args: &[&str],
) -> (support::home::Daemon, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut all = vec!["-v", "daemon", "--listen", &listen];
    all.extend_from_slice(args);
    let daemon = home.start(&all);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon did not listen on {listen}: {}",
            daemon.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    (daemon, port)
}

/// The stored refusal rows of `id`'s attempts.
fn refusal_rows(home: &support::home::Home, id: &str) -> i64 {
    home.db()
        .query_row(
            "SELECT COUNT(*) FROM egress_events WHERE task_id = ?1 AND what = 'refused'",
            [id],
            |r| r.get(0),
        )
        .expect("egress_events")
}

/// Issue 25: a hostile agent that makes refused `CONNECT`s without end (600 distinct
/// unlisted names here) cannot fill the store: the first `egress::KEPT_REFUSALS` are
/// stored one by one, the rest counted; `status TASK` says so, `status --json` counts
/// every one, and `/metrics` counts every one while the attempt runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_refusals_stores_the_first_ones_and_counts_every_one() {
    let Some(image) = support::docker::test_image().await else {
        return;
    };
    const TOKEN: &str = "egress-it-flood-token-0123456789";
    const N: u64 = 600;
    let kept = polyphony::egress::KEPT_REFUSALS as i64;
    let (dir, path) = support::home::Home::temp();
    let (home, _origin, id) = scripted_home(
        &image,
        dir,
        path,
        &format!("polyphony-fake: refuse-flood\npolyphony-fake-refusals: {N}\npolyphony-fake-sleep: 20\n"),
    )
    .await;
    let home = home.with_env("POLYPHONY_HTTP_TOKEN", TOKEN);
    let (mut daemon, port) = listening_daemon(&home, &["--exit-when-idle"]).await;
    // While the agent works on after its flood: every refusal counted, the first ones stored.
    let v = home
        .wait_for(
            &id,
            std::time::Duration::from_secs(150),
            &|| daemon.log(),
            |v| v["attempts"][0]["egress"]["refusals"]["total"] == N,
        )
        .await;
    assert_eq!(v["task"]["state"], "RUNNING", "{v:#}");
    let counted = egress_metric(port, TOKEN, "reason=\"not_allowed\"").await;
    assert_eq!(counted, N as f64, "/metrics counts every refusal");
    let egress = &v["attempts"][0]["egress"];
    assert_eq!(egress["refusals"]["stored"], kept, "{egress:#}");
    assert_eq!(
        egress["refused"].as_array().map(Vec::len),
        Some(kept as usize)
    );
    assert_eq!(egress["refused"][0]["host"], "flood-0.example");
    assert_eq!(egress["refusals"]["by_reason"]["not_allowed"], N);
    assert_eq!(
        egress["refusals"]["by_target"].as_array().map(Vec::len),
        Some(polyphony::egress::KEPT_TARGETS)
    );
    assert_eq!(
        egress["refusals"]["other_targets"],
        N - polyphony::egress::KEPT_TARGETS as u64
    );
    assert_eq!(refusal_rows(&home, &id), kept);
    let text = home.run(&["status", &id]).await;
    let text = support::home::text(&text.stdout);
    assert!(
        text.contains(&format!("refused {N}: flood-0.example:443"))
            && text.contains(&format!(
                "(the first {kept} stored one by one, the rest counted)"
            )),
        "{text}"
    );
    let status = daemon.wait(std::time::Duration::from_secs(180)).await;
    assert!(status.success(), "daemon: {}", daemon.log());
    let v = home.task(&id).await;
    assert_eq!(v["task"]["state"], "LANDED", "{v:#}\n{}", daemon.log());
    assert_eq!(refusal_rows(&home, &id), kept, "no more rows at the end");
    assert_eq!(v["attempts"][0]["egress"]["refusals"]["total"], N);
    // One warning per refusal stored, not one per refusal.
    let warned = daemon.log().matches("egress refused").count() as i64;
    assert!(warned <= kept, "{warned} refusal lines in the daemon's log");
    assert!(networks_of(&home.label).is_empty(), "networks left");
    assert!(home.containers().is_empty(), "containers left");
}

/// Issue 25: the queue's disk fills while the egress follower stores an attempt's
/// refusals. The daemon neither crashes nor spins: it says once that the queue
/// database's disk is full and what to do, keeps the refusals (a bounded amount) and
/// stores them when there is room again, so none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_the_egress_follower_loses_no_refusal() {
    let Some(image) = support::docker::test_image().await else {
        return;
    };
    const N: u64 = 150;
    let dir = tempfile::tempdir().unwrap();
    let Some(disk) = support::tmpfs::Tmpfs::mount(&dir.path().join("small"), "96m") else {
        return;
    };
    let path = disk.path().join("home");
    let (home, _origin, id) = scripted_home(
        &image,
        dir,
        path,
        &format!(
            "polyphony-fake: refuse-flood\npolyphony-fake-refusals: {N}\npolyphony-fake-delay: 12\npolyphony-fake-sleep: 20\n"
        ),
    )
    .await;
    let mut daemon = home.start(&["-v", "daemon", "--exit-when-idle"]);
    home.wait_for(
        &id,
        std::time::Duration::from_secs(120),
        &|| daemon.log(),
        |v| v["task"]["state"] == "RUNNING",
    )
    .await;
    // Fill the disk to its last byte before the agent floods (12 s after it starts).
    let filler = disk.path().join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
        while f.write_all(&chunk[..512]).is_ok() {}
        let _ = f.sync_all();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while !daemon
        .log()
        .contains("cannot store the attempt's egress events")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the full disk was never met by the egress follower: {}",
            daemon.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let log = daemon.log();
    let line = log
        .lines()
        .find(|l| l.contains("cannot store the attempt's egress events"))
        .unwrap()
        .to_string();
    assert!(
        line.contains("queue database")
            && line.contains("is full — free space on the filesystem that holds it")
            && line.contains("kept in memory"),
        "{line}"
    );
    // Not said again each second while it stays full (nor per refusal).
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let said = daemon
        .log()
        .matches("cannot store the attempt's egress events")
        .count();
    assert_eq!(said, 1, "{}", daemon.log());
    std::fs::remove_file(&filler).unwrap();
    let status = daemon.wait(std::time::Duration::from_secs(180)).await;
    assert!(status.success(), "daemon: {}", daemon.log());
    assert!(
        daemon
            .log()
            .contains("the attempt's egress events are stored again: nothing was lost"),
        "{}",
        daemon.log()
    );
    assert_eq!(refusal_rows(&home, &id), N as i64, "{}", daemon.log());
    let v = home.task(&id).await;
    assert_eq!(v["attempts"][0]["egress"]["refusals"]["total"], N, "{v:#}");
    assert!(networks_of(&home.label).is_empty(), "networks left");
    assert!(home.containers().is_empty(), "containers left");
    drop(home);
    drop(disk);
}

/// The proxy asked to stop (SIGTERM, what the daemon sends once the agent ended) writes its
/// last line, `end`, and exits 0 at once: the daemon takes that line as its log's end
/// instead of waiting for the engine to see the process gone (docs/benchmarks.md, "Egress").
/// The real binary as a host process; no engine needed.
#[test]
fn a_proxy_asked_to_stop_writes_its_last_line_and_exits_at_once() {
    use std::io::BufRead;
    let config = serde_json::json!({ "listen": "127.0.0.1:0", "allow": ["model.test:443"] });
    let mut child = Command::new(BIN)
        .arg("egress-proxy")
        .env("POLYPHONY_EGRESS_CONFIG", config.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run egress-proxy");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first: serde_json::Value =
        serde_json::from_str(&lines.next().expect("a line").expect("read")).expect("json");
    assert_eq!(first["event"], "ready", "{first}");
    let asked = std::time::Instant::now();
    // SAFETY: a plain kill(2) of our own child.
    assert_eq!(
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) },
        0,
        "kill"
    );
    let rest: Vec<serde_json::Value> = lines
        .map(|l| serde_json::from_str(&l.expect("read")).expect("json"))
        .collect();
    let status = child.wait().expect("wait");
    let took = asked.elapsed();
    assert!(status.success(), "{status:?}");
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0]["event"], "end", "{rest:?}");
    assert_eq!(rest[0]["n"], 1, "numbered after `ready`: {rest:?}");
    assert!(took < std::time::Duration::from_secs(2), "{took:?}");
    assert_eq!(
        polyphony::egress::LogLine::parse(serde_json::to_string(&rest[0]).unwrap().as_bytes()),
        Some(polyphony::egress::LogLine::End)
    );
}

/// The egress proxy runs under its own seccomp profile (`runtime::seccomp`), not the
/// engine's default: the product's proxy container carries it, and in the real engine
/// calls the default profile allows but the proxy never makes fail under it (busybox's
/// `mkdir` and `ln -s` on a tmpfs in the offline test image, as the proxy's uid, under the
/// proxy's other hardening), while what the list allows still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_runs_under_its_own_seccomp_profile() {
    let Some(rt) = support::docker::engine().await else {
        return;
    };
    let image = support::docker::image(&rt).await;
    let rt: DockerRuntime = rt.with_proxy_binary(BIN);
    let pid = std::process::id();
    let label = format!("egressseccomp{pid:08x}");
    let out = Net::create(&format!("polyphony-it-egress-seccomp-{pid}"), false);
    let _leftovers = support::docker::LabelGuard(label.clone());
    let one = plan(&label, 1, &out.name, &ProxyConfig::default());
    let up = rt.egress_up(&one).await.expect("egress up");
    let inspect = Command::new("docker")
        .args([
            "inspect",
            "-f",
            "{{json .HostConfig.SecurityOpt}}",
            &up.proxy_id,
        ])
        .output()
        .expect("docker inspect");
    let opts: Vec<String> = serde_json::from_slice(&inspect.stdout).expect("SecurityOpt");
    let profile = polyphony::runtime::seccomp::proxy_profile();
    assert!(
        opts.contains(&format!("seccomp={profile}")),
        "the proxy's SecurityOpt: {opts:?}"
    );
    assert!(opts.iter().any(|o| o == "no-new-privileges"), "{opts:?}");
    // The CLI takes a profile as a file.
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), &profile).expect("write the profile");
    let profile = file.path().to_str().expect("utf-8 path").to_string();
    let run = |seccomp: Option<&str>, args: &[&str]| {
        let mut cmd = Command::new("docker");
        cmd.args([
            "run",
            "--rm",
            "--network",
            "none",
            "--user",
            "65534:65534",
            "--cap-drop",
            "ALL",
            "--read-only",
            "--tmpfs",
            "/tmp",
            "--security-opt",
            "no-new-privileges",
            "--label",
            &format!("polyphony.home={label}"),
        ]);
        if let Some(p) = seccomp {
            cmd.args(["--security-opt", &format!("seccomp={p}")]);
        }
        let out = cmd
            .args(["--entrypoint", "/bin/busybox", &image])
            .args(args)
            .output()
            .expect("docker run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    for args in [&["mkdir", "/tmp/x"][..], &["ln", "-s", "x", "/tmp/y"][..]] {
        let (code, text) = run(None, args);
        assert_eq!(
            code,
            Some(0),
            "{args:?} under the engine's default profile: {text}"
        );
        let (code, text) = run(Some(&profile), args);
        assert_ne!(code, Some(0), "{args:?} under the proxy's profile: {text}");
        // EPERM on engines that ignore `defaultErrnoRet` (Docker 20.10), else ENOSYS.
        assert!(
            text.contains("Operation not permitted") || text.contains("Function not implemented"),
            "{args:?} under the proxy's profile: {text}"
        );
    }
    let (code, text) = run(Some(&profile), &["echo", "allowed"]);
    assert_eq!(
        (code, text.trim()),
        (Some(0), "allowed"),
        "a listed call works"
    );
    rt.egress_down(&one.proxy_name, &one.network)
        .await
        .expect("egress down");
}

/// An egress proxy image removed while the runtime runs (`docker image prune -a`, or
/// `cleanup --images` in a home of another binary) is built again by the next attempt's
/// proxy instead of failing it. The test's binary is a copy with its own build id
/// (`binary_with_its_own_tag`), so no other test's proxy loses its image meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_image_removed_while_the_runtime_runs_is_built_again() {
    use polyphony::runtime::proxy_image::image_tag;
    let Some(rt) = support::docker::engine().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = binary_with_its_own_tag(dir.path(), 0xff);
    let tag = image_tag(&copy).expect("tag");
    assert_ne!(tag, image_tag(std::path::Path::new(BIN)).unwrap());
    let rt: DockerRuntime = rt.with_proxy_binary(&copy);
    let pid = std::process::id();
    let label = format!("egressimage{pid:08x}");
    let out = Net::create(&format!("polyphony-it-egress-image-{pid}"), false);
    let _leftovers = support::docker::LabelGuard(label.clone());
    let rmi = |tag: &str| {
        Command::new("docker")
            .args(["rmi", "-f", tag])
            .output()
            .expect("docker rmi")
    };
    let one = plan(&label, 1, &out.name, &ProxyConfig::default());
    rt.egress_up(&one).await.expect("egress up");
    rt.egress_down(&one.proxy_name, &one.network)
        .await
        .expect("egress down");
    rmi(&tag);
    assert!(!image_exists(&tag), "{tag} was not removed");
    let two = plan(&label, 2, &out.name, &ProxyConfig::default());
    rt.egress_up(&two)
        .await
        .expect("egress up once its image is gone");
    assert!(image_exists(&tag), "{tag} was not built again");
    rt.egress_down(&two.proxy_name, &two.network)
        .await
        .expect("egress down");
    rmi(&tag);
}

/// A copy of the test's binary with the first byte of its build id XORed with `flip`: its
/// own proxy image tag, whose image no other test uses.
fn binary_with_its_own_tag(dir: &std::path::Path, flip: u8) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let copy = dir.join(format!("polyphony-{flip:02x}"));
    let mut bytes = std::fs::read(BIN).expect("read the binary");
    let id =
        polyphony::runtime::proxy_image::build_id(std::path::Path::new(BIN)).expect("a build id");
    let at = memchr::memmem::find(&bytes, &id).expect("the build id in the file");
    bytes[at] ^= flip;
    std::fs::write(&copy, &bytes).expect("write the copy");
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    copy
}

fn image_exists(tag: &str) -> bool {
    Command::new("docker")
        .args(["image", "inspect", "-f", "{{.Id}}", tag])
        .output()
        .expect("docker image inspect")
        .status
        .success()
}

/// `cleanup --images` removes the egress proxy images of other polyphony binaries (one
/// per upgrade would pile up) and keeps its own binary's and one a container still uses;
/// `--dry-run` only lists. (Images are shared by the engine's homes: other binaries'
/// proxy images on this engine go too, and are built again when next needed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_images_removes_other_binaries_proxy_images_only() {
    use polyphony::runtime::proxy_image::image_tag;
    let Some(rt) = support::docker::engine().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let old = binary_with_its_own_tag(dir.path(), 0x0f);
    let used = binary_with_its_own_tag(dir.path(), 0xf0);
    let ours = rt
        .clone()
        .with_proxy_binary(BIN)
        .proxy_image()
        .await
        .expect("this binary's image");
    assert_eq!(ours, image_tag(std::path::Path::new(BIN)).unwrap());
    let old_tag = rt
        .clone()
        .with_proxy_binary(&old)
        .proxy_image()
        .await
        .expect("an old binary's image");
    let used_tag = rt
        .clone()
        .with_proxy_binary(&used)
        .proxy_image()
        .await
        .expect("a used image");
    let label = format!("egresscleanup{:08x}", std::process::id());
    let user = Command::new("docker")
        .args([
            "create",
            "--label",
            &format!("polyphony.home={label}"),
            &used_tag,
        ])
        .output()
        .expect("docker create");
    assert!(user.status.success(), "{}", support::home::output(&user));
    let user = String::from_utf8_lossy(&user.stdout).trim().to_string();
    let (hdir, hpath) = support::home::Home::temp();
    let home = support::home::Home::at(hdir, hpath, None);
    let json = |args: &[&str]| {
        let home = &home;
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        async move {
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = home.cmd(&argv).output().await.expect("polyphony cleanup");
            assert!(out.status.success(), "{}", support::home::output(&out));
            serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")
        }
    };
    let refs = |v: &serde_json::Value| -> Vec<String> {
        v["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["reference"].as_str().unwrap().to_string())
            .collect()
    };
    let dry = json(&["cleanup", "--images", "--dry-run", "--json"]).await;
    assert!(refs(&dry).contains(&old_tag), "{dry}");
    assert!(!refs(&dry).contains(&ours), "{dry}");
    assert!(image_exists(&old_tag), "a dry run removed {old_tag}");
    let done = json(&["cleanup", "--images", "--json"]).await;
    let _ = Command::new("docker").args(["rm", "-f", &user]).output();
    let _ = Command::new("docker")
        .args(["rmi", "-f", &used_tag])
        .output();
    assert!(refs(&done).contains(&old_tag), "{done}");
    assert!(!image_exists(&old_tag), "{old_tag} left");
    assert!(image_exists(&ours), "this binary's own image was removed");
    let kept: Vec<&str> = done["kept"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["what"].as_str().unwrap())
        .collect();
    assert!(kept.contains(&format!("image {ours}").as_str()), "{done}");
    assert!(
        kept.contains(&format!("image {used_tag}").as_str()),
        "an image a container uses is kept: {done}"
    );
    assert!(done["bytes_freed"].as_u64().unwrap() > 0, "{done}");
    // Without --images, images are not cleanup's business.
    let plain = json(&["cleanup", "--json"]).await;
    assert!(refs(&plain).is_empty(), "{plain}");
}
