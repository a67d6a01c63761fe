//! The ASGI scope of a request or a WebSocket handshake, built in Rust from the exchange: a
//! copy of a per-worker template with the request's own values set, and what repeats from one
//! scope to the next (the server and client addresses' text, the server certificate's PEM)
//! kept instead of rebuilt. On a TLS connection, `extensions` has asgiref's `tls` extension;
//! where trailers can reach the client, its `http.response.trailers`.

use std::sync::Arc;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use tines_proto::Version;
use tines_server::tls::{ClientVerify, TlsInfo};
use tines_server::{Exchange, Local, Peer};

use super::AsgiWorker;
use crate::cgi::{percent_decode, split_target, under_root};

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
    /// The last server certificate a TLS scope showed, and its text: the connections served
    /// one certificate show the same PEM (compared by address first: held here, the `Arc`
    /// names that certificate only; then by text).
    server_cert: Option<(Arc<str>, Py<PyString>)>,
    /// `root_path` (the template's `root_path`); empty for none.
    root_path: String,
}

impl ScopeCache {
    /// A cache for a worker mounted under `root_path` (empty for none).
    pub(super) fn new(root_path: String) -> ScopeCache {
        ScopeCache {
            root_path,
            ..ScopeCache::default()
        }
    }

    /// asgiref's `tls` extension (specs/tls.rst) for a connection whose handshake told `info`.
    fn tls_extension<'py>(
        &mut self,
        py: Python<'py>,
        info: &TlsInfo,
    ) -> PyResult<Bound<'py, PyDict>> {
        let server_cert = match &self.server_cert {
            Some((pem, text))
                if Arc::ptr_eq(pem, &info.server_cert_pem) || *pem == info.server_cert_pem =>
            {
                text.clone_ref(py)
            }
            _ => {
                let text = PyString::new(py, &info.server_cert_pem).unbind();
                self.server_cert = Some((Arc::clone(&info.server_cert_pem), text.clone_ref(py)));
                text
            }
        };
        let tls = PyDict::new(py);
        tls.set_item(intern!(py, "server_cert"), server_cert)?;
        tls.set_item(
            intern!(py, "client_cert_chain"),
            PyList::new(py, &info.client_chain_pem)?,
        )?;
        tls.set_item(
            intern!(py, "client_cert_name"),
            info.client_subject.as_deref(),
        )?;
        tls.set_item(
            intern!(py, "client_cert_error"),
            client_cert_error(&info.client_verify),
        )?;
        tls.set_item(intern!(py, "tls_version"), info.version)?;
        tls.set_item(intern!(py, "cipher_suite"), info.cipher_suite)?;
        Ok(tls)
    }
}

/// The spec's `client_cert_error`: why a certificate the client sent did not verify (accepted
/// all the same: `client_cert = optional`); `None` when it verified or none was sent.
fn client_cert_error(verify: &ClientVerify) -> Option<&str> {
    match verify {
        ClientVerify::None | ClientVerify::Success => None,
        ClientVerify::Failed(reason) => Some(reason),
    }
}

/// True when a `TE` field's value lists `trailers` (a comma-separated list of t-codings, any
/// case, each maybe with parameters).
fn accepts_trailers(value: &[u8]) -> bool {
    value.split(|&b| b == b',').any(|coding| {
        let name = coding.split(|&b| b == b';').next().unwrap_or(b"");
        name.trim_ascii().eq_ignore_ascii_case(b"trailers")
    })
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
            template.set_item(intern!(py, "root_path"), self.cache.root_path.as_str())?;
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
        // An HTTP/2 stream's head is synthesized as HTTP/1.1 (ADR 0035): its link tells.
        let h2 = exchange.is_h2();
        if h2 {
            scope.set_item(intern!(py, "http_version"), intern!(py, "2"))?;
        } else if exchange.version() == Version::Http10 {
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
        let root = self.cache.root_path.as_bytes();
        if root.is_empty() || under_root(&decoded, root).is_some() {
            scope.set_item(
                intern!(py, "path"),
                PyString::new(py, &String::from_utf8_lossy(&decoded)),
            )?;
            scope.set_item(intern!(py, "raw_path"), PyBytes::new(py, raw_path))?;
        } else {
            // The proxy stripped the prefix: the path the app routes on holds it again
            // (uvicorn's rule; the ASGI spec's `path` includes `root_path`).
            scope.set_item(
                intern!(py, "path"),
                PyString::new(py, &String::from_utf8_lossy(&[root, &decoded[..]].concat())),
            )?;
            let joined = PyBytes::new_with(py, root.len() + raw_path.len(), |bytes| {
                let (head, tail) = bytes.split_at_mut(root.len());
                head.copy_from_slice(root);
                tail.copy_from_slice(raw_path);
                Ok(())
            })?;
            scope.set_item(intern!(py, "raw_path"), joined)?;
        }
        scope.set_item(intern!(py, "query_string"), PyBytes::new(py, query))?;
        let headers = PyList::empty(py);
        // Trailers reach a client that can take them: always on HTTP/2, on HTTP/1.1 (chunked)
        // when it said `TE: trailers` (RFC 9110 10.1.4).
        let mut trailers = h2;
        for (name, value) in exchange.headers() {
            if name.len() == 2 && name.eq_ignore_ascii_case(b"te") {
                trailers |= exchange.version() == Version::Http11 && accepts_trailers(value);
            }
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
        } else if trailers {
            extensions.set_item(intern!(py, "http.response.trailers"), PyDict::new(py))?;
        }
        let cache = &mut self.cache;
        exchange.with_tls_info(|info| match info {
            Some(info) => extensions.set_item(intern!(py, "tls"), cache.tls_extension(py, info)?),
            // A plain connection: no `tls` key (the spec's "only on TLS connections").
            None => Ok(()),
        })?;
        scope.set_item(intern!(py, "extensions"), extensions)?;
        if let Some(state) = &self.state {
            scope.set_item(intern!(py, "state"), state.bind(py).copy()?)?;
        }
        Ok(scope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(server_cert: &Arc<str>, verify: ClientVerify, chain: &[&str]) -> TlsInfo {
        TlsInfo {
            version: 0x0303,
            protocol: "TLSv1.2",
            cipher_suite: 0xc02b,
            cipher: "ECDHE-ECDSA-AES128-GCM-SHA256",
            server_name: None,
            alpn: None,
            resumed: false,
            server_cert_pem: Arc::clone(server_cert),
            client_chain_pem: chain.iter().map(|pem| pem.to_string()).collect(),
            client_subject: (!chain.is_empty()).then(|| "CN=alice,O=Example".into()),
            client_issuer: None,
            client_serial: None,
            client_verify: verify,
        }
    }

    #[test]
    fn the_tls_extension_has_the_specs_keys() {
        Python::initialize();
        Python::attach(|py| {
            let mut cache = ScopeCache::default();
            let served: Arc<str> = "SERVER PEM".into();
            let anonymous = cache
                .tls_extension(py, &info(&served, ClientVerify::None, &[]))
                .unwrap();
            let repr = |dict: &Bound<'_, PyDict>| {
                let items: Vec<String> = dict
                    .iter()
                    .map(|(key, value)| format!("{key}={}", value.repr().unwrap()))
                    .collect();
                items.join(" ")
            };
            assert_eq!(
                repr(&anonymous),
                "server_cert='SERVER PEM' client_cert_chain=[] client_cert_name=None \
                 client_cert_error=None tls_version=771 cipher_suite=49195"
            );
            let failed = cache
                .tls_extension(
                    py,
                    &info(
                        &served,
                        ClientVerify::Failed("unknown issuer".into()),
                        &["LEAF", "MIDDLE"],
                    ),
                )
                .unwrap();
            assert_eq!(
                repr(&failed),
                "server_cert='SERVER PEM' client_cert_chain=['LEAF', 'MIDDLE'] \
                 client_cert_name='CN=alice,O=Example' client_cert_error='unknown issuer' \
                 tls_version=771 cipher_suite=49195"
            );
            // One certificate's PEM is one str, by address or by text; another is its own.
            let text = |dict: &Bound<'_, PyDict>| -> Py<PyAny> {
                dict.get_item("server_cert").unwrap().unwrap().unbind()
            };
            assert!(text(&anonymous).is(text(&failed)));
            let same_text: Arc<str> = "SERVER PEM".into();
            let copy = cache
                .tls_extension(py, &info(&same_text, ClientVerify::None, &[]))
                .unwrap();
            assert!(text(&anonymous).is(text(&copy)));
            let other: Arc<str> = "OTHER PEM".into();
            let other = cache
                .tls_extension(py, &info(&other, ClientVerify::Success, &["LEAF"]))
                .unwrap();
            assert_eq!(text(&other).extract::<String>(py).unwrap(), "OTHER PEM");
        });
    }

    #[test]
    fn client_cert_error_names_only_a_failed_verification() {
        assert_eq!(client_cert_error(&ClientVerify::None), None);
        assert_eq!(client_cert_error(&ClientVerify::Success), None);
        assert_eq!(
            client_cert_error(&ClientVerify::Failed("unknown issuer".into())),
            Some("unknown issuer")
        );
    }

    #[test]
    fn te_offers_trailers_only_when_it_lists_them() {
        assert!(accepts_trailers(b"trailers"));
        assert!(accepts_trailers(b"gzip;q=0.5, Trailers"));
        assert!(accepts_trailers(b" deflate ,trailers ;q=1"));
        assert!(!accepts_trailers(b""));
        assert!(!accepts_trailers(b"gzip"));
        assert!(!accepts_trailers(b"trailersx, chunked"));
    }
}
