//! `libgpudirect_watch_profiler.so`: the NCCL profiler plugin behind `gpudirect watch`'s
//! connection verdict. NCCL loads one profiler plugin (`NCCL_PROFILER_PLUGIN`); this one
//! records each connection's network time (module [`links`]) and hands every other event to
//! the plugin it chains, NCCL's Inspector, so that the job keeps the Inspector's per-collective
//! dumps as well.
//!
//! ```text
//! NCCL ──init/startEvent/stopEvent/recordEventState/finalize──▶ this plugin
//!   ├─ ProxyOp, ProxyStep: timed here; each op's totals added to its connection; their
//!   │  handles are this plugin's (an Event, tagged in its lowest bit)
//!   ├─ the events the chained plugin asked for: passed on, parent handles translated
//!   │  where they are this plugin's; every other event's handle is the chained plugin's
//!   │  own, untouched, for NCCL starts children of a collective after stopping it
//!   └─ a thread: every interval, each changed communicator's line appended to
//!      DIR/<host>-pid<PID>.links (one JSON object a line, links::Comm::line)
//! ```
//!
//! Set by the SPANK plugin from the admin's `[watch]` table (the user never sets them):
//! - `GPUDIRECT_WATCH_CHAIN`: the profiler to chain (the Inspector), optional;
//! - `GPUDIRECT_WATCH_DIR`: the job's dump folder (made by the SPANK plugin, the job user's,
//!   0700); without it, `NCCL_INSPECTOR_DUMP_DIR`; without either nothing is written;
//! - `GPUDIRECT_WATCH_INTERVAL_MS`: how often lines are written (default 1000, 100 at least).
//!
//! For the cost benchmark only (`scripts/gpu-box watch-links-toggle`, never set by the SPANK
//! plugin): `GPUDIRECT_WATCH_COST_TOGGLE_MS=N` (100 at least) turns this plugin's own events
//! on and off in alternate N ms windows of the wall clock (on where `unix_ms / N` is even), so
//! that one job's steps compare with and without it. NCCL reads its event mask again at each
//! group call (NCCL 2.28.9 `src/plugin/profiler.cc`), so the change takes at the next one.
//!
//! NCCL 2.28 and later load it (interface version 5; 2.29 asks for 6, then 5). It never
//! fails NCCL: every entry returns success, catches any panic, and an event it cannot place
//! is dropped.

pub mod abi;
pub mod links;

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use abi::{EventDescr, Exported, Logger, NcclResult, ProfilerV5, StateArgs, NCCL_SUCCESS};
use links::{Comm, LinkKey, LinkTotals, Origin};

/// The table NCCL looks up.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclProfiler_v5: Exported = Exported(ProfilerV5 {
    name: c"gpudirect-watch".as_ptr(),
    init,
    start_event,
    stop_event,
    record_event_state,
    finalize,
});

/// A dump file past this size is renamed to `.links.1` (replacing the one before) and begun
/// again: `watch` reads the newest lines only.
const ROTATE_BYTES: u64 = 64 << 20;

/// What the process's first `init` settled.
struct Global {
    chained: Option<&'static Exported>,
    /// This node's name, for the file's name and every line.
    host: String,
    /// This process's id, read once: the file's name, every line, and which ProxyOps are
    /// another process's (PXN).
    pid: u32,
    nic: Option<String>,
    file: Option<PathBuf>,
    interval: Duration,
    comms: Mutex<Vec<Arc<Mutex<Comm>>>>,
    out: Mutex<Option<File>>,
    epoch: Instant,
}

static GLOBAL: OnceLock<Global> = OnceLock::new();
/// The writer thread, started once the configuration is settled.
static WRITER: Once = Once::new();
static LOGGER: OnceLock<Logger> = OnceLock::new();

/// The cost toggle ([`toggle_cost`]): NCCL's event mask (the `int` every `init` gets), the
/// mask with this plugin's events and without, and the thread that switches between them.
static NCCL_MASK: AtomicPtr<c_int> = AtomicPtr::new(null_mut());
static MASK_WITH: AtomicI32 = AtomicI32::new(0);
static MASK_WITHOUT: AtomicI32 = AtomicI32::new(0);
static TOGGLER: Once = Once::new();

/// Whether this plugin's events are on at `unix_ms` under a toggle of `period_ms`.
fn cost_phase_on(unix_ms: u128, period_ms: u64) -> bool {
    (unix_ms / u128::from(period_ms.max(1))).is_multiple_of(2)
}

/// The toggle's period from `GPUDIRECT_WATCH_COST_TOGGLE_MS`: none unset, unparsable or
/// under 100 ms.
fn cost_toggle_period(value: Option<String>) -> Option<u64> {
    value
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms >= 100)
}

/// Writes the mask of the phase `unix_ms` falls in into NCCL's.
///
/// # Safety
/// `mask` is null or NCCL's event mask (an aligned `int` that lives as long as the process).
unsafe fn apply_cost_phase(mask: *mut c_int, unix_ms: u128, period_ms: u64) {
    if mask.is_null() {
        return;
    }
    let value = if cost_phase_on(unix_ms, period_ms) {
        MASK_WITH.load(Ordering::Relaxed)
    } else {
        MASK_WITHOUT.load(Ordering::Relaxed)
    };
    // NCCL reads it with a relaxed atomic load.
    AtomicI32::from_ptr(mask).store(value, Ordering::Relaxed);
}

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// Starts the cost toggle once: NCCL's mask switched at every window's edge.
fn toggle_cost(mask: *mut c_int, with: c_int, without: c_int, period_ms: u64) {
    MASK_WITH.fetch_or(with, Ordering::Relaxed);
    MASK_WITHOUT.fetch_or(without, Ordering::Relaxed);
    NCCL_MASK.store(mask, Ordering::Relaxed);
    TOGGLER.call_once(|| {
        log(&format!(
            "cost toggle: connection timings on in even {period_ms} ms windows of the wall clock"
        ));
        let spawned = std::thread::Builder::new()
            .name("gpudirect-watch-toggle".into())
            .spawn(move || loop {
                let now = unix_ms();
                // SAFETY: NCCL_MASK is NCCL's event mask, a global of libnccl.
                unsafe { apply_cost_phase(NCCL_MASK.load(Ordering::Relaxed), now, period_ms) };
                let into = u64::try_from(now % u128::from(period_ms)).unwrap_or(0);
                std::thread::sleep(Duration::from_millis(period_ms - into));
            });
        if let Err(e) = spawned {
            log(&format!("no cost toggle thread ({e})"));
        }
    });
}

fn log(msg: &str) {
    let Some(Some(f)) = LOGGER.get() else { return };
    let Ok(text) = CString::new(msg.replace('\0', " ")) else {
        return;
    };
    // SAFETY: NCCL's logger is printf-like; "%s" with one NUL-terminated string.
    unsafe {
        f(
            abi::LOG_INFO,
            abi::SUBSYS_INIT,
            c"gpudirect-watch".as_ptr(),
            0,
            c"%s".as_ptr(),
            text.as_ptr(),
        );
    }
}

fn now_ns(g: &Global) -> u64 {
    u64::try_from(g.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its length; gethostname NUL-terminates or truncates.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Opens the chained plugin and finds its version-5 table; kept open for the process.
fn open_chain(path: &str) -> Result<&'static Exported, String> {
    let c_path = CString::new(path).map_err(|_| format!("{path}: a NUL in the path"))?;
    // SAFETY: dlopen/dlsym with NUL-terminated strings; the handle is never closed, so the
    // table it points into lives as long as the process.
    unsafe {
        let handle = libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if handle.is_null() {
            let why = libc::dlerror();
            let why = if why.is_null() {
                "dlopen failed".into()
            } else {
                CStr::from_ptr(why).to_string_lossy().into_owned()
            };
            return Err(format!("{path}: {why}"));
        }
        let table = libc::dlsym(handle, c"ncclProfiler_v5".as_ptr());
        if table.is_null() {
            return Err(format!(
                "{path}: no ncclProfiler_v5 in it (built for another NCCL than 2.28+)"
            ));
        }
        Ok(&*(table as *const Exported))
    }
}

fn global() -> &'static Global {
    let g = GLOBAL.get_or_init(settle);
    // Started after GLOBAL is set, so the thread holds the settled configuration (started
    // inside get_or_init, it could read GLOBAL before it was set and end at once).
    if g.file.is_some() {
        WRITER.call_once(|| {
            let spawned = std::thread::Builder::new()
                .name("gpudirect-watch".into())
                .spawn(move || loop {
                    std::thread::sleep(g.interval);
                    write_changed(g, None);
                });
            if let Err(e) = spawned {
                log(&format!(
                    "no dump thread ({e}): lines written at finalize only"
                ));
            }
        });
    }
    g
}

/// The process's configuration, from its environment, settled at the first `init`.
fn settle() -> Global {
    let chained = env("GPUDIRECT_WATCH_CHAIN").and_then(|p| match open_chain(&p) {
        Ok(t) => Some(t),
        Err(why) => {
            log(&format!("chained profiler not loaded: {why}"));
            None
        }
    });
    let interval_ms = env("GPUDIRECT_WATCH_INTERVAL_MS")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(1000)
        .max(100);
    let dir = env("GPUDIRECT_WATCH_DIR").or_else(|| env("NCCL_INSPECTOR_DUMP_DIR"));
    let host = host_name();
    let pid = std::process::id();
    let file = dir.map(|d| PathBuf::from(d).join(format!("{host}-pid{pid}.links")));
    let g = Global {
        chained,
        host,
        pid,
        nic: links::nic_of(&|name| env(name)),
        file,
        interval: Duration::from_millis(interval_ms),
        comms: Mutex::new(Vec::new()),
        out: Mutex::new(None),
        epoch: Instant::now(),
    };
    match &g.file {
        Some(f) => {
            log(&format!(
                "connection timings every {interval_ms} ms to {}{}",
                f.display(),
                if g.chained.is_some() {
                    ", the Inspector chained"
                } else {
                    ""
                }
            ));
        }
        None => {
            log("no GPUDIRECT_WATCH_DIR nor NCCL_INSPECTOR_DUMP_DIR: no connection timings written")
        }
    }
    g
}

/// Appends the line of each communicator changed since the last write (or of `only`).
fn write_changed(g: &Global, only: Option<&Arc<Mutex<Comm>>>) {
    let Some(path) = &g.file else { return };
    let comms: Vec<Arc<Mutex<Comm>>> = match only {
        Some(c) => vec![Arc::clone(c)],
        None => g.comms.lock().map(|c| c.clone()).unwrap_or_default(),
    };
    let now_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    let origin = Origin {
        host: &g.host,
        pid: g.pid,
        nic: g.nic.as_deref(),
        now_us,
    };
    let mut text = String::new();
    for c in comms {
        let Ok(mut comm) = c.lock() else { continue };
        if comm.changed {
            comm.changed = false;
            text.push_str(&comm.line(&origin));
        }
    }
    if text.is_empty() {
        return;
    }
    let Ok(mut out) = g.out.lock() else { return };
    if out.is_none() {
        // Never follow a link (the folder is the job user's own; this is belt and braces).
        match OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
        {
            Ok(f) => *out = Some(f),
            Err(e) => {
                log(&format!(
                    "{}: {e}: no connection timings written",
                    path.display()
                ));
                return;
            }
        }
    }
    let Some(f) = out.as_mut() else { return };
    if f.write_all(text.as_bytes()).is_err() {
        *out = None;
        return;
    }
    if f.metadata()
        .map(|m| m.len() > ROTATE_BYTES)
        .unwrap_or(false)
    {
        let _ = std::fs::rename(path, path.with_extension("links.1"));
        *out = None;
    }
}

/// One communicator's context: the chained plugin's own, and this rank's connections.
struct Ctx {
    inner: *mut c_void,
    inner_mask: u64,
    comm: Arc<Mutex<Comm>>,
}

/// A proxy operation's totals, filled by its steps (on the proxy thread) and added to its
/// connection when the operation stops.
struct OpTotals {
    key: LinkKey,
    steps: AtomicU64,
    bytes: AtomicU64,
    net_ns: AtomicU64,
}

enum Detail {
    Op(Arc<OpTotals>),
    Step {
        op: Arc<OpTotals>,
        /// When the step went onto the network (0: not yet, or already counted).
        since_ns: u64,
        bytes: u64,
    },
}

/// What this plugin keeps for a ProxyOp or ProxyStep: the handle NCCL gets is its address
/// with the lowest bit set ([`tagged`]); every other event's handle is the chained plugin's
/// own. NCCL stops a collective's task event on the host when the plan is launched, then
/// its proxy thread starts the ProxyOp and kernel-channel events whose parent is that
/// stopped handle (NCCL 2.28.9, src/plugin/profiler.cc): a wrapper freed at stop was read
/// after it was freed, and the ranks crashed on their first allreduce on the lent H200.
/// The chained plugin's handles stay valid as long as it keeps them (the Inspector counts
/// references); a ProxyOp is stopped only after its steps have started.
struct Event {
    ctx: *const Ctx,
    /// The chained plugin's handle for the same event, or null.
    inner: *mut c_void,
    detail: Detail,
}

/// The lowest bit of a handle that is this plugin's [`Event`] (boxed, so 8-aligned); the
/// chained plugin's handles point at its own aligned objects, and NCCL never reads one.
const OURS: usize = 1;

/// The handle NCCL gets for one of this plugin's events.
fn tagged(event: Box<Event>) -> *mut c_void {
    (Box::into_raw(event) as usize | OURS) as *mut c_void
}

/// This plugin's event behind `h`, where `h` is one of its handles.
fn ours(h: *mut c_void) -> Option<*mut Event> {
    let address = h as usize;
    (address & OURS != 0).then_some((address & !OURS) as *mut Event)
}

/// The chained plugin's handle for `h`: the inner handle of one of ours, else `h` itself
/// (the chained plugin's own, or null).
///
/// # Safety
/// `h` is null, a handle of the chained plugin's, or one of this plugin's that NCCL has not
/// stopped.
unsafe fn inner_of(h: *mut c_void) -> *mut c_void {
    match ours(h) {
        Some(event) => (*event).inner,
        None => h,
    }
}

fn guarded(f: impl FnOnce()) -> NcclResult {
    let _ = catch_unwind(AssertUnwindSafe(f));
    NCCL_SUCCESS
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn init(
    context: *mut *mut c_void,
    comm_id: u64,
    mask: *mut c_int,
    name: *const c_char,
    nnodes: c_int,
    nranks: c_int,
    rank: c_int,
    logfn: Logger,
) -> NcclResult {
    guarded(|| {
        if context.is_null() || mask.is_null() {
            return;
        }
        *context = null_mut();
        let _ = LOGGER.set(logfn);
        let g = global();
        let mut inner = null_mut();
        let mut inner_mask: c_int = 0;
        if let Some(t) = g.chained {
            (t.0.init)(
                &mut inner,
                comm_id,
                &mut inner_mask,
                name,
                nnodes,
                nranks,
                rank,
                logfn,
            );
        }
        let name = if name.is_null() {
            String::new()
        } else {
            CStr::from_ptr(name).to_string_lossy().into_owned()
        };
        let comm = Arc::new(Mutex::new(Comm {
            id: comm_id,
            name,
            rank,
            nranks,
            nnodes,
            links: BTreeMap::new(),
            changed: false,
        }));
        let ours = if g.file.is_some() {
            if let Ok(mut all) = g.comms.lock() {
                all.push(Arc::clone(&comm));
            }
            abi::PROFILE_PROXY_OP | abi::PROFILE_PROXY_STEP
        } else {
            0
        };
        let inner_mask = u64::try_from(inner_mask).unwrap_or(0);
        *context = Box::into_raw(Box::new(Ctx {
            inner,
            inner_mask,
            comm,
        }))
        .cast();
        let with = c_int::try_from(inner_mask | ours).unwrap_or(0);
        *mask = with;
        if ours != 0 {
            if let Some(period) = cost_toggle_period(env("GPUDIRECT_WATCH_COST_TOGGLE_MS")) {
                let without = c_int::try_from(inner_mask).unwrap_or(0);
                toggle_cost(mask, with, without, period);
            }
        }
    })
}

unsafe extern "C" fn start_event(
    context: *mut c_void,
    handle: *mut *mut c_void,
    descr: *mut EventDescr,
) -> NcclResult {
    guarded(|| {
        if handle.is_null() {
            return;
        }
        *handle = null_mut();
        if context.is_null() || descr.is_null() {
            return;
        }
        let ctx = &*(context as *const Ctx);
        let d = &*descr;
        // A ProxyOp run for another process (PXN) names a parent of that process: passed on
        // as NCCL gave it, never read here.
        let foreign = d.kind == abi::PROFILE_PROXY_OP
            && u32::try_from(d.u.proxy_op.pid).ok() != Some(global().pid);
        let mut inner = null_mut();
        if ctx.inner_mask & d.kind != 0 {
            if let Some(t) = global().chained {
                let mut copy = *d;
                if !foreign {
                    copy.parent = inner_of(d.parent);
                }
                if d.kind == abi::PROFILE_COLL {
                    copy.u.coll.parent_group = inner_of(d.u.coll.parent_group);
                } else if d.kind == abi::PROFILE_P2P {
                    copy.u.p2p.parent_group = inner_of(d.u.p2p.parent_group);
                }
                (t.0.start_event)(ctx.inner, &mut inner, &mut copy);
            }
        }
        let detail = match d.kind {
            abi::PROFILE_PROXY_OP => {
                let op = d.u.proxy_op;
                Detail::Op(Arc::new(OpTotals {
                    key: LinkKey {
                        peer: op.peer,
                        channel: op.channel_id,
                        send: op.is_send != 0,
                    },
                    steps: AtomicU64::new(0),
                    bytes: AtomicU64::new(0),
                    net_ns: AtomicU64::new(0),
                }))
            }
            abi::PROFILE_PROXY_STEP => match ours(d.parent).map(|p| &(*p).detail) {
                Some(Detail::Op(op)) => Detail::Step {
                    op: Arc::clone(op),
                    since_ns: 0,
                    bytes: 0,
                },
                _ => {
                    *handle = inner;
                    return;
                }
            },
            // Not ours to time: the chained plugin's handle, or none.
            _ => {
                *handle = inner;
                return;
            }
        };
        *handle = tagged(Box::new(Event { ctx, inner, detail }));
    })
}

unsafe extern "C" fn record_event_state(
    handle: *mut c_void,
    state: c_int,
    args: *mut StateArgs,
) -> NcclResult {
    guarded(|| {
        let Some(event) = ours(handle) else {
            if let (Some(t), false) = (global().chained, handle.is_null()) {
                (t.0.record_event_state)(handle, state, args);
            }
            return;
        };
        let ev = &mut *event;
        if !ev.inner.is_null() {
            if let Some(t) = global().chained {
                (t.0.record_event_state)(ev.inner, state, args);
            }
        }
        if let Detail::Step {
            op,
            since_ns,
            bytes,
        } = &mut ev.detail
        {
            let g = global();
            if !args.is_null() {
                let size = (*args).trans_size as u64;
                if size > 0 {
                    *bytes = size;
                }
            }
            match state {
                abi::STEP_SEND_WAIT | abi::STEP_RECV_WAIT => *since_ns = now_ns(g).max(1),
                abi::STEP_RECV_FLUSH_WAIT | abi::STEP_RECV_GPU_WAIT if *since_ns > 0 => {
                    op.net_ns
                        .fetch_add(now_ns(g).saturating_sub(*since_ns), Ordering::Relaxed);
                    *since_ns = 0;
                }
                _ => {}
            }
        }
    })
}

unsafe extern "C" fn stop_event(handle: *mut c_void) -> NcclResult {
    guarded(|| {
        let Some(event) = ours(handle) else {
            if let (Some(t), false) = (global().chained, handle.is_null()) {
                (t.0.stop_event)(handle);
            }
            return;
        };
        let ev = Box::from_raw(event);
        if !ev.inner.is_null() {
            if let Some(t) = global().chained {
                (t.0.stop_event)(ev.inner);
            }
        }
        match &ev.detail {
            Detail::Step {
                op,
                since_ns,
                bytes,
            } => {
                if *since_ns > 0 {
                    op.net_ns.fetch_add(
                        now_ns(global()).saturating_sub(*since_ns),
                        Ordering::Relaxed,
                    );
                }
                op.steps.fetch_add(1, Ordering::Relaxed);
                op.bytes.fetch_add(*bytes, Ordering::Relaxed);
            }
            Detail::Op(op) => {
                let ctx = &*ev.ctx;
                if let Ok(mut comm) = ctx.comm.lock() {
                    comm.links.entry(op.key).or_default().add(&LinkTotals {
                        ops: 1,
                        steps: op.steps.load(Ordering::Relaxed),
                        bytes: op.bytes.load(Ordering::Relaxed),
                        net_ns: op.net_ns.load(Ordering::Relaxed),
                    });
                    comm.changed = true;
                }
            }
        }
    })
}

unsafe extern "C" fn finalize(context: *mut c_void) -> NcclResult {
    guarded(|| {
        if context.is_null() {
            return;
        }
        let ctx = Box::from_raw(context as *mut Ctx);
        let g = global();
        if let Some(t) = g.chained {
            (t.0.finalize)(ctx.inner);
        }
        write_changed(g, Some(&ctx.comm));
        if let Ok(mut all) = g.comms.lock() {
            all.retain(|c| !Arc::ptr_eq(c, &ctx.comm));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_cost_toggle_switches_nccls_mask_in_alternate_windows() {
        assert_eq!(cost_toggle_period(None), None);
        assert_eq!(cost_toggle_period(Some("50".into())), None);
        assert_eq!(cost_toggle_period(Some("two".into())), None);
        assert_eq!(cost_toggle_period(Some("2000".into())), Some(2000));
        assert!(cost_phase_on(0, 2000));
        assert!(cost_phase_on(1999, 2000));
        assert!(!cost_phase_on(2000, 2000));
        assert!(cost_phase_on(4000, 2000));
        let ours = c_int::try_from(abi::PROFILE_PROXY_OP | abi::PROFILE_PROXY_STEP).unwrap();
        MASK_WITH.store(0b1 | ours, Ordering::Relaxed);
        MASK_WITHOUT.store(0b1, Ordering::Relaxed);
        let mut nccl_mask: c_int = 0;
        unsafe { apply_cost_phase(&mut nccl_mask, 1000, 2000) };
        assert_eq!(nccl_mask, 0b1 | ours);
        unsafe { apply_cost_phase(&mut nccl_mask, 3000, 2000) };
        assert_eq!(nccl_mask, 0b1);
        unsafe { apply_cost_phase(null_mut(), 3000, 2000) };
    }

    /// Builds the C stand-in for the Inspector (`tests/chained_stub.c`) into `dir`.
    fn build_stub(dir: &std::path::Path) -> PathBuf {
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/chained_stub.c");
        let lib = dir.join("libchained_stub.so");
        let out = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&lib)
            .arg(&src)
            .output()
            .expect("cc (gcc) builds the chained stand-in");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        lib
    }

    /// One of the stand-in's global variables, read through its symbol.
    fn stub_symbol<T: Copy>(lib: &std::path::Path, name: &CStr) -> T {
        let path = CString::new(lib.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: the library is loaded (RTLD_NOLOAD finds it); the caller names the C type.
        unsafe {
            let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
            assert!(!h.is_null(), "the stand-in is not loaded");
            let sym = libc::dlsym(h, name.as_ptr());
            assert!(!sym.is_null());
            *(sym as *const T)
        }
    }

    /// One of the stand-in's counters.
    fn stub_count(lib: &std::path::Path, name: &CStr) -> i32 {
        stub_symbol::<i32>(lib, name)
    }

    fn descr(kind: u64, parent: *mut c_void) -> EventDescr {
        // SAFETY: an all-zero descriptor is what NCCL starts from (`= { 0 }`).
        let mut d: EventDescr = unsafe { std::mem::zeroed() };
        d.kind = kind;
        d.parent = parent;
        d.rank = 2;
        d
    }

    /// NCCL's calls for a collective with a kernel channel, one send of 2 steps and one
    /// receive of 1 step on rank 2 of a 4-rank communicator, through the exported table, as
    /// NCCL makes them, with a stand-in for the Inspector chained behind.
    #[test]
    fn a_send_and_a_receive_are_timed_and_the_chained_plugin_gets_its_own_events() {
        let dir = std::env::temp_dir().join(format!("gdwp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        // The one test that settles the process's configuration (the first init reads it).
        let stub = build_stub(&dir);
        std::env::set_var("GPUDIRECT_WATCH_CHAIN", &stub);
        std::env::set_var("GPUDIRECT_WATCH_DIR", &dir);
        std::env::set_var("GPUDIRECT_WATCH_INTERVAL_MS", "100000");
        let t = &ncclProfiler_v5.0;
        unsafe {
            let mut ctx = null_mut();
            let mut mask = 0;
            (t.init)(&mut ctx, 0xabc, &mut mask, c"dp".as_ptr(), 4, 4, 2, None);
            assert!(!ctx.is_null());
            assert_eq!(
                mask as u64,
                abi::PROFILE_COLL | (1 << 6) | abi::PROFILE_PROXY_OP | abi::PROFILE_PROXY_STEP
            );

            // A collective: the chained plugin's own handle is NCCL's. As NCCL 2.28.9 does,
            // the collective's task event is stopped on the host before the proxy thread
            // starts its kernel channel and its proxy ops, whose parent is that handle.
            let mut coll = null_mut();
            (t.start_event)(ctx, &mut coll, &mut descr(abi::PROFILE_COLL, null_mut()));
            let own = stub_symbol::<*mut c_void>(&stub, c"stub_coll_handle");
            assert_eq!(coll, own, "the chained plugin's handle, not a wrapper");
            (t.stop_event)(coll);
            let mut kernel = null_mut();
            (t.start_event)(ctx, &mut kernel, &mut descr(1 << 6, coll));
            (t.record_event_state)(kernel, 22, null_mut());
            (t.stop_event)(kernel);
            // A group event: nobody asked for it, no handle.
            let mut group = null_mut();
            (t.start_event)(ctx, &mut group, &mut descr(1, null_mut()));
            assert!(group.is_null());

            let mut send = null_mut();
            let mut d = descr(abi::PROFILE_PROXY_OP, coll);
            let pid = libc::pid_t::try_from(std::process::id()).unwrap();
            d.u.proxy_op = abi::ProxyOp {
                pid,
                channel_id: 1,
                peer: 3,
                n_steps: 2,
                chunk_size: 4096,
                is_send: 1,
            };
            (t.start_event)(ctx, &mut send, &mut d);
            for _ in 0..2 {
                let mut step = null_mut();
                let mut sd = descr(abi::PROFILE_PROXY_STEP, send);
                sd.u.proxy_step = abi::ProxyStep { step: 0 };
                (t.start_event)(ctx, &mut step, &mut sd);
                let mut args = abi::StateArgs { trans_size: 4096 };
                (t.record_event_state)(step, 8, &mut args); // SendGPUWait: not network time
                std::thread::sleep(Duration::from_millis(3));
                (t.record_event_state)(step, abi::STEP_SEND_WAIT, &mut args);
                std::thread::sleep(Duration::from_millis(5));
                (t.stop_event)(step);
            }
            (t.stop_event)(send);

            let mut recv = null_mut();
            let mut d = descr(abi::PROFILE_PROXY_OP, null_mut());
            d.u.proxy_op = abi::ProxyOp {
                pid,
                channel_id: 0,
                peer: 1,
                n_steps: 1,
                chunk_size: 4096,
                is_send: 0,
            };
            (t.start_event)(ctx, &mut recv, &mut d);
            let mut step = null_mut();
            (t.start_event)(ctx, &mut step, &mut descr(abi::PROFILE_PROXY_STEP, recv));
            (t.record_event_state)(step, abi::STEP_RECV_WAIT, null_mut());
            std::thread::sleep(Duration::from_millis(4));
            let mut args = abi::StateArgs { trans_size: 100 };
            (t.record_event_state)(step, abi::STEP_RECV_FLUSH_WAIT, &mut args);
            std::thread::sleep(Duration::from_millis(20)); // GPU wait: not counted
            (t.stop_event)(step);
            (t.stop_event)(recv);
            // Bad calls NCCL never makes are still answered, not crashed on.
            (t.stop_event)(null_mut());
            (t.record_event_state)(null_mut(), 9, null_mut());
            (t.finalize)(ctx);
        }
        for (counter, want) in [
            (c"stub_inits", 1),
            (c"stub_colls", 1),
            (c"stub_kernels", 1),
            (c"stub_kernel_parent_ok", 1),
            (c"stub_others", 0),
            (c"stub_stops", 2),
            (c"stub_states", 1),
            (c"stub_finalized", 1),
        ] {
            assert_eq!(stub_count(&stub, counter), want, "{counter:?}");
        }
        let file = dir.join(format!("{}-pid{}.links", host_name(), std::process::id()));
        let text = std::fs::read_to_string(&file).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        let links = &text[text.find("\"links\":[").unwrap()..];
        // [peer, channel, dir, ops, steps, bytes, net_ns]
        let nums = |s: &str| -> Vec<u64> {
            s.split(',')
                .skip(3)
                .map(|v| v.trim_end_matches(']').parse().unwrap())
                .collect()
        };
        let recv = links
            .split("[1,0,\"r\",")
            .nth(1)
            .unwrap()
            .split(']')
            .next()
            .unwrap();
        let send = links
            .split("[3,1,\"s\",")
            .nth(1)
            .unwrap()
            .split(']')
            .next()
            .unwrap();
        let (recv, send) = (
            nums(&format!("x,x,x,{recv}")),
            nums(&format!("x,x,x,{send}")),
        );
        assert_eq!(&send[..3], &[1, 2, 8192]);
        assert!(
            (10_000_000..20_000_000).contains(&send[3]),
            "send net ns {}",
            send[3]
        );
        assert_eq!(&recv[..3], &[1, 1, 100]);
        assert!(
            (4_000_000..15_000_000).contains(&recv[3]),
            "recv net ns {}",
            recv[3]
        );
        assert!(text.contains("\"comm\":\"0xabc\",\"name\":\"dp\",\"rank\":2,\"nranks\":4"));
    }
}
