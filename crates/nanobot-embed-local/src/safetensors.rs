//! Reading a `.safetensors` file: eight bytes of header length, a JSON header naming each
//! tensor's type, shape and byte range, then the data. Only `F32` tensors are read.

use std::collections::HashMap;
use std::path::Path;

use crate::EmbedError;

/// The tensors of one file, by name.
pub(crate) struct Tensors {
    path: std::path::PathBuf,
    tensors: HashMap<String, (Vec<usize>, Vec<f32>)>,
}

impl Tensors {
    /// Reads every `F32` tensor of `path`.
    pub(crate) fn read(path: &Path) -> Result<Tensors, EmbedError> {
        let bytes = std::fs::read(path).map_err(|source| EmbedError::Unreadable {
            path: path.to_owned(),
            source,
        })?;
        let damaged = |reason: String| EmbedError::Damaged {
            path: path.to_owned(),
            reason,
        };
        let length = bytes
            .get(..8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| damaged("shorter than its header length".into()))?;
        let header_end = usize::try_from(length)
            .ok()
            .and_then(|n| n.checked_add(8))
            .filter(|&end| end <= bytes.len())
            .ok_or_else(|| damaged(format!("a header of {length} bytes in a smaller file")))?;
        let header: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&bytes[8..header_end])
                .map_err(|e| damaged(format!("its header is not JSON: {e}")))?;
        let body = &bytes[header_end..];
        let mut tensors = HashMap::new();
        for (name, spec) in header {
            if name == "__metadata__" || spec["dtype"] != "F32" {
                continue;
            }
            let shape: Vec<usize> = spec["shape"]
                .as_array()
                .map(|dims| {
                    dims.iter()
                        .filter_map(|d| d.as_u64())
                        .map(|d| d as usize)
                        .collect()
                })
                .unwrap_or_default();
            let range = spec["data_offsets"]
                .as_array()
                .filter(|o| o.len() == 2)
                .and_then(|o| Some((o[0].as_u64()? as usize, o[1].as_u64()? as usize)))
                .ok_or_else(|| damaged(format!("{name}: no data offsets")))?;
            let data = body
                .get(range.0..range.1)
                .ok_or_else(|| damaged(format!("{name}: its data is past the end of the file")))?;
            if data.len() != shape.iter().product::<usize>() * 4 {
                return Err(damaged(format!(
                    "{name}: {} bytes for shape {shape:?}",
                    data.len()
                )));
            }
            let values = data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            tensors.insert(name, (shape, values));
        }
        Ok(Tensors {
            path: path.to_owned(),
            tensors,
        })
    }

    /// The tensor `name` (with or without a `bert.` prefix), which must have `shape`.
    pub(crate) fn take(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, EmbedError> {
        let found = self
            .tensors
            .remove(name)
            .or_else(|| self.tensors.remove(&format!("bert.{name}")))
            .ok_or_else(|| EmbedError::Mismatch {
                path: self.path.clone(),
                reason: format!("no tensor {name}"),
            })?;
        if found.0 != shape {
            return Err(EmbedError::Mismatch {
                path: self.path.clone(),
                reason: format!("{name} has shape {:?}, the config says {shape:?}", found.0),
            });
        }
        Ok(found.1)
    }
}
