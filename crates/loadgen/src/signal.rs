//! Ctrl-C for the length of a run.
//!
//! Owns: a SIGINT handler that only sets a flag (async-signal-safe), installed
//! with `sigaction` for the run and the previous action put back afterwards,
//! so that inside Python (`tines bench`) the interpreter's own handler is
//! restored and no KeyboardInterrupt is left pending.

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_signal: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// Whether SIGINT arrived since the guard was installed.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Restores the previous SIGINT action when dropped.
pub struct SigintGuard {
    previous: libc::sigaction,
    installed: bool,
}

impl SigintGuard {
    /// Installs the flag-setting handler.
    pub fn install() -> SigintGuard {
        INTERRUPTED.store(false, Ordering::Relaxed);
        // SAFETY: sigaction structs are plain data; zeroed is a valid value, and the
        // handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            action.sa_flags = 0;
            let mut previous: libc::sigaction = std::mem::zeroed();
            let installed = libc::sigaction(libc::SIGINT, &action, &mut previous) == 0;
            SigintGuard {
                previous,
                installed,
            }
        }
    }
}

impl Drop for SigintGuard {
    fn drop(&mut self) {
        if self.installed {
            // SAFETY: puts back the action sigaction returned to us.
            unsafe {
                libc::sigaction(libc::SIGINT, &self.previous, std::ptr::null_mut());
            }
        }
    }
}
