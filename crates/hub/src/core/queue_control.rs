//! Queue work as the hub core names it: each agent's consumers ([`AgentConsumers`]) and the
//! queue operations an envelope asks for ([`QueueControl`], read by [`control_op`]), shared by
//! the hub's own queues and the queues another hub keeps.
//!
//! This module owns the naming and parsing only; it must not keep tasks.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use agentwire_proto::names::{CREDIT_HEADER, DELAY_HEADER, TASK_ID_HEADER};
use agentwire_proto::{Envelope, Nack};

use super::conn::Conn;

/// One local agent's consumers, queue name to credit (see [`HubCore::remember_consumer`]).
pub(crate) struct AgentConsumers<D, R> {
    pub(crate) conn: Weak<Conn<D, R>>,
    pub(crate) queues: HashMap<String, u32>,
}

/// A consumer of an agent here, as named to the owner.
pub(crate) struct NamedConsumer<D, R> {
    pub(crate) conn: Arc<Conn<D, R>>,
    pub(crate) queue: String,
    pub(crate) credit: u32,
}

/// A `Consume`, `Ack` or `Nack`, as a frame or as the queue operation that carries it to
/// the owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum QueueControl {
    Consume { queue: String, credit: u32 },
    Settle { task: u64, nack: Option<Nack> },
}

/// The control an operation envelope carries (`None`: not `consume`, `ack` or `nack`), or
/// why its headers are unusable.
pub(crate) fn control_op(
    op: &str,
    queue: &str,
    env: &Envelope,
) -> Option<Result<QueueControl, String>> {
    let number = |name: &str| -> Result<Option<u64>, String> {
        env.headers
            .get(name)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|e| format!("bad {name} header: {e}"))
            })
            .transpose()
    };
    let task =
        || number(TASK_ID_HEADER)?.ok_or_else(|| format!("{op} needs a {TASK_ID_HEADER} header"));
    Some(match op {
        "consume" => number(CREDIT_HEADER).and_then(|c| {
            let credit = u32::try_from(c.unwrap_or(0))
                .map_err(|e| format!("bad {CREDIT_HEADER} header: {e}"))?;
            Ok(QueueControl::Consume {
                queue: queue.to_owned(),
                credit,
            })
        }),
        "ack" => task().map(|task| QueueControl::Settle { task, nack: None }),
        "nack" => task().and_then(|task| {
            let delay_ms = number(DELAY_HEADER)?
                .map(|d| u32::try_from(d).map_err(|e| format!("bad {DELAY_HEADER} header: {e}")))
                .transpose()?;
            Ok(QueueControl::Settle {
                task,
                nack: Some(Nack { task, delay_ms }),
            })
        }),
        _ => return None,
    })
}
