//! NCCL's profiler plugin interface, version 5 (NCCL 2.28 and later), as C lays it out.
//!
//! Written from the interface NCCL documents in its source (`profiler_v5.h`,
//! `nccl_profiler.h`): the event descriptor, the state arguments, the function table, the
//! event types and the proxy step states. Only the layout matters here: a descriptor is
//! copied whole before it is handed to the chained plugin, so every member of its union is
//! declared and the copy has NCCL's size.

use std::ffi::{c_char, c_int, c_void};

/// `ncclResult_t`: 0 is success. The plugin never fails NCCL: every entry answers 0.
pub type NcclResult = c_int;
pub const NCCL_SUCCESS: NcclResult = 0;

/// Event types (`ncclProfileColl`, ...), the bits of the activation mask.
pub const PROFILE_COLL: u64 = 1 << 1;
pub const PROFILE_P2P: u64 = 1 << 2;
pub const PROFILE_PROXY_OP: u64 = 1 << 3;
pub const PROFILE_PROXY_STEP: u64 = 1 << 4;

/// Proxy step states (`ncclProfilerProxyStep*`).
pub const STEP_SEND_WAIT: c_int = 9;
pub const STEP_RECV_WAIT: c_int = 10;
pub const STEP_RECV_FLUSH_WAIT: c_int = 11;
pub const STEP_RECV_GPU_WAIT: c_int = 12;

/// `ncclDebugLogger_t`: NCCL's logger, printf-like.
pub type Logger = Option<
    unsafe extern "C" fn(c_int, std::ffi::c_ulong, *const c_char, c_int, *const c_char, ...),
>;
/// `NCCL_LOG_INFO` and the `NCCL_INIT` subsystem, where the Inspector logs too.
pub const LOG_INFO: c_int = 3;
pub const SUBSYS_INIT: std::ffi::c_ulong = 0x1;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct GroupApi {
    pub graph_captured: c_int,
    pub group_depth: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollApi {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub root: c_int,
    pub stream: *mut c_void,
    pub graph_captured: bool,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pApi {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub stream: *mut c_void,
    pub graph_captured: bool,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Coll {
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub n_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
    /// The group event's handle (kept for version 4's plugins): one of ours, translated.
    pub parent_group: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2p {
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
    pub n_channels: u8,
    /// As [`Coll::parent_group`].
    pub parent_group: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyOp {
    pub pid: libc::pid_t,
    pub channel_id: u8,
    pub peer: c_int,
    pub n_steps: c_int,
    pub chunk_size: c_int,
    pub is_send: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyStep {
    pub step: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelCh {
    pub channel_id: u8,
    pub p_timer: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetPlugin {
    pub id: i64,
    pub data: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnion {
    pub group_api: GroupApi,
    pub coll_api: CollApi,
    pub p2p_api: P2pApi,
    pub kernel_launch: *mut c_void,
    pub coll: Coll,
    pub p2p: P2p,
    pub proxy_op: ProxyOp,
    pub proxy_step: ProxyStep,
    pub kernel_ch: KernelCh,
    pub net_plugin: NetPlugin,
}

/// `ncclProfilerEventDescr_v5_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventDescr {
    pub kind: u64,
    /// The parent event's handle, as this plugin returned it.
    pub parent: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnion,
}

/// `ncclProfilerEventStateArgs_v5_t`: a union of which the proxy step's `transSize` is
/// read; its size is the largest member's.
#[repr(C)]
#[derive(Clone, Copy)]
pub union StateArgs {
    pub trans_size: usize,
    pub appended_proxy_ops: c_int,
    pub data: *mut c_void,
    pub p_timer: u64,
}

/// `ncclProfiler_v5_t`: the table NCCL looks up as the symbol `ncclProfiler_v5`.
#[repr(C)]
pub struct ProfilerV5 {
    pub name: *const c_char,
    pub init: unsafe extern "C" fn(
        *mut *mut c_void,
        u64,
        *mut c_int,
        *const c_char,
        c_int,
        c_int,
        c_int,
        Logger,
    ) -> NcclResult,
    pub start_event:
        unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut EventDescr) -> NcclResult,
    pub stop_event: unsafe extern "C" fn(*mut c_void) -> NcclResult,
    pub record_event_state: unsafe extern "C" fn(*mut c_void, c_int, *mut StateArgs) -> NcclResult,
    pub finalize: unsafe extern "C" fn(*mut c_void) -> NcclResult,
}

/// The exported table: raw pointers are not `Sync`, but the table is never written.
#[repr(transparent)]
pub struct Exported(pub ProfilerV5);
// SAFETY: the table is immutable after link time; NCCL only reads it.
unsafe impl Sync for Exported {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_descriptor_has_nccls_size_and_offsets_on_x86_64() {
        // profiler_v5.h on LP64: type (8), parentObj (8), rank (4 + 4 padding), then the
        // union, whose largest member is the collective (88 bytes).
        assert_eq!(std::mem::size_of::<Coll>(), 88);
        assert_eq!(std::mem::size_of::<EventDescr>(), 112);
        assert_eq!(std::mem::offset_of!(EventDescr, u), 24);
        assert_eq!(std::mem::offset_of!(Coll, parent_group), 80);
        assert_eq!(std::mem::offset_of!(P2p, parent_group), 40);
        assert_eq!(std::mem::offset_of!(ProxyOp, peer), 8);
        assert_eq!(std::mem::offset_of!(ProxyOp, is_send), 20);
        assert_eq!(std::mem::size_of::<StateArgs>(), 8);
    }
}
