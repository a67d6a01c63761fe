//! The pending output's tests: real sockets, real files.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::output::*;
use super::queue::*;
use super::*;
use crate::config::WorkerConfig;
use crate::spool::Buffers;
use crate::transport::Link;
use std::io::Read;
use std::os::unix::net::UnixStream;

fn raw(stream: &UnixStream) -> Link {
    Link::Plain(std::os::fd::AsRawFd::as_raw_fd(stream))
}

fn buffers(memory: u64, disk: u64, dir: &std::path::Path) -> Arc<Buffers> {
    let config = WorkerConfig {
        response_buffer_total: memory,
        buffer_disk_total: disk,
        request_buffer_dir: dir.to_path_buf(),
        ..WorkerConfig::default()
    };
    Arc::new(Buffers::new(&config))
}

fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tines-pending-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn writes_bytes_file_and_tail_in_order() {
    let (a, mut b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let path = std::env::temp_dir().join(format!("tines-pending-{}", std::process::id()));
    std::fs::write(&path, b"0123456789").unwrap();
    let file = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let mut pending = Pending::default();
    assert!(pending.is_empty());
    pending.push(&[b"head:", b"xx"], 1);
    pending.push_file(OwnedFd::from(file), 2, 5);
    pending.push(&[b":tail"], 0);
    assert_eq!(pending.buffered(), "ead:xx".len() + ":tail".len());
    assert_eq!(pending.write_some(raw(&a)).unwrap(), Progress::Done);
    assert!(pending.is_empty());
    drop(a);
    let mut got = Vec::new();
    b.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"ead:xx23456:tail");
}

#[test]
fn blocks_on_a_full_socket_and_resumes() {
    let (a, mut b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let big = vec![7u8; 4 << 20];
    let mut pending = Pending::default();
    pending.push(&[&big], 0);
    let fd = raw(&a);
    assert_eq!(pending.write_some(fd).unwrap(), Progress::Blocked);
    assert!(!pending.is_empty());
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        b.read_to_end(&mut got).unwrap();
        got.len()
    });
    pending.write_all(fd, Duration::from_secs(10)).unwrap();
    drop(a);
    assert_eq!(reader.join().unwrap(), 4 << 20);
}

#[test]
fn an_action_runs_once_the_bytes_before_it_are_written_or_with_those_never_written() {
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;
    let record = |into: &Arc<AtomicU64>| -> WhenWritten {
        let into = Arc::clone(into);
        Box::new(move |unsent| into.store(unsent + 1, Ordering::SeqCst))
    };
    // Nothing queued: at once, nothing unsent.
    let now = Arc::new(AtomicU64::new(0));
    Pending::default().when_written(record(&now));
    assert_eq!(now.load(Ordering::SeqCst), 1);

    // Written: run with 0 when the queue gets past its bytes, not before.
    let (a, b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let mut pending = Pending::default();
    pending.push(&[&vec![1u8; 4 << 20]], 0);
    let first = Arc::new(AtomicU64::new(0));
    pending.when_written(record(&first));
    pending.push(&[b"after"], 0);
    let second = Arc::new(AtomicU64::new(0));
    pending.when_written(record(&second));
    assert_eq!(pending.write_some(raw(&a)).unwrap(), Progress::Blocked);
    assert_eq!(first.load(Ordering::SeqCst), 0);
    let got = reader(b);
    pending.write_all(raw(&a), Duration::from_secs(10)).unwrap();
    assert_eq!(
        (first.load(Ordering::SeqCst), second.load(Ordering::SeqCst)),
        (1, 1)
    );
    drop(a);
    assert_eq!(got.join().unwrap().len(), (4 << 20) + 5);

    // Dropped: run with the bytes of its own never written, also when the queue itself
    // goes away without a discard.
    let (a, _b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let mut pending = Pending::default();
    pending.push(&[&vec![1u8; 4 << 20]], 0);
    let dropped = Arc::new(AtomicU64::new(0));
    pending.when_written(record(&dropped));
    assert_eq!(pending.write_some(raw(&a)).unwrap(), Progress::Blocked);
    let written = pending.written();
    assert!(written > 0 && written < 4 << 20);
    pending.discard();
    assert_eq!(dropped.load(Ordering::SeqCst), (4 << 20) - written + 1);
    let mut pending = Pending::default();
    pending.push(&[b"never"], 0);
    let gone = Arc::new(AtomicU64::new(0));
    pending.when_written(record(&gone));
    drop(pending);
    assert_eq!(gone.load(Ordering::SeqCst), 6);
}

/// Numbers as 4-byte words: any missing, repeated or reordered piece shows.
fn pattern(from: u32, words: u32) -> Vec<u8> {
    (from..from + words).flat_map(u32::to_be_bytes).collect()
}

fn reader(mut stream: UnixStream) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut got = Vec::new();
        stream.read_to_end(&mut got).unwrap();
        got
    })
}

#[test]
fn memory_then_a_growing_spill_file_then_memory_arrive_in_order_and_give_their_budgets_back() {
    let dir = scratch_dir("order");
    let buffers = buffers(1 << 20, 64 << 20, &dir);
    let (a, b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let output = Output::new(raw(&a));
    let memory = pattern(0, 100_000);
    let spilled = pattern(100_000, 1_000_000);
    let grown = pattern(1_100_000, 500_000);
    let tail = pattern(1_600_000, 1000);
    // Larger than a locked copy: copied outside the lock, then published.
    let handed = output.hand_over(&buffers, &[&memory], 0, Store::Complete);
    assert_eq!(handed.unwrap(), HandOver::Queued);
    let buffered = output.with(|pending| pending.buffered());
    assert_eq!(buffers.response_memory.used(), buffered as u64);
    assert!(buffered > 0, "the socket did not take it all");
    // Over the memory budget: spilled, nothing more charged to memory.
    let handed = output.hand_over(&buffers, &[&spilled], 0, Store::Complete);
    assert_eq!(handed.unwrap(), HandOver::Queued);
    let buffered = output.with(|pending| pending.buffered());
    assert_eq!(buffers.response_memory.used(), buffered as u64);
    assert_eq!(buffers.disk.used(), spilled.len() as u64);
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "the file has no name"
    );
    // The socket is full part-way through: the file grows while it waits (the next list
    // item), then a small tail is queued in memory behind it.
    assert_eq!(output.write_some().unwrap(), Progress::Blocked);
    let handed = output.hand_over(&buffers, &[&grown], 0, Store::Complete);
    assert_eq!(handed.unwrap(), HandOver::Queued);
    assert_eq!(buffers.disk.used(), (spilled.len() + grown.len()) as u64);
    let handed = output.hand_over(&buffers, &[&tail], 0, Store::Complete);
    assert_eq!(handed.unwrap(), HandOver::Queued);
    let reader = reader(b);
    output.write_all(Duration::from_secs(10)).unwrap();
    assert!(output.is_empty());
    drop(a);
    let got = reader.join().unwrap();
    assert_eq!(got.len(), (1_601_000 * 4) as usize);
    assert!(got == pattern(0, 1_601_000), "bytes arrived out of order");
    assert_eq!(buffers.response_memory.used(), 0);
    assert_eq!(
        buffers.disk.used(),
        0,
        "the spill file was closed once sent"
    );
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn a_copy_made_outside_the_lock_is_charged_before_it_is_published_and_exactly_once() {
    let dir = scratch_dir("reserve");
    let buffers = buffers(4 << 20, 0, &dir);
    let (a, b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let fd = raw(&a);
    let first = pattern(0, 200_000);
    let second = pattern(200_000, 300_000);
    let mut pending = Pending::default();
    assert!(pending.try_push(&buffers, &[&first], 0, usize::MAX));
    // The slot takes the charge under the lock...
    assert!(pending.reserve(&buffers, second.len(), usize::MAX));
    let charged = (first.len() + second.len()) as u64;
    assert_eq!(buffers.response_memory.used(), charged);
    assert_eq!(pending.buffered(), first.len(), "not queued yet");
    // ... a second reservation past the per-response limit is refused, charging nothing ...
    assert!(!pending.reserve(&buffers, 1, first.len() + second.len()));
    assert_eq!(buffers.response_memory.used(), charged);
    // ... the loop writes meanwhile, giving back exactly what it wrote ...
    assert_eq!(pending.write_some(fd).unwrap(), Progress::Blocked);
    let written = pending.written();
    assert!(written > 0);
    assert_eq!(buffers.response_memory.used(), charged - written);
    // ... and the copy is published behind what was queued, its charge already taken.
    pending.publish_memory(copy_pieces(&[&second], 0));
    assert_eq!(pending.reserved, 0);
    assert_eq!(buffers.response_memory.used(), pending.buffered() as u64);
    let reader = reader(b);
    pending.write_all(fd, Duration::from_secs(10)).unwrap();
    drop(a);
    assert!(
        reader.join().unwrap() == pattern(0, 500_000),
        "out of order"
    );
    assert_eq!(buffers.response_memory.used(), 0, "given back as written");
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn bytes_appended_after_the_loop_finished_a_spill_range_go_out_as_a_new_range_of_the_file() {
    let dir = scratch_dir("ranges");
    let buffers = buffers(0, 1 << 20, &dir);
    let (a, b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let fd = raw(&a);
    let mut pending = Pending::default();
    let file = SpillFile::create(&buffers).unwrap();
    let first = pattern(0, 1000);
    let mut skip = 0;
    let (start, end, appended) = file.append(&[&first], &mut skip);
    appended.unwrap();
    pending.publish_spill(Arc::clone(&file), start, end);
    // The loop sends the whole range and drops it while the slot appends more.
    assert_eq!(pending.write_some(fd).unwrap(), Progress::Done);
    assert!(pending.spill_target().is_none());
    let second = pattern(1000, 1000);
    let mut skip = 0;
    let (start, end, appended) = file.append(&[&second], &mut skip);
    appended.unwrap();
    assert_eq!((start, end), (4000, 8000));
    pending.publish_spill(Arc::clone(&file), start, end);
    assert_eq!(buffers.disk.used(), 8000);
    drop(file);
    assert_eq!(pending.write_some(fd).unwrap(), Progress::Done);
    assert_eq!(buffers.disk.used(), 0, "closed with its last range");
    drop(a);
    assert!(reader(b).join().unwrap() == pattern(0, 2000));
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn a_full_disk_budget_mid_list_keeps_what_was_spilled_in_order_and_the_rest_is_the_callers() {
    let dir = scratch_dir("budgets");
    let buffers = buffers(0, 300_000, &dir);
    let (a, b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let output = Output::new(raw(&a));
    let parts = [pattern(0, 50_000), pattern(50_000, 50_000)];
    let refs: [&[u8]; 2] = [&parts[0], &parts[1]];
    let handed = output
        .hand_over(&buffers, &refs, 0, Store::Complete)
        .unwrap();
    let HandOver::Full(written) = handed else {
        panic!("the second part cannot fit the disk budget")
    };
    assert_eq!(
        written, 200_000,
        "the first part is queued, the second is not"
    );
    assert_eq!(buffers.disk.used(), 200_000 - output_sent(&output));
    // The caller writes the rest after what is queued (the slot's wait for the client).
    let reader = reader(b);
    output.write_all(Duration::from_secs(10)).unwrap();
    raw(&a)
        .write_all_from(&refs, written, Duration::from_secs(10))
        .unwrap();
    drop(a);
    assert!(
        reader.join().unwrap() == pattern(0, 100_000),
        "out of order"
    );
    assert_eq!(buffers.disk.used(), 0);
    std::fs::remove_dir(&dir).unwrap();
}

/// Bytes of the first hand-over the socket took at once (they were never spilled).
fn output_sent(output: &Output) -> u64 {
    output.with(|pending| match pending.segments.front() {
        Some(Segment::Spill { sent, .. }) => *sent,
        _ => 0,
    })
}

#[test]
fn the_loops_help_never_waits_for_the_slots_lock_and_the_slot_writes_for_it_on_release() {
    let (a, b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let output = Arc::new(Output::new(raw(&a)));
    // The slot holds the lock (mid-hand-over: a spill write may take 100 ms and more).
    let mut state = output.state();
    state
        .pending
        .push(&[b"queued while the loop could not write"], 0);
    output.note_queued(&state);
    let helper = Arc::clone(&output);
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        helper.help_write();
        done.send(()).unwrap();
    });
    finished
        .recv_timeout(Duration::from_secs(20))
        .expect("the loop's help waited for the slot's lock");
    assert!(output.help_wanted.load(Ordering::SeqCst));
    // Letting go of the lock answers the request: the bytes are written at once.
    output.release(state);
    assert!(output.is_empty());
    drop(a);
    assert_eq!(
        reader(b).join().unwrap(),
        b"queued while the loop could not write"
    );
}

#[test]
fn a_writable_edge_seen_with_nothing_queued_is_used_by_the_next_block_the_slot_queues() {
    let dir = scratch_dir("edge");
    let buffers = buffers(1 << 20, 0, &dir);
    let (a, b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let output = Output::new(raw(&a));
    // The loop sees the socket writable while nothing is queued (the slot's block is
    // still being produced): no new edge will come.
    output.help_write();
    assert!(output.help_wanted.load(Ordering::SeqCst));
    // The next block is queued under the lock (small): the request makes the slot write.
    output.with(|pending| assert!(pending.try_push(&buffers, &[b"late"], 0, usize::MAX)));
    assert!(output.is_empty(), "written at once, not left for an edge");
    drop(a);
    assert_eq!(reader(b).join().unwrap(), b"late");
    assert_eq!(buffers.response_memory.used(), 0);
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn an_output_says_it_is_empty_without_its_lock_and_close_gives_everything_back() {
    let dir = scratch_dir("output");
    let buffers = buffers(1000, 1 << 20, &dir);
    let (a, _b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let output = Output::new(raw(&a));
    assert!(output.is_empty());
    // Fill the socket so that what follows is queued.
    let filler = vec![0u8; 1 << 20];
    let handed = output.hand_over(&buffers, &[&filler], 0, Store::Complete);
    assert_eq!(handed.unwrap(), HandOver::Queued);
    assert!(output.with(|pending| pending.try_push(&buffers, &[&[6u8; 1000]], 0, 1000)));
    assert!(!output.is_empty());
    assert!(buffers.disk.used() > 0);
    output.close();
    assert!(output.is_empty());
    assert_eq!(buffers.response_memory.used(), 0);
    assert_eq!(buffers.disk.used(), 0);
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn a_spooled_stream_spills_only_once_called_slow_keeps_spilling_and_refuses_what_passes_its_cap() {
    let dir = scratch_dir("spooled");
    let buffers = buffers(64 << 20, 64 << 20, &dir);
    let (a, b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let output = Output::new(raw(&a));
    let (memory, cap) = (100_000, 3_000_000);
    let keeping_pace = Store::Spooled {
        memory,
        cap,
        spill: false,
    };
    let slow = Store::Spooled {
        memory,
        cap,
        spill: true,
    };
    // Until the client is called slow, what passes the memory share is the caller's: no
    // file, no charge (the slot waits a moment for the client, `exchange::send`).
    let filler = pattern(0, 500_000);
    let mut at = 0;
    while let Some(n) = raw(&a).write_vectored(&[&filler], at).unwrap() {
        at += n; // what the socket takes, as the slot writes first
    }
    assert!(at > 0 && at < filler.len(), "the socket took part of it");
    let handed = output.hand_over(&buffers, &[&filler], at, keeping_pace);
    assert_eq!(
        handed.unwrap(),
        HandOver::Full(at),
        "2 MB pass a 100 kB share"
    );
    assert_eq!(buffers.disk.used(), 0);
    // Nothing is queued, and the full socket does not become writable by a deadline: the
    // slot's wait ends, and the client is called slow.
    assert!(output.is_empty());
    assert!(!writable_by(raw(&a), Instant::now() + Duration::from_millis(1)).unwrap());
    // Called slow: the rest spills.
    let handed = output.hand_over(&buffers, &[&filler], at, slow);
    assert_eq!(handed.unwrap(), HandOver::Queued);
    assert_eq!(buffers.disk.used(), (filler.len() - at) as u64);
    assert!(
        !output.write_all_until(Instant::now()).unwrap(),
        "the client reads nothing"
    );
    // While a spill range is last, later blocks go on into the same file (not into memory,
    // which has room), whatever the caller says: in order, one file.
    let spilled = buffers.disk.used();
    let small = pattern(500_000, 1000);
    let handed = output.hand_over(&buffers, &[&small], 0, keeping_pace);
    assert_eq!(handed.unwrap(), HandOver::Queued);
    assert_eq!(buffers.disk.used(), spilled + 4000);
    assert_eq!(buffers.response_memory.used(), 0);
    let unsent = output.with(|pending| pending.unsent());
    // A block that would pass the cap is refused whole, nothing charged for it: the caller
    // (the slot) writes it after what is queued, waiting for the client.
    let (in_memory, on_disk) = (buffers.response_memory.used(), buffers.disk.used());
    let over = pattern(501_000, (cap as u32 - unsent as u32) / 4 + 1);
    let handed = output.hand_over(&buffers, &[&over], 0, slow);
    assert_eq!(handed.unwrap(), HandOver::Full(0));
    assert_eq!(output.with(|pending| pending.unsent()), unsent);
    assert_eq!(
        (buffers.response_memory.used(), buffers.disk.used()),
        (in_memory, on_disk)
    );
    let reader = reader(b);
    assert!(output
        .write_all_until(Instant::now() + Duration::from_secs(20))
        .unwrap());
    raw(&a)
        .write_all_from(&[&over], 0, Duration::from_secs(10))
        .unwrap();
    drop(a);
    let words = 501_000 + over.len() as u32 / 4;
    assert!(reader.join().unwrap() == pattern(0, words), "out of order");
    assert_eq!(
        (buffers.response_memory.used(), buffers.disk.used()),
        (0, 0)
    );
    // An empty queue takes a small block without a write only within the cap.
    let (a, _b) = UnixStream::pair().unwrap();
    let output = Output::new(raw(&a));
    let tight = Store::Spooled {
        memory,
        cap: 10,
        spill: false,
    };
    assert!(!output.try_queue(&buffers, &[&[1u8; 11]], tight));
    assert!(output.try_queue(&buffers, &[&[1u8; 10]], tight));
    output.close();
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn a_stream_read_a_little_slower_than_it_is_produced_keeps_its_spill_files_within_twice_its_cap() {
    // A spill range stays the queue's last segment as long as the client never catches up,
    // so the stream's blocks keep going to disk; the unsent bytes stay under the cap, but
    // the file must not grow past it with bytes already sent (ADR 0024).
    let dir = scratch_dir("bounded");
    let buffers = buffers(64 << 20, 1 << 30, &dir);
    let (a, mut b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    let output = Output::new(raw(&a));
    let cap: u64 = 4 << 20;
    let slow = Store::Spooled {
        memory: 0,
        cap,
        spill: true,
    };
    // The socket is full, and a backlog larger than it waits: the reader never catches up.
    let filler = pattern(0, 250_000);
    let mut at = 0;
    while let Some(n) = raw(&a).write_vectored(&[&filler], at).unwrap() {
        at += n;
    }
    assert!(at < filler.len(), "the socket took part of it");
    let handed = output.hand_over(&buffers, &[&filler], at, slow);
    assert_eq!(handed.unwrap(), HandOver::Queued);
    // Blocks of 16 KiB, of which the client reads 99% before the next one comes.
    let (block_words, read_per_block) = (4096u32, 16_384 * 99 / 100);
    let mut next = 250_000u32;
    let mut got = Vec::new();
    let mut buf = vec![0u8; read_per_block];
    let mut most = 0;
    for _ in 0..1500 {
        let block = pattern(next, block_words);
        next += block_words;
        let handed = output.hand_over(&buffers, &[&block], 0, slow);
        assert_eq!(handed.unwrap(), HandOver::Queued, "within the cap");
        let mut want = read_per_block;
        while want > 0 {
            match b.read(&mut buf[..want]) {
                Ok(n) => {
                    got.extend_from_slice(&buf[..n]);
                    want -= n;
                }
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(err) => panic!("{err}"),
            }
        }
        most = most.max(buffers.disk.used());
        assert!(
            output.with(|pending| pending.unsent()) > 0,
            "the client never catches up"
        );
    }
    assert!(
        most <= 2 * cap,
        "the spill files held {most} bytes, more than twice the cap"
    );
    assert!(u64::from(next) * 4 > 5 * cap, "the stream passed its cap");
    b.set_nonblocking(false).unwrap();
    let rest = reader(b);
    output.write_all(Duration::from_secs(10)).unwrap();
    drop(a);
    got.extend(rest.join().unwrap());
    assert!(got == pattern(0, next), "bytes arrived out of order");
    assert_eq!(buffers.disk.used(), 0, "every file closed once sent");
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn over_tls_the_output_is_finished_only_once_the_sessions_backlog_is_written() {
    use crate::tls::conn::tests::{connected, set_buffer};
    let (conn, mut client) = connected();
    set_buffer(conn.fd(), libc::SO_SNDBUF, 4096);
    let link = Link::Tls(crate::transport::TlsLink::new(&conn));
    let output = Output::new(link);
    // The owner's own write, straight from its memory, leaves records in the session; the
    // queued rest ends in a block of almost 64 KiB, which the socket cannot take at once.
    let body = vec![b'z'; 4 * 65536 - 100];
    let mut written = 0;
    while let Some(n) = link.write_vectored(&[&body], written).unwrap() {
        written += n;
    }
    assert!(link.wants_write() && output.is_empty(), "not noted yet");
    output.note_backlog();
    assert!(!output.is_empty(), "the backlog is output not finished");
    let dir = scratch_dir("tls");
    let buffers = buffers(1 << 20, 0, &dir);
    assert_eq!(
        output
            .hand_over(&buffers, &[&body], written, Store::Complete)
            .unwrap(),
        HandOver::Queued
    );
    // Plaintext queued behind the backlog; the loop's writes seal it as the client reads.
    let mut blocked = 0;
    loop {
        match output.write_some().unwrap() {
            Progress::Done => break,
            Progress::Blocked => {
                blocked += 1;
                assert!(!output.is_empty());
                assert!(client.pull());
            }
        }
    }
    assert!(blocked > 0);
    assert!(output.is_empty() && !link.wants_write());
    while client.got.len() < body.len() {
        assert!(client.pull());
    }
    assert!(client.got == body, "whole and in order");
    std::fs::remove_dir_all(&dir).unwrap();
}
