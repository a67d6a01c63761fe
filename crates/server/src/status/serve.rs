//! The status process's connections: one epoll loop over non-blocking sockets ([`Poller`]),
//! at most [`SLOTS`] connections at once, each with one deadline from its accept
//! (`status_timeout`) that covers reading its request head and writing its response.
//!
//! Why slots and a deadline rather than timeouts per read: a probe must be answered whatever
//! other clients do, and a client that sends a byte now and then never trips a per-read
//! timeout. Here a client holds a slot at most `status_timeout`, and when every slot is taken
//! the oldest connection is dropped for the new one, so a flood of connections costs the
//! oldest of them, not the newcomer (a probe's request usually arrives with its connection and
//! is answered in the turn that accepts it). No threads: the process has nothing else to do,
//! and one loop keeps it a plain child of a master that forks.
//!
//! It owns the sockets and the slots only; what a request is answered is
//! [`super::answer`]'s.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use tines_proto::{parse_request_head, HeadStatus, Limits, RequestHead};

use super::snapshot::{History, SAMPLE_EVERY_MS};
use super::{answer, plain, Request, StatusSpec};
use crate::listener::{Listener, Peer};
use crate::poller::{Event, Poller, Token, Trigger};
use crate::scoreboard::monotonic_ns;

/// How many connections the status process holds at once; past it the oldest is dropped.
/// Enough for a kubelet's probes, Prometheus and a few people with room to spare, and small
/// enough that the slots' buffers (8 KiB each) stay a few hundred KiB.
pub const SLOTS: usize = 64;

/// The largest request head read (a status request has no need of more).
const MAX_HEAD: usize = 8192;

/// The listener's token; connections are tokened by their accept number, which never repeats
/// (an event for a connection dropped earlier in the same batch finds no slot).
const LISTENER: Token = Token(u64::MAX);
/// The life pipe's token.
const LIFE: Token = Token(u64::MAX - 1);

/// A deadline this far off is no deadline (and keeps `Instant` arithmetic from overflowing
/// with a huge `status_timeout`).
const LONGEST: Duration = Duration::from_secs(365 * 86_400);

/// One connection in a slot.
struct Client {
    /// Its accept number (and token).
    id: u64,
    stream: TcpStream,
    /// When it is dropped, answered or not.
    deadline: Instant,
    /// The peer is in `status_allow` (or a Unix-socket peer).
    allowed: bool,
    head: Vec<u8>,
    filled: usize,
    /// The response, once the head is read (empty before).
    out: Vec<u8>,
    written: usize,
}

/// What a turn of a connection came to.
#[derive(Debug, PartialEq, Eq)]
enum Turn {
    /// It waits for its socket (more of the head, or room for the response).
    Waiting,
    /// Answered, or the client left or failed: close it.
    Finished,
}

impl Client {
    /// Reads what has come of the head (to `EAGAIN`), answers once it is complete, and writes
    /// what the socket takes.
    fn turn(&mut self, spec: &StatusSpec, history: &mut History) -> Turn {
        if self.out.is_empty() {
            match self.read_head(spec, history) {
                Some(out) => self.out = out,
                None => return Turn::Waiting,
            }
        }
        self.write()
    }

    /// The response once the head is complete (or refused); `None` while it is not. A client
    /// that leaves or fails gets an empty `Some` (nothing to write: closed).
    fn read_head(&mut self, spec: &StatusSpec, history: &mut History) -> Option<Vec<u8>> {
        let limits = Limits {
            max_head_size: MAX_HEAD,
            ..Limits::default()
        };
        loop {
            match (&self.stream).read(&mut self.head[self.filled..]) {
                Ok(0) => return Some(Vec::new()),
                Ok(n) => self.filled += n,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return None,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Some(Vec::new()),
            }
            let buf = &self.head[..self.filled];
            let mut head = RequestHead::default();
            match parse_request_head(buf, &limits, &mut head) {
                Ok(HeadStatus::Complete) => {
                    let accept = head
                        .headers
                        .iter()
                        .find(|(name, _)| name.of(buf).eq_ignore_ascii_case(b"accept"))
                        .map_or(&b""[..], |(_, value)| value.of(buf));
                    let request = Request {
                        method: head.method.of(buf),
                        target: head.target.of(buf),
                        accept,
                        allowed: self.allowed,
                    };
                    return Some(answer(&request, spec, history));
                }
                Ok(HeadStatus::Partial) if self.filled < self.head.len() => continue,
                Ok(HeadStatus::Partial) => return Some(plain(431, "request head too large\n")),
                Err(err) => return Some(plain(err.status(), &format!("{}\n", err.reason()))),
            }
        }
    }

    fn write(&mut self) -> Turn {
        while self.written < self.out.len() {
            match (&self.stream).write(&self.out[self.written..]) {
                Ok(n) => self.written += n,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Turn::Waiting,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Turn::Finished,
            }
        }
        Turn::Finished
    }
}

/// The connections held, oldest first (accept numbers and deadlines both grow along it).
struct Slots {
    clients: Vec<Client>,
    next_id: u64,
}

impl Slots {
    /// Takes a new connection, dropping the oldest when every slot is taken.
    fn admit(&mut self, stream: TcpStream, allowed: bool, deadline: Instant) -> &mut Client {
        if self.clients.len() == SLOTS {
            self.clients.remove(0);
        }
        self.next_id += 1;
        self.clients.push(Client {
            id: self.next_id,
            stream,
            deadline,
            allowed,
            head: vec![0; MAX_HEAD],
            filled: 0,
            out: Vec::new(),
            written: 0,
        });
        self.clients.last_mut().expect("just pushed")
    }

    /// Drops the connections whose deadline has come, each after one last turn: a process
    /// that was stopped (`SIGSTOP`, a paused VM) finds deadlines past that its clients did not
    /// miss, and a request that is there is answered rather than cut off (ADR 0022's rule).
    fn expire(&mut self, now: Instant, spec: &StatusSpec, history: &mut History) {
        let due = self
            .clients
            .iter()
            .take_while(|client| client.deadline <= now)
            .count();
        for mut client in self.clients.drain(..due) {
            client.turn(spec, history);
        }
    }
}

/// Serves until the master is gone (its life pipe reads EOF). Errors other than a client's
/// are returned.
pub fn run_status(spec: &StatusSpec) -> io::Result<()> {
    let listener = Listener::from_fd(spec.listener)?;
    let mut poller = Poller::new()?;
    poller.register(listener.fd(), LISTENER, Trigger::Level)?;
    poller.register(spec.life_fd, LIFE, Trigger::Level)?;
    let timeout = spec.timeout.min(LONGEST);
    let mut slots = Slots {
        clients: Vec::with_capacity(SLOTS),
        next_id: 0,
    };
    let mut history = History::default();
    let mut events: Vec<Event> = Vec::new();
    loop {
        // The request total is sampled every few seconds for the rates, whether or not anyone
        // asks (summing the scoreboard only when a sample is due).
        let now_ms = monotonic_ns() / 1_000_000;
        if history.due(now_ms) {
            history.sample(now_ms, spec.scoreboard.totals().metrics.total());
        }
        let now = Instant::now();
        slots.expire(now, spec, &mut history);
        let wait = slots
            .clients
            .first()
            .map_or(Duration::from_millis(SAMPLE_EVERY_MS), |oldest| {
                (oldest.deadline - now).min(Duration::from_millis(SAMPLE_EVERY_MS))
            });
        poller.wait(&mut events, Some(wait))?;
        for event in &events {
            match event.token {
                LIFE => return Ok(()), // EOF (or an error): the master is gone
                LISTENER => accept(&listener, &poller, &mut slots, timeout, spec, &mut history),
                Token(id) => {
                    let Some(at) = slots.clients.iter().position(|client| client.id == id) else {
                        continue; // dropped earlier in this batch
                    };
                    if slots.clients[at].turn(spec, &mut history) == Turn::Finished {
                        slots.clients.remove(at);
                    }
                }
            }
        }
    }
}

/// Accepts what is queued, taking each connection's first turn at once (a probe's request
/// usually came with it: answered here, it never waits for the poller).
fn accept(
    listener: &Listener,
    poller: &Poller,
    slots: &mut Slots,
    timeout: Duration,
    spec: &StatusSpec,
    history: &mut History,
) {
    // EMFILE and the like end the batch; the listener, level-triggered, says so again.
    while let Ok(Some((fd, peer))) = listener.accept() {
        let allowed = match peer {
            Peer::Tcp(addr) => spec.allow.trusts(addr.ip()),
            Peer::Unix => true, // only a local process can reach a Unix socket
        };
        // A Unix-socket peer works through the same calls (a `TcpStream` over its fd only
        // reads and writes).
        let stream = TcpStream::from(fd);
        let client = slots.admit(stream, allowed, Instant::now() + timeout);
        if client.turn(spec, history) == Turn::Finished {
            slots.clients.pop();
            continue;
        }
        let (fd, token) = (std::os::fd::AsRawFd::as_raw_fd(&client.stream), client.id);
        if poller.register_connection(fd, Token(token)).is_err() {
            slots.clients.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trusted_proxies::TrustedProxies;
    use crate::Scoreboard;
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;

    fn spec() -> StatusSpec {
        StatusSpec {
            listener: -1,
            life_fd: -1,
            scoreboard: Arc::new(Scoreboard::new(1, 1).unwrap()),
            mpm: "prefork".into(),
            show_query: false,
            redact_paths: false,
            allow: TrustedProxies::parse(&[]).unwrap(),
            timeout: Duration::from_secs(2),
        }
    }

    /// Our end (non-blocking, as accepted) and the client's.
    fn pair() -> (TcpStream, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        (TcpStream::from(std::os::fd::OwnedFd::from(ours)), theirs)
    }

    fn slots() -> Slots {
        Slots {
            clients: Vec::new(),
            next_id: 0,
        }
    }

    #[test]
    fn a_full_house_drops_its_oldest_and_deadlines_expire_in_accept_order() {
        let (spec, mut history, mut slots) = (spec(), History::default(), slots());
        let start = Instant::now();
        let mut clients = Vec::new();
        for n in 0..=SLOTS as u64 {
            let (ours, theirs) = pair();
            clients.push(theirs);
            slots.admit(ours, true, start + Duration::from_secs(n));
        }
        assert_eq!(slots.clients.len(), SLOTS);
        assert_eq!(slots.clients.first().unwrap().id, 2); // the first was dropped for the last
        assert_eq!(slots.clients.last().unwrap().id, SLOTS as u64 + 1);
        slots.expire(start + Duration::from_secs(4), &spec, &mut history);
        assert_eq!(slots.clients.first().unwrap().id, 6);
        let mut byte = [0u8; 1];
        for (n, client) in clients.iter_mut().enumerate().take(7) {
            client.set_nonblocking(true).unwrap();
            match client.read(&mut byte) {
                Ok(0) => assert!(n < 5, "client {n} was dropped"),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    assert!(n >= 5, "client {n} is still held")
                }
                other => panic!("client {n}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_request_waiting_at_the_deadline_is_answered_before_the_close() {
        let (spec, mut history, mut slots) = (spec(), History::default(), slots());
        let (ours, mut theirs) = pair();
        theirs
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        let past = Instant::now();
        slots.admit(ours, true, past);
        slots.expire(past, &spec, &mut history);
        assert!(slots.clients.is_empty());
        let mut answer = Vec::new();
        theirs.read_to_end(&mut answer).unwrap();
        assert!(answer.starts_with(b"HTTP/1.1 200 OK\r\n"));
        assert!(answer.ends_with(b"\r\n\r\nok\n"));
    }

    #[test]
    fn the_deadline_closes_a_client_that_does_not_take_its_response() {
        let (spec, mut history, mut slots) = (spec(), History::default(), slots());
        let (ours, mut theirs) = pair();
        let deadline = Instant::now() + Duration::from_secs(60);
        let client = slots.admit(ours, true, deadline);
        client.out = vec![b'x'; 8 << 20]; // more than any socket buffer takes
        assert_eq!(client.turn(&spec, &mut history), Turn::Waiting);
        slots.expire(deadline - Duration::from_secs(1), &spec, &mut history);
        assert_eq!(slots.clients.len(), 1, "held until its deadline");
        slots.expire(deadline, &spec, &mut history);
        assert!(slots.clients.is_empty());
        let mut taken = Vec::new();
        theirs.read_to_end(&mut taken).unwrap();
        assert!(
            !taken.is_empty() && taken.len() < 8 << 20,
            "{}",
            taken.len()
        );
    }

    #[test]
    fn only_the_probes_answer_a_peer_outside_the_allow_list() {
        let (spec, mut history, mut slots) = (spec(), History::default(), slots());
        for (path, allowed, status) in [
            ("/healthz", false, "200"),
            ("/readyz", false, "503"), // no worker in this scoreboard
            ("/status.json", false, "403"),
            ("/metrics", false, "403"),
            ("/", false, "403"),
            ("/nothing", false, "403"),
            ("/status.json", true, "200"),
            ("/nothing", true, "404"),
        ] {
            let (ours, mut theirs) = pair();
            write!(theirs, "GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
            let client = slots.admit(ours, allowed, Instant::now() + Duration::from_secs(9));
            assert_eq!(client.turn(&spec, &mut history), Turn::Finished);
            slots.clients.pop();
            let mut answer = String::new();
            theirs.read_to_string(&mut answer).unwrap();
            assert!(
                answer.starts_with(&format!("HTTP/1.1 {status} ")),
                "{path} {allowed}: {answer}"
            );
        }
    }
}
