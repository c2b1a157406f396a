//! The receiving half of an HTTP/2 connection: one bounded queue of the frames every stream delivered.
//!
//! This module owns the consumer's side only.

use super::*;

/// Receiving half of an HTTP/2 connection: frames from the session stream and (on the hub)
/// every message stream, merged.
pub struct H2Receiver {
    pub(super) core: Arc<Core>,
    pub(super) rx: mpsc::Receiver<Inbound>,
    pub(super) done: bool,
    pub(super) _owner: Arc<Owner>,
}

impl H2Receiver {
    pub(super) fn finish(
        &mut self,
        why: Option<TransportError>,
    ) -> Result<Option<RawFrame>, TransportError> {
        self.done = true;
        if self.core.clean.load(Ordering::Relaxed) {
            return Ok(None);
        }
        match why {
            None
            | Some(TransportError::Closed {
                code: Some(ErrorCode::Normal),
                ..
            }) => Ok(None),
            Some(e) => Err(e),
        }
    }
}

impl FrameReceiver for H2Receiver {
    async fn recv_frame(&mut self) -> Result<Option<RawFrame>, TransportError> {
        if self.done {
            return Ok(None);
        }
        let mut local = self.core.local_close.subscribe();
        let next = tokio::select! {
            biased;
            next = self.rx.recv() => next,
            () = wait_true(&mut local) => {
                let why = self.core.reason();
                return self.finish(why);
            }
        };
        match next {
            Some(Ok(frame)) => Ok(Some(frame)),
            Some(Err(e)) => {
                self.done = true;
                Err(e)
            }
            None => {
                let why = Some(self.core.reason_or_closed());
                self.finish(why)
            }
        }
    }

    fn set_max_frame_size(&mut self, max: u32) {
        self.core.max_in.store(max, Ordering::Relaxed);
    }
}
