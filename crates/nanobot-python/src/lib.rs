//! The `nanobot_rs._native` extension module behind the `nanobot-rs` wheel: nanobot-ai's
//! session store protocol on our append-only file store, and memory search. The Python
//! package (`python/nanobot_rs`) wraps it in the classes nanobot-ai expects; see the README.

mod convert;
mod errors;
#[cfg(feature = "search")]
mod search;
mod sessions;

use pyo3::prelude::*;

/// The module: its classes, its exceptions, and what it was built from.
#[pymodule]
#[pyo3(name = "_native")]
fn native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(module)?;
    module.add_class::<sessions::SessionFiles>()?;
    module.add_class::<sessions::TurnLease>()?;
    #[cfg(feature = "search")]
    module.add_class::<search::MemorySearch>()?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    module.add_function(wrap_pyfunction!(panic_for_tests, module)?)?;
    Ok(())
}

/// Panics inside Rust on purpose, so the tests can show a panic reaches Python as
/// `InternalError` and the interpreter lives on.
#[pyfunction]
#[pyo3(name = "_panic_for_tests")]
fn panic_for_tests(py: Python<'_>) -> PyResult<()> {
    errors::detached(py, || -> Result<(), nanobot_session_store::SessionError> {
        #[allow(clippy::panic)]
        {
            panic!("the panic the tests asked for")
        }
    })
}
