#!/bin/sh
# Lakeside package, before the files are unpacked.
#
# deb: $1 is install, upgrade or abort-upgrade.
# rpm: $1 is 1 on install, 2 or more on upgrade.
#
# Creates the lakeside system user and group first, so that the configuration
# file is unpacked with its group. Running it again changes nothing.
set -e

# create_user creates the lakeside system user and group unless the user
# exists: with systemd-sysusers, from the entry also installed as
# /usr/lib/sysusers.d/lakeside.conf, or with useradd where systemd-sysusers is
# missing or fails. (The same function is in postinstall.sh.)
create_user() {
	if getent passwd lakeside >/dev/null; then
		return 0
	fi
	if command -v systemd-sysusers >/dev/null 2>&1 &&
		systemd-sysusers --replace=/usr/lib/sysusers.d/lakeside.conf --inline \
			'u lakeside - "Lakeside change capture agent" /var/lib/lakeside /usr/sbin/nologin' &&
		getent passwd lakeside >/dev/null; then
		return 0
	fi
	if getent group lakeside >/dev/null; then
		set -- --gid lakeside
	else
		set -- --user-group
	fi
	useradd --system "$@" --home-dir /var/lib/lakeside --no-create-home \
		--shell /usr/sbin/nologin --comment "Lakeside change capture agent" lakeside
}

case "$1" in
install | upgrade | [0-9]*)
	create_user
	;;
esac
exit 0
