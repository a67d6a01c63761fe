//! The fields that decide framing and connection handling (RFC 9112
//! sections 6 and 9, RFC 9110 sections 7.2, 7.6.1 and 10.1.1), read over all
//! field lines of one head.
//!
//! Owns: Host (and that it names an absolute-form target's authority), Content-Length, Transfer-Encoding, Content-Type (count only),
//! Connection, Expect and Upgrade. Must not: look at any other field.

use super::{BodyFraming, ConnectionOption, ParseError, RequestHead, Version};
use crate::syntax::{is_token, is_valid_authority, list_elements, parse_decimal, trim_ows};
use crate::target::TargetAuthority;

/// What the framing and connection fields said, gathered over all lines.
#[derive(Default)]
pub(super) struct FieldSummary<'t> {
    /// The authority of an absolute-form target, which Host must name.
    target_authority: Option<TargetAuthority<'t>>,
    hosts: u32,
    content_types: u32,
    content_length: Option<u64>,
    transfer_encoding: bool,
    chunked_count: u32,
    chunked_is_final: bool,
    other_coding: bool,
    close: bool,
    keep_alive: bool,
    expect_continue: bool,
    upgrade: bool,
}

impl<'t> FieldSummary<'t> {
    /// A summary for a request whose target is `target` (as sent).
    pub(super) fn new(target: &'t [u8]) -> Self {
        Self {
            target_authority: TargetAuthority::of(target),
            ..Self::default()
        }
    }

    /// Takes one field line into account; refuses what is wrong on its own.
    pub(super) fn note(
        &mut self,
        name: &[u8],
        value: &[u8],
        version: Version,
    ) -> Result<(), ParseError> {
        let is = |known: &[u8]| name.eq_ignore_ascii_case(known);
        if is(b"host") {
            self.hosts += 1;
            if self.hosts > 1 {
                return Err(ParseError::DuplicateHost);
            }
            // RFC 9110 section 7.2 lets Host be empty when the target has no authority.
            if !value.is_empty() && !is_valid_authority(value, false) {
                return Err(ParseError::InvalidHost);
            }
            // An absolute-form target's authority and Host name one origin, or the request is
            // refused: the app sees Host, and a proxy in front may have routed by the target.
            if self
                .target_authority
                .is_some_and(|authority| !authority.matches(value))
            {
                return Err(ParseError::HostNotTargetAuthority);
            }
        } else if is(b"content-length") {
            if self.content_length.is_some() {
                return Err(ParseError::DuplicateContentLength);
            }
            self.content_length =
                Some(parse_decimal(value).ok_or(ParseError::InvalidContentLength)?);
        } else if is(b"transfer-encoding") {
            self.note_transfer_encoding(value)?;
        } else if is(b"content-type") {
            self.content_types += 1;
            if self.content_types > 1 {
                return Err(ParseError::DuplicateContentType);
            }
        } else if is(b"connection") {
            for option in list_elements(value) {
                self.close |= option.eq_ignore_ascii_case(b"close");
                self.keep_alive |= option.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if is(b"expect") {
            // RFC 9110 section 10.1.1: ignore 100-continue from HTTP/1.0.
            // Other expectations are ignored rather than answered with 417.
            self.expect_continue |= version == Version::Http11
                && list_elements(value).any(|e| e.eq_ignore_ascii_case(b"100-continue"));
        } else if is(b"upgrade") {
            self.upgrade = true;
        }
        Ok(())
    }

    /// Transfer-Encoding is a list over all its lines (RFC 9112 section 6.1).
    fn note_transfer_encoding(&mut self, value: &[u8]) -> Result<(), ParseError> {
        self.transfer_encoding = true;
        for coding in list_elements(value) {
            let (name, has_params) = match memchr::memchr(b';', coding) {
                Some(semi) => (trim_ows(&coding[..semi]), true),
                None => (coding, false),
            };
            if !is_token(name) {
                return Err(ParseError::InvalidTransferEncoding);
            }
            if name.eq_ignore_ascii_case(b"chunked") {
                // chunked takes no parameters and is applied once (RFC 9112 section 7).
                if has_params || self.chunked_count > 0 {
                    return Err(ParseError::InvalidTransferEncoding);
                }
                self.chunked_count += 1;
                self.chunked_is_final = true;
            } else {
                self.chunked_is_final = false;
                self.other_coding = true;
            }
        }
        Ok(())
    }

    /// Checks the fields together and writes the outcome into `head`.
    pub(super) fn finish(self, head: &mut RequestHead) -> Result<(), ParseError> {
        if head.version == Version::Http11 && self.hosts == 0 {
            return Err(ParseError::MissingHost);
        }
        head.body = match (self.content_length, self.transfer_encoding) {
            (Some(_), true) => return Err(ParseError::ContentLengthWithTransferEncoding),
            (_, true) if head.version == Version::Http10 => {
                return Err(ParseError::TransferEncodingInHttp10)
            }
            (_, true) if !self.chunked_is_final => return Err(ParseError::InvalidTransferEncoding),
            (_, true) if self.other_coding => return Err(ParseError::UnsupportedTransferCoding),
            (_, true) => BodyFraming::Chunked,
            (Some(length), false) => BodyFraming::Length(length),
            (None, false) => BodyFraming::None,
        };
        head.connection = if self.close {
            ConnectionOption::Close
        } else if self.keep_alive {
            ConnectionOption::KeepAlive
        } else {
            ConnectionOption::Default
        };
        head.expect_continue = self.expect_continue;
        head.upgrade = self.upgrade;
        Ok(())
    }
}
