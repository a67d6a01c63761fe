//! One response's encoder: body bytes in, compressed bytes gathered in its own buffer, which
//! the exchange takes after each step ([`Encoder::output`]). [`Encoder::flush`] ends a block
//! with a sync flush (gzip's `Z_SYNC_FLUSH`, brotli's `BROTLI_OPERATION_FLUSH`, zstd's
//! `ZSTD_e_flush`), so that what was written so far decodes on the client before the rest
//! exists: a stream's blocks (server-sent events) leave one by one, compressed.
//!
//! An enum, not a trait object: one per compressed response, made only when a response is
//! compressed. It must not frame its output (chunked or not): the exchange does.

use std::io::{self, Write};

use super::{Coding, CompressionConfig};

/// brotli's window (log2 bytes): 4 MiB, the format's usual default.
const BROTLI_WINDOW: u32 = 22;
/// brotli's internal buffer between its state and our output vector.
const BROTLI_BUFFER: usize = 4096;

/// A compressor of one response body.
pub enum Encoder {
    /// gzip through flate2.
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    /// brotli (boxed: its state is large and the other variants small). Its writer finishes
    /// only when consumed: then `None`, and its last output in `done`.
    Brotli {
        /// The writer, until the stream ends.
        writer: Option<Box<brotli::CompressorWriter<Vec<u8>>>>,
        /// The output once the writer is consumed.
        done: Vec<u8>,
    },
    /// zstd.
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Encoder {
    /// An encoder for `coding` at the level `config` sets.
    pub fn new(coding: Coding, config: &CompressionConfig) -> io::Result<Encoder> {
        Ok(match coding {
            Coding::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(config.gzip_level),
            )),
            Coding::Brotli => Encoder::Brotli {
                writer: Some(Box::new(brotli::CompressorWriter::new(
                    Vec::new(),
                    BROTLI_BUFFER,
                    config.brotli_level,
                    BROTLI_WINDOW,
                ))),
                done: Vec::new(),
            },
            Coding::Zstd => Encoder::Zstd(zstd::stream::write::Encoder::new(
                Vec::new(),
                config.zstd_level,
            )?),
        })
    }

    /// Compresses `data` (its bytes may stay in the encoder until a flush or the end).
    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            Encoder::Gzip(encoder) => encoder.write_all(data),
            Encoder::Brotli { writer, .. } => open_writer(writer)?.write_all(data),
            Encoder::Zstd(encoder) => encoder.write_all(data),
        }
    }

    /// Ends a block: everything written so far can be decoded from the output.
    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            Encoder::Gzip(encoder) => encoder.flush(),
            Encoder::Brotli { writer, .. } => open_writer(writer)?.flush(),
            Encoder::Zstd(encoder) => encoder.flush(),
        }
    }

    /// Ends the stream (its trailer: gzip's CRC and length, brotli's last block, zstd's end
    /// of frame) into the output.
    pub fn finish(&mut self) -> io::Result<()> {
        match self {
            Encoder::Gzip(encoder) => encoder.try_finish(),
            Encoder::Brotli { writer, done } => {
                if let Some(writer) = writer.take() {
                    *done = writer.into_inner();
                }
                Ok(())
            }
            Encoder::Zstd(encoder) => encoder.do_finish(),
        }
    }

    /// The compressed bytes produced so far and not yet taken: the caller copies them out
    /// and clears the vector.
    pub fn output(&mut self) -> &mut Vec<u8> {
        match self {
            Encoder::Gzip(encoder) => encoder.get_mut(),
            Encoder::Brotli {
                writer: Some(writer),
                ..
            } => writer.get_mut(),
            Encoder::Brotli { done, .. } => done,
            Encoder::Zstd(encoder) => encoder.get_mut(),
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
