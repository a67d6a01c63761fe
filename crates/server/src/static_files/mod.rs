//! Static files (ADR 0036): a request under a static mount (`static`) answered from the
//! mount's directory by the worker, without entering the app, through the request's own
//! [`Exchange`] (so TLS, HTTP/2, the poller's hand-off for a slow reader, the access log and
//! the scoreboard treat it as any response). [`route`] is the one call the slots and the ASGI
//! bridge make beside the 413 refusal: it answers the request, or gives the exchange back for
//! the app (no mount matched, or a miss with `static_miss = "app"`).
//!
//! Files are looked up beneath the mount's directory descriptor with `openat2`
//! (`RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`: symlinks that stay inside are followed, ones that
//! leave refused by the kernel) as `O_PATH` descriptors, which open nothing (a device's driver
//! never sees an open, a FIFO never blocks), then `fstat`ed: only a regular file is then opened
//! for reading, through its descriptor ([`static_mounts::reopen`]). The opens and `fstat`s run
//! on the caller's thread (the slot's), with the app's interpreter released. The ASGI bridge,
//! whose thread is its event loop's, asks with [`route_cached`] (issue 39's follow-up): names
//! are then looked up in the dentry cache only (`RESOLVE_CACHED`), and one that would need the
//! disk gives the exchange back, unanswered, with the [`Warm`] work that brings its names into
//! the cache on another thread.
//!
//! It must not decide framing or write to the socket itself: the exchange does both.

mod open_cache;
pub(crate) mod path;
mod rules;

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use std::sync::Arc;

use crate::exchange::Exchange;
use crate::shared::WorkerShared;
use crate::static_mounts;
use path::{name_under_mount, target_path, Named};
use rules::{
    accepted, carries_content_hash, http_date, if_range_holds, is_compressible, mime_type,
    none_match_fails, parse_http_date, parse_ranges, preference, Ranges, Validators,
};

/// Runs the work it is given, perhaps with a lock released around it (the ASGI bridge's
/// interpreter).
pub type Release<'r> = &'r mut dyn FnMut(&mut dyn FnMut());

/// What [`route`] did with a request.
pub enum Routed {
    /// Answered from a mount (a file, 304, 206, 416, 301, or a 404/405 from Rust): the
    /// exchange's response is finished. It does not count toward `max_requests`.
    Served(Box<Exchange>),
    /// Not a static answer: the app serves it.
    App(Box<Exchange>),
}

/// Answers `exchange` from a static mount when its path is under one, else gives it back for
/// the app. Without mounts: one branch. The file work of a request under a mount (opens,
/// `fstat`s, the answer) runs inside `release`, which runs it with the app's interpreter
/// released (a slot: `App::wait`; the ASGI bridge: its loop's release), so that a cold open
/// holds none of the app's other threads; `None` runs it as it is.
#[inline]
pub fn route(exchange: Box<Exchange>, release: Option<Release<'_>>) -> Routed {
    if exchange.statics().mounts.is_empty() {
        return Routed::App(exchange);
    }
    match route_mounted(exchange, release, false) {
        Ok(routed) => routed,
        // Lookups that may use the disk are never cold.
        Err(exchange) => Routed::App(exchange),
    }
}

/// [`route`] with names looked up in the dentry cache only: `Err` when one is not there (a
/// cold cache), with the exchange unanswered (nothing written) and the [`Warm`] work to run
/// elsewhere before routing it again.
#[inline]
pub fn route_cached(
    exchange: Box<Exchange>,
    release: Option<Release<'_>>,
) -> Result<Routed, (Box<Exchange>, Warm)> {
    if exchange.statics().mounts.is_empty() {
        return Ok(Routed::App(exchange));
    }
    route_mounted(exchange, release, true).map_err(|exchange| {
        let (mount, prefix_len) = matched(&exchange).expect("a cold lookup is under a mount");
        let path = target_path(exchange.target()).expect("checked by matched");
        let warm = Warm {
            shared: exchange.shared_handle(),
            mount,
            rest: path[prefix_len..].to_vec(),
            accept: header(&exchange, b"accept-encoding").map(<[u8]>::to_vec),
        };
        (exchange, warm)
    })
}

/// The lookups of a request whose names were not all in the dentry cache, to run on a thread
/// that may wait for the disk: the same names looked up (the file, the index, the
/// precompressed siblings `Accept-Encoding` asks for) and dropped, so that routing the request
/// again finds them cached.
pub struct Warm {
    shared: Arc<WorkerShared>,
    mount: usize,
    rest: Vec<u8>,
    accept: Option<Vec<u8>>,
}

impl Warm {
    /// Looks the names up (may wait for the disk).
    pub fn run(&self) {
        let statics = &self.shared.config.statics;
        let dir = statics.mounts[self.mount].dir_fd();
        if let Found::File { name, .. } = find(&self.rest, statics, dir, false) {
            if is_compressible(mime_type(&name)) {
                let _ = sibling(
                    dir,
                    statics.follow_symlinks,
                    &name,
                    self.accept.as_deref(),
                    false,
                );
            }
        }
    }
}

/// An open representation: its file and its validators.
struct Opened {
    file: std::rc::Rc<OwnedFd>,
    validators: Validators,
}

/// Looks `name` (relative; empty: the directory itself) up beneath `dir` as an `O_PATH`
/// descriptor (opening nothing): with `openat2` confined to `dir`
/// ([`static_mounts::open_beneath`]), or, when `follow` (symlinks may leave the mount), a
/// plain `openat` (`name` holds no `..` and is relative, so only a symlink can lead out).
/// `cached`: from the dentry cache only ([`static_mounts::open_cached`]).
fn look_up(dir: RawFd, name: &[u8], follow: bool, cached: bool) -> io::Result<OwnedFd> {
    let c_name = CString::new(if name.is_empty() { &b"."[..] } else { name })
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let flags = libc::O_PATH | libc::O_CLOEXEC;
    if cached {
        return static_mounts::open_cached(dir, &c_name, flags, !follow);
    }
    if !follow {
        return static_mounts::open_beneath(dir, &c_name, flags);
    }
    // SAFETY: c_name is NUL-terminated and outlives the call.
    let fd = unsafe { libc::openat(dir, c_name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What `fstat` says of a looked-up file: its type and validators.
fn stat(fd: &OwnedFd) -> io::Result<(libc::mode_t, Validators, open_cache::FileId)> {
    // SAFETY: stat is plain data, all zeroes a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open; st is a valid stat to fill.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((
        st.st_mode & libc::S_IFMT,
        Validators {
            mtime: st.st_mtime,
            mtime_nsec: st.st_mtime_nsec,
            size: st.st_size as u64,
        },
        (st.st_dev as u64, st.st_ino as u64),
    ))
}

/// A cached-only lookup (`cached`) that failed for want of the dentry cache.
fn cold(cached: bool, err: &io::Error) -> bool {
    cached && err.kind() == io::ErrorKind::WouldBlock
}

/// What [`open_regular`] found.
enum Opening {
    Opened(Opened),
    /// Missing, refused, or not a regular file.
    Missing,
    /// Not in the dentry cache (a `cached` lookup).
    Cold,
}

/// Opens `name` beneath `dir` when it is a regular file (and only then).
fn open_regular(dir: RawFd, name: &[u8], follow: bool, cached: bool) -> Opening {
    let path = match look_up(dir, name, follow, cached) {
        Ok(path) => path,
        Err(err) if cold(cached, &err) => return Opening::Cold,
        Err(_) => return Opening::Missing,
    };
    let Ok((kind, validators, id)) = stat(&path) else {
        return Opening::Missing;
    };
    match open_cache::opened(kind, &path, validators, id) {
        Some(opened) => Opening::Opened(opened),
        None => Opening::Missing,
    }
}

/// The precompressed sibling of `name` that `accept` (the request's `Accept-Encoding`) prefers
/// and the mount holds, opened; `Err` when a `cached` lookup was cold.
fn sibling(
    dir: RawFd,
    follow: bool,
    name: &[u8],
    accept: Option<&[u8]>,
    cached: bool,
) -> Result<Option<(Opened, rules::Encoding)>, ()> {
    let mut sibling = Vec::with_capacity(name.len() + 4);
    for candidate in preference(accepted(accept)) {
        sibling.clear();
        sibling.extend_from_slice(name);
        sibling.push(b'.');
        sibling.extend_from_slice(candidate.suffix());
        match open_regular(dir, &sibling, follow, cached) {
            Opening::Opened(opened) => return Ok(Some((opened, candidate))),
            Opening::Missing => {}
            Opening::Cold => return Err(()),
        }
    }
    Ok(None)
}

/// What the mount holds for a request, found before anything is answered.
enum Found {
    /// A regular file: its name beneath the mount (the index's, for a directory) and the file.
    File { name: Vec<u8>, opened: Opened },
    /// A directory asked for without its trailing slash while an index is set: 301 to it.
    Redirect,
    /// Nothing servable (missing, refused, not a regular file, a directory without index).
    Miss,
    /// A name not in the dentry cache (a `cached` lookup): nothing decided.
    Cold,
}

/// What the mount whose directory is `dir` holds for `rest`, the path after its prefix.
/// `cached`: names from the dentry cache only.
fn find(rest: &[u8], statics: &crate::config::StaticConfig, dir: RawFd, cached: bool) -> Found {
    let Named::Path { relative, slash } = name_under_mount(rest, statics.hidden) else {
        return Found::Miss;
    };
    let follow = statics.follow_symlinks;
    let path = match look_up(dir, &relative, follow, cached) {
        Ok(path) => path,
        Err(err) if cold(cached, &err) => return Found::Cold,
        Err(_) => return Found::Miss,
    };
    let Ok((kind, validators, id)) = stat(&path) else {
        return Found::Miss;
    };
    match kind {
        libc::S_IFREG if !slash => match open_cache::opened(kind, &path, validators, id) {
            Some(opened) => Found::File {
                name: relative,
                opened,
            },
            None => Found::Miss,
        },
        libc::S_IFDIR => {
            let Some(index) = &statics.index else {
                return Found::Miss;
            };
            if !slash {
                return Found::Redirect;
            }
            let mut name = relative;
            if !name.is_empty() {
                name.push(b'/');
            }
            name.extend_from_slice(index);
            match open_regular(dir, &name, follow, cached) {
                Opening::Opened(opened) => Found::File { name, opened },
                Opening::Missing => Found::Miss,
                Opening::Cold => Found::Cold,
            }
        }
        // A FIFO, socket or device; or a file asked for as a directory (`a.css/`).
        _ => Found::Miss,
    }
}

/// The mount `exchange`'s path is under (its index) and the length of its prefix.
fn matched(exchange: &Exchange) -> Option<(usize, usize)> {
    let path = target_path(exchange.target())?;
    let (index, rest) = exchange.statics().mount_for(path)?;
    Some((index, path.len() - rest.len()))
}

/// [`route`] with mounts: a request outside them costs a prefix comparison per mount and
/// nothing else; one under a mount is answered, or is a miss for the app; `Err` (`cached`
/// lookups only) when a name was not in the dentry cache, nothing answered. Never inlined: the
/// slot's loop keeps only [`route`]'s branch.
#[inline(never)]
fn route_mounted(
    mut exchange: Box<Exchange>,
    release: Option<Release<'_>>,
    cached: bool,
) -> Result<Routed, Box<Exchange>> {
    let Some((index, prefix_len)) = matched(&exchange) else {
        return Ok(Routed::App(exchange));
    };
    // Held while the exchange writes (it borrows the settings and the mount's descriptor).
    let shared = exchange.shared_handle();
    let statics = &shared.config.statics;
    let mount = &statics.mounts[index];
    let method = exchange.method();
    if method != b"GET" && method != b"HEAD" {
        if statics.miss_to_app {
            return Ok(Routed::App(exchange));
        }
        small(
            &mut exchange,
            b"405 Method Not Allowed",
            &[(b"Allow", b"GET, HEAD")],
        );
        return Ok(Routed::Served(exchange));
    }
    let mut answered = Answered::App;
    let mut work = || answered = answer(&mut exchange, statics, mount, prefix_len, cached);
    match release {
        Some(release) => release(&mut work),
        None => work(),
    }
    match answered {
        Answered::Served => Ok(Routed::Served(exchange)),
        Answered::App => Ok(Routed::App(exchange)),
        Answered::Cold => Err(exchange),
    }
}

/// What [`answer`] did.
enum Answered {
    Served,
    /// A miss for the app.
    App,
    /// A name was not in the dentry cache: nothing answered.
    Cold,
}

/// Finds and answers what the mount holds for `exchange`'s path (whose first `prefix_len`
/// bytes are the mount's prefix); `cached`: names from the dentry cache only.
fn answer(
    exchange: &mut Exchange,
    statics: &crate::config::StaticConfig,
    mount: &crate::static_mounts::Mount,
    prefix_len: usize,
    cached: bool,
) -> Answered {
    let target = exchange.target();
    let path = target_path(target).expect("checked by the caller");
    let found = find(&path[prefix_len..], statics, mount.dir_fd(), cached);
    match found {
        Found::Cold => Answered::Cold,
        Found::Miss if statics.miss_to_app => Answered::App,
        Found::Miss => {
            small(exchange, b"404 Not Found", &[]);
            Answered::Served
        }
        Found::Redirect => {
            let query = target.iter().position(|&b| b == b'?');
            let mut location = path.to_vec();
            location.push(b'/');
            if let Some(query) = query {
                location.extend_from_slice(&target[query..]);
            }
            small(
                exchange,
                b"301 Moved Permanently",
                &[(b"Location", &location)],
            );
            Answered::Served
        }
        Found::File { name, opened } => {
            let cache_control = if carries_content_hash(&name) {
                &statics.hashed_cache_control
            } else {
                &statics.cache_control
            };
            if answer_file(
                exchange,
                mount.dir_fd(),
                statics.follow_symlinks,
                &name,
                opened,
                cache_control,
                cached,
            ) {
                Answered::Served
            } else {
                Answered::Cold
            }
        }
    }
}

/// A short answer from Rust (404, 405, 301) with a text body, keeping the connection.
fn small(exchange: &mut Exchange, status: &[u8], extra: &[(&[u8], &[u8])]) {
    exchange.keep_identity();
    let body = &status[4..];
    let mut headers: Vec<(&[u8], &[u8])> = vec![(b"Content-Type", b"text/plain; charset=utf-8")];
    headers.extend_from_slice(extra);
    if exchange
        .begin_response(status, headers, Some(body.len() as u64 + 1))
        .is_ok()
    {
        let _ = exchange.write_body(body);
        let _ = exchange.write_body(b"\n");
        let _ = exchange.finish();
    }
}

/// The request header `name`'s first value.
fn header<'e>(exchange: &'e Exchange, name: &[u8]) -> Option<&'e [u8]> {
    exchange
        .headers()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
}

/// Answers with the file `name` (opened as `identity`), or the precompressed sibling the
/// request's `Accept-Encoding` prefers: 200, 206, 304 or 416. False, nothing answered, when a
/// `cached` lookup of a sibling was cold.
fn answer_file(
    exchange: &mut Exchange,
    dir: RawFd,
    follow: bool,
    name: &[u8],
    identity: Opened,
    cache_control: &[u8],
    cached: bool,
) -> bool {
    // Never compressed on the fly (whatever `compression` says): the file goes out with
    // sendfile, a text file is compressed ahead by its sibling, and a 304's ETag stays the
    // 200's.
    exchange.keep_identity();
    let mime = mime_type(name);
    let compressible = is_compressible(mime);
    let mut encoding = None;
    let mut chosen = identity;
    if compressible {
        let accept = header(exchange, b"accept-encoding");
        match sibling(dir, follow, name, accept, cached) {
            Ok(Some((opened, candidate))) => {
                chosen = opened;
                encoding = Some(candidate);
            }
            Ok(None) => {}
            Err(()) => return false,
        }
    }
    let validators = chosen.validators;
    let mut etag = Vec::with_capacity(40);
    validators.etag(encoding, &mut etag);
    let mut last_modified = Vec::with_capacity(29);
    http_date(validators.mtime, &mut last_modified);
    // RFC 9110 13.2.2: If-None-Match first; If-Modified-Since only without it.
    let not_modified = match header(exchange, b"if-none-match") {
        Some(value) => none_match_fails(value, &etag),
        None => header(exchange, b"if-modified-since")
            .and_then(parse_http_date)
            .is_some_and(|since| validators.mtime <= since),
    };
    let mut headers: Vec<(&[u8], &[u8])> = Vec::with_capacity(10);
    headers.push((b"ETag", &etag));
    headers.push((b"Last-Modified", &last_modified));
    if !cache_control.is_empty() {
        headers.push((b"Cache-Control", cache_control));
    }
    if compressible {
        // The answer depends on Accept-Encoding whenever a sibling may exist.
        headers.push((b"Vary", b"Accept-Encoding"));
    }
    if not_modified {
        if exchange
            .begin_response(b"304 Not Modified", headers, None)
            .is_ok()
        {
            let _ = exchange.finish();
        }
        return true;
    }
    headers.push((b"Content-Type", mime.as_bytes()));
    if let Some(encoding) = encoding {
        headers.push((b"Content-Encoding", encoding.token()));
    }
    headers.push((b"Accept-Ranges", b"bytes"));
    let size = validators.size;
    // Range is defined for GET only (RFC 9110 14.2); If-Range may void it.
    let ranges = match header(exchange, b"range") {
        Some(value)
            if exchange.method() == b"GET"
                && header(exchange, b"if-range")
                    .is_none_or(|value| if_range_holds(value, &etag, validators.mtime)) =>
        {
            parse_ranges(value, size)
        }
        _ => Ranges::Whole,
    };
    let file = chosen.file.as_raw_fd();
    match ranges {
        Ranges::Whole => {
            if exchange
                .begin_response(b"200 OK", headers, Some(size))
                .is_ok()
            {
                if size > 0 {
                    let _ = exchange.send_file(file, 0, size);
                }
                let _ = exchange.finish();
            }
        }
        Ranges::Unsatisfiable => {
            let content_range = format!("bytes */{size}");
            // 416's body is not the file: drop what described it.
            headers.retain(|(name, _)| *name != b"Content-Type" && *name != b"Content-Encoding");
            headers.push((b"Content-Range", content_range.as_bytes()));
            headers.push((b"Content-Type", b"text/plain; charset=utf-8"));
            let body = b"Range Not Satisfiable\n";
            if exchange
                .begin_response(
                    b"416 Range Not Satisfiable",
                    headers,
                    Some(body.len() as u64),
                )
                .is_ok()
            {
                let _ = exchange.write_body(body);
                let _ = exchange.finish();
            }
        }
        Ranges::Parts(parts) if parts.len() == 1 => {
            let (first, last) = parts[0];
            let content_range = format!("bytes {first}-{last}/{size}");
            headers.push((b"Content-Range", content_range.as_bytes()));
            let length = last - first + 1;
            if exchange
                .begin_response(b"206 Partial Content", headers, Some(length))
                .is_ok()
            {
                let _ = exchange.send_file(file, first, length);
                let _ = exchange.finish();
            }
        }
        Ranges::Parts(parts) => {
            let boundary = format!(
                "tines-{}",
                String::from_utf8_lossy(&etag[1..etag.len() - 1]).replace('.', "-")
            );
            let content_type = format!("multipart/byteranges; boundary={boundary}");
            headers.retain(|(name, _)| *name != b"Content-Type");
            headers.push((b"Content-Type", content_type.as_bytes()));
            let heads: Vec<String> = parts
                .iter()
                .map(|(first, last)| {
                    format!(
                        "\r\n--{boundary}\r\nContent-Type: {mime}\r\nContent-Range: bytes {first}-{last}/{size}\r\n\r\n"
                    )
                })
                .collect();
            let closing = format!("\r\n--{boundary}--\r\n");
            let length: u64 = heads.iter().map(|head| head.len() as u64).sum::<u64>()
                + parts
                    .iter()
                    .map(|(first, last)| last - first + 1)
                    .sum::<u64>()
                + closing.len() as u64;
            if exchange
                .begin_response(b"206 Partial Content", headers, Some(length))
                .is_ok()
            {
                for (head, (first, last)) in heads.iter().zip(&parts) {
                    if exchange.write_body(head.as_bytes()).is_err()
                        || exchange.send_file(file, *first, last - first + 1).is_err()
                    {
                        return true;
                    }
                }
                let _ = exchange.write_body(closing.as_bytes());
                let _ = exchange.finish();
            }
        }
    }
    true
}
