#!/usr/bin/env bash
# Same-call A/B of kernel options on this tree (GPU machine): each "SPEC SHAPE" case is benched
# with every option set in turns (set 1, set 2, ..., repeated), each beside cuBLASLt in its own
# process, so the sets share the card's state.  Prints fused/cuBLAS per turn and the median
# over the first set's median.  Used to fit the plan's rules (src/plan.c).
#   bench/opts.sh "SPEC SHAPE" [more cases ...] -- "" "--schedule pingpong" "--schedule finisher"
# ("" is the default options).  Env: AB_REPS (turns, default 3), AB_ITERS (launches per bench).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
cases=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do cases+=("$1"); shift; done
if [ $# -lt 2 ] || [ ${#cases[@]} -eq 0 ]; then
    echo "usage: bench/opts.sh \"SPEC SHAPE\" ... -- OPTS1 OPTS2 ..." >&2
    exit 2
fi
shift
sets=("$@")
make -j"$(nproc)" all >/dev/null 2>&1 || { echo "opts: build failed" >&2; exit 1; }
export CF_CACHE_DIR=${CF_CACHE_DIR:-$(mktemp -d)}
for c in "${cases[@]}"; do   # NVRTC first, all at once, so the timed part loads cubins
    read -r spec shape <<<"$c"
    for o in "${sets[@]}"; do echo "build/comfuse compile --shape $shape $o $spec"; done
done | xargs -P "$(nproc)" -I{} sh -c '{} >/dev/null 2>&1'
# shellcheck source=bench/turns.sh
. bench/turns.sh
names=()
for o in "${sets[@]}"; do names+=("${o:-default}"); done
for c in "${cases[@]}"; do
    read -r spec shape <<<"$c"
    # shellcheck disable=SC2086
    variant_ratio() { bench_ratio build/comfuse "$spec" "$shape" ${sets[$1]}; }
    run_turns "$(printf "%-22s %-22s" "$(basename "$spec" .cf)" "$shape")" "${names[@]}"
done
