//! Whether the connection is kept after this exchange: the conditions a response head
//! decides on (the client's wish, an unread body small enough to drain, the framing, the
//! keep-alive settings, a stopping worker), and the drain of an unread body at the end.
//!
//! It must not write anything: [`super::response`] encodes what is decided here.

use tines_proto::response::ResponseFraming;

use super::{Body, Continue, Exchange};

impl Exchange {
    pub(super) fn may_keep_alive(&self, framing: ResponseFraming) -> bool {
        let config = &self.shared.config;
        let body_reusable = match self.body {
            Body::Done => true,
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
            && !self.shared.is_stopping()
    }

    pub(super) fn drain_body(&mut self) -> bool {
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
