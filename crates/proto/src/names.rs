//! Names and headers that the hub and its agents agree on: the hub's own `$` names, the header
//! of an operation asked of the hub, and the headers of durable work queues.
//!
//! Both sides need them (the hub core applies them; the agent API builds and checks envelopes
//! with them), so they live here, below both. This module owns the names only; it must not
//! decide who may use them: the hub core refuses a `$` id, destination or topic from an agent.

/// The first character of every name that belongs to the hub: agent ids, destinations and
/// topics beginning with `$`.
pub const RESERVED_PREFIX: char = '$';

/// Whether `name` is one of the hub's.
///
/// ```
/// use agentwire_proto::names::is_reserved;
/// assert!(is_reserved("$hub") && is_reserved("$presence") && !is_reserved("worker-$1"));
/// ```
pub fn is_reserved(name: &str) -> bool {
    name.starts_with(RESERVED_PREFIX)
}

/// The `from` of envelopes the hub itself sends (errors, presence events, receipts).
pub const HUB_ID: &str = "$hub";

/// The topic on which the hub publishes `join` and `leave` events.
pub const PRESENCE_TOPIC: &str = "$presence";

/// The id a cluster's queue keeper registers with: it stands for the hub that keeps the
/// queues.
pub const QUEUE_OWNER_ID: &str = "$queues";

/// The header naming the operation of a request to [`HUB_ID`] (today `reload`).
pub const HUB_OP_HEADER: &str = "hub-op";

/// The header a producer names its task with, so that a re-sent task is dropped as a
/// duplicate (like NATS's `Nats-Msg-Id`).
pub const PRODUCER_ID_HEADER: &str = "producer-id";
/// The receipt's header with the stored task's id.
pub const TASK_ID_HEADER: &str = "task-id";
/// The receipt's header saying whether the task was a duplicate (`true` / `false`).
pub const DUPLICATE_HEADER: &str = "duplicate";
/// The delivery's header with the attempt number (1 for the first delivery).
pub const ATTEMPT_HEADER: &str = "attempt";
/// A request to `queue:NAME` with this header is an operation on the queue instead of a
/// task: `stats`, `dead-letters`, `replay` or `discard` (the last two take an optional
/// [`TASK_ID_HEADER`]; without it, every dead letter). The answer's body is JSON.
pub const QUEUE_OP_HEADER: &str = "queue-op";
/// The `consume` operation's credit (0 stops consuming), like a `Consume` frame's.
pub const CREDIT_HEADER: &str = "credit";
/// The `nack` operation's delay before the next attempt, in milliseconds.
pub const DELAY_HEADER: &str = "delay-ms";
/// The `dead-letters` operation lists the dead letters after this task id (from the first
/// without it), one page at a time.
pub const AFTER_HEADER: &str = "after";
/// The `dead-letters` answer's header when more dead letters follow: the page's last task id,
/// to send as [`AFTER_HEADER`] for the next page.
pub const NEXT_AFTER_HEADER: &str = "next-after";
/// Dead letters in one page at most; the hub also holds their bodies to an eighth of the
/// requester's frame limit, 1 MiB at most (JSON text can be several times the body).
pub const DEAD_LETTER_PAGE: usize = 1000;
