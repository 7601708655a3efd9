//! Python's view of our errors: one exception per thing a caller can do about it, and a
//! Rust panic caught before it reaches the interpreter.

use std::panic::{AssertUnwindSafe, catch_unwind};

use nanobot_session_store::SessionError;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyOSError, PyValueError};
use pyo3::prelude::*;

create_exception!(
    _native,
    NanobotStoreError,
    PyException,
    "Base of every error nanobot_rs raises."
);
create_exception!(
    _native,
    SessionConflictError,
    NanobotStoreError,
    "Another writer changed the session since this copy was loaded or saved; nothing was \
     written. Load it again (or `rebase`) and apply the change again."
);
create_exception!(
    _native,
    SessionBusyError,
    NanobotStoreError,
    "Another turn holds the session (in this process or another); nothing was written. Try \
     again when it has finished."
);
create_exception!(
    _native,
    SessionDamagedError,
    NanobotStoreError,
    "The stored data is not what the store may touch (a file of another key, a foreign \
     namespace); nothing was changed."
);
create_exception!(
    _native,
    StoreIOError,
    NanobotStoreError,
    "The files could not be read or written; `__cause__` is the OSError."
);
create_exception!(
    _native,
    InternalError,
    NanobotStoreError,
    "A bug in nanobot_rs (a Rust panic, caught): the call did nothing more; please report it."
);

/// `error` as the Python exception a caller can act on, its cause kept.
pub(crate) fn to_py(py: Python<'_>, error: SessionError) -> PyErr {
    let message = error.to_string();
    match error {
        SessionError::Conflict { .. } => SessionConflictError::new_err(message),
        SessionError::Busy { .. } => SessionBusyError::new_err(message),
        SessionError::InvalidKey { .. } | SessionError::InvalidPointer { .. } => {
            PyValueError::new_err(message)
        }
        SessionError::KeyMismatch { .. } | SessionError::InvalidStorage { .. } => {
            SessionDamagedError::new_err(message)
        }
        SessionError::Io { source, path, .. } => {
            let raised = StoreIOError::new_err(message);
            let cause = match source.raw_os_error() {
                Some(code) => {
                    PyOSError::new_err((code, source.to_string(), path.display().to_string()))
                }
                None => PyOSError::new_err(source.to_string()),
            };
            raised.set_cause(py, Some(cause));
            raised
        }
        _ => NanobotStoreError::new_err(message),
    }
}

/// Runs `work` without the GIL, so other Python threads run while it waits on the disk,
/// and turns a panic into [`InternalError`] instead of tearing through the interpreter.
pub(crate) fn detached<T: Send>(
    py: Python<'_>,
    work: impl FnOnce() -> Result<T, SessionError> + Send,
) -> PyResult<T> {
    match py.detach(|| catch_unwind(AssertUnwindSafe(work))) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(to_py(py, error)),
        Err(panic) => Err(panicked(panic.as_ref())),
    }
}

/// [`InternalError`] for a caught panic, with its message when it has one.
pub(crate) fn panicked(panic: &(dyn std::any::Any + Send)) -> PyErr {
    let said = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into());
    InternalError::new_err(format!("nanobot_rs failed inside (a Rust panic): {said}"))
}

/// Adds the exception classes to the module.
pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    module.add("NanobotStoreError", py.get_type::<NanobotStoreError>())?;
    module.add(
        "SessionConflictError",
        py.get_type::<SessionConflictError>(),
    )?;
    module.add("SessionBusyError", py.get_type::<SessionBusyError>())?;
    module.add("SessionDamagedError", py.get_type::<SessionDamagedError>())?;
    module.add("StoreIOError", py.get_type::<StoreIOError>())?;
    module.add("InternalError", py.get_type::<InternalError>())?;
    Ok(())
}
