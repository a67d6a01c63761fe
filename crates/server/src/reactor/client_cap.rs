//! `max_connections_per_client` in the loop (ADR 0038): each connection's client is counted
//! in the worker's region of the shared [`ClientConnections`] when it is accepted (its TCP
//! peer), or, with `proxy_protocol`, as soon as its PROXY header named the client (before any
//! head or TLS handshake, so idle and slow connections count); one over the cap is closed
//! without a response. Never a trusted proxy's own
//! connection (it carries many clients), nor an allowed network's. The count is given back
//! when the token closes.
//!
//! Must not: cost anything when the cap is off (the loop holds no [`ClientCap`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Reactor;
use crate::listener::Peer;
use crate::rate_limit::{ClientConnections, Opened};
use crate::shared::WorkerShared;

/// The token's client was not looked at yet (a PROXY connection before its header).
const UNCHECKED: u32 = 0;
/// Looked at, and not counted (a trusted proxy, an allowed network, no room).
const UNCOUNTED: u32 = 1;

/// The loop's side of the cap: the shared counts and what each token holds there.
pub(super) struct ClientCap {
    counts: Arc<ClientConnections>,
    cap: u64,
    /// By token: [`UNCHECKED`], [`UNCOUNTED`], or the entry index + 2 its count is in.
    held: Vec<u32>,
}

impl ClientCap {
    /// The cap when the worker has one.
    pub(super) fn new(shared: &WorkerShared) -> Option<Box<ClientCap>> {
        let cap = shared.config.rate_limit.max_connections_per_client;
        let counts = shared.client_connections.clone()?;
        (cap > 0).then(|| {
            Box::new(ClientCap {
                counts,
                cap: u64::from(cap),
                held: Vec::new(),
            })
        })
    }
}

impl Reactor {
    /// Counts the client of the connection `token` from `peer` (its TCP peer, or the PROXY
    /// header's client): false when it holds the cap already (the caller closes it).
    pub(super) fn client_admitted(&mut self, token: usize, peer: Peer) -> bool {
        let Some(cap) = &mut self.cap else {
            return true;
        };
        if cap.held.len() <= token {
            cap.held.resize(token + 1, UNCHECKED);
        }
        if cap.held[token] != UNCHECKED {
            return true;
        }
        cap.held[token] = UNCOUNTED;
        let shared = &self.shared;
        let Peer::Tcp(addr) = peer else {
            return true;
        };
        if shared.config.trusted_proxies.trusts_peer(peer) {
            return true;
        }
        let Some(key) = shared
            .config
            .rate_limit
            .connection_key(cap.counts.seed(), addr.ip())
        else {
            return true;
        };
        match cap.counts.open(shared.slot_index(), key, cap.cap) {
            Opened::Counted(index) => {
                cap.held[token] = index as u32 + 2;
                true
            }
            Opened::Uncounted => true,
            Opened::Refused => {
                shared
                    .slot()
                    .refused_connections
                    .fetch_add(1, Ordering::Relaxed);
                crate::log::debug(&format!(
                    "max_connections_per_client: closed a connection from {}",
                    addr.ip()
                ));
                false
            }
        }
    }

    /// Whether the connection `token`'s client still has to be looked at (a PROXY
    /// connection before its first head), cheaply.
    pub(super) fn client_unchecked(&self, token: usize) -> bool {
        self.cap
            .as_ref()
            .is_some_and(|cap| cap.held.get(token).is_none_or(|&held| held == UNCHECKED))
    }

    /// The connection `token` closed: its count is given back.
    pub(super) fn client_closed(&mut self, token: usize) {
        if let Some(cap) = &mut self.cap {
            if let Some(held) = cap.held.get_mut(token) {
                if *held >= 2 {
                    cap.counts
                        .close(self.shared.slot_index(), *held as usize - 2);
                }
                *held = UNCHECKED;
            }
        }
    }
}
