/*
 * Compatibility shim used only when bindgen generates the slurm-spank crate's bindings.
 *
 * slurm-spank 0.4 binds spank_prepend_task_argv(), which Slurm added in 23.x; Debian
 * bookworm's Slurm 22.05 header lacks it. `.cargo/config.toml` puts this folder on CPATH,
 * so `#include <slurm/spank.h>` lands here first, includes the real header, and declares
 * the missing function. The plugin defines it as a stub returning ESPANK_NOT_AVAIL.
 */
#include_next <slurm/spank.h>
#include <slurm/slurm_version.h>

#if SLURM_VERSION_NUMBER < SLURM_VERSION_NUM(23, 0, 0)
extern spank_err_t spank_prepend_task_argv(spank_t spank, int argc, const char *argv[]);
#endif
