//! Replays the fuzz corpora (`fuzz/corpus/<target>/`, and any crash in `fuzz/artifacts/`)
//! through the same invariant checks the cargo-fuzz targets run, on stable, in `make test`.
//! The request corpus (`tests/http-corpus`) is replayed through every check too.

use std::path::{Path, PathBuf};

use tines_proto::fuzzing::{
    check_chunked, check_proxy_header, check_request_head, check_response_header,
    check_websocket_frames,
};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    paths
}

fn replay(target: &str, check: fn(&[u8])) -> usize {
    let mut count = 0;
    for sub in ["corpus", "artifacts"] {
        for path in files(&root().join("fuzz").join(sub).join(target)) {
            let data = std::fs::read(&path).unwrap();
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(outcome.is_ok(), "{} breaks an invariant", path.display());
            count += 1;
        }
    }
    count
}

#[test]
fn replays_the_request_head_corpus() {
    assert!(
        replay("request_head", check_request_head) > 0,
        "fuzz/corpus/request_head is empty"
    );
}

#[test]
fn replays_the_chunked_corpus() {
    assert!(
        replay("chunked", check_chunked) > 0,
        "fuzz/corpus/chunked is empty"
    );
}

#[test]
fn replays_the_websocket_frames_corpus() {
    assert!(
        replay("websocket_frames", check_websocket_frames) > 0,
        "fuzz/corpus/websocket_frames is empty"
    );
}

#[test]
fn replays_the_response_header_corpus() {
    assert!(
        replay("response_header", check_response_header) > 0,
        "fuzz/corpus/response_header is empty"
    );
}

#[test]
fn replays_the_proxy_header_corpus() {
    assert!(
        replay("proxy_header", check_proxy_header) > 0,
        "fuzz/corpus/proxy_header is empty"
    );
}

#[test]
fn the_request_corpus_holds_every_invariant() {
    for kind in ["valid", "invalid"] {
        for path in files(&root().join("tests/http-corpus").join(kind)) {
            if path.extension().is_some_and(|e| e == "http") {
                let data = std::fs::read(&path).unwrap();
                check_request_head(&data);
                check_response_header(&data);
                check_proxy_header(&data);
                let mut seeded = vec![3u8];
                seeded.extend_from_slice(&data);
                check_chunked(&seeded);
            }
        }
    }
}
