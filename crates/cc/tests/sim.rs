//! The controller on simulated paths (agentwire-netsim's model, no sockets): what it must do
//! on a clean bottleneck, under random and bursty loss, with shallow and deep buffers, beside
//! another flow, and when the application sends less than the path could carry.

use std::time::{Duration, Instant};

use agentwire_cc::sim::{FlowSpec, Reno, Scenario, SimResult};
use agentwire_cc::{Bbr, BbrConfig, Mode, Phase};
use proptest::prelude::*;

fn bbr() -> Box<Bbr> {
    Box::new(Bbr::new(BbrConfig::default(), 1200))
}

fn scenario(forward: &str, secs: u64) -> Scenario {
    let delay = forward.split(',').next().unwrap_or("delay=0ms");
    Scenario::parse(forward, delay, Duration::from_secs(secs)).expect("valid spec")
}

fn run(scenario: &Scenario, flows: Vec<FlowSpec>) -> SimResult {
    agentwire_cc::sim::run(scenario, flows).expect("valid impairments")
}

#[test]
fn an_invalid_impairment_is_an_error() {
    let mut s = scenario("delay=10ms", 1);
    s.forward.loss = 2.0;
    assert!(agentwire_cc::sim::run(&s, vec![FlowSpec::bulk(bbr())]).is_err());
}

fn loss_percent(r: &SimResult, flow: usize) -> f64 {
    let f = &r.flows[flow];
    100.0 * f.lost_packets as f64 / f.sent_packets.max(1) as f64
}

#[test]
fn fills_a_clean_bottleneck() {
    let r = run(
        &scenario("delay=25ms,rate=20mbit,queue=1bdp", 10),
        vec![FlowSpec::bulk(bbr())],
    );
    let util = r.utilisation().unwrap();
    assert!(util > 0.85, "utilisation {util:.2}: {r:?}");
}

#[test]
fn random_loss_costs_little_where_reno_collapses() {
    let s = scenario("delay=25ms,rate=20mbit,queue=1bdp,loss=1%", 10);
    let b = run(&s, vec![FlowSpec::bulk(bbr())]);
    let r = run(&s, vec![FlowSpec::bulk(Box::new(Reno::new(1200)))]);
    let (bu, ru) = (b.utilisation().unwrap(), r.utilisation().unwrap());
    assert!(bu > 0.8, "bbr3 utilisation {bu:.2} under 1 % random loss");
    assert!(
        ru < 0.5,
        "reno utilisation {ru:.2}: the path is not lossy enough to show anything"
    );
}

#[test]
fn bursty_loss_costs_little() {
    let r = run(
        &scenario("delay=25ms,rate=20mbit,queue=1bdp,ge=0.01/0.3/0/0.5", 10),
        vec![FlowSpec::bulk(bbr())],
    );
    assert!(r.utilisation().unwrap() > 0.75, "{r:?}");
}

#[test]
fn deep_buffer_keeps_less_queue_than_reno() {
    let s = scenario("delay=25ms,rate=20mbit,queue=4bdp", 12);
    let b = run(&s, vec![FlowSpec::bulk(bbr())]);
    let r = run(&s, vec![FlowSpec::bulk(Box::new(Reno::new(1200)))]);
    let (bq, rq) = (b.flows[0].queue_delay_p50_ms, r.flows[0].queue_delay_p50_ms);
    assert!(b.utilisation().unwrap() > 0.85, "{b:?}");
    assert!(
        bq < 0.6 * rq,
        "median queueing delay bbr3 {bq} ms vs reno {rq} ms"
    );
    // About half a minimum RTT (cruise gain 1.5), not the buffer's 200 ms.
    assert!(bq < 40.0, "median queueing delay {bq} ms on a 50 ms path");
}

#[test]
fn shallow_buffer_overflows_rarely() {
    let r = run(
        &scenario("delay=25ms,rate=20mbit,queue=0.25bdp", 12),
        vec![FlowSpec::bulk(bbr())],
    );
    let loss = loss_percent(&r, 0);
    // Losses with a queue count as congestion (`queue_quantile`): a single flow gives up
    // some utilisation in a shallow buffer (0.78 here; Reno 0.85) so that it shares one.
    assert!(r.utilisation().unwrap() > 0.7, "{r:?}");
    assert!(
        loss < 5.0,
        "{loss:.1} % of packets lost in a 0.25 BDP buffer"
    );
}

#[test]
fn beside_reno_in_a_shallow_buffer_takes_no_more_than_twice_its_share() {
    // With a round's losses counted only when its smallest RTT showed a queue, bbr3 took
    // 2.2x Reno's share here: Reno's back-off emptied the queue, so bbr3 never counted its
    // own losses.
    let r = run(
        &scenario("delay=25ms,rate=20mbit,queue=0.25bdp", 30),
        vec![
            FlowSpec::bulk(bbr()),
            FlowSpec::bulk(Box::new(Reno::new(1200))),
        ],
    );
    let share = r.flows[0].goodput_bps / r.flows[1].goodput_bps.max(1.0);
    assert!((0.5..=2.0).contains(&share), "share {share:.2}: {r:?}");
}

/// bbr3 with BBRv3's wait of 2 to 3 s between bandwidth probes.
fn waiting(config: BbrConfig) -> BbrConfig {
    BbrConfig {
        probe_wait: Duration::from_secs(2),
        cruise_rounds_per_packet: 1.0,
        ..config
    }
}

/// bbr3's goodput over Reno's, the two sharing the bottleneck of `path` for `secs`.
fn share_beside_reno(config: BbrConfig, path: &str, secs: u64) -> f64 {
    let r = run(
        &scenario(path, secs),
        vec![
            FlowSpec::bulk(Box::new(Bbr::new(config, 1200))),
            FlowSpec::bulk(Box::new(Reno::new(1200))),
        ],
    );
    r.flows[0].goodput_bps / r.flows[1].goodput_bps.max(1.0)
}

const SHALLOW_100_MBIT: &str = "delay=25ms,rate=100mbit,queue=0.25bdp";

#[test]
fn on_a_long_fat_path_probes_leave_reno_its_share() {
    // Probing every 8 rounds (400 ms here), bbr3 takes 3.5x Reno's share: each probe raises
    // its loss bound into the room Reno leaves while it slowly regrows its window. The
    // default cruises one round per 8 packets of the path (53 here) between probes.
    let every_8_rounds = BbrConfig {
        cruise_rounds_per_packet: 0.0,
        ..BbrConfig::default()
    };
    let eager = share_beside_reno(every_8_rounds, SHALLOW_100_MBIT, 20);
    let default = share_beside_reno(BbrConfig::default(), SHALLOW_100_MBIT, 20);
    let waited = share_beside_reno(waiting(BbrConfig::default()), SHALLOW_100_MBIT, 20);
    for (share, what) in [(default, "the default"), (waited, "a 2 s wait")] {
        assert!((0.5..=2.0).contains(&share), "share {share:.2} with {what}");
        assert!(
            share < eager,
            "share {share:.2} with {what}, {eager:.2} every 8 rounds"
        );
    }
}

#[test]
fn the_short_term_model_gives_way_to_reno_sooner() {
    let share = |short_term: bool| {
        let config = BbrConfig {
            short_term,
            ..BbrConfig::default()
        };
        share_beside_reno(waiting(config), SHALLOW_100_MBIT, 20)
    };
    let (with, without) = (share(true), share(false));
    assert!(
        with < without,
        "share {with:.2} with bw_lo/inflight_lo, {without:.2} without"
    );
}

#[test]
fn bandwidth_probes_come_seconds_apart() {
    let ms = Duration::from_millis;
    // A bulk sender on a 50 ms path that delivers at most 100 packets a round trip, for 20 s.
    let probes = |config: BbrConfig| {
        let mut b = Bbr::new(config, 1200);
        let mut t = Instant::now();
        let (mut probes, mut was_up) = (0, false);
        for _ in 0..400 {
            let n = (b.window() / 1200).clamp(1, 100);
            for _ in 0..n {
                b.on_sent(t, 1200);
            }
            let acked = t + ms(50);
            for _ in 0..n {
                b.on_ack(acked, t, 1200, false);
            }
            b.on_end_acks(acked, 0, false);
            let up = b.state().mode == Mode::ProbeBw(Phase::Up);
            probes += usize::from(up && !was_up);
            was_up = up;
            t = acked;
        }
        probes
    };
    // 2 to 3 s apart (BBRv3), or at 63 rounds (3.15 s) at the latest.
    let waited = probes(waiting(BbrConfig::default()));
    assert!((5..=10).contains(&waited), "{waited} probes in 20 s");
    // Half a round per packet of the 100-packet pipe: 50 rounds of cruise, 52 a cycle.
    let scaled = probes(BbrConfig {
        cruise_rounds_per_packet: 0.5,
        ..BbrConfig::default()
    });
    assert!((5..=9).contains(&scaled), "{scaled} probes in 20 s");
    // Without a wait, one every 8 rounds.
    let eager = probes(BbrConfig {
        cruise_rounds_per_packet: 0.0,
        ..BbrConfig::default()
    });
    assert!(eager >= 40, "{eager} probes in 20 s without a wait");
}

#[test]
fn two_flows_share_a_bottleneck() {
    let r = run(
        &scenario("delay=25ms,rate=20mbit,queue=1bdp", 30),
        vec![FlowSpec::bulk(bbr()), FlowSpec::bulk(bbr())],
    );
    let share = r.flows[0].goodput_bps / r.flows[1].goodput_bps.max(1.0);
    assert!((0.5..=2.0).contains(&share), "share {share:.2}: {r:?}");
    assert!(r.utilisation().unwrap() > 0.85, "{r:?}");
}

#[test]
fn beside_reno_neither_starves() {
    let r = run(
        &scenario("delay=25ms,rate=20mbit,queue=1bdp", 30),
        vec![
            FlowSpec::bulk(bbr()),
            FlowSpec::bulk(Box::new(Reno::new(1200))),
        ],
    );
    let share = r.flows[0].goodput_bps / r.flows[1].goodput_bps.max(1.0);
    assert!((0.33..=3.0).contains(&share), "share {share:.2}: {r:?}");
}

#[test]
fn app_limited_flow_gets_its_rate_and_keeps_its_model() {
    let mut flow = FlowSpec::bulk(bbr());
    flow.app_rate = Some(250_000); // 2 Mbit/s offered on a 20 Mbit/s path
    let r = run(
        &scenario("delay=25ms,rate=20mbit,queue=1bdp", 10),
        vec![flow],
    );
    let g = r.flows[0].goodput_bps;
    assert!((1.8e6..2.2e6).contains(&g), "goodput {g}");
    assert!(r.flows[0].final_window >= 4 * 1200);
}

#[test]
fn a_sender_the_window_does_not_bind_gets_pacing_headroom_and_a_bulk_sender_does_not() {
    let ms = Duration::from_millis;
    let config = BbrConfig::default();
    let mut b = Bbr::new(config.clone(), 1200);
    let mut t = Instant::now();
    // One 50 ms round trip: a burst sent at once, all of it acknowledged a round trip later.
    // `packets: None` sends what the window allows (bulk); returns the bytes sent.
    let mut round = |b: &mut Bbr, packets: Option<u64>| {
        let mut sent = 0;
        let mut n = 0;
        while packets.map_or(sent < b.window(), |p| n < p) {
            b.on_sent(t, 1200);
            sent += 1200;
            n += 1;
        }
        let acked_at = t + ms(50);
        for _ in 0..n {
            b.on_ack(acked_at, t, 1200, packets.is_some());
        }
        b.on_end_acks(acked_at, 0, packets.is_some());
        t = acked_at;
        sent
    };
    // Requests: 10 packets a round, far below the model's window.
    for _ in 0..20 {
        round(&mut b, Some(10));
    }
    let headroom = (config.app_headroom * 12_000.0) as u64;
    let s = b.state();
    assert!(
        s.window >= headroom && s.model_window < headroom,
        "window {} (headroom {headroom}), model {}",
        s.window,
        s.model_window
    );
    // Bulk: the first round may use the headroom once; from then on in flight is the
    // model's window (one packet over at most) and the headroom is gone.
    round(&mut b, None);
    for _ in 0..3 {
        let model = b.state().model_window;
        assert_eq!(b.window(), model, "headroom while window-bound");
        let sent = round(&mut b, None);
        assert!(
            sent <= model + 1200,
            "sent {sent} with a model window of {model}"
        );
    }
}

#[test]
fn a_smoothed_rtt_far_above_the_minimum_does_not_throttle_the_pacer() {
    let ms = Duration::from_millis;
    // 10 packets every 50 ms round trip: the model measures 240 kB/s and a 50 ms minimum.
    let model = |rate_window: f64| {
        let config = BbrConfig {
            app_headroom: 0.0,
            rate_window,
            ..BbrConfig::default()
        };
        let mut b = Bbr::new(config, 1200);
        let mut t = Instant::now();
        for _ in 0..20 {
            for _ in 0..10 {
                b.on_sent(t, 1200);
            }
            let acked = t + ms(50);
            for _ in 0..10 {
                b.on_ack(acked, t, 1200, true);
            }
            b.on_end_acks(acked, 0, true);
            t = acked;
        }
        // The host gets busy: the smoothed RTT the pacer uses rises to 500 ms.
        b.on_smoothed_rtt(ms(500));
        b.state()
    };
    let on = model(BbrConfig::default().rate_window);
    assert!(
        on.mode != Mode::ProbeRtt && on.min_rtt == Some(ms(50)),
        "{on:?}"
    );
    // quinn paces at 1.25 x window / smoothed RTT: at least 0.9 x the bandwidth (the
    // draining round's gain) times the rate-window share.
    let floor = 0.9 * 0.9 * on.bandwidth as f64 * 0.5;
    assert!(
        on.window as f64 >= floor,
        "window {} < {floor}: {on:?}",
        on.window
    );
    assert!(on.model_window < on.window, "{on:?}");
    // Off: the window is the model's, sized on the 50 ms minimum.
    let off = model(0.0);
    assert_eq!(off.window, off.model_window, "{off:?}");
    assert!((off.window as f64) < floor / 2.0, "{off:?}");
}

#[test]
fn the_same_run_gives_the_same_result() {
    let s = scenario("delay=10ms,rate=20mbit,queue=1bdp,loss=1%", 5);
    let a = run(&s, vec![FlowSpec::bulk(bbr())]);
    let b = run(&s, vec![FlowSpec::bulk(bbr())]);
    assert_eq!(a.flows[0].goodput_bps, b.flows[0].goodput_bps);
    assert_eq!(a.bottleneck, b.bottleneck);
}

#[test]
fn persistent_congestion_drops_to_the_floor_and_regrows() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut b = Bbr::new(BbrConfig::default(), 1200);
    let mut t = t0;
    // A few clean rounds of 10 packets, 20 ms RTT.
    for round in 0..6u64 {
        for _ in 0..10 {
            b.on_sent(t, 1200);
        }
        let acked_at = t + ms(20);
        for _ in 0..10 {
            b.on_ack(acked_at, t, 1200, false);
        }
        b.on_end_acks(acked_at, 0, false);
        t = acked_at + ms(round);
    }
    b.on_congestion_event(t, t, true, 12_000);
    assert_eq!(b.window(), 4 * 1200);
    b.on_sent(t, 1200);
    b.on_ack(t + ms(20), t, 1200, false);
    b.on_end_acks(t + ms(20), 0, false);
    assert!(
        b.window() > 4 * 1200,
        "the window regrows after acknowledgements"
    );
}

#[test]
fn startup_ends_when_bandwidth_stops_growing() {
    let r = run(
        &scenario("delay=10ms,rate=20mbit,queue=1bdp", 3),
        vec![FlowSpec::bulk(bbr())],
    );
    assert!(r.utilisation().unwrap() > 0.8);
    // A controller fed a flat delivery rate leaves Startup within a few rounds.
    let t0 = Instant::now();
    let mut b = Bbr::new(BbrConfig::default(), 1200);
    let mut t = t0;
    for _ in 0..12 {
        for i in 0..10u32 {
            b.on_sent(t + Duration::from_millis(u64::from(i)), 1200);
        }
        for i in 0..10u32 {
            let sent = t + Duration::from_millis(u64::from(i));
            b.on_ack(sent + Duration::from_millis(20), sent, 1200, false);
            b.on_end_acks(sent + Duration::from_millis(20), 0, false);
        }
        t += Duration::from_millis(40);
    }
    assert_ne!(b.state().mode, Mode::Startup, "{:?}", b.state());
}

#[derive(Debug, Clone)]
enum Event {
    Sent(u16, u32),
    Ack(u16, u16, u32, bool),
    EndAcks(u32, bool),
    Loss(u16, bool, u32),
    Mtu(u16),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (0u16..2000, 0u32..70_000).prop_map(|(dt, b)| Event::Sent(dt, b)),
        (0u16..2000, 0u16..2000, 0u32..70_000, any::<bool>())
            .prop_map(|(dt, back, b, a)| Event::Ack(dt, back, b, a)),
        (0u32..10_000_000, any::<bool>()).prop_map(|(f, a)| Event::EndAcks(f, a)),
        (0u16..2000, any::<bool>(), 0u32..100_000).prop_map(|(dt, p, b)| Event::Loss(dt, p, b)),
        (0u16..20_000).prop_map(Event::Mtu),
    ]
}

proptest! {
    /// Any sequence of events, however odd (acknowledgements of unknown packets, send times
    /// after the acknowledgement, zero-byte losses), leaves a usable window and never panics.
    #[test]
    fn any_event_sequence_keeps_a_usable_window(events in proptest::collection::vec(event(), 0..400)) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut b = Bbr::new(BbrConfig::default(), 1200);
        for e in events {
            match e {
                Event::Sent(dt, bytes) => {
                    now += Duration::from_micros(u64::from(dt) * 100);
                    b.on_sent(now, u64::from(bytes));
                }
                Event::Ack(dt, back, bytes, app) => {
                    now += Duration::from_micros(u64::from(dt) * 100);
                    let sent = now.checked_sub(Duration::from_micros(u64::from(back) * 100)).unwrap_or(now);
                    b.on_ack(now, sent, u64::from(bytes), app);
                }
                Event::EndAcks(flight, app) => b.on_end_acks(now, u64::from(flight), app),
                Event::Loss(dt, persistent, bytes) => {
                    let sent = now;
                    now += Duration::from_micros(u64::from(dt) * 100);
                    b.on_congestion_event(now, sent, persistent, u64::from(bytes));
                }
                Event::Mtu(mtu) => b.on_mtu_update(mtu),
            }
            prop_assert!(b.window() >= 4 * 1200, "window {} below the floor", b.window());
        }
    }
}
