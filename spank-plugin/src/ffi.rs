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
//! - `spank_prepend_task_argv`: a stub for Slurm 22.05, which lacks it.
//! - `spank_option_callback`: slurm-spank's own, exported by that crate; unused here.
//!
//! No panic crosses into Slurm: the callbacks run inside slurm-spank's guard
//! (`catch_unwind`, a panic is logged and the callback returns -1), and the option
//! callback, which Slurm calls directly, has its own. That needs `panic = "unwind"`
//! (the workspace's release profile) and an unwinder, linked statically (build.rs).

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
    // Slurm keeps the pointers: the strings must live as long as the process.
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
                plugin.$method(&mut handle)
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
/// definition the plugin would not load. The plugin never calls it.
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
