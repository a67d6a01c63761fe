//! The worker's ready hook (`WorkerSpec::on_ready`, how a worker tells its master it can
//! serve) runs once the whole set-up is done: the app threads exist when it runs, and a
//! set-up failure (an access log that cannot be opened) returns an error without running it.

mod support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use support::{exchange, test_config, Echo, TestServer};
use tines_server::worker::ReadyHook;
use tines_server::{run_worker, Mpm, Scoreboard, WorkerSpec};

/// The ids of this process's threads (`/proc/self/task`): a thread is listed from the moment
/// it is created (its name is set later, by the thread itself, so names cannot be relied on).
fn thread_ids() -> BTreeSet<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| Some(task.ok()?.file_name().to_string_lossy().into_owned()))
        .collect()
}

/// How many threads were created between the worker's start and its ready hook.
fn threads_created_before_the_ready_hook(mpm: Mpm) -> usize {
    let (sender, receiver) = mpsc::channel();
    let sender = Mutex::new(sender);
    let hook: ReadyHook = Box::new(move || {
        sender.lock().unwrap().send(thread_ids()).unwrap();
    });
    let config = test_config(mpm);
    assert_eq!(config.threads, 2);
    let before = thread_ids();
    let server = TestServer::start_with_ready_hook(config, Echo, Some(hook));
    let at_ready = receiver.recv_timeout(Duration::from_secs(20)).unwrap();
    let mut stream = server.connect();
    let response = exchange(&mut stream, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    assert_eq!(response.status, 200);
    assert!(
        receiver.try_recv().is_err(),
        "the hook runs once, not per request"
    );
    drop(stream);
    server.stop();
    at_ready.difference(&before).count()
}

// One test: the harness runs tests on threads of this process, which the counts would see.
#[test]
fn the_ready_hook_runs_after_the_app_threads_started_and_not_after_a_failed_set_up() {
    // The worker's own thread (TestServer runs it on one) and its two app threads.
    assert_eq!(threads_created_before_the_ready_hook(Mpm::Thread), 3);
    assert_eq!(threads_created_before_the_ready_hook(Mpm::Event), 3);
    a_worker_whose_access_log_cannot_be_opened_fails_without_reporting_ready();
}

fn a_worker_whose_access_log_cannot_be_opened_fails_without_reporting_ready() {
    let called = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&called);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let scoreboard = Arc::new(Scoreboard::new(1, 1).unwrap());
    let spec = WorkerSpec {
        config: tines_server::WorkerConfig {
            access_log: Some("/nonexistent-tines-directory/access.log".to_string()),
            ..test_config(Mpm::Prefork)
        },
        listeners: vec![std::os::fd::IntoRawFd::into_raw_fd(listener)],
        tls_listeners: Vec::new(),
        h2c_listeners: Vec::new(),
        scoreboard,
        slot: 0,
        life_fd: None,
        on_ready: Some(Box::new(move || flag.store(true, Ordering::SeqCst))),
        on_draining: None,
        standby: None,
        rate_table: None,
        client_connections: None,
    };
    let error = run_worker(Arc::new(Echo), spec).unwrap_err();
    assert!(
        error.to_string().contains("cannot open access log"),
        "{error}"
    );
    assert!(!called.load(Ordering::SeqCst));
}
