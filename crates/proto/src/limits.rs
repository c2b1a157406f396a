//! Limits that both ends enforce on what they accept.
//!
//! This module owns the numbers and the checks; it must not decide what to do when a check
//! fails (the transport closes the peer with [`ErrorCode::LimitExceeded`](crate::ErrorCode)).

use crate::Envelope;

/// Bounds on frames and envelopes. `max_frame_size` is negotiated at the handshake (the
/// smaller of the two sides' values wins); the rest are local policy.
///
/// ```
/// use agentwire_proto::{Destination, Envelope, Kind, Limits};
/// let limits = Limits::default();
/// assert_eq!(limits.max_frame_size, 16 * 1024 * 1024);
/// let ok = Envelope::new(1, "a", Destination::agent("b"), Kind::Task);
/// assert!(limits.check_envelope(&ok).is_ok());
/// let bad = Envelope::new(1, "a", Destination::agent("x".repeat(1000)), Kind::Task);
/// assert!(limits.check_envelope(&bad).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest frame (type byte + payload) accepted, in bytes.
    pub max_frame_size: u32,
    /// Most headers one envelope may carry.
    pub max_headers: usize,
    /// Most bytes of header keys and values together.
    pub max_header_bytes: usize,
    /// Longest agent id or topic name, in bytes.
    pub max_name_len: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_size: 16 * 1024 * 1024,
            max_headers: 64,
            max_header_bytes: 16 * 1024,
            max_name_len: 256,
        }
    }
}

/// A limit an envelope or name broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LimitError {
    /// Too many headers.
    #[error("{count} headers, limit {max}")]
    TooManyHeaders {
        /// Headers carried.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// Header keys and values too large together.
    #[error("{bytes} bytes of headers, limit {max}")]
    HeadersTooLarge {
        /// Bytes carried.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// An agent id or topic name that is empty, too long or has control characters.
    #[error("invalid name {name:?}: {why}")]
    InvalidName {
        /// The name, cut to 64 characters.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

impl Limits {
    /// Checks an agent id or topic name: 1..=`max_name_len` bytes, no control characters.
    pub fn check_name(&self, name: &str) -> Result<(), LimitError> {
        let why = if name.is_empty() {
            Some("empty")
        } else if name.len() > self.max_name_len {
            Some("too long")
        } else if name.chars().any(char::is_control) {
            Some("contains control characters")
        } else {
            None
        };
        match why {
            None => Ok(()),
            Some(why) => Err(LimitError::InvalidName {
                name: name.chars().take(64).collect(),
                why,
            }),
        }
    }

    /// Checks an envelope's headers and names against these limits.
    pub fn check_envelope(&self, env: &Envelope) -> Result<(), LimitError> {
        if env.headers.len() > self.max_headers {
            return Err(LimitError::TooManyHeaders {
                count: env.headers.len(),
                max: self.max_headers,
            });
        }
        let bytes: usize = env.headers.iter().map(|(k, v)| k.len() + v.len()).sum();
        if bytes > self.max_header_bytes {
            return Err(LimitError::HeadersTooLarge {
                bytes,
                max: self.max_header_bytes,
            });
        }
        match &env.to {
            crate::Destination::Agent(n)
            | crate::Destination::Topic(n)
            | crate::Destination::Queue(n) => self.check_name(n)?,
            crate::Destination::Broadcast => {}
        }
        if !env.from.is_empty() {
            self.check_name(&env.from)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Destination, Kind};

    fn env(to: Destination) -> Envelope {
        Envelope::new(1, "a", to, Kind::Task)
    }

    #[test]
    fn names() {
        let l = Limits::default();
        assert!(l.check_name("a").is_ok());
        assert!(l.check_name(&"x".repeat(256)).is_ok());
        assert!(l.check_name("ünï cödé").is_ok());
        for (name, why) in [
            ("".to_owned(), "empty"),
            ("x".repeat(257), "too long"),
            ("a\u{0}".to_owned(), "contains control characters"),
            ("a\r\n".to_owned(), "contains control characters"),
            ("\u{9b}".to_owned(), "contains control characters"),
        ] {
            match l.check_name(&name) {
                Err(LimitError::InvalidName {
                    name: shown,
                    why: w,
                }) => {
                    assert_eq!(w, why);
                    assert!(shown.chars().count() <= 64);
                }
                other => panic!("{name:?}: {other:?}"),
            }
        }
        // The limit counts bytes, not characters.
        let small = Limits {
            max_name_len: 3,
            ..Limits::default()
        };
        assert!(small.check_name("abc").is_ok());
        assert!(small.check_name("üb").is_ok()); // 3 bytes
        assert!(small.check_name("üü").is_err()); // 4 bytes, 2 characters
    }

    #[test]
    fn header_count() {
        let l = Limits {
            max_headers: 2,
            ..Limits::default()
        };
        let e = env(Destination::agent("b"))
            .with_header("1", "")
            .with_header("2", "");
        assert!(l.check_envelope(&e).is_ok());
        let e = e.with_header("3", "");
        assert_eq!(
            l.check_envelope(&e),
            Err(LimitError::TooManyHeaders { count: 3, max: 2 })
        );
    }

    #[test]
    fn header_bytes() {
        let l = Limits {
            max_header_bytes: 8,
            ..Limits::default()
        };
        let e = env(Destination::agent("b")).with_header("abcd", "efgh");
        assert!(l.check_envelope(&e).is_ok());
        let e = e.with_header("i", "");
        assert_eq!(
            l.check_envelope(&e),
            Err(LimitError::HeadersTooLarge { bytes: 9, max: 8 })
        );
    }

    #[test]
    fn destination_and_sender_names() {
        let l = Limits::default();
        assert!(l.check_envelope(&env(Destination::Broadcast)).is_ok());
        assert!(l.check_envelope(&env(Destination::topic("t"))).is_ok());
        assert!(l.check_envelope(&env(Destination::topic(""))).is_err());
        assert!(l.check_envelope(&env(Destination::agent("a\tb"))).is_err());
        // An empty sender is allowed (the hub fills it in); a bad one is not.
        let mut e = env(Destination::Broadcast);
        e.from = String::new();
        assert!(l.check_envelope(&e).is_ok());
        e.from = "x\n".into();
        assert!(l.check_envelope(&e).is_err());
    }

    #[test]
    fn errors_display() {
        assert_eq!(
            LimitError::TooManyHeaders { count: 3, max: 2 }.to_string(),
            "3 headers, limit 2"
        );
        assert!(Limits::default()
            .check_name("")
            .unwrap_err()
            .to_string()
            .contains("empty"));
    }
}
