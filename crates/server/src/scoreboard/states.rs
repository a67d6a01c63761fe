//! The named states a slot stores in an atomic: [`WorkerState`] and [`ExitReason`], and
//! [`slot_enum!`], the macro that declares such an enum with its lower-case names (one line per
//! value, variant and name).

/// Declares a `#[repr(u32)]` enum stored in a scoreboard atomic, with its lower-case names:
/// `ALL` (in value order), `from_u32` (an unknown value reads as the first variant, so a
/// slot written by a newer build never panics an older reader), `name` and `from_name`. One
/// declaration per enum keeps the value, the variant and the name Python sees on one line.
macro_rules! slot_enum {
    (
        $(#[$meta:meta])*
        pub enum $enum:ident {
            $( $(#[$variant_meta:meta])* $variant:ident = $value:literal => $name:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u32)]
        pub enum $enum {
            $( $(#[$variant_meta])* $variant = $value, )+
        }

        impl $enum {
            /// Every value, in declaration order.
            pub const ALL: &'static [$enum] = &[$($enum::$variant),+];

            /// The value stored in the atomic (unknown values read as the first variant).
            pub(crate) fn from_u32(value: u32) -> Self {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|candidate| *candidate as u32 == value)
                    .unwrap_or(Self::ALL[0])
            }

            /// The lower-case name used in Python, the log and the status output.
            pub fn name(self) -> &'static str {
                match self {
                    $( $enum::$variant => $name, )+
                }
            }

            /// The value named `name`, if there is one.
            pub fn from_name(name: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|candidate| candidate.name() == name)
            }
        }
    };
}
pub(crate) use slot_enum;

slot_enum! {
    /// What a worker is doing, as published in its slot (Apache's `SERVER_*` states, ours
    /// named; the module doc says when each holds).
    pub enum WorkerState {
        /// No worker owns the slot.
        Free = 0 => "free",
        /// Forked, loading the app.
        Booting = 1 => "booting",
        /// No request, no connection.
        Idle = 2 => "idle",
        /// Running a request (thread/event: at least one app thread is).
        Busy = 3 => "busy",
        /// Draining before exit (graceful stop or recycling).
        Stopping = 4 => "stopping",
        /// No request; a connection waits for its first request, is part-way through a request
        /// head, or has a body read ahead.
        Reading = 5 => "reading",
        /// No request; only idle keep-alive connections (or output the loop finishes).
        KeepAlive = 6 => "keepalive",
        /// A standby (`standby_workers`): booted, accepting nothing until it is promoted.
        Standby = 7 => "standby",
    }
}

slot_enum! {
    /// Why a worker will exit or exited: one list for the log, the status output and metrics.
    /// Kept in the slot after the worker is gone, until the slot is claimed again.
    pub enum ExitReason {
        /// No reason recorded (yet).
        None = 0 => "none",
        /// Exited with a non-zero status on its own.
        Crash = 1 => "crash",
        /// Killed by a signal the master did not send.
        Signal = 2 => "signal",
        /// Served its `max_requests` (the worker decides).
        MaxRequests = 3 => "max_requests",
        /// Above `max_worker_memory` (the master decides).
        Memory = 4 => "memory",
        /// Reached its soft CPU time limit, SIGXCPU (the worker decides).
        CpuLimit = 5 => "cpu_limit",
        /// A request held an app thread past `request_timeout` (the master decides).
        RequestTimeout = 6 => "request_timeout",
        /// Not ready within `boot_timeout` (the master decides).
        BootTimeout = 7 => "boot_timeout",
        /// A spare worker retired by the pool (the master decides).
        IdleRetire = 8 => "idle_retire",
        /// Replaced by a reload (the master decides).
        Reload = 9 => "reload",
        /// Stopped with the server (the master decides).
        Stop = 10 => "stop",
    }
}
