#!/bin/sh
# What a /metrics scrape of many tubes costs the protocol: `make bench`'s
# scenarios against two beanpoles that both hold TUBES extra tubes
# (watched by one idle connection), one of them scraped every PERIOD
# (0: back to back) while the benchmark runs. The report's ratio column is
# unscraped / scraped. FLAGS adds server flags to both (e.g.
# FLAGS="--metrics-max-tubes 10000" for a series per tube). Usage:
#   bench/scrape-cost.sh [TUBES] [PERIOD] [bench flags...]
#   bench/scrape-cost.sh 10000 1s -only roundtrip-c50,pipeline,pubsub -pin
set -eu
cd "$(dirname "$0")/.."
tubes=${1:-10000}
period=${2:-1s}
[ $# -ge 2 ] && shift 2 || shift $#
go build -o bin/beanpole .
go build -o bin/scrapeload ./bench/scrapeload
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for kind in quiet scraped; do
	every=-1s
	[ "$kind" = scraped ] && every=$period
	# The bench starts "beanpole -l 127.0.0.1 -p PORT ..." (perhaps under
	# taskset): the load runs beside it, off the server's CPU.
	cat >"$dir/$kind" <<SH
#!/bin/sh
[ "\$1" = -v ] && exec "$PWD/bin/beanpole" -v
port=\$4
http=127.0.0.1:\$((port + 1))
load="$PWD/bin/scrapeload -port \$port -http \$http -tubes $tubes -every $every"
if command -v taskset >/dev/null; then load="taskset -c 0 \$load"; fi
\$load 2>>"$dir/scrapes.log" &
exec "$PWD/bin/beanpole" --http \$http ${FLAGS:-} "\$@"
SH
	chmod +x "$dir/$kind"
done
status=0
go run ./bench -beanpole "$dir/quiet" -beanstalkd "$dir/scraped" -out "${OUT:-bench/results-scrape}" "$@" || status=$?
if [ -s "$dir/scrapes.log" ]; then
	grep '^scrape' "$dir/scrapes.log" | sort -n -k2 | awk '{ms[NR] = $2; b = $4} END {
		printf "%d scrapes of %d bytes during the runs: median %.1f ms, max %.1f ms\n", NR, b, ms[int((NR + 1) / 2)], ms[NR] }'
fi
exit $status
