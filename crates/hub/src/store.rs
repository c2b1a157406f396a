//! The queue store's writer: one thread that makes the hub core's queue writes durable and
//! tells the core when they are.
//!
//! Owns the store and the order of its writes. Every [`Action::Persist`](super::Action) goes
//! to this thread with its token; the thread applies the writes in token order, and everything
//! that arrived while the previous commit was under way goes into the next one, as one batch
//! (group commit: a commit costs one flush of the disk, about 160 µs on the VM of
//! docs/benchmarks/2026-11-26-queue-store, whatever it holds). Then it calls
//! [`HubCore::on_persisted`](super::HubCore::on_persisted) with the last token of the batch
//! and carries out the actions that releases. A write the store refuses (a full disk, a
//! store that cannot be reached) is tried again, with backoff, with the writes after it,
//! until the store takes it: the core refuses new queue work meanwhile
//! ([`HubCore::on_store_failed`](super::HubCore::on_store_failed)) and takes it again once a
//! write succeeds ([`HubCore::on_store_recovered`](super::HubCore::on_store_recovered)); no
//! restart is needed. It must not decide anything about queues.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::Weak;
use std::time::Duration;

use agentwire_queue::{QueueStore, StoreOp};

use super::{apply, HubInner, Now};

enum Msg {
    Persist(u64, Vec<StoreOp>),
    /// Write what has arrived, close the store, then say so.
    Stop(mpsc::Sender<()>),
}

/// The hub's end of the writer thread.
pub(super) struct StoreWriter {
    tx: mpsc::Sender<Msg>,
    /// Tells this writer from a later one (a hub that gave a cluster's queues up and took
    /// them again).
    id: u64,
}

/// The thread's end, until it starts.
pub(super) struct StoreFeed {
    rx: mpsc::Receiver<Msg>,
    id: u64,
}

static WRITERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl StoreWriter {
    pub(super) fn channel() -> (StoreWriter, StoreFeed) {
        let (tx, rx) = mpsc::channel();
        let id = WRITERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (StoreWriter { tx, id }, StoreFeed { rx, id })
    }

    /// Hands over one `Persist`.
    pub(super) fn submit(&self, token: u64, writes: Vec<StoreOp>) {
        if self.tx.send(Msg::Persist(token, writes)).is_err() {
            tracing::error!(token, "the queue store's thread is gone; a write was lost");
        }
    }

    /// Writes what was handed over, then closes the store (so that another hub may open it)
    /// and ends the thread; waits up to `wait` for that.
    pub(super) fn stop(&self, wait: std::time::Duration) {
        let (done, finished) = mpsc::channel();
        if self.tx.send(Msg::Stop(done)).is_ok() {
            let _ = finished.recv_timeout(wait);
        }
    }
}

impl StoreFeed {
    /// Starts the thread. It ends when the hub is gone (after writing what it was given).
    pub(super) fn start(self, store: Box<dyn QueueStore>, hub: Weak<HubInner>) {
        let spawned = std::thread::Builder::new()
            .name("agentwire-store".into())
            .spawn(move || write_loop(store, self.rx, hub, self.id));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the queue store's thread; queue writes will not be durable");
        }
    }
}

/// The first wait before a failed write is tried again; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(10);
/// The longest wait between tries of a failed write.
const RETRY_MAX: Duration = Duration::from_secs(1);

fn write_loop(
    mut store: Box<dyn QueueStore>,
    rx: mpsc::Receiver<Msg>,
    hub: Weak<HubInner>,
    id: u64,
) {
    // Persists arrive from many connection tasks, not always in token order.
    let mut arrived: BTreeMap<u64, Vec<StoreOp>> = BTreeMap::new();
    let mut next = 1u64;
    // The writes not stored yet, in token order, and the last token among them. After a
    // failed write they stay here and are tried again, with whatever came after them, until
    // the store takes them: the queues' state in memory holds them already.
    let mut batch: Vec<StoreOp> = Vec::new();
    let mut last: Option<u64> = None;
    // While writes fail: the wait before the next try.
    let mut retry: Option<Duration> = None;
    let mut stop = None;
    loop {
        let msg = match retry {
            None => match rx.recv() {
                Ok(msg) => Some(msg),
                Err(_) => break,
            },
            Some(wait) => match rx.recv_timeout(wait) {
                Ok(msg) => Some(msg),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            },
        };
        let mut take = |msg| match msg {
            Msg::Persist(token, writes) => {
                arrived.insert(token, writes);
            }
            Msg::Stop(done) => stop = Some(done),
        };
        if let Some(msg) = msg {
            take(msg);
        }
        while let Ok(msg) = rx.try_recv() {
            take(msg);
        }
        while let Some(writes) = arrived.remove(&next) {
            batch.extend(writes);
            last = Some(next);
            next += 1;
        }
        let Some(upto) = last else {
            if stop.is_some() {
                break;
            }
            continue;
        };
        let written = store.apply(&batch);
        let Some(hub) = hub.upgrade() else { return };
        if hub.store_slot().as_ref().map(|w| w.id) != Some(id) {
            // The hub closed this store (shut down, or gave a cluster's queues up): what
            // waited on these writes is not this store's to release, or to try again.
            if stop.is_some() {
                break;
            }
            (batch, last, retry) = (Vec::new(), None, None);
            continue;
        }
        let mut actions = Vec::new();
        match written {
            Ok(()) => {
                (batch, last) = (Vec::new(), None);
                if retry.take().is_some() {
                    hub.core.on_store_recovered();
                }
                hub.core.on_persisted(upto, Now::system(), &mut actions);
            }
            Err(e) => {
                if retry.is_none() {
                    hub.core.on_store_failed(&e.with_causes());
                }
                retry = Some(retry.map_or(RETRY_FIRST, |wait| (wait * 2).min(RETRY_MAX)));
                if stop.is_some() {
                    tracing::error!(
                        writes = batch.len(),
                        "the hub stops with queue writes its store did not take"
                    );
                }
            }
        }
        apply(&hub, &mut actions);
        if stop.is_some() {
            break;
        }
    }
    drop(store);
    if let Some(done) = stop {
        let _ = done.send(());
    }
}
