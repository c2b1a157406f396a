//! [`FileStore`]: queues kept in one redb file, `queues.redb` in the store directory.
//!
//! Owns the file and the mapping of [`StoreOp`]s to redb tables. Why redb: one file, pure Rust,
//! ACID transactions whose commit is durable when it returns (copy-on-write B-trees with
//! checksummed commits, so a crash leaves the last committed state, never a torn one), a
//! stable file format, and no background threads. fjall (an LSM tree) writes faster under
//! heavy load but keeps a journal, several files and compaction threads; a work queue's
//! records are short-lived, which a B-tree that frees pages on commit handles without
//! compaction. It must not decide anything about delivery.

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::model::{QueueName, TaskId};
use crate::record::TaskRecord;
use crate::store::{DedupeRecord, QueueStore, Recovered, StoreError, StoreOp};

/// Task id → [`TaskRecord::encode`]'s bytes.
const TASKS: TableDefinition<u64, &[u8]> = TableDefinition::new("tasks");
/// `queue` + `\n` + producer id → (task id, window end in Unix ms). Queue names have no
/// whitespace, so the first `\n` ends the name.
const DEDUPE: TableDefinition<&str, (u64, u64)> = TableDefinition::new("dedupe");
/// `next_id` → the lowest task id never given out.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Task records that could not be read at a load, moved aside (key: the task id), for a
/// person to look at: they no longer stop the queues from loading.
const QUARANTINE: TableDefinition<u64, &[u8]> = TableDefinition::new("quarantine");

/// The file name inside the store directory.
pub const FILE_NAME: &str = "queues.redb";

/// Queues in one redb file.
///
/// ```
/// use agentwire_queue::{FileStore, QueueStore};
/// let dir = tempfile::tempdir().unwrap();
/// let mut store = FileStore::open(dir.path()).unwrap();
/// assert_eq!(store.load().unwrap().next_id, 0);
/// assert!(store.path().ends_with("queues.redb"));
/// ```
pub struct FileStore {
    /// `None` after a failed write whose reopening failed too (the next write reopens it).
    db: Option<Database>,
    path: PathBuf,
}

impl FileStore {
    /// Opens `dir/queues.redb`, creating the directory and the file if needed, and checks
    /// that the file can be written. A damaged file, a file of another kind, or a directory
    /// that cannot be written is an error that names the file.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let path = dir.join(FILE_NAME);
        let open_error = |source: Box<dyn std::error::Error + Send + Sync>| StoreError::Open {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(|e| open_error(Box::new(e)))?;
        let db = Database::create(&path).map_err(|e| open_error(Box::new(redb::Error::from(e))))?;
        // Creates the tables on first use, and fails now (not at the first task) when the file
        // cannot be written.
        let create = || -> Result<(), redb::Error> {
            let txn = db.begin_write()?;
            txn.open_table(TASKS)?;
            txn.open_table(DEDUPE)?;
            txn.open_table(META)?;
            txn.commit()?;
            Ok(())
        };
        create().map_err(|e| open_error(Box::new(e)))?;
        Ok(FileStore { db: Some(db), path })
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read_error(&self, e: impl Into<redb::Error>) -> StoreError {
        StoreError::Read {
            path: self.path.clone(),
            source: Box::new(e.into()),
        }
    }

    /// The database, opened again if a failed write closed it.
    fn db(&mut self) -> Result<&Database, redb::Error> {
        let db = match self.db.take() {
            Some(db) => db,
            None => Database::create(&self.path)?,
        };
        Ok(self.db.insert(db))
    }

    /// Moves unreadable task records (id, bytes) from the tasks to the quarantine table.
    fn quarantine(&mut self, bad: &[(u64, Vec<u8>, String)]) -> Result<(), redb::Error> {
        let txn = self.db()?.begin_write()?;
        {
            let mut tasks = txn.open_table(TASKS)?;
            let mut aside = txn.open_table(QUARANTINE)?;
            for (id, bytes, _) in bad {
                aside.insert(*id, bytes.as_slice())?;
                tasks.remove(*id)?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn write(&mut self, ops: &[StoreOp]) -> Result<(), redb::Error> {
        let txn = self.db()?.begin_write()?;
        {
            let mut tasks = txn.open_table(TASKS)?;
            let mut dedupe = txn.open_table(DEDUPE)?;
            let mut next_id = None::<u64>;
            for op in ops {
                match op {
                    StoreOp::Put(r) => {
                        tasks.insert(r.id.0, r.encode().as_slice())?;
                        let after = r.id.0.saturating_add(1);
                        next_id = Some(next_id.map_or(after, |n| n.max(after)));
                    }
                    StoreOp::Delete(id) => {
                        tasks.remove(id.0)?;
                    }
                    StoreOp::PutDedupe(d) => {
                        let key = dedupe_key(&d.queue, &d.producer_id);
                        dedupe.insert(key.as_str(), (d.task.0, d.expires_unix_ms))?;
                    }
                    StoreOp::DeleteDedupe { queue, producer_id } => {
                        dedupe.remove(dedupe_key(queue, producer_id).as_str())?;
                    }
                }
            }
            if let Some(n) = next_id {
                let mut meta = txn.open_table(META)?;
                let stored = meta.get("next_id")?.map_or(0, |v| v.value());
                if n > stored {
                    meta.insert("next_id", n)?;
                }
            }
        }
        txn.commit()?;
        Ok(())
    }
}

fn dedupe_key(queue: &QueueName, producer_id: &str) -> String {
    let mut k = String::with_capacity(queue.as_str().len() + 1 + producer_id.len());
    k.push_str(queue.as_str());
    k.push('\n');
    k.push_str(producer_id);
    k
}

impl QueueStore for FileStore {
    fn load(&mut self) -> Result<Recovered, StoreError> {
        let txn = match self.db() {
            Ok(db) => db.begin_read(),
            Err(e) => return Err(self.read_error(e)),
        }
        .map_err(|e| self.read_error(e))?;
        let tasks_table = txn.open_table(TASKS).map_err(|e| self.read_error(e))?;
        let mut tasks = Vec::new();
        let mut bad: Vec<(u64, Vec<u8>, String)> = Vec::new();
        for item in tasks_table.iter().map_err(|e| self.read_error(e))? {
            let (k, v) = item.map_err(|e| self.read_error(e))?;
            let id = TaskId(k.value());
            match TaskRecord::decode(id, v.value()) {
                Ok(record) => tasks.push(record),
                Err(e) => bad.push((id.0, v.value().to_vec(), e.to_string())),
            }
        }
        let dedupe_table = txn.open_table(DEDUPE).map_err(|e| self.read_error(e))?;
        let mut dedupe = Vec::new();
        for item in dedupe_table.iter().map_err(|e| self.read_error(e))? {
            let (k, v) = item.map_err(|e| self.read_error(e))?;
            let key = k.value();
            let (task, expires_unix_ms) = v.value();
            // A key without a valid queue name cannot come from `apply`: skip it rather than
            // refuse the store (it only weakens duplicate detection for one producer id).
            let Some((queue, producer_id)) = key.split_once('\n') else {
                continue;
            };
            let Ok(queue) = QueueName::new(queue) else {
                continue;
            };
            dedupe.push(DedupeRecord {
                queue,
                producer_id: producer_id.to_string(),
                task: TaskId(task),
                expires_unix_ms,
            });
        }
        let meta = txn.open_table(META).map_err(|e| self.read_error(e))?;
        let stored_next = meta
            .get("next_id")
            .map_err(|e| self.read_error(e))?
            .map_or(0, |v| v.value());
        let after_tasks = tasks
            .last()
            .map(|t| t.id.0)
            .into_iter()
            .chain(bad.iter().map(|b| b.0))
            .max()
            .map_or(0, |id| id.saturating_add(1));
        drop(txn);
        // Moved aside so that later loads do not meet them again; a failure here (a full disk)
        // leaves them in place, to be set aside at the next load, and says so.
        let left = match bad.is_empty() {
            true => None,
            false => self.quarantine(&bad).err(),
        };
        let quarantined = bad
            .iter()
            .map(|(id, _, why)| crate::store::Quarantined {
                key: format!("task {id}"),
                reason: match &left {
                    None => why.clone(),
                    Some(e) => format!("{why} (left in place: {e})"),
                },
            })
            .collect();
        Ok(Recovered {
            tasks,
            dedupe,
            next_id: stored_next.max(after_tasks),
            quarantined,
        })
    }

    fn apply(&mut self, ops: &[StoreOp]) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        self.write(ops).map_err(|e| {
            // After a failed commit (a full disk, say) redb refuses every later write until
            // the file is opened again: close it now, so that the next try opens it afresh
            // (and repairs it) and can succeed once the cause is gone.
            self.db = None;
            StoreError::Write {
                path: self.path.clone(),
                source: Box::new(e),
            }
        })
    }
}
