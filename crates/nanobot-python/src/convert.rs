//! JSON values between Python and Rust, as Python's `json` module maps them, so a message
//! survives the round trip exactly as nanobot-ai's own store would keep it.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

/// How deep a value may nest before it is refused (Python's `json` would recurse as far;
/// a cycle must end in an error, not a stack overflow).
const MAX_DEPTH: usize = 512;

/// `value` as JSON: dict, list, tuple, str, int, float, bool and None, as `json.dumps` takes
/// them (dict keys must be strings; NaN and the infinities are refused, as JSON has none).
pub(crate) fn to_json(value: &Bound<'_, PyAny>) -> PyResult<Value> {
    to_json_at(value, 0)
}

/// A dict as a JSON object (see [`to_json`]).
pub(crate) fn to_object(value: &Bound<'_, PyAny>) -> PyResult<Map<String, Value>> {
    match to_json(value)? {
        Value::Object(map) => Ok(map),
        _ => Err(PyTypeError::new_err(format!(
            "expected a dict, got {}",
            type_name(value)
        ))),
    }
}

fn to_json_at(value: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "a value nests deeper than {MAX_DEPTH} levels (a cycle?); JSON cannot hold it"
        )));
    }
    if value.is_none() {
        return Ok(Value::Null);
    }
    // bool before int: Python's bool is an int.
    if let Ok(flag) = value.cast::<PyBool>() {
        return Ok(Value::Bool(flag.is_true()));
    }
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(Value::String(text.to_str()?.to_owned()));
    }
    if let Ok(int) = value.cast::<PyInt>() {
        return int_to_json(int);
    }
    if let Ok(float) = value.cast::<PyFloat>() {
        return Number::from_f64(float.value())
            .map(Value::Number)
            .ok_or_else(|| PyValueError::new_err("NaN and infinity have no JSON form"));
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        let mut map = Map::new();
        for (key, item) in dict.iter() {
            let key = key.cast::<PyString>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "a dict key must be a str to be stored as JSON, not {}",
                    type_name(&key)
                ))
            })?;
            map.insert(key.to_str()?.to_owned(), to_json_at(&item, depth + 1)?);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(list) = value.cast::<PyList>() {
        return array(list.iter(), depth);
    }
    if let Ok(tuple) = value.cast::<PyTuple>() {
        return array(tuple.iter(), depth);
    }
    Err(PyTypeError::new_err(format!(
        "Object of type {} is not JSON serializable",
        type_name(value)
    )))
}

/// A list's or a tuple's items as a JSON array.
fn array<'py>(items: impl Iterator<Item = Bound<'py, PyAny>>, depth: usize) -> PyResult<Value> {
    items
        .map(|item| to_json_at(&item, depth + 1))
        .collect::<PyResult<_>>()
        .map(Value::Array)
}

fn int_to_json(int: &Bound<'_, PyInt>) -> PyResult<Value> {
    if let Ok(small) = int.extract::<i64>() {
        return Ok(Value::from(small));
    }
    if let Ok(big) = int.extract::<u64>() {
        return Ok(Value::from(big));
    }
    // Past 64 bits: serde_json keeps arbitrary precision as the decimal text.
    let text = int.str()?.to_str()?.to_owned();
    serde_json::from_str::<Number>(&text)
        .map(Value::Number)
        .map_err(|e| PyValueError::new_err(format!("integer {text} has no JSON form: {e}")))
}

/// A JSON value as the Python object `json.loads` would give.
pub(crate) fn to_python<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(flag) => PyBool::new(py, *flag).to_owned().into_any(),
        Value::Number(number) => number_to_python(py, number)?,
        Value::String(text) => PyString::new(py, text).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_python(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => object_to_python(py, map)?.into_any(),
    })
}

/// A JSON object as a dict, keys in their stored order.
pub(crate) fn object_to_python<'py>(
    py: Python<'py>,
    map: &Map<String, Value>,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (key, item) in map {
        dict.set_item(key, to_python(py, item)?)?;
    }
    Ok(dict)
}

fn number_to_python<'py>(py: Python<'py>, number: &Number) -> PyResult<Bound<'py, PyAny>> {
    if let Some(int) = number.as_i64() {
        return Ok(int.into_pyobject(py)?.into_any());
    }
    if let Some(int) = number.as_u64() {
        return Ok(int.into_pyobject(py)?.into_any());
    }
    let text = number.to_string();
    if text.contains(['.', 'e', 'E']) {
        return Ok(PyFloat::new(py, number.as_f64().unwrap_or(f64::NAN)).into_any());
    }
    // An integer past 64 bits, kept as text by serde_json: Python's int takes it whole.
    py.get_type::<PyInt>().call1((text,))
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}
