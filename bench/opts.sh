#!/usr/bin/env bash
# Same-call A/B of kernel options on this tree (GPU machine): each "SPEC SHAPE" case is benched
# with every option set in turns (set 1, set 2, ..., repeated), each beside cuBLASLt in its own
# process, so the sets share the card's state.  Prints fused/cuBLAS per turn and the median
# over the first set's median.  Used to fit cf_options_for's rules.
#   bench/opts.sh "SPEC SHAPE" [more cases ...] -- "" "--schedule pingpong" "--schedule finisher"
# ("" is the default options).  Env: AB_REPS (turns, default 3), AB_ITERS (launches per bench).
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
cases=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do cases+=("$1"); shift; done
[ $# -gt 1 ] && [ ${#cases[@]} -gt 0 ] || { echo "usage: bench/opts.sh \"SPEC SHAPE\" ... -- OPTS1 OPTS2 ..." >&2; exit 2; }
shift
sets=("$@")
make -j"$(nproc)" all >/dev/null 2>&1 || { echo "opts: build failed" >&2; exit 1; }
export CF_CACHE_DIR=${CF_CACHE_DIR:-$(mktemp -d)}
for c in "${cases[@]}"; do   # NVRTC first, all at once, so the timed part loads cubins
    read -r spec shape <<<"$c"
    for o in "${sets[@]}"; do echo "build/comfuse compile --shape $shape $o $spec"; done
done | xargs -P "$(nproc)" -I{} sh -c '{} >/dev/null 2>&1'
ratio() {   # spec shape opts...
    local spec=$1 shape=$2
    shift 2
    timeout 40 build/comfuse bench --iters "${AB_ITERS:-100}" --shape "$shape" "$@" "$spec" 2>&1 |
        awk -F'\t' '/^BENCH/ { printf "%.3f", $8; found = 1 } END { if (!found) printf "err" }'
}
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
for c in "${cases[@]}"; do
    read -r spec shape <<<"$c"
    got=()
    for ((i = 0; i < ${AB_REPS:-3}; i++)); do
        for ((j = 0; j < ${#sets[@]}; j++)); do
            # shellcheck disable=SC2086
            got[$j]+="$(ratio "$spec" "$shape" ${sets[$j]}) "
        done
    done
    line=$(printf "%-22s %-22s" "$(basename "$spec" .cf)" "$shape")
    # shellcheck disable=SC2086
    m0=$(median ${got[0]})
    for ((j = 0; j < ${#sets[@]}; j++)); do
        # shellcheck disable=SC2086
        m=$(median ${got[$j]})
        line+=$(printf " | %s: %s[%s]" "${sets[$j]:-default}" "${got[$j]}" \
            "$(awk -v x="$m0" -v y="$m" 'BEGIN { if (x + 0 > 0 && y + 0 > 0) printf "%.3f", y / x; else print "-" }')")
    done
    echo "$line"
done
