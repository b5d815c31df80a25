//! Linux CPU lists as written in sysfs and in admin configs: `8-21,112-125`.

use std::collections::BTreeSet;
use std::fmt;

/// The most CPUs a list may name. Larger ids are a typo, not a machine.
pub const MAX_CPU_ID: u32 = 65_535;

/// A set of CPU ids, kept sorted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuList(BTreeSet<u32>);

/// Why a CPU list could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    /// An element is neither `N` nor `N-M`.
    #[error("`{element}` is not a CPU id or range (write e.g. `8-21,112-125`)")]
    BadElement {
        /// The offending element.
        element: String,
    },
    /// A range runs backwards.
    #[error("range `{element}` runs backwards (write the smaller id first)")]
    Reversed {
        /// The offending element.
        element: String,
    },
    /// An id is beyond [`MAX_CPU_ID`].
    #[error("CPU id {id} is larger than {MAX_CPU_ID}")]
    TooLarge {
        /// The id.
        id: u64,
    },
}

impl CpuList {
    /// Parses `8-21,112-125`; whitespace around elements is allowed, an empty string is
    /// the empty set.
    pub fn parse(text: &str) -> Result<Self, CpuListError> {
        let mut set = BTreeSet::new();
        for element in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (low, high) = match element.split_once('-') {
                Some((a, b)) => (parse_id(a, element)?, parse_id(b, element)?),
                None => {
                    let id = parse_id(element, element)?;
                    (id, id)
                }
            };
            if low > high {
                return Err(CpuListError::Reversed {
                    element: element.to_string(),
                });
            }
            set.extend(low..=high);
        }
        Ok(CpuList(set))
    }

    /// Builds a list from ids.
    pub fn from_ids(ids: impl IntoIterator<Item = u32>) -> Self {
        CpuList(ids.into_iter().collect())
    }

    /// The ids, ascending.
    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    /// Whether the list names no CPU.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The CPUs present in both lists.
    pub fn intersection(&self, other: &CpuList) -> CpuList {
        CpuList(self.0.intersection(&other.0).copied().collect())
    }
}

fn parse_id(text: &str, element: &str) -> Result<u32, CpuListError> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CpuListError::BadElement {
            element: element.to_string(),
        });
    }
    let id: u64 = text
        .parse()
        .map_err(|_| CpuListError::TooLarge { id: u64::MAX })?;
    if id > u64::from(MAX_CPU_ID) {
        return Err(CpuListError::TooLarge { id });
    }
    // Checked above: id fits.
    Ok(id as u32)
}

impl fmt::Display for CpuList {
    /// Formats in the compact sysfs form, `0-3,8`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut iter = self.0.iter().copied().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end += 1;
                iter.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats_sysfs_lists() {
        let list = CpuList::parse("8-21,112-125").unwrap();
        assert_eq!(list.ids().count(), 28);
        assert_eq!(list.to_string(), "8-21,112-125");
        assert_eq!(CpuList::parse(" 3, 1,2 ,7").unwrap().to_string(), "1-3,7");
        assert!(CpuList::parse("").unwrap().is_empty());
    }

    #[test]
    fn rejects_bad_lists() {
        assert!(matches!(
            CpuList::parse("3-1"),
            Err(CpuListError::Reversed { .. })
        ));
        assert!(matches!(
            CpuList::parse("a-b"),
            Err(CpuListError::BadElement { .. })
        ));
        assert!(matches!(
            CpuList::parse("1-99999999999999999999999"),
            Err(CpuListError::TooLarge { .. })
        ));
        assert!(matches!(
            CpuList::parse("70000"),
            Err(CpuListError::TooLarge { id: 70000 })
        ));
    }

    #[test]
    fn intersects() {
        let a = CpuList::parse("0-7").unwrap();
        let b = CpuList::parse("4-11").unwrap();
        assert_eq!(a.intersection(&b).to_string(), "4-7");
    }
}
