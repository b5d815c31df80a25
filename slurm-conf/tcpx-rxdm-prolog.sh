#!/bin/bash
# EXAMPLE Slurm prolog (slurm.conf: Prolog=/etc/slurm/tcpx-rxdm-prolog.sh, PrologFlags=Alloc)
# for GPUDirect-TCPX on a3-highgpu-8g: start the TCPX receive daemon (RxDM) for this job and
# wait until it listens, so the plugin's readiness check (profile tcpx, checks.rxdm_socket_dir
# = /run/tcpx-{job_id}: the directory must exist and hold a socket) passes when tasks start.
# slurm-gcp does the same in its prolog. Adapt the start command to your image; this file is
# not run by the project's tests (no RxDM exists off GCP).
set -euo pipefail
dir=/run/tcpx-${SLURM_JOB_ID:?this runs as a Slurm prolog}
install -d -m 0755 "$dir"

# The command that starts RxDM with $dir as its socket path, from Google's GPUDirect-TCPX
# documentation for your image (a privileged container with host networking, the GPUs, the
# NVIDIA libraries and $dir mounted; flags such as --gpu_nic_preset a3vm --gpu_shmem_type fd
# --uds_path "$dir"). Keep it in this site file, one line, referring to $dir:
start_file=/etc/slurm/tcpx-rxdm-start
[[ -r $start_file ]] || { echo "tcpx prolog: no $start_file (the RxDM start command)" >&2; exit 1; }
dir=$dir bash "$start_file"

for _ in $(seq 300); do
	if find "$dir" -maxdepth 1 -type s | grep -q .; then exit 0; fi
	sleep 0.1
done
echo "tcpx prolog: RxDM created no socket in $dir within 30 s" >&2
exit 1
