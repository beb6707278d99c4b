#!/bin/sh
# Rebuild or check third_party/gnet: upstream gnet from the Go module cache plus
# third_party/gnet.patch (see third_party/PATCHES.md).
#
#   third_party/gnet-patch.sh apply [VERSION]  replace third_party/gnet with upstream VERSION
#                                              plus gnet.patch; on any conflict, report it
#                                              and leave the tree alone
#   third_party/gnet-patch.sh check [VERSION]  exit 0 if third_party/gnet equals upstream
#                                              VERSION plus gnet.patch, else show the difference
#   third_party/gnet-patch.sh diff [VERSION]   rewrite gnet.patch as the diff from upstream
#                                              VERSION to third_party/gnet
#
# VERSION defaults to BASE, the release the tree is built on. Needs go, diff and patch.
set -eu

BASE=v2.10.0
MOD=github.com/panjf2000/gnet/v2

here=$(cd "$(dirname "$0")" && pwd)
tree=$here/gnet
patchfile=$here/gnet.patch
export LC_ALL=C TZ=UTC

work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

# upstream VERSION: copy $MOD@VERSION from the module cache (downloading it if
# needed) to $work/a, writable.
upstream() {
	json=$(cd "$work" && go mod download -json "$MOD@$1") || {
		echo "$json" >&2
		echo "gnet-patch: cannot download $MOD@$1" >&2
		exit 1
	}
	dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
	[ -n "$dir" ] && [ -d "$dir" ] || {
		echo "gnet-patch: no module directory for $MOD@$1" >&2
		exit 1
	}
	cp -R "$dir" "$work/a"
	chmod -R u+w "$work/a"
}

# patched VERSION: upstream VERSION plus gnet.patch in $work/a; exit 1 on conflicts.
patched() {
	upstream "$1"
	if ! out=$(cd "$work/a" && patch -p1 -N --dry-run <"$patchfile" 2>&1); then
		echo "gnet-patch: gnet.patch does not apply to $MOD@$1; conflicts:" >&2
		printf '%s\n' "$out" | awk '/^(checking|patching) file /{f=$3; next}
			!/^Hunk #[0-9]+ succeeded/{print "  " f ": " $0}' >&2
		echo "gnet-patch: third_party/gnet is unchanged. To resolve by hand: copy $dir" >&2
		echo "  to a writable directory, run patch -p1 <third_party/gnet.patch there, fix the" >&2
		echo "  *.rej hunks, move the result to third_party/gnet, then run: $0 diff $1" >&2
		exit 1
	fi
	(cd "$work/a" && patch -p1 -N --no-backup-if-mismatch <"$patchfile") | grep -Ei 'fuzz|offset' >&2 &&
		echo "gnet-patch: applied with offsets or fuzz: review those hunks, then run diff" >&2
	return 0
}

cmd=${1:-}
ver=${2:-$BASE}
case $cmd in
apply)
	patched "$ver"
	rm -rf "$tree"
	mv "$work/a" "$tree"
	echo "gnet-patch: third_party/gnet is now $MOD@$ver plus gnet.patch"
	echo "next: go build ./... && (cd third_party/gnet && go vet ./... && go test -race -run Patch .)"
	;;
check)
	patched "$ver"
	if diff -rq "$work/a" "$tree"; then
		echo "gnet-patch: third_party/gnet is $MOD@$ver plus gnet.patch"
	else
		echo "gnet-patch: third_party/gnet differs from $MOD@$ver plus gnet.patch" >&2
		exit 1
	fi
	;;
diff)
	upstream "$ver"
	cp -R "$tree" "$work/b"
	# Relative a/ b/ paths, no timestamps, /dev/null for new files: fit for patch -p1 and git apply.
	(cd "$work" && diff -ruN a b || [ $? -eq 1 ]) |
		sed -E -e 's#^--- a/[^	]*	1970-01-01 .*#--- /dev/null#' \
			-e 's#^(\+\+\+ b/[^	]*)	1970-01-01 .*#+++ /dev/null#' \
			-e 's#^((---|\+\+\+) [^	]+)	.*$#\1#' >"$patchfile.tmp"
	mv "$patchfile.tmp" "$patchfile"
	echo "gnet-patch: wrote gnet.patch ($(wc -l <"$patchfile") lines) against $MOD@$ver"
	;;
*)
	sed -n '2,15s/^# \{0,1\}//p' "$0" >&2
	exit 2
	;;
esac
