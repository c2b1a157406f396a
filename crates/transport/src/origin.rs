//! Which web pages may reach the hub: `--allow-origin` patterns matched against the `Origin`
//! header of a WebTransport CONNECT or a WebSocket upgrade.
//!
//! This module owns the patterns and the match; it must not read requests (the transports
//! hand it the header) or answer them.

/// Which web pages may reach the hub: the `Origin` a browser sends with a WebTransport CONNECT
/// or a WebSocket upgrade must match one of the patterns (`--allow-origin`). A pattern is an
/// origin as browsers write it (`https://app.example.com`, `http://localhost:8080`), in which
/// `*` stands for any run of characters other than `/` (`https://*.example.com`,
/// `http://localhost:*`), or `*` alone for any page.
///
/// A request without an `Origin` does not come from a page (browsers always send one): it is
/// let through, and its hello's credentials decide, as for every other agent.
///
/// ```
/// use agentwire_transport::origin::OriginPolicy;
/// let p = OriginPolicy::new(["https://*.example.com", "http://localhost:*"]).unwrap();
/// assert!(p.allows(Some("https://app.example.com")));
/// assert!(p.allows(Some("http://localhost:5173")));
/// assert!(!p.allows(Some("https://example.com.evil.net")));
/// assert!(!p.allows(Some("https://evil.net/https://app.example.com")));
/// assert!(p.allows(None));
/// assert!(!OriginPolicy::default().allows(Some("https://app.example.com")));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OriginPolicy {
    patterns: Vec<String>,
}

/// An `--allow-origin` pattern that cannot match an origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{pattern:?} is not an origin pattern ({why}); write it as a page's origin, e.g. https://app.example.com or http://localhost:*")]
pub struct OriginPatternError {
    /// The pattern given.
    pub pattern: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl OriginPolicy {
    /// A policy allowing the pages whose origin matches one of `patterns`.
    pub fn new<I, S>(patterns: I) -> Result<OriginPolicy, OriginPatternError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut out = Vec::new();
        for pattern in patterns {
            let pattern: String = pattern.into();
            let bad = |why| OriginPatternError {
                pattern: pattern.clone(),
                why,
            };
            if pattern != "*" {
                let Some((scheme, rest)) = pattern.split_once("://") else {
                    return Err(bad("no scheme"));
                };
                if scheme.is_empty() || rest.is_empty() {
                    return Err(bad("no scheme or no host"));
                }
                if rest.contains('/') {
                    return Err(bad("an origin has no path"));
                }
            }
            if pattern.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(bad("white space or a control character"));
            }
            out.push(pattern);
        }
        Ok(OriginPolicy { patterns: out })
    }

    /// Whether a session whose request (CONNECT or upgrade) carried `origin` may go on.
    pub fn allows(&self, origin: Option<&str>) -> bool {
        let Some(origin) = origin else { return true };
        self.patterns
            .iter()
            .any(|p| p == "*" || glob_matches(p.as_bytes(), origin.as_bytes()))
    }
}

/// `*` in `pattern` matches any run of bytes other than `/`; everything else matches itself
/// (ASCII case-insensitively, as origins compare).
fn glob_matches(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len())
            .take_while(|&i| i == 0 || text[i - 1] != b'/')
            .any(|i| glob_matches(rest, &text[i..])),
        Some((c, rest)) => match text.split_first() {
            Some((t, more)) if t.eq_ignore_ascii_case(c) => glob_matches(rest, more),
            _ => false,
        },
    }
}
