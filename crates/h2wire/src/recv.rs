//! The receiving half of a [`ClientConn`]: each frame the server sends (DATA, HEADERS and
//! CONTINUATION, SETTINGS, PING, GOAWAY, RST_STREAM, WINDOW_UPDATE), checked against RFC 9113
//! and turned into [`Event`]s, with receive flow control and the response head's checks.
//!
//! This module owns reading; what the client sends is `lib.rs`'s.

use crate::{
    code, flag, frame, setting, ClientConn, Event, H2Error, PartialBlock, Phase, RefusedBy,
    ResetBy, StreamId, MAX_HEADER_BLOCK, MAX_WINDOW,
};

impl ClientConn {
    pub(crate) fn on_frame(
        &mut self,
        ty: u8,
        flags: u8,
        stream: u32,
        payload: &[u8],
        on_event: &mut impl FnMut(Event<'_>),
    ) -> Result<(), H2Error> {
        if !self.preface_seen {
            if ty != frame::SETTINGS || flags & flag::ACK != 0 {
                return Err(H2Error::protocol(
                    "the server's first frame is not SETTINGS",
                ));
            }
            self.preface_seen = true;
        }
        if let Some(partial) = &self.partial {
            if ty != frame::CONTINUATION || stream != partial.stream {
                return Err(H2Error::protocol("a header block was interrupted"));
            }
        }
        match ty {
            frame::DATA => self.on_data(flags, stream, payload, on_event),
            frame::HEADERS => self.on_headers(flags, stream, payload, on_event),
            frame::PRIORITY => {
                if stream == 0 {
                    return Err(H2Error::protocol("PRIORITY on stream 0"));
                }
                Ok(())
            }
            frame::RST_STREAM => {
                if payload.len() != 4 {
                    return Err(H2Error::frame_size("RST_STREAM is not 4 bytes"));
                }
                self.check_not_idle(
                    stream,
                    "RST_STREAM on stream 0",
                    "RST_STREAM on a stream that was never opened",
                )?;
                let code = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
                if self.streams.remove(&stream).is_some() {
                    let id = StreamId(stream);
                    on_event(if code == code::REFUSED_STREAM {
                        Event::Refused {
                            stream: id,
                            by: RefusedBy::ResetStream,
                        }
                    } else {
                        Event::Reset {
                            stream: id,
                            code,
                            by: ResetBy::Peer,
                            reason: "",
                        }
                    });
                }
                Ok(())
            }
            frame::SETTINGS => self.on_settings(flags, stream, payload),
            frame::PUSH_PROMISE => Err(H2Error::protocol("PUSH_PROMISE, but push is disabled")),
            frame::PING => {
                if stream != 0 {
                    return Err(H2Error::protocol("PING on a stream"));
                }
                if payload.len() != 8 {
                    return Err(H2Error::frame_size("PING is not 8 bytes"));
                }
                if flags & flag::ACK == 0 {
                    self.frame(frame::PING, flag::ACK, 0, payload);
                }
                Ok(())
            }
            frame::GOAWAY => {
                if stream != 0 {
                    return Err(H2Error::protocol("GOAWAY on a stream"));
                }
                if payload.len() < 8 {
                    return Err(H2Error::frame_size("GOAWAY shorter than 8 bytes"));
                }
                let last = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                    & MAX_WINDOW;
                let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                let last = self.goaway_received.map_or(last, |before| before.min(last));
                self.goaway_received = Some(last);
                let mut refused: Vec<u32> = self
                    .streams
                    .keys()
                    .copied()
                    .filter(|id| *id > last)
                    .collect();
                refused.sort_unstable();
                for id in refused {
                    self.streams.remove(&id);
                    on_event(Event::Refused {
                        stream: StreamId(id),
                        by: RefusedBy::GoAway,
                    });
                }
                on_event(Event::GoAway {
                    last_stream: StreamId(last),
                    code,
                    debug: &payload[8..],
                });
                Ok(())
            }
            frame::WINDOW_UPDATE => {
                if payload.len() != 4 {
                    return Err(H2Error::frame_size("WINDOW_UPDATE is not 4 bytes"));
                }
                let increment =
                    u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                        & MAX_WINDOW;
                if stream == 0 {
                    if increment == 0 {
                        return Err(H2Error::protocol("WINDOW_UPDATE of 0 on the connection"));
                    }
                    self.send_window += i64::from(increment);
                    if self.send_window > i64::from(MAX_WINDOW) {
                        return Err(H2Error::new(
                            code::FLOW_CONTROL_ERROR,
                            "the connection's send window grew beyond 2^31-1",
                        ));
                    }
                    return Ok(());
                }
                self.check_not_idle(
                    stream,
                    "WINDOW_UPDATE on stream 0",
                    "WINDOW_UPDATE on a stream that was never opened",
                )?;
                if increment == 0 && self.streams.contains_key(&stream) {
                    self.stream_error(stream, code::PROTOCOL_ERROR, "WINDOW_UPDATE of 0", on_event);
                }
                // No request has a body: stream send windows are not needed.
                Ok(())
            }
            frame::CONTINUATION => {
                let Some(partial) = self.partial.clone() else {
                    return Err(H2Error::protocol("CONTINUATION without HEADERS"));
                };
                if self.block.len() + payload.len() > MAX_HEADER_BLOCK {
                    return Err(H2Error::new(
                        code::ENHANCE_YOUR_CALM,
                        "header block larger than 256 KiB",
                    ));
                }
                self.block.extend_from_slice(payload);
                if flags & flag::END_HEADERS != 0 {
                    self.partial = None;
                    let block = std::mem::take(&mut self.block);
                    let result =
                        self.on_block(partial.stream, &block, partial.end_stream, on_event);
                    self.block = block;
                    self.block.clear();
                    result?;
                }
                Ok(())
            }
            // Unknown frame types are ignored (RFC 9113 section 4.1).
            _ => Ok(()),
        }
    }

    /// Refuses stream 0 and ids this side never opened: even ones (push is disabled) and
    /// those not yet used.
    fn check_not_idle(
        &self,
        stream: u32,
        on_zero: &'static str,
        on_idle: &'static str,
    ) -> Result<(), H2Error> {
        if stream == 0 {
            return Err(H2Error::protocol(on_zero));
        }
        if stream % 2 == 0 || stream >= self.next_stream {
            return Err(H2Error::protocol(on_idle));
        }
        Ok(())
    }

    fn stream_error(
        &mut self,
        stream: u32,
        code: u32,
        reason: &'static str,
        on_event: &mut impl FnMut(Event<'_>),
    ) {
        self.reset(stream, code);
        on_event(Event::Reset {
            stream: StreamId(stream),
            code,
            by: ResetBy::Us,
            reason,
        });
    }

    /// The payload without its padding (and `skip` more leading bytes, for HEADERS'
    /// priority fields).
    fn unpad(flags: u8, payload: &[u8], skip: usize) -> Result<&[u8], H2Error> {
        let (pad, body) = if flags & flag::PADDED != 0 {
            match payload.split_first() {
                Some((pad, body)) => (usize::from(*pad), body),
                None => return Err(H2Error::frame_size("padded frame without a pad length")),
            }
        } else {
            (0, payload)
        };
        if pad + skip > body.len() {
            return Err(H2Error::protocol("padding longer than the frame"));
        }
        Ok(&body[skip..body.len() - pad])
    }

    fn on_data(
        &mut self,
        flags: u8,
        stream: u32,
        payload: &[u8],
        on_event: &mut impl FnMut(Event<'_>),
    ) -> Result<(), H2Error> {
        self.check_not_idle(
            stream,
            "DATA on stream 0",
            "DATA on a stream that was never opened",
        )?;
        let len = payload.len() as u32;
        if len > self.window {
            return Err(H2Error::new(
                code::FLOW_CONTROL_ERROR,
                "DATA beyond the connection's window",
            ));
        }
        self.window -= len;
        self.unacked += len;
        if self.unacked >= self.settings.conn_window / 2 {
            let inc = std::mem::take(&mut self.unacked);
            self.window += inc;
            self.window_update(0, inc);
        }
        let data = Self::unpad(flags, payload, 0)?;
        let end_stream = flags & flag::END_STREAM != 0;
        let half = self.settings.stream_window / 2;
        let Some(s) = self.streams.get(&stream) else {
            // A stream that ended or was cancelled: the data is dropped.
            return Ok(());
        };
        if s.phase == Phase::Head {
            self.stream_error(
                stream,
                code::PROTOCOL_ERROR,
                "DATA before the response head",
                on_event,
            );
            return Ok(());
        }
        if len > s.window {
            self.stream_error(
                stream,
                code::FLOW_CONTROL_ERROR,
                "DATA beyond the stream's window",
                on_event,
            );
            return Ok(());
        }
        let id = StreamId(stream);
        if end_stream {
            self.streams.remove(&stream);
        } else if let Some(s) = self.streams.get_mut(&stream) {
            s.window -= len;
            s.unacked += len;
            if s.unacked >= half {
                let inc = std::mem::take(&mut s.unacked);
                s.window += inc;
                self.window_update(stream, inc);
            }
        }
        on_event(Event::Data {
            stream: id,
            data,
            end_stream,
        });
        Ok(())
    }

    fn on_headers(
        &mut self,
        flags: u8,
        stream: u32,
        payload: &[u8],
        on_event: &mut impl FnMut(Event<'_>),
    ) -> Result<(), H2Error> {
        self.check_not_idle(
            stream,
            "HEADERS on stream 0",
            "HEADERS on a stream that was never opened",
        )?;
        let skip = if flags & flag::PRIORITY != 0 { 5 } else { 0 };
        let fragment = Self::unpad(flags, payload, skip)?;
        let end_stream = flags & flag::END_STREAM != 0;
        if flags & flag::END_HEADERS != 0 {
            return self.on_block(stream, fragment, end_stream, on_event);
        }
        if fragment.len() > MAX_HEADER_BLOCK {
            return Err(H2Error::new(
                code::ENHANCE_YOUR_CALM,
                "header block larger than 256 KiB",
            ));
        }
        self.block.clear();
        self.block.extend_from_slice(fragment);
        self.partial = Some(PartialBlock { stream, end_stream });
        Ok(())
    }

    /// A complete header block for `stream`.
    fn on_block(
        &mut self,
        stream: u32,
        block: &[u8],
        end_stream: bool,
        on_event: &mut impl FnMut(Event<'_>),
    ) -> Result<(), H2Error> {
        let mut head = HeadCheck::new(self.settings.max_header_list_size);
        self.hpack
            .decode(block, &mut |name, value| head.field(name, value))?;
        let Some(phase) = self.streams.get(&stream).map(|s| s.phase) else {
            // Decoded only to keep the table in step.
            return Ok(());
        };
        let id = StreamId(stream);
        match phase {
            Phase::Head => {
                let status = match head.finish_response() {
                    Ok(status) => status,
                    Err(reason) => {
                        self.stream_error(stream, code::PROTOCOL_ERROR, reason, on_event);
                        return Ok(());
                    }
                };
                if (100..200).contains(&status) {
                    if end_stream || status == 101 {
                        self.stream_error(
                            stream,
                            code::PROTOCOL_ERROR,
                            "an informational response that ends the stream, or 101",
                            on_event,
                        );
                    }
                    return Ok(());
                }
                if end_stream {
                    self.streams.remove(&stream);
                } else if let Some(s) = self.streams.get_mut(&stream) {
                    s.phase = Phase::Body;
                }
                on_event(Event::Response {
                    stream: id,
                    status,
                    content_length: head.content_length,
                    end_stream,
                });
            }
            Phase::Body => {
                let reason = if !end_stream {
                    Some("trailers without END_STREAM")
                } else if head.pseudo_seen {
                    Some("a pseudo-header in trailers")
                } else {
                    head.malformed
                };
                match reason {
                    Some(reason) => {
                        self.stream_error(stream, code::PROTOCOL_ERROR, reason, on_event)
                    }
                    None => {
                        self.streams.remove(&stream);
                        on_event(Event::Trailers { stream: id });
                    }
                }
            }
        }
        Ok(())
    }

    fn on_settings(&mut self, flags: u8, stream: u32, payload: &[u8]) -> Result<(), H2Error> {
        if stream != 0 {
            return Err(H2Error::protocol("SETTINGS on a stream"));
        }
        if flags & flag::ACK != 0 {
            if !payload.is_empty() {
                return Err(H2Error::frame_size("SETTINGS ACK with a payload"));
            }
            return Ok(());
        }
        if payload.len() % 6 != 0 {
            return Err(H2Error::frame_size(
                "SETTINGS length is not a multiple of 6",
            ));
        }
        for item in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([item[0], item[1]]);
            let value = u32::from_be_bytes([item[2], item[3], item[4], item[5]]);
            match id {
                setting::ENABLE_PUSH if value > 1 => {
                    return Err(H2Error::protocol("SETTINGS_ENABLE_PUSH other than 0 or 1"))
                }
                setting::ENABLE_PUSH if value == 1 => {
                    return Err(H2Error::protocol("a server sent SETTINGS_ENABLE_PUSH 1"))
                }
                setting::MAX_CONCURRENT_STREAMS => self.peer_max_streams = value,
                setting::INITIAL_WINDOW_SIZE if value > MAX_WINDOW => {
                    return Err(H2Error::new(
                        code::FLOW_CONTROL_ERROR,
                        "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1",
                    ))
                }
                setting::MAX_FRAME_SIZE => {
                    if !(16_384..=16_777_215).contains(&value) {
                        return Err(H2Error::protocol("SETTINGS_MAX_FRAME_SIZE out of range"));
                    }
                    self.peer_max_frame = value as usize;
                }
                setting::HEADER_TABLE_SIZE => self.encoder.set_table_limit(value as usize),
                // MAX_HEADER_LIST_SIZE: request heads are small. Unknown settings are ignored.
                _ => {}
            }
        }
        self.frame(frame::SETTINGS, flag::ACK, 0, &[]);
        Ok(())
    }
}

/// Checks a response head as its fields are decoded (RFC 9113 section 8.3 and 8.2).
struct HeadCheck {
    status: Option<u16>,
    content_length: Option<u64>,
    pseudo_seen: bool,
    regular_seen: bool,
    size: usize,
    limit: usize,
    /// The first thing found wrong.
    malformed: Option<&'static str>,
}

impl HeadCheck {
    fn new(limit: u32) -> Self {
        HeadCheck {
            status: None,
            content_length: None,
            pseudo_seen: false,
            regular_seen: false,
            size: 0,
            limit: limit as usize,
            malformed: None,
        }
    }

    fn bad(&mut self, reason: &'static str) {
        self.malformed.get_or_insert(reason);
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.size += name.len() + value.len() + 32;
        if self.size > self.limit {
            self.bad("response head larger than SETTINGS_MAX_HEADER_LIST_SIZE");
        }
        if name.first() == Some(&b':') {
            self.pseudo_seen = true;
            if self.regular_seen {
                self.bad("a pseudo-header after a regular field");
            } else if name != b":status" {
                self.bad("a pseudo-header other than :status in a response");
            } else if self.status.is_some() {
                self.bad(":status twice");
            } else {
                match value {
                    [a, b, c] if value.iter().all(u8::is_ascii_digit) => {
                        self.status = Some(
                            u16::from(a - b'0') * 100
                                + u16::from(b - b'0') * 10
                                + u16::from(c - b'0'),
                        );
                    }
                    _ => self.bad(":status is not three digits"),
                }
            }
            return;
        }
        self.regular_seen = true;
        if name.iter().any(u8::is_ascii_uppercase) || name.is_empty() {
            self.bad("a field name with upper case letters, or empty");
        }
        match name {
            b"content-length" => match parse_decimal(value) {
                Some(n) if self.content_length.is_none_or(|before| before == n) => {
                    self.content_length = Some(n)
                }
                _ => self.bad("content-length is not one decimal number"),
            },
            b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding"
            | b"upgrade" => self.bad("a connection-specific field"),
            _ => {}
        }
    }

    fn finish_response(&mut self) -> Result<u16, &'static str> {
        if let Some(reason) = self.malformed {
            return Err(reason);
        }
        self.status.ok_or("no :status")
    }
}

fn parse_decimal(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(value.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}
