//! Locking a `std::sync::Mutex` whose holders never leave its data half-changed.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`. A holder that panicked left the data as consistent as any other (every holder
/// here changes it in single steps), so a poisoned lock is used as it is rather than
/// spreading the panic to every task that shares it.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
