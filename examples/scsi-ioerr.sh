#!/bin/sh
# node_scsi_ioerr_total{device} for node_exporter's textfile collector: the SCSI
# mid-layer's I/O error count of each device since boot
# (/sys/block/<device>/device/ioerr_cnt, hexadecimal), read by the IoErrors
# alert (rules/disks.yml). NVMe and virtio devices have no such count: a host
# with none writes the file without a series, and IoErrorsUnavailable says the
# signal is not checked there. Run it every minute (a cron entry, a systemd
# timer) with node_exporter's --collector.textfile.directory:
#   * * * * * root /usr/local/bin/scsi-ioerr.sh /var/lib/node_exporter/textfile
# The file is replaced atomically, so node_exporter never reads half of it.
# SYSFS names another sysfs root (tests).
set -eu
dir=${1:?usage: scsi-ioerr.sh TEXTFILE_DIRECTORY}
out="$dir/scsi_ioerr.prom"
tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
{
    echo '# HELP node_scsi_ioerr_total I/O errors the SCSI mid-layer counted on the device since boot (ioerr_cnt).'
    echo '# TYPE node_scsi_ioerr_total counter'
    for count in "${SYSFS:-/sys}"/block/*/device/ioerr_cnt; do
        [ -r "$count" ] || continue
        device=${count%/device/ioerr_cnt}
        device=${device##*/}
        printf 'node_scsi_ioerr_total{device="%s"} %d\n' "$device" "$(cat "$count")"
    done
} >"$tmp"
chmod 0644 "$tmp"
mv "$tmp" "$out"
trap - EXIT
