//! NCCL's own view of a node: the topology XML it writes with `NCCL_TOPO_DUMP_FILE`
//! (`<system>`, `<cpu numaid=...>`, nested `<pci busid=...>`, `<gpu dev=...>`, and
//! `<nic><net name=... dev=.../></nic>`), read for `gpudirect profiles generate
//! --compare-nccl` (issue #31): which nets NCCL finds nearest each GPU.
//!
//! Only the nesting is read: each `<gpu>` and `<net>` gets the `busid`s of the `<pci>`
//! elements around it and the `numaid` of its `<cpu>`. A GPU's nearest nets are those that
//! share the most enclosing `<pci>` elements with it (NCCL's own measure of PCI distance),
//! else those under the same `<cpu>`.

/// A GPU or a net in the dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// The GPU's PCI address (lowercase), or the net's name.
    pub id: String,
    /// The `busid`s of the `<pci>` elements around it, outermost first (lowercase).
    pub pci_path: Vec<String>,
    /// The `numaid` of the `<cpu>` around it.
    pub numa: Option<String>,
}

/// What the dump holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopoDump {
    /// GPUs, in the dump's order.
    pub gpus: Vec<Placed>,
    /// Nets (NICs as NCCL names them: `mlx5_0`, `eth1`), in the dump's order.
    pub nets: Vec<Placed>,
}

/// Why a dump could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopoError {
    /// Not NCCL's topology XML.
    NotTopology,
    /// Too large to be one.
    TooLarge(usize),
}

impl std::fmt::Display for TopoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TopoError::NotTopology => f.write_str(
                "not an NCCL topology dump: no <system> element (NCCL writes one with NCCL_TOPO_DUMP_FILE=FILE in a run)",
            ),
            TopoError::TooLarge(n) => write!(f, "{n} bytes: more than an NCCL topology dump holds"),
        }
    }
}

impl std::error::Error for TopoError {}

/// Largest dump read: a node's dump is some ten kilobytes.
const MAX_BYTES: usize = 8 << 20;

/// The value of `name="..."` in a tag's text.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let needle = format!(" {name}=\"");
    let start = tag.find(&needle)? + needle.len();
    let len = tag[start..].find('"')?;
    Some(&tag[start..start + len])
}

/// Reads a dump (pure).
pub fn parse_topo(text: &str) -> Result<TopoDump, TopoError> {
    if text.len() > MAX_BYTES {
        return Err(TopoError::TooLarge(text.len()));
    }
    if !text.contains("<system") {
        return Err(TopoError::NotTopology);
    }
    let mut dump = TopoDump::default();
    // The open elements, by name; `pci` keeps its busid and `cpu` its numaid.
    let mut open: Vec<(&str, Option<String>)> = Vec::new();
    let mut rest = text;
    while let Some(lt) = rest.find('<') {
        let after = &rest[lt + 1..];
        let Some(gt) = after.find('>') else { break };
        let tag = &after[..gt];
        rest = &after[gt + 1..];
        if tag.starts_with('?') || tag.starts_with('!') {
            continue;
        }
        if let Some(closing) = tag.strip_prefix('/') {
            let name = closing.trim();
            if let Some(pos) = open.iter().rposition(|(n, _)| *n == name) {
                open.truncate(pos);
            }
            continue;
        }
        let self_closing = tag.ends_with('/');
        let name = tag
            .split_whitespace()
            .next()
            .unwrap_or("")
            .trim_end_matches('/');
        let spaced = format!(" {}", tag.trim_end_matches('/'));
        let pci_path = || -> Vec<String> {
            open.iter()
                .filter(|(n, _)| *n == "pci")
                .filter_map(|(_, b)| b.clone())
                .collect()
        };
        let numa = || -> Option<String> {
            open.iter()
                .rev()
                .find(|(n, _)| *n == "cpu")
                .and_then(|(_, v)| v.clone())
        };
        match name {
            "gpu" => {
                let mut path = pci_path();
                if let Some(id) = path.last().cloned() {
                    path.pop();
                    dump.gpus.push(Placed {
                        id,
                        pci_path: path,
                        numa: numa(),
                    });
                }
            }
            "net" => {
                if let Some(net) = attr(&spaced, "name") {
                    let mut path = pci_path();
                    // The NIC's own function is the innermost <pci>, as the GPU's is.
                    path.pop();
                    dump.nets.push(Placed {
                        id: net.to_string(),
                        pci_path: path,
                        numa: numa(),
                    });
                }
            }
            _ => {}
        }
        if !self_closing {
            let value = match name {
                "pci" => attr(&spaced, "busid").map(str::to_ascii_lowercase),
                "cpu" => attr(&spaced, "numaid").map(str::to_string),
                _ => None,
            };
            open.push((name, value));
        }
    }
    Ok(dump)
}

impl TopoDump {
    /// Each GPU's nearest nets by NCCL's tree: most enclosing `<pci>` shared, else the same
    /// `<cpu>`; empty when neither holds. `(gpu busid, nets)`, in the dump's GPU order.
    pub fn nearest_nets(&self) -> Vec<(String, Vec<String>)> {
        self.gpus
            .iter()
            .map(|g| {
                let shared = |n: &Placed| {
                    g.pci_path
                        .iter()
                        .zip(&n.pci_path)
                        .take_while(|(a, b)| a == b)
                        .count()
                };
                let best = self.nets.iter().map(shared).max().unwrap_or(0);
                let near: Vec<String> = if best > 0 {
                    self.nets
                        .iter()
                        .filter(|n| shared(n) == best)
                        .map(|n| n.id.clone())
                        .collect()
                } else {
                    self.nets
                        .iter()
                        .filter(|n| n.numa.is_some() && n.numa == g.numa)
                        .map(|n| n.id.clone())
                        .collect()
                };
                (g.id.clone(), near)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape NCCL 2.2x writes (trimmed to the elements read).
    const DUMP: &str = r#"<system version="1">
  <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:01:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:04:00.0" class="0x030200" vendor="0x10de" device="0x2330" link_speed="32.0 GT/s PCIe" link_width="16">
        <gpu dev="0" sm="90" rank="0" gdr="1"/>
      </pci>
      <pci busid="0000:05:00.0" class="0x030200" vendor="0x10de">
        <gpu dev="1" sm="90" rank="1" gdr="1"/>
      </pci>
      <pci busid="0000:06:00.0" class="0x020000" vendor="0x15b3">
        <nic>
          <net name="mlx5_0" dev="0" speed="400000" port="1" latency="0.000000" guid="0x1" maxconn="131072" gdr="1"/>
        </nic>
      </pci>
    </pci>
    <nic>
      <net name="eth0" dev="1" speed="100000" port="0" latency="0.000000" guid="0x0" maxconn="65536" gdr="0"/>
    </nic>
  </cpu>
  <cpu numaid="1" affinity="ffff0000" arch="x86_64">
    <pci busid="0000:84:00.0" class="0x030200" vendor="0x10de">
      <gpu dev="2" sm="90" rank="2" gdr="1"/>
    </pci>
  </cpu>
</system>
"#;

    #[test]
    fn gpus_and_nets_keep_their_place_in_the_tree() {
        let dump = parse_topo(DUMP).unwrap();
        let ids: Vec<&str> = dump.gpus.iter().map(|g| g.id.as_str()).collect();
        assert_eq!(ids, ["0000:04:00.0", "0000:05:00.0", "0000:84:00.0"]);
        assert_eq!(dump.gpus[0].pci_path, ["0000:01:00.0"]);
        assert_eq!(dump.nets.len(), 2);
        assert_eq!(
            dump.nearest_nets(),
            [
                ("0000:04:00.0".to_string(), vec!["mlx5_0".to_string()]),
                ("0000:05:00.0".to_string(), vec!["mlx5_0".to_string()]),
                ("0000:84:00.0".to_string(), vec![]),
            ]
        );
    }

    #[test]
    fn other_files_are_refused() {
        assert_eq!(parse_topo("<html></html>"), Err(TopoError::NotTopology));
        // Unclosed or odd tags never panic.
        assert!(parse_topo("<system><pci busid=\"x\"><gpu").is_ok());
        assert!(parse_topo("<system><<>>></pci></cpu>").is_ok());
    }
}
