# shellcheck shell=bash
# scripts/bench-common.sh - sourced (not run) by scripts/bench-vs-llamacpp and
# scripts/bench-http: what every comparison with llama.cpp records and how it
# runs the peer.
#   - provenance: the strata commit and whether the tree is clean (a results
#     folder is refused from a dirty tree or a stale build/strata unless
#     --allow-dirty), the CPU (lscpu model name, SIMD flags, L3 size), and per
#     peer build its llama.cpp commit (scripts/peer-llamacpp records it);
#   - the peer's configurations: every build (native, avx2) x OMP_WAIT_POLICY
#     (unset, passive); each row of a comparison quotes the best of them;
#   - progress: which run of how many, and an estimate of the time left.
# Expects set -euo pipefail, the repository root as the current directory, and
# $bin (the strata binary) set by the caller.

# bench_lscpu FIELD: one field of lscpu ("Model name", "L3 cache")
bench_lscpu() { LC_ALL=C lscpu | sed -n "s/^$1: *//p" | head -1; }

# bench_simd: the SIMD flags of this CPU that matter for the kernels
bench_simd() {
  grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
    grep -E '^(sse4_2|avx|avx2|fma|f16c|avx512.*|avx_vnni|amx.*)$' | tr '\n' ' ' | sed 's/ $//'
}

# bench_git_state: sets strata_commit (full hash), strata_state (clean|dirty) and
# strata_dirty_files (the changed tracked files; untracked ones do not count:
# the results folder being written is one of them)
# shellcheck disable=SC2154 # bin: set by the script that sources this file
bench_git_state() {
  strata_commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  strata_dirty_files=$(git status --porcelain --untracked-files=no 2>/dev/null | sed 's/^...//' |
                         tr '\n' ' ' | sed 's/ $//' || true)
  strata_state=clean
  [ -z "$strata_dirty_files" ] || strata_state=dirty
  # a binary older than a tracked source was not built from this checkout
  strata_stale=
  local f
  while IFS= read -r f; do
    if [ -f "$f" ] && [ "$f" -nt "$bin" ]; then strata_stale+="$f "; fi
  done < <(git ls-files '*.c' '*.h' '*.cu' '*.cmake' 'CMakeLists.txt' '*/CMakeLists.txt' 2>/dev/null)
}

# bench_require_clean NAME ALLOW: refuse (exit 1) a dirty tree or a stale binary
# unless ALLOW is 1
bench_require_clean() {
  bench_git_state
  [ "$2" = 1 ] && return 0
  if [ "$strata_state" = dirty ]; then
    echo "$1: the tree has uncommitted changes ($strata_dirty_files): commit them," >&2
    echo "  or pass --allow-dirty (the results are then marked dirty)" >&2
    exit 1
  fi
  if [ -n "$strata_stale" ]; then
    echo "$1: $bin is older than $(wc -w <<<"$strata_stale") tracked sources (e.g." \
      "$(cut -d' ' -f1 <<<"$strata_stale")): rebuild it, or pass --allow-dirty" >&2
    exit 1
  fi
}

# bench_strata_line ALLOW: "strata: <commit> (clean|dirty: FILES...)" for machine.txt
# and summary.md; ALLOW 1 adds that --allow-dirty was given
bench_strata_line() {
  local s="strata: $strata_commit ($strata_state"
  [ "$strata_state" = clean ] || s+=": $strata_dirty_files"
  [ -z "$strata_stale" ] || s+="; $bin older than $(wc -w <<<"$strata_stale") tracked sources"
  [ "${1:-0}" = 0 ] || [ "$strata_state$strata_stale" = clean ] || s+="; --allow-dirty"
  echo "$s), binary $bin"
}

# bench_cpu_lines: the CPU as lscpu names it, its SIMD flags and L3 size
bench_cpu_lines() {
  echo "cpu: $(bench_lscpu 'Model name'), $(nproc) CPUs (family $(bench_lscpu 'CPU family')" \
    "model $(bench_lscpu Model))"
  echo "simd: $(bench_simd)"
  echo "l3: $(bench_lscpu 'L3 cache')"
}

# peer_setup BUILDS OMPS [NOBUILD]: BUILDS a comma list of native|avx2, OMPS of
# unset|passive.  Sets peer_cfgs (build/omp, every combination) and
# peer_bin[build] (the folder of the tools; STRATA_PEER_BIN_NATIVE /
# STRATA_PEER_BIN_AVX2 override the lookup of scripts/peer-bin: the prebuilt
# ../shared/peer, then the scripts/peer-llamacpp cache; when neither has it,
# scripts/peer-llamacpp builds it unless NOBUILD is 1: then it is only reported).
declare -gA peer_bin
peer_cfgs=() peer_builds_list=()
peer_setup() {
  local b o nb=()
  [ "${3:-0}" = 0 ] || nb=(--no-build)
  peer_cfgs=() peer_builds_list=()
  for b in ${1//,/ }; do
    peer_builds_list+=("$b")
    case $b in
      native | avx2) ;;
      *) echo "peer build must be native or avx2, not '$b'" >&2; exit 2 ;;
    esac
    if [ "$b" = native ] && [ -n "${STRATA_PEER_BIN_NATIVE:-}" ]; then
      peer_bin[$b]=$STRATA_PEER_BIN_NATIVE
    elif [ "$b" = avx2 ] && [ -n "${STRATA_PEER_BIN_AVX2:-}" ]; then
      peer_bin[$b]=$STRATA_PEER_BIN_AVX2
    elif ! peer_bin[$b]=$(scripts/peer-bin --cpu "$b" --where); then
      peer_bin[$b]=$(scripts/peer-llamacpp --cpu "$b" --print-dir "${nb[@]}") ||
        echo "peer build $b: not built (${peer_bin[$b]})" >&2
    fi
    for o in ${2//,/ }; do
      case $o in unset | passive) ;; *)
        echo "OMP_WAIT_POLICY setting must be unset or passive, not '$o'" >&2; exit 2 ;;
      esac
      peer_cfgs+=("$b/$o")
    done
  done
}

# peer_lines: per build its folder, llama-cpp-python version, llama.cpp commit,
# source hash and what the tools report
peer_lines() {
  local b d
  for b in "${peer_builds_list[@]}"; do
    d=${peer_bin[$b]}/..
    echo "llama.cpp $b build: ${peer_bin[$b]}"
    echo "  llama-cpp-python $(cat "$d/VERSION" 2>/dev/null || echo '?') sdist's vendor/llama.cpp"
    echo "  llama.cpp commit: $(cat "$d/LLAMA_CPP_COMMIT" 2>/dev/null || echo unknown)" \
      "(the sdist's .git/modules/vendor/llama.cpp/HEAD)"
    local h=unknown
    if [ -s "$d/SOURCE_SHA256" ]; then
      h=$(cat "$d/SOURCE_SHA256")
    elif [ -d "$d/src" ]; then # as scripts/peer-llamacpp computes it
      h=$(cd "$d/src" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum |
            sha256sum | cut -d' ' -f1)
    fi
    echo "  source tree sha256: $h (see scripts/peer-llamacpp)"
    echo "  cmake: $(head -1 "$d/BUILD_FLAGS" 2>/dev/null || echo '?')"
    if [ -x "${peer_bin[$b]}/llama-bench" ]; then
      "${peer_bin[$b]}/llama-bench" --version 2>&1 | head -2 | sed 's/^/  /' || true
    else
      echo "  (not built)"
    fi
  done
  echo "llama.cpp configurations: ${peer_cfgs[*]} (build/OMP_WAIT_POLICY; each row quotes the best)"
}

# peer_env CFG: the env(1) arguments of a configuration
peer_env() {
  case ${1#*/} in
    passive) echo "OMP_WAIT_POLICY=passive" ;;
    *) echo "-u OMP_WAIT_POLICY" ;;
  esac
}

# peer_tool CFG TOOL: the path of TOOL in CFG's build
peer_tool() { echo "${peer_bin[${1%/*}]}/$2"; }

# bench_rotate K ITEM...: the items rotated left by K (K-th item first), so that
# over as many alternations as items every side runs in every position
bench_rotate() {
  local k=$1; shift
  local n=$# i
  local a=("$@")
  for ((i = 0; i < n; i++)); do echo "${a[(i + k) % n]}"; done
}

# progress_init LABEL TOTAL / progress_step WHAT: "[LABEL i/N] WHAT, Xs elapsed,
# about Ys left" on stderr (the estimate: mean time per run so far x runs left)
progress_init() {
  progress_label=$1 progress_total=$2 progress_done=0 progress_t0=$(date +%s)
}
progress_step() {
  local now el left=""
  now=$(date +%s); el=$((now - progress_t0))
  progress_done=$((progress_done + 1))
  if [ "$progress_done" -gt 1 ]; then
    left=$((el * (progress_total - progress_done + 1) / (progress_done - 1)))
    left=", about $((left / 60))m$((left % 60))s left"
  fi
  printf '[%s %d/%d] %s (%dm%ds elapsed%s)\n' "$progress_label" "$progress_done" \
    "$progress_total" "$1" $((el / 60)) $((el % 60)) "$left" >&2
}
