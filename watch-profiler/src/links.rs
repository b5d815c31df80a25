//! Each communicator's connections, as this rank's proxy saw them, and the line that says them.
//!
//! A connection is (peer, channel, direction). For each, the totals since the communicator
//! began: proxy operations, steps, bytes, and the time the steps spent on the network:
//! - a send step from `SendWait` (handed to the network) to its end (the network says done);
//! - a receive step from `RecvWait` (posted) to `RecvFlushWait` or `RecvGPUWait` (the data
//!   arrived), or to its end where neither came.
//!
//! A send's network time is the connection's own: its data was ready and its peer had room.
//! A slow NIC makes its sends slow and no other's, while a rank starved by it waits in
//! `SendGPUWait`, which is not counted. `gpudirect watch` compares the connections of all
//! ranks (time per byte) and names the endpoint common to the slow ones.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The most connections one line holds (a communicator of many peers and channels); past
/// it the line says how many were left out.
pub const MAX_LINKS_PER_LINE: usize = 4096;

/// One connection of one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LinkKey {
    pub peer: i32,
    pub channel: u8,
    pub send: bool,
}

/// A connection's totals since the communicator began.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkTotals {
    pub ops: u64,
    pub steps: u64,
    pub bytes: u64,
    /// Nanoseconds on the network, summed over the steps.
    pub net_ns: u64,
}

impl LinkTotals {
    pub fn add(&mut self, other: &LinkTotals) {
        self.ops += other.ops;
        self.steps += other.steps;
        self.bytes = self.bytes.saturating_add(other.bytes);
        self.net_ns = self.net_ns.saturating_add(other.net_ns);
    }
}

/// One communicator as this rank knows it.
#[derive(Debug, Clone, Default)]
pub struct Comm {
    pub id: u64,
    pub name: String,
    pub rank: i32,
    pub nranks: i32,
    pub nnodes: i32,
    pub links: BTreeMap<LinkKey, LinkTotals>,
    /// Whether something was added since the last line written.
    pub changed: bool,
}

/// Who wrote a line, and when.
pub struct Origin<'a> {
    pub host: &'a str,
    pub pid: u32,
    /// The NIC this rank was given ([`nic_of`]), where one is named.
    pub nic: Option<&'a str>,
    /// Wall clock, microseconds since the epoch.
    pub now_us: u128,
}

impl Comm {
    /// The communicator's line: one JSON object, newline-terminated.
    /// `{"v":1,"ts_us":..,"host":..,"pid":..,"comm":"0x..","name":..,"rank":..,"nranks":..,
    /// "nnodes":..,"links":[[peer,channel,"s"|"r",ops,steps,bytes,net_ns],...],"left_out":N}`
    pub fn line(&self, origin: &Origin) -> String {
        let mut out = String::with_capacity(160 + self.links.len() * 40);
        let _ = write!(
            out,
            "{{\"v\":1,\"ts_us\":{},\"host\":\"{}\",\"pid\":{},\"nic\":{},\"comm\":\"{:#x}\",\"name\":\"{}\",\"rank\":{},\"nranks\":{},\"nnodes\":{},\"links\":[",
            origin.now_us,
            escape(origin.host),
            origin.pid,
            origin
                .nic
                .map_or_else(|| "null".to_string(), |n| format!("\"{}\"", escape(n))),
            self.id,
            escape(&self.name),
            self.rank,
            self.nranks,
            self.nnodes
        );
        for (i, (k, t)) in self.links.iter().take(MAX_LINKS_PER_LINE).enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "[{},{},\"{}\",{},{},{},{}]",
                k.peer,
                k.channel,
                if k.send { 's' } else { 'r' },
                t.ops,
                t.steps,
                t.bytes,
                t.net_ns
            );
        }
        let left_out = self.links.len().saturating_sub(MAX_LINKS_PER_LINE);
        let _ = writeln!(out, "],\"left_out\":{left_out}}}");
        out
    }
}

/// The NIC a rank's NCCL was given, from its environment: the SPANK plugin's
/// `GPUDIRECT_NIC` (the NIC pinned to the task's GPU), else a `NCCL_SOCKET_IFNAME` or
/// `NCCL_IB_HCA` that names one interface (no list, no `^`/`=` prefix, no port).
pub fn nic_of(env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    if let Some(nic) = env("GPUDIRECT_NIC").filter(|v| !v.is_empty()) {
        return Some(nic);
    }
    ["NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"]
        .iter()
        .find_map(|name| {
            env(name).filter(|v| {
                !v.is_empty()
                    && !v.contains([',', '^', '=', ':'])
                    && v.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
            })
        })
}

/// A JSON string's contents: quotes, backslashes and control characters escaped.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_lists_each_connection_with_its_totals() {
        let mut comm = Comm {
            id: 0x19ac7cc41ba3f1,
            name: "dp \"0\"".into(),
            rank: 2,
            nranks: 4,
            nnodes: 4,
            ..Comm::default()
        };
        comm.links.insert(
            LinkKey {
                peer: 3,
                channel: 1,
                send: true,
            },
            LinkTotals {
                ops: 2,
                steps: 16,
                bytes: 1 << 20,
                net_ns: 5_000,
            },
        );
        comm.links.insert(
            LinkKey {
                peer: 1,
                channel: 0,
                send: false,
            },
            LinkTotals {
                ops: 1,
                steps: 8,
                bytes: 512,
                net_ns: 70,
            },
        );
        let line = comm.line(&Origin {
            host: "node3",
            pid: 77,
            nic: Some("eth1"),
            now_us: 5,
        });
        assert_eq!(
            line,
            "{\"v\":1,\"ts_us\":5,\"host\":\"node3\",\"pid\":77,\"nic\":\"eth1\",\"comm\":\"0x19ac7cc41ba3f1\",\"name\":\"dp \\\"0\\\"\",\"rank\":2,\"nranks\":4,\"nnodes\":4,\"links\":[[1,0,\"r\",1,8,512,70],[3,1,\"s\",2,16,1048576,5000]],\"left_out\":0}\n"
        );
    }

    #[test]
    fn the_nic_is_the_plugins_or_a_single_interface_nccl_was_given() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            nic_of(&env(&[
                ("GPUDIRECT_NIC", "eth3"),
                ("NCCL_SOCKET_IFNAME", "eth1")
            ]))
            .as_deref(),
            Some("eth3")
        );
        assert_eq!(
            nic_of(&env(&[("NCCL_SOCKET_IFNAME", "eth1")])).as_deref(),
            Some("eth1")
        );
        assert_eq!(nic_of(&env(&[("NCCL_SOCKET_IFNAME", "eth1,eth2")])), None);
        assert_eq!(nic_of(&env(&[("NCCL_SOCKET_IFNAME", "^docker")])), None);
        assert_eq!(nic_of(&env(&[("NCCL_IB_HCA", "mlx5_0:1")])), None);
        assert_eq!(
            nic_of(&env(&[("NCCL_IB_HCA", "mlx5_3")])).as_deref(),
            Some("mlx5_3")
        );
    }

    #[test]
    fn a_line_holds_at_most_its_budget_of_connections_and_says_how_many_it_left_out() {
        let mut comm = Comm::default();
        for peer in 0..(MAX_LINKS_PER_LINE as i32 + 5) {
            comm.links.insert(
                LinkKey {
                    peer,
                    channel: 0,
                    send: true,
                },
                LinkTotals::default(),
            );
        }
        let line = comm.line(&Origin {
            host: "h",
            pid: 1,
            nic: None,
            now_us: 0,
        });
        assert!(
            line.ends_with(",\"left_out\":5}\n"),
            "{}",
            &line[line.len() - 40..]
        );
        assert_eq!(line.matches("\"s\"").count(), MAX_LINKS_PER_LINE);
    }
}
