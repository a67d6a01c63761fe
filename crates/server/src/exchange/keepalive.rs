//! Whether the connection is kept after this exchange: the conditions a response head
//! decides on (the client's wish, an unread body that is buffered already or small enough to
//! drain from the socket, the framing, the keep-alive settings, a stopping worker and the
//! requests it still serves), and the drain of an unread body at the end (a buffered one is
//! dropped for free; `max_body_drain` bounds one that streams, `stream_body_paths`).
//!
//! It must not write anything: [`super::response`] encodes what is decided here.

use tines_proto::response::ResponseFraming;

use super::{Body, Continue, Exchange};

impl Exchange {
    pub(super) fn may_keep_alive(&self, framing: ResponseFraming) -> bool {
        let config = &self.shared.config;
        let body_reusable = match self.body {
            // Dropping a temporary file, or skipping bytes already read, costs nothing.
            Body::Done | Body::Spooled { .. } | Body::Buffered(_) => true,
            Body::Length(remaining) => {
                self.expect == Continue::Settled && remaining <= config.max_body_drain
            }
            Body::Chunked(_) | Body::Failed => false,
        };
        !self.must_close
            && self.parts.head.keep_alive()
            && body_reusable
            && framing != ResponseFraming::CloseDelimited
            && !config.keepalive_timeout.is_zero()
            && (config.max_keepalive_requests == 0
                || self.parts.served + 1 < config.max_keepalive_requests)
            && self.may_stay_open_while_draining()
            // An HTTP/2 stream's virtual connection carries one exchange (ADR 0035).
            && !self.parts.link.is_h2()
    }

    /// A stopping worker (or one answering the last request of its `max_requests`) closes
    /// each connection after its current request, with `Connection: close`, unless the
    /// client already pipelined bytes of a next request (buffered past this one, whose body
    /// is read): those were sent before the client could see the close, so they are served
    /// too, and the last of them closes. A connection kept this way is never idle.
    fn may_stay_open_while_draining(&self) -> bool {
        if !self.shared.is_stopping() && !self.shared.is_last_request() {
            return true;
        }
        self.body_received_whole() && !self.raw.is_empty()
    }

    /// True when nothing of the request body is left in the socket (none, read to its end,
    /// or buffered whole before dispatch, whatever the app read of it).
    pub(super) fn body_received_whole(&self) -> bool {
        match self.body {
            Body::Done | Body::Spooled { .. } | Body::Buffered(_) => true,
            Body::Length(_) | Body::Chunked(_) | Body::Failed => false,
        }
    }

    /// Whether bytes of the request body are still in the socket (a streamed body the app
    /// did not read to its end): draining it then waits for the client.
    pub(super) fn body_in_socket(&self) -> bool {
        match self.body {
            Body::Done | Body::Spooled { .. } | Body::Buffered(_) | Body::Failed => false,
            Body::Length(_) | Body::Chunked(_) => true,
        }
    }

    pub(super) fn drain_body(&mut self) -> bool {
        match self.body {
            Body::Spooled { .. } => {
                // Read whole before dispatch: nothing of it is left in the socket.
                self.body = Body::Done;
                return true;
            }
            Body::Buffered(remaining) => {
                // Whole in the read buffer: skip what the app left (the bytes after it are
                // the next request's).
                self.raw.start += (remaining as usize).min(self.raw.len());
                self.avail = self.raw.start..self.raw.start;
                self.body = Body::Done;
                return true;
            }
            _ => {}
        }
        let limit = self.shared.config.max_body_drain;
        let mut drained = 0u64;
        loop {
            match self.fill_body() {
                Ok([]) => return matches!(self.body, Body::Done),
                Ok(bytes) => {
                    let n = bytes.len();
                    drained += n as u64;
                    self.consume_body(n);
                    if drained > limit {
                        return false;
                    }
                }
                Err(_) => return false,
            }
        }
    }
}
