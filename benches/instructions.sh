#!/bin/sh
# Instructions (callgrind), peak RSS and minor page faults of one receive-pack run per binary,
# on the request `berth bench many-refs` generates: deterministic where wall time is not (a
# loaded machine). Needs valgrind and GNU time.
#
#   benches/instructions.sh REFS files|reftable BERTH [BERTH...]
#
# The first BERTH also generates the request; every binary runs on a fresh copy of the same
# target repository. Prints "<binary> <instructions> <peak RSS KiB> <minor faults>".
set -e
refs=$1 format=$2; shift 2
dir=$(mktemp -d "${TMPDIR:-/tmp}/berth-instr-XXXXXX")
trap 'rm -rf "$dir"' EXIT
cat > "$dir/capture" <<EOS
#!/bin/sh
# As a bench receiver: keep the first request and the target it ran on, then receive.
if [ ! -e "$dir/req" ]; then cp -a "\$2" "$dir/pristine"; cat > "$dir/req"; fi
exec "$1" receive-pack "\$@" < "$dir/req"
EOS
chmod +x "$dir/capture"
"$1" bench many-refs --refs "$refs" --runs 1 --no-floor --ref-format "$format" \
	--receiver "$dir/capture" --workdir "$dir" > /dev/null 2>&1
for b in "$@"; do
	rm -rf "$dir/t"; cp -a "$dir/pristine" "$dir/t"
	n=$(GIT_CONFIG_NOSYSTEM=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
		"$b" receive-pack --stateless-rpc "$dir/t" < "$dir/req" 2>&1 > /dev/null |
		sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
	rm -rf "$dir/t"; cp -a "$dir/pristine" "$dir/t"
	m=$(GIT_CONFIG_NOSYSTEM=1 /usr/bin/time -f "%M %R" \
		"$b" receive-pack --stateless-rpc "$dir/t" < "$dir/req" 2>&1 > /dev/null | tail -1)
	echo "$b $n $m"
done
