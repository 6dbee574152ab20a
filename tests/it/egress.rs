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
    }
}

/// Runs `script` with busybox sh in the test image on `network`, with `env`; its stdout.
fn probe(image: &str, network: &str, env: &[(String, String)], script: &str) -> String {
    let mut cmd = Command::new("docker");
    cmd.args([
        "run",
        "--rm",
        "--network",
        network,
        "--entrypoint",
        "/bin/sh",
    ]);
    for (k, v) in env {
        cmd.args(["-e", &format!("{k}={v}")]);
    }
    cmd.args([image, "-c", script]);
    let out = cmd.output().expect("docker run");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no `{key}=` in the probe's output:\n{out}"))
}

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
    let (port, hits) = server(out.gateway).await;
    // A UDP listener on the same host address: a datagram from the probe must never arrive.
    let udp = tokio::net::UdpSocket::bind((out.gateway, 0))
        .await
        .expect("udp");
    let uport = udp.local_addr().unwrap().port();
    let datagrams = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = datagrams.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while udp.recv_from(&mut buf).await.is_ok() {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
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
    let env = polyphony::egress::agent_env(a.proxy_ip);
    let proxy = a.proxy_ip;
    let gw = out.gateway;
    let bridge = "172.17.0.1";
    let other = b.proxy_ip;
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
echo "direct_bridge=$(r nc -w 3 {bridge} 2375 </dev/null)"
echo "direct_other_attempt=$(r nc -w 3 {other} 3128 </dev/null)"
echo "direct_name=$(r wget -q -T 3 -O - http://model.test:{port}/)"
echo "udp_server=$(echo ping | nc -u -w 2 {gw} {uport}; echo sent)"
echo "dns_default=$(r nslookup model.test)"
echo "dns_gateway=$(r nslookup example.com {gw})"
echo "dns_public=$(r nslookup example.com 8.8.8.8)"
echo "docker_socket=$(r test -e /var/run/docker.sock -o -e /run/docker.sock)"
"#
    );
    let hits_before = hits.load(std::sync::atomic::Ordering::SeqCst);
    let result = probe(&image, &one.network, &env, &script);
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
        "direct_bridge",
        "direct_other_attempt",
        "direct_name",
        "dns_default",
        "dns_gateway",
        "dns_public",
        "docker_socket",
    ] {
        assert_eq!(line(&result, key), "fail", "{key}: {result}");
    }
    assert_eq!(line(&result, "udp_server"), "sent", "{result}");
    assert_eq!(
        datagrams.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "a UDP datagram got out"
    );
    // The server saw the two allowed connections (the proxy's) and no direct one.
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst) - hits_before,
        2,
        "{result}"
    );
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
