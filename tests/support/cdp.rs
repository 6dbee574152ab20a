//! A real headless Chromium driven over the DevTools protocol on a pipe
//! (`--remote-debugging-pipe`: commands in on fd 3, answers out on fd 4, each a JSON
//! message ended by NUL), so a test can navigate, click real buttons, submit real forms
//! (with the browser's own `Origin`, cookies and SameSite rules), wait in real time for a
//! live page to change, and take screenshots. No crate, no port, no virtual time.
//!
//! Blocking: call it from a plain thread or `spawn_blocking`.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// `chromium` (or `chromium-browser`) on PATH.
pub fn chromium() -> Option<PathBuf> {
    for name in ["chromium", "chromium-browser"] {
        let found = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join(name))
                .find(|p| p.is_file())
        });
        if found.is_some() {
            return found;
        }
    }
    None
}

pub struct Browser {
    child: Child,
    to: std::fs::File,
    from: Receiver<Value>,
    next: u64,
    session: String,
    _profile: tempfile::TempDir,
}

fn pipe() -> (RawFd, RawFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid two-element array for pipe2 to fill.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2 failed");
    // Move both ends above 10, so the child's dup2 onto 3 and 4 never meets them.
    let high = |fd: RawFd| {
        // SAFETY: fd is open; F_DUPFD_CLOEXEC returns a new descriptor or -1.
        let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
        assert!(new >= 10);
        // SAFETY: fd is ours and no longer needed.
        unsafe { libc::close(fd) };
        new
    };
    (high(fds[0]), high(fds[1]))
}

impl Browser {
    /// Starts Chromium with a window of `width` × `height` CSS pixels and attaches to its
    /// first page.
    pub fn launch(binary: &Path, width: u32, height: u32) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let (cmd_read, cmd_write) = pipe();
        let (out_read, out_write) = pipe();
        let mut command = Command::new(binary);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("--window-size={width},{height}"))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls (dup2) between fork and exec.
        unsafe {
            command.pre_exec(move || {
                if libc::dup2(cmd_read, 3) < 0 || libc::dup2(out_write, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("chromium starts");
        // SAFETY: the child has its copies; these ends are ours alone.
        unsafe {
            libc::close(cmd_read);
            libc::close(out_write);
        }
        // SAFETY: each descriptor is open and owned by exactly one File from here on.
        let to = unsafe { std::fs::File::from_raw_fd(cmd_write) };
        let mut out = unsafe { std::fs::File::from_raw_fd(out_read) };
        let (tx, from) = channel();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 65536];
            loop {
                let n = match out.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                buf.extend_from_slice(&chunk[..n]);
                while let Some(end) = buf.iter().position(|b| *b == 0) {
                    let msg: Vec<u8> = buf.drain(..=end).collect();
                    if let Ok(v) = serde_json::from_slice::<Value>(&msg[..msg.len() - 1]) {
                        if tx.send(v).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let mut b = Browser {
            child,
            to,
            from,
            next: 0,
            session: String::new(),
            _profile: profile,
        };
        let targets = b.call_browser("Target.getTargets", json!({}));
        let page = targets["targetInfos"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["type"] == "page"))
            .map(|t| t["targetId"].clone())
            .expect("a page target");
        let attached = b.call_browser(
            "Target.attachToTarget",
            json!({"targetId": page, "flatten": true}),
        );
        b.session = attached["sessionId"].as_str().unwrap().to_string();
        b.call("Page.enable", json!({}));
        b.call("Runtime.enable", json!({}));
        b.set_viewport(width, height);
        b
    }

    fn send(&mut self, method: &str, params: Value, session: Option<String>) -> Value {
        match self.send_result(method, params, session) {
            Ok(v) => v,
            Err(e) => panic!("{method} failed: {e}"),
        }
    }

    /// `send`, with Chromium's error answer returned instead of a panic.
    fn send_result(
        &mut self,
        method: &str,
        params: Value,
        session: Option<String>,
    ) -> Result<Value, Value> {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = Value::String(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).expect("chromium takes commands");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.from.recv_timeout(left) {
                Ok(v) if v["id"] == id => {
                    if let Some(e) = v.get("error") {
                        return Err(e.clone());
                    }
                    return Ok(v["result"].clone());
                }
                Ok(_) => continue,
                Err(RecvTimeoutError::Timeout) => panic!("{method}: no answer in 60 s"),
                Err(RecvTimeoutError::Disconnected) => panic!("{method}: chromium went away"),
            }
        }
    }

    fn call_browser(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, None)
    }

    /// A command to the attached page.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let s = self.session.clone();
        self.send(method, params, Some(s))
    }

    pub fn set_viewport(&mut self, width: u32, height: u32) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600}),
        );
    }

    /// Evaluates `js` in the page (promises awaited) and returns its value.
    pub fn eval(&mut self, js: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": js, "awaitPromise": true, "returnByValue": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("script failed: {js}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Opens `url` and waits until its document has loaded.
    pub fn goto(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url}));
        self.wait_loaded();
    }

    /// Waits until the current document (after a navigation or a form submission) is
    /// complete.
    pub fn wait_loaded(&mut self) {
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            self.wait_for(
                "document.readyState === 'complete'",
                Duration::from_secs(30)
            ),
            "the page did not load"
        );
    }

    /// Polls `js` until it is `true` or `timeout` passes; returns whether it became true.
    pub fn wait_for(&mut self, js: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.session.clone();
            // A form submission may still be replacing the document: Chromium then answers
            // "Inspected target navigated or closed" (or a destroyed context), which only
            // means "not yet".
            match self.send_result(
                "Runtime.evaluate",
                json!({"expression": js, "returnByValue": true}),
                Some(s),
            ) {
                Ok(r) if r["result"]["value"] == Value::Bool(true) => return true,
                Ok(_) => {}
                Err(e) => {
                    let m = e["message"].as_str().unwrap_or("");
                    if !(m.contains("navigated or closed") || m.contains("context")) {
                        panic!("Runtime.evaluate failed: {e}");
                    }
                }
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The serialized DOM.
    pub fn html(&mut self) -> String {
        self.eval("document.documentElement.outerHTML")
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Text of the first element matching `selector` (`None` when there is none).
    pub fn text(&mut self, selector: &str) -> Option<String> {
        let js = format!(
            "(function(){{var e=document.querySelector({});return e?e.textContent:null}})()",
            serde_json::to_string(selector).unwrap()
        );
        self.eval(&js).as_str().map(str::to_string)
    }

    /// Runs `js` (a click, a form submission) and waits until it has loaded a new document.
    pub fn navigate_by(&mut self, js: &str) {
        self.eval("window.__cdp_old = true");
        self.eval(js);
        assert!(
            self.wait_for(
                "window.__cdp_old === undefined && document.readyState === 'complete'",
                Duration::from_secs(30)
            ),
            "`{js}` did not load a new page"
        );
    }

    /// Clicks `selector` and waits for the page it loads.
    pub fn click_through(&mut self, selector: &str) {
        let js = format!(
            "document.querySelector({}).click()",
            serde_json::to_string(selector).unwrap()
        );
        self.navigate_by(&js);
    }

    /// Clicks the first element matching `selector` (a real click event).
    pub fn click(&mut self, selector: &str) {
        let js = format!(
            "(function(){{var e=document.querySelector({});if(!e)return false;e.click();return true}})()",
            serde_json::to_string(selector).unwrap()
        );
        assert_eq!(
            self.eval(&js),
            Value::Bool(true),
            "nothing matches {selector}"
        );
    }

    /// A PNG of the whole page at the current width.
    pub fn screenshot(&mut self, path: &Path, width: u32) {
        let height = self
            .eval("Math.ceil(document.documentElement.scrollHeight)")
            .as_u64()
            .unwrap_or(900) as u32;
        self.set_viewport(width, height.clamp(200, 6000));
        std::thread::sleep(Duration::from_millis(300));
        let shot = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true}),
        );
        use base64::Engine as _;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
