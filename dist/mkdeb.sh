#!/bin/sh
# make deb: build beanpole_VERSION_ARCH.deb into OUTDIR with dpkg-deb,
# Debian's own packager: the binary, the systemd units, /etc/default/beanpole
# (a conffile), the man page, the docs, the licenses, and maintainer scripts
# that create the beanpole system user and /var/lib/beanpole and restart a
# running service on upgrade. It conflicts with nothing: every file is
# beanpole's own, so beanstalkd can stay installed beside it. lintian has
# nothing to say about it.
#
#   dist/mkdeb.sh OUTDIR
#
# It builds the binary itself, as Debian builds its Go packages: a
# position-independent executable (-buildmode=pie), linked by the system's
# linker with full RELRO and immediate binding (-z relro -z now), without
# symbol tables or DWARF (-s -w). It needs go (GO names another), gcc and
# dpkg-shlibdeps (Debian's dpkg-dev), which derives the dependency on libc
# from the binary. BEANPOLE_DEB_VERSION overrides the version
# (config/version.go's by default).
set -eu
out=$1
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
GO=${GO:-go}
version=${BEANPOLE_DEB_VERSION:-$(sed -n 's/^const Version = "\(.*\)"$/\1/p' "$top/config/version.go")}
arch=$(dpkg --print-architecture)
# Whoever builds the package maintains it: DEBFULLNAME and DEBEMAIL (or
# EMAIL) name them; example.org is the placeholder RFC 2606 reserves.
maintainer="${DEBFULLNAME:-beanpole builder} <${DEBEMAIL:-${EMAIL:-beanpole@example.org}}>"
# The changelog's date: the last commit's, so that two builds of one tree
# make the same package.
when=${SOURCE_DATE_EPOCH:-$(git -C "$top" log -1 --format=%ct 2>/dev/null || date +%s)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage=$work/stage
mkdir -m 0755 "$stage"

(cd "$top" && CGO_ENABLED=1 "$GO" build -trimpath -buildmode=pie \
	-ldflags='-s -w -linkmode=external -extldflags=-Wl,-z,relro,-z,now' \
	-o "$work/beanpole" .)
# The linker's .comment (compiler versions) is not needed at run time.
strip --remove-section=.comment "$work/beanpole"
install -D -m 0755 "$work/beanpole" "$stage/usr/bin/beanpole"
install -D -m 0644 "$here/beanpole.service" "$stage/lib/systemd/system/beanpole.service"
install -D -m 0644 "$here/beanpole.socket" "$stage/lib/systemd/system/beanpole.socket"
install -D -m 0644 "$here/beanpole.default" "$stage/etc/default/beanpole"
install -d -m 0755 "$stage/usr/share/man/man1" "$stage/usr/share/doc/beanpole/docs"
gzip -9n < "$here/beanpole.1" > "$stage/usr/share/man/man1/beanpole.1.gz"
chmod 0644 "$stage/usr/share/man/man1/beanpole.1.gz"
# README.md and docs/ keep their places relative to each other, so that
# README.md's and the man page's docs/NAME.md are where they say.
install -m 0644 "$top/README.md" "$here/debian/README.Debian" "$stage/usr/share/doc/beanpole/"
install -m 0644 "$top"/docs/*.md "$stage/usr/share/doc/beanpole/docs/"
# The operator's kit: Grafana's dashboard and Prometheus's alerting rules.
install -D -m 0644 "$here/beanpole-dashboard.json" "$stage/usr/share/beanpole/beanpole-dashboard.json"
install -D -m 0644 "$here/beanpole-alerts.yml" "$stage/usr/share/beanpole/beanpole-alerts.yml"

# The changelog of a native package (its version has no Debian revision).
{
	printf 'beanpole (%s) unstable; urgency=medium\n\n' "$version"
	printf '  * beanpole %s, built from its own source tree.\n\n' "$version"
	printf ' -- %s  %s\n' "$maintainer" "$(LC_ALL=C date -u -R -d "@$when")"
} | gzip -9n > "$stage/usr/share/doc/beanpole/changelog.gz"
chmod 0644 "$stage/usr/share/doc/beanpole/changelog.gz"

# The copyright file: the binary is statically linked with the Go standard
# library and the Go modules it lists, whose licenses want their text
# shipped with it; each is copied from the module as built.
modcache=$("$GO" env GOMODCACHE)
{
	cat "$here/debian/copyright.head"
	printf '\n==> the Go standard library (%s) <==\n\n' "$("$GO" env GOVERSION)"
	cat "$("$GO" env GOROOT)/LICENSE"
	"$GO" version -m "$work/beanpole" | awk '
		$1 == "dep" { mod = $2; ver = $3; dir = "" }
		$1 == "=>" { dir = $2 }
		$1 == "dep" || $1 == "=>" { print mod, ver, dir }' |
		awk '{ last[$1] = $0; order[NR] = $1 } END { for (i = 1; i <= NR; i++) if (!seen[order[i]]++) print last[order[i]] }' |
		while read -r mod ver dir; do
			if [ -n "$dir" ]; then
				dir=$top/${dir#./}
			else
				# The module cache spells capitals as !lower.
				dir=$modcache/$(printf '%s@%s' "$mod" "$ver" | sed 's/[A-Z]/!&/g' | tr 'A-Z' 'a-z')
			fi
			lic=$(ls "$dir"/LICENSE* "$dir"/LICENCE* "$dir"/COPYING* 2>/dev/null | head -1 || true)
			if [ -z "$lic" ]; then
				echo "mkdeb.sh: no license file for $mod $ver in $dir (go mod download?)" >&2
				exit 1
			fi
			printf '\n==> %s %s <==\n\n' "$mod" "$ver"
			if grep -q 'Apache License' "$lic" && grep -q 'Version 2.0, January 2004' "$lic"; then
				# Debian ships its text: the copyright lines and the
				# NOTICE the license wants passed on are the module's own.
				grep -i '^ *copyright.*[0-9]' "$lic" | grep -v 'yyyy' || true
				printf 'Licensed under the Apache License, Version 2.0:
/usr/share/common-licenses/Apache-2.0.
'
			else
				cat "$lic"
			fi
			if [ -f "$dir/NOTICE" ]; then
				printf '\nNOTICE:\n\n'
				cat "$dir/NOTICE"
			fi
		done
} > "$stage/usr/share/doc/beanpole/copyright"
chmod 0644 "$stage/usr/share/doc/beanpole/copyright"

install -d -m 0755 "$stage/DEBIAN"
for s in postinst prerm postrm; do
	install -m 0755 "$here/debian/$s" "$stage/DEBIAN/$s"
done
echo /etc/default/beanpole > "$stage/DEBIAN/conffiles"
(cd "$stage" && find usr lib -type f | LC_ALL=C sort | xargs md5sum > DEBIAN/md5sums)
chmod 0644 "$stage/DEBIAN/md5sums" "$stage/DEBIAN/conffiles"

# The shared libraries the binary needs (libc, for cgo's resolver and the
# external linker's start-up code), as dpkg-shlibdeps names their packages.
mkdir "$work/debian"
printf 'Source: beanpole\n\nPackage: beanpole\nArchitecture: any\n' > "$work/debian/control"
shlibs=$(cd "$work" && dpkg-shlibdeps -O "$stage/usr/bin/beanpole" | sed -n 's/^shlibs:Depends=//p')
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat > "$stage/DEBIAN/control" <<CONTROL
Package: beanpole
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $size
Depends: adduser, $shlibs
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
