//! [`WsSession::read`] within an allowance (the worker's receive budget) and
//! [`WsSession::abandon`], over a socket pair.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

use super::*;
use crate::listener::Peer;
use crate::transport::Transport;

/// A session on one end of a socket pair, and the client's end.
fn session() -> (WsSession, UnixStream) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    ours.set_nonblocking(true).unwrap();
    let conn = Connection::new(Transport::Plain(OwnedFd::from(ours)), Peer::Unix, 0);
    (WsSession::new(conn, 0, 0, None, 1 << 20), theirs)
}

/// A client frame: masked with a zero key, so the payload stays as it is.
fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x80 | opcode];
    if payload.len() < 126 {
        frame.push(0x80 | payload.len() as u8);
    } else {
        frame.push(0x80 | 126);
        frame.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    }
    frame.extend_from_slice(&[0; 4]);
    frame.extend_from_slice(payload);
    frame
}

fn messages(out: &[WsIncoming]) -> Vec<usize> {
    out.iter()
        .map(|item| match item {
            WsIncoming::Message { data, .. } => data.len(),
            WsIncoming::Closed { code, .. } => panic!("closed with {code}"),
        })
        .collect()
}

#[test]
fn a_read_stops_once_its_allowance_is_spent_and_the_next_goes_on_from_there() {
    let (mut session, mut client) = session();
    let mut sent = Vec::new();
    for _ in 0..3 {
        sent.extend(client_frame(0x2, &[7; 1000]));
    }
    sent.extend(client_frame(0x9, b"ping"));
    client.write_all(&sent).unwrap();
    let mut out = Vec::new();
    // 1,500 bytes allowed: the second message takes it past, and decoding stops there.
    assert_eq!(session.read(&mut out, 1500), ReadOutcome::More);
    assert_eq!(messages(&out), [1000, 1000]);
    assert!(session.buffered() > 0, "the rest is kept, undecoded");
    out.clear();
    assert_eq!(session.read(&mut out, usize::MAX), ReadOutcome::Drained);
    assert_eq!(messages(&out), [1000]);
    assert_eq!(session.buffered(), 0, "nothing held between messages");
    // The ping after them is answered only now.
    let mut pong = [0; 6];
    client.read_exact(&mut pong).unwrap();
    assert_eq!(pong, [0x8A, 4, b'p', b'i', b'n', b'g']);
}

#[test]
fn an_abandoned_session_drops_what_it_gathered_closes_and_reads_no_more() {
    let (mut session, mut client) = session();
    // The first piece of a message that does not end.
    let mut first = client_frame(0x2, &[1; 2000]);
    first[0] &= 0x7F;
    client.write_all(&first).unwrap();
    let mut out = Vec::new();
    assert_eq!(session.read(&mut out, usize::MAX), ReadOutcome::Drained);
    assert!(out.is_empty() && session.buffered() >= 2000);
    session.abandon(1013, "receive buffer full");
    assert_eq!(session.buffered(), 0);
    assert!(session.is_over() && session.close_sent());
    let mut close = [0; 4];
    client.read_exact(&mut close).unwrap();
    assert_eq!(close[..2], [0x88, 21]);
    assert_eq!(u16::from_be_bytes([close[2], close[3]]), 1013);
    client.write_all(&client_frame(0x0, &[1; 10])).unwrap();
    assert_eq!(session.read(&mut out, usize::MAX), ReadOutcome::Over);
    assert!(out.is_empty());
}
