#!/bin/bash
# Call 7 (issue #29): gpudirect vet on the bed, the template's batch job, clean and with node3's eth1 shaped.
. .gpubed/setup.sh
timeout 500 scripts/gpu-box --out /tmp/gpu-box-out --gpudirect $PWD/.gpubed/gpudirect vet > $OUT/gpu-box.log 2>&1
echo "gpu-box rc=$?"
grep -v "NCCL INFO" $OUT/gpu-box.log | tail -80
chmod -R a+r /tmp/gpu-box-out; tar czf $OUT/gpu-box-out.tgz -C /tmp gpu-box-out 2>/dev/null; ls $OUT
