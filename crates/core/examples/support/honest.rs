//! The honest side of the abuse examples (included by `#[path]`): request/reply between two
//! well-behaved agents, counted while an abuse runs or not.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Requests from `asker` to `echo` with 16 in flight while `going` is set (or for `secs`):
/// completed per second.
pub async fn honest(
    asker: agentwire::AgentHandle,
    echo: String,
    secs: Option<f64>,
    going: Arc<AtomicBool>,
) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (h, echo, done, going) = (asker.clone(), echo.clone(), done.clone(), going.clone());
        tasks.push(tokio::spawn(async move {
            let more = || match secs {
                Some(s) => started.elapsed().as_secs_f64() < s,
                None => going.load(Ordering::Relaxed),
            };
            while more() {
                if h.request(&echo, vec![1u8; 1024], Duration::from_secs(10))
                    .await
                    .is_ok()
                {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}
