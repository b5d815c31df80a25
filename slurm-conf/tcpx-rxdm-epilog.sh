#!/bin/bash
# EXAMPLE Slurm epilog (slurm.conf: Epilog=/etc/slurm/tcpx-rxdm-epilog.sh): stop this job's
# RxDM and remove its socket directory. Pairs with tcpx-rxdm-prolog.sh; adapt the stop
# command to how the prolog started it (e.g. `docker stop rxdm-$SLURM_JOB_ID`).
set -uo pipefail
dir=/run/tcpx-${SLURM_JOB_ID:?this runs as a Slurm epilog}
stop_file=/etc/slurm/tcpx-rxdm-stop
[[ -r $stop_file ]] && dir=$dir bash "$stop_file"
rm -rf -- "$dir"
exit 0
