//! `tines._core.TlsMaterial`: the server's certificates and keys, read and checked by the
//! master (ADR 0032) before its first fork and on every HUP reload, and the
//! `rustls::ServerConfig` made of them, which the workers it forks use as they are (a worker
//! reads no TLS file: `settings::worker_config` takes the config from the worker settings'
//! `"tls"`). What the master logs and checks is exposed: the files read (their readability by
//! the run user), the names served, the leaves' expiry.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tines_server::tls::config::server_config;
use tines_server::tls::material::{Material, Settings};
use tines_server::tls::rustls::pki_types::UnixTime;
use tines_server::tls::rustls::ServerConfig;

fn get<'py, T: FromPyObjectOwned<'py>>(settings: &Bound<'py, PyDict>, key: &str) -> PyResult<T> {
    let value = settings
        .get_item(key)?
        .ok_or_else(|| PyValueError::new_err(format!("the TLS settings lack '{key}'")))?;
    value.extract::<T>().map_err(|err| {
        let err: PyErr = err.into();
        PyValueError::new_err(format!("{key}: {err}"))
    })
}

/// The TLS settings of the worker settings dict.
fn read_settings(dict: &Bound<'_, PyDict>) -> PyResult<Settings> {
    let certfile: Option<String> = get(dict, "certfile")?;
    let certfile = certfile.ok_or_else(|| PyValueError::new_err("certfile: not set"))?;
    let rotation: f64 = get(dict, "tls_ticket_rotation")?;
    if !(1.0..=u32::MAX as f64).contains(&rotation) {
        return Err(PyValueError::new_err(format!(
            "tls_ticket_rotation: a number of seconds from 1 to {} expected, got {rotation}",
            u32::MAX
        )));
    }
    let paths = |key: &str| -> PyResult<Vec<PathBuf>> {
        Ok(get::<Vec<String>>(dict, key)?
            .into_iter()
            .map(PathBuf::from)
            .collect())
    };
    Ok(Settings {
        certfile: certfile.into(),
        keyfile: get::<Option<String>>(dict, "keyfile")?.map(PathBuf::from),
        keyfile_password_file: get::<Option<String>>(dict, "keyfile_password_file")?
            .map(PathBuf::from),
        keyfile_password: get::<Option<String>>(dict, "keyfile_password")?
            .map(zeroize::Zeroizing::new),
        sni_certificates: get(dict, "sni_certificates")?,
        tls_unknown_server_name: get(dict, "tls_unknown_server_name")?,
        tls_min_version: get(dict, "tls_min_version")?,
        tls_cipher_suites: get(dict, "tls_cipher_suites")?,
        alpn: get(dict, "alpn")?,
        client_cert: get(dict, "client_cert")?,
        client_ca: get::<Option<String>>(dict, "client_ca")?.map(PathBuf::from),
        client_crl: paths("client_crl")?,
        tls_tickets: get(dict, "tls_tickets")?,
        tls_ticket_rotation: rotation as u64,
    })
}

/// The checked TLS material and the server config made of it.
#[pyclass(module = "tines._core", frozen)]
pub struct TlsMaterial {
    config: Arc<ServerConfig>,
    files: Vec<String>,
    certificates: Vec<(String, Vec<String>, u64)>,
}

impl TlsMaterial {
    /// The config every TLS listener of a worker handshakes with.
    pub fn config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.config)
    }
}

#[pymethods]
impl TlsMaterial {
    /// Reads and checks the files the settings name (certfile, keyfile, ...; the keys of
    /// decision 9 of issue 37's brief) and makes the server config; `ticket_secret`: the
    /// master's 32 random bytes. Raises ValueError, one line naming the setting, the file and
    /// the problem.
    #[new]
    fn new(settings: &Bound<'_, PyDict>, ticket_secret: &[u8]) -> PyResult<TlsMaterial> {
        let settings = read_settings(settings)?;
        let error = |problem: tines_server::tls::material::Problem| {
            PyValueError::new_err(problem.to_string())
        };
        let material = Material::load(&settings, ticket_secret, UnixTime::now()).map_err(error)?;
        let config = server_config(&material).map_err(error)?;
        Ok(TlsMaterial {
            config,
            files: material
                .files
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            certificates: material
                .identities
                .iter()
                .map(|i| {
                    (
                        i.certfile.display().to_string(),
                        i.names.clone(),
                        i.not_after,
                    )
                })
                .collect(),
        })
    }

    /// Every file read, in order (the master checks that the run user can read each).
    #[getter]
    fn files(&self) -> Vec<String> {
        self.files.clone()
    }

    /// Each chain served, `certfile`'s first: `(file, DNS names of its leaf, its leaf's
    /// notAfter in seconds since the epoch)`.
    #[getter]
    fn certificates(&self) -> Vec<(String, Vec<String>, u64)> {
        self.certificates.clone()
    }

    /// Every server name served (a certificate's subjectAltName DNS names, `*.` wildcards
    /// included), in the order of `certificates`.
    #[getter]
    fn names(&self) -> Vec<String> {
        self.certificates
            .iter()
            .flat_map(|c| c.1.iter().cloned())
            .collect()
    }

    /// The earliest notAfter of the leaves served, in seconds since the epoch (the master
    /// warns when it is near).
    #[getter]
    fn not_after(&self) -> u64 {
        self.certificates.iter().map(|c| c.2).min().unwrap_or(0)
    }
}
