//! Fuzz target: the invariants of `tines_proto::fuzzing::check_websocket_frames` on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tines_proto::fuzzing::check_websocket_frames(data));
