# shellcheck shell=bash
# Sourced by bench/ab.sh and bench/opts.sh: variants of one case timed in turns.
#   bench_ratio BIN SPEC SHAPE [options]   fused/cuBLAS of one `comfuse bench` (or "err")
#   run_turns LABEL NAME...                 AB_REPS turns (default 3) over the variants, variant j's
#                                           ratio from the caller's `variant_ratio j`; prints one line:
#                                           each variant's ratios and its median over the first's
#   time_trees CASE...                      run_turns over the caller's `trees` (builds) and `names`
bench_ratio() {
    local bin=$1 spec=$2 shape=$3
    shift 3
    timeout 40 "$bin" bench --iters "${AB_ITERS:-100}" --shape "$shape" "$@" "$spec" 2>&1 |
        awk -F'\t' '/^BENCH/ { printf "%.3f", $8; found = 1 } END { if (!found) printf "err" }'
}
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
run_turns() {
    local line=$1 got=() i j m m0
    shift
    local names=("$@")
    for ((i = 0; i < ${AB_REPS:-3}; i++)); do
        for ((j = 0; j < ${#names[@]}; j++)); do got[j]+="$(variant_ratio "$j") "; done
    done
    # shellcheck disable=SC2086
    m0=$(median ${got[0]})
    for ((j = 0; j < ${#names[@]}; j++)); do
        # shellcheck disable=SC2086
        m=$(median ${got[$j]})
        line+=$(printf " | %s: %s[%s]" "${names[$j]}" "${got[$j]}" \
            "$(awk -v x="$m0" -v y="$m" 'BEGIN { if (x + 0 > 0 && y + 0 > 0) printf "%.3f", y / x; else print "-" }')")
    done
    echo "$line"
}
# time_trees "SPEC SHAPE [options]" ...: the caller's builds `trees` (their `names`) in turns, each
# case a line; every kernel NVRTC-compiled first, all at once, so the timed part loads cubins.
# shellcheck disable=SC2154
time_trees() {
    local c d spec shape opts
    export CF_CACHE_DIR=${CF_CACHE_DIR:-$(mktemp -d)}
    for c in "$@"; do
        read -r spec shape opts <<<"$c"
        for d in "${trees[@]}"; do echo "$d/build/comfuse compile --shape $shape $opts $spec"; done
    done | xargs -P "$(nproc)" -I{} sh -c '{} >/dev/null 2>&1'
    for c in "$@"; do
        read -r spec shape opts <<<"$c"
        # shellcheck disable=SC2086
        variant_ratio() { bench_ratio "${trees[$1]}/build/comfuse" "$spec" "$shape" $opts; }
        run_turns "$(printf "%-36s %-22s" "$(basename "$spec") $opts" "$shape")" "${names[@]}"
    done
}
