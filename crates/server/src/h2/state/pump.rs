//! Moving one stream's DATA (the drive's per-stream step): what came in to its request
//! bytes, what its exchange wrote to `h2` as far as its window allows, and the resets either
//! side made. It must not touch the connection (the drive polls it).

use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::Reason;

use super::super::synth::{chunk_size_line, last_chunk};
use super::super::transcode::Out;
use super::super::Readiness;
use super::{Segment, StreamState};

/// Applies what the transcoder read to the stream's `h2` handles.
pub(super) fn apply(stream: &mut StreamState, events: &mut Vec<Out>) {
    for event in events.drain(..) {
        match event {
            Out::Informational(response) => {
                if let Some(respond) = stream.respond.as_mut() {
                    let _ = respond.send_informational(response);
                }
            }
            Out::Head(response, end) => {
                let Some(respond) = stream.respond.as_mut() else {
                    continue;
                };
                match respond.send_response(response, end) {
                    Ok(send) if !end => stream.send = Some(send),
                    Ok(_) => {
                        stream.out_end = true;
                        stream.complete = true;
                    }
                    Err(_) => stream.reset_with(Reason::INTERNAL_ERROR),
                }
            }
            Out::Data(bytes) => {
                stream.out_len += bytes.len();
                stream.out.push_back(bytes);
            }
            Out::Trailers(trailers) => {
                stream.trailers = Some(trailers);
                stream.out_end = true;
            }
            Out::End => stream.out_end = true,
        }
    }
}

/// Moves one stream's DATA: what came in to its request bytes, what its exchange wrote to
/// `h2` as far as its window allows; notices resets.
pub(super) fn pump_stream(
    stream: &mut StreamState,
    cx: &mut Context<'_>,
    budget: usize,
    send_timeout: Duration,
) {
    if !stream.recv_done && !stream.reset {
        if let Some(recv) = stream.recv.as_mut() {
            loop {
                match recv.poll_data(cx) {
                    Poll::Ready(Some(Ok(data))) => {
                        if data.is_empty() {
                            continue;
                        }
                        if stream.chunked {
                            stream.inbound.push_back(Segment {
                                bytes: Bytes::from(chunk_size_line(data.len())),
                                flow: false,
                            });
                        }
                        stream.inbound.push_back(Segment {
                            bytes: data,
                            flow: true,
                        });
                        if stream.chunked {
                            stream.inbound.push_back(Segment {
                                bytes: Bytes::from_static(b"\r\n"),
                                flow: false,
                            });
                        }
                        stream.pending.readable = true;
                    }
                    Poll::Ready(Some(Err(_))) => {
                        stream.reset = true;
                        stream.pending = Readiness {
                            readable: true,
                            writable: true,
                        };
                        break;
                    }
                    Poll::Ready(None) => {
                        match recv.poll_trailers(cx) {
                            Poll::Ready(Ok(trailers)) => {
                                if stream.chunked {
                                    stream.inbound.push_back(Segment {
                                        bytes: Bytes::from(last_chunk(trailers.as_ref())),
                                        flow: false,
                                    });
                                }
                                stream.recv_done = true;
                                stream.pending.readable = true;
                            }
                            Poll::Ready(Err(_)) => {
                                stream.reset = true;
                                stream.pending = Readiness {
                                    readable: true,
                                    writable: true,
                                };
                            }
                            Poll::Pending => {}
                        }
                        break;
                    }
                    Poll::Pending => break,
                }
            }
        }
    }
    if !stream.reset && !stream.complete {
        let reset = if let Some(send) = stream.send.as_mut() {
            send.poll_reset(cx).is_ready()
        } else if let Some(respond) = stream.respond.as_mut() {
            respond.poll_reset(cx).is_ready()
        } else {
            false
        };
        if reset {
            stream.reset = true;
            stream.out.clear();
            stream.out_len = 0;
            stream.event(true, true);
        }
    }
    if stream.reset {
        return;
    }
    let Some(send) = stream.send.as_mut() else {
        return;
    };
    let before = stream.out_len;
    if stream.out_len > 0 {
        let mut capacity = send.capacity();
        while capacity > 0 {
            let Some(front) = stream.out.front_mut() else {
                break;
            };
            let chunk = if front.len() <= capacity {
                stream.out.pop_front().expect("the front is there")
            } else {
                front.split_to(capacity)
            };
            capacity -= chunk.len();
            stream.out_len -= chunk.len();
            if let Some(until) = stream.detached_until.as_mut() {
                *until = Instant::now() + send_timeout;
            }
            // The last DATA of a complete response without trailers carries END_STREAM.
            let last = stream.out_len == 0 && stream.out_end && stream.trailers.is_none();
            if send.send_data(chunk, last).is_err() {
                stream.reset_with(Reason::INTERNAL_ERROR);
                return;
            }
            stream.complete |= last;
        }
        if stream.out_len > 0 {
            send.reserve_capacity(stream.out_len);
        }
    }
    if stream.out_len == 0 && stream.out_end && !stream.complete {
        let sent = match stream.trailers.take() {
            Some(trailers) => send.send_trailers(trailers),
            None => send.send_data(Bytes::new(), true),
        };
        stream.complete = true;
        if sent.is_err() {
            stream.reset = true;
        }
    }
    if stream.want_writable && (stream.out_len < before || !stream.wants_write()) {
        let room = if stream.flush_waiting {
            !stream.wants_write()
        } else {
            stream.out_len < budget
        };
        if room {
            stream.want_writable = false;
            stream.event(false, true);
        }
    }
}
