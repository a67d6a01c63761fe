//! Small pieces and empty queues kept for reuse on this thread. A small response queued for
//! the batch (ADR 0011) took a piece and, in an idle connection's empty queue, the queue's
//! first slots: two allocations and two frees per response. Kept per thread (no lock), so
//! they come back where the same thread queues again (prefork's one thread; in the pool the
//! loop thread frees what app threads allocated, and only gains nothing). A connection keeps
//! neither while it idles.

use std::cell::RefCell;
use std::collections::VecDeque;

use super::queue::Segment;

/// Pieces and queues kept per thread, at most.
const KEPT: usize = 32;
/// The largest piece kept (a small response's head and body).
const PIECE: usize = 4096;
/// The largest queue kept, in segments.
const QUEUE: usize = 8;

thread_local! {
    static PIECES: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    static QUEUES: RefCell<Vec<Vec<Segment>>> = const { RefCell::new(Vec::new()) };
}

/// An empty piece with room for `capacity` bytes.
pub(super) fn piece(capacity: usize) -> Vec<u8> {
    if capacity <= PIECE {
        if let Some(piece) = PIECES.with_borrow_mut(Vec::pop) {
            return piece;
        }
        return Vec::with_capacity(PIECE);
    }
    Vec::with_capacity(capacity)
}

/// Keeps a written piece for [`piece`], if it is one of the small ones.
pub(super) fn give_piece(mut piece: Vec<u8>) {
    if piece.capacity() == PIECE {
        piece.clear();
        PIECES.with_borrow_mut(|pieces| {
            if pieces.len() < KEPT {
                pieces.push(piece);
            }
        });
    }
}

/// An empty queue, with room for a few segments when one was kept.
pub(super) fn queue() -> VecDeque<Segment> {
    QUEUES
        .with_borrow_mut(Vec::pop)
        .map(VecDeque::from)
        .unwrap_or_default()
}

/// Keeps an emptied queue for [`queue`], if it is small.
pub(super) fn give_queue(mut queue: VecDeque<Segment>) {
    queue.clear();
    if queue.capacity() > 0 && queue.capacity() <= QUEUE {
        QUEUES.with_borrow_mut(|queues| {
            if queues.len() < KEPT {
                queues.push(Vec::from(queue));
            }
        });
    }
}
