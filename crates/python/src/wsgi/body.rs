//! Sending the app's response body: a list or tuple (length known, so Content-Length and one
//! write), a `wsgi.file_wrapper` over a regular file (sendfile), or any iterable (chunked for
//! HTTP/1.1 unless the app gave a Content-Length), each block sent as soon as the iterable
//! yields it (PEP 3333). Writes happen with the GIL released unless the bytes fit the output
//! buffer; a compressed body's always do (ADR 0037), and a file body is never compressed. What the client does not take at once is handed to the poller: a whole list body;
//! of a stream, up to `max_stream_buffer` (ADR 0024), so that a finite stream to a slow reader
//! is pulled from the app whole and its iterator closed while the poller writes the rest.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use super::file_wrapper::FileWrapper;
use super::input::{io_error, Input};
use super::start_response::StartResponse;

fn as_bytes<'a, 'py>(item: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, PyBytes>> {
    item.cast::<PyBytes>().map_err(|_| {
        let kind = item
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        PyTypeError::new_err(format!("the response body must yield bytes, got {kind}"))
    })
}

/// Writes body bytes: into the output buffer when they fit, else out with what is buffered
/// (GIL released). With `send_now`, a block left in the buffer is sent at once unless nothing
/// can follow it ([`tines_server::Exchange::has_block_to_send`]); the check shares the lock
/// taken to buffer it.
fn write(py: Python<'_>, input: &Input, data: &[u8], send_now: bool) -> PyResult<()> {
    if data.is_empty() {
        return Ok(());
    }
    let buffered = input.with(py, |exchange| {
        exchange
            .buffer_body(data)
            .then(|| send_now && exchange.has_block_to_send())
    })?;
    match buffered {
        Some(false) => Ok(()),
        Some(true) => input
            .with_detached(py, |exchange| exchange.flush())?
            .map_err(io_error),
        // write_body sends the buffer with these bytes: nothing is left waiting, unless the
        // body is compressed (the bytes then wait in its encoder for the block's flush).
        None => input
            .with_detached(py, |exchange| {
                exchange.write_body(data).and_then(|()| {
                    if send_now && exchange.has_block_to_send() {
                        exchange.flush()
                    } else {
                        Ok(())
                    }
                })
            })?
            .map_err(io_error),
    }
}

fn finish(py: Python<'_>, input: &Input) -> PyResult<()> {
    // A small response queued for the slot's batch: no write, so the GIL stays.
    if input.with(py, |exchange| exchange.try_finish_queued())? {
        return Ok(());
    }
    input
        .with_detached(py, |exchange| exchange.finish())?
        .map_err(io_error)
}

/// Sends a body whose items are all known up front (a list or tuple): the total length goes
/// in Content-Length, and small bodies leave in one write with the head.
fn send_items<'py>(
    py: Python<'py>,
    len: usize,
    item: impl Fn(usize) -> PyResult<Bound<'py, PyAny>>,
    start: &Bound<'py, StartResponse>,
    input: &Input,
) -> PyResult<()> {
    let mut total = 0u64;
    for index in 0..len {
        total += as_bytes(&item(index)?)?.as_bytes().len() as u64;
    }
    start.get().begin(py, Some(total))?;
    for index in 0..len {
        write(py, input, as_bytes(&item(index)?)?.as_bytes(), false)?;
    }
    finish(py, input)
}

/// Sends the body of `iterable` as the response to the request in `input`.
pub fn send<'py>(
    py: Python<'py>,
    iterable: &Bound<'py, PyAny>,
    start: &Bound<'py, StartResponse>,
    input: &Input,
) -> PyResult<()> {
    if let Ok(list) = iterable.cast_exact::<PyList>() {
        return send_items(py, list.len(), |i| list.get_item(i), start, input);
    }
    if let Ok(tuple) = iterable.cast_exact::<PyTuple>() {
        return send_items(py, tuple.len(), |i| tuple.get_item(i), start, input);
    }
    if let Ok(wrapper) = iterable.cast::<FileWrapper>() {
        if let Some(span) = wrapper.get().span(py) {
            // A file goes out with sendfile, never compressed (ADR 0037): precompressed
            // siblings are the answer for files.
            input.with(py, |exchange| exchange.keep_identity())?;
            start.get().begin(py, Some(span.length))?;
            let sent = input.with_detached(py, |exchange| {
                exchange.send_file(span.fd, span.offset, span.length)
            })?;
            sent.map_err(io_error)?;
            return finish(py, input);
        }
    }
    // Blocks of a `wsgi.file_wrapper` over a file-like object that is not a regular file (an
    // in-memory file: Flask's `send_file(BytesIO)`, Django's FileResponse) are read at once,
    // not produced over time: they are gathered up to the output buffer's size instead.
    let streamed = !iterable.is_instance_of::<FileWrapper>();
    for item in iterable.try_iter()? {
        let item = item?;
        let bytes = as_bytes(&item)?.as_bytes();
        if bytes.is_empty() {
            continue;
        }
        // Borrowed only for the call: the app's generator may call start_response again
        // (with exc_info) between items.
        start.get().begin(py, None)?;
        // The next item may take the app any time (a stream, server-sent events): this one
        // goes out now, the first with the head.
        write(py, input, bytes, streamed)?;
    }
    start.get().begin(py, Some(0))?;
    finish(py, input)
}
