//! A task as it is stored: its fields and their byte layout in a store.
//!
//! Owns the encoding only (version 1, little-endian, length-prefixed); it must not decide
//! anything about delivery. A record that does not parse is a [`RecordError`], never a panic:
//! a damaged store must make the hub refuse to start with a clear sentence, not crash.

use bytes::Bytes;

use crate::model::{QueueName, TaskId};

const VERSION: u8 = 1;
const HAS_PRODUCER: u8 = 1;
const IS_DEAD: u8 = 2;

/// One stored task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRecord {
    /// Its id (the store's key).
    pub id: TaskId,
    /// Its queue.
    pub queue: QueueName,
    /// Who sent it (an agent id; empty when unknown).
    pub sender: String,
    /// The producer's id for duplicate detection, if it gave one.
    pub producer_id: Option<String>,
    /// Failed deliveries so far (an attempt cut short by a hub crash is not counted).
    pub attempts: u32,
    /// When it was enqueued (Unix ms).
    pub enqueued_unix_ms: u64,
    /// `Some(reason)` once it is a dead letter.
    pub dead: Option<String>,
    /// Its bytes.
    pub body: Bytes,
}

/// A stored record that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// It ends before a field it announces.
    #[error("record is cut short (at byte {0})")]
    Truncated(usize),
    /// It was written by a newer agentwire.
    #[error("record version {0} is unknown (this build reads version 1)")]
    Version(u8),
    /// A text field is not UTF-8, or the queue name is not a valid one.
    #[error("record has a bad {0} field")]
    BadField(&'static str),
    /// Bytes follow the last field.
    #[error("record has {0} bytes after its end")]
    Trailing(usize),
}

impl TaskRecord {
    /// The stored bytes (without the id, which is the key).
    ///
    /// ```
    /// use agentwire_queue::{QueueName, TaskId, TaskRecord};
    /// let r = TaskRecord {
    ///     id: TaskId(7),
    ///     queue: QueueName::new("jobs").unwrap(),
    ///     sender: "coordinator".into(),
    ///     producer_id: Some("order-7".into()),
    ///     attempts: 2,
    ///     enqueued_unix_ms: 1_700_000_000_000,
    ///     dead: None,
    ///     body: "resize".into(),
    /// };
    /// assert_eq!(TaskRecord::decode(TaskId(7), &r.encode()).unwrap(), r);
    /// ```
    pub fn encode(&self) -> Vec<u8> {
        let extra = self.producer_id.as_ref().map_or(0, |p| p.len() + 2)
            + self.dead.as_ref().map_or(0, |d| d.len() + 2);
        let mut out = Vec::with_capacity(20 + self.queue.as_str().len() + extra + self.body.len());
        out.push(VERSION);
        let mut flags = 0;
        if self.producer_id.is_some() {
            flags |= HAS_PRODUCER;
        }
        if self.dead.is_some() {
            flags |= IS_DEAD;
        }
        out.push(flags);
        out.extend_from_slice(&self.attempts.to_le_bytes());
        out.extend_from_slice(&self.enqueued_unix_ms.to_le_bytes());
        put_short(&mut out, self.queue.as_str());
        put_short(&mut out, &self.sender);
        if let Some(p) = &self.producer_id {
            put_short(&mut out, p);
        }
        if let Some(d) = &self.dead {
            put_short(&mut out, d);
        }
        let len = u32::try_from(self.body.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&self.body[..len as usize]);
        out
    }

    /// Reads what [`encode`](Self::encode) wrote.
    pub fn decode(id: TaskId, bytes: &[u8]) -> Result<Self, RecordError> {
        let mut r = Reader { bytes, at: 0 };
        let version = r.u8()?;
        if version != VERSION {
            return Err(RecordError::Version(version));
        }
        let flags = r.u8()?;
        let attempts = u32::from_le_bytes(r.array()?);
        let enqueued_unix_ms = u64::from_le_bytes(r.array()?);
        let queue =
            QueueName::new(r.short_str("queue")?).map_err(|_| RecordError::BadField("queue"))?;
        let sender = r.short_str("sender")?.to_string();
        let producer_id = if flags & HAS_PRODUCER != 0 {
            Some(r.short_str("producer id")?.to_string())
        } else {
            None
        };
        let dead = if flags & IS_DEAD != 0 {
            Some(r.short_str("dead reason")?.to_string())
        } else {
            None
        };
        let len = u32::from_le_bytes(r.array()?) as usize;
        let body = Bytes::copy_from_slice(r.take(len)?);
        if r.at != bytes.len() {
            return Err(RecordError::Trailing(bytes.len() - r.at));
        }
        Ok(TaskRecord {
            id,
            queue,
            sender,
            producer_id,
            attempts,
            enqueued_unix_ms,
            dead,
            body,
        })
    }
}

/// A string of at most 65,535 bytes (longer ones are cut at a character boundary; names and
/// ids are far shorter, and their limits are checked before they get here).
fn put_short(out: &mut Vec<u8>, s: &str) {
    let mut end = s.len().min(u16::MAX as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&(end as u16).to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..end]);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or(RecordError::Truncated(self.at))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, RecordError> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], RecordError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn short_str(&mut self, field: &'static str) -> Result<&'a str, RecordError> {
        let len = u16::from_le_bytes(self.array()?) as usize;
        std::str::from_utf8(self.take(len)?).map_err(|_| RecordError::BadField(field))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record() -> impl Strategy<Value = TaskRecord> {
        (
            any::<u64>(),
            "[a-z.]{1,20}",
            ".{0,20}",
            proptest::option::of(".{0,40}"),
            any::<u32>(),
            any::<u64>(),
            proptest::option::of("[a-z-]{0,20}"),
            proptest::collection::vec(any::<u8>(), 0..300),
        )
            .prop_map(|(id, q, sender, p, attempts, ms, dead, body)| TaskRecord {
                id: TaskId(id),
                queue: QueueName::new(&q).unwrap(),
                sender,
                producer_id: p,
                attempts,
                enqueued_unix_ms: ms,
                dead,
                body: body.into(),
            })
    }

    proptest! {
        #[test]
        fn every_record_reads_back(r in record()) {
            prop_assert_eq!(TaskRecord::decode(r.id, &r.encode()).unwrap(), r);
        }

        #[test]
        fn damaged_records_are_errors_not_panics(r in record(), cut in any::<prop::sample::Index>(), flip in any::<(prop::sample::Index, u8)>()) {
            let bytes = r.encode();
            let _ = TaskRecord::decode(r.id, &bytes[..cut.index(bytes.len())]);
            let mut damaged = bytes.clone();
            let at = flip.0.index(damaged.len());
            damaged[at] ^= flip.1 | 1;
            let _ = TaskRecord::decode(r.id, &damaged);
        }
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert_eq!(
            TaskRecord::decode(TaskId(1), &[]),
            Err(RecordError::Truncated(0))
        );
        assert_eq!(
            TaskRecord::decode(TaskId(1), &[9]),
            Err(RecordError::Version(9))
        );
        let r = TaskRecord {
            id: TaskId(1),
            queue: QueueName::new("q").unwrap(),
            sender: String::new(),
            producer_id: None,
            attempts: 0,
            enqueued_unix_ms: 0,
            dead: None,
            body: Bytes::from_static(b"x"),
        };
        let mut b = r.encode();
        b.push(0);
        assert_eq!(
            TaskRecord::decode(TaskId(1), &b),
            Err(RecordError::Trailing(1))
        );
    }
}
