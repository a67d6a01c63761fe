//! The environ of a request that came over TLS: `wsgi.url_scheme` `https` whatever a forwarded
//! header says, and mod_ssl's variables (`HTTPS`, `SSL_*`, as Apache's `SSLOptions
//! +StdEnvVars +ExportCertData` sets them), made from the connection's [`TlsInfo`].
//!
//! A thread's template keeps them, as it keeps the request line's values (ADR 0016): a
//! connection's keep-alive requests, and the connections of one client, have the same values,
//! compared byte for byte with what the template's were made from. A plain request finds the
//! template without them (one branch, nothing else); the first plain request after a TLS one
//! takes them out again.

use std::borrow::Cow;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyString;
use tines_server::tls::{ClientVerify, TlsInfo};

use super::{same_source, write_source, ThreadTemplate};

/// The keys a TLS request may set, in the order of [`values`].
const TLS_KEYS: [&str; 9] = [
    "HTTPS",
    "SSL_PROTOCOL",
    "SSL_CIPHER",
    "SSL_TLS_SNI",
    "SSL_CLIENT_VERIFY",
    "SSL_CLIENT_S_DN",
    "SSL_CLIENT_I_DN",
    "SSL_CLIENT_CERT",
    "SSL_CLIENT_M_SERIAL",
];

/// The value of each of [`TLS_KEYS`] on a connection: `None` where mod_ssl leaves the
/// variable out (no SNI sent, no client certificate).
fn values(info: &TlsInfo) -> [Option<Cow<'_, str>>; TLS_KEYS.len()] {
    fn borrowed(text: &Option<String>) -> Option<Cow<'_, str>> {
        text.as_deref().map(Cow::Borrowed)
    }
    [
        Some(Cow::Borrowed("on")),
        Some(Cow::Borrowed(info.protocol)),
        Some(Cow::Borrowed(info.cipher)),
        borrowed(&info.server_name),
        Some(match &info.client_verify {
            ClientVerify::None => Cow::Borrowed("NONE"),
            ClientVerify::Success => Cow::Borrowed("SUCCESS"),
            ClientVerify::Failed(reason) => Cow::Owned(format!("FAILED:{reason}")),
        }),
        borrowed(&info.client_subject),
        borrowed(&info.client_issuer),
        info.client_chain_pem
            .first()
            .map(|pem| Cow::Borrowed(pem.as_str())),
        borrowed(&info.client_serial),
    ]
}

/// What a thread's template holds of the TLS variables.
#[derive(Default)]
pub(super) struct TlsMemo {
    /// What the template's TLS values were made from (which keys are set, then each value,
    /// length-prefixed); `None` while it holds none (before the first TLS request, and after
    /// a plain one).
    source: Option<Vec<u8>>,
    /// Which of [`TLS_KEYS`] the template holds (bit `i` for `TLS_KEYS[i]`).
    present: u16,
}

impl ThreadTemplate {
    /// Makes the template's TLS values those of `info` (`None`: a plain connection, whose
    /// template holds none): `true` when the template then says `https`.
    ///
    /// Inline, and only the plain request's test here: a plain request after a plain one
    /// costs a load and a branch. Out of line, the call and its `PyResult` cost a plain
    /// request about 50 instructions (callgrind, prefork hello: 11,137 before TLS, 11,197
    /// with the call, 11,130 inline).
    #[inline]
    pub(super) fn set_tls(&mut self, py: Python<'_>, info: Option<&TlsInfo>) -> PyResult<bool> {
        match info {
            None if self.tls.source.is_none() => Ok(false),
            None => self.clear_tls(py).map(|()| false),
            Some(info) => self.set_tls_values(py, info).map(|()| true),
        }
    }

    /// Makes the template's TLS values those of `info`, unless they were made from the same
    /// bytes.
    fn set_tls_values(&mut self, py: Python<'_>, info: &TlsInfo) -> PyResult<()> {
        let values = values(info);
        let mut set = [0u8; TLS_KEYS.len()];
        let mut parts: [&[u8]; TLS_KEYS.len() + 1] = [b""; TLS_KEYS.len() + 1];
        for (index, value) in values.iter().enumerate() {
            set[index] = u8::from(value.is_some());
            parts[index + 1] = value.as_deref().unwrap_or("").as_bytes();
        }
        parts[0] = &set;
        if let Some(source) = &self.tls.source {
            if same_source(source, &parts) {
                return Ok(());
            }
        }
        // Forgotten first: if a step fails, the caller drops the template.
        let mut source = self.tls.source.take().unwrap_or_default();
        let dict = self.dict.clone_ref(py);
        let env = dict.bind(py);
        env.set_item(intern!(py, "wsgi.url_scheme"), intern!(py, "https"))?;
        for (index, value) in values.iter().enumerate() {
            let key = PyString::intern(py, TLS_KEYS[index]);
            let bit = 1u16 << index;
            match value {
                Some(value) => {
                    env.set_item(key, PyString::new(py, value))?;
                    self.tls.present |= bit;
                }
                None if self.tls.present & bit != 0 => {
                    env.del_item(key)?;
                    self.tls.present &= !bit;
                    self.removed += 1;
                }
                None => {}
            }
        }
        write_source(&mut source, &parts);
        self.tls.source = Some(source);
        self.compact_if_sparse(py)
    }

    /// Takes the TLS values out of the template, and puts back the connection's own scheme,
    /// `http`.
    fn clear_tls(&mut self, py: Python<'_>) -> PyResult<()> {
        self.tls.source = None;
        let dict = self.dict.clone_ref(py);
        let env = dict.bind(py);
        env.set_item(intern!(py, "wsgi.url_scheme"), intern!(py, "http"))?;
        for (index, key) in TLS_KEYS.iter().enumerate() {
            let bit = 1u16 << index;
            if self.tls.present & bit != 0 {
                env.del_item(PyString::intern(py, key))?;
                self.tls.present &= !bit;
                self.removed += 1;
            }
        }
        self.compact_if_sparse(py)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(verify: ClientVerify, with_cert: bool) -> TlsInfo {
        TlsInfo {
            version: 0x0304,
            protocol: "TLSv1.3",
            cipher_suite: 0x1302,
            cipher: "TLS_AES_256_GCM_SHA384",
            server_name: Some("a.example".into()),
            alpn: Some(b"http/1.1".to_vec()),
            resumed: false,
            server_cert_pem: "-----BEGIN CERTIFICATE-----\nS\n-----END CERTIFICATE-----\n".into(),
            client_chain_pem: if with_cert {
                vec!["LEAF".into(), "INTERMEDIATE".into()]
            } else {
                Vec::new()
            },
            client_subject: with_cert.then(|| "CN=client,O=Tines".into()),
            client_issuer: with_cert.then(|| "CN=Test Intermediate".into()),
            client_serial: with_cert.then(|| "1A2B".into()),
            client_verify: verify,
        }
    }

    fn named(info: &TlsInfo) -> Vec<(&'static str, Option<String>)> {
        TLS_KEYS
            .iter()
            .zip(values(info))
            .map(|(key, value)| (*key, value.map(Cow::into_owned)))
            .collect()
    }

    /// The template's TLS keys and their values, and its scheme.
    fn held(template: &ThreadTemplate, py: Python<'_>) -> Vec<(String, String)> {
        let dict = template.dict.bind(py);
        let mut held: Vec<(String, String)> = dict
            .iter()
            .map(|(key, value)| (key.extract().unwrap(), value.str().unwrap().to_string()))
            .filter(|(key, _): &(String, String)| {
                key == "wsgi.url_scheme" || TLS_KEYS.contains(&key.as_str())
            })
            .collect();
        held.sort();
        held
    }

    #[test]
    fn the_template_holds_the_last_tls_requests_values_and_a_plain_request_none() {
        Python::initialize();
        Python::attach(|py| {
            let constants = pyo3::types::PyDict::new(py);
            constants.set_item("wsgi.url_scheme", "http").unwrap();
            let context = super::super::EnvironContext::new(py, &constants, "").unwrap();
            let mut template = ThreadTemplate::new(py, &context).unwrap();
            let plain = held(&template, py);
            assert_eq!(plain, [("wsgi.url_scheme".into(), "http".into())]);
            assert!(!template.set_tls(py, None).unwrap());
            assert_eq!(held(&template, py), plain);

            let anonymous = info(ClientVerify::None, false);
            let expected = |info: &TlsInfo| {
                let mut expected: Vec<(String, String)> = named(info)
                    .into_iter()
                    .filter_map(|(key, value)| Some((key.to_string(), value?)))
                    .collect();
                expected.push(("wsgi.url_scheme".into(), "https".into()));
                expected.sort();
                expected
            };
            assert!(template.set_tls(py, Some(&anonymous)).unwrap());
            assert_eq!(held(&template, py), expected(&anonymous));
            // The same values again: the template's objects stay (nothing is made).
            let protocol = template
                .dict
                .bind(py)
                .get_item("SSL_PROTOCOL")
                .unwrap()
                .unwrap();
            assert!(template.set_tls(py, Some(&anonymous.clone())).unwrap());
            let again = template
                .dict
                .bind(py)
                .get_item("SSL_PROTOCOL")
                .unwrap()
                .unwrap();
            assert!(protocol.is(&again));

            // A client certificate adds its keys; a connection without one takes them out.
            let client = info(ClientVerify::Success, true);
            assert!(template.set_tls(py, Some(&client)).unwrap());
            assert_eq!(held(&template, py), expected(&client));
            let mut no_sni = anonymous.clone();
            no_sni.server_name = None;
            assert!(template.set_tls(py, Some(&no_sni)).unwrap());
            assert_eq!(held(&template, py), expected(&no_sni));

            // A plain request after TLS ones: the connection's own scheme, no TLS key.
            assert!(!template.set_tls(py, None).unwrap());
            assert_eq!(held(&template, py), plain);
            assert!(template.set_tls(py, Some(&client)).unwrap());
            assert_eq!(held(&template, py), expected(&client));
        });
    }

    #[test]
    fn without_a_client_certificate_verify_says_none_and_the_client_keys_are_absent() {
        let mut info = info(ClientVerify::None, false);
        assert_eq!(
            named(&info),
            [
                ("HTTPS", Some("on".into())),
                ("SSL_PROTOCOL", Some("TLSv1.3".into())),
                ("SSL_CIPHER", Some("TLS_AES_256_GCM_SHA384".into())),
                ("SSL_TLS_SNI", Some("a.example".into())),
                ("SSL_CLIENT_VERIFY", Some("NONE".into())),
                ("SSL_CLIENT_S_DN", None),
                ("SSL_CLIENT_I_DN", None),
                ("SSL_CLIENT_CERT", None),
                ("SSL_CLIENT_M_SERIAL", None),
            ]
        );
        info.server_name = None;
        assert_eq!(named(&info)[3], ("SSL_TLS_SNI", None));
    }

    #[test]
    fn a_client_certificate_shows_its_names_its_leaf_and_the_verdict() {
        let verified = named(&info(ClientVerify::Success, true));
        assert_eq!(
            verified[4..],
            [
                ("SSL_CLIENT_VERIFY", Some("SUCCESS".into())),
                ("SSL_CLIENT_S_DN", Some("CN=client,O=Tines".into())),
                ("SSL_CLIENT_I_DN", Some("CN=Test Intermediate".into())),
                ("SSL_CLIENT_CERT", Some("LEAF".into())),
                ("SSL_CLIENT_M_SERIAL", Some("1A2B".into())),
            ]
        );
        let failed = named(&info(
            ClientVerify::Failed("certificate expired".into()),
            true,
        ));
        assert_eq!(
            failed[4],
            (
                "SSL_CLIENT_VERIFY",
                Some("FAILED:certificate expired".into())
            )
        );
        assert_eq!(failed[5..], verified[5..]);
    }
}
