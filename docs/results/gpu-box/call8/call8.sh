#!/bin/bash
# Call 8 (issues #30, #27): gpudirect log on a torch job under srun --gpudirect (the profile's NIC,
# then a user's NCCL_SOCKET_IFNAME=eth0), and the health step with a root-only history.
. .gpubed/setup.sh
timeout 420 scripts/gpu-box --out /tmp/gpu-box-out --gpudirect $PWD/.gpubed/gpudirect log health > $OUT/gpu-box.log 2>&1
echo "gpu-box rc=$?"
grep -v "NCCL INFO" $OUT/gpu-box.log | tail -120
chmod -R a+r /tmp/gpu-box-out; tar czf $OUT/gpu-box-out.tgz -C /tmp gpu-box-out 2>/dev/null; ls $OUT
