//! quinn's connection and write errors as `TransportError`s, with the TLS alert a peer sent where there was one.
//!
//! This module owns the mapping only.

use super::*;

/// Maps a quinn connection error to ours, recovering agentwire close codes.
pub fn map_connection_error(e: &quinn::ConnectionError) -> TransportError {
    use quinn::ConnectionError as C;
    match e {
        C::ApplicationClosed(close) => {
            let code = ErrorCode::from_code(
                u32::try_from(close.error_code.into_inner()).unwrap_or(u32::MAX),
            );
            TransportError::Closed {
                code,
                reason: format!(
                    "closed by peer: {} {}",
                    code.map(|c| c.name()).unwrap_or("unknown-code"),
                    String::from_utf8_lossy(&close.reason)
                )
                .trim_end()
                .to_owned(),
            }
        }
        C::LocallyClosed => TransportError::Closed {
            code: Some(ErrorCode::Normal),
            reason: "closed locally".into(),
        },
        C::TimedOut => TransportError::Closed {
            code: None,
            reason: "idle timeout: no packets from the peer".into(),
        },
        C::ConnectionClosed(close) => match crypto_alert(u64::from(close.error_code)) {
            // The peer refused the TLS handshake with this alert.
            Some(alert) => ConnectError::Tls(rustls::Error::AlertReceived(alert)).into(),
            None => ConnectError::quic("the peer", e.clone()).into(),
        },
        // A failure on this side (our TLS check of the peer among them: the dialer turns those
        // into the rustls error itself, see `QuicDial`).
        C::TransportError(_) => ConnectError::quic("QUIC", e.clone()).into(),
        other => TransportError::Closed {
            code: None,
            reason: other.to_string(),
        },
    }
}

/// The TLS alert a QUIC crypto error code carries (0x100 + alert), if it is one.
pub(super) fn crypto_alert(code: u64) -> Option<rustls::AlertDescription> {
    let alert = code.checked_sub(0x100).filter(|a| *a <= 0xff)?;
    u8::try_from(alert).ok().map(rustls::AlertDescription::from)
}

pub(super) fn map_write_error(e: quinn::WriteError) -> TransportError {
    match e {
        quinn::WriteError::ConnectionLost(c) => map_connection_error(&c),
        other => TransportError::io("stream write failed", other),
    }
}
