//! [`QueueCore`]: the queues' state machine, sans-IO.
//!
//! Owns which task is ready, waiting for a retry, in flight with which consumer until when, or
//! dead; which consumer gets the next task; producer ids within their duplicate window; and the
//! writes that make all of it durable. It takes the time with every call and reads no clock; it
//! does no I/O: the driver applies [`QueueCore::take_writes`] to a store, then sends the
//! [`QueueAction`]s (see the crate doc for that order).
//!
//! What is durable: a task from its enqueue until its ack (or its discard as a dead letter),
//! its failed-attempt count, and producer ids until their window ends. What is not: which
//! consumer holds a task and until when. After a restart every task that was in flight is
//! ready again, and that interrupted attempt is not counted.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::model::{
    ConsumerId, DeadLetter, DeadLetterPage, Delivery, Enqueue, Enqueued, FailReason, Now,
    QueueAction, QueueConfig, QueueError, QueueName, QueueStats, TaskId, Totals,
};
use crate::record::TaskRecord;
use crate::store::{DedupeRecord, Recovered, StoreOp};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ready,
    Waiting {
        until: Instant,
    },
    InFlight {
        consumer: ConsumerId,
        deadline: Instant,
    },
    Dead,
}

struct Entry {
    record: TaskRecord,
    state: State,
}

#[derive(Default)]
struct Queue {
    ready: BTreeSet<TaskId>,
    /// Consumers with room for another task, in turn order; each at most once (see
    /// `Consumer::queued`); a consumer gone since is skipped when its turn comes.
    turns: VecDeque<ConsumerId>,
    dead: BTreeSet<TaskId>,
    tasks: usize,
    /// Bytes of the bodies of `tasks`.
    bytes: usize,
    waiting: usize,
    in_flight: usize,
    consumers: usize,
}

impl Queue {
    /// Holds tasks or has consumers (an idle entry may be forgotten).
    fn in_use(&self) -> bool {
        self.tasks > 0 || self.consumers > 0
    }
}

struct Consumer {
    queue: QueueName,
    credit: u32,
    in_flight: BTreeSet<TaskId>,
    queued: bool,
}

impl Consumer {
    fn has_room(&self) -> bool {
        self.in_flight.len() < self.credit as usize
    }
}

/// The queues' state machine. See the module doc.
pub struct QueueCore {
    config: QueueConfig,
    tasks: HashMap<TaskId, Entry>,
    queues: HashMap<QueueName, Queue>,
    consumers: HashMap<ConsumerId, Consumer>,
    /// Ack deadlines and backoff ends, one per task at most.
    timers: BTreeSet<(Instant, TaskId)>,
    dedupe: HashMap<(QueueName, String), (TaskId, u64)>,
    /// Producer ids by the end of their window (Unix ms), oldest first.
    dedupe_order: VecDeque<(u64, QueueName, String)>,
    next_id: u64,
    writes: Vec<StoreOp>,
    actions: VecDeque<QueueAction>,
    totals: Totals,
    /// Bytes of the bodies of every task held.
    bytes: usize,
}

impl QueueCore {
    /// A core holding what a store gave back (an empty [`Recovered`] for a new store). Every
    /// task that is not dead is ready; producer ids whose window has ended are dropped (and
    /// their deletion is among the first writes).
    pub fn recover(config: QueueConfig, recovered: Recovered, now: Now) -> Self {
        let mut core = QueueCore {
            config,
            tasks: HashMap::new(),
            queues: HashMap::new(),
            consumers: HashMap::new(),
            timers: BTreeSet::new(),
            dedupe: HashMap::new(),
            dedupe_order: VecDeque::new(),
            next_id: recovered.next_id,
            writes: Vec::new(),
            actions: VecDeque::new(),
            totals: Totals::default(),
            bytes: 0,
        };
        core.config.max_deliver = core.config.max_deliver.max(1);
        for record in recovered.tasks {
            core.next_id = core.next_id.max(record.id.0.saturating_add(1));
            let q = core.queues.entry(record.queue.clone()).or_default();
            q.tasks += 1;
            // Recovered tasks are kept whatever the limits now: only new ones are refused.
            q.bytes += record.body.len();
            core.bytes += record.body.len();
            let state = if record.dead.is_some() {
                q.dead.insert(record.id);
                State::Dead
            } else {
                q.ready.insert(record.id);
                State::Ready
            };
            core.tasks.insert(record.id, Entry { record, state });
        }
        let mut live: Vec<DedupeRecord> = Vec::new();
        for d in recovered.dedupe {
            if d.expires_unix_ms > now.unix_ms {
                live.push(d);
            } else {
                core.writes.push(StoreOp::DeleteDedupe {
                    queue: d.queue,
                    producer_id: d.producer_id,
                });
            }
        }
        live.sort_by_key(|d| d.expires_unix_ms);
        for d in live {
            core.dedupe.insert(
                (d.queue.clone(), d.producer_id.clone()),
                (d.task, d.expires_unix_ms),
            );
            core.dedupe_order
                .push_back((d.expires_unix_ms, d.queue, d.producer_id));
        }
        core
    }

    /// The configuration in force.
    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    /// Bytes of task bodies held, all queues together.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether `queue` may take a task of `len` bytes: within its task count and bytes, the
    /// bytes of all queues, and, for a queue not in use, the number of queues in use.
    fn check_room(&mut self, queue: &QueueName, len: usize) -> Result<(), QueueError> {
        let (tasks, bytes) = self
            .queues
            .get(queue)
            .map_or((0, 0), |q| (q.tasks, q.bytes));
        if tasks >= self.config.max_tasks_per_queue {
            return Err(QueueError::Full {
                queue: queue.to_string(),
                max: self.config.max_tasks_per_queue,
            });
        }
        // An empty queue takes one task of any size the task limit allows.
        if tasks > 0 && bytes.saturating_add(len) > self.config.max_queue_bytes {
            return Err(QueueError::FullBytes {
                queue: queue.to_string(),
                max: self.config.max_queue_bytes,
            });
        }
        if self.bytes.saturating_add(len) > self.config.max_total_bytes {
            return Err(QueueError::AllFull {
                max: self.config.max_total_bytes,
            });
        }
        self.check_queue_count(queue)
    }

    /// A queue not in use may start only while fewer than `max_queues` are (queues left with
    /// neither tasks nor consumers are forgotten first when the count is reached).
    fn check_queue_count(&mut self, queue: &QueueName) -> Result<(), QueueError> {
        if self.queues.get(queue).is_some_and(Queue::in_use) {
            return Ok(());
        }
        if self.queues.len() >= self.config.max_queues {
            self.queues.retain(|_, q| q.in_use());
        }
        if self.queues.len() >= self.config.max_queues && !self.queues.contains_key(queue) {
            return Err(QueueError::TooManyQueues {
                queue: queue.to_string(),
                max: self.config.max_queues,
            });
        }
        Ok(())
    }

    /// Stores a task (or recognises a duplicate producer id) and hands it to a consumer if one
    /// has room. The producer may be told only after [`take_writes`](Self::take_writes) are
    /// durable.
    pub fn enqueue(&mut self, task: Enqueue, now: Now) -> Result<Enqueued, QueueError> {
        self.expire_dedupe(now);
        let queue = QueueName::new(&task.queue)?;
        if task.body.len() > self.config.max_task_bytes {
            return Err(QueueError::TooLarge {
                len: task.body.len(),
                max: self.config.max_task_bytes,
            });
        }
        if let Some(p) = &task.producer_id {
            if p.len() > self.config.max_producer_id {
                return Err(QueueError::ProducerIdTooLong {
                    len: p.len(),
                    max: self.config.max_producer_id,
                });
            }
            if let Some(&(first, _)) = self.dedupe.get(&(queue.clone(), p.clone())) {
                self.totals.duplicates += 1;
                return Ok(Enqueued {
                    task: first,
                    duplicate: true,
                });
            }
        }
        self.check_room(&queue, task.body.len())?;
        let record_len = task.body.len();
        let id = TaskId(self.next_id);
        self.next_id += 1;
        let record = TaskRecord {
            id,
            queue: queue.clone(),
            sender: task.sender,
            producer_id: task.producer_id,
            attempts: 0,
            enqueued_unix_ms: now.unix_ms,
            dead: None,
            body: task.body,
        };
        self.writes.push(StoreOp::Put(record.clone()));
        if let Some(p) = &record.producer_id {
            let window =
                u64::try_from(self.config.duplicate_window.as_millis()).unwrap_or(u64::MAX);
            let expires = now.unix_ms.saturating_add(window);
            self.dedupe
                .insert((queue.clone(), p.clone()), (id, expires));
            self.dedupe_order
                .push_back((expires, queue.clone(), p.clone()));
            self.writes.push(StoreOp::PutDedupe(DedupeRecord {
                queue: queue.clone(),
                producer_id: p.clone(),
                task: id,
                expires_unix_ms: expires,
            }));
            self.cap_producer_ids();
        }
        let q = self.queues.entry(queue.clone()).or_default();
        q.tasks += 1;
        q.bytes += record_len;
        self.bytes += record_len;
        q.ready.insert(id);
        self.tasks.insert(
            id,
            Entry {
                record,
                state: State::Ready,
            },
        );
        self.totals.enqueued += 1;
        self.pump(&queue, now);
        Ok(Enqueued {
            task: id,
            duplicate: false,
        })
    }

    /// Makes `consumer` a consumer of `queue` with room for `credit` tasks in flight at once
    /// (called again with the same queue, it changes the credit). One queue per consumer id.
    pub fn consume(
        &mut self,
        consumer: ConsumerId,
        queue: &str,
        credit: u32,
        now: Now,
    ) -> Result<(), QueueError> {
        if credit == 0 {
            return Err(QueueError::NoCredit);
        }
        let name = QueueName::new(queue)?;
        match self.consumers.get_mut(&consumer) {
            Some(c) if c.queue != name => {
                return Err(QueueError::AlreadyConsuming(c.queue.to_string()))
            }
            Some(c) => c.credit = credit,
            None => {
                self.check_queue_count(&name)?;
                self.consumers.insert(
                    consumer,
                    Consumer {
                        queue: name.clone(),
                        credit,
                        in_flight: BTreeSet::new(),
                        queued: false,
                    },
                );
                self.queues.entry(name.clone()).or_default().consumers += 1;
            }
        }
        self.give_turn(consumer);
        self.pump(&name, now);
        Ok(())
    }

    /// The consumer is done with a task: it is forgotten (and deleted from the store).
    pub fn ack(&mut self, consumer: ConsumerId, task: TaskId, now: Now) -> Result<(), QueueError> {
        self.release(consumer, task)?;
        let Some(entry) = self.tasks.remove(&task) else {
            return Err(QueueError::NotInFlight { task });
        };
        let queue = entry.record.queue;
        let len = entry.record.body.len();
        if let Some(q) = self.queues.get_mut(&queue) {
            q.tasks -= 1;
            q.bytes -= len;
        }
        self.bytes -= len;
        self.writes.push(StoreOp::Delete(task));
        self.totals.acked += 1;
        self.give_turn(consumer);
        self.pump(&queue, now);
        Ok(())
    }

    /// The consumer could not do a task: it counts as a failed attempt and is handed out again
    /// after `delay` (or the configured backoff when `None`), or becomes a dead letter.
    pub fn nack(
        &mut self,
        consumer: ConsumerId,
        task: TaskId,
        delay: Option<Duration>,
        now: Now,
    ) -> Result<(), QueueError> {
        self.release(consumer, task)?;
        let queue = self.fail(task, FailReason::Nacked, delay, now);
        self.give_turn(consumer);
        if let Some(queue) = queue {
            self.pump(&queue, now);
        }
        Ok(())
    }

    /// The consumer is gone (disconnected, or stopped consuming): each task it held counts as
    /// a failed attempt and is handed out again after the backoff, or becomes a dead letter.
    /// Unknown consumers are ignored.
    pub fn consumer_gone(&mut self, consumer: ConsumerId, now: Now) {
        let Some(c) = self.consumers.remove(&consumer) else {
            return;
        };
        if let Some(q) = self.queues.get_mut(&c.queue) {
            q.consumers -= 1;
            q.in_flight -= c.in_flight.len();
        }
        for task in c.in_flight {
            if let Some(entry) = self.tasks.get_mut(&task) {
                if let State::InFlight { deadline, .. } = entry.state {
                    self.timers.remove(&(deadline, task));
                }
            }
            self.fail(task, FailReason::ConsumerGone, None, now);
        }
        self.pump(&c.queue, now);
    }

    /// Ends ack waits and backoffs that are due at `now`.
    pub fn on_timeout(&mut self, now: Now) {
        self.expire_dedupe(now);
        let mut touched: Vec<QueueName> = Vec::new();
        while let Some(&(at, task)) = self.timers.first() {
            if at > now.instant {
                break;
            }
            self.timers.pop_first();
            let Some(entry) = self.tasks.get_mut(&task) else {
                continue;
            };
            match entry.state {
                // A timer is stale unless it is the one the task's state names.
                State::InFlight { consumer, deadline } if deadline == at => {
                    if let Some(c) = self.consumers.get_mut(&consumer) {
                        c.in_flight.remove(&task);
                    }
                    let queue = entry.record.queue.clone();
                    if let Some(q) = self.queues.get_mut(&queue) {
                        q.in_flight -= 1;
                    }
                    self.fail(task, FailReason::AckTimeout, None, now);
                    self.give_turn(consumer);
                    touched.push(queue);
                }
                State::Waiting { until } if until == at => {
                    entry.state = State::Ready;
                    let queue = entry.record.queue.clone();
                    if let Some(q) = self.queues.get_mut(&queue) {
                        q.waiting -= 1;
                        q.ready.insert(task);
                    }
                    touched.push(queue);
                }
                _ => {}
            }
        }
        touched.sort();
        touched.dedup();
        for queue in touched {
            self.pump(&queue, now);
        }
    }

    /// When [`on_timeout`](Self::on_timeout) should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|&(at, _)| at)
    }

    /// The next thing to do, once the writes before it are durable.
    pub fn poll_action(&mut self) -> Option<QueueAction> {
        self.actions.pop_front()
    }

    /// The writes made since the last call, in order, for the store to apply as one batch.
    pub fn take_writes(&mut self) -> Vec<StoreOp> {
        std::mem::take(&mut self.writes)
    }

    /// A queue's dead letters, oldest first, all at once (see
    /// [`dead_letters_page`](Self::dead_letters_page) for a bounded answer).
    pub fn dead_letters(&self, queue: &str) -> Vec<DeadLetter> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let page = self.dead_letters_page(queue, after, usize::MAX, usize::MAX);
            all.extend(page.letters);
            match page.next {
                Some(next) => after = Some(next),
                None => return all,
            }
        }
    }

    /// A queue's dead letters after task `after` (from the first without it), oldest first: at
    /// most `max_count`, and no more body bytes than `max_bytes` (one at least, whatever its
    /// size). `next` says where the following page starts, if anything is left. The cost is
    /// that of the page, not of the queue.
    pub fn dead_letters_page(
        &self,
        queue: &str,
        after: Option<TaskId>,
        max_bytes: usize,
        max_count: usize,
    ) -> DeadLetterPage {
        let Some(q) = QueueName::new(queue).ok().and_then(|n| self.queues.get(&n)) else {
            return DeadLetterPage::default();
        };
        let start = after.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
        let mut page = DeadLetterPage::default();
        let mut bytes = 0usize;
        for e in q
            .dead
            .range((start, std::ops::Bound::Unbounded))
            .filter_map(|id| self.tasks.get(id))
        {
            let len = e.record.body.len();
            let full = page.letters.len() >= max_count
                || (!page.letters.is_empty() && bytes.saturating_add(len) > max_bytes);
            if full {
                page.next = page.letters.last().map(|d| d.task);
                break;
            }
            bytes += len;
            page.letters.push(DeadLetter {
                task: e.record.id,
                queue: e.record.queue.clone(),
                attempts: e.record.attempts,
                reason: e.record.dead.clone().unwrap_or_default(),
                enqueued_unix_ms: e.record.enqueued_unix_ms,
                body: e.record.body.clone(),
            });
        }
        page
    }

    /// Puts a queue's dead letters (all of them, or only `task`) back in line with a fresh
    /// count of attempts. Returns how many.
    pub fn replay(&mut self, queue: &str, task: Option<TaskId>, now: Now) -> usize {
        let ids = self.pick_dead(queue, task);
        let Ok(name) = QueueName::new(queue) else {
            return 0;
        };
        for id in &ids {
            let Some(entry) = self.tasks.get_mut(id) else {
                continue;
            };
            entry.record.attempts = 0;
            entry.record.dead = None;
            entry.state = State::Ready;
            self.writes.push(StoreOp::Put(entry.record.clone()));
            if let Some(q) = self.queues.get_mut(&name) {
                q.dead.remove(id);
                q.ready.insert(*id);
            }
        }
        self.totals.replayed += ids.len() as u64;
        self.pump(&name, now);
        ids.len()
    }

    /// Deletes a queue's dead letters (all of them, or only `task`). Returns how many.
    pub fn discard_dead(&mut self, queue: &str, task: Option<TaskId>) -> usize {
        let ids = self.pick_dead(queue, task);
        for id in &ids {
            if let Some(entry) = self.tasks.remove(id) {
                let len = entry.record.body.len();
                if let Some(q) = self.queues.get_mut(&entry.record.queue) {
                    q.dead.remove(id);
                    q.tasks -= 1;
                    q.bytes -= len;
                }
                self.bytes -= len;
                self.writes.push(StoreOp::Delete(*id));
            }
        }
        ids.len()
    }

    /// A queue's counts (`None` for a queue never used since start).
    pub fn stats(&self, queue: &str) -> Option<QueueStats> {
        let q = self.queues.get(&QueueName::new(queue).ok()?)?;
        Some(QueueStats {
            ready: q.ready.len(),
            waiting: q.waiting,
            in_flight: q.in_flight,
            dead: q.dead.len(),
            consumers: q.consumers,
        })
    }

    /// Tasks in flight with `consumer` (`None` for an unknown consumer).
    pub fn consumer_in_flight(&self, consumer: ConsumerId) -> Option<usize> {
        self.consumers.get(&consumer).map(|c| c.in_flight.len())
    }

    /// Who holds `task` now (`None` unless it is in flight).
    pub fn holder(&self, task: TaskId) -> Option<ConsumerId> {
        match self.tasks.get(&task)?.state {
            State::InFlight { consumer, .. } => Some(consumer),
            _ => None,
        }
    }

    /// Every queue known since start, by name.
    pub fn queue_names(&self) -> Vec<QueueName> {
        let mut names: Vec<QueueName> = self.queues.keys().cloned().collect();
        names.sort();
        names
    }

    /// Counts since start.
    pub fn totals(&self) -> Totals {
        self.totals
    }

    fn pick_dead(&self, queue: &str, task: Option<TaskId>) -> Vec<TaskId> {
        let Some(q) = QueueName::new(queue).ok().and_then(|n| self.queues.get(&n)) else {
            return Vec::new();
        };
        match task {
            Some(id) if q.dead.contains(&id) => vec![id],
            Some(_) => Vec::new(),
            None => q.dead.iter().copied().collect(),
        }
    }

    /// Takes `task` out of `consumer`'s hands (for an ack or a nack); an error if it is not
    /// there.
    fn release(&mut self, consumer: ConsumerId, task: TaskId) -> Result<(), QueueError> {
        let Some(entry) = self.tasks.get(&task) else {
            return Err(QueueError::NotInFlight { task });
        };
        let State::InFlight {
            consumer: holder,
            deadline,
        } = entry.state
        else {
            return Err(QueueError::NotInFlight { task });
        };
        if holder != consumer {
            return Err(QueueError::NotInFlight { task });
        }
        self.timers.remove(&(deadline, task));
        if let Some(c) = self.consumers.get_mut(&consumer) {
            c.in_flight.remove(&task);
        }
        if let Some(q) = self.queues.get_mut(&entry.record.queue) {
            q.in_flight -= 1;
        }
        Ok(())
    }

    /// Counts a failed attempt of a task no longer in anyone's hands, and puts it back in line
    /// (now or after a wait) or among the dead letters. Returns its queue.
    fn fail(
        &mut self,
        task: TaskId,
        reason: FailReason,
        delay: Option<Duration>,
        now: Now,
    ) -> Option<QueueName> {
        let entry = self.tasks.get_mut(&task)?;
        self.totals.failed += 1;
        entry.record.attempts = entry.record.attempts.saturating_add(1);
        let queue = entry.record.queue.clone();
        let q = self.queues.entry(queue.clone()).or_default();
        if entry.record.attempts >= self.config.max_deliver {
            entry.state = State::Dead;
            entry.record.dead = Some(reason.as_str().to_string());
            q.dead.insert(task);
            self.totals.dead_lettered += 1;
            self.actions.push_back(QueueAction::DeadLettered {
                task,
                queue: queue.clone(),
                reason,
            });
        } else {
            let backoff = &self.config.backoff;
            let wait = delay.unwrap_or_else(|| {
                let n = entry.record.attempts as usize;
                backoff
                    .get(n - 1)
                    .or(backoff.last())
                    .copied()
                    .unwrap_or(Duration::ZERO)
            });
            if wait.is_zero() {
                entry.state = State::Ready;
                q.ready.insert(task);
            } else {
                let until = now.instant + wait;
                entry.state = State::Waiting { until };
                q.waiting += 1;
                self.timers.insert((until, task));
            }
        }
        self.writes.push(StoreOp::Put(entry.record.clone()));
        Some(queue)
    }

    /// Puts a consumer with room in its queue's line, if it is not there already.
    fn give_turn(&mut self, consumer: ConsumerId) {
        let Some(c) = self.consumers.get_mut(&consumer) else {
            return;
        };
        if c.queued || !c.has_room() {
            return;
        }
        if let Some(q) = self.queues.get_mut(&c.queue) {
            c.queued = true;
            q.turns.push_back(consumer);
        }
    }

    /// Hands ready tasks to consumers with room, in turn.
    fn pump(&mut self, queue: &QueueName, now: Now) {
        let Some(q) = self.queues.get_mut(queue) else {
            return;
        };
        while !q.ready.is_empty() {
            let Some(consumer) = q.turns.pop_front() else {
                break;
            };
            let Some(c) = self.consumers.get_mut(&consumer) else {
                continue;
            };
            c.queued = false;
            if c.queue != *queue || !c.has_room() {
                continue;
            }
            let Some(task) = q.ready.pop_first() else {
                break;
            };
            let Some(entry) = self.tasks.get_mut(&task) else {
                continue;
            };
            let deadline = now.instant + self.config.ack_wait;
            entry.state = State::InFlight { consumer, deadline };
            self.timers.insert((deadline, task));
            c.in_flight.insert(task);
            q.in_flight += 1;
            if c.has_room() {
                c.queued = true;
                q.turns.push_back(consumer);
            }
            let attempt = entry.record.attempts.saturating_add(1);
            self.totals.delivered += 1;
            if attempt > 1 {
                self.totals.redelivered += 1;
            }
            self.actions.push_back(QueueAction::Deliver(Delivery {
                consumer,
                task,
                queue: queue.clone(),
                sender: entry.record.sender.clone(),
                body: Bytes::clone(&entry.record.body),
                attempt,
            }));
        }
    }

    /// Forgets the oldest producer ids while more than `max_producer_ids` are remembered.
    fn cap_producer_ids(&mut self) {
        while self.dedupe.len() > self.config.max_producer_ids {
            let Some((expires, queue, producer_id)) = self.dedupe_order.pop_front() else {
                break;
            };
            let key = (queue, producer_id);
            if self.dedupe.get(&key).is_some_and(|&(_, e)| e == expires) {
                self.dedupe.remove(&key);
                self.totals.producer_ids_forgotten_early += 1;
                let (queue, producer_id) = key;
                self.writes
                    .push(StoreOp::DeleteDedupe { queue, producer_id });
            }
        }
    }

    /// Forgets producer ids whose window has ended.
    fn expire_dedupe(&mut self, now: Now) {
        while let Some((expires, _, _)) = self.dedupe_order.front() {
            if *expires > now.unix_ms {
                break;
            }
            let Some((expires, queue, producer_id)) = self.dedupe_order.pop_front() else {
                break;
            };
            let key = (queue, producer_id);
            // A later enqueue may have remembered the same id again with a later end.
            if self.dedupe.get(&key).is_some_and(|&(_, e)| e == expires) {
                self.dedupe.remove(&key);
                let (queue, producer_id) = key;
                self.writes
                    .push(StoreOp::DeleteDedupe { queue, producer_id });
            }
        }
    }
}
