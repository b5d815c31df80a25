//! The counters as the kernel shows them under a sysfs root: a netdev's `statistics/` and
//! `carrier_changes`, and the `counters/` and `hw_counters/` of each port of its RDMA
//! device (or of the RDMA device the profile names). Which RDMA device a netdev has is
//! read from its place in the device tree: `class/net/NIC` resolves to
//! `devices/.../<device>/net/NIC`, and `<device>/infiniband/` lists the device's RDMA
//! devices (on a real machine the same folder as `class/net/NIC/device/infiniband/`; the
//! fixture trees leave the `device` links out).

use std::io::Read as _;
use std::path::Path;

use gpudirect_core::config::{CounterClass, NicClass};
use gpudirect_core::text::sanitize_for_message;

use super::{Reading, Unread, CARRIER_CHANGES, NET_STATISTICS, PORT_COUNTERS, PORT_HW_COUNTERS};

/// A counter file holds a number and a newline: 20 digits at most.
const MAX_COUNTER_BYTES: u64 = 64;

/// At most this many RDMA devices per netdev, and ports per device, are read.
const MAX_ENTRIES: usize = 64;

/// What a counter file held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A count.
    Count(u64),
    /// No such file: a counter this driver does not have.
    Absent,
    /// There, but no count: why, in words.
    Unreadable(String),
}

/// Reads one counter: a regular file (opened without blocking and without following a
/// final link: a FIFO or a link in a copied tree cannot hang or redirect the read) of at
/// most a few bytes holding a decimal count, as the kernel writes it.
pub fn read_value(path: &Path) -> Value {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOFOLLOW;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Value::Absent,
        Err(e) => return Value::Unreadable(e.to_string()),
    };
    match file.metadata() {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return Value::Unreadable("not a regular file".into()),
        Err(e) => return Value::Unreadable(e.to_string()),
    }
    let mut bytes = Vec::new();
    // A driver whose query fails (an RDMA port's counters are a request to the firmware)
    // makes the read fail.
    if let Err(e) = file.take(MAX_COUNTER_BYTES + 1).read_to_end(&mut bytes) {
        return Value::Unreadable(e.to_string());
    }
    if bytes.len() as u64 > MAX_COUNTER_BYTES {
        return Value::Unreadable(format!("longer than {MAX_COUNTER_BYTES} bytes"));
    }
    let text = String::from_utf8_lossy(&bytes);
    match text.trim().parse::<u64>() {
        Ok(n) => Value::Count(n),
        Err(_) => Value::Unreadable(format!(
            "it holds `{}`, not a count",
            sanitize_for_message(text.trim())
        )),
    }
}

/// A name read from a folder listing that may go into a path and a message: letters,
/// digits, `_`, `-`, `.`, not `.` or `..`, at most 64 characters.
fn plain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// The plain names in `dir`, sorted, at most [`MAX_ENTRIES`] of them.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .take(MAX_ENTRIES)
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .filter(|n| plain(n))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The RDMA devices of netdev `nic` (`mlx5_0` of a ConnectX's `gpu0rdma0`); none for a
/// netdev without one (gVNIC, virtio, veth).
pub fn rdma_devices_of(sysfs: &Path, nic: &str) -> Vec<String> {
    let Ok(real) = sysfs.join("class/net").join(nic).canonicalize() else {
        return Vec::new();
    };
    match real.parent().and_then(Path::parent) {
        Some(device) => names_in(&device.join("infiniband")),
        None => Vec::new(),
    }
}

/// What was read, and what could not be.
#[derive(Debug, Default)]
struct Gathered {
    readings: Vec<Reading>,
    unread: Vec<Unread>,
}

impl Gathered {
    /// Reads the counter at `key` below `sysfs` into `nic`'s readings.
    fn take(
        &mut self,
        sysfs: &Path,
        nic: &str,
        port: Option<&str>,
        (key, name, class, bits): (String, &str, CounterClass, Option<u32>),
    ) {
        match read_value(&sysfs.join(&key)) {
            Value::Count(value) => self.readings.push(Reading {
                nic: nic.to_string(),
                port: port.map(str::to_string),
                name: name.to_string(),
                key,
                class,
                bits,
                value,
            }),
            Value::Absent => {}
            Value::Unreadable(why) => self.unread.push(Unread { key, why }),
        }
    }

    /// A netdev's own counters.
    fn netdev(&mut self, sysfs: &Path, nic: &str) {
        let dir = format!("class/net/{nic}");
        for (name, class) in NET_STATISTICS {
            let key = format!("{dir}/statistics/{name}");
            self.take(sysfs, nic, None, (key, name, class, None));
        }
        let key = format!("{dir}/{CARRIER_CHANGES}");
        let class = CounterClass::Link;
        self.take(sysfs, nic, None, (key, CARRIER_CHANGES, class, None));
    }

    /// Every port's counters of RDMA device `device`, for the profile's NIC `nic`.
    fn rdma(&mut self, sysfs: &Path, nic: &str, device: &str) {
        let ports = format!("class/infiniband/{device}/ports");
        for port in names_in(&sysfs.join(&ports)) {
            let shown = format!("{device} port {port}");
            for (name, class, bits) in PORT_COUNTERS {
                let key = format!("{ports}/{port}/counters/{name}");
                self.take(sysfs, nic, Some(&shown), (key, name, class, Some(bits)));
            }
            for (name, class) in PORT_HW_COUNTERS {
                let key = format!("{ports}/{port}/hw_counters/{name}");
                self.take(sysfs, nic, Some(&shown), (key, name, class, None));
            }
        }
    }
}

/// Every counter of the profile's data NICs `nics` (real names) of class `class` under
/// `sysfs`: the readings, and the counters that were there but held no count. A NIC that
/// is not there at all is one [`Unread`] (the `nics` check says more).
pub fn read_nics(sysfs: &Path, nics: &[String], class: NicClass) -> (Vec<Reading>, Vec<Unread>) {
    let mut g = Gathered::default();
    for nic in nics {
        // Names come from the checked config; a path is not one.
        if !plain(nic) {
            continue;
        }
        let (dir, devices) = match class {
            NicClass::Net => (format!("class/net/{nic}"), rdma_devices_of(sysfs, nic)),
            NicClass::Infiniband => (format!("class/infiniband/{nic}"), vec![nic.clone()]),
        };
        if !sysfs.join(&dir).exists() {
            g.unread.push(Unread {
                key: dir,
                why: "no such NIC".into(),
            });
            continue;
        }
        if class == NicClass::Net {
            g.netdev(sysfs, nic);
        }
        for device in devices {
            g.rdma(sysfs, nic, &device);
        }
    }
    (g.readings, g.unread)
}
