//! What an HTTP/1.1 connection lends each of its exchanges ([`Lent`], ADR 0018): the request,
//! the connection's side of the body source, and the output sink, boxed once per connection
//! and moved as a pointer between the connection and its exchange.
//!
//! It must not know who holds the connection meanwhile (the reactor's entry) nor how an
//! exchange uses the parts (`exchange`).

use std::io;
use std::net::IpAddr;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Instant;

use tines_proto::RequestHead;

use crate::listener::Peer;
use crate::pending::Output;
use crate::transport::Link;
use crate::trusted_proxies::TrustedProxies;

/// What an HTTP/1.1 connection lends each exchange, moved into it at `Exchange::new` and back
/// at `Connection::take_back` (ADR 0018): the request (its head and the buffer it indexes,
/// who sent it on which listener, how many came before it), the connection's side of the
/// body source (bytes received, whether the socket may hold more) and the output sink (the
/// link writes go through, the output the loop finishes, the poller registration still
/// owed). Boxed once per connection, so lending it moves a pointer: nothing per keep-alive
/// request. An HTTP/2 stream will provide the same three of its own (ADR 0019).
pub struct Lent {
    /// The connection's I/O handle (a copy, valid while the connection's transport lives).
    pub(crate) link: Link,
    /// Who is on the other end (the request's client, or the proxy that sent it).
    pub(crate) peer: Peer,
    /// Index of the listener that accepted the connection.
    pub(crate) listener: usize,
    /// Requests completed on the connection before the current one (the exchange decides
    /// by it whether `max_keepalive_requests` lets the connection be kept).
    pub(crate) served: u32,
    /// Read buffer; bytes `[0, filled)` are valid. The current request's head starts at 0.
    pub(crate) buf: Vec<u8>,
    /// How many bytes of `buf` hold data.
    pub(crate) filled: usize,
    /// The parsed head of the current request (spans index into `buf`).
    pub(crate) head: RequestHead,
    /// When the loop handed the current request to an app thread (the queue wait's start,
    /// for the scoreboard's histogram and the access log; taken by the exchange).
    pub(crate) ready_at: Option<Instant>,
    /// Bytes read from the socket and not yet added to the worker's `bytes_in` (added when
    /// the request they belong to is counted).
    pub(crate) received: u64,
    /// The last read filled its whole buffer, so the socket may hold more bytes that no new
    /// edge-triggered event will announce: read again before parking. False after a short
    /// read or `EAGAIN`, which saves a `read` that would only say `EAGAIN` after each response.
    pub(crate) maybe_more: bool,
    /// Response output a slot could not write without waiting, shared with the poller,
    /// which writes it as the client reads (every MPM). Created at the first response.
    pub(crate) output: Option<Arc<Output>>,
    /// Not watched by the poller yet: its fd and the token to watch it under (a connection
    /// read as it was accepted is watched only once it must wait for the poller, ADR 0017).
    pub(crate) unwatched: Option<(RawFd, u64)>,
    /// The loop counted the current head against the rate limits before reading its body
    /// (ADR 0038): the slot that serves it must not count it again. Taken by the slot.
    pub(crate) rate_counted: bool,
}

impl Lent {
    /// A vacant set of parts, to stand in a connection's place while an exchange holds its
    /// own (a slot's, reused for each exchange it serves: `SlotContext::vacant`).
    pub(crate) fn vacant(link: Link, peer: Peer, listener: usize) -> Box<Lent> {
        Box::new(Lent {
            link,
            peer,
            listener,
            served: 0,
            buf: Vec::new(),
            filled: 0,
            head: RequestHead::new(),
            ready_at: None,
            received: 0,
            maybe_more: false,
            output: None,
            unwatched: None,
            rate_counted: false,
        })
    }

    /// The client's address as the app sees it (`REMOTE_ADDR`) and the access log and the
    /// rate limits know it: behind a trusted proxy (`trusted`), the right-most
    /// `X-Forwarded-For` entry that is not itself a trusted proxy, when it is an IP address
    /// (repeated header lines form one list); else the peer's address (the PROXY header's
    /// client, when there was one). `None` for a Unix-socket peer without such a header.
    pub(crate) fn client_ip(&self, trusted: &TrustedProxies) -> Option<IpAddr> {
        let peer_ip = match self.peer {
            Peer::Tcp(addr) => Some(addr.ip()),
            Peer::Unix => None,
        };
        if !trusted.trusts_peer(self.peer) {
            return peer_ip;
        }
        let buf = &self.buf;
        let lines_last_first = self
            .head
            .headers
            .iter()
            .rev()
            .filter(|(name, _)| name.of(buf).eq_ignore_ascii_case(b"x-forwarded-for"))
            .map(|(_, value)| value.of(buf));
        trusted.client_from(lines_last_first).or(peer_ip)
    }

    /// The shared output, created on first use.
    pub(crate) fn output(&mut self) -> &Arc<Output> {
        let link = self.link;
        self.output
            .get_or_insert_with(|| Arc::new(Output::new(link)))
    }

    /// True when response output waits to be written (no lock taken).
    pub(crate) fn has_pending_output(&self) -> bool {
        self.output
            .as_ref()
            .is_some_and(|output| !output.is_empty())
    }

    /// Has the poller watch the connection from now on, if it does not yet (whoever holds
    /// it: the loop before it parks it, writes for it or lingers; a slot before it leaves
    /// output for the poller to finish).
    pub(crate) fn watch(&mut self) -> io::Result<()> {
        match self.unwatched.take() {
            Some((epoll, token)) => crate::poller::Poller::add_connection(
                epoll,
                self.link.fd(),
                crate::poller::Token(token),
            ),
            None => Ok(()),
        }
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        // Before the fd closes (the connection drops its parts first; an exchange dropped
        // with them closes the output too): the loop may hold the output (a handed-out
        // connection) and must never write to a descriptor number that could be reused.
        if let Some(output) = &self.output {
            output.close();
        }
    }
}
