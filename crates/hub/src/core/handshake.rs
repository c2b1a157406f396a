//! The hello: who an agent is (its credential, its certificate's name), what it may do (the
//! access policy's grant), its id taken in the registry, the welcome or the reject; and a
//! reloaded policy or certificate checked against the agents already in.
//!
//! This module owns admitting and refusing agents; it must not route their messages.

use agentwire_sync::RwLockExt;
use std::sync::Arc;

use agentwire_proto::{Codec, ErrorCode, Frame, HubDecision, RawFrame};

use super::access;
use super::access::{AccessPolicy, Grant};
use super::conn::{Conn, Registration};
use super::outbound::control;
use super::registry::Registered;
use super::{reserved, Action, HubCore, Now, QUEUE_OWNER_ID};
use crate::metrics::outcome;
use agentwire_transport::TransportKind;

/// What the hub knows of an agent's credential once it is admitted.
#[derive(Default)]
pub(super) struct Admitted {
    /// What it may do (`None`: no access file, anything).
    pub(super) grant: Option<Arc<Grant>>,
    /// The SHA-256 of the token it showed to the access file.
    pub(super) token_sha256: Option<[u8; 32]>,
}

impl<D, R> HubCore<D, R> {
    pub(super) fn on_hello(
        &self,
        conn: &Arc<Conn<D, R>>,
        raw: &RawFrame,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        self.lock_handshaking().remove(&conn.id());
        let transport = conn.transport().name();
        let (welcome, session) = match self.handshake.on_frame(raw, conn.id()) {
            HubDecision::Accept { reply, session } => (reply, session),
            HubDecision::Reject { reply, code } => {
                self.reject(conn, reply, code, now, out);
                return;
            }
        };
        if let Some(why) = reserved::id_refusal(&session.agent_id, conn.transport()) {
            let code = ErrorCode::Unauthorized;
            let reply = agentwire_proto::Reject::new(code, why).to_frame();
            self.reject(conn, reply, code, now, out);
            return;
        }
        let Admitted {
            grant,
            token_sha256,
        } = match self.authorize(conn, raw, &session.agent_id) {
            Ok(admitted) => admitted,
            Err(why) => {
                let reply = agentwire_proto::Reject::new(ErrorCode::Unauthorized, why).to_frame();
                self.reject(conn, reply, ErrorCode::Unauthorized, now, out);
                return;
            }
        };
        let agent_id: Arc<str> = Arc::from(session.agent_id.as_str());
        conn.register(Registration {
            agent_id: agent_id.clone(),
            role: session.role.clone(),
            codec: session.codec,
            max_frame_size: session.max_frame_size,
            counted_goodbye: session.has_capability(agentwire_proto::counted_goodbye::CAPABILITY),
            grant,
            token_sha256,
        });
        // The welcome is queued before the id becomes reachable, so that it leaves before any
        // message routed to this agent (the driver's writer takes nothing until woken).
        self.push(conn, control(welcome), out);
        match self
            .registry
            .register(&agent_id, conn, self.config.duplicate_policy)
        {
            Ok(Registered::Fresh) => {}
            Ok(Registered::Replaced(old)) => {
                self.close_as(
                    &old,
                    ErrorCode::Replaced,
                    "replaced by a newer connection",
                    false,
                    true,
                    now,
                    out,
                );
            }
            Err(code) => {
                conn.lock().queue.clear();
                let reply = agentwire_proto::Reject::new(
                    code,
                    format!("agent id {:?} is already connected", session.agent_id),
                )
                .to_frame();
                self.reject(conn, reply, code, now, out);
                return;
            }
        }
        out.push(Action::Registered(conn.clone()));
        self.agents_changed(conn, out);
        self.metrics.handshake(transport, outcome::ACCEPTED);
        self.metrics.agent_registered(transport);
        tracing::debug!(agent = %session.agent_id, session_id = conn.id(), codec = %session.codec, transport, "agent joined");
        self.publish_presence(conn, "join", None, now, out);
        // A close that raced with the registration (a handshake timeout, a shutdown) still
        // unregisters it: closing again looks the id up.
        if conn.is_closed() {
            self.close(
                conn,
                ErrorCode::Normal,
                "closed during the handshake",
                false,
                now,
                out,
            );
        }
    }

    /// Whether `conn` may take `agent_id` (its certificate, the hub's rule on certificates and
    /// the access policy decide), and with which grant; `Err` says why not.
    pub(super) fn authorize(
        &self,
        conn: &Conn<D, R>,
        raw: &RawFrame,
        agent_id: &str,
    ) -> Result<Admitted, String> {
        if conn.transport() == TransportKind::Cluster {
            // An agent of another hub: that hub checked its credential and its sends; here it
            // is held to what this hub's access file grants its id at most (hubs of a cluster
            // share their access file). The queue keeper is the hubs' own.
            let policy = match self.access_policy() {
                Some(policy) if agent_id != QUEUE_OWNER_ID => policy,
                _ => return Ok(Admitted::default()),
            };
            return policy
                .grant_for_remote(agent_id)
                .map(|grant| Admitted {
                    grant: Some(grant),
                    token_sha256: None,
                })
                .ok_or_else(|| {
                    format!("no credential here names {agent_id:?}, an agent of another hub")
                });
        }
        let certified = conn.certified_id.get();
        match certified {
            Some(id) if **id != *agent_id => {
                return Err(format!(
                    "the agent certificate names {id:?}, not {agent_id:?}"
                ))
            }
            None if self.config.require_client_cert && conn.transport() != TransportKind::Unix => {
                return Err("this hub requires an agent certificate (mutual TLS)".into())
            }
            _ => {}
        }
        let Some(policy) = self.access_policy() else {
            return Ok(Admitted::default());
        };
        let token = match Frame::decode(raw, Codec::MsgPack) {
            Ok(Frame::Hello(h)) => h.auth_token.as_deref().map(access::token_digest),
            _ => None,
        };
        policy
            .admit_digest(agent_id, token.as_ref(), certified.is_some())
            .map(|grant| Admitted {
                grant: Some(grant),
                token_sha256: token,
            })
            .ok_or_else(|| match certified {
                Some(_) => format!("no credential for the certified agent id {agent_id:?}"),
                None => format!("no credential for agent id {agent_id:?} with this token"),
            })
    }

    /// The access policy in force.
    pub(super) fn access_policy(&self) -> Option<Arc<AccessPolicy>> {
        self.access.read_or_recover().clone()
    }

    /// Puts `policy` in force (a reloaded access file) and checks every connected agent
    /// against it: an agent whose credential no longer names its id, or whose permissions
    /// changed, is closed with `unauthorized` (it may connect again under the new rules);
    /// the others keep their connections. Agents of other hubs are their hub's to check.
    /// Returns how many were closed.
    pub fn reload_access(
        &self,
        policy: Arc<AccessPolicy>,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) -> usize {
        *self.access.write_or_recover() = Some(policy.clone());
        let mut closed = 0;
        for conn in self.registry.all() {
            let Some(reg) = conn.registration() else {
                continue;
            };
            if conn.transport() == TransportKind::Cluster {
                continue;
            }
            let certified = conn.certified_id.get().is_some();
            let now_granted =
                policy.admit_digest(&reg.agent_id, reg.token_sha256.as_ref(), certified);
            let why = match (&now_granted, &reg.grant) {
                (None, _) => "its credential was removed from the access file",
                (Some(new), Some(old)) if new == old => continue,
                (Some(_), _) => "its permissions changed; connect again",
            };
            tracing::info!(agent = %reg.agent_id, why, "closing an agent after an access reload");
            self.metrics.dropped("credential-revoked");
            self.close(&conn, ErrorCode::Unauthorized, why, false, now, out);
            closed += 1;
        }
        closed
    }

    /// Closes `conn` with `unauthorized` because its credential is no longer good (`why`),
    /// counted as `dropped{reason="credential-revoked"}`.
    pub fn revoke(&self, conn: &Arc<Conn<D, R>>, why: &str, now: Now, out: &mut Vec<Action<D, R>>) {
        self.metrics.dropped("credential-revoked");
        self.close(conn, ErrorCode::Unauthorized, why, false, now, out);
    }
}
