#!/bin/sh
# Builds the sysfs fixture trees used by gpudirect_core::locality tests, by
# `gpudirect profiles explain --sysfs` and by `gpudirect profiles generate --sysfs`.
# Re-run after editing; commit the result. README.md here says, per tree, which facts
# are recorded (with their source) and which are illustrative; expected.toml holds the
# GPU -> NIC map each tree must give.
#
# Each tree holds only what the readers read, laid out as Linux does:
#   devices/<parents>/<bdf>/{vendor,device,class,numa_node,
#                            current_link_speed,current_link_width,max_link_speed,max_link_width}
#     <parents> is pciDDDD:BB/<bridge>/... ; on Azure the host bridge itself sits under a
#     VMBus device, as Hyper-V's pci-hyperv driver places it
#   devices/<nic>/net/<if>/{operstate,speed,address}
#   devices/<nic>/infiniband/<hca>/ports/1/{state,rate,link_layer}
#   bus/pci/devices/<bdf> -> ../../../devices/<parents>/<bdf>
#   class/net/<if> -> ../../devices/<nic>/net/<if>
#   class/infiniband/<hca> -> ../../devices/<nic>/infiniband/<hca>
#   devices/system/node/nodeN/cpulist
# Linux's net/<if>/device and infiniband/<hca>/device links are left out: they point back up
# the tree, and a directory cycle trips tools that walk it. A NIC is the parent of net/ (or
# infiniband/) in the resolved class/ link.
# and beside each tree a small /proc, <name>.proc/:
#   net/route                               (default route and link route of the control NIC)
#   driver/nvidia/gpus/<bdf>/information    (as the NVIDIA driver writes it)
#
# Trees: a3-high, a3-mega, a3-ultra, a4, p5, nd-h100-v5 (published layouts), flat-vm (no
# switches: locality cannot be told), missing-nic (a3-high without eth3); and for
# `gpudirect health`'s nic_counters, cx7-counters and gvnic-counters with their -later
# readings (the NICs and their error counters only).
set -eu
here=$(cd "$(dirname "$0")" && pwd)

# --- helpers ---------------------------------------------------------------------------
# Every helper writes into the tree $r and its /proc $p, set by `start`.

# put DIR FILE VALUE: one sysfs attribute, newline-terminated as the kernel writes it.
put() { printf '%s\n' "$3" > "$1/$2"; }

tree_n=0
# start NAME: a fresh, empty tree and /proc tree.
start() {
    r=$here/$1
    p=$here/$1.proc
    rm -rf "$r" "$p"
    mkdir -p "$r" "$p"
    tree_n=$((tree_n + 1))
    mac_n=0
    gpu_n=0
}

# pci CHAIN VENDOR DEVICE CLASS NUMA GTS WIDTH: one PCI function at devices/CHAIN (its last
# component is its BDF). DEVICE "-": not known, no file. GTS "-": not PCI Express, no link
# files; otherwise the link runs at GTS GT/s over WIDTH lanes, which is also its maximum.
pci() {
    pc_dir=$r/devices/$1
    mkdir -p "$pc_dir" "$r/bus/pci/devices"
    put "$pc_dir" vendor "$2"
    if [ "$3" != - ]; then put "$pc_dir" device "$3"; fi
    put "$pc_dir" class "$4"
    put "$pc_dir" numa_node "$5"
    if [ "$6" != - ]; then
        put "$pc_dir" current_link_speed "$6 GT/s PCIe"
        put "$pc_dir" max_link_speed "$6 GT/s PCIe"
        put "$pc_dir" current_link_width "$7"
        put "$pc_dir" max_link_width "$7"
    fi
    ln -sfn "../../../devices/$1" "$r/bus/pci/devices/${1##*/}"
}

# bridge CHAIN VENDOR DEVICE NUMA GTS WIDTH: a PCI-to-PCI bridge (root or switch port).
bridge() { pci "$1" "$2" "$3" 0x060400 "$4" "$5" "$6"; }

# netdev DEVDIR IFNAME SPEED: network interface IFNAME of the device at devices/DEVDIR,
# up, SPEED Mb/s, with a made-up locally administered MAC, and its /sys/class/net link.
netdev() {
    nd_dir=$r/devices/$1/net/$2
    mkdir -p "$nd_dir" "$r/class/net"
    put "$nd_dir" operstate up
    put "$nd_dir" speed "$3"
    mac_n=$((mac_n + 1))
    put "$nd_dir" address "$(printf '02:67:64:%02x:00:%02x' "$tree_n" "$mac_n")"
    ln -sfn "../../devices/$1/net/$2" "$r/class/net/$2"
}

# rdma DEVDIR HCA RATE LINK_LAYER: RDMA device HCA of the device at devices/DEVDIR, port 1
# active, and its /sys/class/infiniband link.
rdma() {
    rd_dir=$r/devices/$1/infiniband/$2
    mkdir -p "$rd_dir/ports/1" "$r/class/infiniband"
    put "$rd_dir/ports/1" state '4: ACTIVE'
    put "$rd_dir/ports/1" rate "$3"
    put "$rd_dir/ports/1" link_layer "$4"
    ln -sfn "../../devices/$1/infiniband/$2" "$r/class/infiniband/$2"
}

# numa N CPULIST
numa() {
    mkdir -p "$r/devices/system/node/node$1"
    put "$r/devices/system/node/node$1" cpulist "$2"
}

# gpu_kind DEVICE MODEL VBIOS FIRMWARE: what the following `gpu` calls create.
gpu_kind() { gk_dev=$1 gk_model=$2 gk_vbios=$3 gk_fw=$4; }

# gpu CHAIN NUMA: an NVIDIA 3D controller (PCIe 5.0 x16) and its
# /proc/driver/nvidia/gpus/<bdf>/information. Call in PCI bus order: the device minor
# (nvidia-smi's index) counts the calls.
gpu() {
    pci "$1" 0x10de "$gk_dev" 0x030200 "$2" 32.0 16
    gi_dir=$p/driver/nvidia/gpus/${1##*/}
    mkdir -p "$gi_dir"
    {
        printf 'Model: \t\t %s\n' "$gk_model"
        printf 'IRQ:   \t\t %d\n' $((150 + gpu_n))
        printf 'GPU UUID: \t GPU-%08x-%04x-4%03x-8000-%012x\n' $((0x5ca1ab1e + tree_n)) "$gpu_n" "$tree_n" "$gpu_n"
        printf 'Video BIOS: \t %s\n' "$gk_vbios"
        printf 'Bus Type: \t PCIe\n'
        printf 'DMA Size: \t 52 bits\n'
        printf 'DMA Mask: \t 0xfffffffffffff\n'
        printf 'Bus Location: \t %s\n' "${1##*/}"
        printf 'Device Minor: \t %d\n' "$gpu_n"
        printf 'GPU Firmware: \t %s\n' "$gk_fw"
        printf 'GPU Excluded:\t No\n'
    } > "$gi_dir/information"
    gpu_n=$((gpu_n + 1))
}

# hexip A.B.C.D: the address as /proc/net/route prints it (network order read as a
# little-endian word).
# shellcheck disable=SC2086 # the split on dots is the point
hexip() { (IFS=.; set -- $1; printf '%02X%02X%02X%02X' "$4" "$3" "$2" "$1"); }

# route IFACE GATEWAY NETWORK MASK: /proc/net/route with IFACE's default route via GATEWAY
# and its link route to NETWORK/MASK; every line padded to 127 characters, as the kernel does.
route() {
    mkdir -p "$p/net"
    {
        printf '%-127s\n' "$(printf 'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT')"
        printf '%-127s\n' "$(printf '%s\t00000000\t%s\t0003\t0\t0\t0\t00000000\t0\t0\t0' "$1" "$(hexip "$2")")"
        printf '%-127s\n' "$(printf '%s\t%s\t00000000\t0001\t0\t0\t0\t%s\t0\t0\t0' "$1" "$(hexip "$3")" "$(hexip "$4")")"
    } > "$p/net/route"
}

# hex N: two lowercase hex digits.
hex() { printf '%02x' "$1"; }

# Device ids.
H100_SXM=0x2330 H100_PCIE=0x2331 H200_SXM=0x2335 B200=0x2901 NVSWITCH_H100=0x22a3
GVNIC=0x0042 CX7=0x1021 CX7_VF=0x101e CX6DX=0x101d EFA2=0xefa1 ENA=0xec20

# --- A3 High (and the missing-NIC variant) ----------------------------------------------
# a3h_group HOST RP UP DNBUS GPU GPU NIC IFNAME NODE: one PCIe switch behind root port RP:
# upstream port UP, downstream ports DNBUS:01.0-03.0 holding two GPUs and the data NIC.
# The NIC is left out when IFNAME is $a3h_skip (its switch port stays, empty).
a3h_group() {
    g_sw=$1/$2/$3
    bridge "$1/$2" 0x8086 - "$9" 32.0 16
    bridge "$g_sw" 0x8086 - "$9" 32.0 16
    for g_port in 01 02 03; do
        bridge "$g_sw/0000:$4:$g_port.0" 0x8086 - "$9" 32.0 16
    done
    gpu "$g_sw/0000:$4:01.0/$5" "$9"
    gpu "$g_sw/0000:$4:02.0/$6" "$9"
    if [ "$8" != "$a3h_skip" ]; then
        pci "$g_sw/0000:$4:03.0/$7" 0x1ae0 $GVNIC 0x020000 "$9" 16.0 16
        netdev "$g_sw/0000:$4:03.0/$7" "$8" 200000
    fi
}

# a3h NAME SKIP: the A3 High tree as NAME, without data NIC SKIP ("-": all four).
a3h() {
    start "$1"
    a3h_skip=$2
    numa 0 0-51,104-155
    numa 1 52-103,156-207
    gpu_kind $H100_SXM "NVIDIA H100 80GB HBM3" 96.00.99.00.01 550.90.07
    pci pci0000:00/0000:00:0c.0 0x1ae0 $GVNIC 0x020000 0 16.0 16
    netdev pci0000:00/0000:00:0c.0 eth0 200000
    a3h_group pci0000:00 0000:00:01.0 0000:01:00.0 02 0000:04:00.0 0000:05:00.0 0000:06:00.0 eth1 0
    a3h_group pci0000:00 0000:00:02.0 0000:07:00.0 08 0000:0a:00.0 0000:0b:00.0 0000:0c:00.0 eth2 0
    a3h_group pci0000:80 0000:80:01.0 0000:81:00.0 82 0000:84:00.0 0000:85:00.0 0000:86:00.0 eth3 1
    a3h_group pci0000:80 0000:80:02.0 0000:87:00.0 88 0000:8a:00.0 0000:8b:00.0 0000:8c:00.0 eth4 1
    # An NVSwitch: NVIDIA's vendor id, bridge class: not a GPU.
    bridge pci0000:00/0000:00:03.0 0x8086 - 0 16.0 4
    pci pci0000:00/0000:00:03.0/0000:40:00.0 0x10de $NVSWITCH_H100 0x068000 0 16.0 2
    route eth0 10.128.0.1 10.128.0.0 255.255.240.0
}

a3h a3-high -
a3h missing-nic eth3

# --- A3 Mega ------------------------------------------------------------------------------
# a3m_group HOST RP UP DNBUS GPU GPU NIC IFNAME NIC IFNAME NODE: one PCIe switch whose
# downstream ports DNBUS:01.0-04.0 hold two GPUs and two data NICs side by side.
a3m_group() {
    g_sw=$1/$2/$3
    g_node=${11}
    bridge "$1/$2" 0x8086 - "$g_node" 32.0 16
    bridge "$g_sw" 0x8086 - "$g_node" 32.0 16
    for g_port in 01 02 03 04; do
        bridge "$g_sw/0000:$4:$g_port.0" 0x8086 - "$g_node" 32.0 16
    done
    gpu "$g_sw/0000:$4:01.0/$5" "$g_node"
    gpu "$g_sw/0000:$4:02.0/$6" "$g_node"
    pci "$g_sw/0000:$4:03.0/$7" 0x1ae0 $GVNIC 0x020000 "$g_node" 16.0 16
    netdev "$g_sw/0000:$4:03.0/$7" "$8" 200000
    pci "$g_sw/0000:$4:04.0/$9" 0x1ae0 $GVNIC 0x020000 "$g_node" 16.0 16
    netdev "$g_sw/0000:$4:04.0/$9" "${10}" 200000
}

start a3-mega
numa 0 0-51,104-155
numa 1 52-103,156-207
gpu_kind $H100_SXM "NVIDIA H100 80GB HBM3" 96.00.99.00.01 550.90.07
pci pci0000:00/0000:00:0c.0 0x1ae0 $GVNIC 0x020000 0 16.0 16
netdev pci0000:00/0000:00:0c.0 enp0s12 200000
a3m_group pci0000:00 0000:00:01.0 0000:01:00.0 02 0000:04:00.0 0000:05:00.0 0000:06:00.0 enp6s0 0000:07:00.0 enp7s0 0
a3m_group pci0000:00 0000:00:02.0 0000:08:00.0 09 0000:0b:00.0 0000:0c:00.0 0000:0d:00.0 enp13s0 0000:0e:00.0 enp14s0 0
a3m_group pci0000:80 0000:80:01.0 0000:81:00.0 82 0000:84:00.0 0000:85:00.0 0000:86:00.0 enp134s0 0000:87:00.0 enp135s0 1
a3m_group pci0000:80 0000:80:02.0 0000:88:00.0 89 0000:8b:00.0 0000:8c:00.0 0000:8d:00.0 enp141s0 0000:8e:00.0 enp142s0 1
route enp0s12 10.128.0.1 10.128.0.0 255.255.240.0

# --- A3 Ultra and A4 ------------------------------------------------------------------------
# gib_group ROOTBUS NODE FIRST: a host bridge of its own (pciDDDD:ROOTBUS) whose root port
# leads to one PCIe switch holding two GPUs and two ConnectX-7 RoCE NICs side by side, on
# buses ROOTBUS+3 .. ROOTBUS+6. FIRST is the index of the first GPU and of the first NIC:
# HCAs mlx5_FIRST, mlx5_FIRST+1 with netdevs gpuFIRSTrdma0, gpuFIRST+1rdma0.
gib_group() {
    g_root=$(hex "$1")
    g_sw=pci0000:$g_root/0000:$g_root:00.0/0000:$(hex $(($1 + 1))):00.0
    g_dn=$(hex $(($1 + 2)))
    bridge "pci0000:$g_root/0000:$g_root:00.0" 0x8086 - "$2" 32.0 16
    bridge "$g_sw" 0x8086 - "$2" 32.0 16
    for g_port in 00 01 02 03; do
        bridge "$g_sw/0000:$g_dn:$g_port.0" 0x8086 - "$2" 32.0 16
    done
    gpu "$g_sw/0000:$g_dn:00.0/0000:$(hex $(($1 + 3))):00.0" "$2"
    gpu "$g_sw/0000:$g_dn:01.0/0000:$(hex $(($1 + 4))):00.0" "$2"
    for g_i in 0 1; do
        g_nic=$g_sw/0000:$g_dn:0$((g_i + 2)).0/0000:$(hex $(($1 + 5 + g_i))):00.0
        pci "$g_nic" 0x15b3 $CX7 0x020000 "$2" 32.0 16
        netdev "$g_nic" "gpu$(($3 + g_i))rdma0" 400000
        rdma "$g_nic" "mlx5_$(($3 + g_i))" '400 Gb/sec (4X NDR)' Ethernet
    done
}

# gib NAME DEVICE MODEL VBIOS: an A3 Ultra or A4 tree.
gib() {
    start "$1"
    numa 0 0-55,112-167
    numa 1 56-111,168-223
    gpu_kind "$2" "$3" "$4" 570.133.20
    # The two gVNICs (enp0s19 and enp192s20 on Google's Slurm images).
    pci pci0000:00/0000:00:13.0 0x1ae0 $GVNIC 0x020000 0 16.0 16
    netdev pci0000:00/0000:00:13.0 eth0 200000
    gib_group 0x8c 0 0
    gib_group 0x93 0 2
    pci pci0000:c0/0000:c0:14.0 0x1ae0 $GVNIC 0x020000 1 16.0 16
    netdev pci0000:c0/0000:c0:14.0 eth1 200000
    gib_group 0xc1 1 4
    gib_group 0xc8 1 6
    route eth0 10.128.0.1 10.128.0.0 255.255.240.0
}

gib a3-ultra $H200_SXM "NVIDIA H200" 96.00.A5.00.01
gib a4 $B200 "NVIDIA B200" 97.00.88.00.0F

# --- p5.48xlarge ---------------------------------------------------------------------------
# Eight host bridges 0x11 buses apart (pci0000:44, :55, ... :bb). Behind each, a root port
# and a switch whose downstream ports ROOT+2:01.0-01.3 hold four EFA devices (rdmap<bus>s0,
# RDMA only, no netdev) and port ROOT+2:01.4 the GPU: bus ROOT+0xb .. ROOT+0xf.
start p5
numa 0 0-47,96-143
numa 1 48-95,144-191
gpu_kind $H100_SXM "NVIDIA H100 80GB HBM3" 96.00.74.00.0D 550.90.07
pci pci0000:00/0000:00:05.0 0x1d0f $ENA 0x020000 0 16.0 8
netdev pci0000:00/0000:00:05.0 eth0 100000
k=0
while [ $k -lt 8 ]; do
    node=$((k / 4))
    root=$((0x44 + 0x11 * k))
    sw=pci0000:$(hex $root)/0000:$(hex $root):00.0/0000:$(hex $((root + 1))):00.0
    dn=$(hex $((root + 2)))
    bridge "pci0000:$(hex $root)/0000:$(hex $root):00.0" 0x1d0f - $node 16.0 16
    bridge "$sw" 0x1d0f - $node 16.0 16
    e=0
    while [ $e -lt 4 ]; do
        bus=$((root + 0xb + e))
        bridge "$sw/0000:$dn:01.$e" 0x1d0f 0x0200 $node 16.0 8
        pci "$sw/0000:$dn:01.$e/0000:$(hex $bus):00.0" 0x1d0f $EFA2 0x020000 $node 16.0 8
        rdma "$sw/0000:$dn:01.$e/0000:$(hex $bus):00.0" "rdmap${bus}s0" '100 Gb/sec (4X EDR)' Unknown
        e=$((e + 1))
    done
    bridge "$sw/0000:$dn:01.4" 0x1d0f 0x0200 $node 32.0 16
    gpu "$sw/0000:$dn:01.4/0000:$(hex $((root + 0xf))):00.0" $node
    k=$((k + 1))
done
route eth0 172.31.0.1 172.31.0.0 255.255.240.0

# --- Azure ND H100 v5 ----------------------------------------------------------------------
# Hyper-V gives every passed-through device its own PCI domain with one bus, whose host
# bridge hangs under a VMBus device: no bridge is shared, only NUMA nodes say what is near.
# The control NIC eth0 is a VMBus (netvsc) device, not PCI at all.
start nd-h100-v5
vmbus=LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00
numa 0 0-47
numa 1 48-95
gpu_kind $H100_SXM "NVIDIA H100 80GB HBM3" 96.00.99.00.01 550.90.07
mkdir -p "$r/devices/$vmbus/000d3a6c-4b2f-4e10-9a55-7c1e00000000"
put "$r/devices/$vmbus/000d3a6c-4b2f-4e10-9a55-7c1e00000000" numa_node 0
netdev "$vmbus/000d3a6c-4b2f-4e10-9a55-7c1e00000000" eth0 100000
k=0
for pair in 0001:0101:0 0002:0102:0 0003:0103:0 0008:0104:0 \
    0009:0105:1 000a:0106:1 000b:0107:1 000c:0108:1; do
    gdom=${pair%%:*}
    rest=${pair#*:}
    ndom=${rest%%:*}
    node=${rest#*:}
    gpu "$vmbus/47505500-$gdom-0000-3130-444531334632/pci$gdom:00/$gdom:00:00.0" "$node"
    nic=$vmbus/c0ffee00-$ndom-4000-8000-00000000000$k/pci$ndom:00/$ndom:00:00.0
    pci "$nic" 0x15b3 $CX7_VF 0x020700 "$node" 32.0 16
    netdev "$nic" "ib$k" 400000
    rdma "$nic" "mlx5_ib$k" '400 Gb/sec (4X NDR)' InfiniBand
    k=$((k + 1))
done
route eth0 10.0.0.1 10.0.0.0 255.255.255.0

# --- A flat VM ------------------------------------------------------------------------------
# Everything on the root bus pci0000:00, no switch, no NUMA information (numa_node -1): the
# PCI tree cannot tell which NIC is near which GPU. The control NIC is virtio-net, whose
# netdev hangs under virtio0, not under the PCI function, and whose speed is unknown (-1).
start flat-vm
numa 0 0-31
gpu_kind $H100_PCIE "NVIDIA H100 PCIe" 96.00.30.00.01 550.90.07
pci pci0000:00/0000:00:03.0 0x1af4 0x1000 0x020000 -1 - -
mkdir -p "$r/devices/pci0000:00/0000:00:03.0/virtio0"
netdev pci0000:00/0000:00:03.0/virtio0 ens3 -1
for slot in 04 05 06 07; do
    gpu "pci0000:00/0000:00:$slot.0" -1
done
for nic in 08:ens8:mlx5_0 09:ens9:mlx5_1; do
    slot=${nic%%:*}
    rest=${nic#*:}
    pci "pci0000:00/0000:00:$slot.0" 0x15b3 $CX6DX 0x020000 -1 16.0 16
    netdev "pci0000:00/0000:00:$slot.0" "${rest%%:*}" 100000
    rdma "pci0000:00/0000:00:$slot.0" "${rest#*:}" '100 Gb/sec (4X EDR)' Ethernet
done
route ens3 192.168.122.1 192.168.122.0 255.255.255.0

# --- gpu-box: the lent H200 host (recorded) -------------------------------------------------
# Recorded 2026-12-02 on the lent single-H200 VM (docs/results/gpu-box/call9/: /sys/class/net,
# /proc/net/route, /proc/driver/nvidia/gpus, nvidia-smi topo -m, NCCL's own topology dump):
# the H200 at 0000:00:06.0 and a virtio NIC at 0000:00:03.0 (eth0 under virtio2, the default
# route) both on pci0000:00, no switch, NUMA node -1; CPUs 0-15; eth0's sysfs speed reads -1.
start gpu-box
numa 0 0-15
gpu_kind $H200_SXM "NVIDIA H200" 96.00.99.00.01 570.00.00
pci pci0000:00/0000:00:03.0 0x1af4 0x1041 0x020000 -1 - -
mkdir -p "$r/devices/pci0000:00/0000:00:03.0/virtio2"
netdev pci0000:00/0000:00:03.0/virtio2 eth0 -1
gpu pci0000:00/0000:00:06.0 -1
route eth0 192.0.2.1 192.0.2.0 255.255.255.0

# --- NIC error counters (gpudirect health's nic_counters check) ---------------------------
# Each tree twice: as first read, and `-later` as read some minutes after, with some error
# counters risen. Only the NICs and their counters, under the paths Linux uses:
#   devices/<nic>/driver -> ../../../bus/pci/drivers/<driver>  (the PCI driver bound)
#   devices/<nic>/net/<if>/statistics/<counter>, carrier_changes, carrier_up_count, ...
#   devices/<nic>/infiniband/<hca>/ports/1/counters/<counter>, hw_counters/<counter>
# File names as the kernel makes them (include/linux/netdevice.h's rtnl_link_stats64 for
# statistics/, drivers/infiniband/core/sysfs.c for counters/, drivers/infiniband/hw/mlx5/
# counters.c for hw_counters/); values decimal, newline-terminated.

# counters DIR NAME=VALUE...: one file per counter.
counters() {
    ct_dir=$1
    shift
    mkdir -p "$ct_dir"
    for ct_pair in "$@"; do
        put "$ct_dir" "${ct_pair%%=*}" "${ct_pair#*=}"
    done
}

# driver DEVDIR NAME: the PCI driver bound to the function at devices/DEVDIR (a link up to
# the tree's root, one ../ per folder of devices/DEVDIR, as the kernel makes it).
driver() {
    mkdir -p "$r/bus/pci/drivers/$2"
    # Write-only in Linux, and empty here: git keeps no empty folder.
    : > "$r/bus/pci/drivers/$2/uevent"
    dr_up=../
    dr_rest=$1
    while [ -n "$dr_rest" ]; do
        dr_up=../$dr_up
        case $dr_rest in */*) dr_rest=${dr_rest#*/} ;; *) dr_rest= ;; esac
    done
    ln -sfn "${dr_up}bus/pci/drivers/$2" "$r/devices/$1/driver"
}

# netstats DEVDIR IFNAME RX_DROPPED TX_DROPPED RX_ERRORS RX_CRC CARRIER_CHANGES BYTES:
# IFNAME's statistics/ (every counter the kernel shows; those not given are 0) and its
# carrier counts (up + down = changes, the link came up first).
netstats() {
    ns_dir=$r/devices/$1/net/$2
    counters "$ns_dir/statistics" collisions=0 multicast=12 rx_bytes="$8" rx_compressed=0 \
        rx_crc_errors="$6" rx_dropped="$3" rx_errors="$5" rx_fifo_errors=0 rx_frame_errors=0 \
        rx_length_errors=0 rx_missed_errors=0 rx_nohandler=0 rx_over_errors=0 \
        rx_packets=$(($8 / 4096)) tx_aborted_errors=0 tx_bytes="$8" tx_carrier_errors=0 \
        tx_compressed=0 tx_dropped="$4" tx_errors=0 tx_fifo_errors=0 tx_heartbeat_errors=0 \
        tx_packets=$(($8 / 4096)) tx_window_errors=0
    counters "$ns_dir" carrier_changes="$7" carrier_up_count=$((($7 + 1) / 2)) \
        carrier_down_count=$(($7 / 2))
}

# portstats HCADIR SYMBOL LINK_DOWNED RCV_ERRORS XMIT_DISCARDS OUT_OF_SEQUENCE TIMEOUTS DATA:
# port 1's counters/ (the PortCounters attribute, each as wide as IBA says) and mlx5's
# hw_counters/ of a RoCE port.
portstats() {
    ps_dir=$1/ports/1
    counters "$ps_dir/counters" symbol_error="$2" link_error_recovery=0 link_downed="$3" \
        port_rcv_errors="$4" port_rcv_remote_physical_errors=0 port_rcv_switch_relay_errors=0 \
        port_xmit_discards="$5" port_xmit_constraint_errors=0 port_rcv_constraint_errors=0 \
        local_link_integrity_errors=0 excessive_buffer_overrun_errors=0 VL15_dropped=0 \
        port_xmit_data="$8" port_rcv_data="$8" port_xmit_packets=$(($8 / 1024)) \
        port_rcv_packets=$(($8 / 1024)) port_xmit_wait=1873 unicast_rcv_packets=$(($8 / 1024)) \
        unicast_xmit_packets=$(($8 / 1024)) multicast_rcv_packets=0 multicast_xmit_packets=0
    counters "$ps_dir/hw_counters" lifespan=10 duplicate_request=0 implied_nak_seq_err=0 \
        local_ack_timeout_err="$7" np_cnp_sent=2210 np_ecn_marked_roce_packets=2210 \
        out_of_buffer=0 out_of_sequence="$6" packet_seq_err=0 req_cqe_error=0 \
        req_cqe_flush_error=0 req_remote_access_errors=0 req_remote_invalid_request=0 \
        resp_cqe_error=0 resp_cqe_flush_error=0 resp_local_length_error=0 \
        resp_remote_access_errors=0 rnr_nak_retry_err=0 roce_adp_retrans=0 roce_adp_retrans_to=0 \
        roce_slow_restart=0 roce_slow_restart_cnps=0 roce_slow_restart_trans=0 \
        rp_cnp_handled=1984 rp_cnp_ignored=0 rx_atomic_requests=0 rx_dct_connect=0 \
        rx_icrc_encapsulated=0 rx_read_requests=1024 rx_write_requests=88412
}

# cx7_counters NAME LATER: two ConnectX-7 RoCE NICs of A3 Ultra (0000:91:00.0 and
# 0000:92:00.0, netdevs gpu0rdma0 and gpu1rdma0, HCAs mlx5_0 and mlx5_1, driver mlx5_core).
# LATER=1: five minutes on, gpu1rdma0's link went down and up (carrier_changes +2,
# link_downed +1), mlx5_1 saw 3 symbol errors, 40 discards, 12 packets out of order, and
# gpu0rdma0 only moved data.
cx7_counters() {
    start "$1"
    c_sw=pci0000:8c/0000:8c:00.0/0000:8d:00.0
    bridge pci0000:8c/0000:8c:00.0 0x8086 - 0 32.0 16
    bridge "$c_sw" 0x8086 - 0 32.0 16
    for c_i in 0 1; do
        c_nic=$c_sw/0000:8e:0$((c_i + 2)).0/0000:9$((c_i + 1)):00.0
        bridge "$c_sw/0000:8e:0$((c_i + 2)).0" 0x8086 - 0 32.0 16
        pci "$c_nic" 0x15b3 $CX7 0x020000 0 32.0 16
        driver "$c_nic" mlx5_core
        netdev "$c_nic" "gpu${c_i}rdma0" 400000
        rdma "$c_nic" "mlx5_$c_i" '400 Gb/sec (4X NDR)' Ethernet
    done
    c0=$r/devices/$c_sw/0000:8e:02.0/0000:91:00.0
    c1=$r/devices/$c_sw/0000:8e:03.0/0000:92:00.0
    if [ "$2" = 0 ]; then
        netstats "${c0#"$r"/devices/}" gpu0rdma0 0 0 0 0 2 81920000
        portstats "$c0/infiniband/mlx5_0" 0 0 0 17 0 0 9013456722
        netstats "${c1#"$r"/devices/}" gpu1rdma0 3 0 0 0 2 81920000
        portstats "$c1/infiniband/mlx5_1" 2 1 0 120 4 0 9013456722
    else
        netstats "${c0#"$r"/devices/}" gpu0rdma0 0 0 0 0 2 163840000
        portstats "$c0/infiniband/mlx5_0" 0 0 0 17 0 0 18026913444
        netstats "${c1#"$r"/devices/}" gpu1rdma0 3 0 0 0 4 163840000
        portstats "$c1/infiniband/mlx5_1" 5 2 0 160 16 0 18026913444
    fi
}

cx7_counters cx7-counters 0
cx7_counters cx7-counters-later 1

# gvnic_counters NAME LATER: A3 High's data gVNIC eth1 (0000:06:00.0, driver gve):
# Ethernet statistics only, no RDMA device. LATER=1: five minutes on, 5000 packets more
# dropped on receive and 3 on send; no error, no carrier change.
gvnic_counters() {
    start "$1"
    g_nic=pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:03.0/0000:06:00.0
    bridge pci0000:00/0000:00:01.0 0x8086 - 0 32.0 16
    bridge pci0000:00/0000:00:01.0/0000:01:00.0 0x8086 - 0 32.0 16
    bridge pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:03.0 0x8086 - 0 32.0 16
    pci "$g_nic" 0x1ae0 $GVNIC 0x020000 0 16.0 16
    driver "$g_nic" gve
    netdev "$g_nic" eth1 200000
    if [ "$2" = 0 ]; then
        netstats "$g_nic" eth1 118 0 0 0 1 409600000
    else
        netstats "$g_nic" eth1 5118 3 0 0 1 819200000
    fi
}

gvnic_counters gvnic-counters 0
gvnic_counters gvnic-counters-later 1
