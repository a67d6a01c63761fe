//! Replays the `connection` fuzz corpus (and any crash found) through
//! `tines_server::fuzzing::drive_connection` on stable, in `make test`; and the request
//! corpus (`tests/http-corpus`) too, each case as one whole connection.

use std::path::{Path, PathBuf};

use tines_server::fuzzing::drive_connection;

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

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn replays_the_connection_corpus() {
    let mut count = 0;
    for sub in ["corpus", "artifacts"] {
        for path in files(&root().join("fuzz").join(sub).join("connection")) {
            drive_connection(&std::fs::read(&path).unwrap());
            count += 1;
        }
    }
    assert!(count > 0, "fuzz/corpus/connection is empty");
}

#[test]
fn drives_every_request_corpus_case_as_a_connection() {
    for kind in ["valid", "invalid"] {
        for path in files(&root().join("tests/http-corpus").join(kind)) {
            if path.extension().is_some_and(|e| e == "http") {
                drive_connection(&std::fs::read(&path).unwrap());
            }
        }
    }
}
