//! A compressed response body (ADR 0037): the decision at the head, the head's fields it
//! changes (`Content-Encoding`, `Vary`, a weak `ETag`, no app `Content-Length`), and the body
//! bytes passed through the response's encoder and framed as the head announced: chunked on
//! HTTP/1.1 (one chunk per flushed block, so a stream's events leave one by one), or, for a
//! whole body in hand, one `Content-Length` of the compressed bytes, put in the head at the end.
//!
//! The exchange's accounting stays the app's: `declared` and `body_sent` count the bytes the
//! app gave, before compression; `coded_sent` counts the compressed bytes framed for the
//! socket (the access log's bytes sent), and a finished body is counted in the scoreboard's
//! compression counters. It must not write to the socket itself (`send` does), nor
//! run while the caller holds the GIL (WSGI writes and ASGI sends go detached when compressing).

use std::io;
use std::os::fd::RawFd;

use tines_proto::response::{encode_chunk_size, encode_header, ResponseFraming, CHUNK_END};

use super::{Exchange, Phase, OUT_BUFFER_LIMIT};
use crate::compress::{decide, negotiate, Coding, Decision, Encoder, ResponseFacts};

/// A body whose length is known up to this size is compressed whole and sent with one
/// `Content-Length`; a larger one is chunked as it is compressed.
pub(super) const WHOLE_BODY_LIMIT: u64 = 1 << 20;

/// The encoder of a response being compressed.
pub(super) struct Compressing {
    encoder: Encoder,
    /// The whole body is in hand: nothing leaves before the end, and the head then gets the
    /// compressed length.
    whole: bool,
    /// Where the head's closing empty line starts in the output buffer (for `whole`).
    head_end: usize,
    /// Bytes were written since the last flushed block.
    dirty: bool,
}

/// Whether the comma-separated list `value` has the token `token` (any case).
fn lists(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|item| item.trim_ascii().eq_ignore_ascii_case(token))
}

impl Exchange {
    /// Decides how the response with status `code` and app fields `headers` is sent
    /// (compression is on): `body_length` is the whole body's when known. One pass over the
    /// borrowed fields (the first of each name counts), nothing gathered.
    #[cold]
    #[inline(never)]
    pub(super) fn compression_decision<'h>(
        &self,
        code: u16,
        headers: impl Iterator<Item = (&'h [u8], &'h [u8])>,
        body_length: Option<u64>,
    ) -> Decision {
        let config = &self.shared.config.compression;
        let mut declared = None;
        let mut facts = ResponseFacts {
            status: code,
            ..ResponseFacts::default()
        };
        for (name, value) in headers {
            if name.eq_ignore_ascii_case(b"content-length") {
                if declared.is_none() {
                    // The first's value, parsed or not (an unparsable one is refused later).
                    declared = Some(
                        std::str::from_utf8(value)
                            .ok()
                            .and_then(|v| v.trim().parse::<u64>().ok()),
                    );
                }
            } else if name.eq_ignore_ascii_case(b"content-type") {
                facts.content_type = facts.content_type.or(Some(value));
            } else if name.eq_ignore_ascii_case(b"content-encoding") {
                facts.content_encoding = true;
            } else if name.eq_ignore_ascii_case(b"cache-control") {
                facts.no_transform |= lists(value, b"no-transform");
            }
        }
        // A 304's body (none) is not its 200's, whose length is the app's Content-Length.
        facts.length = match code {
            304 => declared.flatten(),
            _ => declared.flatten().or(body_length),
        };
        let decision = decide(config, self.target(), facts, || {
            let accept = self
                .headers()
                .filter(|(name, _)| name.eq_ignore_ascii_case(b"accept-encoding"))
                .map(|(_, value)| value);
            negotiate(accept, &config.codings)
        });
        self.shared.count_left_uncompressed(decision);
        decision
    }

    /// The encoder for `coding` (one the slot kept, or a new one), or `None` when it cannot
    /// be made (the response then goes out as it is).
    #[cold]
    #[inline(never)]
    pub(super) fn make_encoder(&mut self, coding: Coding) -> Option<Encoder> {
        let config = &self.shared.config.compression;
        self.ctx.encoders.take(coding, config).ok()
    }

    /// Stops compressing (the body ended, or the response was dropped): the encoder goes
    /// back to the slot for its next compressed response.
    #[cold]
    #[inline(never)]
    pub(super) fn stop_compressing(&mut self) {
        if let Some(compressing) = self.compressing.take() {
            self.ctx.encoders.give_back(compressing.encoder);
        }
    }

    /// Starts compressing the body after its head (whose closing empty line starts at
    /// `head_end`); `whole`: the body is in hand and gets one `Content-Length`.
    pub(super) fn start_compressing(&mut self, encoder: Encoder, whole: bool, head_end: usize) {
        self.compressing = Some(Box::new(Compressing {
            encoder,
            whole,
            head_end,
            dirty: false,
        }));
        self.coded_sent = Some(0);
    }

    /// Whether the body is being compressed (its writes then belong with the GIL released,
    /// [`Exchange::buffer_body`] declines them).
    #[inline]
    pub fn is_compressing(&self) -> bool {
        self.compressing.is_some()
    }

    /// The next response is sent as it is, whatever the compression settings say: a file
    /// body to go out with sendfile, an error response of the server's own.
    pub fn keep_identity(&mut self) {
        self.keep_identity = true;
    }

    /// Whether a compressed body has a block to send now (written since its last flush, or
    /// framed and waiting); never for a whole body, which leaves at its end.
    pub(super) fn compressed_block_waiting(&self) -> bool {
        match &self.compressing {
            Some(compressing) => {
                !compressing.whole && (compressing.dirty || !self.ctx.out.is_empty())
            }
            None => !self.ctx.out.is_empty(),
        }
    }

    /// Passes body bytes through the encoder; what it produced is framed into the output
    /// buffer, which is sent once it is full (a whole body waits for its end).
    #[cold]
    #[inline(never)]
    pub(super) fn write_compressed(&mut self, data: &[u8]) -> io::Result<()> {
        let data = self.allowed(data);
        self.body_sent += data.len() as u64;
        let Some(compressing) = self.compressing.as_mut() else {
            return Err(io::Error::other("not compressing"));
        };
        if data.is_empty() {
            return Ok(());
        }
        compressing
            .encoder
            .write(data)
            .inspect_err(|_| self.keep_alive = false)?;
        compressing.dirty = true;
        if compressing.whole {
            return Ok(());
        }
        self.take_encoded();
        if self.ctx.out.len() >= OUT_BUFFER_LIMIT {
            return self.emit_buffered(Phase::Committed);
        }
        Ok(())
    }

    /// Ends the block written so far with a sync flush and frames it into the output buffer
    /// (the caller sends it): a stream's block decodes on the client before the next exists.
    #[cold]
    #[inline(never)]
    pub(super) fn flush_encoder(&mut self) -> io::Result<()> {
        let Some(compressing) = self.compressing.as_mut() else {
            return Ok(());
        };
        if compressing.whole || !compressing.dirty {
            return Ok(());
        }
        compressing.dirty = false;
        compressing
            .encoder
            .flush()
            .inspect_err(|_| self.keep_alive = false)?;
        self.take_encoded();
        Ok(())
    }

    /// Ends the compressed stream into the output buffer: the last chunk's bytes before the
    /// caller's last-chunk marker, or, for a whole body, its `Content-Length` into the head
    /// and the compressed body after it. Nothing, when not compressing.
    #[cold]
    #[inline(never)]
    pub(super) fn end_encoding(&mut self) -> io::Result<()> {
        let Some(compressing) = self.compressing.as_mut() else {
            return Ok(());
        };
        compressing
            .encoder
            .finish()
            .inspect_err(|_| self.keep_alive = false)?;
        self.frame_ended();
        Ok(())
    }

    /// Frames the output of a finished encoder (see [`Exchange::end_encoding`]) and gives the
    /// encoder back to the slot.
    fn frame_ended(&mut self) {
        let Some(compressing) = self.compressing.as_mut() else {
            return;
        };
        if compressing.whole {
            let encoded = compressing.encoder.output();
            let mut line = Vec::with_capacity(32);
            let mut digits = itoa::Buffer::new();
            encode_header(
                &mut line,
                b"Content-Length",
                digits.format(encoded.len()).as_bytes(),
            );
            let at = compressing.head_end;
            self.ctx.out.splice(at..at, line);
            self.ctx.out.extend_from_slice(encoded);
            self.framing = ResponseFraming::Length(encoded.len() as u64);
            self.coded_sent = Some(encoded.len() as u64);
        } else {
            self.take_encoded();
        }
        if let Some(compressing) = &self.compressing {
            let coded = self.coded_sent.unwrap_or(0);
            self.shared
                .count_compressed(compressing.encoder.coding(), self.body_sent, coded);
        }
        self.stop_compressing();
    }

    /// Whether the body being compressed ends short of the app's Content-Length (asked at
    /// its end): it must not be ended as a whole one.
    pub(super) fn compressed_short(&self) -> bool {
        self.compressing.is_some()
            && !self.discards_body()
            && self
                .declared
                .is_some_and(|declared| self.body_sent < declared)
    }

    /// Ends a compressed body the app cut short of its Content-Length as the client must see
    /// it: incomplete. Unframed, the client would see truncation, but the compressed head
    /// dropped the length and a finished stream (coding trailer, last chunk) would read as
    /// the whole body. So the encoder is never finished and no last chunk is written: a
    /// stream's bytes so far go out (a sync flush, as for a block), and the connection
    /// closes mid-body (an HTTP/2 stream is reset); a whole body, whose head still waits for
    /// its length, is dropped unsent ([`Exchange::abort`]): a head without a length would
    /// read as a complete body ended by the close.
    pub(super) fn cut_compressed_short(&mut self) -> io::Result<()> {
        self.keep_alive = false;
        if self.compressing.as_ref().is_some_and(|c| c.whole) {
            self.abort();
            return Ok(());
        }
        if let Err(err) = self.flush_encoder() {
            self.abort();
            return Err(err);
        }
        self.compressing = None;
        self.emit_buffered(Phase::Finished)
    }

    /// Moves what the encoder produced into the output buffer, framed as the head announced
    /// (an empty chunk would end the body: nothing is framed for nothing).
    fn take_encoded(&mut self) {
        let Some(compressing) = self.compressing.as_mut() else {
            return;
        };
        let encoded = compressing.encoder.output();
        if encoded.is_empty() {
            return;
        }
        if let Some(coded) = &mut self.coded_sent {
            *coded += encoded.len() as u64;
        }
        let out = &mut self.ctx.out;
        if self.framing == ResponseFraming::Chunked {
            encode_chunk_size(out, encoded.len());
            out.extend_from_slice(encoded);
            out.extend_from_slice(CHUNK_END);
        } else {
            out.extend_from_slice(encoded);
        }
        encoded.clear();
    }

    /// A file body of a compressed response (a static answer or `wsgi.file_wrapper` begun
    /// without [`Exchange::keep_identity`]): read in blocks and compressed, as sendfile cannot
    /// carry a transformed body.
    #[cold]
    #[inline(never)]
    pub(super) fn send_file_compressed(
        &mut self,
        file_fd: RawFd,
        offset: u64,
        count: u64,
    ) -> io::Result<u64> {
        let mut block = vec![0u8; 64 * 1024];
        let mut done = 0u64;
        while done < count {
            let want = (count - done).min(block.len() as u64) as usize;
            // SAFETY: `block` is valid for `want` bytes; `file_fd` is the caller's open file.
            let n = unsafe {
                libc::pread(
                    file_fd,
                    block.as_mut_ptr().cast(),
                    want,
                    (offset + done) as libc::off_t,
                )
            };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                self.keep_alive = false;
                return Err(err);
            }
            if n == 0 {
                // The file is shorter than announced: the body ends short.
                self.keep_alive = false;
                break;
            }
            self.write_compressed(&block[..n as usize])?;
            done += n as u64;
        }
        Ok(done)
    }
}

/// What a lent block ends with ([`Exchange::lend_block`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum BlockEnd {
    /// Nothing: more body follows, and the block may wait in the buffer (`write_body`; ASGI's
    /// last body message before its trailers).
    Write,
    /// A sync flush, and the block is sent (`write_body` then `flush`: a streamed block).
    Flush,
    /// The stream's end, and the response is complete (`write_body` then `finish`).
    Finish,
}

/// A compressed response's encoder, lent with its next block to a thread that is not the
/// event loop's (issue 39's follow-up: ASGI compresses off the loop). The exchange stays on
/// the loop and is not touched for this response until [`Exchange::take_back_block`]; the
/// borrower only runs [`EncoderLoan::run`], which touches nothing but the encoder and the
/// block.
pub struct EncoderLoan {
    compressing: Box<Compressing>,
    input: Vec<u8>,
    end: BlockEnd,
    result: io::Result<()>,
}

impl EncoderLoan {
    /// Compresses the block (its bytes, then its end: a sync flush, or the stream's end); the
    /// output waits in the encoder for the exchange to frame.
    pub fn run(&mut self) {
        let compressing = &mut self.compressing;
        let input = &self.input;
        let end = self.end;
        self.result = (|| {
            if !input.is_empty() {
                compressing.encoder.write(input)?;
                compressing.dirty = true;
            }
            match end {
                BlockEnd::Write => {}
                BlockEnd::Flush => {
                    if !compressing.whole && compressing.dirty {
                        compressing.dirty = false;
                        compressing.encoder.flush()?;
                    }
                }
                BlockEnd::Finish => compressing.encoder.finish()?,
            }
            Ok(())
        })();
    }

    /// What the block ends with.
    pub fn end(&self) -> BlockEnd {
        self.end
    }
}

impl Exchange {
    /// Lends the encoder of this compressed response with its next block, `data` ended by
    /// `end` (what [`Exchange::write_body`] and then [`Exchange::flush`] or
    /// [`Exchange::finish`] would do here, to run elsewhere): the body's accounting is done
    /// now, the compressing by [`EncoderLoan::run`], the framing and sending by
    /// [`Exchange::take_back_block`]. Until then the caller must not use the exchange for
    /// this response. None when this block is not lent but written here, as it was: the
    /// response is not compressed, has no body (`HEAD`), has not begun, or ends short of its
    /// Content-Length (cut off here, [`Exchange::finish`]).
    pub fn lend_block(&mut self, data: &[u8], end: BlockEnd) -> Option<EncoderLoan> {
        if self.compressing.is_none()
            || self.discards_body()
            || !matches!(self.phase, Phase::Buffered | Phase::Committed)
        {
            return None;
        }
        let taken = match self.declared {
            Some(declared) => (data.len() as u64).min(declared.saturating_sub(self.body_sent)),
            None => data.len() as u64,
        };
        if end == BlockEnd::Finish
            && self
                .declared
                .is_some_and(|declared| self.body_sent + taken < declared)
        {
            return None;
        }
        let data = self.allowed(data);
        self.body_sent += data.len() as u64;
        let compressing = self.compressing.take()?;
        Some(EncoderLoan {
            compressing,
            input: data.to_vec(),
            end,
            result: Ok(()),
        })
    }

    /// A block made by a lent encoder (a loan of this exchange's response, run) in the
    /// response: framed as the head announced and sent as its end asks (a flushed block
    /// now; the response's end, with `trailers` as its trailer section when given). The
    /// encoder is back (and, at the end, back in the slot for its next response).
    pub fn take_back_block(
        &mut self,
        loan: EncoderLoan,
        trailers: Option<&[(&[u8], &[u8])]>,
    ) -> io::Result<()> {
        let EncoderLoan {
            compressing,
            end,
            result,
            ..
        } = loan;
        self.compressing = Some(compressing);
        if let Err(err) = result {
            self.keep_alive = false;
            return Err(err);
        }
        match end {
            BlockEnd::Write => {
                if self.compressing.as_ref().is_some_and(|c| c.whole) {
                    return Ok(());
                }
                self.take_encoded();
                if self.ctx.out.len() >= OUT_BUFFER_LIMIT {
                    return self.emit_buffered(Phase::Committed);
                }
                Ok(())
            }
            BlockEnd::Flush => {
                // A whole body (its Content-Length set at the end) sends nothing before its
                // end, as the inline flush does: the head waits for the length.
                if self.compressing.as_ref().is_some_and(|c| c.whole) {
                    return Ok(());
                }
                self.take_encoded();
                if self.ctx.out.is_empty()
                    || !matches!(self.phase, Phase::Buffered | Phase::Committed)
                {
                    return Ok(());
                }
                self.emit_buffered(Phase::Committed)
            }
            BlockEnd::Finish => {
                self.frame_ended();
                self.close_body(trailers)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compress::CompressionConfig;
    use crate::connection::{Connection, Readiness};
    use crate::listener::{Local, Peer};
    use crate::scoreboard::Scoreboard;
    use crate::shared::WorkerShared;
    use crate::transport::Transport;
    use crate::{App, WorkerConfig};
    use std::io::Read;
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;

    const BLOCKS: [&[u8]; 3] = [
        b"data: one one one one one one one one\n\n",
        b"data: two two two two two two two two\n\n",
        b"data: three three three three three\n\n",
    ];

    /// Streams `BLOCKS`, each lent to another thread with its encoder and taken back in turn,
    /// as the ASGI bridge does with its pool; then the end, lent too.
    struct Lending;

    impl App for Lending {
        fn serve(&self, mut exchange: Box<Exchange>) -> Box<Exchange> {
            exchange
                .begin_response(
                    b"200 OK",
                    [(&b"Content-Type"[..], &b"text/event-stream"[..])],
                    None,
                )
                .unwrap();
            assert!(exchange.is_compressing());
            let ends = BLOCKS
                .iter()
                .map(|block| (*block, BlockEnd::Flush))
                .chain([(&b""[..], BlockEnd::Finish)]);
            for (block, end) in ends {
                let mut loan = exchange.lend_block(block, end).expect("lent");
                assert!(!exchange.is_compressing(), "the encoder is out");
                let loan = std::thread::spawn(move || {
                    loan.run();
                    loan
                })
                .join()
                .unwrap();
                exchange.take_back_block(loan, None).unwrap();
            }
            assert!(
                !exchange.is_compressing(),
                "the encoder went back to the slot"
            );
            assert!(exchange.lend_block(b"late", BlockEnd::Finish).is_none());
            exchange
        }
    }

    /// Serves `GET /events` (gzip accepted) with `app` on a socket pair: the client's answer.
    fn answer_of(app: &dyn App) -> Vec<u8> {
        let config = WorkerConfig {
            compression: CompressionConfig {
                codings: vec![crate::compress::Coding::Gzip],
                ..CompressionConfig::default()
            },
            ..WorkerConfig::default()
        };
        let shared = Arc::new(WorkerShared::new(
            config,
            vec![Local::Unix(String::new())],
            None,
            Arc::new(Scoreboard::new(1, 1).unwrap()),
            0,
            u64::MAX,
            None,
        ));
        let (mut client, server) = UnixStream::pair().unwrap();
        server.set_nonblocking(true).unwrap();
        let limits = shared.config.limits;
        let mut conn = Connection::new(Transport::Plain(OwnedFd::from(server)), Peer::Unix, 0);
        std::io::Write::write_all(
            &mut client,
            b"GET /events HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        assert!(matches!(conn.on_readable(&limits), Readiness::HeadComplete));
        let ctx = Box::new(crate::exchange::SlotContext::new());
        let (kept, _) = crate::slot::serve_connection(conn, ctx, app, &shared, None);
        drop(kept);
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).unwrap();
        answer
    }

    /// Lends `BODY` (its length announced, so compressed whole) in two blocks, the first
    /// ended by a flush, as an ASGI app's `more_body` message would be.
    struct LendingWhole;

    /// Above `compression_min_size` (1024) together, so that it is compressed.
    const BODY: [&[u8]; 2] = [&[b'a'; 700], &[b'b'; 700]];

    impl App for LendingWhole {
        fn serve(&self, mut exchange: Box<Exchange>) -> Box<Exchange> {
            let length = BODY.iter().map(|part| part.len() as u64).sum();
            exchange
                .begin_response(
                    b"200 OK",
                    [(&b"Content-Type"[..], &b"text/plain"[..])],
                    Some(length),
                )
                .unwrap();
            for (part, end) in BODY.iter().zip([BlockEnd::Flush, BlockEnd::Finish]) {
                let mut loan = exchange.lend_block(part, end).expect("lent");
                loan.run();
                exchange.take_back_block(loan, None).unwrap();
            }
            exchange
        }
    }

    #[test]
    fn a_flush_lent_with_a_whole_body_sends_nothing_before_its_end() {
        let answer = answer_of(&LendingWhole);
        let end = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&answer[..end]).to_lowercase();
        assert_eq!(head.matches("http/1.1 200").count(), 1, "{head}");
        assert!(head.contains("content-encoding: gzip"), "{head}");
        assert!(!head.contains("transfer-encoding"), "{head}");
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length: "))
            .expect("a Content-Length")
            .trim()
            .parse()
            .unwrap();
        assert_eq!(
            answer.len() - end,
            length,
            "the length is the compressed body's"
        );
        let mut decoded = Vec::new();
        flate2::read::GzDecoder::new(&answer[end..])
            .read_to_end(&mut decoded)
            .unwrap();
        assert_eq!(decoded, BODY.concat());
    }

    #[test]
    fn blocks_lent_to_another_thread_leave_in_order_each_decodable_then_the_end() {
        let answer = answer_of(&Lending);
        let end = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&answer[..end]).to_lowercase();
        assert!(head.contains("content-encoding: gzip"), "{head}");
        assert!(head.contains("transfer-encoding: chunked"), "{head}");
        // One chunk per block, each decoding to its block alone; the last chunk ends the
        // gzip stream; then the last-chunk marker.
        let mut body = &answer[end..];
        let mut chunks = Vec::new();
        loop {
            let line = body.windows(2).position(|w| w == b"\r\n").unwrap();
            let size =
                usize::from_str_radix(std::str::from_utf8(&body[..line]).unwrap(), 16).unwrap();
            body = &body[line + 2..];
            if size == 0 {
                assert_eq!(body, b"\r\n");
                break;
            }
            chunks.push(body[..size].to_vec());
            body = &body[size + 2..];
        }
        assert_eq!(chunks.len(), BLOCKS.len() + 1);
        let mut inflate = flate2::Decompress::new(false);
        let mut gzip_body = Vec::new();
        for (index, chunk) in chunks.iter().enumerate() {
            // The 10-byte gzip header leads the first chunk; the stream is raw deflate after.
            let data = if index == 0 { &chunk[10..] } else { &chunk[..] };
            let mut out = Vec::with_capacity(4096);
            inflate
                .decompress_vec(data, &mut out, flate2::FlushDecompress::Sync)
                .unwrap();
            if index < BLOCKS.len() {
                assert_eq!(out, BLOCKS[index], "block {index} decodes alone");
            } else {
                assert!(out.is_empty());
                gzip_body = chunk.clone();
            }
        }
        // The last chunk carries the end of deflate and the CRC and length trailer.
        let total: usize = BLOCKS.iter().map(|b| b.len()).sum();
        assert_eq!(
            &gzip_body[gzip_body.len() - 4..],
            &(total as u32).to_le_bytes()
        );
    }
}
