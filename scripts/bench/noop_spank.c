/*
 * The yardstick for scripts/bench-plugin: the cheapest SPANK plugin there is, one init
 * callback that does nothing. Loading any plugin costs srun and slurmstepd a dlopen and a
 * config parse; spank_gpudirect.so should cost no more than this.
 */
#include <slurm/spank.h>

SPANK_PLUGIN(noop, 1);

int slurm_spank_init(spank_t spank, int argc, char **argv)
{
	(void)spank;
	(void)argc;
	(void)argv;
	return 0;
}
