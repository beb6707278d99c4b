#!/bin/sh
# make deb: build beanpole_VERSION_ARCH.deb into bin/ with dpkg-deb, Debian's
# own packager: the binary, the systemd units, /etc/default/beanpole (a
# conffile), the man page and the docs, and maintainer scripts that create
# the beanpole system user and /var/lib/beanpole. It conflicts with nothing:
# every file is beanpole's own, so beanstalkd can stay installed beside it.
#
#   dist/mkdeb.sh BINARY OUTDIR
set -eu
bin=$1
out=$2
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
version=$(sed -n 's/^const Version = "\(.*\)"$/\1/p' "$top/config/version.go")
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
chmod 0755 "$stage"

install -D -m 0755 "$bin" "$stage/usr/bin/beanpole"
install -D -m 0644 "$here/beanpole.service" "$stage/lib/systemd/system/beanpole.service"
install -D -m 0644 "$here/beanpole.socket" "$stage/lib/systemd/system/beanpole.socket"
install -D -m 0644 "$here/beanpole.default" "$stage/etc/default/beanpole"
install -d -m 0755 "$stage/usr/share/man/man1" "$stage/usr/share/doc/beanpole"
gzip -9n < "$here/beanpole.1" > "$stage/usr/share/man/man1/beanpole.1.gz"
chmod 0644 "$stage/usr/share/man/man1/beanpole.1.gz"
for f in README.md docs/durability.md docs/behaviour.md docs/operating.md; do
	install -m 0644 "$top/$f" "$stage/usr/share/doc/beanpole/"
done

install -d -m 0755 "$stage/DEBIAN"
for s in postinst prerm postrm; do
	install -m 0755 "$here/debian/$s" "$stage/DEBIAN/$s"
done
echo /etc/default/beanpole > "$stage/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat > "$stage/DEBIAN/control" <<CONTROL
Package: beanpole
Version: $version
Architecture: $arch
Maintainer: beanpole developers <beanpole@localhost>
Installed-Size: $size
Depends: adduser
Section: net
Priority: optional
Description: drop-in replacement for the beanstalkd work-queue server
 beanpole speaks the beanstalk protocol with beanstalkd's flags and stats,
 keeps jobs in a checksummed write-ahead log with -b, imports beanstalkd's
 own binlog, and serves Prometheus metrics. It installs beside beanstalkd
 without conflict and is not started until enabled.
CONTROL
mkdir -p "$out"
dpkg-deb --root-owner-group -Zgzip --build "$stage" "$out/beanpole_${version}_${arch}.deb" >/dev/null
echo "$out/beanpole_${version}_${arch}.deb"
