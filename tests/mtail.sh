#!/usr/bin/env bash
# Checks hale's mtail program (rules/mtail/hale-kernel.mtail): it compiles, and
# run over the kernel log fixtures of tests/mtail/ it exports exactly the
# counters rules/kernel.yml, rules/gpu.yml and alerts/{kernel,gpu}.yml expect,
# with the expected labels and values, and nothing else.
#   kern.log        Xids and machine checks in the formats of dmesg, syslog,
#                   rsyslog RFC 3339, journalctl, dmesg -T and /dev/kmsg, mixed
#                   with lines that must count nothing
#   kern-fatal.log  two fatal machine checks: one with two reason lines and a
#                   panic (counts once), one panic without a reason line
#   kern-noise.log  only lines that must count nothing
# Installs mtail (Debian package) when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

. tests/install.sh
install_missing mtail=mtail

progs=rules/mtail
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

mtail --compile_only --progs "$progs" --logtostderr 2>"$tmp/compile.err" || {
    cat "$tmp/compile.err" >&2
    echo "mtail.sh: $progs does not compile" >&2
    exit 1
}

# check FIXTURE: runs mtail once over tests/mtail/FIXTURE and compares the hale_*
# series it exports with the expected ones on stdin, line for line.
check() {
    local fixture=tests/mtail/$1 name=$1 line
    # One-shot mode reads the whole file from its start, prints the metrics and
    # exits; it still opens its HTTP listener, so keep that local and on any port.
    mtail --one_shot --one_shot_format=prometheus --progs "$progs" --logs "$fixture" \
        --address 127.0.0.1 --port 0 --logtostderr >"$tmp/$name.out" 2>"$tmp/$name.err" || {
        cat "$tmp/$name.err" >&2
        echo "mtail.sh: mtail failed on $fixture" >&2
        fail=1
        return
    }
    if grep -E '^[EW][0-9]{4} ' "$tmp/$name.err" >&2; then
        echo "mtail.sh: $fixture: mtail logged errors or warnings (above)" >&2
        fail=1
    fi
    grep '^hale_' "$tmp/$name.out" | sort >"$tmp/$name.got" || true
    sort >"$tmp/$name.want"
    while IFS= read -r line; do
        grep -qxF -- "$line" "$tmp/$name.got" || {
            echo "mtail.sh: $fixture: missing: $line" >&2
            fail=1
        }
    done <"$tmp/$name.want"
    # Nothing else: no series the fixture should not have produced.
    while IFS= read -r line; do
        grep -qxF -- "$line" "$tmp/$name.want" || {
            echo "mtail.sh: $fixture: unexpected: $line" >&2
            fail=1
        }
    done <"$tmp/$name.got"
}

# Every Xid line of the kernel counts once by (pci_bus, xid) as the driver printed
# the address, 0000:d8:00 included though no "NVRM: GPU at" line names it. Not
# counted: the SXid of an NVSwitch, NVRM lines that are not Xids, and Xid lines
# quoted by other programs (gpu-health, sudo).
# Machine checks: bank 7 twice (each "events logged" line settled by the record
# after it), bank 1 once (a record whose announcement was rate-limited), bank 13
# from skx_edac's record line, bank 17 from AMD's decoder, bank 4 from the records
# printed before the fatal panic, and two "events logged" lines no record followed
# ("unknown"). Thermal lines count nothing. The fatal machine check counts once
# for its reason line, its panic line and the panic trailer.
check kern.log <<'EOF'
hale_kernel_gpu_xid_total{pci_bus="0000:3b:00",prog="hale-kernel.mtail",xid="79"} 1
hale_kernel_gpu_xid_total{pci_bus="0000:af:00",prog="hale-kernel.mtail",xid="13"} 2
hale_kernel_gpu_xid_total{pci_bus="0000:af:00",prog="hale-kernel.mtail",xid="48"} 1
hale_kernel_gpu_xid_total{pci_bus="0000:86:00",prog="hale-kernel.mtail",xid="31"} 1
hale_kernel_gpu_xid_total{pci_bus="0000:18:00",prog="hale-kernel.mtail",xid="94"} 1
hale_kernel_gpu_xid_total{pci_bus="0000:18:00",prog="hale-kernel.mtail",xid="63"} 1
hale_kernel_gpu_xid_total{pci_bus="0000:d8:00",prog="hale-kernel.mtail",xid="119"} 1
hale_kernel_machine_check_total{bank="7",prog="hale-kernel.mtail"} 2
hale_kernel_machine_check_total{bank="1",prog="hale-kernel.mtail"} 1
hale_kernel_machine_check_total{bank="13",prog="hale-kernel.mtail"} 1
hale_kernel_machine_check_total{bank="17",prog="hale-kernel.mtail"} 1
hale_kernel_machine_check_total{bank="4",prog="hale-kernel.mtail"} 1
hale_kernel_machine_check_total{bank="unknown",prog="hale-kernel.mtail"} 2
hale_kernel_machine_check_fatal_total{prog="hale-kernel.mtail"} 1
EOF

# Two reason lines and a panic are one fatal machine check; a panic with no
# reason line before it is another.
check kern-fatal.log <<'EOF'
hale_kernel_machine_check_total{bank="13",prog="hale-kernel.mtail"} 1
hale_kernel_machine_check_fatal_total{prog="hale-kernel.mtail"} 2
EOF

# Nothing counts: only the unlabelled fatal counter, exported at 0 from the start.
check kern-noise.log <<'EOF'
hale_kernel_machine_check_fatal_total{prog="hale-kernel.mtail"} 0
EOF

[ "$fail" -eq 0 ] || exit 1
echo "mtail.sh: $progs checked against $(find tests/mtail -name '*.log' | wc -l) fixtures"
