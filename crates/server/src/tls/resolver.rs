//! Which certificate a handshake gets, by the server name the client asked for (SNI, ADR
//! 0032): the exact name first, then the wildcard of the name less its first label
//! (`*.example.com` serves `a.example.com`, not `a.b.example.com` nor `example.com`), then
//! `certfile`'s chain, or none with `tls_unknown_server_name = refuse` (rustls then ends the
//! handshake with a fatal alert). A name served by two certificates is refused at load.

use std::collections::HashMap;
use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::material::{Identity, Problem};

/// The SNI resolver of a server config.
#[derive(Debug)]
pub struct SniResolver {
    /// The chains and their leaf as PEM; the first is the default (`certfile`).
    served: Vec<(Arc<CertifiedKey>, Arc<str>)>,
    exact: HashMap<String, usize>,
    /// Keyed by the part after `*.`.
    wildcard: HashMap<String, usize>,
    refuse_unknown: bool,
}

impl SniResolver {
    /// The resolver of `identities` (the default first); a name in two of them is refused.
    pub fn new(identities: &[Identity], refuse_unknown: bool) -> Result<SniResolver, Problem> {
        let mut exact = HashMap::new();
        let mut wildcard = HashMap::new();
        for (index, identity) in identities.iter().enumerate() {
            for name in &identity.names {
                let (map, key) = match name.strip_prefix("*.") {
                    Some(rest) => (&mut wildcard, rest),
                    None => (&mut exact, name.as_str()),
                };
                if let Some(&other) = map.get(key) {
                    let other: &Identity = &identities[other];
                    return Err(Problem::file(
                        if index == 0 {
                            "certfile"
                        } else {
                            "sni_certificates"
                        },
                        &identity.certfile,
                        format!(
                            "the server name '{name}' is also served by {}: each name must have \
                             one certificate",
                            other.certfile.display()
                        ),
                    ));
                }
                map.insert(key.to_owned(), index);
            }
        }
        Ok(SniResolver {
            served: identities
                .iter()
                .map(|i| (Arc::clone(&i.key), Arc::clone(&i.leaf_pem)))
                .collect(),
            exact,
            wildcard,
            refuse_unknown,
        })
    }

    /// The index of the chain served for `server_name` (`None`: refused).
    pub fn choose(&self, server_name: Option<&str>) -> Option<usize> {
        let found = server_name.and_then(|name| {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            self.exact.get(&name).copied().or_else(|| {
                let (_, parent) = name.split_once('.')?;
                self.wildcard.get(parent).copied()
            })
        });
        match found {
            Some(index) => Some(index),
            None if self.refuse_unknown => None,
            None => Some(0),
        }
    }

    /// The leaf (as PEM) served for `server_name`: what the app sees as the server's
    /// certificate.
    pub fn leaf_pem(&self, server_name: Option<&str>) -> Option<Arc<str>> {
        self.choose(server_name)
            .map(|index| Arc::clone(&self.served[index].1))
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.choose(client_hello.server_name())
            .map(|index| Arc::clone(&self.served[index].0))
    }
}

#[cfg(test)]
mod tests {
    use super::super::material::testing::{fixture, load, settings};
    use super::*;

    fn material(extra: &[(&str, &str)], refuse: bool) -> Result<SniResolver, Problem> {
        let mut s = settings("ec256.pem", Some("ec256.key"));
        s.sni_certificates = extra
            .iter()
            .map(|(cert, key)| format!("{}:{}", fixture(cert).display(), fixture(key).display()))
            .collect();
        let material = load(&s)?;
        SniResolver::new(&material.identities, refuse)
    }

    #[test]
    fn exact_names_then_one_label_wildcards_then_the_default() {
        let resolver = material(
            &[("ec384.pem", "ec384.key"), ("ed25519.pem", "ed25519.key")],
            false,
        )
        .expect("resolver");
        assert_eq!(resolver.choose(Some("a.test")), Some(0));
        assert_eq!(resolver.choose(Some("ED.Test.")), Some(2));
        assert_eq!(resolver.choose(Some("x.b.test")), Some(1));
        assert_eq!(
            resolver.choose(Some("y.x.b.test")),
            Some(0),
            "a wildcard covers one label"
        );
        assert_eq!(resolver.choose(Some("b.test")), Some(0));
        assert_eq!(resolver.choose(Some("unknown.test")), Some(0));
        assert_eq!(resolver.choose(None), Some(0));
    }

    #[test]
    fn refuse_serves_no_certificate_for_an_unknown_or_missing_name() {
        let resolver = material(&[("ec384.pem", "ec384.key")], true).expect("resolver");
        assert_eq!(resolver.choose(Some("localhost")), Some(0));
        assert_eq!(resolver.choose(Some("q.b.test")), Some(1));
        assert_eq!(resolver.choose(Some("unknown.test")), None);
        assert_eq!(resolver.choose(None), None);
        assert!(resolver.leaf_pem(None).is_none());
    }

    #[test]
    fn a_name_served_twice_is_refused() {
        let problem = material(&[("dup.pem", "ed25519.key")], false)
            .expect_err("duplicate")
            .to_string();
        assert_eq!(
            problem,
            format!(
                "sni_certificates {}: the server name 'a.test' is also served by {}: each name \
                 must have one certificate",
                fixture("dup.pem").display(),
                fixture("ec256.pem").display()
            )
        );
    }
}
