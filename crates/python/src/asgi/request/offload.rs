//! A request's compressed body sent off the event loop (issue 39's follow-up, ADR 0037 "ASGI
//! off the loop"): each block is lent, with the response's encoder, to the worker's pool, and
//! the `send` waits until it is back and sent. While a block is out the exchange is not touched
//! for this response; what the app sends meanwhile waits in the backlog, in order.
//!
//! It must not write a block itself while one is out, nor touch Python objects off the loop.

use pyo3::prelude::*;
use tines_server::exchange::{BlockEnd, EncoderLoan};

use super::{Request, Response};

impl Request {
    /// A compressed body's block (`data` ended by `end`) sent off the loop: lent to the pool
    /// with the response's encoder, or, while a block is out, kept to follow it. Returns the
    /// send's awaitable (done once the block is sent), or None when the block is not lent
    /// (see `AsgiWorker::lend`) and the caller writes it here.
    pub(super) fn send_compressed(
        &mut self,
        py: Python<'_>,
        data: &[u8],
        end: BlockEnd,
    ) -> PyResult<Option<Py<PyAny>>> {
        if self.loan.is_some() {
            match &mut self.backlog {
                Some((kept, kept_end)) => {
                    kept.extend_from_slice(data);
                    *kept_end = (*kept_end).max(end);
                }
                None => self.backlog = Some((data.to_vec(), end)),
            }
        } else if !self.lend(py, data, end) {
            return Ok(None);
        }
        self.waiter
            .wait_block(py, self.exchange.as_deref_mut())
            .map(Some)
    }

    /// Lends the next block to the worker's pool; false when it was not lent.
    fn lend(&mut self, py: Python<'_>, data: &[u8], end: BlockEnd) -> bool {
        let Some(exchange) = self.exchange.as_deref_mut() else {
            return false;
        };
        self.loan = self
            .waiter
            .worker
            .borrow(py)
            .lend(self.waiter.token, exchange, data, end);
        self.loan.is_some()
    }

    /// A block the pool compressed (`serial`: the loan it answers) goes out; the block the app
    /// sent meanwhile, if any, is lent next; else the waiting `send` returns (unless a slow
    /// client holds it, as for any send). A loan this request no longer waits for (it ended,
    /// or its client went away) is dropped.
    pub(in crate::asgi) fn loan_back(
        &mut self,
        py: Python<'_>,
        serial: u64,
        loan: EncoderLoan,
    ) -> PyResult<()> {
        if self.loan != Some(serial) {
            return Ok(());
        }
        self.loan = None;
        if self.gone {
            return Ok(());
        }
        let finishing = loan.end() == BlockEnd::Finish && self.trailers;
        let fields = if finishing {
            std::mem::take(&mut self.trailer_fields)
        } else {
            Vec::new()
        };
        let refs: Vec<(&[u8], &[u8])> = fields
            .iter()
            .map(|(name, value)| (name.as_slice(), value.as_slice()))
            .collect();
        let Some(exchange) = self.exchange.as_deref_mut() else {
            return Ok(());
        };
        let mut result = exchange.take_back_block(loan, finishing.then_some(refs.as_slice()));
        if result.is_ok() {
            if let Some((data, end)) = self.backlog.take() {
                if self.lend(py, &data, end) {
                    return Ok(());
                }
                result = self.write_inline(py, &data, end);
            }
        }
        if result.is_err() {
            // The block cannot reach the client: as when it is seen gone (nothing logged).
            self.on_gone(py)?;
        } else {
            self.on_written(py)?;
        }
        if self.returned {
            self.end_returned(py)?;
        }
        Ok(())
    }

    /// The app returned while its last block was in the pool (`Request::end`): now that it is
    /// back and sent, the request ends (the trailers sent so far end a response whose last
    /// trailers message never came; a failed write closes the connection).
    fn end_returned(&mut self, py: Python<'_>) -> PyResult<()> {
        let Some(mut exchange) = self.exchange.take() else {
            return Ok(());
        };
        if self.gone {
            exchange.abort();
        } else if self.response == Response::Trailers {
            let _ = exchange.finish_with_trailers(&self.trailer_refs());
        }
        self.let_go(py, exchange)
    }
}
