//! Everything Slurm sees of the plugin: every `extern "C"` and `unsafe` item of the crate
//! lives here, and this is the only module that uses slurm-spank's `#[doc(hidden)]` API
//! (`spank_callback_with_globals`, `init_spank_handle`). The policy behind each symbol is
//! safe Rust in the crate root.
//!
//! What is exported, and why only that (`nm -D --defined-only`):
//! - `plugin_name`, `plugin_type`, `plugin_version`: read by Slurm's plugin loader.
//! - `slurm_spank_init`, `slurm_spank_init_post_opt`, `slurm_spank_user_init`,
//!   `slurm_spank_task_init`: the callbacks the plugin implements, and no others
//!   (`export_callback!` says why).
//! - `spank_prepend_task_argv`: a stub, only when built against a Slurm older than 23.x,
//!   whose header lacks it (build.rs sets `slurm_lacks_prepend_task_argv`).
//!
//! rustc would also export every `#[no_mangle]` item of the crates linked in (slurm-spank's
//! unused `spank_option_callback`); build.rs links with `--exclude-libs=ALL`, which keeps
//! the symbols of those archives, and of the static unwinder, out of the dynamic table
//! (review F10; the cluster test `the_plugin_exports_only_its_own_symbols` checks `nm -D`).
//!
//! No panic crosses into Slurm: the callbacks catch their own panics (lib.rs, so that a
//! `strict` profile still fails closed after one, review F7) and run inside slurm-spank's
//! guard besides (`catch_unwind`, a panic is logged and the callback returns -1); the option
//! callback, which Slurm calls directly, has its own. That needs `panic = "unwind"`
//! (the workspace's release profile) and an unwinder, linked statically (build.rs).

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, CStr, CString};

use slurm_spank::spank_sys;

use crate::GpuDirect;

/// The SPANK option, as users write it: `--gpudirect=MODE`.
const OPTION: &CStr = c"gpudirect";

#[no_mangle]
#[used]
/// Slurm's plugin loader reads these three symbols.
pub static plugin_name: [u8; 10] = *b"gpudirect\0";
#[no_mangle]
#[used]
/// The plugin type Slurm expects of a SPANK plugin.
pub static plugin_type: [u8; 6] = *b"spank\0";
#[no_mangle]
#[used]
/// The Slurm version the plugin was built against.
pub static plugin_version: c_uint = spank_sys::SLURM_VERSION_NUMBER;

/// Called by Slurm for `--gpudirect=MODE` in every context where options are processed.
/// Returning -1 makes srun/sbatch/salloc refuse the command line before submitting.
extern "C" fn option_callback(_val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    let outcome = std::panic::catch_unwind(|| {
        let value = if optarg.is_null() {
            None
        } else {
            // SAFETY: Slurm passes a NUL-terminated string that lives during the call.
            Some(unsafe { CStr::from_ptr(optarg) }.to_bytes())
        };
        if crate::accept_option(value, remote != 0) {
            0
        } else {
            -1
        }
    });
    outcome.unwrap_or(-1)
}

/// Registers `--gpudirect` with our own callback, so that a bad value is refused at
/// parse time (slurm-spank's generic callback accepts any value).
fn register_option(spank: spank_sys::spank_t) -> Result<(), String> {
    let usage = "Apply a fabric profile from the admin's config to every task (NCCL/transport \
         variables, library path, NIC and CPU pinning by local rank). MODE: a profile \
         (`gpudirect profiles list`), `auto` (this node's default) or `none`.";
    // Slurm 22.05 and later copy the option's strings (spank_option_register), but earlier
    // ones kept the pointers: the strings are leaked so that they live as long as the
    // process either way (a few hundred bytes, once).
    let usage = CString::new(usage)
        .map_err(|_| "usage text has a NUL".to_string())?
        .into_raw();
    let mut option = spank_sys::spank_option {
        name: OPTION.as_ptr(),
        arginfo: c"MODE".as_ptr(),
        usage,
        has_arg: 1,
        val: 0,
        cb: Some(option_callback),
    };
    // SAFETY: `spank` is the handle Slurm gave this init callback; `option` is valid.
    let rc = unsafe { spank_sys::spank_option_register(spank, &mut option) };
    if rc == spank_sys::ESPANK_SUCCESS {
        Ok(())
    } else {
        Err(format!("could not register --gpudirect (spank error {rc})"))
    }
}

/// Ends the task's process now, with `code`, running no exit handlers: for a task that
/// must not reach exec. Only for `task_init`, which runs in the task's forked process.
pub(crate) fn exit_task(code: c_int) -> ! {
    // SAFETY: `_exit` has no preconditions; in the task's forked child, before exec,
    // skipping atexit handlers and stdio flushes of slurmstepd's copy is what we want.
    unsafe { libc::_exit(code) }
}

thread_local! {
    /// The SPANK handle of the callback now running, for [`job_env`]; null outside one.
    /// (slurm-spank's handle does not give its raw pointer back.)
    static CURRENT: Cell<spank_sys::spank_t> = const { Cell::new(std::ptr::null_mut()) };
}

/// Runs `callback` with `spank` as the current handle for [`job_env`].
fn with_handle<T>(spank: spank_sys::spank_t, callback: impl FnOnce() -> T) -> T {
    let outer = CURRENT.with(|c| c.replace(spank));
    let result = callback();
    CURRENT.with(|c| c.set(outer));
    result
}

/// Why a job variable could not be read by [`job_env`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JobEnvError {
    /// The value is longer than the reader's limit; it was not copied.
    TooLong { max: usize },
    /// The value is not UTF-8.
    NotUtf8,
    /// Slurm refused the read (outside a remote callback), with its error code.
    Unavailable(u32),
}

/// Reads `name` from the job's environment (remote context) into a buffer of `max` bytes,
/// whatever the value's size: slurm-spank's getenv doubles its buffer until the value
/// fits, so a launch request with a value of hundreds of MB would have slurmstepd, as
/// root, copy it several times (security review F6). Stock srun caps values at 256 KiB.
pub(crate) fn job_env(name: &str, max: usize) -> Result<Option<String>, JobEnvError> {
    let spank = CURRENT.with(Cell::get);
    let Ok(c_name) = CString::new(name) else {
        return Ok(None);
    };
    if spank.is_null() {
        return Err(JobEnvError::Unavailable(
            spank_sys::slurm_err_t_ESPANK_BAD_ARG,
        ));
    }
    // One byte more for the NUL that spank_getenv writes.
    let mut buf = vec![0u8; max + 1];
    let Ok(len) = c_int::try_from(buf.len()) else {
        return Err(JobEnvError::TooLong { max });
    };
    // SAFETY: `spank` is the running callback's handle (set by `with_handle`); `buf` is
    // writable for `len` bytes and spank_getenv writes at most that many, NUL included.
    let rc =
        unsafe { spank_sys::spank_getenv(spank, c_name.as_ptr(), buf.as_mut_ptr().cast(), len) };
    match rc {
        spank_sys::ESPANK_SUCCESS => {
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            buf.truncate(end);
            String::from_utf8(buf)
                .map(Some)
                .map_err(|_| JobEnvError::NotUtf8)
        }
        spank_sys::slurm_err_t_ESPANK_ENV_NOEXIST => Ok(None),
        spank_sys::slurm_err_t_ESPANK_NOSPACE => Err(JobEnvError::TooLong { max }),
        other => Err(JobEnvError::Unavailable(other)),
    }
}

/// Exports one SPANK callback, routed through slurm-spank's panic guard.
///
/// slurm-spank's `SPANK_PLUGIN!` exports every callback, including job_prolog/epilog,
/// whose mere presence makes slurmd run an extra pass per job (measured: 43 ms against
/// 30 ms for `srun -N1 true`). Exporting only what we implement keeps the plugin free.
macro_rules! export_callback {
    ($c_name:ident, $method:ident) => {
        #[no_mangle]
        #[doc(hidden)]
        pub extern "C" fn $c_name(
            spank: spank_sys::spank_t,
            ac: c_int,
            argv: *const *const c_char,
        ) -> c_int {
            slurm_spank::spank_callback_with_globals::<GpuDirect, _>(|plugin, options, _setup| {
                let mut handle = slurm_spank::init_spank_handle(spank, ac, argv, options);
                with_handle(spank, || plugin.$method(&mut handle))
            })
        }
    };
}

export_callback!(slurm_spank_init_post_opt, init_post_opt);
export_callback!(slurm_spank_user_init, user_init);
export_callback!(slurm_spank_task_init, task_init);

/// `slurm_spank_init`: takes the plugstack.conf arguments and registers `--gpudirect`
/// (all user contexts); [`crate::init`] says what each context does.
#[no_mangle]
#[doc(hidden)]
pub extern "C" fn slurm_spank_init(
    spank: spank_sys::spank_t,
    ac: c_int,
    argv: *const *const c_char,
) -> c_int {
    slurm_spank::spank_callback_with_globals::<GpuDirect, _>(|_plugin, options, _setup| {
        let handle = slurm_spank::init_spank_handle(spank, ac, argv, options);
        crate::init(&handle, || register_option(spank))
    })
}

/// Slurm 22.05 lacks `spank_prepend_task_argv`, which slurm-spank 0.4 binds; without this
/// definition the plugin would not load. The plugin never calls it. Built against a Slurm
/// that has it (23.x and later), the plugin defines nothing of that name (build.rs).
#[cfg(slurm_lacks_prepend_task_argv)]
#[no_mangle]
#[doc(hidden)]
pub extern "C" fn spank_prepend_task_argv(
    _spank: spank_sys::spank_t,
    _argc: c_int,
    _argv: *mut *const c_char,
) -> spank_sys::spank_err_t {
    spank_sys::slurm_err_t_ESPANK_NOT_AVAIL
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary links the unwinder as the plugin does (build.rs): a panic must
    /// still unwind to the guard, as slurm-spank's does at each callback.
    #[test]
    fn panics_unwind_with_the_static_unwinder() {
        let caught = std::panic::catch_unwind(|| {
            let message = String::from("boom");
            panic!("{message}");
        });
        assert!(caught.is_err());
    }

    #[test]
    fn plugin_symbols_are_nul_terminated() {
        assert_eq!(CStr::from_bytes_with_nul(&plugin_name), Ok(c"gpudirect"));
        assert_eq!(CStr::from_bytes_with_nul(&plugin_type), Ok(c"spank"));
    }
}
