//! The response as the app writes it: validating the app's status and headers, choosing the
//! framing (Content-Length when known, else chunked for HTTP/1.1, else close-delimited),
//! encoding the head, framing body pieces, honouring the app's Content-Length exactly (a
//! longer body is truncated, a shorter one closes the connection), finishing, and the short
//! error response when the app produced none.
//!
//! It gathers bytes in the slot's output buffer and hands them to [`super::send`]; it must not
//! touch the socket itself.

use std::io;

use tines_proto::response::{
    check_app_header, encode_chunk_size, encode_header, encode_status_line, parse_status,
    status_allows_body, AppHeader, ResponseFraming, ResponseHeaderError, CHUNK_END, LAST_CHUNK,
};
use tines_proto::Version;

use super::compressing::WHOLE_BODY_LIMIT;
use super::{Exchange, Phase, OUT_BUFFER_LIMIT};
use crate::compress::Decision;

/// Why a response could not be started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseError {
    /// A bad status line or header from the app (no byte was written).
    Header(ResponseHeaderError, String),
    /// `begin_response` was called twice, or after bytes were written.
    AlreadyStarted,
}

impl std::fmt::Display for ResponseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResponseError::Header(kind, detail) => {
                write!(f, "invalid response header ({kind:?}): {detail}")
            }
            ResponseError::AlreadyStarted => write!(f, "the response was already started"),
        }
    }
}

impl std::error::Error for ResponseError {}

impl Exchange {
    /// Starts the response: validates the app's status and headers (nothing is written when
    /// they are bad), decides the framing and encodes the head into the output buffer.
    /// `body_length` is the body's length when the caller knows it (a WSGI list body): the
    /// whole body exists already, so what the socket does not take at once is handed to the
    /// response store instead of holding the slot (`exchange::send`).
    pub fn begin_response<'h, I>(
        &mut self,
        status: &[u8],
        headers: I,
        body_length: Option<u64>,
    ) -> Result<(), ResponseError>
    where
        I: IntoIterator<Item = (&'h [u8], &'h [u8])>,
        I::IntoIter: Clone,
    {
        if self.phase != Phase::NotStarted {
            return Err(ResponseError::AlreadyStarted);
        }
        let code = parse_status(status).map_err(|kind| {
            ResponseError::Header(
                kind,
                format!("status {:?}", String::from_utf8_lossy(status)),
            )
        })?;
        // Compression on (one branch when off): the fields are looked at before they are
        // encoded, and the decision changes some of them (ADR 0037). The look goes through a
        // copy of the borrowed iterator: nothing is gathered, nothing allocated.
        let headers = headers.into_iter();
        if self.shared.config.compression.is_on() && !self.keep_identity {
            let decision = self.compression_decision(code, headers.clone(), body_length);
            return self.encode_head(status, code, headers, body_length, decision);
        }
        self.encode_head(status, code, headers, body_length, Decision::Identity)
    }

    /// Encodes the head of `begin_response` as `decision` has it (a compressed response drops
    /// the app's Content-Length, weakens a strong ETag, gets `Content-Encoding` and `Vary`).
    fn encode_head<'h, I>(
        &mut self,
        status: &[u8],
        code: u16,
        headers: I,
        body_length: Option<u64>,
        mut decision: Decision,
    ) -> Result<(), ResponseError>
    where
        I: IntoIterator<Item = (&'h [u8], &'h [u8])>,
    {
        // A body to compress needs its encoder, made before anything is encoded: one that
        // cannot be made leaves the response as it is.
        let mut encoder = None;
        if let Decision::Compress(coding) = decision {
            if status_allows_body(code, self.is_head) {
                encoder = self.make_encoder(coding);
                if encoder.is_none() {
                    decision = Decision::VaryOnly;
                }
            }
        }
        let compressed = matches!(decision, Decision::Compress(_));
        let mut vary_merged = false;
        let out = &mut self.ctx.out;
        out.clear();
        encode_status_line(out, Version::Http11, status);
        let mut declared = None;
        let (mut has_date, mut has_server) = (false, false);
        for (position, (name, value)) in headers.into_iter().enumerate() {
            let fail = |kind| {
                ResponseError::Header(
                    kind,
                    format!(
                        "{:?}: {:?}",
                        String::from_utf8_lossy(name),
                        String::from_utf8_lossy(value)
                    ),
                )
            };
            let (kind, line) = self
                .ctx
                .checked_headers
                .check(position, name, value)
                .map_err(fail)?;
            match kind {
                AppHeader::ContentLength(length) => {
                    if declared.is_some_and(|d| d != length) {
                        out.clear();
                        return Err(fail(ResponseHeaderError::InvalidContentLength));
                    }
                    if declared.is_some() {
                        continue;
                    }
                    declared = Some(length);
                    if compressed {
                        // The app's length is of the body before compression.
                        continue;
                    }
                }
                AppHeader::Plain => {
                    has_date |= name.eq_ignore_ascii_case(b"date");
                    has_server |= name.eq_ignore_ascii_case(b"server");
                    if decision != Decision::Identity
                        && rewrite_field(out, name, value, compressed, &mut vary_merged)
                    {
                        continue;
                    }
                }
            }
            match line {
                Some(line) => out.extend_from_slice(line),
                None => encode_header(out, name, value),
            }
        }
        // Not on a 304: representation metadata it need not carry (RFC 9110 15.4.5), and a
        // cache updating a stored identity copy from it would mislabel that copy.
        if let (Decision::Compress(coding), false) = (decision, code == 304) {
            encode_header(out, b"Content-Encoding", coding.token());
        }
        if decision != Decision::Identity && !vary_merged {
            encode_header(out, b"Vary", b"Accept-Encoding");
        }
        // A whole body in hand is compressed in one go and gets one Content-Length, put in
        // the head at its end (`compressing`).
        let whole = compressed && body_length.is_some_and(|length| length <= WHOLE_BODY_LIMIT);
        let framing = if !status_allows_body(code, self.is_head) {
            // HEAD: the fields GET would have, but a compressed length is not known.
            if self.is_head && declared.is_none() && !compressed {
                if let Some(length) = body_length {
                    let mut digits = itoa::Buffer::new();
                    encode_header(out, b"Content-Length", digits.format(length).as_bytes());
                }
            }
            ResponseFraming::NoBody
        } else if whole {
            ResponseFraming::Length(body_length.unwrap_or(0))
        } else if compressed && self.parts.head.version == Version::Http11 {
            encode_header(out, b"Transfer-Encoding", b"chunked");
            ResponseFraming::Chunked
        } else if compressed {
            ResponseFraming::CloseDelimited
        } else if let Some(length) = declared {
            ResponseFraming::Length(length)
        } else if let Some(length) = body_length {
            let mut digits = itoa::Buffer::new();
            encode_header(out, b"Content-Length", digits.format(length).as_bytes());
            ResponseFraming::Length(length)
        } else if self.parts.head.version == Version::Http11 {
            encode_header(out, b"Transfer-Encoding", b"chunked");
            ResponseFraming::Chunked
        } else {
            ResponseFraming::CloseDelimited
        };
        self.keep_alive = self.may_keep_alive(framing);
        let out = &mut self.ctx.out;
        if !has_server && !self.shared.config.server_header.is_empty() {
            encode_header(out, b"Server", &self.shared.config.server_header);
        }
        if !has_date {
            out.extend_from_slice(self.ctx.date.line_now());
        }
        if !self.keep_alive {
            encode_header(out, b"Connection", b"close");
        } else if self.parts.head.version == Version::Http10 {
            encode_header(out, b"Connection", b"keep-alive");
        }
        let head_end = out.len();
        out.extend_from_slice(b"\r\n");
        if let Some(log) = &self.shared.access_log {
            let wanted = log.format().response_header_names();
            if !wanted.is_empty() {
                keep_logged_headers(out, wanted, &mut self.ctx.logged_response_headers);
            }
        }
        self.framing = framing;
        self.declared = declared.or(match framing {
            ResponseFraming::Length(length) => Some(length),
            _ => None,
        });
        self.status = code;
        self.complete_body = body_length.is_some();
        self.phase = Phase::Buffered;
        if let Some(encoder) = encoder {
            self.start_compressing(encoder, whole, head_end);
        }
        Ok(())
    }

    /// Whether a response head was started.
    pub fn response_started(&self) -> bool {
        self.phase != Phase::NotStarted
    }

    /// Whether bytes of the response reached the socket (the status can no longer change).
    pub fn response_committed(&self) -> bool {
        matches!(self.phase, Phase::Committed | Phase::Finished)
    }

    /// Drops a started but uncommitted response (to replace it with an error response).
    pub fn reset_response(&mut self) -> bool {
        if self.phase == Phase::Buffered {
            self.ctx.out.clear();
            self.phase = Phase::NotStarted;
            self.body_sent = 0;
            self.declared = None;
            self.framing = ResponseFraming::NoBody;
            self.status = 0;
            self.complete_body = false;
            self.coded_sent = None;
            if self.compressing.is_some() {
                self.stop_compressing();
            }
            return true;
        }
        self.phase == Phase::NotStarted
    }

    pub(super) fn allowed<'d>(&mut self, data: &'d [u8]) -> &'d [u8] {
        if let Some(declared) = self.declared {
            let left = declared.saturating_sub(self.body_sent);
            if data.len() as u64 > left {
                // The app sent more than its Content-Length: truncate and close (the client
                // would otherwise read the excess as the next response).
                self.keep_alive = false;
                return &data[..left as usize];
            }
        }
        data
    }

    pub(super) fn discards_body(&self) -> bool {
        self.framing == ResponseFraming::NoBody
    }

    /// Appends body bytes to the output buffer if they fit without any I/O; returns false
    /// (and does nothing) when [`Exchange::write_body`] must be used instead.
    pub fn buffer_body(&mut self, data: &[u8]) -> bool {
        if self.phase == Phase::NotStarted || self.phase == Phase::Finished {
            return false;
        }
        if self.discards_body() {
            return true;
        }
        if self.compressing.is_some() {
            // Compressing is work: `write_body`, which callers run with the GIL released.
            return false;
        }
        let data = self.allowed(data);
        if data.is_empty() {
            return true;
        }
        if self.ctx.out.len() + data.len() + 12 > OUT_BUFFER_LIMIT {
            return false;
        }
        if self.framing == ResponseFraming::Chunked {
            encode_chunk_size(&mut self.ctx.out, data.len());
            self.ctx.out.extend_from_slice(data);
            self.ctx.out.extend_from_slice(CHUNK_END);
        } else {
            self.ctx.out.extend_from_slice(data);
        }
        self.body_sent += data.len() as u64;
        true
    }

    /// Writes body bytes (framed as the head announced), waiting for the client as needed.
    pub fn write_body(&mut self, data: &[u8]) -> io::Result<()> {
        if self.phase == Phase::NotStarted || self.phase == Phase::Finished {
            return Err(io::Error::other(
                "write_body before begin_response or after finish",
            ));
        }
        if self.compressing.is_some() && !self.discards_body() {
            return self.write_compressed(data);
        }
        if self.buffer_body(data) {
            return Ok(());
        }
        let data = self.allowed(data);
        self.body_sent += data.len() as u64;
        let mut out = std::mem::take(&mut self.ctx.out);
        let result = if self.framing == ResponseFraming::Chunked {
            encode_chunk_size(&mut out, data.len());
            self.emit(&[&out, data, CHUNK_END], false)
        } else {
            self.emit(&[&out, data], false)
        };
        out.clear();
        self.ctx.out = out;
        self.phase = Phase::Committed;
        result.inspect_err(|_| self.keep_alive = false)
    }

    /// Writes out whatever is buffered (WSGI `write()` must send before it returns).
    /// A compressed stream's block is ended with a sync flush first (a whole compressed body
    /// waits for its end: its length goes in the head).
    pub fn flush(&mut self) -> io::Result<()> {
        if self.compressing.is_some() {
            if !self.compressed_block_waiting() {
                return Ok(());
            }
            self.flush_encoder()?;
        }
        if self.ctx.out.is_empty() || matches!(self.phase, Phase::NotStarted | Phase::Finished) {
            return Ok(());
        }
        self.emit_buffered(Phase::Committed)
    }

    /// Sends the output buffer, leaves it empty and moves to `phase`; a failed write ends
    /// keep-alive.
    pub(super) fn emit_buffered(&mut self, phase: Phase) -> io::Result<()> {
        let out = std::mem::take(&mut self.ctx.out);
        let result = self.emit(&[&out], phase == Phase::Finished);
        self.ctx.out = out;
        self.ctx.out.clear();
        self.phase = phase;
        result.inspect_err(|_| self.keep_alive = false)
    }

    /// Whether a block of a streamed body waits in the output buffer and must be sent now
    /// with [`Exchange::flush`] (PEP 3333: a server must not delay the transmission of any
    /// block). Not when nothing more can follow it: a body that reached its declared length,
    /// or a response without a body, is left for [`Exchange::finish`], so that a response
    /// whose one block fills its Content-Length (a framework's usual answer) still leaves in
    /// one write with its head. Asked after each block, before the app is asked for the next
    /// one, which may take it any time.
    pub fn has_block_to_send(&self) -> bool {
        let complete = self.discards_body()
            || self
                .declared
                .is_some_and(|declared| self.body_sent >= declared);
        !complete
            && self.compressed_block_waiting()
            && matches!(self.phase, Phase::Buffered | Phase::Committed)
    }

    /// Completes the response: the last chunk, then one write of whatever is buffered.
    /// A body shorter than its Content-Length closes the connection afterwards (compressed,
    /// it is cut off unended, so that the client sees it incomplete).
    pub fn finish(&mut self) -> io::Result<()> {
        match self.phase {
            Phase::Finished => return Ok(()),
            Phase::NotStarted => return Err(io::Error::other("finish before begin_response")),
            _ => {}
        }
        if self.compressing.is_some() {
            if self.compressed_short() {
                return self.cut_compressed_short();
            }
            self.end_encoding()?;
        }
        self.close_body(None)
    }

    /// Completes the response with trailer fields (ASGI's `http.response.trailers`): a chunked
    /// body ends with them as its trailer section (RFC 9112 7.1.2; an HTTP/2 stream's
    /// transcoder makes it a trailing HEADERS frame); a body framed otherwise (a declared
    /// Content-Length, HTTP/1.0, no body) has nowhere to carry them, and they are dropped.
    /// A field [`check_app_header`] refuses, or a Content-Length, is dropped too: the caller
    /// checks what it is given and tells the app.
    pub fn finish_with_trailers(&mut self, trailers: &[(&[u8], &[u8])]) -> io::Result<()> {
        match self.phase {
            Phase::Finished => return Ok(()),
            Phase::NotStarted => return Err(io::Error::other("finish before begin_response")),
            _ => {}
        }
        if self.compressing.is_some() {
            if self.compressed_short() {
                return self.cut_compressed_short();
            }
            self.end_encoding()?;
        }
        self.close_body(Some(trailers))
    }

    /// Ends the body whose last bytes are buffered: the last chunk (with `trailers`, when
    /// given, as its trailer section), then [`Exchange::end_body`].
    pub(super) fn close_body(&mut self, trailers: Option<&[(&[u8], &[u8])]>) -> io::Result<()> {
        if self.framing == ResponseFraming::Chunked {
            match trailers {
                None => self.ctx.out.extend_from_slice(LAST_CHUNK),
                Some(trailers) => {
                    let out = &mut self.ctx.out;
                    out.extend_from_slice(b"0\r\n");
                    for &(name, value) in trailers {
                        if check_app_header(name, value) == Ok(AppHeader::Plain) {
                            encode_header(out, name, value);
                        }
                    }
                    out.extend_from_slice(b"\r\n");
                }
            }
        }
        self.end_body()
    }

    /// What ends every response once its last bytes are buffered: a body shorter than its
    /// Content-Length, or close-delimited, closes the connection; one write of the buffer.
    fn end_body(&mut self) -> io::Result<()> {
        if let Some(declared) = self.declared {
            if self.body_sent < declared && !self.discards_body() {
                self.keep_alive = false;
            }
        }
        if self.framing == ResponseFraming::CloseDelimited {
            self.keep_alive = false;
        }
        self.emit_buffered(Phase::Finished)
    }

    /// Gives up on the response (an error after bytes were sent): the connection closes.
    pub fn abort(&mut self) {
        self.keep_alive = false;
        if self.compressing.is_some() {
            self.stop_compressing();
        }
        self.ctx.out.clear();
        self.phase = Phase::Finished;
    }

    /// Sends a short, closing error response if nothing was sent yet (used when the app
    /// produced no response at all).
    pub fn fail(&mut self, code: u16) {
        if self.reset_response() {
            let reason = tines_proto::status::reason_phrase(code);
            let status = format!("{code} {reason}");
            let body = format!("{reason}\n");
            let length = body.len() as u64;
            self.must_close = true;
            self.keep_identity();
            let headers: [(&[u8], &[u8]); 1] = [(b"Content-Type", b"text/plain; charset=utf-8")];
            if self
                .begin_response(status.as_bytes(), headers, Some(length))
                .is_ok()
            {
                self.keep_alive = false;
                self.buffer_body(body.as_bytes());
                let _ = self.finish();
            }
        }
        self.abort();
    }
}

/// Encodes the app's field `name: value` changed for a compressed response (`compressed`) or
/// one that varies by `Accept-Encoding` all the same, if it needs a change: `Vary` gains
/// `Accept-Encoding` (once, `vary_merged` then set; unchanged when it lists it or is `*`), a
/// strong `ETag` becomes weak (the compressed bytes are another representation, RFC 9110
/// 8.8.3). Returns whether it encoded the field (else the caller encodes it as it is).
#[cold]
fn rewrite_field(
    out: &mut Vec<u8>,
    name: &[u8],
    value: &[u8],
    compressed: bool,
    vary_merged: &mut bool,
) -> bool {
    if name.eq_ignore_ascii_case(b"vary") && !*vary_merged {
        *vary_merged = true;
        let listed = value.split(|&b| b == b',').any(|item| {
            let item = item.trim_ascii();
            item == b"*" || item.eq_ignore_ascii_case(b"accept-encoding")
        });
        if listed {
            return false;
        }
        let mut merged = Vec::with_capacity(value.len() + 17);
        merged.extend_from_slice(value.trim_ascii());
        if !merged.is_empty() {
            merged.extend_from_slice(b", ");
        }
        merged.extend_from_slice(b"Accept-Encoding");
        encode_header(out, b"Vary", &merged);
        return true;
    }
    if compressed && name.eq_ignore_ascii_case(b"etag") && !value.starts_with(b"W/") {
        let mut weak = Vec::with_capacity(value.len() + 2);
        weak.extend_from_slice(b"W/");
        weak.extend_from_slice(value);
        encode_header(out, b"ETag", &weak);
        return true;
    }
    false
}

/// Keeps the values of the headers named `wanted` (lower-case) of the encoded response head
/// `head`, the first of each name, in `wanted`'s order (`None` for one it lacks): for the
/// access log's `%({name}o)s` atoms. Only runs when the format has such atoms.
fn keep_logged_headers(head: &[u8], wanted: &[Vec<u8>], kept: &mut Vec<Option<Vec<u8>>>) {
    kept.clear();
    kept.resize(wanted.len(), None);
    // Past the status line; each field is `name: value` (the server encodes them so).
    for field in head.split(|&b| b == b'\n').skip(1) {
        let field = field.strip_suffix(b"\r").unwrap_or(field);
        let Some(colon) = field.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&field[..colon], &field[colon + 1..]);
        if let Some(index) = wanted.iter().position(|w| name.eq_ignore_ascii_case(w)) {
            if kept[index].is_none() {
                kept[index] = Some(value.trim_ascii().to_vec());
            }
        }
    }
}

impl Exchange {
    /// Answers the request with `101 Switching Protocols` (RFC 9110 15.2.2) to a WebSocket:
    /// `Upgrade: websocket`, `Connection: Upgrade` and `headers` (the accept key, the agreed
    /// subprotocol and extensions, the app's own), in one write or queued for the reactor.
    /// The exchange ends there (logged and counted as a 101): the connection leaves HTTP and
    /// is returned with the range of its read buffer the client sent after the request (its
    /// first frames, if any) and the slot's context.
    pub fn switch_to_websocket(
        mut self: Box<Self>,
        headers: &[(&[u8], &[u8])],
    ) -> (
        io::Result<()>,
        Box<crate::connection::Lent>,
        std::ops::Range<usize>,
        Box<super::SlotContext>,
    ) {
        let mut out = std::mem::take(&mut self.ctx.out);
        out.clear();
        encode_status_line(&mut out, Version::Http11, b"101 Switching Protocols");
        encode_header(&mut out, b"Upgrade", b"websocket");
        encode_header(&mut out, b"Connection", b"Upgrade");
        for (name, value) in headers {
            encode_header(&mut out, name, value);
        }
        if !self.shared.config.server_header.is_empty() {
            encode_header(&mut out, b"Server", &self.shared.config.server_header);
        }
        out.extend_from_slice(b"\r\n");
        self.status = 101;
        self.framing = ResponseFraming::NoBody;
        self.phase = Phase::Committed;
        let result = self.emit(&[&out], true);
        out.clear();
        self.ctx.out = out;
        self.phase = Phase::Finished;
        self.count_request();
        self.log_access();
        self.shared.response_ended(self.ctx.thread, !self.timed_out);
        let raw = self.raw.clone();
        let Exchange { parts, ctx, .. } = *self;
        (result, parts, raw, ctx)
    }
}
