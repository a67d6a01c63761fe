//! Whether the connection is kept after this exchange: the conditions a response head
//! decides on (the client's wish, an unread body small enough to drain, the framing, the
//! keep-alive settings, a stopping worker and the requests it still serves), and the drain of an unread body at the end.
//!
//! It must not write anything: [`super::response`] encodes what is decided here.

use tines_proto::response::ResponseFraming;

use super::{Body, Continue, Exchange};

impl Exchange {
    pub(super) fn may_keep_alive(&self, framing: ResponseFraming) -> bool {
        let config = &self.shared.config;
        let body_reusable = match self.body {
            // Dropping a temporary file costs nothing.
            Body::Done | Body::Spooled { .. } => true,
            Body::Length(remaining) => {
                self.expect == Continue::Settled && remaining <= config.max_body_drain
            }
            Body::Chunked(_) | Body::Failed => false,
        };
        !self.must_close
            && self.conn.head.keep_alive()
            && body_reusable
            && framing != ResponseFraming::CloseDelimited
            && !config.keepalive_timeout.is_zero()
            && (config.max_keepalive_requests == 0
                || self.conn.served + 1 < config.max_keepalive_requests)
            && self.may_stay_open_while_draining()
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
        matches!(self.body, Body::Done | Body::Spooled { .. }) && !self.raw.is_empty()
    }

    pub(super) fn drain_body(&mut self) -> bool {
        if let Body::Spooled { .. } = self.body {
            // Read whole before dispatch: nothing of it is left in the socket.
            self.body = Body::Done;
            return true;
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
