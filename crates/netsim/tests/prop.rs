//! Property tests: arbitrary push/poll sequences never panic and conserve packets.

use std::time::Duration;

use agentwire_netsim::{GilbertElliott, Impairment, JitterDist, Link, QueueLimit, Verdict};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// Push at `t` ns (absolute, so time may go backwards) a packet of `size` bytes.
    Push { t: u64, size: usize },
    /// Poll everything due at `t` ns.
    Poll { t: u64 },
}

fn prob() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), Just(1.0), 0.0..=1.0]
}

fn impairment() -> impl Strategy<Value = Impairment> {
    (
        (
            0u64..50_000_000,
            0u64..10_000_000,
            any::<bool>(),
            any::<bool>(),
        ),
        (
            prob(),
            proptest::option::of((prob(), prob(), prob(), prob())),
        ),
        (
            proptest::option::of(1u64..10_000_000_000),
            prop_oneof![
                Just(QueueLimit::Unlimited),
                (0u64..200_000).prop_map(QueueLimit::Bytes),
                (0.0f64..4.0).prop_map(QueueLimit::Bdp),
            ],
        ),
        (prob(), 0u64..20_000_000, prob(), 0u64..1_000_000),
    )
        .prop_map(
            |((delay, jitter, normal, jr), (loss, ge), (rate, queue), (ro, rod, dup, dupd))| {
                Impairment {
                    delay: Duration::from_nanos(delay),
                    jitter: Duration::from_nanos(jitter),
                    jitter_dist: if normal {
                        JitterDist::Normal
                    } else {
                        JitterDist::Uniform
                    },
                    jitter_reorders: jr,
                    loss,
                    gilbert_elliott: ge.map(|(p, r, loss_good, loss_bad)| GilbertElliott {
                        p,
                        r,
                        loss_good,
                        loss_bad,
                    }),
                    rate_bps: rate,
                    queue: if rate.is_some() {
                        queue
                    } else {
                        QueueLimit::Unlimited
                    },
                    reorder: ro,
                    reorder_delay: Duration::from_nanos(rod),
                    duplicate: dup,
                    duplicate_delay: Duration::from_nanos(dupd),
                }
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..2_000_000_000, 0usize..65_536).prop_map(|(t, size)| Op::Push { t, size }),
        1 => (0u64..2_000_000_000).prop_map(|t| Op::Poll { t }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn push_poll_never_panics_and_conserves_packets(
        imp in impairment(),
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 0..300),
    ) {
        let mut link: Link<u32> = Link::new(imp, seed).unwrap();
        let (mut queued, mut dropped, mut dups, mut out) = (0u64, 0u64, 0u64, 0u64);
        for (i, op) in ops.into_iter().enumerate() {
            match op {
                Op::Push { t, size } => match link.push(Duration::from_nanos(t), i as u32, size) {
                    Verdict::Queued { duplicated, .. } => {
                        queued += 1;
                        dups += u64::from(duplicated);
                    }
                    Verdict::Dropped(_) => dropped += 1,
                },
                Op::Poll { t } => {
                    let now = Duration::from_nanos(t);
                    while link.poll_departure(now).is_some() {
                        out += 1;
                    }
                    if let Some(next) = link.next_departure() {
                        prop_assert!(next > now);
                    }
                }
            }
            let s = link.stats();
            prop_assert_eq!(s.packets_in, queued + dropped);
            prop_assert_eq!(s.dropped(), dropped);
            prop_assert_eq!(s.duplicated, dups);
            prop_assert_eq!(s.packets_out, out);
            prop_assert_eq!(s.packets_in + s.duplicated, s.packets_out + s.dropped() + s.in_flight);
            prop_assert!(s.queue_bytes <= s.max_queue_bytes);
        }
        // Drain everything: departures come out in non-decreasing time order.
        let mut prev = Duration::ZERO;
        while let Some(t) = link.next_departure() {
            prop_assert!(t >= prev);
            prev = t;
            prop_assert!(link.poll_departure(t).is_some());
            out += 1;
        }
        let s = link.stats();
        prop_assert_eq!(s.in_flight, 0);
        prop_assert_eq!(s.packets_out, out);
        prop_assert_eq!(s.packets_in + s.duplicated, s.packets_out + s.dropped());
    }
}
