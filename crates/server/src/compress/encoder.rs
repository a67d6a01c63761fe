//! One response's encoder: body bytes in, compressed bytes gathered in its own buffer, which
//! the exchange takes after each step ([`Encoder::output`]). [`Encoder::flush`] ends a block
//! with a sync flush (gzip's `Z_SYNC_FLUSH`, brotli's `BROTLI_OPERATION_FLUSH`, zstd's
//! `ZSTD_e_flush`), so that what was written so far decodes on the client before the rest
//! exists: a stream's blocks (server-sent events) leave one by one, compressed.
//!
//! An enum, not a trait object: one per compressed response, made only when a response is
//! compressed. It must not frame its output (chunked or not): the exchange does.

use std::io::{self, Write};

use flate2::{Compress, Compression, Crc, FlushCompress, Status};
use zstd::stream::raw::{Encoder as ZstdStream, InBuffer, Operation, OutBuffer};

use super::{Coding, CompressionConfig};

/// brotli's window (log2 bytes): 4 MiB, the format's usual default.
const BROTLI_WINDOW: u32 = 22;
/// brotli's internal buffer between its state and our output vector.
const BROTLI_BUFFER: usize = 4096;
/// The gzip header (RFC 1952): deflate, no flags, no time, no extra flags, OS unknown.
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
/// Room made in the output vector before each step of an encoder that writes only into it.
const OUTPUT_STEP: usize = 8 * 1024;

/// A compressor of one response body.
pub enum Encoder {
    /// gzip: flate2's raw deflate (zlib-rs) with the header and trailer written here, so that
    /// a slot's encoder is reset rather than made again for its next response (boxed: the
    /// variants differ in size).
    Gzip(Box<Gzip>),
    /// brotli (boxed: its state is large and the other variants small). Its writer finishes
    /// only when consumed: then `None`, and its last output in `done`.
    Brotli {
        /// The writer, until the stream ends.
        writer: Option<Box<brotli::CompressorWriter<Vec<u8>>>>,
        /// The output once the writer is consumed.
        done: Vec<u8>,
    },
    /// zstd's streaming context, reset for the next response.
    Zstd(Box<Zstd>),
}

/// A gzip stream: deflate, the running CRC, the output.
pub struct Gzip {
    deflate: Compress,
    crc: Crc,
    out: Vec<u8>,
    started: bool,
}

/// A zstd stream: its context and the output.
pub struct Zstd {
    stream: ZstdStream<'static>,
    out: Vec<u8>,
}

impl Gzip {
    fn deflate(&mut self, mut input: &[u8], flush: FlushCompress) -> io::Result<()> {
        loop {
            if self.out.capacity() - self.out.len() < OUTPUT_STEP / 2 {
                self.out.reserve(OUTPUT_STEP.max(input.len() / 2));
            }
            let before = self.deflate.total_in();
            let status = self
                .deflate
                .compress_vec(input, &mut self.out, flush)
                .map_err(io::Error::other)?;
            input = &input[(self.deflate.total_in() - before) as usize..];
            let room_left = self.out.len() < self.out.capacity();
            let done = match flush {
                FlushCompress::Finish => status == Status::StreamEnd,
                // Sync: everything is out once deflate leaves room in the output.
                _ => input.is_empty() && room_left,
            };
            if done {
                return Ok(());
            }
        }
    }
}

impl Zstd {
    /// One zstd step until it is done: `step` returns the bytes it still has to write (0: done).
    fn drive(
        &mut self,
        mut step: impl FnMut(&mut ZstdStream<'static>, &mut OutBuffer<'_, Vec<u8>>) -> io::Result<usize>,
    ) -> io::Result<()> {
        loop {
            self.out.reserve(OUTPUT_STEP);
            let at = self.out.len();
            let mut output = OutBuffer::around_pos(&mut self.out, at);
            if step(&mut self.stream, &mut output)? == 0 {
                return Ok(());
            }
        }
    }

    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        let mut input = InBuffer::around(data);
        while input.pos() < data.len() {
            self.out.reserve(OUTPUT_STEP.max(data.len() / 2));
            let at = self.out.len();
            let mut output = OutBuffer::around_pos(&mut self.out, at);
            self.stream.run(&mut input, &mut output)?;
        }
        Ok(())
    }
}

impl Encoder {
    /// An encoder for `coding` at the level `config` sets.
    pub fn new(coding: Coding, config: &CompressionConfig) -> io::Result<Encoder> {
        Ok(match coding {
            Coding::Gzip => Encoder::Gzip(Box::new(Gzip {
                deflate: Compress::new(Compression::new(config.gzip_level), false),
                crc: Crc::new(),
                out: Vec::new(),
                started: false,
            })),
            Coding::Brotli => Encoder::Brotli {
                writer: Some(Box::new(brotli::CompressorWriter::new(
                    Vec::new(),
                    BROTLI_BUFFER,
                    config.brotli_level,
                    BROTLI_WINDOW,
                ))),
                done: Vec::new(),
            },
            Coding::Zstd => Encoder::Zstd(Box::new(Zstd {
                stream: ZstdStream::new(config.zstd_level)?,
                out: Vec::new(),
            })),
        })
    }

    /// The coding it produces.
    pub fn coding(&self) -> Coding {
        match self {
            Encoder::Gzip(_) => Coding::Gzip,
            Encoder::Brotli { .. } => Coding::Brotli,
            Encoder::Zstd(_) => Coding::Zstd,
        }
    }

    /// Compresses `data` (its bytes may stay in the encoder until a flush or the end).
    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            Encoder::Gzip(gzip) => {
                if !gzip.started {
                    gzip.started = true;
                    gzip.out.extend_from_slice(&GZIP_HEADER);
                }
                gzip.crc.update(data);
                gzip.deflate(data, FlushCompress::None)
            }
            Encoder::Brotli { writer, .. } => open_writer(writer)?.write_all(data),
            Encoder::Zstd(zstd) => zstd.write(data),
        }
    }

    /// Ends a block: everything written so far can be decoded from the output.
    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            Encoder::Gzip(gzip) => gzip.deflate(&[], FlushCompress::Sync),
            Encoder::Brotli { writer, .. } => open_writer(writer)?.flush(),
            Encoder::Zstd(zstd) => zstd.drive(|stream, output| stream.flush(output)),
        }
    }

    /// Ends the stream (its trailer: gzip's CRC and length, brotli's last block, zstd's end
    /// of frame) into the output.
    pub fn finish(&mut self) -> io::Result<()> {
        match self {
            Encoder::Gzip(gzip) => {
                if !gzip.started {
                    gzip.started = true;
                    gzip.out.extend_from_slice(&GZIP_HEADER);
                }
                gzip.deflate(&[], FlushCompress::Finish)?;
                let (crc, length) = (gzip.crc.sum(), gzip.crc.amount());
                gzip.out.extend_from_slice(&crc.to_le_bytes());
                gzip.out.extend_from_slice(&length.to_le_bytes());
                Ok(())
            }
            Encoder::Brotli { writer, done } => {
                if let Some(writer) = writer.take() {
                    *done = writer.into_inner();
                }
                Ok(())
            }
            Encoder::Zstd(zstd) => zstd.drive(|stream, output| stream.finish(output, true)),
        }
    }

    /// Makes it ready for another response, its memory kept: `false` when it cannot be (a
    /// brotli writer, made afresh cheaply; an error), and it is then dropped.
    pub fn reset(&mut self) -> bool {
        match self {
            Encoder::Gzip(gzip) => {
                gzip.deflate.reset();
                gzip.crc.reset();
                gzip.out.clear();
                gzip.started = false;
                true
            }
            Encoder::Brotli { .. } => false,
            Encoder::Zstd(zstd) => {
                zstd.out.clear();
                zstd.stream.reinit().is_ok()
            }
        }
    }

    /// The compressed bytes produced so far and not yet taken: the caller copies them out
    /// and clears the vector.
    pub fn output(&mut self) -> &mut Vec<u8> {
        match self {
            Encoder::Gzip(gzip) => &mut gzip.out,
            Encoder::Brotli {
                writer: Some(writer),
                ..
            } => writer.get_mut(),
            Encoder::Brotli { done, .. } => done,
            Encoder::Zstd(zstd) => &mut zstd.out,
        }
    }
}

/// The encoders a slot keeps between its compressed responses, one per coding at most, so
/// that a response resets one (zlib-rs and zstd allocate and clear hundreds of KiB to make
/// their state: about 20 and 40 µs a response) instead of making it.
#[derive(Default)]
pub struct Spare {
    encoders: Vec<Encoder>,
}

impl Spare {
    /// An encoder for `coding`: a kept one, or a new one.
    pub fn take(&mut self, coding: Coding, config: &CompressionConfig) -> io::Result<Encoder> {
        match self.encoders.iter().position(|e| e.coding() == coding) {
            Some(index) => Ok(self.encoders.swap_remove(index)),
            None => Encoder::new(coding, config),
        }
    }

    /// Keeps `encoder` (reset) for a later response.
    pub fn give_back(&mut self, mut encoder: Encoder) {
        if encoder.reset() && !self.encoders.iter().any(|e| e.coding() == encoder.coding()) {
            self.encoders.push(encoder);
        }
    }
}

/// The brotli writer of a stream not yet finished; an error after its end.
fn open_writer(
    writer: &mut Option<Box<brotli::CompressorWriter<Vec<u8>>>>,
) -> io::Result<&mut brotli::CompressorWriter<Vec<u8>>> {
    writer
        .as_deref_mut()
        .ok_or_else(|| io::Error::other("brotli stream written after its end"))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn decode(coding: Coding, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match coding {
            Coding::Gzip => {
                flate2::read::GzDecoder::new(bytes)
                    .read_to_end(&mut out)
                    .ok();
            }
            Coding::Brotli => {
                brotli::Decompressor::new(bytes, 4096)
                    .read_to_end(&mut out)
                    .ok();
            }
            Coding::Zstd => {
                // A stream cut after a flushed block decodes up to it; read what comes.
                let mut decoder = zstd::stream::read::Decoder::new(bytes).unwrap();
                let mut buf = [0u8; 4096];
                while let Ok(n) = decoder.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    out.extend_from_slice(&buf[..n]);
                }
            }
        }
        out
    }

    #[test]
    fn each_flushed_block_decodes_before_the_end() {
        let config = CompressionConfig::default();
        for coding in [Coding::Gzip, Coding::Brotli, Coding::Zstd] {
            let mut encoder = Encoder::new(coding, &config).unwrap();
            let mut sent = Vec::new();
            let mut expected = Vec::new();
            for n in 0..5 {
                let event = format!("data: event {n} {}\n\n", "x".repeat(n * 300));
                encoder.write(event.as_bytes()).unwrap();
                encoder.flush().unwrap();
                let block = std::mem::take(encoder.output());
                assert!(!block.is_empty(), "{coding:?}: block {n} empty");
                sent.extend_from_slice(&block);
                expected.extend_from_slice(event.as_bytes());
                // What arrived so far is every event so far, not one byte less.
                assert_eq!(
                    decode(coding, &sent),
                    expected,
                    "{coding:?} after block {n}"
                );
            }
            encoder.finish().unwrap();
            sent.extend_from_slice(encoder.output());
            assert_eq!(decode(coding, &sent), expected, "{coding:?} whole");
        }
    }

    #[test]
    fn a_spare_encoder_makes_a_fresh_stream() {
        let config = CompressionConfig::default();
        let mut spare = Spare::default();
        for coding in [Coding::Gzip, Coding::Brotli, Coding::Zstd] {
            for round in 0..3 {
                let body = format!("round {round}: {}", "abc".repeat(500 * (round + 1)));
                let mut encoder = spare.take(coding, &config).unwrap();
                encoder.write(body.as_bytes()).unwrap();
                if round == 1 {
                    // Given back mid-stream (an aborted response): the next one is whole.
                    spare.give_back(encoder);
                    continue;
                }
                encoder.finish().unwrap();
                let out = std::mem::take(encoder.output());
                assert_eq!(
                    decode(coding, &out),
                    body.as_bytes(),
                    "{coding:?} round {round}"
                );
                spare.give_back(encoder);
            }
        }
    }

    #[test]
    fn a_whole_body_shrinks_and_round_trips() {
        let config = CompressionConfig::default();
        let body = "<p>hello compressed world</p>\n".repeat(200);
        for coding in [Coding::Gzip, Coding::Brotli, Coding::Zstd] {
            let mut encoder = Encoder::new(coding, &config).unwrap();
            encoder.write(body.as_bytes()).unwrap();
            encoder.finish().unwrap();
            let out = std::mem::take(encoder.output());
            assert!(
                out.len() < body.len() / 10,
                "{coding:?}: {} bytes",
                out.len()
            );
            assert_eq!(decode(coding, &out), body.as_bytes());
        }
    }
}
