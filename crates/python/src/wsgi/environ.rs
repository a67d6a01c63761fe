//! The WSGI environ (PEP 3333 and the CGI variables it inherits), built per request from a
//! per-worker template dict (the constant keys) and the parsed head. Keys are interned
//! strings; header values are decoded as latin-1, as PEP 3333 requires of native strings
//! (the decoding helpers are `crate::cgi`'s, shared with ASGI's scope). Each app thread keeps
//! its own template with the last request's values (ADR 0016): the request line and addresses
//! here, the header fields in `headers`, a TLS connection's variables in `tls`.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use pyo3::{intern, Bound};
use std::net::IpAddr;

use tines_proto::same_bytes;
use tines_proto::Version;
use tines_server::{Exchange, Local, Peer};

use super::input::Input;
use crate::cgi::{host_and_port, ipv4_text, latin1, percent_decode, split_target, under_root};
use headers::KNOWN_HEADERS;

mod headers;
mod tls;

/// The keys every request sets, or deletes when it has no value (`REMOTE_ADDR` and
/// `REMOTE_PORT` on a Unix socket without a forwarded client).
const PER_REQUEST_KEYS: [&str; 11] = [
    "REQUEST_METHOD",
    "PATH_INFO",
    "QUERY_STRING",
    "RAW_URI",
    "REQUEST_URI",
    "SERVER_PROTOCOL",
    "SERVER_NAME",
    "SERVER_PORT",
    "REMOTE_ADDR",
    "REMOTE_PORT",
    "wsgi.input",
];

/// What the environ needs from the worker (built once per worker).
pub struct EnvironContext {
    /// The constant keys, and `None` under each per-request key (set or removed by every
    /// request): each app thread starts its own template from it ([`ThreadTemplate`]).
    template: Py<PyDict>,
    /// The interned keys of [`KNOWN_HEADERS`].
    header_keys: Vec<Py<PyString>>,
    /// `root_path` (the template's `SCRIPT_NAME`), as bytes; empty for none. A path under it
    /// gets the rest as `PATH_INFO` ([`under_root`]).
    root_path: Vec<u8>,
}

/// The per-request values a thread's template remembers, by what they are made from.
#[derive(Clone, Copy)]
enum Remembered {
    /// `REQUEST_METHOD`.
    Method,
    /// `PATH_INFO`.
    Path,
    /// `QUERY_STRING`.
    Query,
    /// `RAW_URI` and `REQUEST_URI`.
    Uri,
    /// `SERVER_PROTOCOL`.
    Protocol,
    /// `SERVER_NAME` and `SERVER_PORT`.
    Server,
    /// `REMOTE_ADDR`.
    RemoteAddr,
    /// `REMOTE_PORT`.
    RemotePort,
}

const REMEMBERED: usize = 8;

/// One app thread's template: the worker's constants, and the last request's values under
/// the per-request keys, each with the bytes it was made from. A request whose value is made
/// from the same bytes as the last one's (the method, the protocol, the server name and
/// port, nearly always; the path and the client often) leaves it in place; only the others
/// are decoded and set, in the template, before the copy. The last value of each
/// [`KNOWN_HEADERS`] field is kept the same way. The header fields' keys stay in the template
/// while the next request's header block is the same bytes (a client's keep-alive requests,
/// a load balancer's health checks); a request with other fields sets its own and removes
/// the last one's it lacks. `wsgi.input` stays while the same object serves.
///
/// Why: each value set in the copy cost a str made, a dict insertion, and a str freed at
/// the end of the request: 13 such per hello-world request, about 3,000 of its 21,000
/// instructions (callgrind); the header fields and `wsgi.input`, set in the copy until
/// then, cost about 1,000 of 13,900 more. A value is immutable, so sharing it between
/// requests shows nothing of one request to another; the app gets a copy, so nothing it
/// does to its environ reaches the template.
struct ThreadTemplate {
    /// The [`EnvironContext`] it was made from (its address).
    owner: usize,
    dict: Py<PyDict>,
    /// What each [`Remembered`] value was made from; `None` before the first request and
    /// after an error part-way.
    sources: [Option<Vec<u8>>; REMEMBERED],
    /// The last value of each known header field, and its bytes.
    headers: Vec<Option<(Vec<u8>, Py<PyString>)>>,
    /// The header block the template's header keys were made from
    /// ([`Exchange::header_block`], after a byte saying whether the body was decoded);
    /// `None` before the first request.
    header_source: Option<Vec<u8>>,
    /// The keys those fields set in the template (their text, and the key), to be removed
    /// when a request lacks them.
    header_keys: Vec<(Vec<u8>, Py<PyString>)>,
    /// Keys removed from the template since it was last compacted (an upper bound of the
    /// deleted entries its table still holds).
    removed: usize,
    /// The request line (method to target, and the version) that the values under
    /// `REQUEST_METHOD`, `PATH_INFO`, `QUERY_STRING`, `RAW_URI`, `REQUEST_URI` and
    /// `SERVER_PROTOCOL` were made from; empty when unknown. A request with the same line
    /// leaves all of them in place after one comparison instead of five (about 170
    /// instructions per request).
    request_line: Vec<u8>,
    /// The `wsgi.input` the template holds (its address; 0 for none). The template's
    /// reference keeps that object alive, so the address names one object.
    input: usize,
    /// `REMOTE_PORT` strings by port, direct-mapped: a client's connections come and go,
    /// and its keep-alive connections take turns.
    ports: Vec<Option<(u16, Py<PyString>)>>,
    /// The TLS variables the template holds, and what they were made from.
    tls: tls::TlsMemo,
}

/// Slots of [`ThreadTemplate::ports`] (a power of two).
const PORT_CACHE: usize = 256;

thread_local! {
    /// This thread's template. Never dropped (a thread that ends leaves it to the process's
    /// exit: dropping a Python reference needs the interpreter, which may be gone by then).
    static THREAD_TEMPLATE: std::cell::RefCell<Option<std::mem::ManuallyDrop<ThreadTemplate>>> =
        const { std::cell::RefCell::new(None) };
}

/// Whether `source` (length-prefixed parts, as [`ThreadTemplate::remember`] keeps them) holds
/// exactly `parts`.
fn same_source(source: &[u8], parts: &[&[u8]]) -> bool {
    let mut rest = source;
    for part in parts {
        let Some((length, tail)) = rest.split_first_chunk::<4>() else {
            return false;
        };
        let len = u32::from_le_bytes(*length) as usize;
        if len != part.len() || tail.len() < len || !same_bytes(&tail[..len], part) {
            return false;
        }
        rest = &tail[part.len()..];
    }
    rest.is_empty()
}

/// Makes `source` hold `parts`, length-prefixed (so that two splits of the same bytes differ),
/// as [`same_source`] reads them.
fn write_source(source: &mut Vec<u8>, parts: &[&[u8]]) {
    source.clear();
    for part in parts {
        source.extend_from_slice(&(part.len() as u32).to_le_bytes());
        source.extend_from_slice(part);
    }
}

impl ThreadTemplate {
    fn new(py: Python<'_>, context: &EnvironContext) -> PyResult<ThreadTemplate> {
        Ok(ThreadTemplate {
            owner: context as *const EnvironContext as usize,
            dict: context.template.bind(py).copy()?.unbind(),
            sources: Default::default(),
            headers: KNOWN_HEADERS.iter().map(|_| None).collect(),
            header_source: None,
            header_keys: Vec::new(),
            removed: 0,
            request_line: Vec::new(),
            input: 0,
            ports: (0..PORT_CACHE).map(|_| None).collect(),
            tls: tls::TlsMemo::default(),
        })
    }

    /// `REMOTE_PORT`'s value for `port`.
    fn port_text<'py>(&mut self, py: Python<'py>, port: u16) -> Bound<'py, PyString> {
        let slot = &mut self.ports[usize::from(port) & (PORT_CACHE - 1)];
        if let Some((cached, text)) = slot {
            if *cached == port {
                return text.bind(py).clone();
            }
        }
        let mut digits = itoa::Buffer::new();
        let text = PyString::new(py, digits.format(port));
        *slot = Some((port, text.clone().unbind()));
        text
    }

    /// Sets the value that `parts` make (with `make`) under its key(s), unless the last
    /// request's was made from the same bytes.
    fn remember<'py>(
        &mut self,
        py: Python<'py>,
        which: Remembered,
        parts: &[&[u8]],
        set: impl FnOnce(&Bound<'py, PyDict>) -> PyResult<()>,
    ) -> PyResult<()> {
        let slot = &mut self.sources[which as usize];
        if slot
            .as_deref()
            .is_some_and(|source| same_source(source, parts))
        {
            return Ok(());
        }
        // Forgotten first: if `set` fails half-way, the next request sets it again.
        let mut source = slot.take().unwrap_or_default();
        set(self.dict.bind(py))?;
        write_source(&mut source, parts);
        self.sources[which as usize] = Some(source);
        Ok(())
    }
}

impl EnvironContext {
    /// A context whose template holds `constants`, `None` under each of
    /// [`PER_REQUEST_KEYS`], and room for about twenty request headers; `root_path` is the
    /// `SCRIPT_NAME` the constants hold (empty for none).
    ///
    /// Why: CPython copies a dict by cloning its hash table at the same size. A copy of the
    /// constants alone (a table of 16) grew twice per request as the per-request keys and
    /// headers went in, each time rebuilding its index (about 0.1 µs of a 10 µs request). With
    /// the per-request keys present, setting them replaces values in place; and one table
    /// growth forced here (padding keys inserted, then removed) leaves each thread's template
    /// room for the header fields it keeps, and the copies room for the few keys set in them
    /// (`wsgi.url_scheme` from a proxy, a decoded body's `CONTENT_LENGTH`). Behaviour does
    /// not depend on it: only the number of resizes does.
    pub fn new<'py>(
        py: Python<'py>,
        constants: &Bound<'py, PyDict>,
        root_path: &str,
    ) -> PyResult<Self> {
        // Interned keys, the same objects as the `intern!` keys `build` sets: a lookup then
        // matches by identity instead of comparing the characters.
        let template = PyDict::new(py);
        for (key, value) in constants.iter() {
            template.set_item(PyString::intern(py, key.extract::<&str>()?), value)?;
        }
        for key in PER_REQUEST_KEYS {
            template.set_item(PyString::intern(py, key), py.None())?;
        }
        let size_of = py.import("sys")?.getattr("getsizeof")?;
        let size =
            |dict: &Bound<'py, PyDict>| -> PyResult<usize> { size_of.call1((dict,))?.extract() };
        let initial = size(&template)?;
        let mut padding = Vec::new();
        // A table at least doubles when it grows: 64 keys always get there.
        while size(&template)? == initial && padding.len() < 64 {
            let key = PyString::new(py, &format!("tines.padding.{}", padding.len()));
            template.set_item(&key, py.None())?;
            padding.push(key);
        }
        for key in padding {
            template.del_item(key)?;
        }
        let header_keys = KNOWN_HEADERS
            .iter()
            .map(|(_, key)| PyString::intern(py, key).unbind())
            .collect();
        Ok(EnvironContext {
            template: template.unbind(),
            header_keys,
            root_path: root_path.as_bytes().to_vec(),
        })
    }
}

/// Builds the environ for the request held in `exchange`.
pub fn build<'py>(
    py: Python<'py>,
    context: &EnvironContext,
    exchange: &Exchange,
    input: &Bound<'py, Input>,
) -> PyResult<Bound<'py, PyDict>> {
    THREAD_TEMPLATE.with_borrow_mut(|slot| {
        let owner = context as *const EnvironContext as usize;
        if slot.as_ref().is_none_or(|template| template.owner != owner) {
            // The first request on this thread (or another app's template: never in a
            // worker, which serves one app).
            *slot = Some(std::mem::ManuallyDrop::new(ThreadTemplate::new(
                py, context,
            )?));
        }
        let template = slot.as_mut().expect("set above");
        let built = build_with(py, context, template, exchange, input);
        if built.is_err() {
            // Part-way through, the template may hold keys no list names: the next request
            // starts a new one.
            if let Some(template) = slot.take() {
                drop(std::mem::ManuallyDrop::into_inner(template));
            }
        }
        built
    })
}

/// Whether this thread's template holds `input` as its `wsgi.input` (a reference of its own).
pub fn template_holds(input: *mut pyo3::ffi::PyObject) -> bool {
    THREAD_TEMPLATE.with_borrow(|slot| {
        slot.as_ref()
            .is_some_and(|template| template.input == input as usize)
    })
}

fn build_with<'py>(
    py: Python<'py>,
    context: &EnvironContext,
    template: &mut ThreadTemplate,
    exchange: &Exchange,
    input: &Bound<'py, Input>,
) -> PyResult<Bound<'py, PyDict>> {
    remember_request_line(py, template, exchange, &context.root_path)?;
    let decoded_length = exchange.decoded_body_length();
    let mut host = None;
    for (name, value) in exchange.headers() {
        if name.eq_ignore_ascii_case(b"host") {
            host = Some(value);
        }
    }
    server_name_and_port(py, template, exchange, host)?;
    remote_addr_and_port(py, template, exchange)?;

    if !template.same_headers(exchange, decoded_length.is_some()) {
        template.set_headers(py, context, exchange, decoded_length.is_some())?;
    }
    let input_address = input.as_ptr() as usize;
    if template.input != input_address {
        template.input = 0;
        template
            .dict
            .bind(py)
            .set_item(intern!(py, "wsgi.input"), input)?;
        template.input = input_address;
    }

    let tls = exchange.with_tls_info(|info| template.set_tls(py, info))?;

    // What the template does not hold goes in the request's copy.
    let env = template.dict.bind(py).copy()?;
    if let Some(length) = decoded_length {
        env.set_item(intern!(py, "CONTENT_LENGTH"), length.to_string())?;
    }
    // On a plain connection the template holds `http`, the connection's own scheme; a trusted
    // proxy's `https` goes in the copy only, so the next request starts from `http` again.
    if !tls && exchange.url_scheme() == "https" {
        env.set_item(intern!(py, "wsgi.url_scheme"), intern!(py, "https"))?;
    }
    Ok(env)
}

/// Leaves the values made from the request line in place when the line is the same bytes as
/// the last request's (one comparison); else sets those that differ ([`set_request_line`]).
fn remember_request_line(
    py: Python<'_>,
    template: &mut ThreadTemplate,
    exchange: &Exchange,
    root_path: &[u8],
) -> PyResult<()> {
    let line = exchange.method_and_target();
    let protocol = protocol_byte(exchange);
    let same_line = template.request_line.len() == line.len() + 1
        && template.request_line.last() == Some(&protocol)
        && same_bytes(&template.request_line[..line.len()], line);
    if !same_line {
        // Unknown until the values are all set (an error part-way drops the template).
        template.request_line.clear();
        set_request_line(py, template, exchange, root_path)?;
        template.request_line.extend_from_slice(line);
        template.request_line.push(protocol);
    }
    Ok(())
}

/// The values made from the request line: `REQUEST_METHOD`, `PATH_INFO`, `QUERY_STRING`,
/// `RAW_URI`, `REQUEST_URI` and `SERVER_PROTOCOL` (each only when its bytes differ from the
/// last request's). Under a `root_path` (the template's constant `SCRIPT_NAME`), `PATH_INFO`
/// is what follows it when the decoded path is under it, else the whole path (gunicorn's
/// split; the proxy may have stripped the prefix): the root is fixed per worker, so the
/// remembered path bytes still decide `PATH_INFO`.
fn set_request_line(
    py: Python<'_>,
    template: &mut ThreadTemplate,
    exchange: &Exchange,
    root_path: &[u8],
) -> PyResult<()> {
    let method = exchange.method();
    template.remember(py, Remembered::Method, &[method], |env| {
        env.set_item(
            intern!(py, "REQUEST_METHOD"),
            match method {
                b"GET" => intern!(py, "GET").clone(),
                b"POST" => intern!(py, "POST").clone(),
                b"HEAD" => intern!(py, "HEAD").clone(),
                other => latin1(py, other)?,
            },
        )
    })?;
    let target = exchange.target();
    let (path, query) = split_target(target);
    template.remember(py, Remembered::Path, &[path], |env| {
        let decoded = percent_decode(path);
        let info = if root_path.is_empty() {
            &decoded[..]
        } else {
            under_root(&decoded, root_path).unwrap_or(&decoded)
        };
        env.set_item(intern!(py, "PATH_INFO"), latin1(py, info)?)
    })?;
    template.remember(py, Remembered::Query, &[query], |env| {
        let value = if query.is_empty() {
            intern!(py, "").clone()
        } else {
            latin1(py, query)?
        };
        env.set_item(intern!(py, "QUERY_STRING"), value)
    })?;
    template.remember(py, Remembered::Uri, &[target], |env| {
        let raw_uri = latin1(py, target)?;
        env.set_item(intern!(py, "RAW_URI"), &raw_uri)?;
        env.set_item(intern!(py, "REQUEST_URI"), raw_uri)
    })?;
    let protocol = protocol_byte(exchange);
    template.remember(py, Remembered::Protocol, &[&[protocol]], |env| {
        env.set_item(
            intern!(py, "SERVER_PROTOCOL"),
            match protocol {
                H2 => intern!(py, "HTTP/2"),
                HTTP10 => intern!(py, "HTTP/1.0"),
                _ => intern!(py, "HTTP/1.1"),
            },
        )
    })
}

/// [`protocol_byte`] of an HTTP/2 stream (past the [`Version`] discriminants).
const H2: u8 = 2;
/// [`protocol_byte`] of an HTTP/1.0 request.
const HTTP10: u8 = Version::Http10 as u8;
const _: () = assert!(H2 != HTTP10 && H2 != Version::Http11 as u8);

/// The protocol a request came by, as one byte for the template's memo: the head's version
/// (`Version as u8`), or [`H2`] on an HTTP/2 stream, whose synthesized head says HTTP/1.1
/// (ADR 0035). One predicted branch on the link's kind.
#[inline]
fn protocol_byte(exchange: &Exchange) -> u8 {
    if exchange.is_h2() {
        H2
    } else {
        exchange.version() as u8
    }
}

/// `SERVER_NAME` and `SERVER_PORT`: from the Host header, else the listening address.
fn server_name_and_port(
    py: Python<'_>,
    template: &mut ThreadTemplate,
    exchange: &Exchange,
    host: Option<&[u8]>,
) -> PyResult<()> {
    let local = exchange.local();
    // The listening address, as bytes: its IP and port, or its path.
    let mut tcp = [0u8; 19];
    let local_source: &[u8] = match local {
        Local::Tcp(addr) => {
            tcp[..2].copy_from_slice(&addr.port().to_le_bytes());
            match addr.ip() {
                IpAddr::V4(v4) => {
                    tcp[2] = 4;
                    tcp[3..7].copy_from_slice(&v4.octets());
                    &tcp[..7]
                }
                IpAddr::V6(v6) => {
                    tcp[2] = 6;
                    tcp[3..19].copy_from_slice(&v6.octets());
                    &tcp[..19]
                }
            }
        }
        Local::Unix(path) => path.as_bytes(),
    };
    let host_part: &[u8] = host.unwrap_or(b"");
    let kinds = [
        u8::from(host.is_some()),
        u8::from(matches!(local, Local::Tcp(_))),
    ];
    template.remember(
        py,
        Remembered::Server,
        &[&kinds, host_part, local_source],
        |env| {
            let mut digits = itoa::Buffer::new();
            let (server_name, server_port) = match (host, local) {
                (Some(host), local) => {
                    let (name, port) = host_and_port(host);
                    let port = match (port, local) {
                        (Some(port), _) => latin1(py, port)?,
                        (None, Local::Tcp(addr)) => PyString::new(py, digits.format(addr.port())),
                        (None, Local::Unix(_)) => intern!(py, "80").clone(),
                    };
                    (latin1(py, name)?, port)
                }
                (None, Local::Tcp(addr)) => (
                    PyString::new(py, &addr.ip().to_string()),
                    PyString::new(py, digits.format(addr.port())),
                ),
                (None, Local::Unix(path)) => (PyString::new(py, path), PyString::new(py, "")),
            };
            env.set_item(intern!(py, "SERVER_NAME"), server_name)?;
            env.set_item(intern!(py, "SERVER_PORT"), server_port)
        },
    )
}

/// `REMOTE_ADDR` and `REMOTE_PORT`: the same client address the access log shows (the
/// exchange decides it once); left out when unknown, as CGI does.
fn remote_addr_and_port(
    py: Python<'_>,
    template: &mut ThreadTemplate,
    exchange: &Exchange,
) -> PyResult<()> {
    let client = exchange.client_ip();
    let peer = exchange.peer();
    let mut source = [0u8; 19];
    let source_len = match client {
        None => 0,
        Some(IpAddr::V4(v4)) => {
            source[0] = 4;
            source[1..5].copy_from_slice(&v4.octets());
            5
        }
        Some(IpAddr::V6(v6)) => {
            source[0] = 6;
            source[1..17].copy_from_slice(&v6.octets());
            17
        }
    };
    let port = match peer {
        Peer::Tcp(addr) => addr.port().to_le_bytes(),
        Peer::Unix => [0xff, 0xff],
    };
    let source_port = [
        port[0],
        port[1],
        u8::from(matches!(peer, Peer::Tcp(_))),
        u8::from(client.is_some()),
    ];
    // Two values remembered apart: the address repeats (a proxy, a client's keep-alive
    // connections), the port changes with each connection.
    template.remember(
        py,
        Remembered::RemoteAddr,
        &[&source[..source_len]],
        |env| {
            let key = intern!(py, "REMOTE_ADDR");
            match client {
                Some(ip) => {
                    let mut text = [0; 15];
                    let addr = match ip {
                        IpAddr::V4(v4) => PyString::new(py, ipv4_text(v4, &mut text)),
                        IpAddr::V6(v6) => PyString::new(py, &v6.to_string()),
                    };
                    env.set_item(key, addr)
                }
                // CGI leaves the variable out when unknown (the template's `None` goes).
                None => remove(env, key),
            }
        },
    )?;
    // Looked up before `remember` takes the template (a cache hit costs a compare).
    let port_text = match (client, peer) {
        (Some(_), Peer::Tcp(addr)) => Some(template.port_text(py, addr.port())),
        (Some(_), Peer::Unix) => Some(intern!(py, "").clone()),
        (None, _) => None,
    };
    template.remember(py, Remembered::RemotePort, &[&source_port], |env| {
        let key = intern!(py, "REMOTE_PORT");
        match port_text {
            Some(text) => env.set_item(key, text),
            None => remove(env, key),
        }
    })
}

/// Removes `key` from `env` if it is there.
fn remove(env: &Bound<'_, PyDict>, key: &Bound<'_, PyString>) -> PyResult<()> {
    if env.contains(key)? {
        env.del_item(key)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_matches_only_the_same_parts() {
        let mut source = Vec::new();
        for part in [&b"ab"[..], b"c"] {
            source.extend_from_slice(&(part.len() as u32).to_le_bytes());
            source.extend_from_slice(part);
        }
        assert!(same_source(&source, &[b"ab", b"c"]));
        assert!(!same_source(&source, &[b"a", b"bc"]));
        assert!(!same_source(&source, &[b"ab"]));
        assert!(!same_source(&source, &[b"ab", b"c", b""]));
        assert!(!same_source(&source, &[b"ab", b"d"]));
        assert!(same_source(&[], &[]));
    }
}
