//! This host's GPUs as `--gpus` names them (`validate --gpus`, `tune --gpus`): a list of
//! indices into what is visible (an inherited `CUDA_VISIBLE_DEVICES`, else the driver's
//! GPUs), and for `validate` the units the list splits into.

use crate::slurm::env_var;
use gpudirect_core::derive::driver_gpus;

/// The largest GPU index `--gpus` accepts.
pub const MAX_GPU_INDEX: u32 = 1023;

/// What `--gpus` indexes: its entries, and where they came from (for messages).
pub type Visible = (Vec<String>, String);

/// A unit: its name (`gpu3`, `gpu2-3`, `gpu0.4`) and the CUDA_VISIBLE_DEVICES entries of
/// its GPUs.
pub type GpuUnit = (String, Vec<String>);

/// What is wrong with a `--gpus` list; each message says how to write it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    /// An element that is not an index or a range.
    #[error("--gpus {list}: `{element}` is not a GPU index or range (write GPU indices such as 0-7 or 0,2,4,6)")]
    NotAnIndex {
        /// The list.
        list: String,
        /// The element.
        element: String,
    },
    /// `5-2`.
    #[error("--gpus {list}: range `{element}` runs backwards (write GPU indices such as 0-7 or 0,2,4,6)")]
    Backwards {
        /// The list.
        list: String,
        /// The element.
        element: String,
    },
    /// Past [`MAX_GPU_INDEX`].
    #[error("--gpus {list}: GPU index {index} is larger than {MAX_GPU_INDEX}")]
    TooLarge {
        /// The list.
        list: String,
        /// The index.
        index: u32,
    },
    /// The same GPU twice.
    #[error("--gpus {list}: GPU {index} is named twice")]
    Twice {
        /// The list.
        list: String,
        /// The index.
        index: u32,
    },
    /// An index past what is visible.
    #[error(
        "--gpus {list}: there is no GPU {index}: {visible} visible ({from}); indices start at 0"
    )]
    NotVisible {
        /// The list.
        list: String,
        /// The index.
        index: u32,
        /// How many are visible.
        visible: usize,
        /// Where that came from.
        from: String,
    },
    /// A list that does not split into units of the size asked for.
    #[error("--gpus {list} names {count} GPU(s), which do not split into units of {per_unit} (--gpus-per-unit)")]
    Units {
        /// The list.
        list: String,
        /// GPUs named.
        count: usize,
        /// `--gpus-per-unit`.
        per_unit: u32,
    },
}

/// The GPUs `--gpus` indexes: the entries of an inherited CUDA_VISIBLE_DEVICES (as for any
/// CUDA program, index 0 is its first entry), else this host's NVIDIA GPUs as the driver
/// lists them, else `None` (indices passed through unchecked, as on CPU-only test hosts).
pub fn visible_gpus() -> Option<Visible> {
    if let Some(list) = env_var("CUDA_VISIBLE_DEVICES") {
        let entries: Vec<String> = list.split(',').map(|e| e.trim().to_string()).collect();
        return Some((entries, format!("CUDA_VISIBLE_DEVICES={list}")));
    }
    let count = driver_gpus(std::path::Path::new("/proc/driver/nvidia/gpus"))?.len();
    let entries = (0..count).map(|i| i.to_string()).collect();
    Some((entries, "/proc/driver/nvidia/gpus".into()))
}

/// Reads `0-3,6` in the order written; a GPU named twice is an error. Pure.
pub fn parse_gpu_list(list: &str) -> Result<Vec<u32>, GpuError> {
    let mut ids: Vec<u32> = Vec::new();
    for element in list.split(',').map(str::trim) {
        let (first, last) = element.split_once('-').unwrap_or((element, element));
        let index = |text: &str| {
            text.trim()
                .parse::<u32>()
                .map_err(|_| GpuError::NotAnIndex {
                    list: list.to_string(),
                    element: element.to_string(),
                })
        };
        let (first, last) = (index(first)?, index(last)?);
        if last < first {
            return Err(GpuError::Backwards {
                list: list.to_string(),
                element: element.to_string(),
            });
        }
        if last > MAX_GPU_INDEX {
            return Err(GpuError::TooLarge {
                list: list.to_string(),
                index: last,
            });
        }
        for id in first..=last {
            if ids.contains(&id) {
                return Err(GpuError::Twice {
                    list: list.to_string(),
                    index: id,
                });
            }
            ids.push(id);
        }
    }
    Ok(ids)
}

/// The CUDA_VISIBLE_DEVICES entry of GPU index `id` of `--gpus list`: its entry in
/// `visible` ([`visible_gpus`]), or the index itself where nothing says what is visible.
/// Pure.
pub fn gpu_device(list: &str, id: u32, visible: Option<&Visible>) -> Result<String, GpuError> {
    match visible {
        None => Ok(id.to_string()),
        Some((entries, source)) => {
            entries
                .get(id as usize)
                .cloned()
                .ok_or_else(|| GpuError::NotVisible {
                    list: list.to_string(),
                    index: id,
                    visible: entries.len(),
                    from: source.clone(),
                })
        }
    }
}

/// Splits the GPUs of `list`, in the order written, into units of `per_unit`, named by
/// their indices: `gpu3`, or `gpu2-3` (consecutive) and `gpu0.4` (not) for several.
/// `visible` is what the indices refer to ([`visible_gpus`]). Pure.
pub fn gpu_units(
    list: &str,
    per_unit: u32,
    visible: Option<&Visible>,
) -> Result<Vec<GpuUnit>, GpuError> {
    let ids = parse_gpu_list(list)?;
    if per_unit == 0 || !ids.len().is_multiple_of(per_unit as usize) {
        return Err(GpuError::Units {
            list: list.to_string(),
            count: ids.len(),
            per_unit,
        });
    }
    let device = |id: u32| gpu_device(list, id, visible);
    ids.chunks(per_unit as usize)
        .map(|chunk| {
            let name = match chunk {
                [one] => format!("gpu{one}"),
                [first, .., last] if chunk.windows(2).all(|w| w[1] == w[0] + 1) => {
                    format!("gpu{first}-{last}")
                }
                _ => format!(
                    "gpu{}",
                    chunk
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(".")
                ),
            };
            let devices = chunk
                .iter()
                .map(|&id| device(id))
                .collect::<Result<_, _>>()?;
            Ok((name, devices))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_read_in_order_and_bad_ones_say_how_to_write_them() {
        assert_eq!(parse_gpu_list("0-3,6").unwrap(), [0, 1, 2, 3, 6]);
        assert_eq!(parse_gpu_list("6, 2").unwrap(), [6, 2]);
        let err = |list: &str| parse_gpu_list(list).unwrap_err().to_string();
        assert!(err("0,x").contains("`x` is not a GPU index or range"));
        assert!(err("5-2").contains("range `5-2` runs backwards"));
        assert!(err("2000").contains("larger than 1023"));
        assert!(err("1,0-2").contains("GPU 1 is named twice"));
    }

    #[test]
    fn units_are_named_by_their_indices_and_map_to_what_is_visible() {
        let visible: Visible = (
            vec![
                "GPU-a".into(),
                "GPU-b".into(),
                "GPU-c".into(),
                "GPU-d".into(),
            ],
            "CUDA_VISIBLE_DEVICES=GPU-a,GPU-b,GPU-c,GPU-d".into(),
        );
        let units = gpu_units("0-3", 2, Some(&visible)).unwrap();
        assert_eq!(
            units,
            [
                ("gpu0-1".to_string(), vec!["GPU-a".into(), "GPU-b".into()]),
                ("gpu2-3".to_string(), vec!["GPU-c".into(), "GPU-d".into()]),
            ]
        );
        let units = gpu_units("0,3,1,2", 2, None).unwrap();
        assert_eq!(units[0].0, "gpu0.3");
        assert_eq!(
            units[1],
            ("gpu1-2".to_string(), vec!["1".into(), "2".into()])
        );
        assert!(gpu_units("0-2", 2, None)
            .unwrap_err()
            .to_string()
            .contains("do not split into units of 2"));
        assert!(gpu_units("0,5", 1, Some(&visible))
            .unwrap_err()
            .to_string()
            .contains("there is no GPU 5: 4 visible"));
    }
}
