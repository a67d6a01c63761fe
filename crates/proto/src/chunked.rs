//! Decoding of the chunked transfer coding (RFC 9112 section 7.1), resumable
//! at any byte boundary.
//!
//! Owns: chunk sizes, extensions (checked, then skipped), the CRLF after each
//! chunk, and the trailer section (checked, then discarded: WSGI has no way to
//! hand trailers to an app). Must not: buffer body bytes or lines. The decoder
//! keeps a few words of state, so the caller can drop every byte it has
//! handed over, except the body bytes it was pointed at.
//!
//! Strict choices: lines end in CRLF only (no bare LF); whitespace after the
//! size is allowed only before a `;` (the BWS of section 7.1.1), never alone
//! or before the size; no sign, no `0x`, no empty size. Trailer fields that
//! govern framing, routing or the connection are refused even though they are
//! discarded, so that no proxy downstream can be tricked into merging them.

use std::ops::Range;

use crate::syntax::{is_field_value_byte, is_tchar};

/// What `ChunkedDecoder::decode` found.
#[derive(Debug, PartialEq, Eq)]
pub enum ChunkedEvent {
    /// Body bytes: this range of the input (counted in `consumed`).
    Data(Range<usize>),
    /// All of the input was consumed; call again with more bytes.
    NeedMore,
    /// The last chunk and the trailer section are done; `consumed` stops
    /// right after them, so pipelined bytes are left to the caller.
    End,
}

/// Why a chunked body was refused. The connection cannot be reused after any
/// of them: where the next request starts is unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkedError {
    /// The size line is not `1*HEXDIG [ BWS ";" ext ] CRLF`.
    InvalidChunkSize,
    /// The chunk size does not fit in 64 bits.
    ChunkSizeOverflow,
    /// A control byte or a bare CR in a chunk extension.
    InvalidChunkExtension,
    /// More extension bytes in one body than `MAX_EXTENSION_BYTES`.
    ExtensionsTooLarge,
    /// Chunk data not followed by CRLF.
    MissingChunkTerminator,
    /// A trailer line is not `token ":" field-value CRLF` (or the section
    /// does not end in CRLF).
    InvalidTrailer,
    /// A trailer field that only makes sense in the header section.
    ForbiddenTrailer,
    /// The trailer section is larger than the decoder's `max_trailer_size`.
    TrailersTooLarge,
}

impl ChunkedError {
    /// The status code to answer with, if no response has started yet.
    pub fn status(&self) -> u16 {
        match self {
            ChunkedError::TrailersTooLarge => 431,
            _ => 400,
        }
    }

    /// A short text for logs.
    pub fn reason(&self) -> &'static str {
        match self {
            ChunkedError::InvalidChunkSize => "invalid chunk size line",
            ChunkedError::ChunkSizeOverflow => "chunk size overflows",
            ChunkedError::InvalidChunkExtension => "invalid chunk extension",
            ChunkedError::ExtensionsTooLarge => "chunk extensions too large",
            ChunkedError::MissingChunkTerminator => "chunk data not followed by CRLF",
            ChunkedError::InvalidTrailer => "invalid trailer section",
            ChunkedError::ForbiddenTrailer => "framing or routing field in trailers",
            ChunkedError::TrailersTooLarge => "trailer section too large",
        }
    }
}

impl std::fmt::Display for ChunkedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for ChunkedError {}

/// Extension bytes allowed per body. Apps never see extensions, so this only
/// bounds the work a peer can make us do while sending no data; 16 KiB is
/// hyper's limit, generous for any real use.
pub const MAX_EXTENSION_BYTES: usize = 16 * 1024;

/// Trailer fields refused (RFC 9110 section 6.5.1): framing, routing and
/// connection management. Other trailers (e.g. checksums, Vary) pass.
const FORBIDDEN_TRAILERS: [&[u8]; 10] = [
    b"content-length",
    b"transfer-encoding",
    b"trailer",
    b"host",
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"te",
    b"upgrade",
    b"expect",
];

/// Room for the longest forbidden trailer name; longer names cannot match.
const TRAILER_NAME_CAPACITY: usize = 17;

/// Where the decoder is in the grammar of RFC 9112 section 7.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Before the first hex digit of a size.
    SizeStart,
    /// Reading hex digits.
    Size { size: u64 },
    /// Whitespace after the size; only `;` may follow.
    SizeSpace { size: u64 },
    /// Inside the extensions, up to CR.
    Extension { size: u64 },
    /// Saw the CR ending the size line (after the size or its whitespace).
    SizeLf { size: u64 },
    /// Saw the CR ending the size line after an extension: anything but LF
    /// means the CR was a bare CR inside the extension.
    ExtensionLf { size: u64 },
    /// Inside chunk data.
    Data { remaining: u64 },
    /// Expecting the CR after chunk data.
    DataCr,
    /// Expecting the LF after chunk data.
    DataLf,
    /// At the start of a trailer line or of the final CRLF.
    TrailerLineStart,
    /// Reading a trailer field name.
    TrailerName,
    /// Reading a trailer field value, up to CR.
    TrailerValue,
    /// Saw the CR ending a trailer line.
    TrailerLf,
    /// Saw the CR of the final CRLF.
    EndLf,
    /// The body is complete.
    Done,
}

/// A resumable decoder for one chunked body.
#[derive(Clone, Debug)]
pub struct ChunkedDecoder {
    state: State,
    max_trailer_size: usize,
    trailer_bytes: usize,
    extension_bytes: usize,
    /// Lower-cased start of the current trailer name, to match forbidden names.
    name: [u8; TRAILER_NAME_CAPACITY],
    name_len: usize,
}

impl ChunkedDecoder {
    /// A decoder for a new body; the trailer section (field lines, without
    /// the final CRLF) may hold at most `max_trailer_size` bytes.
    pub fn new(max_trailer_size: usize) -> Self {
        ChunkedDecoder {
            state: State::SizeStart,
            max_trailer_size,
            trailer_bytes: 0,
            extension_bytes: 0,
            name: [0; TRAILER_NAME_CAPACITY],
            name_len: 0,
        }
    }

    /// Decodes from `input`; returns (bytes consumed, event).
    ///
    /// - `Data(range)`: `range` of `input` is body; `consumed == range.end`
    ///   (framing bytes before it were consumed too). Call again with the
    ///   rest. Never empty.
    /// - `NeedMore`: every byte of `input` was consumed (`consumed ==
    ///   input.len()`): the decoder keeps no copy of partial lines, only its
    ///   state, so the caller may discard them.
    /// - `End`: consumed stops right after the final CRLF. Further calls
    ///   return `(0, End)`.
    ///
    /// After an error the body cannot be resynchronised: close the connection.
    pub fn decode(&mut self, input: &[u8]) -> Result<(usize, ChunkedEvent), ChunkedError> {
        let mut pos = 0;
        loop {
            match self.state {
                State::Done => return Ok((pos, ChunkedEvent::End)),
                State::Data { remaining } if pos < input.len() => {
                    let available = input.len() - pos;
                    let take = usize::try_from(remaining).map_or(available, |r| r.min(available));
                    let left = remaining - take as u64;
                    self.state = if left == 0 {
                        State::DataCr
                    } else {
                        State::Data { remaining: left }
                    };
                    return Ok((pos + take, ChunkedEvent::Data(pos..pos + take)));
                }
                _ => {}
            }
            let Some(&byte) = input.get(pos) else {
                return Ok((pos, ChunkedEvent::NeedMore));
            };
            pos += 1;
            self.state = self.step(byte)?;
        }
    }

    /// Whether the final CRLF has been consumed.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The state after `byte`, for every state but `Data` and `Done`.
    fn step(&mut self, byte: u8) -> Result<State, ChunkedError> {
        use ChunkedError::*;
        Ok(match (self.state, byte) {
            (State::SizeStart, _) => State::Size {
                size: hex_digit(byte).ok_or(InvalidChunkSize)?,
            },
            (State::Size { size }, b'\r') => State::SizeLf { size },
            (State::Size { size }, b';') => self.extension_byte(size)?,
            (State::Size { size }, b' ' | b'\t') => State::SizeSpace { size },
            (State::Size { size }, _) => {
                let digit = hex_digit(byte).ok_or(InvalidChunkSize)?;
                if size >> 60 != 0 {
                    return Err(ChunkSizeOverflow);
                }
                State::Size {
                    size: size << 4 | digit,
                }
            }
            (State::SizeSpace { size }, b' ' | b'\t') => State::SizeSpace { size },
            (State::SizeSpace { size }, b';') => self.extension_byte(size)?,
            (State::SizeSpace { .. }, _) => return Err(InvalidChunkSize),
            (State::Extension { size }, b'\r') => State::ExtensionLf { size },
            (State::Extension { size }, _) if is_field_value_byte(byte) => {
                self.extension_byte(size)?
            }
            (State::Extension { .. }, _) => return Err(InvalidChunkExtension),
            (State::SizeLf { size: 0 } | State::ExtensionLf { size: 0 }, b'\n') => {
                State::TrailerLineStart
            }
            (State::SizeLf { size } | State::ExtensionLf { size }, b'\n') => {
                State::Data { remaining: size }
            }
            (State::SizeLf { .. }, _) => return Err(InvalidChunkSize),
            (State::ExtensionLf { .. }, _) => return Err(InvalidChunkExtension),
            (State::DataCr, b'\r') => State::DataLf,
            (State::DataLf, b'\n') => State::SizeStart,
            (State::DataCr | State::DataLf, _) => return Err(MissingChunkTerminator),
            (State::TrailerLineStart, b'\r') => State::EndLf,
            (State::TrailerLineStart, _) if is_tchar(byte) => {
                self.name_len = 0;
                self.trailer_byte()?;
                self.name_byte(byte);
                State::TrailerName
            }
            (State::TrailerName, b':') => {
                self.trailer_byte()?;
                let name = self.name.get(..self.name_len);
                if name.is_some_and(|name| FORBIDDEN_TRAILERS.contains(&name)) {
                    return Err(ForbiddenTrailer);
                }
                State::TrailerValue
            }
            (State::TrailerName, _) if is_tchar(byte) => {
                self.trailer_byte()?;
                self.name_byte(byte);
                State::TrailerName
            }
            (State::TrailerValue, b'\r') => {
                self.trailer_byte()?;
                State::TrailerLf
            }
            (State::TrailerValue, _) if is_field_value_byte(byte) => {
                self.trailer_byte()?;
                State::TrailerValue
            }
            (State::TrailerLf, b'\n') => {
                self.trailer_byte()?;
                State::TrailerLineStart
            }
            (State::EndLf, b'\n') => State::Done,
            (State::TrailerLineStart | State::TrailerName | State::TrailerValue, _)
            | (State::TrailerLf | State::EndLf, _) => return Err(InvalidTrailer),
            (State::Data { .. } | State::Done, _) => unreachable!("decode handles Data and Done"),
        })
    }

    /// Counts one extension byte against `MAX_EXTENSION_BYTES`.
    fn extension_byte(&mut self, size: u64) -> Result<State, ChunkedError> {
        self.extension_bytes += 1;
        if self.extension_bytes > MAX_EXTENSION_BYTES {
            return Err(ChunkedError::ExtensionsTooLarge);
        }
        Ok(State::Extension { size })
    }

    /// Counts one trailer byte against `max_trailer_size`.
    fn trailer_byte(&mut self) -> Result<(), ChunkedError> {
        self.trailer_bytes += 1;
        if self.trailer_bytes > self.max_trailer_size {
            return Err(ChunkedError::TrailersTooLarge);
        }
        Ok(())
    }

    /// Remembers a trailer name byte, lower-cased. Only the first
    /// `TRAILER_NAME_CAPACITY` bytes are kept; `name_len` keeps counting, so a
    /// longer name never matches a forbidden one.
    fn name_byte(&mut self, byte: u8) {
        if let Some(slot) = self.name.get_mut(self.name_len) {
            *slot = byte.to_ascii_lowercase();
        }
        self.name_len = self.name_len.saturating_add(1);
    }
}

/// The value of an ASCII hex digit.
fn hex_digit(byte: u8) -> Option<u64> {
    (byte as char).to_digit(16).map(u64::from)
}

#[cfg(test)]
mod tests;
