//! What a slot does with a connection whose head is complete: serve requests on it (several
//! when pipelined) until it must close or waits for more bytes. Both MPMs call this; they only
//! decide which thread runs it.

use std::sync::Arc;
use std::time::Instant;

use crate::connection::{Connection, Linger, Next, Readiness};
use crate::exchange::{Exchange, SlotContext};
use crate::reactor::must_read_before_dispatch;
use crate::shared::WorkerShared;
use crate::static_files::Routed;
use crate::transport::Link;
use crate::App;

/// Serves the ready request on `conn` and any complete pipelined ones after it. Returns the
/// connection when it stays open (to be parked), and the slot's context. The connection lends
/// each exchange its parts and keeps its shell here meanwhile.
pub(crate) fn serve_connection(
    mut conn: Box<Connection>,
    mut ctx: Box<SlotContext>,
    app: &dyn App,
    shared: &Arc<WorkerShared>,
    mut started: Option<Instant>,
) -> (Option<Box<Connection>>, Box<SlotContext>) {
    loop {
        // One clock read per request: the slot's own when it read the clock just before.
        let now = started.take().unwrap_or_else(crate::clock::now);
        // The rate limits (ADR 0038): a head the loop counted before reading its body is not
        // counted again; a pipelined one served here is counted now.
        if !std::mem::take(&mut conn.rate_counted) {
            if let Some(refusal) = shared.rate_refusal(&mut conn, now) {
                crate::reactor::refuse_rate_limited(&mut conn, &refusal, shared, &mut ctx);
                // Earlier responses may still be unread, and its body is: linger.
                conn.close_after_response(Linger::UntilEof);
                return (Some(conn), ctx);
            }
        }
        let fd = conn.fd();
        let head = &conn.head;
        shared.request_started(
            ctx.thread,
            head.method.of(&conn.buf),
            head.target.of(&conn.buf),
            fd,
            // Not a socket to write plain bytes to (the dump handler's 503 would go raw into
            // a TLS session or an HTTP/2 connection's frames): TLS, or an HTTP/2 stream.
            !matches!(conn.link, Link::Plain(_)),
            now,
        );
        if let Link::H2(link) = &conn.link {
            // Its connection's other streams share the fd: the loop tells the stuck one by it.
            if let Some(thread) = shared.thread_slot(ctx.thread) {
                thread.serves_stream(link.stream().id());
            }
        }
        let mut exchange = Exchange::new(&mut conn, ctx, Arc::clone(shared), now);
        let (exchange, spends) = if exchange.body_too_large() {
            // RFC 9110 15.5.14: refuse before reading (and before any 100 Continue).
            shared.request_spends_budget();
            exchange.refuse_too_large();
            (exchange, true)
        } else {
            // The file work runs off the interpreter (`App::wait`: a WSGI slot thread keeps
            // the GIL while it works, and a cold open must not hold the app's other threads).
            match crate::static_files::route(exchange, Some(&mut |work| app.wait(work))) {
                // Answered from a static mount, without the app (ADR 0036).
                Routed::Served(exchange) => (exchange, false),
                Routed::App(exchange) => {
                    shared.request_spends_budget();
                    (app.serve(exchange), true)
                }
            }
        };
        let (parts, outcome, returned) = exchange.complete();
        ctx = returned;
        shared.request_finished(spends);
        let max_head_size = shared.config.limits.max_head_size;
        let (kept, vacant) = conn.take_back(parts, outcome, max_head_size);
        ctx.vacant = Some(vacant);
        let Some(mut next) = kept else {
            return (None, ctx);
        };
        // What follows is the loop's to decide ([`Connection::next`]), unless the bytes of a
        // pipelined request are buffered: output left for the loop must be written before the
        // next response, and a worker at `max_requests` serves no more here.
        if next.next() != Next::Parse || shared.recycle_requested() {
            return (Some(next), ctx);
        }
        // Pipelined bytes are buffered: serve the next request now if its head is complete.
        match next.on_readable(&shared.config.limits) {
            // Its body is not all here: the loop reads it before it is served.
            Readiness::HeadComplete if must_read_before_dispatch(&next, &shared.config) => {
                return (Some(next), ctx)
            }
            Readiness::HeadComplete => conn = next,
            Readiness::Pending => return (Some(next), ctx),
            // The PROXY header, the TLS handshake and the choice of HTTP/2 came before the
            // first request: never here.
            Readiness::Closed
            | Readiness::BadProxyHeader(_)
            | Readiness::PlainHttpOnTls
            | Readiness::HandshakeFailed(_)
            | Readiness::Http2 => return (None, ctx),
            Readiness::Rejected(err) => {
                crate::reactor::reject(&mut next, &err, shared, &mut ctx);
                // Earlier responses may still be unread: linger rather than reset them.
                next.close_after_response(Linger::UntilEof);
                return (Some(next), ctx);
            }
        }
    }
}
