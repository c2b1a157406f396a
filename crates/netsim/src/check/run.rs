//! The check itself: baseline, added RTT, loss, rate and the emulator's ceiling, one emulator instance each.

use super::*;

pub fn imp(spec: &str) -> Result<Impairment> {
    Ok(Spec::parse(spec)?.impairment)
}

pub async fn run_check(
    mode: Mode,
    a: &CheckOptions,
) -> Result<(RttResult, LossResult, RateResult, CeilingResult)> {
    let seed = a.seed;

    // a) added RTT.
    let base = Emulator::start(
        mode,
        a.stage,
        Impairment::default(),
        Impairment::default(),
        seed,
    )
    .await?;
    let (c, s, t) = (
        base.client.try_clone()?,
        base.server.try_clone()?,
        base.target,
    );
    let baseline = blocking(move || ping_pong(c, s, t, 200)).await?;
    drop(base);
    let d = imp("delay=25ms")?;
    let em = Emulator::start(mode, a.stage, d.clone(), d, seed).await?;
    let (c, s, t) = (em.client.try_clone()?, em.server.try_clone()?, em.target);
    let rtts = blocking(move || ping_pong(c, s, t, 200)).await?;
    drop(em);
    let median = |v: &[f64]| stats::median(v).unwrap_or(0.0);
    let (med, base_med) = (median(&rtts), median(&baseline));
    let expected = 2.0 * RTT_DELAY_MS;
    let rtt = RttResult {
        setting: "delay=25ms each way".into(),
        samples: rtts.len() as u32,
        min_ms: rtts[0],
        median_ms: med,
        p99_ms: stats::nearest_rank(&rtts, 0.99).unwrap_or(0.0),
        max_ms: rtts[rtts.len() - 1],
        baseline_median_ms: base_med,
        added_ms: med - base_med,
        expected_added_ms: expected,
        tolerance_ms: RTT_TOLERANCE_MS,
        pass: rtt_pass(med, base_med, expected, RTT_TOLERANCE_MS),
    };

    // b) loss.
    let l = imp("loss=1%")?;
    let em = Emulator::start(mode, a.stage, l.clone(), l, seed).await?;
    let (c, s, t, n) = (
        em.client.try_clone()?,
        em.server.try_clone()?,
        em.target,
        a.packets,
    );
    let received = blocking(move || one_way_count(c, s, t, n)).await?;
    let model_dropped = em.forward_stats().dropped_loss;
    drop(em);
    let n = u64::from(a.packets);
    // More than sent cannot arrive (no duplication is configured); stay total regardless.
    let lost = n.saturating_sub(received);
    let (lo, hi) = binomial_interval(n, LOSS_P);
    let loss = LossResult {
        setting: format!("loss=1% each way, {n} datagrams"),
        packets: n,
        received,
        lost,
        loss_percent: 100.0 * lost as f64 / n as f64,
        model_dropped,
        other_lost: lost.saturating_sub(model_dropped),
        expected_lost: n as f64 * LOSS_P,
        bound_lo: lo,
        bound_hi: hi,
        pass: loss_pass(lost, n, LOSS_P),
    };

    // c) rate.
    let r = imp("rate=20mbit")?;
    let em = Emulator::start(mode, a.stage, r.clone(), r, seed).await?;
    let (c, s, t, o) = (
        em.client.try_clone()?,
        em.server.try_clone()?,
        em.target,
        em.overhead,
    );
    let count = 5_000_000u64.div_ceil(BLAST_SIZE as u64);
    let b = blocking(move || {
        blast(
            c,
            s,
            t,
            o,
            count,
            Duration::from_secs(3),
            Duration::from_secs(8),
        )
    })
    .await?;
    drop(em);
    let measured = steady_rate_bps(&b.arrivals).unwrap_or(0.0);
    let rate = RateResult {
        setting: "rate=20mbit, unlimited queue, 5 MB".into(),
        datagram_bytes: BLAST_SIZE,
        counted_overhead_bytes: o,
        sent: b.sent,
        received: b.arrivals.len() as u64,
        measured_mbit: measured / 1e6,
        target_mbit: RATE_BPS / 1e6,
        bound_lo_mbit: RATE_BPS * (1.0 - RATE_TOLERANCE) / 1e6,
        bound_hi_mbit: RATE_BPS * (1.0 + RATE_TOLERANCE) / 1e6,
        pass: rate_pass(measured, RATE_BPS, RATE_TOLERANCE),
    };

    // d) ceiling.
    let em = Emulator::start(
        mode,
        a.stage,
        Impairment::default(),
        Impairment::default(),
        seed,
    )
    .await?;
    let (c, s, t, o) = (
        em.client.try_clone()?,
        em.server.try_clone()?,
        em.target,
        em.overhead,
    );
    let cpu0 = agentwire_measure::resources::self_cpu_seconds();
    let b = blocking(move || {
        blast(
            c,
            s,
            t,
            o,
            u64::MAX,
            Duration::from_secs(2),
            Duration::from_secs(5),
        )
    })
    .await?;
    let cpu1 = agentwire_measure::resources::self_cpu_seconds();
    drop(em);
    let received = b.arrivals.len() as u64;
    let span = match (b.arrivals.first(), b.arrivals.last()) {
        (Some(f), Some(l)) if l.0 > f.0 => l.0 - f.0,
        _ => b.send_secs,
    };
    let bytes: u64 = b.arrivals.iter().map(|x| x.1).sum();
    let ceiling = CeilingResult {
        setting: "no impairment, 1200-byte blast for 2 s".into(),
        datagram_bytes: BLAST_SIZE,
        seconds: span,
        sent: b.sent,
        received,
        sent_per_sec: b.sent as f64 / b.send_secs,
        packets_per_sec: received as f64 / span,
        mbit: bytes as f64 * 8.0 / span / 1e6,
        cpu_seconds: cpu0.zip(cpu1).map(|(a, b)| b - a),
        note: CEILING_NOTE,
    };
    Ok((rtt, loss, rate, ceiling))
}
