//! A store's faults: a real full disk (a 2 MiB tmpfs filled until the store's writes fail,
//! then freed: the same writes tried again succeed without a restart, and the store holds every
//! task once; mounting needs root: without it the test says so and passes, CI runs as root),
//! and a record that cannot be read (left out, reported and moved aside; the rest loads).

use agentwire_queue::{FileStore, QueueName, QueueStore, StoreOp, TaskId, TaskRecord};

fn task(id: u64) -> TaskRecord {
    TaskRecord {
        id: TaskId(id),
        queue: QueueName::new("jobs").unwrap(),
        sender: "producer".into(),
        producer_id: None,
        attempts: 0,
        enqueued_unix_ms: 1,
        dead: None,
        body: vec![0xa5; 16 * 1024].into(),
    }
}

#[path = "support/tmpfs.rs"]
mod tmpfs;

#[test]
fn a_full_disk_then_freed_heals_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_mount) = tmpfs::Tmpfs::mount(dir.path(), "2m") else {
        return;
    };
    let mut store = FileStore::open(&dir.path().join("store")).unwrap();
    // Fill the disk with something else.
    let filler = dir.path().join("filler");
    let _ = std::fs::write(&filler, vec![0u8; 2 * 1024 * 1024]);

    let mut stored = 0u64;
    let failed_at = loop {
        let id = stored + 1;
        match store.apply(&[StoreOp::Put(task(id))]) {
            Ok(()) => stored = id,
            Err(e) => break (id, e.to_string()),
        }
        assert!(stored < 1000, "the disk never filled");
    };
    assert!(failed_at.1.contains("queues.redb"), "{}", failed_at.1);
    // Still full: still refused, and nothing breaks.
    assert!(store.apply(&[StoreOp::Put(task(failed_at.0))]).is_err());

    // Space again: the same write succeeds on the same store, and so do later ones.
    std::fs::remove_file(&filler).unwrap();
    store.apply(&[StoreOp::Put(task(failed_at.0))]).unwrap();
    store.apply(&[StoreOp::Put(task(failed_at.0 + 1))]).unwrap();
    let ids: Vec<u64> = store.load().unwrap().tasks.iter().map(|t| t.id.0).collect();
    let expected: Vec<u64> = (1..=failed_at.0 + 1).collect();
    assert_eq!(ids, expected, "every task once");
}

#[test]
fn a_bad_record_is_set_aside_and_the_rest_loads() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = FileStore::open(dir.path()).unwrap();
        store
            .apply(&[1, 2, 3].map(|id| StoreOp::Put(task(id))))
            .unwrap();
    }
    // Damage task 2's record in the file itself.
    {
        const TASKS: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("tasks");
        let db = redb::Database::create(dir.path().join("queues.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(TASKS)
            .unwrap()
            .insert(2, &[0xffu8, 0xfe, 0x00][..])
            .unwrap();
        txn.commit().unwrap();
    }
    let mut store = FileStore::open(dir.path()).unwrap();
    let loaded = store.load().unwrap();
    let ids: Vec<u64> = loaded.tasks.iter().map(|t| t.id.0).collect();
    assert_eq!(ids, [1, 3]);
    assert_eq!(loaded.quarantined.len(), 1);
    assert_eq!(loaded.quarantined[0].key, "task 2");
    assert!(
        loaded.next_id >= 4,
        "the bad record's id is never given out again"
    );
    // Moved aside: the next load does not meet it again.
    let again = store.load().unwrap();
    assert!(again.quarantined.is_empty());
    assert_eq!(again.tasks.len(), 2);
}
