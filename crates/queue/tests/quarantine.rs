//! One unreadable task record does not stop a store from loading: it is left out, reported
//! and moved aside, and every other task loads.

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
        body: format!("task {id}").into_bytes().into(),
    }
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
