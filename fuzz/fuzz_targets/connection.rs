//! Fuzz target: one whole connection (state machine, exchange, body decoding, framing,
//! keep-alive, pipelining) driven over a socketpair with an echo app, fed arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tines_server::fuzzing::drive_connection(data));
