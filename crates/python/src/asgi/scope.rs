//! The ASGI scope of a request or a WebSocket handshake, built in Rust from the exchange: a
//! copy of a per-worker template with the request's own values set, and what repeats from one
//! scope to the next (the server and client addresses' text) kept instead of rebuilt.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use tines_proto::Version;
use tines_server::{Exchange, Local, Peer};

use super::AsgiWorker;
use crate::cgi::{percent_decode, split_target};

/// What a scope shares with the last one, kept to be copied or reused instead of rebuilt (an
/// IP address formatted into a string, and a dict grown key by key, were a quarter of a hello
/// request's instructions).
#[derive(Default)]
pub(super) struct ScopeCache {
    /// An `http` scope's constant keys (`type`, `http_version`, `root_path`, `scheme`),
    /// copied (one allocation, no growth) for each scope.
    template: Option<Py<PyDict>>,
    /// The `asgi` dict, copied for each scope (an app may write to its own).
    asgi: Option<Py<PyDict>>,
    /// The last `server` tuple and the listening address it shows.
    server: Option<(std::net::SocketAddr, Py<PyTuple>)>,
    /// The last client address and its text.
    client: Option<(std::net::IpAddr, Py<PyString>)>,
}

impl AsgiWorker {
    /// The request's scope: `http`, or `websocket` with the subprotocols offered.
    pub(super) fn scope<'py>(
        &mut self,
        py: Python<'py>,
        exchange: &Exchange,
        websocket: Option<&[String]>,
    ) -> PyResult<Bound<'py, PyDict>> {
        if self.cache.template.is_none() {
            let template = PyDict::new(py);
            template.set_item(intern!(py, "type"), intern!(py, "http"))?;
            template.set_item(intern!(py, "http_version"), intern!(py, "1.1"))?;
            template.set_item(intern!(py, "root_path"), intern!(py, ""))?;
            template.set_item(intern!(py, "scheme"), intern!(py, "http"))?;
            let asgi = PyDict::new(py);
            asgi.set_item(intern!(py, "version"), intern!(py, "3.0"))?;
            asgi.set_item(intern!(py, "spec_version"), intern!(py, "2.4"))?;
            self.cache.template = Some(template.unbind());
            self.cache.asgi = Some(asgi.unbind());
        }
        let (Some(template), Some(asgi)) = (&self.cache.template, &self.cache.asgi) else {
            unreachable!("made above")
        };
        let scope = template.bind(py).copy()?;
        if websocket.is_some() {
            scope.set_item(intern!(py, "type"), intern!(py, "websocket"))?;
        }
        scope.set_item(intern!(py, "asgi"), asgi.bind(py).copy()?)?;
        if exchange.version() == Version::Http10 {
            scope.set_item(intern!(py, "http_version"), intern!(py, "1.0"))?;
        }
        let method = exchange.method();
        scope.set_item(
            intern!(py, "method"),
            match method {
                b"GET" => intern!(py, "GET").clone(),
                b"POST" => intern!(py, "POST").clone(),
                other => PyString::new(py, &String::from_utf8_lossy(other)),
            },
        )?;
        let (raw_path, query) = split_target(exchange.target());
        let decoded = percent_decode(raw_path);
        scope.set_item(
            intern!(py, "path"),
            PyString::new(py, &String::from_utf8_lossy(&decoded)),
        )?;
        scope.set_item(intern!(py, "raw_path"), PyBytes::new(py, raw_path))?;
        scope.set_item(intern!(py, "query_string"), PyBytes::new(py, query))?;
        let headers = PyList::empty(py);
        for (name, value) in exchange.headers() {
            let mut lower = [0u8; 64];
            let name = if !name.iter().any(u8::is_ascii_uppercase) {
                PyBytes::new(py, name)
            } else if name.len() <= lower.len() {
                // Lower-cased on the stack: no allocation for a usual header name.
                let lower = &mut lower[..name.len()];
                lower.copy_from_slice(name);
                lower.make_ascii_lowercase();
                PyBytes::new(py, lower)
            } else {
                PyBytes::new(py, &name.to_ascii_lowercase())
            };
            headers.append(PyTuple::new(py, [name, PyBytes::new(py, value)])?)?;
        }
        scope.set_item(intern!(py, "headers"), headers)?;
        let https = exchange.url_scheme() == "https";
        match (https, websocket.is_some()) {
            // The template's.
            (false, false) => {}
            (true, false) => scope.set_item(intern!(py, "scheme"), intern!(py, "https"))?,
            (true, true) => scope.set_item(intern!(py, "scheme"), intern!(py, "wss"))?,
            (false, true) => scope.set_item(intern!(py, "scheme"), intern!(py, "ws"))?,
        }
        match exchange.local() {
            Local::Tcp(addr) => {
                let cached = match &self.cache.server {
                    Some((at, tuple)) if at == addr => tuple.clone_ref(py),
                    _ => {
                        let tuple = PyTuple::new(
                            py,
                            [
                                PyString::new(py, &addr.ip().to_string()).into_any(),
                                addr.port().into_pyobject(py)?.into_any(),
                            ],
                        )?
                        .unbind();
                        self.cache.server = Some((*addr, tuple.clone_ref(py)));
                        tuple
                    }
                };
                scope.set_item(intern!(py, "server"), cached)?
            }
            Local::Unix(path) => {
                scope.set_item(intern!(py, "server"), (path.as_str(), py.None()))?
            }
        }
        match (exchange.client_ip(), exchange.peer()) {
            (Some(ip), Peer::Tcp(addr)) => {
                let text = match &self.cache.client {
                    Some((last, text)) if *last == ip => text.clone_ref(py),
                    _ => {
                        let text = PyString::new(py, &ip.to_string()).unbind();
                        self.cache.client = Some((ip, text.clone_ref(py)));
                        text
                    }
                };
                scope.set_item(intern!(py, "client"), (text, addr.port()))?
            }
            _ => scope.set_item(intern!(py, "client"), py.None())?,
        }
        let extensions = PyDict::new(py);
        if let Some(protocols) = websocket {
            scope.set_item(intern!(py, "subprotocols"), protocols.to_vec())?;
            extensions.set_item(intern!(py, "websocket.http.response"), PyDict::new(py))?;
        }
        scope.set_item(intern!(py, "extensions"), extensions)?;
        if let Some(state) = &self.state {
            scope.set_item(intern!(py, "state"), state.bind(py).copy()?)?;
        }
        Ok(scope)
    }
}
