//! Monotonic time on the companion, as nanoseconds since an origin the shell chooses: the core's
//! own type, so one clock type runs from the core through the supervisor to the bridges and
//! nothing converts between them. The state machine never reads a clock; every entry point
//! takes `now`.

/// A point on the companion's monotonic clock, nanoseconds since the shell's origin
/// ([`halo_core::time::Nanos`]).
pub use halo_core::time::Nanos as Mono;
