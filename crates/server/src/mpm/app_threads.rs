//! The pool's app threads (`pool`: the thread and event MPMs): starting them (named
//! `tines-app-N`), stopping them, and a lock that survives a panicked holder.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::control::StopReason;
use crate::shared::WorkerShared;
use crate::App;

/// Locks `mutex`; a thread that panicked while holding it left data that is still usable
/// (queues of connections), so poisoning is ignored.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// Starts `count` app threads, each running `body(index, app, worker, shared)`; `index` is
/// the thread's scoreboard sub-slot.
pub(crate) fn spawn<S: Send + Sync + 'static>(
    count: usize,
    app: &Arc<dyn App>,
    worker: &Arc<WorkerShared>,
    shared: &Arc<S>,
    body: fn(usize, Arc<dyn App>, Arc<WorkerShared>, Arc<S>),
) -> io::Result<Vec<JoinHandle<()>>> {
    (0..count)
        .map(|index| {
            let (app, worker, shared) = (Arc::clone(app), Arc::clone(worker), Arc::clone(shared));
            std::thread::Builder::new()
                .name(format!("tines-app-{index}"))
                .spawn(move || body(index, app, worker, shared))
        })
        .collect()
}

/// Waits for the app threads after the loop returned `result` (`shutdown` already told
/// them to stop), except on a quick stop, where the process exits without waiting.
pub(crate) fn join(threads: &mut Vec<JoinHandle<()>>, result: &io::Result<StopReason>) {
    if matches!(result, Ok(reason) if reason.is_immediate()) {
        return;
    }
    for thread in threads.drain(..) {
        let _ = thread.join();
    }
}
