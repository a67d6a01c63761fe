//! State that only the GIL guards: the request objects' mutable parts (`wsgi.input`'s
//! exchange, `start_response`'s head).
//!
//! Why not a `Mutex`, or pyo3's borrow flag: both are atomic read-modify-writes (a locked
//! compare-and-swap to take, a locked exchange or subtraction to give back), about 6 ns each
//! on this VM, and a hello-world request took 47 of them, 26 in these two objects (callgrind's
//! instruction-level counts, perf's samples piling up behind each `lock cmpxchg`): about a
//! sixth of the server's own user-space time per request. Every access here already holds the
//! GIL, which orders them; a flag in a plain `Cell` is enough to refuse (or wait out) a second
//! user while the first has released the GIL for a blocking read or write.
//!
//! Soundness rests on the GIL: this crate is built for CPython's stable ABI (`abi3`), which
//! free-threaded CPython builds do not load, so holding a `Python` token means holding the
//! GIL. Every method takes one.

use std::cell::{Cell, Ref, RefCell, RefMut, UnsafeCell};
use std::sync::{Condvar, Mutex};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// A `RefCell` for state touched only with the GIL held. A second borrow that conflicts
/// (another thread while the first released the GIL, or re-entry) is an error, as pyo3's
/// own borrow flag makes it.
pub struct GilCell<T>(RefCell<T>);

// SAFETY: the cell and its borrow flag are touched only through `borrow`/`borrow_mut`, which
// need a `Python` token, so only by the thread holding the GIL; the GIL's release and
// acquisition order those accesses between threads (see the module doc). `T: Send`: the
// value may be used, and dropped, by whichever thread holds the GIL.
unsafe impl<T: Send> Sync for GilCell<T> {}

impl<T> GilCell<T> {
    pub fn new(value: T) -> Self {
        GilCell(RefCell::new(value))
    }

    pub fn borrow<'a>(&'a self, _py: Python<'a>) -> PyResult<Ref<'a, T>> {
        self.0
            .try_borrow()
            .map_err(|_| PyRuntimeError::new_err("already in use by another thread"))
    }

    pub fn borrow_mut<'a>(&'a self, _py: Python<'a>) -> PyResult<RefMut<'a, T>> {
        self.0
            .try_borrow_mut()
            .map_err(|_| PyRuntimeError::new_err("already in use by another thread"))
    }
}

/// A value lent to one user at a time, who may release the GIL while holding it (a blocking
/// read or write); another thread that wants it meanwhile waits, with the GIL released, until
/// it comes back. Taking and giving it back are plain loads and stores under the GIL; the
/// mutex and condition variable are touched only when someone waits.
pub struct GilLock<T> {
    value: UnsafeCell<T>,
    /// Lent out (a [`Lent`] guard is alive).
    lent: Cell<bool>,
    /// Threads waiting for it to come back.
    waiters: Cell<usize>,
    /// Counts returns while someone waits: a waiter sleeps until it moves.
    returns: Mutex<u64>,
    returned: Condvar,
}

// SAFETY: `value`, `lent` and `waiters` are touched only with the GIL held (every path takes
// a `Python` token; the guard gives access only while alive, and is neither `Send` nor
// movable into `Python::detach`'s closure), or, for `value`, through the one `&mut` a guard
// hands out, which the `lent` flag makes exclusive even while its holder has released the
// GIL. `returns` and `returned` are a mutex and a condition variable.
unsafe impl<T: Send> Sync for GilLock<T> {}

impl<T> GilLock<T> {
    pub fn new(value: T) -> Self {
        GilLock {
            value: UnsafeCell::new(value),
            lent: Cell::new(false),
            waiters: Cell::new(0),
            returns: Mutex::new(0),
            returned: Condvar::new(),
        }
    }

    /// Takes the value, waiting (GIL released) while another thread has it.
    pub fn lend<'a>(&'a self, py: Python<'a>) -> Lent<'a, T> {
        while self.lent.get() {
            self.wait(py);
        }
        self.lent.set(true);
        Lent {
            lock: self,
            _not_send: std::marker::PhantomData,
        }
    }

    fn wait(&self, py: Python<'_>) {
        self.waiters.set(self.waiters.get() + 1);
        // Read with the GIL held, so a return that happens once the GIL is released moves
        // it: the wait below then does not sleep.
        let seen = *self.returns.lock().unwrap_or_else(|p| p.into_inner());
        let (returns, returned) = (&self.returns, &self.returned);
        py.detach(|| {
            let mut returns = returns.lock().unwrap_or_else(|p| p.into_inner());
            while *returns == seen {
                returns = returned.wait(returns).unwrap_or_else(|p| p.into_inner());
            }
        });
        self.waiters.set(self.waiters.get() - 1);
    }
}

/// The value while lent: given back when dropped (always with the GIL held: the guard
/// cannot cross into `Python::detach`).
pub struct Lent<'a, T> {
    lock: &'a GilLock<T>,
    /// Not `Send`: it must be dropped by the thread that holds the GIL (and so cannot be
    /// moved into `Python::detach`'s closure).
    _not_send: std::marker::PhantomData<*const ()>,
}

impl<T> std::ops::Deref for Lent<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the `lent` flag makes this guard the only access to the value.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> std::ops::DerefMut for Lent<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Lent<'_, T> {
    fn drop(&mut self) {
        self.lock.lent.set(false);
        if self.lock.waiters.get() > 0 {
            *self.lock.returns.lock().unwrap_or_else(|p| p.into_inner()) += 1;
            self.lock.returned.notify_all();
        }
    }
}
