//! What a durable task costs in the store: a batch of 1 KiB tasks written as one transaction
//! (their enqueue), then deleted as one (their acks), on this machine's disk, every commit
//! durable when it returns. The batch size is the group commit the hub's driver can make: one
//! task per commit is what a store without batching pays.
//!
//! Also the core alone (enqueue, deliver, ack in memory), to show how little of a task's cost
//! is the state machine.
//!
//! `cargo bench -p agentwire-queue --bench store` measures; CI runs each routine once
//! (`cargo test -p agentwire-queue --benches`) as a build check, never as a timing.

use std::hint::black_box;
use std::time::{Duration, Instant};

use agentwire_queue::{
    ConsumerId, Enqueue, FileStore, MemoryStore, Now, QueueAction, QueueConfig, QueueCore,
    QueueStore, StoreOp,
};
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn lifecycle_ops(
    core: &mut QueueCore,
    now: Now,
    batch: usize,
    body: &Bytes,
) -> (Vec<StoreOp>, Vec<StoreOp>) {
    for _ in 0..batch {
        core.enqueue(Enqueue::new("jobs", body.clone()), now).ok();
    }
    let puts = core.take_writes();
    let mut delivered = Vec::new();
    while let Some(a) = core.poll_action() {
        if let QueueAction::Deliver(d) = a {
            delivered.push(d.task);
        }
    }
    for t in delivered {
        core.ack(ConsumerId(1), t, now).ok();
    }
    (puts, core.take_writes())
}

fn store(c: &mut Criterion) {
    let body = Bytes::from(vec![0x5a; 1024]);
    let now = Now::new(Instant::now(), 1_800_000_000_000);
    let mut group = c.benchmark_group("file-store");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    for batch in [1usize, 16, 256] {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut store = FileStore::open(dir.path()).expect("a store");
        let mut core = QueueCore::recover(QueueConfig::default(), Default::default(), now);
        core.consume(ConsumerId(1), "jobs", u32::MAX, now).ok();
        group.throughput(Throughput::Elements(batch as u64));
        group.bench_function(
            format!("enqueue+ack commits, {batch} tasks of 1 KiB per commit"),
            |b| {
                b.iter(|| {
                    let (puts, deletes) = lifecycle_ops(&mut core, now, batch, &body);
                    store.apply(&puts).expect("write");
                    store.apply(&deletes).expect("write");
                })
            },
        );
    }
    group.finish();

    let mut group = c.benchmark_group("core");
    group.throughput(Throughput::Elements(256));
    let mut core = QueueCore::recover(QueueConfig::default(), Default::default(), now);
    core.consume(ConsumerId(1), "jobs", u32::MAX, now).ok();
    let mut memory = MemoryStore::default();
    group.bench_function("enqueue+deliver+ack in memory, 256 tasks of 1 KiB", |b| {
        b.iter(|| {
            let (puts, deletes) = lifecycle_ops(&mut core, now, 256, &body);
            memory.apply(black_box(&puts)).ok();
            memory.apply(black_box(&deletes)).ok();
        })
    });
    group.finish();
}

criterion_group!(benches, store);
criterion_main!(benches);
