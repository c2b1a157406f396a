//! One slot of the load generator: a connection (made again after failures, with backoff), its
//! streams each keeping one request in flight, closed loop or on the open-loop schedule, and
//! what the slot counted.
//!
//! This module owns driving one connection; it must not decide how many there are (`run` in
//! the parent does) nor speak a protocol itself (`client` does).

use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::{Duration, Instant};

use agentwire_measure::stats::OpenLoopSchedule;
use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::client::{self, GetError, Lane, PendingHandshake};
use crate::report::{EarlyData, ErrorKind, LoadError, Stats};

use super::{later, RunCtx, SlotResult};

const INITIAL_BACKOFF: Duration = Duration::from_millis(10);

const MAX_BACKOFF: Duration = Duration::from_millis(200);

/// Requests a slot sends again in a row (with no response between) before the next one
/// counts as failed.
const MAX_RETRIES_IN_A_ROW: u32 = 8;

/// Failed requests in a row after which a connection is replaced.
const MAX_CONSECUTIVE_ERRORS: u32 = 8;

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// One stream's place in the open-loop schedule.
struct LaneState {
    schedule: Option<OpenLoopSchedule>,
    /// Next request of the schedule.
    k: u64,
    done: bool,
}

impl LaneState {
    fn due(&self, ctx: &RunCtx) -> Option<Instant> {
        let s = self.schedule.as_ref()?;
        s.intended(self.k).map(|d| ctx.start + d)
    }
}

/// Shared between the lanes of one connection slot (all polled by one task).
struct SlotShared<'a> {
    ctx: &'a RunCtx,
    stats: RefCell<Stats>,
    last: Cell<Option<Instant>>,
    /// Requests sent again since this slot last had a response: a server that turns every
    /// request away must not keep a run going for ever.
    retries_in_a_row: Cell<u32>,
}

impl SlotShared<'_> {
    fn ended(&self, at: Instant) {
        self.last.set(later(self.last.get(), Some(at)));
    }
}

/// One connection slot: connect, run the lanes until the connection is used up, broken or
/// the run is over, close, repeat.
pub(super) async fn run_slot(
    ctx: &RunCtx,
    endpoint: Option<&quinn::Endpoint>,
    slot: usize,
) -> SlotResult {
    let shared = SlotShared {
        ctx,
        stats: RefCell::new(Stats::default()),
        last: Cell::new(None),
        retries_in_a_row: Cell::new(0),
    };
    let mut lanes: Vec<LaneState> = (0..ctx.streams)
        .map(|s| {
            let schedule = ctx.open_loop.and_then(|(rate, span)| {
                OpenLoopSchedule::for_client(rate, ctx.total_lanes, slot * ctx.streams + s, span)
            });
            LaneState {
                done: ctx.open_loop.is_some() && schedule.is_none_or(|s| s.count() == 0),
                schedule,
                k: 0,
            }
        })
        .collect();
    let mut backoff = INITIAL_BACKOFF;
    loop {
        if lanes.iter().all(|l| l.done) || ctx.budget.exhausted() {
            break;
        }
        // When to connect: now (closed loop), or when the earliest open-loop request is due.
        let due = if ctx.open_loop.is_some() {
            match lanes
                .iter()
                .filter(|l| !l.done)
                .filter_map(|l| l.due(ctx))
                .min()
            {
                Some(d) => d,
                None => break,
            }
        } else {
            Instant::now()
        };
        if ctx.open_loop.is_none() && ctx.end.is_some_and(|end| due >= end) {
            break;
        }
        tokio::time::sleep_until(due.into()).await;
        let started = Instant::now();
        let counted_from = if ctx.open_loop.is_some() {
            due
        } else {
            started
        };
        let measured = counted_from >= ctx.measure_start;
        // The connection carries the next request: it takes that request's place in the
        // budget now, so that no connection is opened for a request that will not be sent.
        if measured && !ctx.budget.take() {
            break;
        }
        let attempt = tokio::time::timeout(
            ctx.connect_timeout,
            client::connect(&ctx.setup, endpoint, &ctx.target),
        )
        .await
        .unwrap_or_else(|_| {
            Err(LoadError::new(
                ErrorKind::ConnectTimeout,
                format!("no connection within {:?}", ctx.connect_timeout),
            ))
        });
        let (conn, handshake) = match attempt {
            Ok(connected) => connected,
            Err(e) => {
                // The attempt was to carry the next request: that request failed.
                if measured {
                    shared.stats.borrow_mut().record_error(&e);
                    shared.ended(Instant::now());
                    ctx.tell(false);
                }
                if ctx.open_loop.is_some() {
                    if let Some(lane) = lanes
                        .iter_mut()
                        .filter(|l| !l.done)
                        .min_by_key(|l| l.due(ctx))
                    {
                        lane.k += 1;
                    }
                } else {
                    let mut pause = backoff;
                    if let Some(end) = ctx.end {
                        pause = pause.min(end.saturating_duration_since(Instant::now()));
                    }
                    tokio::time::sleep(pause).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                continue;
            }
        };
        backoff = INITIAL_BACKOFF;
        ctx.established.fetch_add(1, Ordering::Relaxed);
        if measured {
            shared
                .stats
                .borrow_mut()
                .record_connect(micros(started.elapsed()));
        }
        let (conn_lanes, mut guard) = conn.into_lanes(ctx.streams);
        let conn_state = ConnState {
            used: Cell::new(0),
            broken: Cell::new(false),
            prepaid: Cell::new(measured),
            handshake,
        };
        {
            let mut running: FuturesUnordered<_> = conn_lanes
                .into_iter()
                .zip(lanes.iter_mut())
                .map(|(lane, state)| run_lane(&shared, lane, state, &conn_state))
                .collect();
            // The lanes, then the connection (HTTP/2 has no task of its own): what the lanes
            // queued is written in the same turn, and what it read may finish lanes.
            std::future::poll_fn(|cx| loop {
                loop {
                    match running.poll_next_unpin(cx) {
                        Poll::Ready(Some(())) => {}
                        Poll::Ready(None) => return Poll::Ready(()),
                        Poll::Pending => break,
                    }
                }
                if !guard.poll_drive(cx) {
                    return Poll::Pending;
                }
            })
            .await;
        }
        match conn_state.handshake.early_data(ctx.connect_timeout).await {
            Some(EarlyData::Accepted) => ctx.zero_rtt_accepted.fetch_add(1, Ordering::Relaxed),
            Some(EarlyData::Rejected) => ctx.zero_rtt_rejected.fetch_add(1, Ordering::Relaxed),
            Some(EarlyData::NotTried) | None => 0,
        };
        if conn_state.prepaid.get() {
            // The connection ended before its first request went out.
            ctx.budget.refund();
        }
        guard.close().await;
    }
    SlotResult {
        stats: shared.stats.into_inner(),
        last: shared.last.get(),
    }
}

/// Shared between the lanes of one connection.
struct ConnState {
    /// Requests sent on it.
    used: Cell<u64>,
    /// Set when it is no longer usable.
    broken: Cell<bool>,
    /// The budget token taken when connecting, not yet used by a request.
    prepaid: Cell<bool>,
    /// With 0-RTT: the server's answer to the early data, still to come.
    handshake: PendingHandshake,
}

/// One stream of a connection: requests one after another (closed loop) or on schedule
/// (open loop) until the run or the connection is over.
async fn run_lane(
    shared: &SlotShared<'_>,
    mut lane: Lane,
    state: &mut LaneState,
    conn: &ConnState,
) {
    let ctx = shared.ctx;
    let (used, broken) = (&conn.used, &conn.broken);
    let mut consecutive_errors = 0u32;
    loop {
        if state.done || broken.get() {
            return;
        }
        if ctx.max_per_conn > 0 && used.get() >= ctx.max_per_conn {
            return;
        }
        let intended = match &state.schedule {
            Some(_) => match state.due(ctx) {
                Some(due) => Some(due),
                None => {
                    state.done = true;
                    return;
                }
            },
            None => None,
        };
        if let Some(due) = intended {
            tokio::time::sleep_until(due.into()).await;
            if broken.get() {
                return;
            }
        }
        let sent = Instant::now();
        if intended.is_none() && ctx.end.is_some_and(|end| sent >= end) {
            state.done = true;
            return;
        }
        let from = intended.unwrap_or(sent);
        let measured = from >= ctx.measure_start;
        if measured && !(conn.prepaid.replace(false) || ctx.budget.take()) {
            state.done = true;
            return;
        }
        if state.schedule.is_some() {
            state.k += 1;
        }
        used.set(used.get() + 1);
        let index = ctx.next_url.fetch_add(1, Ordering::Relaxed);
        let outcome = tokio::time::timeout(ctx.request_timeout, lane.get(&ctx.target, index))
            .await
            .unwrap_or_else(|_| {
                Err(GetError::Failed(LoadError::new(
                    ErrorKind::Timeout,
                    format!("no complete response within {:?}", ctx.request_timeout),
                )))
            });
        let done = Instant::now();
        let outcome = match outcome {
            // Requests in rejected 0-RTT data were never processed, whatever error they ended with.
            Err(GetError::Failed(e))
                if conn.handshake.early_data(ctx.connect_timeout).await
                    == Some(EarlyData::Rejected) =>
            {
                Err(GetError::NotSent(e))
            }
            other => other,
        };
        let outcome = match outcome {
            // Turned away again and again: from here on it counts as a failure.
            Err(GetError::NotSent(why))
                if shared.retries_in_a_row.get() >= MAX_RETRIES_IN_A_ROW =>
            {
                Err(LoadError::new(
                    why.kind,
                    format!(
                        "turned away unprocessed {} times in a row: {}",
                        MAX_RETRIES_IN_A_ROW + 1,
                        why.message
                    ),
                ))
            }
            Err(GetError::NotSent(why)) => {
                shared
                    .retries_in_a_row
                    .set(shared.retries_in_a_row.get() + 1);
                // The server never processed it: it goes again, on a new connection.
                if measured {
                    ctx.budget.refund();
                    shared.stats.borrow_mut().record_retry(&why);
                }
                if let Some(k) = state.k.checked_sub(1).filter(|_| state.schedule.is_some()) {
                    state.k = k;
                }
                broken.set(true);
                return;
            }
            Err(GetError::Failed(e)) => Err(e),
            Ok(resp) => Ok(resp),
        };
        match outcome {
            Ok(resp) => {
                consecutive_errors = 0;
                shared.retries_in_a_row.set(0);
                if measured {
                    shared.stats.borrow_mut().record_response(
                        resp.status,
                        resp.body_bytes,
                        micros(resp.first_byte.saturating_duration_since(sent)),
                        micros(done.saturating_duration_since(from)),
                    );
                    shared.ended(done);
                    ctx.tell(true);
                }
            }
            Err(e) => {
                if measured {
                    shared.stats.borrow_mut().record_error(&e);
                    shared.ended(done);
                    ctx.tell(false);
                }
                consecutive_errors += 1;
                // HTTP/1.1 cannot go on after a failed exchange; the others go on unless the
                // connection is gone (or keeps failing).
                if matches!(lane, Lane::H1(_))
                    || lane.is_closed()
                    || e.kind == ErrorKind::Closed
                    || consecutive_errors >= MAX_CONSECUTIVE_ERRORS
                {
                    broken.set(true);
                    return;
                }
            }
        }
    }
}
