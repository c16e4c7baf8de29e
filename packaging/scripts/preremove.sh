#!/bin/sh
# Lakeside package, before the files are removed.
#
# deb: $1 is remove, upgrade, deconfigure or failed-upgrade.
# rpm: $1 is 0 on erase, 1 or more on upgrade.
#
# On removal, stops and disables the service. An upgrade leaves it running:
# postinstall.sh restarts it with the new binary. Running it again changes
# nothing. systemctl is called only when systemd runs.
set -e

case "$1" in
remove | deconfigure | 0)
	if [ -d /run/systemd/system ]; then
		systemctl disable --now lakeside.service || true
	fi
	# An enablement made while systemd was not running (an image build).
	rm -f /etc/systemd/system/multi-user.target.wants/lakeside.service
	;;
esac
exit 0
