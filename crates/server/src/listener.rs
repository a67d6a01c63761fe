//! Listening sockets shared by every worker, and accept.
//!
//! The master binds (Python, `tines.sockets`) and every worker inherits the same sockets.
//! Accept is level-triggered and takes one connection per readiness (`reactor::accept` says
//! why), so one worker cannot swallow a burst that its siblings are awake to share (ADR 0002).
//! A listener whose connections speak TLS says so ([`Listener::tls`]); the loop's accept wraps
//! what it accepts from it in a TLS session (`reactor::accept`).

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// The address a connection came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// A TCP peer.
    Tcp(SocketAddr),
    /// A Unix-socket peer (no address).
    Unix,
}

impl std::fmt::Display for Peer {
    /// `address:port` (`[v6]:port`), or `a Unix-socket peer`: for log lines.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Tcp(addr) => write!(f, "{addr}"),
            Peer::Unix => f.write_str("a Unix-socket peer"),
        }
    }
}

/// What a listener is bound to, for SERVER_NAME / SERVER_PORT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Local {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix socket path (may be empty for abstract or unknown).
    Unix(String),
}

/// One inherited listening socket.
pub struct Listener {
    fd: RawFd,
    /// Where it is bound.
    pub local: Local,
    tcp: bool,
    /// `TCP_NODELAY` is set on the listening socket, so every accepted connection has it
    /// already (Linux copies the listener's option into each connection it accepts): no
    /// `setsockopt` per connection.
    nodelay_inherited: bool,
    /// `TCP_DEFER_ACCEPT` is on (the master sets it: the `defer_accept` setting): a connection
    /// is queued for accept once its first bytes came, so they are read at once.
    deferred: bool,
    /// Its connections speak TLS (ADR 0030): set by the worker from `WorkerSpec::tls_listeners`
    /// ([`Listener::speaking_tls`]); the master decides which binds do.
    tls: bool,
    /// Whether its cleartext connections speak HTTP/2 with prior knowledge (ADR 0034): set by
    /// the worker from `WorkerSpec::h2c_listeners` ([`Listener::speaking_h2c`]).
    h2c: H2c,
}

/// What a cleartext TCP listener speaks (the `h2c:` and `http1+h2c:` bind prefixes; a TLS
/// listener chooses by ALPN instead, and a Unix socket may say either).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum H2c {
    /// HTTP/1.1 only.
    #[default]
    Off,
    /// HTTP/2 with prior knowledge only: anything but the connection preface is a protocol
    /// error (GOAWAY, close).
    Only,
    /// Both: a connection that begins with the HTTP/2 preface speaks HTTP/2, any other
    /// HTTP/1.1 (a bad preface is then taken for an HTTP/1.1 request: h2spec's 3.5/2).
    Both,
}

/// A worker holding fewer open connections than this is never over its fair share (the
/// accept throttle leaves small numbers alone: shares of a few connections are noise).
pub const FAIR_SHARE_FLOOR: usize = 8;

/// The peer address of the connected socket `fd` (`None` for a Unix-socket peer, or when
/// the socket is gone): for a line about a connection whose `Peer` the caller does not hold
/// (the loop answering a timed-out request an app thread holds). One syscall; not for the
/// per-request path.
pub(crate) fn peer_address(fd: RawFd) -> Option<SocketAddr> {
    // SAFETY: a zeroed sockaddr_storage is valid; getpeername fills at most `len` bytes.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: valid out-pointers of the given length.
    let rc = unsafe {
        libc::getpeername(
            fd,
            (&mut storage as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    sockaddr_to_std(&storage)
}

fn sockaddr_to_std(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match storage.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let sin =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let sin6 = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

impl Listener {
    /// Adopts an inherited listening fd: this process's copy, which the worker's reactor owns
    /// from now on and closes with `close` (at the final stop, or when the loop ends; the
    /// master keeps its own copy). Makes it non-blocking.
    pub fn from_fd(fd: RawFd) -> io::Result<Listener> {
        crate::control::set_nonblocking(fd)?;
        // SAFETY: a zeroed sockaddr_storage is valid; len is its size.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: storage/len are valid out-pointers of the right size.
        if unsafe {
            libc::getsockname(
                fd,
                (&mut storage as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        } < 0
        {
            return Err(io::Error::last_os_error());
        }
        let (local, tcp) = match sockaddr_to_std(&storage) {
            Some(addr) => (Local::Tcp(addr), true),
            None => {
                // SAFETY: not inet, so (for a listener we were given) a sockaddr_un.
                let sun = unsafe {
                    &*(&storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_un>()
                };
                let bytes: Vec<u8> = sun
                    .sun_path
                    .iter()
                    .take_while(|&&c| c != 0)
                    .map(|&c| c as u8)
                    .collect();
                (
                    Local::Unix(String::from_utf8_lossy(&bytes).into_owned()),
                    false,
                )
            }
        };
        let nodelay_inherited = tcp && set_nodelay(fd);
        let deferred = tcp && defers_accept(fd);
        Ok(Listener {
            fd,
            local,
            tcp,
            nodelay_inherited,
            deferred,
            tls: false,
            h2c: H2c::Off,
        })
    }

    /// The listener, its connections speaking TLS when `tls` (a TCP listener only: the master
    /// makes Unix sockets plain; a Unix one asked for is refused, as a bug in the caller).
    pub fn speaking_tls(mut self, tls: bool) -> io::Result<Listener> {
        if tls && !self.tcp {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a Unix-socket listener cannot speak TLS",
            ));
        }
        self.tls = tls;
        Ok(self)
    }

    /// Whether its connections speak TLS (the accepted socket is wrapped in a session).
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// The listener, its cleartext connections speaking HTTP/2 as `h2c` says (on a TLS
    /// listener only `H2c::Off` is accepted: ALPN chooses there).
    pub fn speaking_h2c(mut self, h2c: H2c) -> io::Result<Listener> {
        if self.tls && h2c != H2c::Off {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a TLS listener chooses HTTP/2 by ALPN, not h2c",
            ));
        }
        self.h2c = h2c;
        Ok(self)
    }

    /// What its cleartext connections speak.
    pub fn h2c(&self) -> H2c {
        self.h2c
    }

    /// Whether a connection usually comes with its first bytes (`TCP_DEFER_ACCEPT`): one that
    /// sent nothing is still queued once the deferral runs out, so a read may find nothing.
    pub fn deferred(&self) -> bool {
        self.deferred
    }

    /// The raw fd, to register with the poller.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// Closes this process's copy of the listening socket (the final stop, once the worker
    /// has taken what was queued). The socket itself closes when the last process holding it
    /// does (the master closes its copy as it sends the final TERM); from then on the kernel
    /// refuses a new connection at once instead of queueing it, unserved, to be reset at the
    /// end of the stop. Under systemd socket activation systemd keeps its own copy, so
    /// connections queue for the next start instead.
    pub fn close(self) {
        // SAFETY: `fd` is this process's inherited copy, used by nothing else in the worker
        // once the reactor drops its listeners (the master's Python socket objects, copied
        // into the worker by fork, are never closed there: a worker leaves with `_exit`).
        unsafe { libc::close(self.fd) };
    }

    /// Accepts one connection: non-blocking, close-on-exec, TCP_NODELAY for TCP.
    /// `Ok(None)` when there is nothing to accept.
    pub fn accept(&self) -> io::Result<Option<(OwnedFd, Peer)>> {
        // SAFETY: a zeroed sockaddr_storage is valid.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        loop {
            // SAFETY: storage/len are valid out-pointers; flags are plain integers.
            let fd = unsafe {
                libc::accept4(
                    self.fd,
                    (&mut storage as *mut libc::sockaddr_storage).cast(),
                    &mut len,
                    libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                )
            };
            if fd < 0 {
                let err = io::Error::last_os_error();
                match err.kind() {
                    io::ErrorKind::WouldBlock => return Ok(None),
                    io::ErrorKind::Interrupted => continue,
                    // The peer gave up between SYN and accept: not our error, try the next.
                    _ if err.raw_os_error() == Some(libc::ECONNABORTED) => continue,
                    _ => return Err(err),
                }
            }
            // SAFETY: accept4 returned a fresh fd that we now own.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            if self.tcp {
                if !self.nodelay_inherited {
                    // Failure is harmless (latency only).
                    set_nodelay(fd);
                }
                let peer = sockaddr_to_std(&storage)
                    .map(Peer::Tcp)
                    .unwrap_or(Peer::Unix);
                return Ok(Some((owned, peer)));
            }
            return Ok(Some((owned, Peer::Unix)));
        }
    }
}

/// Sets `TCP_NODELAY` on `fd`; whether it took.
fn set_nodelay(fd: RawFd) -> bool {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt with a valid int option value and its size.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// Whether the listening socket `fd` has `TCP_DEFER_ACCEPT` on (read back, so that a socket
/// inherited with it set, or without it, is taken as it is).
fn defers_accept(fd: RawFd) -> bool {
    let mut seconds: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt with a valid int out-pointer and its size.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&mut seconds as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    rc == 0 && seconds > 0
}

/// Raises the soft RLIMIT_NOFILE to the hard limit (ARCHITECTURE.md, listeners).
pub fn raise_fd_limit() {
    // SAFETY: a zeroed rlimit is valid; getrlimit fills it.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0
        && limit.rlim_cur < limit.rlim_max
    {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: valid in-pointer; failure leaves the old limit, which is fine.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    }
}
