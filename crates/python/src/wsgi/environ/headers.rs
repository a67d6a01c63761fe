//! The request's header fields in a thread's environ template (ADR 0016): the keys they set,
//! kept while the next request's header block is the same bytes, and the last value of each
//! common field, kept while its bytes repeat.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use tines_proto::same_bytes;
use tines_server::Exchange;

use super::{EnvironContext, ThreadTemplate};
use crate::cgi::latin1;

/// The request headers whose environ keys are interned and whose last value each thread
/// keeps (a value that repeats is not decoded again): the most common ones.
pub(super) const KNOWN_HEADERS: [(&[u8], &str); 12] = [
    (b"host", "HTTP_HOST"),
    (b"accept", "HTTP_ACCEPT"),
    (b"cookie", "HTTP_COOKIE"),
    (b"origin", "HTTP_ORIGIN"),
    (b"referer", "HTTP_REFERER"),
    (b"user-agent", "HTTP_USER_AGENT"),
    (b"connection", "HTTP_CONNECTION"),
    (b"cache-control", "HTTP_CACHE_CONTROL"),
    (b"authorization", "HTTP_AUTHORIZATION"),
    (b"accept-encoding", "HTTP_ACCEPT_ENCODING"),
    (b"accept-language", "HTTP_ACCEPT_LANGUAGE"),
    (b"x-forwarded-for", "HTTP_X_FORWARDED_FOR"),
];

/// The index of a header name in [`KNOWN_HEADERS`].
fn known_header(name: &[u8]) -> Option<usize> {
    KNOWN_HEADERS
        .iter()
        .position(|(known, _)| known.len() == name.len() && known.eq_ignore_ascii_case(name))
}

fn header_key<'py>(py: Python<'py>, name: &[u8], scratch: &mut String) -> Bound<'py, PyString> {
    scratch.clear();
    scratch.push_str("HTTP_");
    for &b in name {
        scratch.push(if b == b'-' {
            '_'
        } else {
            b.to_ascii_uppercase() as char
        });
    }
    PyString::new(py, scratch)
}

impl ThreadTemplate {
    /// Whether the request's header fields are those the template's header keys were made
    /// from: the same header block, byte for byte.
    pub(super) fn same_headers(&self, exchange: &Exchange, decoded: bool) -> bool {
        self.header_source.as_deref().is_some_and(|source| {
            source.split_first().is_some_and(|(&flag, block)| {
                flag == u8::from(decoded) && same_bytes(block, exchange.header_block())
            })
        })
    }

    /// Sets the request's header fields in the template (`HTTP_*`, `CONTENT_TYPE`,
    /// `CONTENT_LENGTH`), and removes the last request's keys it lacks. On an error the
    /// template is dropped by the caller ([`build`]): it may hold keys no list names.
    pub(super) fn set_headers(
        &mut self,
        py: Python<'_>,
        context: &EnvironContext,
        exchange: &Exchange,
        decoded: bool,
    ) -> PyResult<()> {
        let mut source = self.header_source.take().unwrap_or_default();
        source.clear();
        source.push(u8::from(decoded));
        source.extend_from_slice(exchange.header_block());
        let dict = self.dict.clone_ref(py);
        let env = dict.bind(py);
        let mut keys: Vec<(Vec<u8>, Py<PyString>)> = Vec::with_capacity(self.header_keys.len());
        let mut scratch = String::new();
        for (index, (name, value)) in exchange.headers().enumerate() {
            if name.contains(&b'_') {
                // Dropped: `X_Forwarded_For` would land on the same key as `X-Forwarded-For`
                // and could spoof what a proxy set.
                continue;
            }
            if decoded && name.eq_ignore_ascii_case(b"transfer-encoding") {
                // The server decoded the chunked body before dispatch: the app gets a plain
                // body of known length (as behind a buffering proxy), `CONTENT_LENGTH` set
                // in the request's copy.
                continue;
            }
            let (key, value) = if name.eq_ignore_ascii_case(b"content-type") {
                (intern!(py, "CONTENT_TYPE").clone(), latin1(py, value)?)
            } else if name.eq_ignore_ascii_case(b"content-length") {
                (intern!(py, "CONTENT_LENGTH").clone(), latin1(py, value)?)
            } else {
                match known_header(name) {
                    Some(index) => (
                        context.header_keys[index].bind(py).clone(),
                        self.header_value(py, index, value)?,
                    ),
                    None => (header_key(py, name, &mut scratch), latin1(py, value)?),
                }
            };
            // Names map to keys one to one (ignoring case): a key already set by this
            // request only when an earlier field had the same name.
            let repeated = exchange
                .headers()
                .take(index)
                .any(|(earlier, _)| earlier.eq_ignore_ascii_case(name));
            if repeated {
                // RFC 9110 5.3: repeated fields combine with ", "; Cookie uses "; " (RFC
                // 6265 5.4).
                let existing = env
                    .get_item(&key)?
                    .map(|v| v.extract::<String>())
                    .transpose()?;
                let separator = if name.eq_ignore_ascii_case(b"cookie") {
                    "; "
                } else {
                    ", "
                };
                let merged = match existing {
                    Some(existing) => format!("{existing}{separator}{}", value.to_str()?),
                    None => value.to_str()?.to_owned(),
                };
                env.set_item(&key, merged)?;
            } else {
                env.set_item(&key, &value)?;
                keys.push((key.to_str()?.as_bytes().to_vec(), key.unbind()));
            }
        }
        for (text, key) in std::mem::take(&mut self.header_keys) {
            if !keys.iter().any(|(kept, _)| *kept == text) {
                env.del_item(key)?;
                self.removed += 1;
            }
        }
        self.header_keys = keys;
        self.compact_if_sparse(py)?;
        self.header_source = Some(source);
        Ok(())
    }

    /// Rebuilds the template, compact, when its table holds many deleted entries
    /// (`removed`, counted by whoever deletes a key from it).
    ///
    /// Why: CPython copies a dict by cloning its table only while at most a third of the
    /// table's entries are deleted ones; past that, each request's copy would insert key by
    /// key.
    pub(super) fn compact_if_sparse(&mut self, py: Python<'_>) -> PyResult<()> {
        let env = self.dict.bind(py);
        if self.removed * 2 >= env.len() {
            let compact = PyDict::new(py);
            compact.update(env.as_mapping())?;
            self.dict = compact.unbind();
            self.removed = 0;
        }
        Ok(())
    }

    /// The value of a known header field: the last one's when the bytes are the same.
    fn header_value<'py>(
        &mut self,
        py: Python<'py>,
        index: usize,
        bytes: &[u8],
    ) -> PyResult<Bound<'py, PyString>> {
        if let Some((last, value)) = &self.headers[index] {
            if same_bytes(last, bytes) {
                return Ok(value.bind(py).clone());
            }
        }
        let value = latin1(py, bytes)?;
        self.headers[index] = Some((bytes.to_vec(), value.clone().unbind()));
        Ok(value)
    }
}
