//! Issue 12: the queue database's health, in a process of its own (a damaged database is
//! remembered process-wide by `store::damaged`). A damaged file is recognised on any query
//! and never taken for an empty or healthy queue; a backup taken while another connection
//! keeps writing is a consistent, checked copy.

mod support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use chrono::Utc;
use polyphony::domain::Task;
use polyphony::store::Store;
use support::spec::local_task;

fn task(id: &str, body_len: usize) -> Task {
    let mut t = local_task(id, Utc::now());
    t.body = "lorem ipsum ".repeat(body_len / 12);
    t
}

fn fill(db: &Path, n: usize) {
    let store = Store::open(db).unwrap();
    for i in 0..n {
        assert!(store
            .insert_task(&task(&format!("local-{i}"), 2000))
            .unwrap());
    }
}

#[test]
fn damage_is_recognised_and_remembered() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    fill(&db, 60);
    {
        let store = Store::open(&db).unwrap();
        assert!(store.check_integrity(true).unwrap().is_empty());
        // Remembered, then the damage below changes the file: checked again.
        store.ensure_sound().unwrap().remember();
    }
    let mut bytes = std::fs::read(&db).unwrap();
    let len = bytes.len();
    for b in &mut bytes[4096 * 3..len - 4096] {
        *b = 0xA5;
    }
    std::fs::write(&db, bytes).unwrap();

    // Opening may already meet the damage (the schema page); otherwise the check does.
    let err = match Store::open(&db) {
        Err(e) => e,
        Ok(store) => store.ensure_sound().unwrap_err(),
    };
    assert!(err.is_damage(), "{err}");
    assert!(err.to_string().contains("queue.db"), "{err}");
    assert!(polyphony::store::damaged());

    let header = dir.path().join("header.db");
    fill(&header, 1);
    let mut bytes = std::fs::read(&header).unwrap();
    bytes[..100].fill(0xA5);
    std::fs::write(&header, bytes).unwrap();
    let err = Store::open(&header).err().expect("not a database");
    assert!(err.is_damage(), "{err}");
}

#[test]
fn backup_while_another_connection_writes_is_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    fill(&db, 200);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let store = Store::open(&db).unwrap();
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                store.insert_task(&task(&format!("w-{i}"), 500)).unwrap();
                i += 1;
            }
            i
        })
    };
    let store = Store::open(&db).unwrap();
    let copies: Vec<_> = (0..3)
        .map(|n| dir.path().join(format!("copy-{n}.db")))
        .collect();
    for copy in &copies {
        store.backup_to(copy).unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    let written = writer.join().unwrap();
    let mut last = 0;
    for copy in &copies {
        let restored = Store::open(copy).unwrap();
        assert!(restored.check_integrity(true).unwrap().is_empty());
        let count: u64 = restored.count_by_state().unwrap().values().sum();
        assert!(count >= 200 && count >= last, "{count} after {last}");
        assert!(count <= 200 + written as u64);
        last = count;
    }
}

/// Issue 27: a clean verdict is remembered beside the database (owner-only), so `status`
/// does not re-read a large file it just checked; any write changes the files' identity,
/// so the next call checks again and remembers the new identity.
#[test]
fn a_clean_verdict_is_remembered_until_the_files_change() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    fill(&db, 5);
    let marker = dir.path().join("queue.db.sound");
    let store = Store::open(&db).unwrap();
    store.ensure_sound().unwrap();
    assert!(!marker.exists(), "remembered only when the caller says so");
    store.ensure_sound().unwrap().remember();
    let first = std::fs::read_to_string(&marker).expect("verdict remembered");
    let mode = std::fs::metadata(&marker).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    store.ensure_sound().unwrap().remember();
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), first);
    assert!(store.insert_task(&task("local-new", 100)).unwrap());
    store.ensure_sound().unwrap().remember();
    let second = std::fs::read_to_string(&marker).unwrap();
    assert_ne!(
        second, first,
        "a write must invalidate the remembered verdict"
    );
}
