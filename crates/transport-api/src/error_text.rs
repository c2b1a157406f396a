//! An error and its causes as one line of text, for logs, the CLI and the bindings.
//!
//! Owns only the rendering; it must not decide which errors are shown or how they are typed.

/// `e` and each cause below it, `: `-separated, leaving out a cause whose text the line
/// already holds (many errors repeat their cause's sentence in their own text).
///
/// ```
/// let io = std::io::Error::new(std::io::ErrorKind::Other, "disk full");
/// let e = agentwire_transport_api::TransportError::io("writing the store", io);
/// assert_eq!(agentwire_transport_api::error_chain(&e), "writing the store: disk full");
/// ```
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        next = cause.source();
    }
    text
}
