//! Reads the worker settings dict (built by `tines.config`, the one registry of settings)
//! into the server's typed `WorkerConfig`. Every key is required and every "unset" is
//! resolved before it gets here: defaults live in the registry only (`worker_config_fields`
//! lets a unit test hold `WorkerConfig::default()` to them). The master runs the same conversion before its first fork
//! (`check_worker_settings`), so a value a worker cannot use stops the start with one line.

use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tines_proto::Limits;
use tines_server::access_log::Format;
use tines_server::compress::Coding;
use tines_server::config::{CompressionConfig, H2Config, RateLimitConfig, StaticConfig};
use tines_server::static_mounts::Mount;
use tines_server::tls::rustls::ServerConfig;
use tines_server::{Mpm, TrustedProxies, WorkerConfig};

use crate::tls::TlsMaterial;

fn get<'py, T: FromPyObjectOwned<'py>>(settings: &Bound<'py, PyDict>, key: &str) -> PyResult<T> {
    let value = settings
        .get_item(key)?
        .ok_or_else(|| PyValueError::new_err(format!("worker settings lack '{key}'")))?;
    value.extract::<T>().map_err(|err| {
        let err: PyErr = err.into();
        PyValueError::new_err(format!("worker setting '{key}': {err}"))
    })
}

/// The longest timeout accepted, in seconds (about 31.7 years). Deadlines are computed as
/// `Instant::now() + timeout` (plus rate extensions), which panics on overflow; a billion
/// seconds leaves the clock room on any system and is longer than any meaningful timeout.
pub const MAX_TIMEOUT_SECONDS: f64 = 1e9;

fn seconds(settings: &Bound<'_, PyDict>, key: &str) -> PyResult<Duration> {
    let value: f64 = get(settings, key)?;
    if !(0.0..=MAX_TIMEOUT_SECONDS).contains(&value) {
        return Err(PyValueError::new_err(format!(
            "{key} must be a number of seconds from 0 to {MAX_TIMEOUT_SECONDS:.0}, got {value:e}"
        )));
    }
    Duration::try_from_secs_f64(value)
        .map_err(|err| PyValueError::new_err(format!("{key}: {err}, got {value:e}")))
}

/// Converts the settings dict as `run_worker` will, and raises ValueError (naming the
/// setting) when a worker could not run with it. The master calls it before forking.
#[pyfunction]
pub fn check_worker_settings(settings: &Bound<'_, PyDict>) -> PyResult<()> {
    worker_config(settings).map(|_| ())
}

/// The TLS config of the settings' `"tls"`: `None`, or the `TlsMaterial` the master made
/// (and checked) before forking, whose config the worker serves with as it is.
fn tls_config(settings: &Bound<'_, PyDict>) -> PyResult<Option<Arc<ServerConfig>>> {
    let value = settings
        .get_item("tls")?
        .ok_or_else(|| PyValueError::new_err("worker settings lack 'tls'"))?;
    if value.is_none() {
        return Ok(None);
    }
    let material = value.cast::<TlsMaterial>().map_err(|_| {
        PyValueError::new_err("worker setting 'tls': None or a tines._core.TlsMaterial expected")
    })?;
    Ok(Some(material.get().config()))
}

/// HTTP/2's settings (the registry's "HTTP/2" section, docs/http2.md). Their ranges are the
/// registry's (RFC 9113's, checked in the master); the `u32` conversion refuses what no
/// SETTINGS frame could carry, should a value bypass the registry.
fn h2_config(settings: &Bound<'_, PyDict>) -> PyResult<H2Config> {
    Ok(H2Config {
        enabled: get(settings, "http2")?,
        max_concurrent_streams: get(settings, "h2_max_concurrent_streams")?,
        initial_window_size: get(settings, "h2_initial_window_size")?,
        connection_window_size: get(settings, "h2_connection_window_size")?,
        max_frame_size: get(settings, "h2_max_frame_size")?,
        max_header_list_size: get(settings, "h2_max_header_list_size")?,
        header_table_size: get(settings, "h2_header_table_size")?,
        max_reset_rate: get(settings, "h2_max_reset_rate")?,
        max_control_rate: get(settings, "h2_max_control_rate")?,
    })
}

/// The static file settings (the registry's "Static files" section, ADR 0036): each mount's
/// directory is opened here, so the master's check before its first fork refuses one that
/// cannot be opened, and each worker holds its own descriptors from its start.
fn static_config(settings: &Bound<'_, PyDict>) -> PyResult<StaticConfig> {
    let mut mounts = Vec::new();
    let follow_symlinks = get(settings, "static_follow_symlinks")?;
    for item in get::<Vec<String>>(settings, "static")? {
        let (prefix, dir) = item
            .split_once('=')
            .ok_or_else(|| PyValueError::new_err(format!("static: {item:?} must be PREFIX=DIR")))?;
        let mount = Mount::open(
            prefix.as_bytes(),
            std::path::Path::new(dir),
            follow_symlinks,
        )
        .map_err(|err| PyValueError::new_err(format!("static: {dir}: {err}")))?;
        mounts.push(mount);
    }
    Ok(StaticConfig {
        mounts,
        index: get::<Option<String>>(settings, "static_index")?.map(String::into_bytes),
        miss_to_app: get::<String>(settings, "static_miss")? == "app",
        cache_control: get::<String>(settings, "static_cache_control")?.into_bytes(),
        hashed_cache_control: get::<String>(settings, "static_hashed_cache_control")?.into_bytes(),
        follow_symlinks,
        hidden: get(settings, "static_hidden")?,
    })
}

/// The rate limits' settings (the registry's "Rate limits" section, docs/rate-limits.md); the
/// registry checked them in the master, a value it would refuse is a ValueError here too.
fn rate_limit_config(settings: &Bound<'_, PyDict>) -> PyResult<RateLimitConfig> {
    let rate: Option<String> = get(settings, "rate_limit")?;
    RateLimitConfig::parse(
        rate.as_deref(),
        get(settings, "rate_limit_burst")?,
        &get::<Vec<String>>(settings, "rate_limit_paths")?,
        &get::<Vec<String>>(settings, "rate_limit_allow")?,
        get(settings, "rate_limit_ipv6_prefix")?,
        get(settings, "max_connections_per_client")?,
    )
    .map_err(PyValueError::new_err)
}

/// Builds the worker's configuration from the settings dict.
pub fn worker_config(settings: &Bound<'_, PyDict>) -> PyResult<WorkerConfig> {
    let mpm_name: String = get(settings, "mpm")?;
    let mpm = Mpm::parse(&mpm_name)
        .ok_or_else(|| PyValueError::new_err(format!("unknown mpm '{mpm_name}'")))?;
    let server_header: String = get(settings, "server_header")?;
    let log_level: String = get(settings, "log_level")?;
    let allowed: Vec<String> = get(settings, "forwarded_allow_ips")?;
    let trusted_proxies = TrustedProxies::parse(&allowed)
        .map_err(|err| PyValueError::new_err(format!("forwarded_allow_ips: {err}")))?;
    Ok(WorkerConfig {
        mpm,
        threads: if mpm == Mpm::Event {
            get::<usize>(settings, "threads")?
        } else {
            get::<usize>(settings, "threads")?.max(1)
        },
        trusted_proxies,
        proxy_protocol: get(settings, "proxy_protocol")?,
        tls: tls_config(settings)?,
        max_connections: get::<usize>(settings, "max_connections")?.max(1),
        max_queued_requests: get(settings, "max_queued_requests")?,
        max_concurrency: get(settings, "max_concurrency")?,
        ws_max_connections: get(settings, "ws_max_connections")?,
        ws_max_message_size: get(settings, "ws_max_message_size")?,
        ws_receive_buffer_total: get(settings, "ws_receive_buffer_total")?,
        ws_receive_buffer_timeout: seconds(settings, "ws_receive_buffer_timeout")?,
        ws_idle_timeout: seconds(settings, "ws_idle_timeout")?,
        ws_per_message_deflate: get(settings, "ws_per_message_deflate")?,
        ws_server_max_window_bits: get(settings, "ws_server_max_window_bits")?,
        ws_ping_interval: seconds(settings, "ws_ping_interval")?,
        ws_ping_timeout: seconds(settings, "ws_ping_timeout")?,
        max_response_buffer: get(settings, "max_response_buffer")?,
        max_stream_buffer: get(settings, "max_stream_buffer")?,
        response_batch_delay: seconds(settings, "response_batch_delay")?,
        request_buffer_memory: get(settings, "request_buffer_memory")?,
        request_buffer_total: get(settings, "request_buffer_total")?,
        // Made absolute by the registry (the system's temporary directory when unset).
        request_buffer_dir: get::<String>(settings, "request_buffer_dir")?.into(),
        buffer_disk_total: get(settings, "buffer_disk_total")?,
        // In normal form, as the request paths they are compared with (`/a%20b`, `//a` name
        // `/a b`, `/a`); one with none (no leading `/`, a `?`) is kept as written.
        stream_body_paths: get::<Vec<String>>(settings, "stream_body_paths")?
            .into_iter()
            .map(|path| tines_proto::normal_prefix(path.as_bytes()).unwrap_or(path.into_bytes()))
            .collect(),
        response_buffer_total: get(settings, "response_buffer_total")?,
        keepalive_timeout: seconds(settings, "keepalive_timeout")?,
        // Resolved by `tines.worker.worker_settings` (unset: `keepalive_timeout`).
        drain_timeout: seconds(settings, "drain_timeout")?,
        max_keepalive_requests: get(settings, "max_keepalive_requests")?,
        header_timeout: seconds(settings, "header_timeout")?,
        header_timeout_max: seconds(settings, "header_timeout_max")?,
        header_min_rate: get(settings, "header_min_rate")?,
        body_timeout: seconds(settings, "body_timeout")?,
        body_min_rate: get(settings, "body_min_rate")?,
        send_timeout: seconds(settings, "send_timeout")?,
        linger_timeout: seconds(settings, "linger_timeout")?,
        limits: Limits {
            max_request_line: get(settings, "max_request_line")?,
            max_headers: get(settings, "max_headers")?,
            max_head_size: get(settings, "max_head_size")?,
        },
        max_body_size: get(settings, "max_body_size")?,
        max_body_drain: get(settings, "max_body_drain")?,
        server_header: server_header.into_bytes(),
        root_path: get(settings, "root_path")?,
        access_log: get(settings, "access_log")?,
        error_log: Some(get::<String>(settings, "error_log")?).filter(|path| path != "-"),
        access_log_format: Format::parse(&get::<String>(settings, "access_log_format")?)
            .map_err(|err| PyValueError::new_err(format!("access_log_format: {err}")))?,
        access_log_exclude: get::<Vec<String>>(settings, "access_log_exclude")?
            .into_iter()
            .map(String::into_bytes)
            .collect(),
        max_requests: get(settings, "max_requests")?,
        max_requests_jitter: get(settings, "max_requests_jitter")?,
        workers: get::<usize>(settings, "workers")?.max(1),
        debug: log_level.eq_ignore_ascii_case("debug"),
        h2: h2_config(settings)?,
        statics: static_config(settings)?,
        rate_limit: rate_limit_config(settings)?,
        compression: compression_config(settings)?,
    })
}

/// Response compression's settings (the registry's "Compression" section, ADR 0037). The
/// registry checks each value; a coding named twice is refused here.
fn compression_config(settings: &Bound<'_, PyDict>) -> PyResult<CompressionConfig> {
    let mut codings = Vec::new();
    for name in get::<Vec<String>>(settings, "compression")? {
        let coding = Coding::from_token(name.as_bytes()).ok_or_else(|| {
            PyValueError::new_err(format!("compression: unknown coding {name:?}"))
        })?;
        if codings.contains(&coding) {
            return Err(PyValueError::new_err(format!(
                "compression: {name} is listed twice"
            )));
        }
        codings.push(coding);
    }
    let bytes = |key| -> PyResult<Vec<Vec<u8>>> {
        Ok(get::<Vec<String>>(settings, key)?
            .into_iter()
            .map(|item| item.to_ascii_lowercase().into_bytes())
            .collect())
    };
    Ok(CompressionConfig {
        codings,
        min_size: get(settings, "compression_min_size")?,
        types: bytes("compression_types")?,
        gzip_level: get(settings, "compression_gzip_level")?,
        brotli_level: get(settings, "compression_brotli_level")?,
        zstd_level: get(settings, "compression_zstd_level")?,
        exclude_paths: get::<Vec<String>>(settings, "compression_exclude_paths")?
            .into_iter()
            .map(String::into_bytes)
            .collect(),
    })
}

/// Lists `config`'s fields, each with its `Debug` text. The destructuring names every field:
/// one added to `WorkerConfig` fails to compile until it is listed here, and so in the check.
macro_rules! fields_of {
    ($config:expr; $($field:ident),* $(,)?) => {{
        let WorkerConfig { $($field),* } = $config;
        vec![$((stringify!($field), format!("{:?}", $field))),*]
    }};
}

/// The fields of the `WorkerConfig` that `settings` convert into (as `run_worker` converts
/// them), or of `WorkerConfig::default()` without `settings`: `(name, Debug text)` pairs, so
/// that a unit test (tests/python/unit/test_worker_defaults.py) checks the Rust defaults,
/// which the server's own tests start from, against the registry's, field by field.
#[pyfunction]
#[pyo3(signature = (settings=None))]
pub fn worker_config_fields(
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<Vec<(&'static str, String)>> {
    let config = match settings {
        Some(settings) => worker_config(settings)?,
        None => WorkerConfig::default(),
    };
    Ok(fields_of!(config;
        mpm, threads, trusted_proxies, proxy_protocol, tls, max_connections, max_queued_requests,
        max_concurrency, ws_max_connections, ws_max_message_size, ws_receive_buffer_total,
        ws_receive_buffer_timeout, ws_idle_timeout, ws_per_message_deflate,
        ws_server_max_window_bits, ws_ping_interval, ws_ping_timeout, max_response_buffer,
        max_stream_buffer, response_batch_delay,
        request_buffer_memory, request_buffer_total, request_buffer_dir, buffer_disk_total,
        stream_body_paths, response_buffer_total, keepalive_timeout, drain_timeout,
        max_keepalive_requests, header_timeout, header_timeout_max, header_min_rate,
        body_timeout, body_min_rate, send_timeout, linger_timeout, limits, max_body_size,
        max_body_drain, server_header, root_path, access_log, error_log, access_log_format,
        access_log_exclude,
        max_requests, max_requests_jitter, workers, debug, h2,
        statics,
        rate_limit,
        compression,
    ))
}
