//! HTTP/2's settings (docs/http2.md), the `http2` and `h2_*` settings of the registry as the
//! worker gets them: kept in the `h2` module (re-exported as `crate::config::H2Config`) so
//! that `h2` needs nothing above `transport` in the layer list.
//!
//! It must not decide anything (the registry validates, the connection applies).

/// HTTP/2's settings (docs/http2.md): what the server advertises in its SETTINGS frame and
/// the flood limits it enforces, one field per `h2_*` setting of the registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct H2Config {
    /// `http2`: offer `h2` by ALPN on TLS listeners (h2c is chosen per listener instead:
    /// [`crate::listener::H2c`]).
    pub enabled: bool,
    /// `h2_max_concurrent_streams`: SETTINGS_MAX_CONCURRENT_STREAMS (prefork advertises 1
    /// whatever this says: one process serves one request at a time).
    pub max_concurrent_streams: u32,
    /// `h2_initial_window_size`: SETTINGS_INITIAL_WINDOW_SIZE, each stream's receive window.
    pub initial_window_size: u32,
    /// `h2_connection_window_size`: the connection's receive window (a WINDOW_UPDATE on
    /// stream 0 right after the preface raises it from 65,535).
    pub connection_window_size: u32,
    /// `h2_max_frame_size`: SETTINGS_MAX_FRAME_SIZE.
    pub max_frame_size: u32,
    /// `h2_max_header_list_size`: SETTINGS_MAX_HEADER_LIST_SIZE, enforced on the encoded
    /// block before it is decoded (HEADERS plus CONTINUATION).
    pub max_header_list_size: u32,
    /// `h2_header_table_size`: SETTINGS_HEADER_TABLE_SIZE, the HPACK decoder's dynamic table.
    pub header_table_size: u32,
    /// `h2_max_reset_rate`: streams the client may reset (or cause to be reset) per second,
    /// averaged over 10 s; above it, GOAWAY ENHANCE_YOUR_CALM (CVE-2023-44487).
    pub max_reset_rate: u32,
    /// `h2_max_control_rate`: frames that carry no request work (PING, SETTINGS, PRIORITY,
    /// empty DATA, WINDOW_UPDATE) the client may send per second, averaged over 10 s; above
    /// it, GOAWAY ENHANCE_YOUR_CALM.
    pub max_control_rate: u32,
}

impl Default for H2Config {
    fn default() -> Self {
        H2Config {
            enabled: true,
            max_concurrent_streams: 100,
            initial_window_size: 256 * 1024,
            connection_window_size: 1024 * 1024,
            max_frame_size: 16 * 1024,
            max_header_list_size: 64 * 1024,
            header_table_size: 4096,
            max_reset_rate: 100,
            max_control_rate: 1000,
        }
    }
}
