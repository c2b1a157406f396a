//! Operations an agent asks of the hub itself: a request to [`HUB_ID`](super::HUB_ID) whose
//! [`HUB_OP_HEADER`] names the operation (today `reload`: read the access file, the client CA,
//! the revoked serials and the hub certificate again, as SIGHUP does).
//!
//! Only agents whose access-file credential says `"admin": true` may ask; without an access
//! file nobody may (SIGHUP stays). This module owns the parsing and the permission, and hands
//! the work to the driver ([`Action::HubOp`](super::Action::HubOp)), which does the I/O and
//! answers with [`HubCore::answer_hub_op`]. It must not read files itself.

use std::sync::Arc;

use agentwire_proto::{Destination, ErrorCode, Kind, Priority, RawFrame};

use super::{Action, Conn, HubCore, Now, Registration};

pub use agentwire_proto::names::HUB_OP_HEADER;

/// An operation of the hub itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HubOp {
    /// Read the hub's files again and put them in force (as SIGHUP does).
    Reload,
}

impl HubOp {
    /// The operation a `hub-op` header names.
    pub fn from_name(name: &str) -> Option<HubOp> {
        match name {
            "reload" => Some(HubOp::Reload),
            _ => None,
        }
    }
}

/// Why an operation of the hub was not carried out; its text is the `internal` error the
/// asking agent gets.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HubOpError {
    /// Nothing carries out operations on this hub ([`Hub::on_hub_op`](crate::Hub::on_hub_op)
    /// was never called).
    #[error("this hub carries out no operations")]
    NoHandler,
    /// The handler does not know this operation.
    #[error("{0:?} is not carried out by this hub")]
    Unsupported(HubOp),
    /// The hub is stopping.
    #[error("the hub is stopping")]
    Stopping,
    /// The operation failed.
    #[error("{what}: {source}")]
    Failed {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl HubOpError {
    /// `what` failed for `source`.
    pub fn failed(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        HubOpError::Failed {
            what: what.into(),
            source: source.into(),
        }
    }
}

impl<D, R> HubCore<D, R> {
    /// A request to `$hub` (its id, and where its answer goes): refused unless its sender's
    /// credential grants `admin` and it names a known operation, else handed to the driver.
    pub(super) fn on_hub_op(
        &self,
        conn: &Arc<Conn<D, R>>,
        reg: &Registration,
        raw: &RawFrame,
        (request, reply): (u64, Option<R>),
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        if !reg.grant.as_ref().is_some_and(|g| g.admin) {
            let why = "hub operations need an access-file credential with \"admin\": true";
            self.denied(conn, why, Some((request, reply)), now, out);
            return;
        }
        let name = reg
            .codec
            .decode_envelope(&raw.payload)
            .ok()
            .and_then(|env| env.headers.get(HUB_OP_HEADER).cloned());
        let Some(op) = name.as_deref().and_then(HubOp::from_name) else {
            let why = format!("{HUB_OP_HEADER} {name:?} is not an operation of the hub (reload)");
            self.send_error(
                conn,
                request,
                ErrorCode::ProtocolViolation,
                &why,
                reply,
                now,
                out,
            );
            return;
        };
        tracing::info!(agent = %reg.agent_id, ?op, "hub operation asked");
        out.push(Action::HubOp {
            conn: conn.clone(),
            request,
            op,
            reply,
        });
    }

    /// The driver's answer to an [`Action::HubOp`]: a `response` whose body is `result`'s
    /// text, or an `error` with `internal` and the reason.
    pub fn answer_hub_op(
        &self,
        conn: &Arc<Conn<D, R>>,
        request: u64,
        result: Result<String, HubOpError>,
        reply: Option<R>,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        let body = match result {
            Ok(body) => body,
            Err(why) => {
                let why = why.to_string();
                self.send_error(conn, request, ErrorCode::Internal, &why, reply, now, out);
                return;
            }
        };
        let Some(reg) = conn.registration() else {
            return;
        };
        let env = self
            .hub_envelope(
                Destination::Agent(reg.agent_id.to_string()),
                Kind::Response,
                now,
            )
            .with_correlation(request)
            .with_body(body.into_bytes());
        self.push_hub_envelope(conn, &env, Priority::Medium, reply, out);
    }
}
