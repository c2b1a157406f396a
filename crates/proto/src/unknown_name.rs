//! The error of parsing one name out of a fixed set: a priority, a congestion controller, a
//! stream mapping, a bench transport, a duplicate-id policy.
//!
//! This module owns the wording ("unknown X "y" (expected a, b or c)"), so that every such
//! flag and field says the same thing the same way; it must not know the sets themselves.

/// A name that is not one of the fixed set a field or flag takes.
///
/// ```
/// use agentwire_proto::UnknownName;
/// let e = UnknownName::new("stream mapping", "fast", "per-message or lanes");
/// assert_eq!(e.to_string(), r#"unknown stream mapping "fast" (expected per-message or lanes)"#);
/// assert_eq!(e.given(), "fast");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {given:?} (expected {expected})")]
pub struct UnknownName {
    what: &'static str,
    given: String,
    expected: &'static str,
}

impl UnknownName {
    /// `given` is not a `what`; the names it could have been, in words (`"a, b or c"`).
    pub fn new(what: &'static str, given: impl Into<String>, expected: &'static str) -> Self {
        UnknownName {
            what,
            given: given.into(),
            expected,
        }
    }

    /// What kind of name was asked for.
    pub fn what(&self) -> &'static str {
        self.what
    }

    /// The name as given.
    pub fn given(&self) -> &str {
        &self.given
    }
}
