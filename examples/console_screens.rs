//! Regenerates the console's screenshots (scripts/screenshots.sh): seeds a home with the
//! same data the browser tests check (tests/support/console_seed.rs), serves it with a
//! token, signs in as `ana` in a real headless Chromium and captures the front page at
//! desktop and phone width and a task page.
//!
//! Usage: cargo run --example console_screens -- OUT_DIR

#[path = "../tests/support/cdp.rs"]
mod cdp;
#[path = "../tests/support/console_seed.rs"]
mod console_seed;

use std::net::SocketAddr;
use std::path::PathBuf;

use chrono::Utc;
use polyphony::http::{self, ServerSettings};
use polyphony::store::Store;

const TOKEN: &str = "screenshot-token";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let out = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "docs".into()));
    let binary = cdp::chromium().expect("chromium on PATH (apt-get install -y chromium)");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    let store = Store::open(&db).unwrap();
    console_seed::seed(&store, Utc::now(), dir.path());
    let settings = ServerSettings {
        home: dir.path().to_path_buf(),
        db: polyphony::store::StoreHandle::sqlite(db),
        body_limit: 256 * 1024,
        machine: "test-machine".into(),
        token: Some(TOKEN.into()),
        token_for_reads: false,
        slots: 2,
        identities: console_seed::identities(),
        hosts: http::HostPolicy::loopback(),
        streams: http::StreamLimits::default(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            http::router(settings).into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    tokio::task::spawn_blocking(move || {
        let mut b = cdp::Browser::launch(&binary, 1280, 900);
        b.goto(&format!("http://{addr}/login?next=/"));
        b.eval(&format!(
            "document.querySelector('input[name=token]').value = '{TOKEN}'"
        ));
        b.eval("document.querySelector('input[name=name]').value = 'ana'");
        b.click_through("form.login button");
        let shots = [
            ("/", 1280, "dashboard.png"),
            ("/tasks/local-1", 1280, "dashboard-task.png"),
            ("/", 420, "dashboard-phone.png"),
            ("/tasks/local-3", 420, "dashboard-task-phone.png"),
        ];
        for (path, width, name) in shots {
            b.set_viewport(width, 900);
            b.goto(&format!("http://{addr}{path}"));
            std::thread::sleep(std::time::Duration::from_millis(500));
            let file = out.join(name);
            b.screenshot(&file, width);
            println!("wrote {}", file.display());
        }
    })
    .await
    .unwrap();
}
