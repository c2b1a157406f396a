//! Who may connect as which agent id, and what each may do: per-agent credentials and
//! permissions, loaded from an access file (`agentwire hub --access-file FILE`).
//!
//! Owns the file's format, token checking and pattern matching; the hub core asks it at the
//! handshake ([`AccessPolicy::admit`]) and on every send, subscribe and consume ([`Grant`]).
//! It must not route anything or do I/O beyond reading the file it is given.
//!
//! The file is JSON. Each credential names either a token by its SHA-256 (the file holds no
//! token) or `"client_cert": true` (agents showing a certificate from the hub's client CA,
//! which names their id: `agentwire hub --client-ca`), the agent ids it may take (patterns),
//! and what they may do:
//!
//! ```json
//! {"credentials": [
//!   {"token_sha256": "9f86d0...", "ids": ["coordinator"],
//!    "send": ["queue:jobs", "agent:worker-*", "topic:status.*"], "subscribe": ["results.*"]},
//!   {"client_cert": true, "ids": ["worker-*"],
//!    "send": ["agent:coordinator", "topic:results.*"], "consume": ["jobs"]}
//! ]}
//! ```
//!
//! Patterns: `*` matches any run of characters (so `"*"` alone allows everything); anything
//! else matches itself. `send` patterns name destinations as the CLI writes them:
//! `agent:ID`, `topic:NAME`, `queue:NAME`, and `*` for broadcast. A list left out allows
//! nothing. Answers to requests (`response` and `error` envelopes with a correlation, to one
//! agent) need no `send` pattern, as NATS allows responses; the hub core delivers an answer
//! only from the agent the request went to. Tokens should be long and random
//! (`agentwire token` makes one): a SHA-256 of a guessable token is easy to reverse.

use std::path::{Path, PathBuf};

use agentwire_proto::{DestinationRef, Kind};
use serde::Deserialize;

/// What one credential allows.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Grant {
    /// Destinations it may send to (`agent:ID`, `topic:NAME`, `queue:NAME`, `*`).
    #[serde(default)]
    pub send: Vec<String>,
    /// Topics it may subscribe to.
    #[serde(default)]
    pub subscribe: Vec<String>,
    /// Queues it may consume (and look at: stats, dead letters, replay, discard).
    #[serde(default)]
    pub consume: Vec<String>,
    /// It may ask the hub itself for operations (`$hub` requests with a `hub-op` header,
    /// such as `reload`).
    #[serde(default)]
    pub admin: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Credential {
    #[serde(default)]
    token_sha256: Option<String>,
    #[serde(default)]
    client_cert: bool,
    ids: Vec<String>,
    #[serde(default)]
    send: Vec<String>,
    #[serde(default)]
    subscribe: Vec<String>,
    #[serde(default)]
    consume: Vec<String>,
    #[serde(default)]
    admin: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AccessFile {
    credentials: Vec<Credential>,
}

/// What an agent shows to use a credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proof {
    /// A token with this SHA-256.
    Token([u8; 32]),
    /// A verified agent certificate naming the id.
    Certificate,
}

#[derive(Debug, Clone)]
struct Entry {
    proof: Proof,
    ids: Vec<String>,
    grant: std::sync::Arc<Grant>,
}

/// The hub's credentials and permissions.
#[derive(Debug, Clone)]
pub struct AccessPolicy {
    credentials: Vec<Entry>,
}

/// An access file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AccessError {
    /// It cannot be read.
    #[error("cannot read the access file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It is not valid (JSON, fields, token hashes).
    #[error("the access file {path} is not valid: {source}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: PolicyError,
    },
}

/// What is wrong with an access file's text ([`AccessPolicy::from_json`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// Not JSON, or not the file's fields (unknown fields are refused).
    #[error("{0}")]
    Json(#[source] serde_json::Error),
    /// A `token_sha256` that is not 64 hex digits.
    #[error("credential {credential}: token_sha256 must be 64 hex digits")]
    TokenHash {
        /// The credential, counted from 1.
        credential: usize,
    },
    /// A credential with both a token hash and `"client_cert": true`, or neither.
    #[error("credential {credential}: give either token_sha256 or \"client_cert\": true")]
    Proof {
        /// The credential, counted from 1.
        credential: usize,
    },
    /// A credential that names no agent id.
    #[error("credential {credential}: ids is empty")]
    NoIds {
        /// The credential, counted from 1.
        credential: usize,
    },
}

/// The SHA-256 of `token`.
pub fn token_digest(token: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, token.as_bytes()).as_ref());
    out
}

/// The SHA-256 of `token`, in lowercase hex (what an access file holds).
///
/// ```
/// use agentwire_hub::token_sha256;
/// assert_eq!(&token_sha256("test")[..8], "9f86d081");
/// ```
pub fn token_sha256(token: &str) -> String {
    hex::encode(token_digest(token))
}

impl AccessPolicy {
    /// Reads an access file (format in the module doc). Errors name the file.
    pub fn from_file(path: &Path) -> Result<Self, AccessError> {
        let text = std::fs::read_to_string(path).map_err(|source| AccessError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_json(&text).map_err(|source| AccessError::Invalid {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Reads an access file's text.
    ///
    /// ```
    /// use agentwire_hub::{token_sha256, AccessPolicy};
    /// let json = format!(r#"{{"credentials": [{{"token_sha256": "{}", "ids": ["worker-*"],
    ///     "send": ["agent:boss"], "consume": ["jobs"]}}]}}"#, token_sha256("s3cret-token"));
    /// let policy = AccessPolicy::from_json(&json).unwrap();
    /// assert!(policy.admit("worker-7", Some("s3cret-token"), false).is_some());
    /// assert!(policy.admit("boss", Some("s3cret-token"), false).is_none()); // not an id it names
    /// assert!(policy.admit("worker-7", Some("guess"), false).is_none());
    /// ```
    pub fn from_json(text: &str) -> Result<Self, PolicyError> {
        let file: AccessFile = serde_json::from_str(text).map_err(PolicyError::Json)?;
        let mut credentials = Vec::new();
        for (i, c) in file.credentials.into_iter().enumerate() {
            let proof = match (&c.token_sha256, c.client_cert) {
                (Some(hash), false) => Proof::Token(
                    hex::decode(hash.trim())
                        .ok()
                        .and_then(|h| <[u8; 32]>::try_from(h).ok())
                        .ok_or(PolicyError::TokenHash { credential: i + 1 })?,
                ),
                (None, true) => Proof::Certificate,
                _ => return Err(PolicyError::Proof { credential: i + 1 }),
            };
            if c.ids.is_empty() {
                return Err(PolicyError::NoIds { credential: i + 1 });
            }
            let grant = Grant {
                send: c.send,
                subscribe: c.subscribe,
                consume: c.consume,
                admin: c.admin,
            };
            credentials.push(Entry {
                proof,
                ids: c.ids,
                grant: std::sync::Arc::new(grant),
            });
        }
        Ok(AccessPolicy { credentials })
    }

    /// Whether any credential is a token (agents then send tokens in their hello).
    pub fn uses_tokens(&self) -> bool {
        self.credentials
            .iter()
            .any(|c| matches!(c.proof, Proof::Token(_)))
    }

    /// The grant of the first credential that names `agent_id` and whose proof the agent
    /// showed: its token is `token`, or it is a `client_cert` credential and `certified` (the
    /// agent's verified certificate names `agent_id`; the hub core checks that).
    pub fn admit(
        &self,
        agent_id: &str,
        token: Option<&str>,
        certified: bool,
    ) -> Option<std::sync::Arc<Grant>> {
        let given = token.map(token_digest);
        self.admit_digest(agent_id, given.as_ref(), certified)
    }

    /// [`admit`](Self::admit) for a token known by its SHA-256 ([`token_digest`]): what the
    /// hub keeps of an agent's token, to check it again when the access file is reloaded.
    pub fn admit_digest(
        &self,
        agent_id: &str,
        token_sha256: Option<&[u8; 32]>,
        certified: bool,
    ) -> Option<std::sync::Arc<Grant>> {
        self.credentials
            .iter()
            .find(|entry| {
                let shown = match (&entry.proof, token_sha256) {
                    (Proof::Certificate, _) => certified,
                    (Proof::Token(hash), Some(given)) => {
                        // Compared without an early exit: the hash of a wrong token says
                        // nothing useful, but there is no reason to leak how much matched.
                        hash.iter()
                            .zip(given)
                            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                            == 0
                    }
                    (Proof::Token(_), None) => false,
                };
                shown && entry.ids.iter().any(|p| matches(p, agent_id))
            })
            .map(|entry| entry.grant.clone())
    }
}

impl AccessPolicy {
    /// What an agent of another hub may do here: everything any credential naming its id
    /// allows (its own hub checked which credential it showed; this hub cannot, so it holds it
    /// to what its id could be granted at most). Never `admin`: operations are asked of one's
    /// own hub. `None` when no credential names the id.
    ///
    /// ```
    /// use agentwire_hub::AccessPolicy;
    /// let policy = AccessPolicy::from_json(r#"{"credentials": [
    ///     {"token_sha256": "00000000000000000000000000000000000000000000000000000000000000aa",
    ///      "ids": ["worker-*"], "send": ["agent:boss"], "admin": true},
    ///     {"client_cert": true, "ids": ["worker-1"], "subscribe": ["jobs.*"]}
    /// ]}"#)?;
    /// let g = policy.grant_for_remote("worker-1").unwrap();
    /// assert_eq!((g.send.len(), g.subscribe.len(), g.admin), (1, 1, false));
    /// assert!(policy.grant_for_remote("boss").is_none());
    /// # Ok::<(), agentwire_hub::PolicyError>(())
    /// ```
    pub fn grant_for_remote(&self, agent_id: &str) -> Option<std::sync::Arc<Grant>> {
        let mut union: Option<Grant> = None;
        for entry in &self.credentials {
            if !entry.ids.iter().any(|p| matches(p, agent_id)) {
                continue;
            }
            let g = union.get_or_insert_with(|| Grant {
                send: Vec::new(),
                subscribe: Vec::new(),
                consume: Vec::new(),
                admin: false,
            });
            for (into, from) in [
                (&mut g.send, &entry.grant.send),
                (&mut g.subscribe, &entry.grant.subscribe),
                (&mut g.consume, &entry.grant.consume),
            ] {
                for p in from {
                    if !into.contains(p) {
                        into.push(p.clone());
                    }
                }
            }
        }
        union.map(std::sync::Arc::new)
    }
}

impl Grant {
    /// Whether an envelope of `kind` may go to `to` (`correlation` set for answers).
    pub fn may_send(&self, to: &DestinationRef<'_>, kind: Kind, correlation: Option<u64>) -> bool {
        let answer = matches!(kind, Kind::Response | Kind::Error) && correlation.is_some();
        match to {
            DestinationRef::Agent(id) => answer || any_matches(&self.send, "agent:", id),
            DestinationRef::Topic(t) => any_matches(&self.send, "topic:", t),
            DestinationRef::Queue(q) => any_matches(&self.send, "queue:", q),
            DestinationRef::Broadcast => self.send.iter().any(|p| p == "*"),
        }
    }

    /// Whether it may subscribe to `topic`.
    pub fn may_subscribe(&self, topic: &str) -> bool {
        self.subscribe.iter().any(|p| matches(p, topic))
    }

    /// Whether it may consume (and look at) `queue`.
    pub fn may_consume(&self, queue: &str) -> bool {
        self.consume.iter().any(|p| matches(p, queue))
    }
}

fn any_matches(patterns: &[String], prefix: &str, name: &str) -> bool {
    patterns.iter().any(|p| {
        p == "*"
            || p.strip_prefix(prefix)
                .is_some_and(|rest| matches(rest, name))
    })
}

/// Glob matching with `*` only.
fn matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn patterns() {
        assert!(matches("*", "anything"));
        assert!(matches("worker-*", "worker-1"));
        assert!(!matches("worker-*", "boss"));
        assert!(matches("a*b*c", "a-x-b-y-c"));
        assert!(!matches("a*b*c", "a-x-c"));
        assert!(matches("exact", "exact"));
        assert!(!matches("exact", "exactly"));
        assert!(!matches("ab*ba", "aba"));
    }

    #[test]
    fn sends_subscribes_and_consumes_follow_the_grant() {
        let g = Grant {
            send: vec![
                "agent:worker-*".into(),
                "queue:jobs".into(),
                "topic:status.*".into(),
            ],
            subscribe: vec!["results.*".into()],
            consume: vec!["jobs".into()],
            admin: false,
        };
        assert!(g.may_send(&DestinationRef::Agent("worker-2"), Kind::Request, None));
        assert!(!g.may_send(&DestinationRef::Agent("boss"), Kind::Request, None));
        assert!(g.may_send(&DestinationRef::Agent("boss"), Kind::Response, Some(3)));
        assert!(!g.may_send(&DestinationRef::Agent("boss"), Kind::Response, None));
        assert!(g.may_send(&DestinationRef::Queue("jobs"), Kind::Request, None));
        assert!(!g.may_send(&DestinationRef::Queue("other"), Kind::Request, None));
        assert!(g.may_send(&DestinationRef::Topic("status.eu"), Kind::Event, None));
        assert!(!g.may_send(&DestinationRef::Broadcast, Kind::Event, None));
        assert!(g.may_subscribe("results.eu") && !g.may_subscribe("status.eu"));
        assert!(g.may_consume("jobs") && !g.may_consume("jobs2"));
    }

    #[test]
    fn bad_files_are_clear_errors() {
        assert!(AccessPolicy::from_json("{}")
            .unwrap_err()
            .to_string()
            .contains("credentials"));
        let short = r#"{"credentials": [{"token_sha256": "abcd", "ids": ["a"]}]}"#;
        assert!(matches!(
            AccessPolicy::from_json(short).unwrap_err(),
            PolicyError::TokenHash { credential: 1 }
        ));
        let typo = format!(
            r#"{{"credentials": [{{"token_sha256": "{}", "ids": ["a"], "sned": []}}]}}"#,
            token_sha256("t")
        );
        assert!(AccessPolicy::from_json(&typo)
            .unwrap_err()
            .to_string()
            .contains("sned"));
        for both_or_neither in [
            format!(
                r#"{{"credentials": [{{"token_sha256": "{}", "client_cert": true, "ids": ["a"]}}]}}"#,
                token_sha256("t")
            ),
            r#"{"credentials": [{"ids": ["a"]}]}"#.to_string(),
        ] {
            let err = AccessPolicy::from_json(&both_or_neither).unwrap_err();
            assert!(err.to_string().contains("either token_sha256"), "{err}");
            assert!(matches!(err, PolicyError::Proof { credential: 1 }));
        }
    }

    #[test]
    fn certificate_credentials_admit_certified_agents_only() {
        let json = format!(
            r#"{{"credentials": [
                {{"client_cert": true, "ids": ["worker-*"], "consume": ["jobs"]}},
                {{"token_sha256": "{}", "ids": ["boss"], "send": ["*"]}}]}}"#,
            token_sha256("boss-token")
        );
        let policy = AccessPolicy::from_json(&json).unwrap();
        let worker = policy.admit("worker-1", None, true).unwrap();
        assert!(worker.may_consume("jobs") && worker.send.is_empty());
        assert!(
            policy.admit("worker-1", None, false).is_none(),
            "no certificate shown"
        );
        assert!(policy
            .admit("worker-1", Some("boss-token"), false)
            .is_none());
        assert!(
            policy.admit("boss", None, true).is_none(),
            "certificates do not name boss"
        );
        let boss = policy.admit("boss", Some("boss-token"), true).unwrap();
        assert_eq!(boss.send, vec!["*".to_string()]);
    }

    proptest! {
        /// `*` matching agrees with a regular expression built from the pattern.
        #[test]
        fn glob_matches_like_a_regex(pattern in "[ab*]{0,6}", name in "[ab]{0,8}") {
            let re = format!("^{}$", pattern.split('*').map(regex_lite_escape).collect::<Vec<_>>().join(".*"));
            let expected = simple_regex(&re, &name);
            prop_assert_eq!(matches(&pattern, &name), expected);
        }
    }

    fn regex_lite_escape(s: &str) -> String {
        s.to_string() // only a and b: nothing to escape
    }

    /// A tiny backtracking matcher for `^...$` with literals and `.*` (the test's oracle).
    fn simple_regex(re: &str, name: &str) -> bool {
        fn go(p: &[u8], s: &[u8]) -> bool {
            if p.is_empty() {
                return s.is_empty();
            }
            if p.len() >= 2 && p[0] == b'.' && p[1] == b'*' {
                return (0..=s.len()).any(|i| go(&p[2..], &s[i..]));
            }
            !s.is_empty() && p[0] == s[0] && go(&p[1..], &s[1..])
        }
        let inner = &re.as_bytes()[1..re.len() - 1];
        go(inner, name.as_bytes())
    }
}
